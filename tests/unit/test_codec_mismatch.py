"""A peer warns once per sender whose update came in a codec other than its own (``Peer._note_codecs``).

Every known codec is decoded, so a peer on ``--codec int8`` and one on ``--codec fp32`` trained together without a
word (helper h64): now one WARNING per such sender names both codecs, however many rounds it sends.
"""

from __future__ import annotations

import asyncio
import logging
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from p2p_guard.swarm import peer as peer_module
from p2p_guard.swarm.peer import Peer
from p2p_guard.swarm.transport import WireCounter

SENDER_A = "12D3KooWAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"
SENDER_B = "12D3KooWBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBB"
SENDER_C = "12D3KooWCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCC"


def _peer() -> Any:
    peer = Peer.__new__(Peer)
    peer.config = SimpleNamespace(codec="fp32", run_id="r", max_parameters=10, max_staleness=2, fanout=3,
                                  fetch_limits=None)
    peer.codec_warned = set()
    peer.wire_in = WireCounter()
    peer.local = SimpleNamespace(shapes=((2,),))
    peer.rng = None
    peer.p2p = peer.departures = peer.rates = peer.late = None
    peer.log = logging.LoggerAdapter(logging.getLogger("p2p_guard.test_codec"), {})
    peer._note_reachability = lambda _rows, _more: None
    return peer


def test_one_warning_per_sender_naming_both_codecs(monkeypatch: pytest.MonkeyPatch,
                                                   caplog: pytest.LogCaptureFixture) -> None:
    envelopes = {SENDER_A: SimpleNamespace(codec="int8", payload_bytes=10),
                 SENDER_B: SimpleNamespace(codec="fp32", payload_bytes=8),
                 SENDER_C: SimpleNamespace(codec="topk:density=0.5", payload_bytes=9)}

    async def check_rows(_p2p: Any, sampled: dict[str, Any], *_args: Any, **_kwargs: Any
                         ) -> tuple[dict[str, Any], list[Any]]:
        return {s: torch.zeros(2) for s in sampled if s != SENDER_C}, []  # C's payload did not arrive

    monkeypatch.setattr(peer_module, "check_rows", check_rows)
    monkeypatch.setattr(peer_module, "sample_senders", lambda env, _k, _rng: sorted(env))
    peer = _peer()
    with caplog.at_level(logging.WARNING, logger="p2p_guard"):
        for round_ in (3, 4, 5):  # A sends int8 every round: still one line
            outcome = SimpleNamespace()
            rows, _ = asyncio.run(peer._fetch_sample(round_, envelopes, asyncio.Event(), outcome))
            assert sorted(rows) == [SENDER_A, SENDER_B]
    assert [r.getMessage() for r in caplog.records] == [
        "AAAAAAAA sends its updates in codec int8, ours is fp32: accepted and decoded as usual (every known codec "
        "is); check that the peers' --codec settings agree (warned once per sender)"]
    assert peer.codec_warned == {SENDER_A}
