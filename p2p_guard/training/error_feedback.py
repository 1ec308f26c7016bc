"""Error feedback on the sender: what a lossy codec did not send this round is sent in a later one.

With e_0 = 0, pseudo-gradient Δ_r, decay β ∈ [0, 1] and codec (encode C, decode D)::

    a_r     = β · e_r + Δ_r      what we would like to send (the accumulator)
    p_r     = C(a_r)             the payload (bytes)
    ŝ_r     = D(p_r)             what every receiver decodes
    e_{r+1} = a_r − ŝ_r          the residual, carried over

With β = 1 (plain error feedback, the default of ``fp16``, ``int8`` and ``int4``) Σ_{r<R} ŝ_r + e_R = Σ_{r<R} Δ_r
(up to float32 rounding of the additions): nothing is lost, only delayed. With β < 1 (SparseLoCo, the default of
``topk``: :data:`TOPK_EF_DECAY`) an unsent value fades by β per round, so e_R = Σ_{r<R} β^{R−1−r} (Δ_r − ŝ_r) and
a value never sent weighs at most 1 / (1 − β) times a round's Δ: the accumulator is a momentum of the
pseudo-gradients whose top-k part is sent each round, and it replaces DiLoCo's outer momentum (the receiver then
steps θ ← θ − α · aggregate without momentum: ``training.outer.outer_defaults``). For the lossless ``fp32`` the
residual stays 0, β plays no part, and the payload is ``encode_update(Δ_r, "fp32")``.

The residual is part of the peer's state: put :meth:`ErrorFeedback.state_dict` into the checkpoint, and a
restarted peer resumes with :meth:`ErrorFeedback.load_state_dict`. β is configuration (``PeerConfig.ef_decay``),
not state.

References:
    Seide et al., "1-Bit Stochastic Gradient Descent and its Application to Data-Parallel Distributed Training
    of Speech DNNs", Interspeech 2014 (error feedback). Karimireddy et al., "Error Feedback Fixes SignSGD
    and other Gradient Compression Schemes", ICML 2019, arXiv:1901.09847. Sarfi, Thérien, Lidin, Belilovsky,
    "Communication Efficient LLM Pre-training with SparseLoCo", arXiv:2508.15706, 2025 (error feedback with
    decay β in place of the outer momentum, chunk-wise top-k, 2-bit values; β = 0.95 in the paper).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import torch

from p2p_guard.protocol.codecs import codec_spec, decode_update, encode_update, expected_payload_bytes
from p2p_guard.protocol.reasons import Rejected

__all__ = ["TOPK_EF_DECAY", "ErrorFeedback", "check_ef_decay", "default_ef_decay"]

logger = logging.getLogger(__name__)

TOPK_EF_DECAY = 0.95
"""β of the ``topk`` codecs' error feedback (SparseLoCo, Sarfi et al., arXiv:2508.15706: 0.95). Measured with
``p2p-guard bench wire`` over β ∈ {0.9, 0.95, 1} (no outer momentum, α ∈ {0.7, 1, 2, 3}, topk 1/2/5 %, seeds 0 and
1): at α = 2, 0.95 beat 0.9 and 1 at every density, in quality and in the guard's worst case (mean of the two
seeds); at α ≤ 1 the three were mixed (``training.outer.TOPK_OUTER_LR``)."""


def default_ef_decay(codec: str) -> float:
    """β a codec's error feedback uses unless configured: :data:`TOPK_EF_DECAY` for ``topk``, else 1.

    1 is plain error feedback (nothing lost), as ``fp16``, ``int8`` and ``int4`` have always used; ``fp32`` keeps
    no residual, so its β does not matter.

    Raises:
        ValueError: Unknown or malformed codec string.
    """
    return TOPK_EF_DECAY if codec_spec(codec).name == "topk" else 1.0


def check_ef_decay(decay: object) -> float:
    """``decay`` as a float when it is a number in [0, 1].

    Raises:
        ValueError: Otherwise (a bool, NaN, out of range).
    """
    if isinstance(decay, bool) or not isinstance(decay, (int, float)) or not 0.0 <= decay <= 1.0:
        raise ValueError(f"error-feedback decay must be a number in [0, 1], got {decay!r}")
    return float(decay)


class ErrorFeedback:
    """A sender's error-feedback buffer for one codec and one model size.

    Args:
        codec: A codec string (``protocol.parse_codec``), e.g. ``int8`` or ``topk:density=0.02``.
        numel: d, the number of parameters (≥ 0).
        decay: β in [0, 1], the factor the residual is multiplied by before the next Δ is added (None: the
            codec's default, :func:`default_ef_decay`: 0.95 for ``topk`` as in SparseLoCo, 1 for the others).
        shapes: the model's parameter shapes in flattening order (a ``dense=head`` codec needs them).

    Attributes:
        codec: The codec string.
        numel: d.
        decay: β.
        residual: ``(d,)`` float32 CPU tensor e_r (zeros at the start; always zeros for ``fp32``); replaced by a new
            tensor at each :meth:`compress`, never changed in place (a peer keeps the last one for its checkpoint).

    Raises:
        ValueError: Unknown codec, a negative ``numel``, ``decay`` outside [0, 1], or a ``dense=head`` codec
            without ``shapes`` that hold ``numel`` values.
    """

    def __init__(self, codec: str, numel: int, decay: float | None = None,
                 shapes: Sequence[Sequence[int]] | None = None) -> None:
        """Check the codec, β and shapes and start with a zero residual."""
        self._spec = codec_spec(codec)
        if isinstance(numel, bool) or not isinstance(numel, int) or numel < 0:
            raise ValueError(f"numel must be a non-negative int, got {numel!r}")
        expected_payload_bytes(codec, numel, shapes)  # a dense=head codec without matching shapes: ValueError
        self.shapes = None if shapes is None else tuple(tuple(int(n) for n in shape) for shape in shapes)
        self.codec = codec
        self.numel = numel
        self.decay = default_ef_decay(codec) if decay is None else check_ef_decay(decay)
        self.residual = torch.zeros(numel, dtype=torch.float32)

    def __repr__(self) -> str:
        """Codec, size, β and the residual's norm."""
        return (
            f"ErrorFeedback(codec={self.codec!r}, numel={self.numel}, decay={self.decay}, "
            f"|e|={float(self.residual.norm()):.3g})"
        )

    def compress(self, delta: torch.Tensor) -> tuple[bytes, torch.Tensor]:
        """Encode a = β·e + Δ, keep e ← a − decoded, and return the payload with what it decodes to.

        With β = 1 the accumulator is ``Δ + e`` computed exactly as before β existed (bit for bit).

        Args:
            delta: ``(d,)`` float tensor Δ_r (any device; used as float32 on the CPU).

        Returns:
            ``(payload, sent)``: ``expected_payload_bytes(codec, d)`` bytes, and the ``(d,)`` float32 CPU
            tensor every receiver decodes from them (ŝ_r; Δ_r itself for ``fp32``).

        Raises:
            ValueError: ``delta`` is not a ``(d,)`` float tensor, or Δ + e holds NaN/±Inf (a local fault,
                e.g. a diverged inner phase); the residual is then left unchanged.
        """
        if (
            not isinstance(delta, torch.Tensor)
            or not delta.is_floating_point()
            or tuple(delta.shape) != (self.numel,)
        ):
            raise ValueError(
                f"delta must be a ({self.numel},) float tensor, got "
                f"{getattr(delta, 'dtype', type(delta).__name__)} {tuple(getattr(delta, 'shape', ()))}"
            )
        flat = delta.detach().to(device="cpu", dtype=torch.float32)
        if self._spec.lossless:
            return encode_update(flat, self.codec, self.shapes), flat.clone()
        # SparseLoCo (arXiv:2508.15706): e ← β·e + Δ; with β = 1 no multiplication (bit-identical plain EF)
        target = flat + (self.residual if self.decay == 1.0 else self.residual * self.decay)
        if not bool(torch.isfinite(target).all()):
            raise ValueError(
                f"the update to send holds {int((~torch.isfinite(target)).sum())} NaN/±Inf values"
            )
        payload = encode_update(target, self.codec, self.shapes)
        sent = decode_update(payload, self.codec, self.numel, self.shapes)
        if isinstance(sent, Rejected) or not bool(torch.isfinite(sent).all()):  # fp16 beyond ±65504
            detail = sent.detail if isinstance(sent, Rejected) else "it decodes to NaN/±Inf"
            raise ValueError(f"{self.codec} cannot carry this update: {detail}")
        self.residual = target - sent  # a new tensor: the residual is replaced, never changed in place
        return payload, sent

    def encode(self, delta: torch.Tensor) -> bytes:
        """:meth:`compress` without the decoded update: the payload to commit and serve."""
        return self.compress(delta)[0]

    def state_dict(self) -> dict[str, Any]:
        """``{"codec": str, "numel": int, "residual": (d,) float32 tensor (a copy)}``."""
        return {"codec": self.codec, "numel": self.numel, "residual": self.residual.clone()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume from :meth:`state_dict` (e.g. out of a checkpoint).

        Raises:
            ValueError: The state is for another codec or size, or its residual is not a finite ``(d,)``
                float32 tensor.
        """
        if state.get("codec") != self.codec or state.get("numel") != self.numel:
            raise ValueError(
                f"error-feedback state is for codec={state.get('codec')!r}, numel={state.get('numel')!r}; "
                f"this buffer is codec={self.codec!r}, numel={self.numel}"
            )
        residual = state.get("residual")
        if (
            not isinstance(residual, torch.Tensor)
            or residual.dtype != torch.float32
            or tuple(residual.shape) != (self.numel,)
            or not bool(torch.isfinite(residual).all())
        ):
            raise ValueError(f"error-feedback residual must be a finite ({self.numel},) float32 tensor")
        self.residual = residual.detach().to("cpu").clone()
