"""Whether the swarm trains the same model as we do: stop a peer started with another ``--task`` than the swarm's.

Every update's signed envelope declares the shapes of the model it was computed on, and a receiver rejects a
row whose shapes differ from its own (``RejectReason.SHAPE_MISMATCH``, ``guard/integrity.py``). A peer whose
task spec differs from the swarm's (``--task digits:hidden=32`` in a ``digits`` swarm) therefore rejects every
update it samples, round after round, while the others reject its own: it trains alone, never converges and, before
:class:`ShapeWatch`, never said why.

The rule: a round *disagrees* when at least one other sender's update was rejected for its shapes and no other
sender's row of our shapes arrived (judged by the guard, accepted or not). After :data:`MISMATCH_ROUNDS`
disagreeing rounds in a row, from at least :data:`MISMATCH_SENDERS` distinct senders (or twice as many rounds
from a single one, for a swarm of two), the peer stops with one line that names both shapes. A Byzantine sender
can declare any shapes, but it cannot stop an honest peer this way unless every update that peer samples for
several rounds is Byzantine, and then the peer would be training alone anyway; the first disagreeing round only
logs a warning.
"""

from __future__ import annotations

from collections.abc import Iterable

from p2p_guard.protocol import RejectReason

__all__ = ["MISMATCH_ROUNDS", "MISMATCH_SENDERS", "ModelMismatch", "ShapeWatch"]

#: Disagreeing rounds in a row after which a peer stops (with at least MISMATCH_SENDERS distinct senders).
MISMATCH_ROUNDS = 3
#: Distinct senders whose shapes must differ from ours over those rounds; with fewer, 2·MISMATCH_ROUNDS rounds.
MISMATCH_SENDERS = 2


class ModelMismatch(RuntimeError):
    """The swarm's updates are for another model than ours: our task spec differs from the swarm's."""


class ShapeWatch:
    """Counts consecutive rounds in which every other sender's update had other shapes than our model's.

    Feed it each round's verdicts with :meth:`observe`.
    """

    def __init__(self) -> None:
        self.streak = 0
        self.senders: set[str] = set()
        self.example = ""

    def observe(self, verdicts: Iterable[object], me: str) -> tuple[bool, str] | None:
        """Take one round's verdicts (``SenderVerdict``: ``sender``, ``reason``, ``norm``, ``detail``).

        Returns:
            None while the swarm agrees with us (or nothing new is to be said); ``(False, warning)`` on the first
            disagreeing round of a streak; ``(True, message)`` once the streak is long enough to stop.
        """
        mismatched: dict[str, str] = {}
        matched = False
        for verdict in verdicts:
            sender = getattr(verdict, "sender", None)
            if sender is None or sender == me:
                continue
            reason = getattr(verdict, "reason", None)
            if reason == RejectReason.SHAPE_MISMATCH or reason == RejectReason.SHAPE_MISMATCH.value:
                mismatched[sender] = str(getattr(verdict, "detail", ""))
            elif getattr(verdict, "norm", None) is not None:  # a row of our shapes reached the guard
                matched = True
        if matched or not mismatched:
            if matched:
                self.streak, self.senders = 0, set()
            return None
        self.streak += 1
        self.senders |= set(mismatched)
        self.example = next(iter(mismatched.values()))
        needed = MISMATCH_ROUNDS if len(self.senders) >= MISMATCH_SENDERS else 2 * MISMATCH_ROUNDS
        if self.streak >= needed:
            return True, (f"for {self.streak} rounds every update from the swarm ({len(self.senders)} sender(s)) was "
                    f"for another model ({self.example}): this peer's --task differs from the swarm's; start it "
                    f"with the swarm's task spec")
        if self.streak == 1:
            return False, (f"{len(mismatched)} sender(s) sent updates for another model ({self.example}); if this "
                    f"goes on, this peer's --task differs from the swarm's")
        return None
