"""The ``semantic`` guard (the default): robust centre → verdict → loss check → aggregate → self-anchor.

It is never told how many peers are Byzantine. Each stage is a small function of its own module, switchable by
a constructor flag so that its worth can be measured:

0. duplicates (:mod:`~p2p_guard.guard.duplicates`): reject every row within ρ = 0.25 × the typical pairwise
   distance of another sender's row (one vector sent by several senders: ``mimic``, IPM, ALIE, min-max), before
   the centre is computed, so copies neither vote in the centre nor enter the aggregate. Measured on digits
   (10 peers, Dirichlet 0.5, 12 rounds, seed 0): ``mimic`` at 4 of 10 65.6 % → 86.6 %, ``alie`` at 4 of 10
   66.5 % → 86.6 %, ``ipm:epsilon=0.1`` at 3 of 10 89.8 % → 92.1 %, clean 93.6 % both; the white-box attacks
   (``alie:z=search``, ``adaptive``) jitter their copies past it (:func:`~p2p_guard.attacks.whitebox.jitter_copy`);
1. magnitude (:mod:`~p2p_guard.guard.magnitude`, **off by default**): clip every row to c_clip × the median
   row norm (the full benchmark's ablation of 2026-11-30 measured nothing for it);
2. robust centre (:mod:`~p2p_guard.guard.centre`): NNM + coordinate-wise trimmed mean at f̂ = ⌊(n − 1)/2⌋
   (:func:`~p2p_guard.guard.base.breakdown_f`) unless an expert sets f: correct for every f < n/2, where
   the former f̂ = ⌊n/4⌋ let mixing blend attacker rows into every honest row once f > f̂. The copies the
   duplicate stage found count against f̂ (``duplicate_credit``, on): a group of g rows holds at most one honest
   row, so the centre of the rows left is at f̂' = min(f̂ − k, ⌊(|U| − 1)/2⌋), k = Σ (g − 1), where it was at
   min(f̂, ⌊(|U| − 1)/2⌋). Why: with 4 copies of 10 rejected (``min_max`` at 4 of 10, Dirichlet 0.5, seed 0) the
   6 rows left are honest, and NNM + trimmed mean at f̂' = 2 of 6 (each row mixed with its 3 nearest, then the
   middle 2 values of each coordinate) gave receiver peer00 a centre whose cosine with their mean fell from
   0.96 to 0.26-0.72 in rounds 4-11, so honest rows fell below cosine 0 with it and the direction weights
   (stage 4c) summed to 5.04-5.72 of 6 in rounds 5-11; at f̂' = 1 (the credit: one group of 4, k = 3) the same
   rows give 0.93-0.99 in every round (``python docs/scripts/centre_probe.py --attack min_max --f 4 --guard
   semantic:duplicate_credit=False``; with the credit the guard's centre is at 0.95-0.99 and W = 6 in rounds
   1-11). Measured on digits (10 peers, 12 rounds,
   ``docs/scripts/adaptive_cells.py``'s docstring, "Copies count against f̂"): ``min_max`` at 4 of 10 seed 0
   86.4 % → 90.6 % (median 87.8 %), the one Dirichlet 0.5 cell of the rule-1 list it lifts; over the 60
   seed-cells of the attacks the stage groups (``min_max``, ``min_sum``, ``alie``, ``ipm:epsilon=0.1``,
   ``mimic`` at 3 and 4 of 10, seeds 0-2, Dirichlet 0.5 and 0.1) the mean moves +1.3 points on Dirichlet 0.5
   (88.1 → 89.4 %, no cell lower by more than 0.7) and +1.2 on 0.1 (55.9 → 57.1 %, at worst −2.0; −3.6 on
   ``min_max`` at 4 of 10 seed 3), and the honest rows the verdict stage rejected in the 36 seed-cells of
   ``min_sum``, ``alie`` and ``ipm:epsilon=0.1`` fall from 43 to 0; cells where no group forms are unchanged
   bit for bit (clean, ``adaptive``, ``alie:z=search``, ``sign_flip``, ``null_space``, ``backdoor``, and
   ``ipm:epsilon=100``, whose rows the verdict stage rejects for their norm);
3. verdict (:mod:`~p2p_guard.guard.verdict`): reject a row whose raw norm exceeds c_reject × the median norm
   or whose cosine with the centre is below cos_min; the receiver's own row is never rejected;
3b. support check (:func:`~p2p_guard.guard.verdict.support_outliers`, on when ``ctx.own_reference`` is given):
   reject a *sparse* row (a decoded ``topk`` payload) whose cosine with the receiver's own dense update,
   taken on the row's own support, is below cos_min, or whose norm exceeds c_sparse = 1.3 × the median norm
   (honest topk rows with error feedback come out nearly the same length). Dense rows never meet it. Why:
   on decoded topk rows with error feedback the two tests of stage 3 fail (:mod:`~p2p_guard.guard.verdict`);
   measured with ``p2p-guard bench wire`` (8 workers, 2 sending ``sign_flip:scale=10``, seed 0), the support
   cosine alone rejected 203/240 flipped rows at density 1 % and 173/240 at 2 %, with the length bound
   237/240 and 240/240, and the length bound rejected no honest row;
4. loss check (:mod:`~p2p_guard.guard.loss_score`, **off by default**, and run only when ``ctx.loss_at`` is
   given): reject a row whose step raises the receiver's private held-out loss by more than c_loss × what its
   own update lowers it and beyond the other rows' losses; every verdict then carries the row's loss score
   (for reputation). Measured on digits (9 peers, Dirichlet 0.5, 12 rounds, seed 0): it cost 0 to 7 points
   (alie:z=search at 4 of 9: 77.4 % with it, 81.8 % without; clean 86.0 % both) and about 9 % of a round's
   compute, because non-IID honest rows also raise the receiver's loss; it stays available for the peer;
4b. collusion (:mod:`~p2p_guard.guard.collusion`): reject a sender whose residual from the centre, accumulated
   over rounds (per receiver and sender, from the third round a pair has met), points the way two other
   senders' do (history cosine ≥ τ = 0.6 with each; cross-round FoolsGold). It is what stops the white-box
   attacks: on digits (10 peers, 12 rounds, seeds 0-4, ``docs/scripts/adaptive_cells.py``'s docstring) it
   rejects every ``alie:z=search`` and ``adaptive`` row from round 2 on at 3 and 4 of 10 on Dirichlet 0.5,
   where the guard without it accepted nearly all of them (``alie:z=search`` at 3 of 10: 0.896 → 0.909 mean,
   median 0.897, now at or above the median on every seed). It rejected no honest row in the 190 cells measured
   (Dirichlet 0.1 and 0.5, seeds 0-4: clean, and ``alie:z=search``, ``adaptive``, ``sign_flip`` ×1 and ×10,
   ``ipm:epsilon=100``, ``min_max``, ``null_space``, ``backdoor``, ``label_flip`` at 3 and 4 of 10), left the
   guard at or above the median wherever it was, and moved the mean over the 180 attack cells by −0.06 points;
   it never fires on ``sign_flip`` ×10, IPM, min-max or ``backdoor`` (ASR unchanged: it does not stop it).
   Its one cost: on Dirichlet 0.1 at 4 of 10 the white-box attackers' rows, which the guard accepted without
   it, carried their senders' own data (the attack is weak there), so rejecting them costs 5.6 points
   (``adaptive``, 0.579 → 0.523) and 2.3 (``alie:z=search``, 0.558 → 0.536), down to what rejecting every
   attacker row gives there (``sign_flip:scale=10``, all its rows rejected by the verdict: 0.522; median 0.306
   and 0.395). Groups of 3 (``collusion_group``): g = 2 rejected an honest pair with the same labels on
   Dirichlet 0.1 (16.7 % of the honest verdicts of one clean cell, :mod:`~p2p_guard.guard.collusion`).
   ``collusion_merge_copies`` (on since 2026-12-07) counts the rows of one duplicate group as one partner: under
   ``mimic`` the copies of an honest peer's previous row otherwise make it a "colluder" (docs/threat-model.md
   §3.7a; unchanged to the digit under ``alie:z=search`` and ``adaptive`` and on clean cells);
4c. direction weights (:func:`~p2p_guard.guard.verdict.direction_weights`): an accepted row weighs
   (cos − cos_min) / (cos_full − cos_min), clamped to [0, 1], in the aggregate (the own row 1): a ramp instead of
   the direction test's cliff, so a row just above the floor (a sign flip of an honest-norm update under non-IID
   shards) pulls little; measured there (digits, 3 of 10, Dirichlet 0.5, floor −0.2 then): ``sign_flip`` 85.3 % →
   89.5 %, ``null_space`` 85.0 % → 89.8 %, clean 93.6 % → 93.1 %, clean on Dirichlet 0.1 unchanged (81.9 %).
   The ramp spares a sender with a record along the centre (:class:`~p2p_guard.guard.verdict.DirectionRecord`):
   when its mean cosine with the centre over the rounds this receiver has judged it, this one included, is at
   least cos_record = 0.1, its row weighs 1 whatever this round's cosine (``direction_record``, on since
   2026-12-07). Why: the ramp alone made the guard fall late over 40 rounds. Near convergence honest
   pseudo-gradients are mostly noise, and from round 11 on 1-4 honest rows per receiver sit below cosine 0 with
   the centre (rotating among the senders) and were weighed down every round; the guard then ended below the
   median under ``adaptive`` at 3 of 10 (Dirichlet 0.5, seeds 0 and 2) even with every attacker row rejected.
   Turning the ramp off mended that but cost 3.3 points on Dirichlet 0.1 at 12 rounds, where what the ramp damps
   is sign-flipped rows, whose cosine is negative round after round (their record is negative from round 0),
   while an honest sender's late negative rounds follow many positive ones. Measured (digits, 10 peers, seeds 0 1
   2; ramp alone → with the record; ``docs/scripts/adaptive_cells.py``, "The direction record", has the commands
   and every cell): ``adaptive`` at 3 of 10 over 40 rounds 0.874 0.876 0.868 → 0.936 0.881 0.964 (median 0.914
   0.839 0.869); on Dirichlet 0.1 at 12 rounds, 3 of 10, ``sign_flip`` ×1 0.621 → 0.624 and ``null_space`` 0.608 →
   0.603 (means; without the ramp 0.580 and 0.531); clean on Dirichlet 0.1, seeds 0-4, 9 honest rows of 5400
   rejected (at most 9 of 1080 a seed). Clean over 40 rounds (Dirichlet 0.5) the benchmark's cell shows no gain
   (0.926 0.975 0.936 → 0.916 0.975 0.931) because it runs the guard for two receivers only while their results
   agree (shared θ, :mod:`p2p_guard.bench.cell`), so the other receivers' records start when the cell switches to
   one call per receiver: with every receiver judged from round 0, as in a swarm, seeds 0 1 2 end at 0.925 0.929
   0.936 → 0.954 0.947 0.944 (the plain mean 0.956 0.972 0.956). Its cost at 12 rounds: the mean over the attack
   cells of issue 9 (3 and 4 of 10, seeds 0-2) moves −0.15 points on Dirichlet 0.5 (48 seed-cells) and −0.42 on
   Dirichlet 0.1 (18; the ramp off: −3.30), the largest losses on Dirichlet 0.5 seed 0 at 3 of 10 (``sign_flip``
   ×1 0.908 → 0.886, ``null_space`` 0.907 → 0.856), where the ramp had been damping two honest senders' dips, not
   the attackers' rows, and it is below the median in no cell where the ramp alone is not. cos_record 0 spared the
   honest senders of clean Dirichlet 0.1 seed 3 whose rows drift steadily against the centre from round 5 (their
   means fall from 0.32 to 0.01 by round 10) and 27 of its 1080 honest rows were then rejected, as with the ramp
   off; 0.1 rejects 9 there (0.2: 18). Its known gap: an attacker that first builds a record (rows along the
   centre) then gets its rows at cosines −0.3 .. 0 in whole, as with the ramp off, until its mean falls below
   cos_record. ``sleeper`` does that (honest for k rounds, then a sign flip; 12 rounds, 3 of 10, seeds 0-2, means,
   ramp alone → record, median): Dirichlet 0.1 k = 3 0.650 → 0.615 (0.440), k = 6 0.674 → 0.643 (0.421);
   Dirichlet 0.5 k = 3 0.866 → 0.867 (0.834), k = 6 0.879 → 0.854 (0.858; seed 2 0.869 → 0.861 against the
   median's 0.903, below it either way). A decayed record (``record_decay`` 0.8) did not close it (k = 3 on
   Dirichlet 0.1: 0.574) and brought the 40-round fall back (``adaptive`` at 3 of 10 seed 0: 0.879, median
   0.914), so the record is the plain mean. The ``adaptive`` attack does not build a record (it aims at cosine
   ``cos_full``, where every row weighs 1).
   The record's other end (``cos_record_floor``, **off by default**): a sender whose record is below the floor
   weighs 0 whatever this round's cosine. Measured at −0.05 and −0.1 (2026-12-07, digits, 10 peers, 12 rounds,
   f not told; ``python docs/scripts/adaptive_cells.py --attack A --fractions 2 3 4 --seeds 0 1 2 --guards
   semantic semantic:cos_record_floor=-0.05``, and ``--partition dirichlet:0.1``, ``--fractions 0``; final
   accuracy, means over the seed-cells): ``sign_flip:scale=1`` and ``null_space`` on Dirichlet 0.5 (18 cells)
   0.857 → 0.860 (−0.05) and 0.852 (−0.1); by fraction 0.884 → 0.901 at 2 of 10, 0.875 → 0.873 at 3, 0.811 →
   0.805 at 4 (seed 2 at 4 of 10: 0.830 → 0.716 in the final round, but 0.756 → 0.772 over the last 4 rounds, a
   cell that swings ±10 points a round); ``sign_flip:scale=1`` at 3 of 10 on Dirichlet 0.1 (3 cells) 0.619 →
   0.638; ``sleeper``, ``adaptive``, ``alie:z=search``, ``mimic``: unchanged (no sleeper's record falls below it
   in 12 rounds). No honest row was floored in any of these cells nor in the clean ones (Dirichlet 0.5 seeds 0-2,
   0.1 seeds 0-4: equal to the digit); over 40 clean rounds on Dirichlet 0.1 −0.05 floored 9 and 54 honest rows
   on seeds 2 and 3 at no cost (0.811 → 0.814, 0.800 → 0.800), −0.1 none. Within the seeds' noise, so it stays
   off; on the acceptance seed (0) alone it lifts ``null_space`` 0.867 → 0.913 at 2 of 10 and 0.792 → 0.833 at 4;
   Reversals (:mod:`~p2p_guard.guard.reversal`, ``reversal`` and ``reject_reversed``, on since 2026-12-08): a row
   whose cosine with its sender's previous row at this receiver is below ``cos_reverse`` (−0.5) is rejected and its
   sender's record restarts at that round, which closes the gap above: honest consecutive rows were at 0.58 or
   more, a ``sleeper``'s flip at −0.9; ``sleeper`` at 3 of 10 went from 0.861 to 0.889 (seeds 0-2, mean), at 4 of
   10 from 0.783 to 0.847 (the module's docstring has each cell);
5. aggregate: the (weighted) mean of the accepted rows when the verdict rejected f̂ rows or more; otherwise one step of
   centered clipping around the robust centre, radius c_radius = 1.5 × the accepted rows' median distance to it,
   which caps the pull of hidden inliers (ALIE); if every row was rejected, the own row (else the centre). With f
   unknown, f̂ = ⌊(n − 1)/2⌋ almost always exceeds the rejections, so the clipping almost always applies: on the
   digits cells below the plain mean was 0.7 to 2.1 points better in 4 of 5 (single seed, within noise), but on
   synthetic omniscient ALIE rounds it is the plain mean, which the clipping beats
   (``tests/unit/test_guard.py::TestTargets``), so it stays on;

   the radius (1.5, it was 1: half the rows clipped) and the direction floor (``cos_min`` −0.3, it was −0.2) were
   set by the heterogeneity cells (``python docs/scripts/het_cells.py``: digits, 10 peers, 12 rounds, no attacker,
   Dirichlet 0.1, seeds 0-4; its docstring has the tables). Under such label skew the rows of honest peers with
   classes of their own lie far from the centre and, late in training, at cosines −0.3 to −0.4 with it; clipping
   them to the median distance and rejecting them below −0.2 cost 1.7 points against the plain mean (72.9 % vs
   74.6 %; seeds 0-9: 74.9 % vs 76.3 %); the new pair costs nothing (74.6 %; seeds 0-9: 76.4 %), honest false
   positives 0.17 % → 0. Each change alone recovered 0.4-0.5 points (the direction weights off or ``cos_full``
   −0.1: 0.5-0.6; the duplicate stage or the self-anchor off: nothing). Under attack (Dirichlet 0.5, 3 and 4 of
   10, seeds 0-3, mean accuracy): worst at 3 of 10 87.0 % → 87.4 %, at 4 of 10 76.3 % → 80.6 % (both
   ``sign_flip:scale=1``; ``null_space`` at 4 of 10 78.9 % → 80.9 %), no attack of ``sign_flip`` 1 and 10,
   ``null_space``, ``mimic``, ``alie``, ``ipm:epsilon=0.1``, ``adaptive`` lower by more than 0.4 points, clean
   92.9 % → 93.3 %;
5b. noise (:mod:`~p2p_guard.guard.noise`, **off by default**): FLAME's Gaussian noise, λ × the median row
   norm per coordinate, drawn from ``ctx.generator`` and added to the aggregate before self-anchoring; with
   ``magnitude=True, c_clip=1`` it is FLAME's clip-and-noise (Nguyen et al. 2022). Measured against
   ``backdoor`` at 3 of 10 on digits (seeds 0-2, ``docs/scripts/backdoor_cells.py``): λ = 0.01 leaves ASR at
   0.46-0.78 and costs 15-21 points of clean accuracy, so it stays off;
6. self-anchoring (:mod:`~p2p_guard.guard.anchor`): Δ̂_i = Δ_i + clip(a − Δ_i, c_anchor · ‖Δ_i‖), so one
   round moves the peer at most 2‖Δ_i‖ from its own update even under a Byzantine majority (c_anchor = 2
   never bound in the cells measured, so it costs nothing there; c_anchor = 1 bound and cost 10 points
   under alie:z=search at 4 of 9).

Stages 0, 3, 3b, 4, 4b and 6 read ``ctx.own_index`` (3b also ``ctx.own_reference``, 4 the receiver's private data),
so two honest peers given the same rows may apply different updates (round protocol version 2 allows it: each peer
owns its model). Stages 4b and 4c keep state across rounds (residual histories and direction records, per receiver
and sender), so the guard is a deterministic function of this round's rows and of the rounds the same guard object
judged before (carried across a peer's restart by :meth:`SemanticGuard.state_dict` in its checkpoint); without
``own_index``, ``own_reference`` and ``loss_at``, and with ``collusion=False``, of this round's rows alone.

Extension points: ``checks`` (extra per-row tests after the verdict; :class:`RowCheck`) and ``anchor`` (a map
applied after self-anchoring; :class:`Anchor`).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import torch

from p2p_guard.guard.anchor import SelfAnchor
from p2p_guard.guard.base import (
    AggregationContext,
    GuardResult,
    breakdown_f,
    check_int,
    check_real,
    check_stack,
)
from p2p_guard.guard.baselines.centered_clipping import centered_clip
from p2p_guard.guard.centre import robust_centre
from p2p_guard.guard.collusion import CollusionCheck, ResidualHistory
from p2p_guard.guard.duplicates import DUPLICATE, DUPLICATE_RATIO, find_duplicates
from p2p_guard.guard.linalg import cosines_to, row_norms, scalar_median
from p2p_guard.guard.loss_score import LOSS_WORSE, loss_rejections, score_rows
from p2p_guard.guard.magnitude import clip_rows
from p2p_guard.guard.noise import add_noise
from p2p_guard.guard.reversal import COS_REVERSE, ReversalMemory
from p2p_guard.guard.state import GuardStateError, version_of
from p2p_guard.guard.verdict import (
    OUTLIER,
    SPARSE_MAX,
    DirectionRecord,
    direction_weights,
    make_verdicts,
    outlier_rows,
    support_outliers,
)

logger = logging.getLogger(__name__)

__all__ = ["Anchor", "RowCheck", "SemanticGuard"]

_STATE_VERSION = 1


@runtime_checkable
class RowCheck(Protocol):
    """Extension point: a per-row test run after the verdict stage.

    Attributes:
        reason: the word recorded in a rejecting :class:`~p2p_guard.guard.base.Verdict`.
    """

    reason: str

    def __call__(
        self, updates: torch.Tensor, centre: torch.Tensor, ctx: AggregationContext
    ) -> dict[int, str]:
        """Test the rows.

        Args:
            updates: ``(n, d)`` raw rows, in the order of ``ctx.senders``; not mutated.
            centre: ``(d,)`` robust centre.
            ctx: the round's context.

        Returns:
            Row index → detail for each row the check rejects.
        """
        ...


@runtime_checkable
class Anchor(Protocol):
    """Extension point: map the aggregate to the update this peer applies (after self-anchoring)."""

    def __call__(
        self, aggregate: torch.Tensor, updates: torch.Tensor, ctx: AggregationContext
    ) -> torch.Tensor:
        """Return the ``(d,)`` update to apply, given the aggregate and the ``(n, d)`` rows."""
        ...


@dataclass(frozen=True, kw_only=True)
class SemanticGuard:
    """Find a robust centre, reject outliers and harmful rows, clip the rest, anchor on our own update.

    x̃_i = x_i · min(1, c_clip · m / ‖x_i‖₂),                 m = median_{j∈U} ‖x_j‖₂ (magnitude stage, off)
    U   = {i : i = o  or  no j ≠ i has ‖x_i − x_j‖₂ ≤ ρ · t}     t the typical distance (duplicate stage)
    c   = TM_f̂'(NNM_f̂'(x̃_i : i ∈ U)),  f̂' = min(max(0, f̂ − k), ⌊(|U| − 1)/2⌋),  k = Σ_groups (|group| − 1)
    A   = {i : i = o  or  (i ∈ U  and  ‖x_i‖₂ ≤ c_reject · m  and  cos(x_i, c) ≥ cos_min  and  s_i ≥ cos_min
                            and  (x_i dense  or  ‖x_i‖₂ ≤ c_sparse · m)  and  ℓ_i ≤ ℓ_0 + c_loss · g)}
    w_i = clamp((cos(x_i, c) − cos_min) / (cos_full − cos_min), 0, 1),  w_o = 1,  W = Σ_{i∈A} w_i
    w_i = 1  when  m_{o,i} ≥ cos_record,  m_{o,i} the mean of cos(x_i, c) over the rounds o judged i (this one too)
    w_i = 0  when  m_{o,i} < cos_record_floor
    a   = (1/W) Σ_{i∈A} w_i x̃_i                                   if n − |A| ≥ f̂
    a   = c + (1/W) Σ_{i∈A} w_i (x̃_i − c) · min(1, τ / ‖x̃_i − c‖₂)  otherwise,
          τ = c_radius · median_{i∈A} ‖x̃_i − c‖₂
    a'  = a + λ · m · z,  z ~ N(0, I) from ctx.generator        (noise stage, λ = ``noise``, off: λ = 0)
    out = x_o + (a' − x_o) · min(1, c_anchor · ‖x_o‖₂ / ‖a' − x_o‖₂)

    where
        - x_1, …, x_n are the raw rows (pseudo-gradients) and o = ``ctx.own_index`` the receiver's own row
          (without one, the terms in o are dropped and out = a);
        - f̂ = ``f``, else ``ctx.f`` (an expert override), else :func:`~p2p_guard.guard.base.breakdown_f`
          = ⌊(n − 1)/2⌋: never the true f, which no peer knows;
        - NNM and TM are nearest-neighbour mixing and the coordinate-wise trimmed mean;
        - k counts the rows of the duplicate stage's groups beyond one each (Byzantine for certain: no two honest
          rows come that close; :attr:`~p2p_guard.guard.duplicates.Duplicates.copies`), 0 with
          ``duplicate_credit`` off or the duplicate stage off;
        - ℓ_i, ℓ_0 and g = max(ℓ_0 − ℓ_o, ε) are the receiver's private losses after row i's step, without a
          step, and its own gain (:mod:`~p2p_guard.guard.loss_score`; only when ``ctx.loss_at`` is given);
        - s_i = ⟨x_i, r⟩ / (‖x_i‖₂ ‖r ⊙ 1[x_i ≠ 0]‖₂), r = ``ctx.own_reference`` (the receiver's own dense Δ_i),
          when x_i is sparse (at most ``sparse_max`` · d non-zero entries) and r is given; else s_i = +∞;
        - m_{o,i} is receiver o's record of sender i (:class:`~p2p_guard.guard.verdict.DirectionRecord`; none,
          hence the ramp, without ``ctx.own_index`` or with ``direction_record`` off);
        - A is the set of accepted rows; the collusion stage (module docstring, stage 4b) and the ``checks``
          remove from it the rows they reject, never o.

    Why centered clipping when fewer than f̂ rows were rejected: up to f̂ − (n − |A|) Byzantine rows may hide
    among the accepted ones with a bounded norm and a direction along the centre (ALIE-style inliers); one
    step of centered clipping around the robust centre (Karimireddy et al. 2021) caps each such row's pull at
    τ/|A|. Why the anchor: when the sample has a Byzantine majority, the centre itself may be poisoned; the
    final clip keeps the applied update within c_anchor · ‖x_o‖ of the receiver's own, so a round can cost at
    most a bounded step and can never be worse than a bounded perturbation of "own update only".

    Defaults:
        - ``c_reject = 3``: rejection for length for rows clearly off the honest scale (scaling, ×10 flips).
        - ``c_sparse = 1.3``: the same for sparse rows, which honest senders' error feedback makes nearly equal
          in length (:mod:`~p2p_guard.guard.verdict`, sparse rows: honest at most 1.22 × the median, ×10 flips
          late in training 1.07-1.4 ×). ``p2p-guard bench wire`` (digits, 8 workers, 2 of them sending
          ``sign_flip:scale=10`` or ``alie``, seed 0), guard worst case against fp32's at topk 1 / 2 / 5 %:
          −3.89 / −2.13 / −0.88 points without it, −1.76 / −0.97 / −0.32 with it (seed 1: −3.10 / −0.69 /
          −0.65; topk 1 % loses 1.67 points on that seed with no attacker at all).
        - ``cos_min = -0.3``: a row is rejected for its direction only when it points clearly against the
          centre. Near convergence honest pseudo-gradients are mostly noise and their cosines with the centre
          reach below 0 (down to −0.14 by round 11 in a live 12-peer digits run); with ``cos_min = 0`` 10-20 %
          of honest rows were rejected per round after round 10 (12 peers, digits, 40 rounds, in one process:
          ``docs/scripts/consensus_options.py --peers 12 --m 8 --rounds 40``), with −0.2 0.3 % (accuracy
          0.9616 vs 0.9637). Under strong label skew (Dirichlet 0.1) honest rows reach −0.3 to −0.4 late in
          training, so the floor is −0.3 since the heterogeneity cells (stage 5 of the module docstring).
          Sign flip and IPM rows sit near −0.8 to −1; a row at −0.3 or above with a bounded norm is left to the
          direction weights and the centered clipping.
        - ``c_radius = 1.5``: the centered clipping's radius, in medians of the accepted rows' distances to the
          centre; at 1 half the rows were clipped, among them every honest row of a peer with classes of its own
          (stage 5 of the module docstring).
        - ``c_loss = 1``, ``c_mad = 3`` (loss stage, when on): a row is rejected when its step raises our
          held-out loss by more than our own step lowers it and by more than 3 robust standard deviations
          above the rows' median loss.
        - ``c_anchor = 2``: an aggregate up to twice our update's length away from it is applied whole.

    If the verdict rejects every row, the aggregate is the own row (else the robust centre; logged).

    Args:
        f: Byzantine rows tolerated (f̂), an expert override; ``None`` takes ``ctx.f``, else
            ``breakdown_f(n)``.
        duplicates: run the duplicate stage (default on).
        duplicate_ratio: ρ of the duplicate stage, ``>= 0`` (0: only bit-identical rows are copies).
        duplicate_credit: count the copies the duplicate stage found (k above) against f̂ for the robust centre
            (default on; off: the centre of the rows left is at min(f̂, ⌊(|U| − 1)/2⌋), as before stage 2's
            credit, module docstring).
        magnitude: run the magnitude stage (default off: rows enter the centre and the aggregate unclipped).
        mixing: apply NNM before the trimmed mean of the centre stage.
        verdict: run the verdict stage (off: every row passes it).
        direction_weights: weigh each accepted row by its cosine's place between ``cos_min`` and ``cos_full``
            (off: every accepted row weighs 1).
        cos_full: the cosine from which an accepted row weighs 1, in [-1, 1] (at or below ``cos_min``, e.g. after
            an expert raised ``cos_min``, every weight is 1). The weights need the verdict stage (its cosines).
        direction_record: spare from the ramp an accepted row whose sender's record (its mean cosine with the
            centre over the rounds this receiver judged it) is at least ``cos_record`` (default on; needs the
            direction weights and ``ctx.own_index``); the record is state this guard object keeps across rounds,
            keyed by (receiver, sender) PeerID and bounded (:class:`~p2p_guard.guard.verdict.DirectionRecord`).
        cos_record: the record from which a sender's row weighs 1, in [-1, 1] (0.1; module docstring, stage 4c).
        reversal: restart a sender's direction record when its row reverses its previous one at this receiver
            (cosine below ``cos_reverse``; :mod:`~p2p_guard.guard.reversal`; default on, with the record).
        cos_reverse: the cosine with the sender's previous row below which its row is a reversal, in [-1, 1)
            (−0.5).
        reject_reversed: also reject a reversed row (reason ``outlier``, the detail naming the reversal; default
            on; off: its sender's record restarts and the row goes on through the guard).
        cos_record_floor: the record below which a sender's accepted row weighs 0, in [-1, cos_record] (-1, the
            default: off; module docstring, stage 4c, for what -0.05 measured).
        record_decay: γ of the record, in (0, 1]: each earlier judged round weighs γ times the next (1, the default:
            the plain mean; module docstring, stage 4c, for what 0.8 measured).
        clip_remaining: clip around the centre when fewer than f̂ rows were rejected (off: always the plain
            mean of the accepted rows).
        support_check: run the support check (stage 3b) on sparse rows when ``ctx.own_reference`` is given
            and the verdict stage is on.
        sparse_max: ρ_max of the support check, in (0, 1]: rows with at most ``sparse_max · d`` non-zero
            entries count as sparse.
        loss_check: run the loss stage when ``ctx.loss_at`` is given (default off, see the module docstring).
        anchoring: clip the aggregate around the own row (when ``ctx.own_index`` is set).
        c_clip: clipping multiple of the median norm, ``> 0``.
        c_reject: rejection multiple of the median norm, ``> 0``.
        c_sparse: rejection multiple of the median norm for sparse rows (stage 3b), ``> 0``; needs
            ``support_check`` and ``ctx.own_reference``, like the rest of stage 3b.
        cos_min: least cosine with the centre, in ``[-1, 1]``.
        c_loss: loss tolerance in units of our own gain, ``> 0``.
        c_mad: loss-outlier tolerance in robust standard deviations of the rows' losses, ``> 0``.
        c_anchor: anchor radius in units of the own row's norm, ``> 0``.
        c_radius: radius of the centered clipping in units of the accepted rows' median distance to the centre,
            ``> 0`` (``radius_scale`` of :func:`~p2p_guard.guard.baselines.centered_clipping.centered_clip`).
        collusion: run the collusion stage (default on); its history is state this guard object keeps
            across rounds, keyed by (receiver, sender) PeerID and bounded (:class:`~p2p_guard.guard.collusion.
            ResidualHistory`).
        c_collusion: τ of the collusion stage, the history cosine at which a sender is rejected, in (0, 1].
        collusion_rounds: rounds of history a sender needs before the collusion stage compares it, ``>= 1``.
        collusion_group: g of the collusion stage, ``>= 2``: a sender is rejected only when at least g − 1 other
            senders (never the own row) each reach τ with it (3, the default: two partners; 2: any aligned
            pair, the stage's original rule, which rejected honest pairs under Dirichlet 0.1).
        collusion_decay: γ of the collusion stage's history, in (0, 1] (1: a plain sum over rounds).
        collusion_merge_copies: the rows of one duplicate-stage group count as one partner in the collusion
            stage (default on; :meth:`~p2p_guard.guard.collusion.CollusionCheck.__call__`'s ``copies``): under
            ``mimic`` the copies of an honest peer's previous row are otherwise its two aligned partners, and
            the stage rejects it as ``colluding`` every round (docs/threat-model.md §3.7a). Needs the duplicate
            stage.
        noise: λ of the noise stage, ``>= 0`` (0: off, the default): Gaussian noise of standard deviation
            λ × the median row norm added to the aggregate (FLAME; :mod:`~p2p_guard.guard.noise`).
        checks: extension point, per-row tests run after the verdict stage (empty by default).
        anchor: extension point, applied to the final aggregate (``None`` by default).

    Raises:
        ValueError: on a parameter out of range (the message names it).

    References:
        Youssef Allouah, Sadegh Farhadkhani, Rachid Guerraoui, Nirupam Gupta, Rafaël Pinot, John Stephan.
        Fixing by Mixing: A Recipe for Optimal Byzantine ML under Heterogeneity. AISTATS 2023.
        arXiv:2302.01772.
        Sai Praneeth Karimireddy, Lie He, Martin Jaggi. Learning from History for Byzantine Robust
        Optimization. ICML 2021. arXiv:2012.10333.
        Cong Xie, Sanmi Koyejo, Indranil Gupta. Zeno++: Robust Fully Asynchronous SGD. ICML 2020.
        arXiv:1903.07020.
        Lie He, Sai Praneeth Karimireddy, Martin Jaggi. Byzantine-Robust Decentralized Learning via
        ClippedGossip. 2022. arXiv:2202.01545.
        Thien Duc Nguyen et al. FLAME: Taming Backdoors in Federated Learning. USENIX Security 2022.
        arXiv:2101.02281.
    """

    f: int | None = None
    duplicates: bool = True
    duplicate_ratio: float = DUPLICATE_RATIO
    duplicate_credit: bool = True
    magnitude: bool = False
    mixing: bool = True
    verdict: bool = True
    support_check: bool = True
    sparse_max: float = SPARSE_MAX
    clip_remaining: bool = True
    loss_check: bool = False
    anchoring: bool = True
    c_clip: float = 2.0
    c_reject: float = 3.0
    c_sparse: float = 1.3
    cos_min: float = -0.3
    direction_weights: bool = True
    cos_full: float = 0.0
    direction_record: bool = True
    cos_record: float = 0.1
    cos_record_floor: float = -1.0
    record_decay: float = 1.0
    reversal: bool = True
    cos_reverse: float = COS_REVERSE
    reject_reversed: bool = True
    c_loss: float = 1.0
    c_mad: float = 3.0
    c_anchor: float = 2.0
    c_radius: float = 1.5
    collusion: bool = True
    c_collusion: float = 0.6
    collusion_rounds: int = 3
    collusion_group: int = 3
    collusion_decay: float = 1.0
    collusion_merge_copies: bool = True
    noise: float = 0.0
    checks: tuple[RowCheck, ...] = ()
    anchor: Anchor | None = None
    _collusion: CollusionCheck | None = field(default=None, init=False, repr=False, compare=False)
    _record: DirectionRecord | None = field(default=None, init=False, repr=False, compare=False)
    _reversals: ReversalMemory | None = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        """Check the fields (ValueError naming the field and its value); build the collusion stage's state."""
        if self.f is not None:
            check_int("f", self.f, minimum=0)
        flags = ("duplicates", "duplicate_credit", "magnitude", "mixing", "verdict", "support_check",
                 "direction_weights", "direction_record", "reversal", "reject_reversed", "clip_remaining", "loss_check",
                 "anchoring", "collusion", "collusion_merge_copies")
        for flag in flags:
            if not isinstance(getattr(self, flag), bool):
                raise ValueError(f"{flag} must be a bool, got {getattr(self, flag)!r}")
        if check_real("sparse_max", self.sparse_max, minimum=0.0) > 1.0:
            raise ValueError(f"sparse_max must be in (0, 1], got {self.sparse_max!r}")
        check_real("duplicate_ratio", self.duplicate_ratio, minimum=0.0, inclusive=True)
        check_real("c_clip", self.c_clip, minimum=0.0)
        check_real("c_reject", self.c_reject, minimum=0.0)
        check_real("c_sparse", self.c_sparse, minimum=0.0)
        if check_real("cos_min", self.cos_min, minimum=-1.0, inclusive=True) > 1.0:
            raise ValueError(f"cos_min must be in [-1, 1], got {self.cos_min!r}")
        if check_real("cos_full", self.cos_full, minimum=-1.0, inclusive=True) > 1.0:
            raise ValueError(f"cos_full must be in [-1, 1], got {self.cos_full!r}")
        if check_real("cos_record", self.cos_record, minimum=-1.0, inclusive=True) > 1.0:
            raise ValueError(f"cos_record must be in [-1, 1], got {self.cos_record!r}")
        if check_real("cos_record_floor", self.cos_record_floor, minimum=-1.0, inclusive=True) > self.cos_record:
            raise ValueError(f"cos_record_floor must be in [-1, cos_record = {self.cos_record!r}], "
                             f"got {self.cos_record_floor!r}")
        if check_real("record_decay", self.record_decay, minimum=0.0) > 1.0:
            raise ValueError(f"record_decay must be in (0, 1], got {self.record_decay!r}")
        check_real("c_loss", self.c_loss, minimum=0.0)
        check_real("c_mad", self.c_mad, minimum=0.0)
        check_real("c_anchor", self.c_anchor, minimum=0.0)
        check_real("c_radius", self.c_radius, minimum=0.0)
        check_real("noise", self.noise, minimum=0.0, inclusive=True)
        for check in self.checks:
            if not isinstance(check, RowCheck):
                raise ValueError(f"checks must hold RowCheck objects (reason, __call__), got {check!r}")
        if self.anchor is not None and not callable(self.anchor):
            raise ValueError(f"anchor must be callable, got {self.anchor!r}")
        # built either way, so a bad value fails whether or not the stage is on
        stage = CollusionCheck(tau=self.c_collusion, min_rounds=self.collusion_rounds, group=self.collusion_group,
                               decay=self.collusion_decay)
        if self.collusion:
            object.__setattr__(self, "_collusion", stage)
        reversals = ReversalMemory(cos_reverse=self.cos_reverse)  # built either way: a bad value always fails
        if self.direction_record:
            object.__setattr__(self, "_record", DirectionRecord(decay=self.record_decay))
            if self.reversal:
                object.__setattr__(self, "_reversals", reversals)

    def state_dict(self) -> dict[str, Any]:
        """The state stages 4b and 4c keep across rounds, as plain values and tensors (the peer's checkpoint).

        Returns:
            ``{"version": 1, "direction_record": DirectionRecord.state_dict() or None, "collusion":
            ResidualHistory.state_dict() or None}`` (None: that stage is off). Bounded: at most 4096 pairs of the
            record (a few floats each) and 1024 pairs, 1 GiB, of collusion history (one ``(d,)`` float64 a pair).
        """
        return {"version": _STATE_VERSION,
                "direction_record": None if self._record is None else self._record.state_dict(),
                "collusion": None if self._collusion is None else self._collusion.history.state_dict()}

    def load_state_dict(self, state: Mapping[str, Any], *, numel: int | None = None) -> None:
        """Restore :meth:`state_dict`'s output; every part is checked before either is replaced.

        A part saved while its stage was on and given to a guard with that stage off is ignored (nothing holds
        it); a stage that is on and finds no part (None) starts empty.

        Args:
            state: as :meth:`state_dict` returns.
            numel: d of the model when known (the collusion histories must be ``(numel,)``).

        Raises:
            GuardStateError: (a ``ValueError``) on anything :meth:`DirectionRecord.load_state_dict` or
                :meth:`ResidualHistory.load_state_dict` refuses, or another version.
        """
        if version_of(state) != _STATE_VERSION:
            got = state.get("version") if isinstance(state, Mapping) else type(state).__name__
            raise GuardStateError(f"semantic guard: not a state of version {_STATE_VERSION} (got {got!r})")
        record = None if self._record is None else DirectionRecord(decay=self._record.decay,
                                                                   max_entries=self._record.max_entries)
        if record is not None and state.get("direction_record") is not None:
            record.load_state_dict(state["direction_record"])
        history = None
        if self._collusion is not None:
            old = self._collusion.history
            history = ResidualHistory(decay=old.decay, max_entries=old.max_entries, max_bytes=old.max_bytes)
            if state.get("collusion") is not None:
                history.load_state_dict(state["collusion"], numel=numel)
        if record is not None:
            object.__setattr__(self, "_record", record)
        if self._collusion is not None and history is not None:
            self._collusion.history = history

    def __call__(self, updates: torch.Tensor, ctx: AggregationContext) -> torch.Tensor:
        """Return only the aggregate of :meth:`judge`.

        Raises:
            NotEnoughUpdates: unless ``n > 2f̂`` (always holds without an explicit f, for ``n >= 1``).
        """
        return self.judge(updates, ctx).aggregate

    def resolved_f(self, ctx: AggregationContext, n: int) -> int:
        """f̂ of this call: ``f``, else ``ctx.f``, else ``breakdown_f(n)``."""
        if self.f is not None:
            return self.f
        if ctx.f is not None:
            return ctx.f
        return breakdown_f(n)

    def judge(self, updates: torch.Tensor, ctx: AggregationContext) -> GuardResult:
        """Run the pipeline.

        Args:
            updates: ``(n, d)`` float tensor, one row per sender in the order of ``ctx.senders``; not mutated.
            ctx: the round's context (``own_index``, ``loss_at`` and ``f`` are read when set).

        Returns:
            The ``(d,)`` update to apply (dtype of ``updates``) and one verdict per row; a verdict's cosine is
            taken with the robust centre, and its ``loss_score`` is set when the loss stage ran.

        Raises:
            NotEnoughUpdates: unless ``n > 2f̂``.
        """
        f = self.resolved_f(ctx, len(updates))
        check_stack(updates, f, needed_rows=2 * f + 1, needed="n > 2f")
        own = ctx.own_index
        norms = row_norms(updates)
        rejected: dict[int, tuple[str, str]] = {}
        copies = 0  # rows the duplicate stage found Byzantine for certain (at least), counted against f̂ for the centre
        copy_groups: tuple[tuple[int, ...], ...] = ()
        if self.duplicates:
            groups = find_duplicates(updates, ctx.senders, own, ratio=self.duplicate_ratio)
            copy_groups = groups.groups
            rejected.update({i: (DUPLICATE, detail) for i, detail in groups.rejected.items()})
            if self.duplicate_credit:
                copies = groups.copies
        unique = [i for i in range(len(updates)) if i not in rejected]  # the rows no other sender also sent
        median_norm = scalar_median(norms[unique] if unique else norms)
        clipped = clip_rows(updates, norms, self.c_clip * median_norm) if self.magnitude else updates
        if not unique:  # only possible without an own row: every row was a copy; nothing is applied
            centre = torch.zeros_like(updates[0])
        else:
            centre = robust_centre(
                clipped if len(unique) == len(updates) else clipped[unique],
                min(max(0, f - copies), breakdown_f(len(unique))),
                mixing=self.mixing,
            )
        cosines = cosines_to(updates, centre, norms)

        if self.verdict:
            found = outlier_rows(norms, cosines, median_norm, c_reject=self.c_reject, cos_min=self.cos_min)
            for i, detail in found.items():
                if i != own:
                    rejected.setdefault(i, (OUTLIER, detail))
            if self.support_check and ctx.own_reference is not None:
                sparse, _ = support_outliers(
                    updates, ctx.own_reference, cos_min=self.cos_min, sparse_max=self.sparse_max,
                    max_norm=self.c_sparse * median_norm,
                )
                for i, detail in sparse.items():
                    if i == own or (i in rejected and rejected[i][0] != OUTLIER):
                        continue
                    # one reason, every figure that decided
                    rejected[i] = (OUTLIER, f"{rejected[i][1]}; {detail}" if i in rejected else detail)
        scores = None
        if self.loss_check and ctx.loss_at is not None:
            scores = score_rows(updates, own, ctx.loss_at)
            for i, detail in loss_rejections(scores, own, c_loss=self.c_loss, c_mad=self.c_mad).items():
                rejected.setdefault(i, (LOSS_WORSE, detail))
        for check in self.checks:
            for i, detail in check(updates, centre, ctx).items():
                if i != own:
                    rejected.setdefault(i, (check.reason, detail))
        if self._collusion is not None:
            merged = copy_groups if self.collusion_merge_copies else ()
            for i, detail in self._collusion(updates, centre, ctx, merged).items():
                if i != own:
                    rejected.setdefault(i, (self._collusion.reason, detail))

        for i, detail in self._reversals_of(updates, ctx).items():
            if self.reject_reversed:
                rejected.setdefault(i, (OUTLIER, detail))
        records = self._records(cosines, ctx)
        aggregate = self._aggregate(clipped, centre, cosines, rejected, f, ctx, records)
        if self.noise > 0:
            aggregate = add_noise(aggregate, median_norm, self.noise, ctx.generator)
        if self.anchoring:
            aggregate = SelfAnchor(c_anchor=self.c_anchor)(aggregate, updates, ctx)
        if self.anchor is not None:
            aggregate = self.anchor(aggregate, updates, ctx)

        if self.verdict:
            detail = f"norm within {self.c_reject:g} x median {median_norm:.4g}, cosine >= {self.cos_min:g}"
        else:
            detail = "verdict stage off"
        verdicts = make_verdicts(
            ctx.senders, norms, cosines, rejected, detail, None if scores is None else scores.scores, records
        )
        return GuardResult(aggregate=aggregate, verdicts=verdicts)

    @property
    def _weighs_directions(self) -> bool:
        """Whether stage 4c weighs the accepted rows by their cosines (and so keeps the direction record)."""
        return self.verdict and self.direction_weights and self.cos_full > self.cos_min

    def _reversals_of(self, updates: torch.Tensor, ctx: AggregationContext) -> dict[int, str]:
        """The rows that reverse their sender's previous row at this receiver, each with a detail.

        Their senders' direction records restart at this round (:mod:`~p2p_guard.guard.reversal`). Empty where the
        record is not kept.
        """
        if self._reversals is None or self._record is None or ctx.own_index is None or not self._weighs_directions:
            return {}
        receiver = ctx.senders[ctx.own_index]
        found = self._reversals.reversed(receiver, ctx.senders, updates, ctx.own_index, ctx.round)
        for i in found:
            self._record.restart(receiver, ctx.senders[i])
        return {i: f"reverses its previous row (cosine {cosine:.2f} < {self.cos_reverse:g})"
                for i, cosine in found.items()}

    def _records(self, cosines: torch.Tensor, ctx: AggregationContext) -> dict[int, float]:
        """Add this round's cosines to the direction record; each other row's record (empty when none is kept).

        The record is kept only where the direction weights use it (stage 4c, with ``ctx.own_index``).
        """
        if self._record is None or ctx.own_index is None or not self._weighs_directions:
            return {}
        receiver = ctx.senders[ctx.own_index]
        return {i: self._record.add(receiver, ctx.senders[i], ctx.round, c)
                for i, c in enumerate(cosines.tolist()) if i != ctx.own_index}

    def _aggregate(
        self,
        clipped: torch.Tensor,
        centre: torch.Tensor,
        cosines: torch.Tensor,
        rejected: dict[int, tuple[str, str]],
        f: int,
        ctx: AggregationContext,
        records: dict[int, float],
    ) -> torch.Tensor:
        accepted = [i for i in range(len(clipped)) if i not in rejected]
        if not accepted:  # only possible without an own row (the own row is never rejected)
            logger.warning("round %d: every row rejected; applying the robust centre (zero if every row was a copy)",
                           ctx.round)
            return centre
        kept = clipped if len(accepted) == len(clipped) else clipped[accepted]  # no copy when all are kept
        weights = None
        if self._weighs_directions:
            own = accepted.index(ctx.own_index) if ctx.own_index in accepted else None
            weights = direction_weights(cosines[accepted], own, cos_min=self.cos_min, cos_full=self.cos_full)
            for k, i in enumerate(accepted):
                if i not in records:  # our own row, or no record kept
                    continue
                if records[i] >= self.cos_record:  # NaN: no record, the ramp
                    weights[k] = 1.0
                elif records[i] < self.cos_record_floor:
                    weights[k] = 0.0
        if self.clip_remaining and len(rejected) < f:
            return centered_clip(kept, centre, None, 1, weights, self.c_radius)
        if weights is None:
            return kept.mean(dim=0)
        # summed in float32 at least: a float16 sum of rows overflows where their mean (float32 inside) does not
        wide = torch.promote_types(kept.dtype, torch.float32)
        total = (weights.to(kept.dtype)[:, None] * kept).sum(dim=0, dtype=wide)
        return (total / float(weights.sum())).to(kept.dtype)
