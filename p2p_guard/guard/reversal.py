r"""Reversals: a sender whose row turns against its own previous row restarts its direction record.

The direction record (:class:`~p2p_guard.guard.verdict.DirectionRecord`, the ``semantic`` guard's stage 4c) is a
sender's mean cosine with the robust centre over the rounds a receiver has judged it. A record of at least
``cos_record`` spares the sender's rows from the direction ramp, and a record below 0 is what makes an accepted
row pointing away from the centre an *opposed row* for the reputation (:func:`~p2p_guard.guard.reputation.
opposed_rows`). A sender that first builds a record and then turns (``sleeper``: honest for k rounds, then a sign
flip) keeps the benefit of its honest rounds for as many rounds again: its flipped rows, at cosines −0.3 .. 0 with
the centre on non-IID shards, weigh 1 and are never struck.

What gives it away is its own history, not the centre. An honest sender's pseudo-gradients come from the same
shard round after round, so its consecutive rows point the same way; a sign flip turns the row against the one
before it:

    reversed_r(s)  ⇔  cos(x_s^r, x_s^{prev}) < cos_reverse

where x_s^{prev} is the last row this receiver judged from s in an earlier round. A reversed sender's direction
record restarts at this round (:meth:`DirectionRecord.restart`): from then on it holds only what the sender sent
since it turned. A restart changes nothing else: no rejection, no strike. Restarting can only bring the record
closer to the sender's recent rows, so a sender cannot use it to keep a record it no longer earns.

Measured (digits, 10 peers, 12 rounds, the benchmark's cell; ``python docs/scripts/reversal_probe.py``): the
cosine of an honest sender's row with its previous one was 0.76-0.96 on Dirichlet 0.5 (seed 0) and 0.58-0.96 over
40 clean rounds on Dirichlet 0.1 (seeds 2 and 3, the cells where honest rows drift against the centre), while
``sleeper``'s flip round gave −0.89 to −0.91. ``cos_reverse`` = −0.5 sits far from both.

A reversed row is also rejected (reason ``outlier``, its detail naming the reversal; ``reject_reversed``, on by
default): the round it turns is the round its record would still spare it, and the rejection is the one
content rejection the reputation needs before opposed rows can exclude (``guard.reputation``). One false reversal
of an honest sender is one rejection, never an exclusion (3 strikes in 4 rounds are needed).

Measured on the ``sleeper`` cells (digits, 10 peers, Dirichlet 0.5, 12 rounds, f not told, every peer running the
reputation and the mixing; final accuracy, seeds 0, 1, 2; ``python docs/scripts/adaptive_cells.py --attack sleeper
--fractions 3 4 --seeds 0 1 2 --reputation --guards semantic:reversal=False semantic:reject_reversed=False semantic``):

| sleeper at | no reversal stage | record restart only | restart and rejection (default) |
|---|---|---|---|
| 3 of 10 | 0.869 0.857 0.856 (mean 0.861) | 0.892 0.858 0.861 (0.870) | 0.892 0.858 0.917 (0.889) |
| 4 of 10 | 0.823 0.825 0.700 (mean 0.783) | 0.814 0.814 0.889 (0.839) | 0.813 0.867 0.861 (0.847) |

Attackers excluded by honest receivers with the default: 0, 21, 14 at 3 of 10 and 0, 18, 0 at 4 (none before);
honest senders excluded: none. Over 40 clean rounds on Dirichlet 0.1 (seeds 2 and 3) accuracy was 0.811 and 0.800
with and without the stage, no honest exclusion. Still short of the clean 0.936: on seed 0 at 3 of 10 the flipped
rows of rounds 6, 8, 9 and 11 reached cosines +0.12 .. +0.60 with the centre (the sleepers' own models, mixed
with and pulled by their own flipped rows, had moved), so no opposed row struck them; without the mixing step the
same cell ends at 0.914 with every sleeper excluded.

Memory: one vector per (receiver, sender) pair, ``max_entries`` pairs at most (least recently used forgotten).
A model of at most ``width`` parameters keeps the unit row whole (float32); a larger one keeps a count sketch of
it (:class:`~p2p_guard.guard.sketch.CountSketch`, ``width`` float32 entries, secret seed per memory: cosines off
by about 1/√width ≈ 0.008 at the default 2^14, against a margin of 0.4 on either side). The memory is not part of
the peer's checkpoint: after a restart the first round compares nothing.

Knowledge: only the rows this receiver judged. An attacker that turns slowly (a few degrees a round) is not
caught here; its record then follows its rows down over the rounds, as before.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Sequence

import torch

from p2p_guard.guard.sketch import CountSketch, new_seed

__all__ = ["COS_REVERSE", "REVERSAL_WIDTH", "ReversalMemory"]

COS_REVERSE = -0.5
"""cos_reverse: a row whose cosine with its sender's previous row is below this is a reversal."""

REVERSAL_WIDTH = 2**14
"""Entries kept per pair (float32): the whole unit row up to this many parameters, else its count sketch."""


class ReversalMemory:
    """Each sender's last judged row at each receiver, and whether this round's row reverses it.

    Args:
        cos_reverse: the cosine below which a row reverses its sender's previous one, in [-1, 1) (−0.5).
        width: entries kept per pair, a power of two ``>= 2`` (:data:`REVERSAL_WIDTH`).
        max_entries: most (receiver, sender) pairs kept, ``>= 1`` (1024: 64 MiB at the default width).
        seed: the count sketch's secret seed (None: a fresh one from the OS, the default).

    Raises:
        ValueError: on a parameter out of range (the message names it).
    """

    def __init__(self, *, cos_reverse: float = COS_REVERSE, width: int = REVERSAL_WIDTH, max_entries: int = 1024,
                 seed: int | None = None) -> None:
        """Check the parameters and start empty."""
        if isinstance(cos_reverse, bool) or not isinstance(cos_reverse, (int, float)) \
                or not -1.0 <= cos_reverse < 1.0:
            raise ValueError(f"cos_reverse must be in [-1, 1), got {cos_reverse!r}")
        if isinstance(max_entries, bool) or not isinstance(max_entries, int) or max_entries < 1:
            raise ValueError(f"max_entries must be an int >= 1, got {max_entries!r}")
        self.cos_reverse = float(cos_reverse)
        self.max_entries = max_entries
        self._sketch = CountSketch(width, new_seed() if seed is None else seed)
        # (receiver, sender) -> (round, unit row or its sketch, float32)
        self._entries: OrderedDict[tuple[str, str], tuple[int, torch.Tensor]] = OrderedDict()

    def __len__(self) -> int:
        """Number of (receiver, sender) pairs held."""
        return len(self._entries)

    def _summaries(self, rows: torch.Tensor) -> torch.Tensor:
        """``(n, m)`` float32: each row's unit vector (d ≤ width) or its sketch; a zero or non-finite row → 0."""
        d = rows.shape[1]
        if d > self._sketch.width:
            sketches, _ = self._sketch.unit_residuals(rows, torch.zeros(d, dtype=rows.dtype))
            return sketches.to(torch.float32)
        wide = rows.to(torch.float64)
        norms = torch.linalg.vector_norm(wide, dim=1, keepdim=True)
        usable = torch.isfinite(norms) & (norms > 0)
        return torch.where(usable, wide / torch.where(usable, norms, 1.0), 0.0).to(torch.float32)

    def reversed(self, receiver: str, senders: Sequence[str], rows: torch.Tensor, own_index: int | None,
                 round_: int) -> dict[int, float]:
        """Remember this round's rows; the ones that reverse their sender's previous row, with that cosine.

        Args:
            receiver: the judging peer's PeerID (its own row is not remembered).
            senders: one PeerID per row of ``rows``.
            rows: ``(n, d)`` float rows of this round; not mutated.
            own_index: the receiver's own row, or None.
            round_: this round (a pair remembered from this round or a later one is not compared).

        Returns:
            ``{row index: cosine with the sender's previous row}`` for the rows below ``cos_reverse``.

        Raises:
            ValueError: ``rows`` not 2-D, or not one sender per row.
        """
        if rows.dim() != 2 or rows.shape[0] != len(senders):
            raise ValueError(f"rows must be (n, d) with one sender per row; got {tuple(rows.shape)} and "
                             f"{len(senders)} sender(s)")
        others = [i for i in range(len(senders)) if i != own_index]
        if not others:
            return {}
        summaries = self._summaries(rows[others])
        found: dict[int, float] = {}
        for k, i in enumerate(others):
            key = (receiver, senders[i])
            current = summaries[k]
            if not bool(current.any()):
                continue  # a zero or non-finite row: nothing to compare, nothing to remember
            entry = self._entries.get(key)
            if entry is not None and entry[0] < round_:
                cosine = float(torch.dot(current, entry[1]) / (current.norm() * entry[1].norm()))
                if math.isfinite(cosine) and cosine < self.cos_reverse:
                    found[i] = cosine
            if entry is None or entry[0] <= round_:
                self._entries[key] = (round_, current.clone())
                self._entries.move_to_end(key)
        while len(self._entries) > self.max_entries:
            self._entries.popitem(last=False)
        return found
