r"""Collusion stage: senders whose residuals from the robust centre keep pointing the same way, across rounds.

A backdoor (and any Sybil group pursuing one goal) sends rows with honest norms and honest directions, because
most of each batch is clean; what gives the group away is that its rows' *residuals* from the robust centre
share a component (the trigger → target mapping) that honest non-IID rows do not. Within one round the signal
is too noisy to act on (measured with ``docs/scripts/backdoor_cells.py --probe``: the most aligned honest pair
reaches the backdoor pairs' cosine), so this stage accumulates each sender's unit residual over rounds, as
FoolsGold accumulates each client's update history, and compares the accumulated histories:

    u_{j,r} = (x_{j,r} − c_r) / ‖x_{j,r} − c_r‖₂
    H_{j,r} = γ · H_{j,r−1} + u_{j,r}                         (H_{j,−1} = 0; one term per round)
    S_{jk}  = cos(H_j, H_k)                                    over the senders of this round with
                                                                 at least ``min_rounds`` terms
    s_j     = (g − 1)-th largest of {S_{jk} : k ≠ j, k ≠ o}      (−∞ when fewer than g − 1 such k)
    reject j  ⇔  j ≠ o  and  s_j ≥ τ

where
    - x_{j,r} is sender j's row in round r, c_r the robust centre of that round, o the receiver's own row
      (``ctx.own_index``: never rejected, and never a partner: agreeing with our own data is no evidence);
    - γ ∈ (0, 1] is ``decay`` and τ ∈ (0, 1] the threshold ``tau``;
    - g ≥ 2 is ``group``, the least group size flagged: j is rejected only when at least g − 1 *other*
      senders (the own row never counts) each reach S_{jk} ≥ τ with it. g = 3 (the default) asks for a trio:
      a colluding group of 3 or 4 of 10 aligns as a whole, while honest look-alikes (similar label mixes under
      Dirichlet) come as pairs. g = 2 is s_j = max_k S_{jk}, any aligned pair (the stage's first rule);
    - the history is kept per (receiver, sender) PeerID pair, so a guard object shared by several in-process
      receivers (the benchmark cells) keeps one history per receiver, as a networked peer would.

Why this separates a backdoor group from honest peers with similar label mixes: the per-round residual is
the sum of a persistent part (the sender's label skew, and for an attacker the backdoor task) and round noise
(its inner batches). Accumulating averages the noise out, so the cosine of two histories tends to the cosine of
the persistent parts: near 1 for attackers sharing a goal, and for two honest peers the overlap of their label
skews, which under Dirichlet(0.5) stays well below.

The stage is never told f or who the attackers are, and reads no self-reported number: only the rows, the
centre and the PeerIDs. With g = 2 it can reject any number of senders, including a lone pair; with g it
never rejects a group of fewer than g senders (a pair of attackers passes g = 3).

Why g = 3 (on in :class:`~p2p_guard.guard.semantic.SemanticGuard` since the cells of 2026-12-06, digits, 10
peers, 12 rounds, f not told; ``docs/scripts/adaptive_cells.py``'s docstring has the tables and commands):
with g = 2, clean ``dirichlet:0.1`` seed 3 lost two honest senders (peers 2 and 7, the same dominant labels)
from round 2 on: their history cosine was 0.71 in round 2 and 0.87 by round 11, above the attacker trio's least
pair in round 2 of ``alie:z=search`` (0.83; 3 of 10, Dirichlet 0.5, seed 0), so no τ separates pairs; 180 of
1080 honest verdicts rejected (16.7 %), accuracy 0.800 → 0.728. Their second-best partner stayed at 0.05-0.21,
and the attackers' at 0.77-0.99 (receiver peer00: ``python docs/scripts/collusion_probe.py --partition
dirichlet:0.1 --seed 3 --guard semantic:collusion_group=2`` and ``... --attack alie:z=search --f 3 --seed 0``),
so g = 3 keeps them (0 honest rows rejected on clean ``dirichlet:0.1`` and ``dirichlet:0.5``,
seeds 0-4) and still rejects every ``alie:z=search`` and ``adaptive`` row from round 2 on at 3 and 4 of 10.
The cost that kept g = 2 off (``dirichlet:0.1``, ``sign_flip:scale=1``, 3 of 10, seeds 0 and 2: 0.4659 /
0.5730 against 0.5306 / 0.6448) was not a false positive: the stage rejected attackers only (21 and 14 rows,
no honest row), and the mean accuracy of rounds 8-11 moved by −0.1 and −0.6 points; the final round fell on
the other side of a swing of up to 10 points a round that both runs show. With g = 3 the stage never fires
in those cells.

Copies (``copies``, the semantic guard's ``collusion_merge_copies``, on by default): the rows of one group of
the duplicate stage count as one partner, since such a group holds at most one honest row. ``mimic`` copies the
previous round's most atypical honest row, so the copiers' residuals point where that honest sender's history
does: without the rule its two aligned partners are the copies, and the stage rejects the copied honest sender
as ``colluding`` every round (docs/threat-model.md §3.7a: digits, 40 rounds, 3 of 10, 46-228 such rejections a
cell). With it the stage rejects nothing under ``mimic`` (the copies stay rejected as duplicates); figures in
``docs/scripts/adaptive_cells.py``'s docstring.

Limits: a white-box attack that knows this stage could split into pairs (two pairs pushing two directions at 4
of 10) or decorrelate its rows across rounds, at the cost of a weaker push; the ``adaptive`` and
``alie:z=search`` attacks simulate the guard one round at a time (a fresh guard, so no history) and do not
try. Memory: two float64 vectors per (receiver, sender) pair, each of ``min(d, m)`` entries: past m =
:data:`~p2p_guard.guard.sketch.SKETCH_WIDTH` (2^18) coordinates the histories are count sketches of the residuals
(:mod:`~p2p_guard.guard.sketch`: linear, so the sum over rounds is the sketch of the sum, and cosines kept to
about 1/√m), so a pair costs at most 4 MiB at any d. Before, at d = 25M a pair was 405 MB whole, and the 1 GiB
bound below forgot every pair of a peer judging 7 senders before its third round: the stage never fired. At
most ``max_entries`` pairs and ``max_bytes`` bytes are kept (1 GiB: the 1024 pairs of ``max_entries`` alone
would be 4 GB at the shakespeare task's d = 246,144, 3.9 MB a pair, and a Sybil flood of fresh PeerIDs fills
every slot; the least recently updated pair goes first). A benchmark cell of 10 in-process receivers shares one
guard, 100 pairs: 394 MB there, under the bound, so no cell forgets a pair; a networked peer holds one pair per
sender it has judged.

References:
    Clement Fung, Chris J. M. Yoon, Ivan Beschastnikh. The Limitations of Federated Learning in Sybil Settings.
    RAID 2020. arXiv:1808.04866 (FoolsGold: similarity of accumulated update histories).
"""

from __future__ import annotations

import logging
import math
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from p2p_guard.guard.base import AggregationContext, check_int, check_real
from p2p_guard.guard.sketch import SKETCH_WIDTH, CountSketch, new_seed
from p2p_guard.guard.state import GuardStateError, entries_of, key_of, round_of, version_of

logger = logging.getLogger(__name__)

__all__ = ["COLLUDING", "MAX_BYTES", "CollusionCheck", "ResidualHistory", "group_score"]

COLLUDING = "colluding"
"""Reason recorded in the verdict of a row rejected by this stage."""

_STATE_VERSION = 4
# 2: no sketch, entries [receiver, sender, round, H, terms] with H of d <= m entries; 3: sketches of a
# multiply-shift hash (guard.sketch's docstring says why it went), so it loads only where every d <= m
_VERSIONS = (2, 3, 4)

_MAX_NUMEL = 2**53  # largest d a saved pair may name (an exact float: its norm bound terms·√d stays finite)

MAX_BYTES = 2**30
"""Default bound on the bytes of residual history one :class:`ResidualHistory` keeps (1 GiB)."""


@dataclass
class _Entry:
    round: int
    previous: torch.Tensor | None  # H before the term of `round` (so a second call in that round replaces it)
    previous_terms: int
    current: torch.Tensor
    terms: int
    numel: int  # d of the rows summed into it (``current`` has min(d, m) entries: sketched past m)


def _entry_bytes(entry: _Entry) -> int:
    size = entry.current.numel() * entry.current.element_size()
    if entry.previous is not None:
        size += entry.previous.numel() * entry.previous.element_size()
    return size


class ResidualHistory:
    """Accumulated unit residuals per (receiver, sender), bounded in memory.

    H ← γ·H + u once per round; a second call for the same pair in the same round replaces that round's term
    (so a receiver judged twice in one round counts it once). For rows of d > ``width`` coordinates, u and H are
    count sketches (:attr:`sketch`, with this history's secret seed; :mod:`~p2p_guard.guard.sketch`).

    Memory: at most ``max_entries`` pairs of float64 vectors of ``min(d, width)`` entries (two per pair: the
    history before and after the latest round) and at most ``max_bytes`` bytes of them; past either, the least
    recently updated pair is forgotten (the pair just added is always kept, even alone above ``max_bytes``).

    Args:
        decay: γ in (0, 1].
        max_entries: most (receiver, sender) pairs kept, ``>= 1``.
        max_bytes: most bytes of history tensors kept, ``>= 1`` (1 GiB).
        width: m, the sketch width, a power of two (:data:`~p2p_guard.guard.sketch.SKETCH_WIDTH`): rows of at most
            m coordinates are kept whole.
        seed: the sketch's secret seed in [0, 2⁶³); None: a fresh one from the OS (the default; a peer's seed is
            saved in its checkpoint with the history).

    Raises:
        ValueError: on a parameter out of range (the message names it).
    """

    def __init__(self, *, decay: float = 1.0, max_entries: int = 1024, max_bytes: int = MAX_BYTES,
                 width: int = SKETCH_WIDTH, seed: int | None = None) -> None:
        """Check the parameters and start empty."""
        if check_real("decay", decay, minimum=0.0) > 1.0:
            raise ValueError(f"decay must be in (0, 1], got {decay!r}")
        self.decay = float(decay)
        self.max_entries = check_int("max_entries", max_entries, minimum=1)
        self.max_bytes = check_int("max_bytes", max_bytes, minimum=1)
        self.sketch = CountSketch(width, new_seed() if seed is None else seed)
        self._entries: OrderedDict[tuple[str, str], _Entry] = OrderedDict()

    @property
    def nbytes(self) -> int:
        """Bytes held by the history tensors."""
        return sum(_entry_bytes(e) for e in self._entries.values())

    def _evict(self) -> None:
        """Forget the least recently updated pairs until both bounds hold (the newest pair always stays)."""
        total = self.nbytes
        while len(self._entries) > 1 and (len(self._entries) > self.max_entries or total > self.max_bytes):
            _, gone = self._entries.popitem(last=False)
            total -= _entry_bytes(gone)

    def __len__(self) -> int:
        """Number of (receiver, sender) pairs held."""
        return len(self._entries)

    def units(self, rows: torch.Tensor, centre: torch.Tensor) -> list[torch.Tensor]:
        """This round's unit residual u_j = (x_j − c)/‖x_j − c‖₂ of each row, as :meth:`add` takes it.

        Whole for d <= ``width`` (zero for a row equal to the centre or with a non-finite residual norm), else its
        count sketch (:meth:`~p2p_guard.guard.sketch.CountSketch.unit_residuals`, no ``(d,)`` float64 temporary).

        Args:
            rows: ``(n, d)`` float rows; not mutated.
            centre: ``(d,)`` float centre.

        Returns:
            n float64 vectors of ``min(d, width)`` entries.
        """
        if rows.shape[1] > self.sketch.width:
            sketches, _ = self.sketch.unit_residuals(rows, centre)
            return list(sketches)
        c64 = centre.to(torch.float64)
        units = []
        for row in rows:
            residual = row.to(torch.float64) - c64
            norm = float(torch.linalg.vector_norm(residual))
            units.append(residual / norm if norm > 0 and math.isfinite(norm) else torch.zeros_like(residual))
        return units

    def add(self, receiver: str, sender: str, round_: int, unit: torch.Tensor, *,
            numel: int | None = None) -> tuple[torch.Tensor, int]:
        """Add this round's unit residual of ``sender`` as seen by ``receiver``.

        Args:
            receiver: the receiver's PeerID (``""`` when the caller has no own row).
            sender: the sender's PeerID.
            round_: the outer round, ``>= 0``.
            unit: float64 unit residual (zero for a row equal to the centre), ``(d,)`` or, past ``width``, its
                ``(width,)`` sketch (:meth:`units`).
            numel: d of the row (None: ``unit.numel()``, a row kept whole). A pair of another d starts over.

        Returns:
            ``(H, terms)``: the float64 history after this round (shaped as ``unit``) and its number of rounds. An
            entry whose last round is later than ``round_`` (a stale call) is returned unchanged.
        """
        key = (receiver, sender)
        size = unit.numel() if numel is None else numel
        entry = self._entries.get(key)
        if entry is not None and (entry.numel != size or entry.current.shape != unit.shape):
            entry = None  # the model changed shape: start over
        if entry is None:
            entry = _Entry(round=round_, previous=None, previous_terms=0, current=unit.clone(), terms=1, numel=size)
        elif round_ > entry.round:
            entry = _Entry(round=round_, previous=entry.current, previous_terms=entry.terms,
                           current=self.decay * entry.current + unit, terms=entry.terms + 1, numel=size)
        elif round_ == entry.round:
            base = entry.previous
            if base is None and entry.previous_terms > 0:  # restored without its earlier history: keep it
                self._entries.move_to_end(key)
                return entry.current, entry.terms
            current = unit.clone() if base is None else self.decay * base + unit
            entry = _Entry(round=round_, previous=base, previous_terms=entry.previous_terms, current=current,
                           terms=entry.previous_terms + 1, numel=size)
        self._entries[key] = entry
        self._entries.move_to_end(key)
        self._evict()
        return entry.current, entry.terms

    def state_dict(self) -> dict[str, Any]:
        """Everything that carries over between rounds, as plain values and tensors (the peer's checkpoint keeps it).

        Returns:
            ``{"version": 4, "width": m, "seed": s, "entries": [[receiver, sender, round, H, terms, d], ...]}``,
            least recently updated pair first: ``H`` the float64 history after ``round`` (the tensor held, not a
            copy: histories are replaced, never changed in place), ``(d,)`` for d <= m and the ``(m,)`` sketch
            past it, ``terms`` its number of rounds and ``d`` the rows' size. The history before ``round`` is not
            kept (a restored pair runs later rounds only; :meth:`load_state_dict`). At most ``max_entries`` pairs
            and ``max_bytes`` bytes of ``H``. ``seed`` is the sketch's secret: the checkpoint is the peer's own.
        """
        return {"version": _STATE_VERSION, "width": self.sketch.width, "seed": self.sketch.seed,
                "entries": [[r, s, e.round, e.current, e.terms, e.numel] for (r, s), e in self._entries.items()]}

    def _sketch_of(self, state: Mapping[str, Any], kind: str) -> CountSketch:
        """The sketch a saved state was built with (version 2: ours, as its histories are all whole)."""
        if version_of(state) == 2:
            return self.sketch
        width, seed = state.get("width"), state.get("seed")
        if isinstance(width, bool) or not isinstance(width, int) or width != self.sketch.width:
            raise GuardStateError(f"{kind}: sketch width {width!r:.40} is not this guard's {self.sketch.width}")
        try:
            return CountSketch(self.sketch.width, seed)  # type: ignore[arg-type]
        except ValueError as exc:
            raise GuardStateError(f"{kind}: {exc}") from None

    def load_state_dict(self, state: Mapping[str, Any], *, numel: int | None = None) -> None:
        """Replace the history and the sketch's seed with a saved one, checked first (nothing changes on error).

        Versions 2 (before sketches) and 3 (sketches of an earlier hash) load as long as their histories are whole
        (d <= m).

        A restored pair goes on exactly in any later round. Called again in its own last round (which a peer
        resumed from its checkpoint never does: it resumes at the next round) it is returned unchanged, since the
        history before that round was not saved; a restored pair of one term is replaced as usual.

        Args:
            state: as :meth:`state_dict` returns.
            numel: d of the model, when known: every pair's d must then equal it.

        Raises:
            GuardStateError: (a ``ValueError``) another version (or one that is not an int), another sketch width
                (or one that is not an int) or a bad seed, more than ``max_entries`` pairs, a pair twice, a name that
                is not a str, a d that is not an int in [1, 2^53] (or not ``numel``, or not the other pairs'),
                ``H`` not a dense 1-D float64 CPU tensor of ``min(d, m)`` entries, a non-finite ``H``,
                ``‖H‖₂ > terms`` for a whole history (a sum of unit vectors) or ``> terms·√d`` for a sketch, or
                ``terms < 1``.
        """
        kind = "collusion history"
        version = version_of(state)
        items = entries_of(state, kind=kind, version=version if version in _VERSIONS else _STATE_VERSION,
                           limit=self.max_entries)
        sketch = self._sketch_of(state, kind)
        entries: OrderedDict[tuple[str, str], _Entry] = OrderedDict()
        width = numel
        for item in items:
            if not isinstance(item, (list, tuple)) or len(item) != (5 if version == 2 else 6):
                raise GuardStateError(f"{kind}: an entry must be [receiver, sender, round, H, terms"
                                      f"{'' if version == 2 else ', d'}]")
            key = (key_of(kind, item[0], empty=True), key_of(kind, item[1]))
            round_, current, terms = round_of(kind, item[2]), item[3], item[4]
            if isinstance(terms, bool) or not isinstance(terms, int) or terms < 1:
                raise GuardStateError(f"{kind}: terms must be an int >= 1, got {terms!r:.80}")
            if (not isinstance(current, torch.Tensor) or current.dtype != torch.float64 or current.dim() != 1
                    or current.layout != torch.strided or current.device.type != "cpu"):
                raise GuardStateError(f"{kind}: H of {key[1]!r} must be a 1-D float64 tensor, got "
                                      f"{getattr(current, 'dtype', type(current).__name__)} "
                                      f"{tuple(getattr(current, 'shape', ()))} {getattr(current, 'layout', '')} "
                                      f"{getattr(current, 'device', '')} (a dense one on the CPU)")
            size = current.numel() if version == 2 else item[5]
            if isinstance(size, bool) or not isinstance(size, int) or not 1 <= size <= _MAX_NUMEL:
                raise GuardStateError(f"{kind}: d of {key[1]!r} must be an int in [1, 2**53], got {size!r:.80}")
            if width is not None and size != width:
                raise GuardStateError(f"{kind}: H of {key[1]!r} is of d = {size}, expected {width}")
            width = size
            if version == 3 and size > sketch.width:
                raise GuardStateError(f"{kind}: H of {key[1]!r} (d = {size}) is a sketch of version 3's "
                                      "multiply-shift hash, not this one's")
            if current.numel() != min(size, sketch.width):
                raise GuardStateError(f"{kind}: H of {key[1]!r} has {current.numel()} entries, expected "
                                      f"{min(size, sketch.width)} for d = {size}")
            norm = float(torch.linalg.vector_norm(current))
            bound = terms * (1 + 1e-9) * (1.0 if size <= sketch.width else math.sqrt(size))
            if not math.isfinite(norm) or norm > bound:
                raise GuardStateError(f"{kind}: H of {key[1]!r} has norm {norm:g}, not a finite one <= {bound:g}")
            if key in entries:
                raise GuardStateError(f"{kind}: the pair ({key[0]!r}, {key[1]!r}) appears twice")
            entries[key] = _Entry(round=round_, previous=None, previous_terms=terms - 1,
                                  current=current.detach().clone(), terms=terms, numel=size)
        self.sketch = sketch
        self._entries = entries
        self._evict()


@dataclass(kw_only=True, eq=False)  # not frozen: RowCheck's ``reason`` is a plain attribute
class CollusionCheck:
    r"""Reject senders whose accumulated residual history is aligned with another sender's (module docstring).

    A :class:`~p2p_guard.guard.semantic.RowCheck`: ``check(updates, centre, ctx) -> {row: detail}``.

    Args:
        tau: τ, the history cosine at or above which a sender is rejected, in (0, 1] (0.6).
        min_rounds: rounds of history both senders need before they are compared, ``>= 1`` (3).
        decay: γ of the history, in (0, 1] (1: a plain sum).
        group: g, the least group size rejected, ``>= 2`` (3: a sender needs two aligned partners; 2: any
            aligned pair; module docstring).
        max_entries: bound on the (receiver, sender) pairs kept (:class:`ResidualHistory`).
        max_bytes: bound on the bytes of history kept (:class:`ResidualHistory`; 1 GiB).

    Raises:
        ValueError: on a parameter out of range (the message names it).

    References:
        Clement Fung, Chris J. M. Yoon, Ivan Beschastnikh. The Limitations of Federated Learning in Sybil
        Settings. RAID 2020. arXiv:1808.04866.
    """

    tau: float = 0.6
    min_rounds: int = 3
    decay: float = 1.0
    group: int = 3
    max_entries: int = 1024
    max_bytes: int = MAX_BYTES
    history: ResidualHistory = field(init=False, repr=False)
    reason: str = field(default=COLLUDING, init=False)

    def __post_init__(self) -> None:
        """Check the fields and create the history."""
        if check_real("tau", self.tau, minimum=0.0) > 1.0:
            raise ValueError(f"tau must be in (0, 1], got {self.tau!r}")
        check_int("min_rounds", self.min_rounds, minimum=1)
        check_int("group", self.group, minimum=2)
        self.history = ResidualHistory(decay=self.decay, max_entries=self.max_entries, max_bytes=self.max_bytes)

    def __call__(
        self, updates: torch.Tensor, centre: torch.Tensor, ctx: AggregationContext,
        copies: Sequence[Sequence[int]] = (),
    ) -> dict[int, str]:
        """Add this round's residuals to the history and return the rows to reject.

        Args:
            updates: ``(n, d)`` float rows in the order of ``ctx.senders``; not mutated.
            centre: ``(d,)`` robust centre of the round.
            ctx: the round's context (``senders``, ``round``, ``own_index``).
            copies: groups of row indices that count as one partner (the duplicate stage's groups of this
                round, :attr:`~p2p_guard.guard.duplicates.Duplicates.groups`, when the semantic guard's
                ``collusion_merge_copies`` is on): a group of rows sent as one vector holds at most one honest
                row, so its members are one sender's worth of evidence, not g − 1 (``mimic``: the copies of an
                honest peer's previous row would otherwise be that peer's two aligned partners). Empty: every
                sender is its own partner (the default).

        Returns:
            Row index → detail (the history cosine and its partner) for each rejected row; never the own row.
        """
        own = ctx.own_index
        receiver = ctx.senders[own] if own is not None else ""
        histories: list[torch.Tensor | None] = []
        units = self.history.units(updates, centre)
        for sender, unit in zip(ctx.senders, units, strict=True):
            history, terms = self.history.add(receiver, sender, ctx.round, unit, numel=updates.shape[1])
            hnorm = float(torch.linalg.vector_norm(history))
            histories.append(history / hnorm if terms >= self.min_rounds and hnorm > 0 else None)
        same = {k: label for label, group in enumerate(copies) for k in group}
        rejected: dict[int, str] = {}
        for j, hj in enumerate(histories):
            if j == own or hj is None:
                continue
            score, partners = group_score(hj, histories, exclude=(j, own), group=self.group, same=same)
            names = ", ".join(ctx.senders[k] for k in partners) or "-"
            logger.debug("round %d receiver %s: sender %s group-%d history cosine %.3f with %s", ctx.round,
                         receiver, ctx.senders[j], self.group, score, names)
            if score >= self.tau:
                rejected[j] = f"residual history cosine {score:.3f} >= {self.tau:g} with {names}"
        return rejected


def group_score(
    hj: torch.Tensor, histories: list[torch.Tensor | None], *, exclude: tuple[int | None, ...], group: int,
    same: Mapping[int, int] | None = None,
) -> tuple[float, list[int]]:
    """s_j of the module docstring: the (g − 1)-th largest cosine of ``hj`` with the other histories.

    Args:
        hj: ``(d,)`` float64 unit history of sender j.
        histories: every sender's ``(d,)`` unit history, or ``None`` where it has fewer than ``min_rounds`` terms.
        exclude: row indices that are never partners (j itself and the own row; ``None`` is ignored).
        group: g ``>= 2``.
        same: row index → label; partners with one label count once, by the most aligned of them (a group of
            copies, :meth:`CollusionCheck.__call__`'s ``copies``), and none counts when an excluded row (j, the
            own row) has that label. None or absent rows: each row its own.

    Returns:
        ``(s_j, partners)``: the score (``-inf`` when fewer than g − 1 partners have a history) and the indices
        of the g − 1 most aligned partners, most aligned first (fewer when fewer exist).
    """
    ranked = sorted(
        ((float(torch.dot(hj, hk)), k) for k, hk in enumerate(histories) if k not in exclude and hk is not None),
        key=lambda item: -item[0],
    )
    cosines: list[tuple[float, int]] = []
    # a group holding j (or the own row) is j (or the own row): its other members are no partners either
    seen: set[int] = {same[k] for k in exclude if same and k is not None and k in same}
    for cos, k in ranked:
        label = same.get(k) if same else None
        if label is not None:
            if label in seen:
                continue
            seen.add(label)
        cosines.append((cos, k))
        if len(cosines) == group - 1:
            break
    partners = [k for _, k in cosines]
    return (cosines[-1][0] if len(cosines) == group - 1 else -math.inf), partners
