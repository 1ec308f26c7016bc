"""Update attacks: the vector a Byzantine peer commits instead of its honest pseudo-gradient.

Each is a small callable (byzfl's shape): the keyword-only constructor checks the parameters, the call takes
``known (m, d)`` (row 0 the attacker's own honest Δ of this round, further rows the updates it received in the
previous round) and an :class:`~p2p_guard.attacks.base.AttackContext`, and returns a ``(d,)`` vector of the
dtype of ``known``. None mutates ``known``; randomness comes only from ``ctx.generator``.
"""

from __future__ import annotations

from dataclasses import dataclass
from statistics import NormalDist
from typing import ClassVar

import torch

from p2p_guard.attacks.base import AttackContext, check_known
from p2p_guard.guard.base import check_real

__all__ = [
    "ALittleIsEnough",
    "GaussianNoise",
    "InnerProductManipulation",
    "Scale",
    "SignFlip",
    "alie_z",
]


@dataclass(frozen=True, kw_only=True)
class SignFlip:
    """Send the attacker's own update, reversed and scaled.

    a = −s · Δ_own

    where
        - Δ_own = ``known[0]``, the attacker's honestly computed update of this round (the only row used);
        - s > 0 is ``scale`` (the literature runs s = 1 and s = 10).

    Args:
        scale: the factor s, ``> 0``.

    Raises:
        ValueError: when ``scale`` is not a finite number ``> 0``.

    Example:
        >>> SignFlip(scale=10)(torch.tensor([[1.0, -2.0]]), ctx)
        tensor([-10.,  20.])

    References:
        Zeyuan Allen-Zhu, Faeze Ebrahimian, Jerry Li, Dan Alistarh. Byzantine-Resilient Non-Convex Stochastic
        Gradient Descent. ICLR 2021. arXiv:2012.14368.
    """

    kind: ClassVar[str] = "update"
    scale: float = 1.0

    def __post_init__(self) -> None:
        """Check the fields (ValueError naming the field and its value)."""
        check_real("scale", self.scale, minimum=0.0)

    def __call__(self, known: torch.Tensor, ctx: AttackContext) -> torch.Tensor:
        """Return ``−scale · known[0]`` as a ``(d,)`` tensor of the dtype of ``known``."""
        check_known(known)
        return known[0] * -self.scale


@dataclass(frozen=True, kw_only=True)
class GaussianNoise:
    """Send pure Gaussian noise.

    a ~ N(0, σ² I_d)

    where
        - σ = ``std``, in the units of the update's coordinates;
        - d is the model size (read from ``known``, whose values are not used);
        - the draw comes from ``ctx.generator``.

    Args:
        std: standard deviation σ per coordinate, ``> 0``.

    Raises:
        ValueError: when ``std`` is not a finite number ``> 0``.

    References:
        Peva Blanchard, El Mahdi El Mhamdi, Rachid Guerraoui, Julien Stainer. Machine Learning with
        Adversaries: Byzantine Tolerant Gradient Descent. NeurIPS 2017. arXiv:1703.02757.
    """

    kind: ClassVar[str] = "update"
    std: float = 1.0

    def __post_init__(self) -> None:
        """Check the fields (ValueError naming the field and its value)."""
        check_real("std", self.std, minimum=0.0)

    def __call__(self, known: torch.Tensor, ctx: AttackContext) -> torch.Tensor:
        """Return a ``(d,)`` draw of N(0, std²) per coordinate, dtype of ``known``."""
        check_known(known)
        noise = torch.randn(known.shape[1], generator=ctx.generator, dtype=known.dtype)
        return noise * self.std


@dataclass(frozen=True, kw_only=True)
class Scale:
    """Send the attacker's own update scaled up (model replacement / boosting).

    a = λ · Δ_own

    where
        - Δ_own = ``known[0]`` (the only row used);
        - λ = ``factor`` (the literature runs λ = 10 and λ = 1000; n/η replaces the global model).

    Args:
        factor: the factor λ, ``> 0``.

    Raises:
        ValueError: when ``factor`` is not a finite number ``> 0``.

    Example:
        >>> Scale(factor=10)(torch.tensor([[1.0, -2.0]]), ctx)
        tensor([ 10., -20.])

    References:
        Eugene Bagdasaryan, Andreas Veit, Yiqing Hua, Deborah Estrin, Vitaly Shmatikov. How To Backdoor
        Federated Learning. AISTATS 2020. arXiv:1807.00459.
    """

    kind: ClassVar[str] = "update"
    factor: float = 10.0

    def __post_init__(self) -> None:
        """Check the fields (ValueError naming the field and its value)."""
        check_real("factor", self.factor, minimum=0.0)

    def __call__(self, known: torch.Tensor, ctx: AttackContext) -> torch.Tensor:
        """Return ``factor · known[0]`` as a ``(d,)`` tensor of the dtype of ``known``."""
        check_known(known)
        return known[0] * self.factor


def alie_z(n: int, f: int) -> float:
    """The z of "A Little Is Enough" for n peers of which f are Byzantine.

    z_max = Φ⁻¹((n − f − s) / (n − f)),  s = ⌊n/2 + 1⌋ − f

    where
        - s is the number of honest peers the attackers must sway to hold a majority;
        - Φ⁻¹ is the standard normal quantile function.

    The probability is clamped to [0.001, 0.999] (|z| ≤ 3.09): it reaches 0 or 1 only in degenerate cases
    (n ≤ 2, or a Byzantine majority), where the formula gives ±∞.

    Args:
        n: total number of peers, ``>= 1``.
        f: number of Byzantine peers, ``0 <= f < n``.

    Returns:
        z_max (0 for n = 8, f = 2; 0.253 for n = 25, f = 5).

    Raises:
        ValueError: unless ``0 <= f < n``.
    """
    if not 0 <= f < n:
        raise ValueError(f"alie_z needs 0 <= f < n, got n={n}, f={f}")
    s = (n // 2 + 1) - f
    p = (n - f - s) / (n - f)
    return NormalDist().inv_cdf(min(max(p, 0.001), 0.999))


@dataclass(frozen=True, kw_only=True)
class ALittleIsEnough:
    """A Little Is Enough (ALIE): shift each coordinate of the estimated honest mean by z standard deviations.

    [a]_k = μ_k − z · σ_k

    where
        - μ_k and σ_k are the mean and the sample standard deviation (ddof 1) of the k-th coordinate over all
          rows of ``known`` (own Δ of this round and the previous round's updates; σ = 0 with one row);
        - z = ``z``, or when ``None`` z_max of :func:`alie_z` for ``ctx.n`` and ``ctx.f``.

    The original attack is omniscient (it sees this round's honest updates); under commit-before-reveal it
    estimates μ and σ from its own update and the previous round's, which is what this class does.

    Args:
        z: the shift in standard deviations, ``>= 0``; ``None`` for the paper's formula.

    Raises:
        ValueError: when ``z`` is not a finite number ``>= 0``.

    Example:
        >>> ALittleIsEnough(z=1.0)(torch.tensor([[1.0, 0.0], [3.0, 0.0]]), ctx)   # μ = (2, 0), σ = (1.414, 0)
        tensor([0.5858, 0.0000])

    References:
        Moran Baruch, Gilad Baruch, Yoav Goldberg. A Little Is Enough: Circumventing Defenses For Distributed
        Learning. NeurIPS 2019. arXiv:1902.06156.
    """

    kind: ClassVar[str] = "update"
    z: float | None = None

    def __post_init__(self) -> None:
        """Check the fields (ValueError naming the field and its value)."""
        if self.z is not None:
            check_real("z", self.z, minimum=0.0, inclusive=True)

    def __call__(self, known: torch.Tensor, ctx: AttackContext) -> torch.Tensor:
        """Return ``μ − z σ`` over the rows of ``known``, a ``(d,)`` tensor of its dtype."""
        m = check_known(known)
        z = self.z if self.z is not None else alie_z(ctx.n, ctx.f)
        mean = known.mean(dim=0)
        if m == 1:
            return mean
        return mean - z * known.std(dim=0, correction=1)


@dataclass(frozen=True, kw_only=True)
class InnerProductManipulation:
    """Inner-product manipulation (IPM): send a small (or large) negative multiple of the honest mean.

    a = −ε · (1/m) Σ_{j=1}^{m} known_j

    where
        - known_1 is the attacker's own Δ of this round and the other rows the previous round's updates, an
          estimate of the honest mean (the original attack is omniscient and uses this round's);
        - ε = ``epsilon`` (the literature runs ε = 0.1, which defeats Krum, and ε = 100).

    Args:
        epsilon: the factor ε, ``> 0``.

    Raises:
        ValueError: when ``epsilon`` is not a finite number ``> 0``.

    Example:
        >>> InnerProductManipulation(epsilon=0.5)(torch.tensor([[2.0, 0.0], [4.0, 2.0]]), ctx)
        tensor([-1.5000, -0.5000])

    References:
        Cong Xie, Oluwasanmi Koyejo, Indranil Gupta. Fall of Empires: Breaking Byzantine-tolerant SGD by
        Inner Product Manipulation. UAI 2019. arXiv:1903.03936.
    """

    kind: ClassVar[str] = "update"
    epsilon: float = 0.1

    def __post_init__(self) -> None:
        """Check the fields (ValueError naming the field and its value)."""
        check_real("epsilon", self.epsilon, minimum=0.0)

    def __call__(self, known: torch.Tensor, ctx: AttackContext) -> torch.Tensor:
        """Return ``−epsilon · mean(known)``, a ``(d,)`` tensor of the dtype of ``known``."""
        check_known(known)
        return known.mean(dim=0) * -self.epsilon
