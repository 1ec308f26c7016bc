"""Noise stage (off by default): FLAME's Gaussian noise on the aggregate, scaled by the round's median norm.

    a' = a + λ · m · z,    z ~ N(0, I_d) drawn from ``ctx.generator``,    m = median_j ‖x_j‖₂

where
    - a is the ``(d,)`` aggregate, x_1, …, x_n the round's raw rows (own included; norms on the full vector);
    - λ ≥ 0 is the noise level (``noise`` of the semantic guard; 0 = stage off, a returned unchanged).

FLAME (Nguyen et al. 2022) defends against backdoors in three steps: HDBSCAN clustering of the updates on
their cosine distances (admit the majority cluster), clipping every update to the median norm S, and
Gaussian noise σ = λ·S on the aggregated model (λ = 0.001 for image classification in the paper). Here,
without a server, the noise is the receiver's own choice each round: each peer draws it from its private
round generator, so honest peers add independent noise. With the semantic guard, FLAME's clipping is the
magnitude stage at ``c_clip = 1`` and its noise this stage; the clustering was measured as a prototype
(``docs/scripts/backdoor_cells.py``, ``+hdbscan``).

Measured on digits (10 peers, 3 ``backdoor``, Dirichlet 0.5, 12 rounds, seeds 0-2; table in
``docs/scripts/backdoor_cells.py``): the backdoor rows' norms are 0.90-0.99 × the median, so the clipping
never binds, and noise large enough to dent the attack success rate (λ = 0.01: ASR 0.46-0.78 instead of
0.85-0.97) costs 15-21 points of clean accuracy, because the aggregate's noise enters the outer momentum
every round. Hence off by default.

References:
    Thien Duc Nguyen, Phillip Rieger, Huili Chen, Hossein Yalame, Helen Möllering, Hossein Fereidooni,
    Samuel Marchal, Markus Miettinen, Azalia Mirhoseini, Shaza Zeitouni, Farinaz Koushanfar, Ahmad-Reza
    Sadeghi, Thomas Schneider. FLAME: Taming Backdoors in Federated Learning. USENIX Security 2022.
    arXiv:2101.02281.
"""

from __future__ import annotations

import torch

from p2p_guard.guard.base import check_real

__all__ = ["add_noise"]


def add_noise(aggregate: torch.Tensor, median_norm: float, level: float, generator: torch.Generator) -> torch.Tensor:
    """Return ``aggregate + level · median_norm · z`` with z ~ N(0, I) from ``generator``.

    Args:
        aggregate: ``(d,)`` float tensor; not mutated.
        median_norm: m, the median Euclidean norm of the round's rows, ``>= 0``.
        level: λ, ``>= 0``; with ``level == 0`` (or ``median_norm == 0``) the aggregate is returned as it is
            and the generator is not advanced.
        generator: the source of z (a CPU generator; z is drawn in float32 on the CPU, then moved to the
            aggregate's device and dtype, so the draw does not depend on the device).

    Returns:
        ``(d,)`` tensor of the dtype and device of ``aggregate``.

    Raises:
        ValueError: on a negative or non-finite ``level`` or ``median_norm``.
    """
    check_real("level", level, minimum=0.0, inclusive=True)
    check_real("median_norm", median_norm, minimum=0.0, inclusive=True)
    sigma = level * median_norm
    if sigma == 0.0:
        return aggregate
    z = torch.randn(aggregate.shape, generator=generator, dtype=torch.float32)
    return aggregate + (sigma * z).to(device=aggregate.device, dtype=aggregate.dtype)
