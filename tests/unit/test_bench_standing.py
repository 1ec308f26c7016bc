"""The swarm's reputation in the in-process cell (``bench.standing``): ballots, folds and exclusions in a cell."""

from __future__ import annotations

import math

from p2p_guard.bench.cell import CellSpec, run_cell
from p2p_guard.bench.standing import EXCLUDED, CellStanding, ballot, not_judged
from p2p_guard.guard.base import Verdict


def _v(sender: str, accepted: bool, norm: float, reason: str | None = None, cosine: float = 0.5,
       record: float | None = None) -> Verdict:
    return Verdict(sender=sender, accepted=accepted, reason=None if accepted else reason, detail="", norm=norm,
                   cosine=cosine, record=cosine if record is None else record)


def test_ballot_is_the_swarms_evidence_own_row_out_edge_and_opposed_rows_marked_copyable_and_circumstantial_not_judged() -> None:
    verdicts = [
        _v("me", True, 1.0),
        _v("a", True, 1.0),
        _v("b", True, 2.4),  # > 2.3 × the median norm (1.0): an edge row
        _v("c", False, 9.0, "outlier"),
        _v("d", False, 1.0, "duplicate"),  # copyable: no evidence
        _v("e", False, 1.0, "colluding"),
        _v("f", True, 1.0, cosine=-0.2),  # below −0.1, record below 0: an opposed row
        _v("i", True, 1.0, cosine=-0.1),  # not below
        _v("l", True, 1.0, cosine=-0.2, record=0.05),  # a record along the centre: not opposed
        _v("j", True, 2.5, cosine=-0.9),  # an edge row first
        _v("k", False, 1.0, "outlier", cosine=-0.9),  # rejected: neither
        not_judged("g", EXCLUDED),  # circumstantial: no evidence
        not_judged("h", "zero_update"),
    ]
    verdicts[0] = _v("me", True, 1.0, cosine=-0.5)  # our own row is never struck
    judged, edge, opposed = ballot(verdicts, "me")
    assert judged == {"a": True, "b": True, "c": False, "f": True, "h": False, "i": True, "j": True, "k": False,
                      "l": True}
    assert edge == frozenset({"b", "j"})
    assert opposed == frozenset({"f"})


def test_not_judged_has_no_norm() -> None:
    verdict = not_judged("x", "non_finite")
    assert (verdict.sender, verdict.accepted, verdict.reason) == ("x", False, "non_finite")
    assert math.isnan(verdict.norm)


def test_a_sender_every_receiver_rejects_is_excluded_at_the_fold_of_its_fourth_round_and_an_honest_one_never() -> None:
    names = ["p0", "p1", "p2", "bad"]
    standing = CellStanding(names)
    first: dict[str, int] = {}
    for r in range(6):
        verdicts = {me: [_v(s, s != "bad", 1.0, "outlier") for s in names if s != me] + [_v(me, True, 1.0)]
                    for me in names}
        for receiver, senders in standing.fold(r, verdicts).items():
            for sender in senders:
                first.setdefault(f"{receiver}>{sender}", r)
    assert first == {"p0>bad": 3, "p1>bad": 3, "p2>bad": 3}
    assert standing.excluded("p0") == frozenset({"bad"})
    assert standing.excluded("bad") == frozenset()


def test_a_cell_excludes_a_persistent_attacker_and_counts_its_rows_as_excluded() -> None:
    spec = CellSpec(task="digits", guard="semantic", attack="sign_flip:scale=10", n=4, f=1, partition="iid", seed=0,
                    rounds=6, inner_steps=2)
    result = run_cell(spec)
    assert result["exclusions"] == [
        {"round": 3, "receiver": name, "sender": "peer03", "byzantine": True, "honest_receiver": True}
        for name in ("peer00", "peer01", "peer02")
    ]
    # rounds 4 and 5: each of the 3 honest receivers drops the attacker before its guard
    assert result["verdicts"]["reasons"].get("excluded") == 6
    without = run_cell(CellSpec(**{**spec.to_dict(), "guard_params": (), "task_options": (), "reputation": False}))
    assert without["exclusions"] == []
    assert "excluded" not in without["verdicts"]["reasons"]
