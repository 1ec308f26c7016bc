"""The one typed verdict (``swarm.verdicts``): constructors and the ``verdict`` event's fields."""

from __future__ import annotations

import json
import math

from p2p_guard.protocol.reasons import RejectReason
from p2p_guard.swarm.verdicts import SenderVerdict


def test_a_rejection_carries_the_protocol_reason_and_no_guard_figures() -> None:
    verdict = SenderVerdict.rejected("12D3KooWsender", 7, RejectReason.EQUIVOCATION, "banned: equivocation proof")
    assert verdict.as_event() == {"sender": "12D3KooWsender", "commit_round": 7, "accepted": False,
                                  "reason": "equivocation", "detail": "banned: equivocation proof",
                                  "norm": None, "cosine": None, "weight": 1.0, "staleness": 0,
                                  "record": None}


def test_a_guard_verdict_keeps_finite_figures_and_drops_the_others() -> None:
    verdict = SenderVerdict.judged("s", 3, True, "accepted", "", 2.5, math.nan, 0.5, 2)
    assert (verdict.norm, verdict.cosine, verdict.weight, verdict.staleness) == (2.5, None, 0.5, 2)
    assert SenderVerdict.judged("s", 3, False, "outlier", "far", math.inf, -0.25, 1.0, 0).norm is None
    assert verdict.record is None  # no record given
    assert SenderVerdict.judged("s", 3, True, "accepted", "", 1.0, -0.2, 1.0, 0, -0.125).record == -0.125
    assert SenderVerdict.judged("s", 3, True, "accepted", "", 1.0, -0.2, 1.0, 0, math.nan).record is None
    json.dumps(verdict.as_event(), allow_nan=False)  # the event log writes strict JSON
