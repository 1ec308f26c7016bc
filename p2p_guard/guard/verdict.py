"""Verdict stage: which rows are outliers, and the :class:`Verdict` records that say so.

A row is an outlier when it is too long or points away from the robust centre:

    reject_i  ⇔  ‖x_i‖₂ > c_reject · median_j ‖x_j‖₂   or   cos(x_i, centre) < cos_min

where
    - x_i is sender i's raw row (before clipping), so that a scaled update is caught even though clipping
      already bounded its effect;
    - median_j ‖x_j‖₂ is the median norm of the round's rows (own included; in the ``semantic`` guard, of the rows
      its duplicate stage kept, :mod:`p2p_guard.guard.duplicates`);
    - centre is the robust centre of :mod:`p2p_guard.guard.centre`;
    - c_reject > 1 and cos_min ∈ [−1, 1) are the stage's thresholds.

The norm test catches scaling and large sign-flip attacks; the direction test catches sign flip, IPM and
anything else that points against the consensus of the majority, whatever its norm.

**Sparse rows** (:func:`support_outliers`). A decoded ``topk`` row is zero outside the 1-5 % of coordinates its
sender chose, and with error feedback those are the largest coordinates of its accumulated residual, which
differ from sender to sender (measured on digits, 8 workers, ``topk:density=0.01``: 2-3 % of two honest rows'
supports overlap after round 10). Both tests above then fail: the rows are nearly orthogonal, so every cosine
with a centre is near 0 (a ×10 sign flip's fell from −0.5 to 0 and above), and error feedback makes honest rows
long (their norm grew 8× over 20 rounds, to the norm of a ×10 flip of one round's top-k, sent without it). A
sparse row is therefore also judged against the receiver's own dense update on the row's own support:

    reject_i  ⇔  nnz(x_i) ≤ ρ_max · d   and   ( ⟨x_i, r⟩ / (‖x_i‖₂ ‖r ⊙ 1[x_i ≠ 0]‖₂) < cos_min
                                               or  ‖x_i‖₂ > c_sparse · m )

where r is the receiver's own pseudo-gradient before its codec (``AggregationContext.own_reference``), ρ_max the
density up to which a row counts as sparse, m the median row norm and c_sparse (``max_norm`` = c_sparse · m) a
length bound much tighter than the dense rows' c_reject = 3. Dense rows (fp32, fp16, int8, int4) never meet
these tests. Why the tighter bound: an honest topk row is the top ρ·d coordinates of an error-feedback
accumulator, 2-bit quantized per chunk, and such rows come out nearly the same length. Measured with
``bench wire`` (digits, 8 workers, 2 sending ``sign_flip:scale=10``, 20 rounds, seed 0): the honest rows' norm over
the round's median was at most 1.06 / 1.22 (topk 1 / 2 %, Dirichlet 0.5; 1.08 / 1.12 at Dirichlet 0.1), while the
flips' was at least 1.07 / 1.37 (5 % quantile 1.13 / 1.42): late in training a flip's support cosine is no longer
negative (the flipped one-round top-k and the receiver's accumulated update share little), so only its length
gives it away. c_sparse = 1.3 took the flips rejected from 203 / 173 of 240 to 237 / 240 of 240 at no honest row
(IID, seed 0).
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from p2p_guard.guard.base import Verdict
from p2p_guard.guard.linalg import support_cosines
from p2p_guard.guard.state import GuardStateError, entries_of, key_of, real_of, round_of

__all__ = [
    "NOT_SELECTED",
    "OUTLIER",
    "SPARSE_MAX",
    "DirectionRecord",
    "direction_weights",
    "finite_or_none",
    "make_verdicts",
    "outlier_rows",
    "support_outliers",
]

OUTLIER = "outlier"
"""Reason given to a row rejected by a statistical test (the semantic guard's verdict stage)."""

NOT_SELECTED = "not_selected"
"""Reason given to a row a rule left out to keep a fixed number of rows (Multi-Krum keeps the m best-scored).

A quota, not a test: some row is left out every round whatever the rows are, so on honest rows alone honest senders
are. The reputation counts it as no evidence (``protocol.reasons.QUOTA_REASONS``)."""


def outlier_rows(
    norms: torch.Tensor,
    cosines: torch.Tensor,
    median_norm: float,
    *,
    c_reject: float,
    cos_min: float,
) -> dict[int, str]:
    """Apply the norm and direction tests to every row.

    Args:
        norms: ``(n,)`` float64 raw row norms.
        cosines: ``(n,)`` float64 cosines of the raw rows with the robust centre.
        median_norm: median of ``norms``.
        c_reject: a row longer than ``c_reject × median_norm`` is rejected.
        cos_min: a row whose cosine is below ``cos_min`` is rejected.

    Returns:
        Row index → detail (the figures that decided) for each rejected row; accepted rows are absent.
    """
    limit = c_reject * median_norm
    rejected: dict[int, str] = {}
    for i, (norm, cos) in enumerate(zip(norms.tolist(), cosines.tolist(), strict=True)):
        why = []
        if norm > limit:
            why.append(f"norm {norm:.4g} > {c_reject:g} x median norm {median_norm:.4g}")
        if cos < cos_min:
            why.append(f"cosine to robust centre {cos:.3f} < {cos_min:g}")
        if why:
            rejected[i] = "; ".join(why)
    return rejected


def direction_weights(
    cosines: torch.Tensor, own: int | None, *, cos_min: float, cos_full: float
) -> torch.Tensor:
    """Each accepted row's weight in the aggregate: a ramp from 0 at ``cos_min`` to 1 at ``cos_full``.

    w_i = clamp((cos_i − cos_min) / (cos_full − cos_min), 0, 1),   w_o = 1 for the receiver's own row o

    Why: the direction test is a cliff. A row just above ``cos_min`` counted as much as the honest majority's, so a
    sign flip of an honest-norm update under non-IID shards (whose cosine with the centre sits at −0.05 to −0.2,
    because the attacker's own update is only loosely aligned with the others') passed whole; measured on digits
    (10 peers, Dirichlet 0.5, 12 rounds, seed 0, 3 attackers; the closing note of the guard issue): ``sign_flip``
    85.3 % and ``null_space`` 85.0 % with the cliff, 89.5 % and 89.8 % with the ramp to 0, clean 93.6 % → 93.1 %
    and 81.9 % both on Dirichlet 0.1 (a ramp to +0.2 reached 91.0 % under ``sign_flip`` but cost 5.3 points clean on
    Dirichlet 0.1, whose honest rows with a class of their own have small positive cosines). The semantic guard's
    floor is −0.3 since the heterogeneity cells (``docs/scripts/het_cells.py``), so its ramp runs from −0.3 to 0.

    Args:
        cosines: ``(m,)`` float64 cosines of the accepted rows with the robust centre (NaN weighs 0).
        own: index of the receiver's own row among them, or None.
        cos_min: the verdict's direction floor.
        cos_full: the cosine from which a row weighs 1, ``> cos_min``.

    Returns:
        ``(m,)`` float64 weights in [0, 1], with a positive sum (all ones if every ramp weight was 0).
    """
    w = ((cosines.to(torch.float64) - cos_min) / (cos_full - cos_min)).clamp(0.0, 1.0)
    w = torch.nan_to_num(w, nan=0.0)  # a NaN cosine (a non-finite row or centre) says nothing: weight 0
    if own is not None:
        w[own] = 1.0
    if float(w.sum()) <= 0:
        return torch.ones_like(w)
    return w


_RECORD_VERSION = 1


class DirectionRecord:
    """Each sender's mean cosine with the robust centre over the rounds a receiver has judged it, bounded in memory.

    m_{r,s} = Σ_t γ^{a_t} cos_t(x_s, c) / Σ_t γ^{a_t},  over the rounds receiver r judged sender s (this one
    included), a_t the number of such rounds after t (γ = 1: the plain mean)

    One term per round: a second call for the same pair in the same round replaces that round's term (so a
    receiver judged twice in one round counts it once); a call for a round older than the pair's latest is
    ignored. A NaN cosine (a non-finite row) adds no term. Past ``max_entries`` pairs the least recently updated
    pair is forgotten.

    Args:
        decay: γ in (0, 1] (1: every judged round counts alike).
        max_entries: most (receiver, sender) pairs kept, ``>= 1``.

    Raises:
        ValueError: on ``decay`` or ``max_entries`` out of range.
    """

    def __init__(self, *, decay: float = 1.0, max_entries: int = 4096) -> None:
        """Check the parameters and start empty."""
        if isinstance(max_entries, bool) or not isinstance(max_entries, int) or max_entries < 1:
            raise ValueError(f"max_entries must be an int >= 1, got {max_entries!r}")
        if isinstance(decay, bool) or not isinstance(decay, (int, float)) or not 0.0 < decay <= 1.0:
            raise ValueError(f"decay must be in (0, 1], got {decay!r}")
        self.decay = float(decay)
        self.max_entries = max_entries
        # (receiver, sender) -> (round, Σ γ^a c and Σ γ^a of the earlier terms, that round's cosine)
        self._entries: OrderedDict[tuple[str, str], tuple[int, float, float, float]] = OrderedDict()

    def __len__(self) -> int:
        """Number of (receiver, sender) pairs held."""
        return len(self._entries)

    def add(self, receiver: str, sender: str, round_: int, cosine: float) -> float:
        """Record this round's cosine of ``sender`` as judged by ``receiver``; return the mean to date.

        Returns:
            m_{r,s} after this round (NaN when the pair has no finite term yet).
        """
        key = (receiver, sender)
        entry = self._entries.get(key)
        if entry is None:
            entry = (round_, 0.0, 0.0, math.nan)
        last, total, terms, latest = entry
        if round_ > last:  # a new round: the latest round's term joins the earlier ones, all one round older
            if not math.isnan(latest):
                total, terms = self.decay * (total + latest), self.decay * (terms + 1)
            entry = (round_, total, terms, math.nan)
        if round_ >= last:
            entry = (entry[0], entry[1], entry[2], float(cosine))
        self._entries[key] = entry
        self._entries.move_to_end(key)
        while len(self._entries) > self.max_entries:
            self._entries.popitem(last=False)
        _, total, terms, latest = entry
        if not math.isnan(latest):
            total, terms = total + latest, terms + 1
        return total / terms if terms else math.nan

    def restart(self, receiver: str, sender: str) -> None:
        """Forget the pair's record: the next :meth:`add` starts it afresh.

        Used for a sender that turned against its own previous row (:mod:`~p2p_guard.guard.reversal`). A pair not
        held is left so.
        """
        self._entries.pop((receiver, sender), None)

    def state_dict(self) -> dict[str, Any]:
        """Everything that carries over between rounds, as plain values (the peer's checkpoint keeps it).

        Returns:
            ``{"version": 1, "entries": [[receiver, sender, round, total, terms, latest], ...]}``, least recently
            updated pair first: ``total`` = Σ γ^a c and ``terms`` = Σ γ^a of the rounds before ``round`` (floats),
            ``latest`` the cosine of ``round`` (a float in [-1, 1], or None when it had no finite term).
            At most ``max_entries`` entries.
        """
        return {"version": _RECORD_VERSION,
                "entries": [[r, s, last, total, terms, None if math.isnan(latest) else latest]
                            for (r, s), (last, total, terms, latest) in self._entries.items()]}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Replace the record with one from :meth:`state_dict`, checked first (nothing changes on error).

        Raises:
            GuardStateError: (a ``ValueError``) another version, more than ``max_entries`` pairs, a pair twice, a
                name that is not a str, a non-finite number, ``terms < 0``, ``|total| > terms`` or a cosine outside
                [-1, 1].
        """
        kind = "direction record"
        entries: OrderedDict[tuple[str, str], tuple[int, float, float, float]] = OrderedDict()
        for item in entries_of(state, kind=kind, version=_RECORD_VERSION, limit=self.max_entries):
            if not isinstance(item, (list, tuple)) or len(item) != 6:
                raise GuardStateError(f"{kind}: an entry must be [receiver, sender, round, total, terms, latest]")
            key = (key_of(kind, item[0], empty=True), key_of(kind, item[1]))
            last = round_of(kind, item[2])
            total, terms = real_of(kind, item[3]), real_of(kind, item[4], low=0.0)
            if abs(total) > terms * (1 + 1e-9) + 1e-12:  # a mean of cosines lies in [-1, 1]
                raise GuardStateError(f"{kind}: |total| {abs(total):g} > terms {terms:g} for sender {key[1]!r}")
            latest = math.nan if item[5] is None else real_of(kind, item[5], low=-1.0 - 1e-9, high=1.0 + 1e-9)
            if key in entries:
                raise GuardStateError(f"{kind}: the pair ({key[0]!r}, {key[1]!r}) appears twice")
            entries[key] = (last, total, terms, latest)
        self._entries = entries


SPARSE_MAX = 0.25
"""ρ_max: a row with at most this fraction of non-zero entries is judged by :func:`support_outliers` (a ``topk``
row at density ρ has at most ρ·d + one value per 4096-chunk; fp32/int8 rows of a real model are dense)."""


def support_outliers(
    updates: torch.Tensor,
    reference: torch.Tensor,
    *,
    cos_min: float,
    sparse_max: float = SPARSE_MAX,
    max_norm: float = math.inf,
) -> tuple[dict[int, str], torch.Tensor]:
    """The sparse-row tests of the module docstring: direction on the row's support, and length.

    Args:
        updates: ``(n, d)`` raw rows; not mutated.
        reference: ``(d,)`` the receiver's own dense update r (``AggregationContext.own_reference``).
        cos_min: a sparse row whose support cosine with r is below it is rejected.
        sparse_max: ρ_max, in (0, 1]; rows denser than ``sparse_max · d`` are not tested.
        max_norm: a sparse row longer than this (L2) is rejected (``inf``: no length test); the ``semantic``
            guard passes c_sparse × the median row norm.

    Returns:
        ``(rejected, cosines)``: row index → detail for each rejected row, and the ``(n,)`` float64 support
        cosines (:func:`~p2p_guard.guard.linalg.support_cosines`; computed for every row, tested only on sparse
        ones).

    Raises:
        ValueError: when ``reference`` is not ``(d,)`` (a local bug).
    """
    d = int(updates.shape[1])
    if reference.shape != (d,):
        raise ValueError(f"reference must be ({d},) to match the rows, got {tuple(reference.shape)}")
    cosines, nnz = support_cosines(updates, reference)
    norms = torch.linalg.vector_norm(updates, dim=1, dtype=torch.float64).tolist()
    rejected: dict[int, str] = {}
    for i, (cos, count, norm) in enumerate(zip(cosines.tolist(), nnz.tolist(), norms, strict=True)):
        if count > sparse_max * d:
            continue
        found = []
        if norm > max_norm:
            found.append(f"norm {norm:.4g} > {max_norm:.4g}")
        if cos < cos_min:
            found.append(f"cosine to own update on its support {cos:.3f} < {cos_min:g}")
        if found:
            rejected[i] = f"{'; '.join(found)} (sparse row, {count} of {d} non-zero)"
    return rejected, cosines


def make_verdicts(
    senders: Sequence[str],
    norms: torch.Tensor,
    cosines: torch.Tensor,
    rejected: Mapping[int, tuple[str, str]],
    accepted_detail: str,
    loss_scores: torch.Tensor | None = None,
    records: Mapping[int, float] | None = None,
) -> tuple[Verdict, ...]:
    """Build one :class:`Verdict` per row.

    Args:
        senders: PeerIDs in row order.
        norms: ``(n,)`` raw row norms.
        cosines: ``(n,)`` cosines with the rule's reference.
        rejected: row index → ``(reason, detail)`` for each rejected row.
        accepted_detail: detail recorded for every accepted row.
        loss_scores: ``(n,)`` semantic-stage scores in row order, or None (each verdict's ``loss_score``).
        records: row index → the sender's direction record (each verdict's ``record``; a missing or NaN entry:
            None).

    Returns:
        Verdicts in row order.
    """
    out = []
    for i, sender in enumerate(senders):
        reason, detail = rejected.get(i, (None, accepted_detail))
        out.append(
            Verdict(
                sender=sender,
                accepted=reason is None,
                reason=reason,
                detail=detail,
                norm=float(norms[i]),
                cosine=float(cosines[i]),
                loss_score=None if loss_scores is None else float(loss_scores[i]),
                record=finite_or_none((records or {}).get(i)),
            )
        )
    return tuple(out)


def finite_or_none(value: float | None) -> float | None:
    """``value`` as a float if it is finite, else None (verdicts, events and metrics carry no NaN or infinity)."""
    return float(value) if value is not None and math.isfinite(value) else None
