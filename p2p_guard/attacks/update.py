"""Update attacks: the vector a Byzantine peer commits instead of its honest pseudo-gradient.

Each is a small callable (byzfl's shape): the keyword-only constructor checks the parameters, the call takes
``known (m, d)`` (row 0 the attacker's own honest Δ of this round, further rows the updates it received in the
previous round) and an :class:`~p2p_guard.attacks.base.AttackContext`, and returns a ``(d,)`` vector of the
dtype of ``known``. None mutates ``known``; randomness comes only from ``ctx.generator``.

Here: the classic attacks (sign flip, Gaussian noise, scaling, ALIE with its line-searched variant, IPM), the
distance-bounded attacks of Shejwalkar & Houmansadr (min-max, min-sum) and mimic. Time-coupled and
evasion attacks are in :mod:`~p2p_guard.attacks.evasive`, the white-box adaptive attack in
:mod:`~p2p_guard.attacks.whitebox`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist
from typing import ClassVar

import torch

from p2p_guard.attacks.base import AttackContext, check_known
from p2p_guard.attacks.whitebox import (
    harmful_direction,
    honest_models,
    honest_stand_ins,
    jitter_copy,
    simulate_round,
    simulated_guard,
)
from p2p_guard.guard.base import check_int, check_real
from p2p_guard.guard.linalg import pairwise_distances

__all__ = [
    "ALIE_SEARCH_GRID",
    "ALIE_SEARCH_SAFETY",
    "ALittleIsEnough",
    "GaussianNoise",
    "InnerProductManipulation",
    "Mimic",
    "MinMax",
    "MinSum",
    "Scale",
    "SignFlip",
    "alie_z",
]

ALIE_SEARCH_SAFETY = 2**0.5
"""``alie:z=search`` takes a z only when √2·z passes the simulated guard too (a margin from its rejection cliff)."""

ALIE_SEARCH_GRID: tuple[float, ...] = tuple(0.25 * ALIE_SEARCH_SAFETY**k for k in range(12))
"""The z values ``alie:z=search`` tries, 0.25 to 11.3 in steps of √2 (with the formula's z when positive):
each grid point's safety partner is the next one. From the top down, so the search costs 1 (a rule that rejects
nothing) to 14 simulated rounds on each of its two models of the honest rows."""

SEARCH = "search"
"""The value of ``z`` that makes ALIE line-search z against the peers' guard."""


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
        - z = ``z``; when ``None``, z_max of :func:`alie_z` for ``ctx.n`` and ``ctx.f``; when ``"search"``,

              z* = max {z ∈ Z : z and κz pass},   0 when no z passes

          where z *passes* when the peers' guard G, simulated on each of the two models of this round's honest
          rows (:func:`~p2p_guard.attacks.whitebox.honest_models`: the honest stand-ins S of
          :func:`~p2p_guard.attacks.whitebox.honest_stand_ins` as they are, and S with its previous-round rows
          scaled by :func:`~p2p_guard.attacks.whitebox.drift_scale` and all rows turned by
          :func:`~p2p_guard.attacks.whitebox.drift_cosine` out of the plane of û, the stand-ins' mean
          direction, and ŵ, the part of −σ orthogonal to û) plus f copies of μ − zσ
          (:func:`~p2p_guard.attacks.whitebox.simulate_round`), accepts every copy on both. G is built from
          ``ctx.guard_name`` (``semantic`` when None), ``ctx.guard_params`` and ``ctx.guard_f``
          (:func:`~p2p_guard.attacks.whitebox.simulated_guard`), Z = :data:`ALIE_SEARCH_GRID` plus z_max when
          it is positive, and κ = :data:`ALIE_SEARCH_SAFETY` (√2) keeps a margin from the cliff where the guard
          starts rejecting (the models are estimates from one row of this round). Against a rule that rejects
          nothing (``median``, ``mean``) every z passes and z* is the top of the grid.

          Why the two models: S alone is the previous round's rows, whose centre points where the previous
          round's did and whose norms are the previous round's, while pseudo-gradients shrink 15-30 % a round
          early in training. The search used to take z* = argmax min(D(z), D(κz)), D(z) = ‖G(S ∪ {μ − zσ}^f) −
          μ‖₂, on S alone; μ includes the colluders' rows of the previous round, so a z whose rows G rejects
          could score highest, and the real guard rejected 69-83 % of the rows on digits (10 peers, Dirichlet
          0.5, 3 and 4 of 10, seeds 0-4; the table in ``docs/scripts/adaptive_cells.py``), mostly for their
          norm; with the two models, 0-6 % at 3 of 10 and 10-40 % at 4 of 10 (for their cosine, late in the
          run: the honest centre turns away from a persistent attack, which the turned model, a turn unrelated
          to the attack's plane, does not foresee).

    The original attack is omniscient (it sees this round's honest updates); under commit-before-reveal it
    estimates μ and σ from its own update and the previous round's, which is what this class does. The search
    variant is white-box: it also knows the guard's configuration (as byzfl's Opt-ALIE, which takes the
    aggregator as an argument), and simulates it on models of this round's honest rows built from what it knows,
    never on the rows themselves.

    Args:
        z: the shift in standard deviations, ``>= 0``; ``None`` for the paper's formula; ``"search"`` for the
            line search against the guard (spec ``alie:z=search``).

    Raises:
        ValueError: when ``z`` is not a finite number ``>= 0``, ``None`` or ``"search"``.

    Example:
        >>> ALittleIsEnough(z=1.0)(torch.tensor([[1.0, 0.0], [3.0, 0.0]]), ctx)   # μ = (2, 0), σ = (1.414, 0)
        tensor([0.5858, 0.0000])

    References:
        Moran Baruch, Gilad Baruch, Yoav Goldberg. A Little Is Enough: Circumventing Defenses For Distributed
        Learning. NeurIPS 2019. arXiv:1902.06156.
        Youssef Allouah, Sadegh Farhadkhani, Rachid Guerraoui, Nirupam Gupta, Rafaël Pinot, John Stephan.
        Fixing by Mixing. AISTATS 2023. arXiv:2302.01772 (the line-searched "optimal" ALIE, as in byzfl).
    """

    kind: ClassVar[str] = "update"
    z: float | str | None = None

    def __post_init__(self) -> None:
        """Check the fields (ValueError naming the field and its value)."""
        if isinstance(self.z, str):
            if self.z != SEARCH:
                raise ValueError(f"z must be a finite number >= 0, None or {SEARCH!r}, got {self.z!r}")
        elif self.z is not None:
            check_real("z", self.z, minimum=0.0, inclusive=True)

    def __call__(self, known: torch.Tensor, ctx: AttackContext) -> torch.Tensor:
        """Return ``μ − z σ`` over the rows of ``known``, a ``(d,)`` tensor of its dtype."""
        m = check_known(known)
        mean = known.mean(dim=0)
        if m == 1:
            return mean
        shifted = mean - self.chosen_z(known, ctx) * known.std(dim=0, correction=1)
        if self.z == "search":  # the white-box variant hides its copies from the duplicate stage
            return jitter_copy(shifted, known, ctx.generator)
        return shifted

    def chosen_z(self, known: torch.Tensor, ctx: AttackContext) -> float:
        """The z this call uses: ``z``, the formula's, or the line search's (see the class docstring)."""
        if self.z is None:
            return alie_z(ctx.n, ctx.f)
        if not isinstance(self.z, str):
            return float(self.z)
        check_known(known)
        if len(known) == 1:
            return 0.0
        mean = known.mean(dim=0)
        std = known.std(dim=0, correction=1)
        grid = set(ALIE_SEARCH_GRID)
        if 0 <= ctx.f < ctx.n and alie_z(ctx.n, ctx.f) > 0:
            grid.add(alie_z(ctx.n, ctx.f))
        guard = simulated_guard(ctx)
        stand_ins = honest_stand_ins(known, ctx)
        centre = stand_ins.to(torch.float64).mean(dim=0)
        centre_norm = float(torch.linalg.vector_norm(centre))
        if centre_norm > 0:
            u = centre / centre_norm
            models = honest_models(stand_ins, u, harmful_direction(-std.to(torch.float64), u, 0), ctx)
        else:
            models = (stand_ins,)
        copies = max(1, ctx.f)
        verdicts: dict[float, bool] = {}

        def accepted(z: float) -> bool:
            if z not in verdicts:
                attack = (mean - z * std).expand(copies, -1)
                verdicts[z] = all(
                    v.accepted
                    for honest in models
                    for v in simulate_round(guard, honest, attack, ctx).verdicts[-copies:]
                )
            return verdicts[z]

        for z in sorted(grid, reverse=True):
            if accepted(z) and accepted(ALIE_SEARCH_SAFETY * z):
                return z
        return 0.0


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


_PERTURBATIONS = ("std", "unit", "sign")


def _rows_mean_direction(known: torch.Tensor, perturbation: str
                         ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """Shared start of min-max and min-sum: float64 rows ``(m, d)``, their mean ``(d,)``, and p̂ (None if zero)."""
    check_known(known)
    rows = known.to(torch.float64)
    mean = rows.mean(dim=0)
    return rows, mean, _perturbation(rows, mean, perturbation)


def _perturbation(rows: torch.Tensor, mean: torch.Tensor, kind: str) -> torch.Tensor | None:
    """p̂ of min-max / min-sum, a float64 unit vector, or None when p = 0."""
    if kind == "unit":
        p = -mean
    elif kind == "sign":
        p = -torch.sign(mean)
    elif len(rows) > 1:
        p = -rows.std(dim=0, correction=1)
    else:
        return None
    norm = torch.linalg.vector_norm(p)
    return p / norm if norm > 0 else None


def _check_perturbation(value: object) -> None:
    if value not in _PERTURBATIONS:
        raise ValueError(f"perturbation must be one of {_PERTURBATIONS}, got {value!r}")


@dataclass(frozen=True, kw_only=True)
class MinMax:
    """Min-max (AGR-agnostic): the furthest point along p no farther from any known update than two are.

    The largest distance to a known update stays within the largest distance between two known updates.

    a = μ + γ* · p̂,   γ* = max {γ ≥ 0 : max_i ‖μ + γ p̂ − x_i‖₂ ≤ max_{i,j} ‖x_i − x_j‖₂}

    where
        - x_1, …, x_m are the rows of ``known`` (own Δ of this round and the previous round's updates) and μ
          their mean;
        - p̂ = p / ‖p‖₂ with p = −σ (``"std"``: σ the coordinate-wise standard deviation, ddof 1),
          −μ/‖μ‖ (``"unit"``) or −sign(μ) (``"sign"``); the result depends only on the direction of p;
        - γ* is solved exactly: with a_i = μ − x_i, b_i = ⟨a_i, p̂⟩ and D the largest pairwise distance,
          γ* = min_i (−b_i + √(b_i² + D² − ‖a_i‖²)) (each constraint is a quadratic in γ; γ = 0 always meets
          it, since ‖μ − x_i‖ ≤ max_j ‖x_j − x_i‖). This is the limit of the paper's binary search.

    Default ``"std"``: the inverse standard deviation moves each coordinate in proportion to its honest spread
    (ALIE's direction), which hides best among the known rows; it is the perturbation we recall the paper
    finding most effective in most settings (not re-checked against its text here; the authors' public
    notebooks default to ``unit_vec`` in some experiments and ``std`` in others). With one known row (or
    p = 0) the attack sends μ.

    Knowledge: the paper's agnostic attacker knows the benign updates of the round; here it knows its own Δ
    of this round and the previous round's rows (commit-before-reveal), which may include colluders' rows.
    It does not know the aggregation rule.

    Args:
        perturbation: ``"std"`` (default), ``"unit"`` or ``"sign"``.

    Raises:
        ValueError: on an unknown perturbation.

    Example:
        >>> MinMax(perturbation="unit")(torch.tensor([[2.0, 0.0], [4.0, 0.0]]), ctx)   # μ = (3, 0), D = 2
        tensor([2., 0.])

    References:
        Virat Shejwalkar, Amir Houmansadr. Manipulating the Byzantine: Optimizing Model Poisoning Attacks and
        Defenses for Federated Learning. NDSS 2021.
    """

    kind: ClassVar[str] = "update"
    perturbation: str = "std"

    def __post_init__(self) -> None:
        """Check the fields (ValueError naming the field and its value)."""
        _check_perturbation(self.perturbation)

    def __call__(self, known: torch.Tensor, ctx: AttackContext) -> torch.Tensor:
        """Return ``μ + γ* p̂``, a ``(d,)`` tensor of the dtype of ``known``."""
        rows, mean, p = _rows_mean_direction(known, self.perturbation)
        if p is None:
            return mean.to(known.dtype)
        d_max_sq = float(pairwise_distances(rows).max()) ** 2
        gamma = math.inf
        for row in rows:
            a = mean - row
            b = float(torch.dot(a, p))
            a_sq = float(torch.dot(a, a))
            gamma = min(gamma, -b + math.sqrt(max(0.0, b * b + d_max_sq - a_sq)))
        return (mean + max(0.0, gamma) * p).to(known.dtype)


@dataclass(frozen=True, kw_only=True)
class MinSum:
    """Min-sum (AGR-agnostic): the furthest point along p whose squared distances to the known sum no more.

    Its sum of squared distances to the known updates stays within the largest such sum of a known update.

    a = μ + γ* · p̂,   γ* = max {γ ≥ 0 : Σ_i ‖μ + γ p̂ − x_i‖₂² ≤ max_k Σ_i ‖x_k − x_i‖₂²}

    where
        - x_i, μ and p̂ are as in :class:`MinMax` (default perturbation ``"std"``, for the same reason);
        - since μ is the mean of the x_i, Σ_i ‖μ + γp̂ − x_i‖² = Σ_i ‖μ − x_i‖² + m γ², and
          Σ_i ‖x_k − x_i‖² = Σ_i ‖μ − x_i‖² + m ‖x_k − μ‖², so the exact solution (the limit of the paper's
          binary search) is γ* = max_k ‖x_k − μ‖₂: the attack sits as far from μ as the furthest known row,
          along p.

    The bound is the one of the paper's equation (the largest honest sum); its public code compares with the
    smallest sum instead, a stricter bound.

    Knowledge: as :class:`MinMax`.

    Args:
        perturbation: ``"std"`` (default), ``"unit"`` or ``"sign"``.

    Raises:
        ValueError: on an unknown perturbation.

    Example:
        >>> MinSum(perturbation="unit")(torch.tensor([[2.0, 0.0], [4.0, 0.0]]), ctx)   # μ = (3, 0), γ* = 1
        tensor([2., 0.])

    References:
        Virat Shejwalkar, Amir Houmansadr. Manipulating the Byzantine: Optimizing Model Poisoning Attacks and
        Defenses for Federated Learning. NDSS 2021.
    """

    kind: ClassVar[str] = "update"
    perturbation: str = "std"

    def __post_init__(self) -> None:
        """Check the fields (ValueError naming the field and its value)."""
        _check_perturbation(self.perturbation)

    def __call__(self, known: torch.Tensor, ctx: AttackContext) -> torch.Tensor:
        """Return ``μ + γ* p̂``, a ``(d,)`` tensor of the dtype of ``known``."""
        rows, mean, p = _rows_mean_direction(known, self.perturbation)
        if p is None:
            return mean.to(known.dtype)
        gamma = float(torch.linalg.vector_norm(rows - mean, dim=1).max())
        return (mean + gamma * p).to(known.dtype)


@dataclass(frozen=True, kw_only=True)
class Mimic:
    """Mimic: send a copy of one known honest update, over-representing its data (hurts under non-IID).

    a = x_{j*},  j* = ``index`` if given and < m, else argmax_{j ≥ 1} ‖x_j − x̄‖₂  (x̄: mean of rows 1..m−1)

    where
        - x_0 = ``known[0]`` is the attacker's own Δ of this round and x_1, …, x_{m−1} the previous round's
          rows;
        - without ``index`` the copied row is the previous-round row farthest from their mean (the most
          atypical peer, whose weight the copies multiply; the paper picks the worker furthest along the top
          principal direction, which this approximates without a warm-up phase); the first such row on ties;
          with one previous row, that row; with none (round 0), the attacker's own Δ;
        - with ``index`` ≥ m (too few rows this round) the attacker's own Δ is sent.

    A copied row is the sender's update of the previous round: the colluders repeat it, and since every
    colluder sees the same previous round, they mostly pick the same row. Its base is one round stale, which
    the integrity stage cannot see (the digest is the attacker's own).

    Knowledge: the previous round's updates (commit-before-reveal); no knowledge of the guard.

    Args:
        index: the row of ``known`` to copy, ``>= 0``; ``None`` for the farthest previous-round row.

    Raises:
        ValueError: when ``index`` is not an integer ``>= 0``.

    References:
        Sai Praneeth Karimireddy, Lie He, Martin Jaggi. Byzantine-Robust Learning on Heterogeneous Datasets
        via Bucketing. ICLR 2022. arXiv:2006.09365.
    """

    kind: ClassVar[str] = "update"
    index: int | None = None

    def __post_init__(self) -> None:
        """Check the fields (ValueError naming the field and its value)."""
        if self.index is not None:
            check_int("index", self.index, minimum=0)

    def __call__(self, known: torch.Tensor, ctx: AttackContext) -> torch.Tensor:
        """Return a copy of the chosen row, a ``(d,)`` tensor of the dtype of ``known``."""
        return known[self.chosen_row(known)].clone()

    def chosen_row(self, known: torch.Tensor) -> int:
        """The index of the row :meth:`__call__` copies."""
        m = check_known(known)
        if self.index is not None:
            return self.index if self.index < m else 0
        if m <= 2:
            return m - 1
        previous = known[1:].to(torch.float64)
        dist = torch.linalg.vector_norm(previous - previous.mean(dim=0), dim=1)
        return 1 + int(torch.argmax(dist))


class FreeRider:
    """Contribute nothing: send a zero pseudo-gradient while taking the swarm's model (free-riding).

    a = 0 ∈ R^d

    Knowledge assumed: none (``known`` is only used for the shape and dtype).

    Example:
        >>> FreeRider()(torch.tensor([[1.0, -2.0]]), ctx)
        tensor([0., 0.])
    """

    kind: ClassVar[str] = "update"

    def __call__(self, known: torch.Tensor, ctx: AttackContext) -> torch.Tensor:
        """Return zeros shaped like ``known[0]``."""
        return torch.zeros_like(known[0])

    def __repr__(self) -> str:
        return "FreeRider()"
