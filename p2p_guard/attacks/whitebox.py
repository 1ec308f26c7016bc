"""White-box attacks: they know the honest peers' guard, simulate it, and craft rows that it accepts.

- :func:`honest_stand_ins`: which known rows stand for this round's honest updates in a simulation;
- :func:`simulated_guard` / :func:`simulate_round`: the peers' guard, built from the context, run on stand-ins
  plus candidate attack rows;
- :func:`drift_cosine` / :func:`drift_scale` / :func:`drifted_stand_ins`: how far this round's honest centre has
  likely turned from the stand-ins' mean and how much the rows' length has changed, and the stand-ins turned
  by it; :func:`honest_models`: the two models of this round's honest rows built from them;
- :class:`Adaptive`: the strongest row the default ``semantic`` guard accepts with a margin on each check.

Knowledge (commit-before-reveal): the attacker has its own honest Δ of this round and the rows of the previous
round; the guard's name, parameters and f̂ come from the :class:`~p2p_guard.attacks.base.AttackContext`
(Kerckhoffs: the defence is public). It does not see this round's honest rows, so every simulation runs on
stand-ins and every check is passed with a margin.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import torch

from p2p_guard.attacks.base import AttackContext, check_known
from p2p_guard.guard.base import AggregationContext, GuardResult, check_int, check_real
from p2p_guard.guard.duplicates import typical_distance
from p2p_guard.guard.guard import Guard
from p2p_guard.guard.linalg import pairwise_distances, scalar_median
from p2p_guard.guard.registry import DEFAULT_GUARD, build_guard, parse_guard_spec
from p2p_guard.guard.semantic import SemanticGuard

__all__ = [
    "COPY_JITTER",
    "Adaptive",
    "GuardThresholds",
    "drift_cosine",
    "drift_scale",
    "drifted_stand_ins",
    "guard_thresholds",
    "harmful_direction",
    "honest_models",
    "honest_stand_ins",
    "jitter_copy",
    "simulate_round",
    "simulated_guard",
]

_DIRECTIONS = ("std", "fixed")


def honest_stand_ins(known: torch.Tensor, ctx: AttackContext) -> torch.Tensor:
    """The known rows that stand for this round's n − f honest updates in a simulated round.

    S = {0} ∪ {the h − 1 rows j ≥ 1 nearest to med},  h = max(1, n − f),  med_k = median_j known_{j,k}

    where
        - row 0 (the attacker's own honest Δ of this round) is always kept;
        - med is the coordinate-wise (lower) median of all known rows, so that the colluders' own rows of the
          previous round, which lie far from the honest ones, are the first left out;
        - with m ≤ h rows, all are kept.

    Args:
        known: ``(m, d)`` float tensor, row 0 the attacker's own Δ; not mutated.
        ctx: ``n`` and ``f`` give h.

    Returns:
        ``(min(m, h), d)`` tensor of rows of ``known``, in their original order.
    """
    m = check_known(known)
    h = max(1, ctx.n - ctx.f)
    if m <= h:
        return known
    centre = known.median(dim=0).values.to(torch.float64)
    dist = torch.stack([torch.linalg.vector_norm(row.to(torch.float64) - centre) for row in known[1:]])
    nearest = torch.sort(dist, stable=True).indices[: h - 1] + 1
    keep = torch.cat([torch.zeros(1, dtype=torch.long), torch.sort(nearest).values])
    return known[keep]


def drift_cosine(stand_ins: torch.Tensor, honest_now: int) -> float:
    """T̂: an estimate of the cosine between the stand-ins' mean and the mean of this round's honest rows.

    T̂ = clamp(c_own / c_ref, 0, 1) · κ(h) · κ(h'),   κ(j) = 1 / √(1 + r² / j)
    c_own = median_i cos(s_0, m_{−i}),   c_ref = median_i cos(s_i, m_{−i}) = 1 / √((1 + r²)(1 + r² / (k − 1)))

    where
        - s_0 is the attacker's own honest Δ of this round and s_1, …, s_k (k ≥ 2) the stand-ins from the
          previous round (:func:`honest_stand_ins`), h = k + 1 of them in all, h' = ``honest_now``;
        - m_{−i} is the mean of the previous-round stand-ins without s_i (leave-one-out: both medians compare a
          row with a mean of the same k − 1 rows, none of which is the row itself);
        - r² is the rows' noise-to-signal ratio, solved from c_ref (the equation on the right).

    The model: an honest row is its round's centre c plus noise of norm r · ‖c‖ that, in high dimension, is
    nearly orthogonal to every fixed direction. A row then meets a mean of j other rows of its round at cosine
    about 1 / √((1 + r²)(1 + r²/j)) (c_ref measures it on the previous round), and a mean of j rows of the
    previous round, whose centre has turned by δ, at that times cos δ (c_own: the attacker's one row of this
    round against the previous rows), so c_own / c_ref estimates cos δ. Two means of h and h' rows whose
    centres are δ apart meet at about cos δ · κ(h) · κ(h'): the stand-ins' mean (the attack's û) and this
    round's honest mean, near which the peers' robust centre lies. The previous round's rows are all an attacker
    sees of the honest peers (commit-before-reveal); without T̂, a simulation on them takes this round's centre
    to point exactly where their mean does.

    Measured on the synthetic rounds of ``tests/unit/test_attacks_suite.py`` (n = 10, f = 3, d = 200, previous
    mean at cosine 0.8 from this round's, honest pairwise cosine about 0.5; seeds 0-3, 3 attackers each): the
    stand-ins' mean met the honest mean at 0.745-0.794, and T̂ (``honest_now`` = 7) ranged over 0.65-0.79, at
    most 0.131 from the actual cosine (0.049 below it on average): one row of this round is a noisy witness of
    its centre, hence the margin the attack keeps on every check.

    Args:
        stand_ins: ``(h, d)`` float tensor, row 0 the attacker's own Δ, rows 1.. from the previous round;
            not mutated.
        honest_now: h', the number of honest rows this round (n − f), ``>= 1``.

    Returns:
        T̂ in [0, 1] (a Python float); 1.0 (no turn, no noise) with fewer than two previous-round rows or when the
        previous rows do not agree at all (c_ref ≤ 0).
    """
    prev = stand_ins[1:].to(torch.float64)
    k = len(prev)
    if k < 2:
        return 1.0
    total = prev.sum(dim=0)
    own = stand_ins[0].to(torch.float64)
    c_own, c_ref = [], []
    for i in range(k):
        loo = (total - prev[i]) / (k - 1)
        c_own.append(float(torch.nn.functional.cosine_similarity(own, loo, dim=0)))
        c_ref.append(float(torch.nn.functional.cosine_similarity(prev[i], loo, dim=0)))
    ref = scalar_median(torch.tensor(c_ref, dtype=torch.float64))
    if not ref > 0:
        return 1.0
    ratio = scalar_median(torch.tensor(c_own, dtype=torch.float64)) / ref
    turn = min(1.0, max(0.0, ratio)) if math.isfinite(ratio) else 1.0
    # (1 + x)(1 + x/q) = 1/ref², q = k − 1: the root x = r² >= 0 of x²/q + (1 + 1/q) x + 1 − 1/ref² = 0
    q = k - 1
    b = 1.0 + 1.0 / q
    r2 = max(0.0, (-b + math.sqrt(b * b - 4.0 / q * (1.0 - 1.0 / (ref * ref)))) * q / 2.0)
    return turn / math.sqrt((1.0 + r2 / (k + 1)) * (1.0 + r2 / max(1, honest_now)))


def drift_scale(stand_ins: torch.Tensor) -> float:
    """ĝ: an estimate of how much longer this round's honest rows are than the previous round's.

    ĝ = ‖s_0‖₂ / median_{i ≥ 1} ‖s_i‖₂

    where s_0 is the attacker's own honest Δ of this round and s_1, …, s_k the stand-ins from the previous
    round (:func:`honest_stand_ins`). The one row of this round the attacker has is its witness of the round's
    scale. Why: pseudo-gradients shrink as training converges, and the guard's norm test compares a row with
    this round's median norm; measured on digits (10 peers, 3 ``adaptive``, Dirichlet 0.5, seed 0) the median
    fell 15-30 % a round in rounds 3-5, so rows sized 0.9 × 3 × the previous round's median reached 3.03-3.24 ×
    this round's and were rejected for their norm.

    Args:
        stand_ins: ``(h, d)`` float tensor, row 0 the attacker's own Δ; not mutated.

    Returns:
        ĝ ``>= 0`` (a Python float); 1.0 with fewer than two previous-round rows (as :func:`drift_cosine`) or
        when their median norm is 0.
    """
    if len(stand_ins) < 3:
        return 1.0
    norms = torch.linalg.vector_norm(stand_ins.to(torch.float64), dim=1)
    ref = scalar_median(norms[1:])
    return float(norms[0]) / ref if ref > 0 else 1.0


def drifted_stand_ins(
    stand_ins: torch.Tensor, u: torch.Tensor, w: torch.Tensor, cos_delta: float, seed: int
) -> torch.Tensor:
    """The stand-ins turned by δ̂ = arccos(``cos_delta``) in the plane of û and a direction ê ⟂ û, ŵ.

    x' = x + ((a cos δ̂ − b sin δ̂) − a) û + ((a sin δ̂ + b cos δ̂) − b) ê,   a = ⟨x, û⟩,  b = ⟨x, ê⟩

    where ê is a Gaussian direction (drawn from ``seed``) with its û and ŵ parts removed. A rotation: norms,
    pairwise distances and the rows' spread are kept, and their mean turns by δ̂ away from û in a direction
    orthogonal to the attack's plane (û, ŵ), so a candidate cos φ · û + sin φ · ŵ meets the turned honest mean at
    cosine cos φ · cos δ̂: the model of :func:`drift_cosine`, where the round's turn is unrelated to the
    attacker's harmful direction. The attack then judges its candidates against these rows with the real guard.

    Args:
        stand_ins: ``(h, d)`` float tensor; not mutated.
        u: ``(d,)`` float64 unit vector û.
        w: ``(d,)`` float64 unit vector ŵ ⟂ û.
        cos_delta: cos δ̂ in [0, 1].
        seed: seed of ê (the attack passes its context generator's initial seed; no draw is taken from it).

    Returns:
        ``(h, d)`` tensor, dtype of ``stand_ins``; ``stand_ins`` itself when cos δ̂ ≥ 1 or d < 3 (no
        direction ⟂ û, ŵ exists).
    """
    d = int(stand_ins.shape[1])
    if cos_delta >= 1.0 or d < 3:
        return stand_ins
    g = torch.randn(d, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    g = g - torch.dot(g, u) * u
    g = g - torch.dot(g, w) * w
    e = _unit(g)
    if e is None:
        return stand_ins
    cos_d = max(0.0, cos_delta)
    sin_d = math.sqrt(max(0.0, 1.0 - cos_d * cos_d))
    x = stand_ins.to(torch.float64)
    a = x @ u
    b = x @ e
    out = x + ((a * cos_d - b * sin_d) - a)[:, None] * u + ((a * sin_d + b * cos_d) - b)[:, None] * e
    return out.to(stand_ins.dtype)


def honest_models(
    stand_ins: torch.Tensor, u: torch.Tensor, w: torch.Tensor, ctx: AttackContext
) -> tuple[torch.Tensor, ...]:
    """The two models of this round's honest rows a white-box attack judges its candidates on.

    (S, R_δ̂(S_ĝ)),   S_ĝ = (s_0, ĝ·s_1, …, ĝ·s_k)

    where
        - S are the stand-ins (:func:`honest_stand_ins`), s_0 the attacker's own Δ of this round;
        - ĝ = :func:`drift_scale` (S): the previous round's rows scaled to this round's length (pseudo-gradients
          shrink 15-30 % a round early in training, and the guard's norm test compares with this round's median);
        - R_δ̂ = :func:`drifted_stand_ins` with cos δ̂ = :func:`drift_cosine` (S, n − f): all rows turned by the
          estimated drift of the honest centre, out of the attack's plane (û, ŵ).

    A candidate passes only if the peers' guard accepts it on both: the turned model binds where the guard wants
    a positive cosine (the previous round's rows put the centre where it was), the model as it is where the
    target cosine is ≤ 0 (the turn shrinks every cosine towards 0). Used by :class:`Adaptive` and by
    ``alie:z=search`` (:class:`~p2p_guard.attacks.update.ALittleIsEnough`).

    Args:
        stand_ins: ``(h, d)`` float tensor, row 0 the attacker's own Δ; not mutated.
        u: ``(d,)`` float64 unit vector û, the stand-ins' mean direction.
        w: ``(d,)`` float64 unit vector ŵ ⟂ û, the attack's harmful direction.
        ctx: ``n`` and ``f`` (h' = n − f honest rows this round); ê's seed is ``ctx.generator.initial_seed()``
            (no draw is taken).

    Returns:
        ``(S,)`` when neither a turn nor a change of length is estimated (T̂ = 1, ĝ = 1), else ``(S, R_δ̂(S_ĝ))``.
    """
    turn, scale = drift_cosine(stand_ins, max(1, ctx.n - ctx.f)), drift_scale(stand_ins)
    if turn >= 1.0 and scale == 1.0:
        return (stand_ins,)
    scaled = torch.cat([stand_ins[:1], stand_ins[1:] * scale]) if scale != 1.0 else stand_ins
    return (stand_ins, drifted_stand_ins(scaled, u, w, turn, ctx.generator.initial_seed()))


COPY_JITTER = 0.3
"""j: the white-box attacks add noise of norm j × the typical distance between the rows they know to what they
send (:func:`jitter_copy`), so that two attackers' rows lie about √2·j = 0.42 × apart, beyond the ρ = 0.25 at
which the semantic guard's duplicate stage (:mod:`p2p_guard.guard.duplicates`) groups rows."""


def simulated_guard(ctx: AttackContext) -> Guard:
    """The honest peers' guard: ``build_guard(ctx.guard_name or "semantic", **ctx.guard_params)``.

    The real rule, built by the registry from the same spec and parameters the peers use (no copy of its
    stages, so the simulation follows every change of the guard: its f̂ = ⌊(n − 1)/2⌋ when not told f, the
    centre, the verdict thresholds, the direction weights). For the ``semantic`` guard (also as a spec with
    parameters, ``"semantic:cos_min=0.5"``) the duplicate stage is left out unless the spec or
    ``ctx.guard_params`` sets it: the simulation stacks identical candidate copies, and the attack's own
    :func:`jitter_copy` keeps its real copies apart enough that the stage does not group them.
    """
    spec = ctx.guard_name or DEFAULT_GUARD
    name, spec_params = parse_guard_spec(spec)
    params = dict(ctx.guard_params)
    if name == "semantic" and "duplicates" not in spec_params:
        params.setdefault("duplicates", False)
    return build_guard(spec, **params)


def jitter_copy(row: torch.Tensor, known: torch.Tensor, generator: torch.Generator,
                fraction: float = COPY_JITTER, single_distance: float | None = None) -> torch.Tensor:
    """``row + e``, e a random direction of norm ``fraction`` × the typical distance between the known rows.

    How a colluding group keeps its copies from looking like copies: each attacker draws its own e (from its own
    generator), so two attackers' rows differ by about √2 · ``fraction`` typical distances, while their mean
    keeps the planned shift (the noise averages out over the group).

    Args:
        row: ``(d,)`` the planned attack row; not mutated.
        known: ``(m, d)`` the rows the attacker knows (own update first); with ``m < 2`` there is no distance to
            measure: ``single_distance`` stands for it, and without one the row is returned as is (right when
            the row still carries the attacker's own update, which differs from its colluders').
        generator: the attacker's generator (one draw of ``d`` normals is taken).
        fraction: j ``>= 0``.
        single_distance: the typical distance to use when ``m < 2`` (``>= 0``), or None.

    Returns:
        ``(d,)`` tensor, dtype of ``row``.
    """
    if fraction == 0 or (len(known) < 2 and single_distance is None):
        return row.clone()
    distance = typical_distance(pairwise_distances(known)) if len(known) >= 2 else float(single_distance or 0.0)
    scale = distance * fraction
    noise = torch.randn(row.shape, generator=generator, dtype=torch.float64)
    norm = float(torch.linalg.vector_norm(noise))
    if norm == 0 or not math.isfinite(scale):
        return row.clone()
    return (row.to(torch.float64) + noise * (scale / norm)).to(row.dtype)


def simulate_round(
    guard: Guard, honest: torch.Tensor, attack: torch.Tensor, ctx: AttackContext
) -> GuardResult:
    """Run ``guard`` on stand-in honest rows followed by candidate attack rows.

    Args:
        guard: from :func:`simulated_guard`.
        honest: ``(h, d)`` stand-ins for the honest rows.
        attack: ``(a, d)`` candidate attack rows, same dtype.
        ctx: the round and f̂ (``ctx.guard_f``) the peers use; the guard's generator is seeded from
            ``ctx.generator.initial_seed()`` (no draw is taken from ``ctx.generator``).

    Returns:
        The guard's result; the last ``a`` verdicts are those of the attack rows.
    """
    rows = torch.cat([honest, attack])
    senders = tuple(f"sim-{i:04d}" for i in range(len(rows)))  # sorted order = row order
    agg_ctx = AggregationContext(
        senders=senders,
        round=ctx.round,
        generator=torch.Generator().manual_seed(ctx.generator.initial_seed()),
        f=ctx.guard_f,
    )
    return guard(rows, agg_ctx)


@dataclass(frozen=True)
class GuardThresholds:
    """The checks of the ``semantic`` guard an adaptive attacker must pass.

    Args:
        c_clip: rows longer than c_clip × median norm are clipped (``inf`` when the magnitude stage is off).
        c_reject: rows longer than c_reject × median norm are rejected (``inf`` with the verdict stage off).
        cos_min: rows whose cosine with the robust centre is below it are rejected (−1 with the verdict off).
        cos_full: accepted rows whose cosine is below it weigh less than 1 in the aggregate (``cos_min`` when the
            direction weights are off).
    """

    c_clip: float
    c_reject: float
    cos_min: float
    cos_full: float = -1.0


def guard_thresholds(guard: Guard) -> GuardThresholds:
    """Read the clipping and verdict thresholds of a guard.

    For the ``semantic`` guard, its own fields (stages switched off give no constraint). Every other rule has
    no such thresholds; the ``semantic`` defaults are returned as a stealth envelope (a row inside them looks
    like an honest one to a norm or direction test).
    """
    rule = guard.aggregator if isinstance(guard.aggregator, SemanticGuard) else SemanticGuard()
    return GuardThresholds(
        c_clip=rule.c_clip if rule.magnitude else math.inf,
        c_reject=rule.c_reject if rule.verdict else math.inf,
        cos_min=rule.cos_min if rule.verdict else -1.0,
        cos_full=max(rule.cos_full, rule.cos_min) if rule.verdict and rule.direction_weights
        else (rule.cos_min if rule.verdict else -1.0),
    )


def _unit(v: torch.Tensor) -> torch.Tensor | None:
    norm = torch.linalg.vector_norm(v)
    return v / norm if norm > 0 else None


def harmful_direction(h: torch.Tensor | None, u: torch.Tensor, seed: int) -> torch.Tensor:
    """ŵ: the unit part of ``h`` orthogonal to û, the direction a white-box attack turns its row towards.

    When ``h`` is None or (nearly) parallel to û, the part orthogonal to û of a Gaussian direction drawn from
    ``seed``; −û when d = 1 (no orthogonal direction exists; the only harm left is −û).

    Args:
        h: ``(d,)`` float64 direction (−σ̂ for the attacks here), or None; not mutated.
        u: ``(d,)`` float64 unit vector û.
        seed: seed of the Gaussian direction.

    Returns:
        ``(d,)`` float64 unit vector.
    """
    if h is not None:
        orth = h - torch.dot(h, u) * u
        if float(torch.linalg.vector_norm(orth)) > 1e-12 * float(torch.linalg.vector_norm(h)):
            return orth / float(torch.linalg.vector_norm(orth))
    g = torch.randn(len(u), generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    w = _unit(g - torch.dot(g, u) * u)
    return -u if w is None else w


@dataclass(frozen=True, kw_only=True)
class Adaptive:
    """White-box attack on the ``semantic`` guard: turn from the honest direction as far as its checks allow.

    v(φ) = ρ · (cos φ · û + sin φ · ŵ),   φ* = max {φ ∈ [0, φ_hi] : v(φ) passes}
    ρ = β · min(c_clip, c_reject) · ν̂

    where
        - S are the honest stand-ins (:func:`honest_stand_ins`: own Δ of this round and the previous round's
          rows nearest the coordinate-wise median), μ̂ their mean and û = μ̂ / ‖μ̂‖;
        - ν̂ is the smaller of the median norms of the two models of this round's honest rows below (S, and S
          with its previous-round rows scaled by ĝ, :func:`drift_scale`), an estimate of the round's median
          norm (the guard's scale), and β = ``norm_fraction``;
        - ŵ is the harmful direction orthogonal to û: the part of −σ̂ (σ̂ the coordinate-wise standard
          deviation of S, ALIE's direction) orthogonal to û, or with ``direction="fixed"`` (or when σ̂ gives
          none) the part of a fixed Gaussian direction drawn from ``seed`` orthogonal to û;
        - c_clip, c_reject, cos_min are the guard's thresholds (:func:`guard_thresholds`: read from the
          peers' guard, ``build_guard(ctx.guard_name, **ctx.guard_params)``; the ``semantic`` defaults 2, 3,
          0 for any other rule);
        - v(φ) *passes* when (a) the peers' guard (:func:`simulated_guard`: the real rule, built from the
          peers' spec and parameters), simulated on each of two models of this round's honest rows plus f
          copies of v(φ) (:func:`simulate_round`), accepts every copy with a cosine to its robust centre ≥ κ =
          max(cos_min + margin, cos_full) (cos_full: where the guard's direction weights reach 1, so the row
          counts whole) and a norm within c_clip × its median norm (no clipping: the row keeps its full
          length). The two models: S as it is, and S with its previous-round rows scaled by ĝ and all rows
          turned by the estimated drift between the previous round's centre and this one's
          (:func:`drift_scale`, :func:`drift_cosine`, :func:`drifted_stand_ins`). The turned model
          binds where κ > 0 (a guard with a raised ``cos_min``: the rows of the previous round put the centre
          where it was, and a row aimed at κ with it meets this round's centre lower); the model as it is
          binds where κ ≤ 0 (the turn shrinks every cosine towards 0, so alone it would let the row go past
          π/2 further than the real centre allows, measured on digits: rows at −0.4 to −0.7, rejected); (b) when
          S holds fewer than n − f rows (the attacker has not seen a full round, e.g. round 0, so a
          simulation would be dominated by its own copies), also cos(v, μ̂) ≥ κ, i.e. φ_hi = arccos(κ),
          else φ_hi = π; and (c) when ``ctx.loss_probe`` is given,
          loss(θ − η·v) ≤ loss(θ − η·Δ_own) + ``loss_slack`` on the attacker's own data (it beats a
          loss-delta test, which compares with an honest update, by that margin).

    The optimisation: the norm is fixed at the largest that stays unclipped (a longer row is clipped, a
    shorter one pulls less), so only the angle φ from the honest direction is searched. φ = 0 is an
    honest-looking row; as φ grows the row carries less progress and more of the harmful direction; past π/2
    it pulls backwards (its cosine with the robust centre can stay above cos_min because the f copies pull the
    centre towards themselves, which the simulation accounts for). If φ_hi passes it is taken at once;
    otherwise bisection (10 halvings, 0.2° apart: at most 12 simulated rounds) finds the boundary of the
    passing angles. If not even φ = 0 passes, the attacker sends μ̂ (the stand-ins' mean, which looks honest).

    Measured on synthetic rounds (n = 10, f = 3, d = 500, honest pairwise cosine 0.2–0.8, previous-round
    mean at cosine 0.5–0.95 from this round's, previous-round norms 0.8–1.25× this round's; 4 seeds): the
    simulation's passing boundary lay 10–60° inside the real one, the default guard accepted all 216 adaptive
    rows, and they moved its aggregate by 0.28–0.71 ‖μ‖ from the honest mean μ (ALIE with the formula's z:
    0.12–0.39; min-max: 0.17–0.60). Against ``semantic:cos_min=0.5`` (``tests/unit/test_attacks_suite.py``,
    d = 200, previous mean at cosine 0.8, seeds 0-2, 3 attackers) the simulation on S alone aimed at 0.60 and
    the real guard met the rows at 0.40-0.51 and rejected 8 of 9; with the turned model it accepted all 9, at
    0.55-0.73.

    Measured in the benchmark's cell (``python docs/scripts/adaptive_cells.py``, whose docstring has the table:
    ``run_cell`` on digits, 10 peers, Dirichlet 0.5, 12 rounds, f not told; seeds 0 / 1): with the previous round's
    rows taken as they are (main at 9e8e978) the default guard rejected the attack's rows 77 / 63 times at 3 of
    10 and 48 / 30 at 4 of 10, and ended at 91.9 / 85.3 % and 91.9 / 83.9 %; with both models and the round-0
    jitter 21 / 49 and 0 / 0 times, at 92.5 / 85.8 % and 90.0 / 83.9 % (seeds 0-4: cells −1.9 to +1.1 points from
    before, means +0.3 and −0.3). Passing the checks is the attack's objective, not the damage. The coordinate-wise
    median under the same attack: 88.6 / 82.8 % and 75.3 / 58.3 %.

    Knowledge: white-box. It knows the guard's configuration (name, parameters, f̂) and n and f; it sees its
    own honest Δ of this round and the previous round's rows (commit-before-reveal), never this round's honest
    rows.
    All colluders compute the same construction from their own knowledge (no coordination beyond the seed).

    Args:
        margin: how far above cos_min the row's cosine must stay, in ``[0, 2]`` (0.1).
        norm_fraction: β, the fraction of the unclipped radius the row uses, in ``(0, 1]`` (0.9: the round's
            median norm is estimated from stand-ins, partly of the previous round).
        direction: ``"std"`` (−σ̂, default) or ``"fixed"`` (seeded, the same every round: time-coupled).
        seed: seed of the fixed direction, ``>= 0``.
        loss_slack: allowed loss excess over the attacker's honest Δ when ``ctx.loss_probe`` is given, nats
            ``>= 0`` (0: no worse than an honest update on the attacker's data).

    Raises:
        ValueError: on a parameter out of range (the message names it).

    References:
        Nicholas Carlini, Anish Athalye, Nicolas Papernot, et al. On Evaluating Adversarial Robustness.
        arXiv:1902.06705, 2019 (adaptive, white-box evaluation of a defence).
        Virat Shejwalkar, Amir Houmansadr. Manipulating the Byzantine: Optimizing Model Poisoning Attacks and
        Defenses for Federated Learning. NDSS 2021 (AGR-tailored attacks: the largest perturbation the known
        aggregation rule still accepts).
        Moran Baruch, Gilad Baruch, Yoav Goldberg. A Little Is Enough. NeurIPS 2019. arXiv:1902.06156 (−σ).
    """

    kind: ClassVar[str] = "update"
    margin: float = 0.1
    norm_fraction: float = 0.9
    direction: str = "std"
    seed: int = 0
    loss_slack: float = 0.0

    def __post_init__(self) -> None:
        """Check the fields (ValueError naming the field and its value)."""
        if check_real("margin", self.margin, minimum=0.0, inclusive=True) > 2.0:
            raise ValueError(f"margin must be in [0, 2], got {self.margin!r}")
        if check_real("norm_fraction", self.norm_fraction, minimum=0.0) > 1.0:
            raise ValueError(f"norm_fraction must be in (0, 1], got {self.norm_fraction!r}")
        if self.direction not in _DIRECTIONS:
            raise ValueError(f"direction must be one of {_DIRECTIONS}, got {self.direction!r}")
        check_int("seed", self.seed, minimum=0)
        check_real("loss_slack", self.loss_slack, minimum=0.0, inclusive=True)

    def __call__(self, known: torch.Tensor, ctx: AttackContext) -> torch.Tensor:
        """Return v(φ*) plus this attacker's :func:`jitter_copy` noise e, a ``(d,)`` tensor of the dtype of ``known``.

        With ``ctx.loss_probe``, the loss bound (c) of the class docstring is kept after the jitter too: when
        v + e breaks it, v − e is sent (to first order the noise then lowers the loss by what it raised it), and
        v itself when that breaks it as well. (Found when the drift model changed which angle the search
        ends at: ``tests/unit/test_attacks_suite.py::TestAdaptive::test_loss_probe_bounds_the_loss`` had v
        0.005 inside the bound and v + e 0.004 outside it.)
        """
        plan = self.plan(known, ctx)
        # one known row (round 0): its norm stands for the typical distance (rows at pairwise cosine 1/2 lie one
        # norm apart), since a plan turned away from the own row by φ = π/2 shares only the seeded or σ̂ direction
        # with the colluders' plans and would otherwise come out as their copy
        own_norm = float(torch.linalg.vector_norm(known[0], dtype=torch.float64))
        row = jitter_copy(plan, known, ctx.generator, single_distance=own_norm)
        if ctx.loss_probe is not None:
            bound = ctx.loss_probe(known[0]) + self.loss_slack
            if ctx.loss_probe(row) > bound:
                mirrored = 2 * plan - row
                row = mirrored if ctx.loss_probe(mirrored) <= bound else plan
        return row

    def plan(self, known: torch.Tensor, ctx: AttackContext) -> torch.Tensor:
        """Return v(φ*) (the row every attacker of the group plans, before its jitter)."""
        check_known(known)
        guard = simulated_guard(ctx)
        th = guard_thresholds(guard)
        stand_ins = honest_stand_ins(known, ctx)
        s64 = stand_ins.to(torch.float64)
        mean = s64.mean(dim=0)
        u = _unit(mean)
        if u is None:
            return mean.to(known.dtype)
        w = self._harmful_direction(s64, u)
        models = honest_models(stand_ins, u, w, ctx)
        radius_scale = min(th.c_clip, th.c_reject)
        if not math.isfinite(radius_scale):
            radius_scale = 1.0  # no magnitude test at all: the honest scale keeps it unremarkable
        nu = min(scalar_median(torch.linalg.vector_norm(m.to(torch.float64), dim=1)) for m in models)
        rho = self.norm_fraction * radius_scale * nu
        target_cos = min(1.0, max(th.cos_min + self.margin, th.cos_full))  # full weight, if the guard weighs
        copies = max(1, ctx.f)
        phi_hi = math.pi if len(stand_ins) >= max(1, ctx.n - ctx.f) else math.acos(max(-1.0, target_cos))
        own_loss = ctx.loss_probe(known[0]) if ctx.loss_probe is not None else None

        def candidate(phi: float) -> torch.Tensor:
            return (rho * (math.cos(phi) * u + math.sin(phi) * w)).to(known.dtype)

        def passes(phi: float) -> bool:
            v = candidate(phi)
            for honest in models:
                result = simulate_round(guard, honest, v.expand(copies, -1), ctx)
                sim_median = scalar_median(torch.tensor([vd.norm for vd in result.verdicts], dtype=torch.float64))
                for vd in result.verdicts[-copies:]:
                    if not vd.accepted or vd.cosine < target_cos - 1e-9 or vd.norm > th.c_clip * sim_median:
                        return False
            if ctx.loss_probe is not None and own_loss is not None:
                return ctx.loss_probe(v) <= own_loss + self.loss_slack
            return True

        if passes(phi_hi):
            return candidate(phi_hi)
        if not passes(0.0):
            return mean.to(known.dtype)
        lo, hi = 0.0, phi_hi
        for _ in range(10):
            mid = (lo + hi) / 2
            if passes(mid):
                lo = mid
            else:
                hi = mid
        return candidate(lo)

    def _harmful_direction(self, stand_ins: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
        """ŵ: a float64 unit vector orthogonal to ``u`` (see the class docstring)."""
        use_std = self.direction == "std" and len(stand_ins) >= 2
        return harmful_direction(-stand_ins.std(dim=0, correction=1) if use_std else None, u, self.seed)
