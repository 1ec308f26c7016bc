"""Integration: a slow but honest sender's payload, late at its deadline, counts one round later (``swarm.late``).

Two p2pd daemons on loopback. The sender is an honest :class:`PayloadServer` with an upload cap
(``max_upload_mbit``) whose uplink gets slower mid-transfer (as when a home uplink is shared with other traffic):
its stream stays far above the receiver's rate floor, but the receiver's deadline, extended once from the rate
it had measured so far, passes before the last byte. The round's fetch (``rounds.check_rows``) gives it the
``timeout`` verdict and carries it; the fetch resumes after its verified chunks in the background, and the next
round takes it in full, with the staleness weight 1/√2, and it decodes to the sender's update. The same fetch
of a sender cut as a slowloris (a trickle) is not carried. Both daemons are shut down in ``finally``.
"""

from __future__ import annotations

import asyncio
import math
import time
from typing import Any

import pytest
import torch

hivemind_p2p = pytest.importorskip("hivemind.p2p")

from p2p_pair import run_with_pair  # noqa: E402 - sibling helper module
from p2p_guard.guard.integrity import RoundExpectation, check_payload  # noqa: E402
from p2p_guard.protocol import PROTOCOL_VERSION, Envelope, RejectReason, encode_update, payload_digest  # noqa: E402
from p2p_guard.swarm.config import PeerConfig  # noqa: E402
from p2p_guard.swarm.late import LatePayloads  # noqa: E402
from p2p_guard.swarm.rounds import LATE_CARRIED_DETAIL, TOO_SLOW_DETAIL, check_rows  # noqa: E402
from p2p_guard.swarm.slowloris import TricklingPayloadServer  # noqa: E402
from p2p_guard.swarm.transport import PayloadServer  # noqa: E402

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

RUN = "late-live-test"
NUMEL = 400_000  # 1.6 MB of fp32: two chunks
FAST_BYTES_PER_S = 300_000.0  # the sender's cap at first (2.4 Mbit/s)
SLOW_BYTES_PER_S = 40_000.0  # after SLOW_AFTER_S (0.32 Mbit/s): 2.4 times the receiver's floor
# After the receiver's first deadline (2 · 1.6 MB at the assumed 1 MiB/s = 3.05 s), at which its extension is
# computed from the rate so far (about 12.9 s): the stream goes on in place at 40 kB/s and misses it. (Slowed at
# 0.5 s from 1 MB/s to 100 kB/s, as until the stream was cut and asked again at the first deadline, it now
# completes within the extension: 617 kB at 100 kB/s after 3.05 s, against 13 s.)
SLOW_AFTER_S = 3.5
CONFIG = PeerConfig(run_id=RUN, fetch_timeout_s=1.0, reveal_wait_s=0.5, fetch_idle_timeout_s=2.0,
                    min_fetch_bytes_per_s=16 * 1024)


def envelope(server: Any, payload: bytes) -> Envelope:
    return Envelope(protocol_version=PROTOCOL_VERSION, run_id=RUN, round=0, sender=server.peer_id.to_bytes(),
                    base_hash=bytes(32), digest=payload_digest(payload), codec="fp32", shapes=((NUMEL,),),
                    n_samples=1, payload_bytes=len(payload))


def test_a_capped_sender_late_at_its_deadline_is_applied_next_round() -> None:
    update = torch.randn(NUMEL, generator=torch.Generator().manual_seed(0))
    payload = encode_update(update, "fp32")
    expect = RoundExpectation(run_id=RUN, round=0, shapes=((NUMEL,),))

    async def scenario(server: Any, client: Any) -> None:
        served = PayloadServer(RUN, max_upload_bytes_per_s=FAST_BYTES_PER_S)
        await served.attach(server)
        served.reveal(0, payload)
        sender = server.peer_id.to_base58()
        book = LatePayloads(capacity=8, max_staleness=4)

        async def slow_down() -> None:
            await asyncio.sleep(SLOW_AFTER_S)
            assert served.upload is not None
            served.upload.rate = SLOW_BYTES_PER_S

        throttle = asyncio.create_task(slow_down())
        started = time.monotonic()
        rows, verdicts = await check_rows(client, {sender: envelope(server, payload)}, expect, CONFIG.fetch_limits,
                                          {}, asyncio.Event(), late=book)
        took = time.monotonic() - started
        await throttle
        assert rows == {}
        [verdict] = verdicts
        assert verdict.reason is RejectReason.TIMEOUT
        assert verdict.detail.endswith(LATE_CARRIED_DETAIL), verdict.detail
        assert took < CONFIG.fetch_idle_timeout_s + len(payload) / CONFIG.min_fetch_bytes_per_s  # never the floor's
        assert len(book) == 1 and book.held_bytes == len(payload)
        # the next round's inner phase: the carried fetch resumes in the background and completes
        task = next(iter(book._entries.values())).task
        await asyncio.wait_for(asyncio.shield(task), 60.0)
        late, dropped = book.take(1, lambda _s: None)
        assert dropped == []
        [row] = late
        assert (row.sender, row.staleness) == (sender, 1)
        assert math.isclose(row.weight, 1 / math.sqrt(2))
        decoded = check_payload(row.envelope, row.payload, row.expect)
        assert isinstance(decoded, torch.Tensor) and torch.equal(decoded, update)
        assert served.stats.served >= 2  # the first fetch and the resumed one (after its verified chunk)

    run_with_pair(scenario)


def test_a_trickling_sender_is_cut_and_not_carried() -> None:
    numel = 1000
    payload = encode_update(torch.ones(numel), "fp32")
    expect = RoundExpectation(run_id=RUN, round=0, shapes=((numel,),))
    config = PeerConfig(run_id=RUN, fetch_timeout_s=30.0, fetch_idle_timeout_s=1.0,
                        min_fetch_bytes_per_s=1024).fetch_limits

    async def scenario(server: Any, client: Any) -> None:
        served = TricklingPayloadServer(RUN, bytes_per_s=4.0, head_bytes=1)
        await served.attach(server)
        served.reveal(0, payload)
        sender = server.peer_id.to_base58()
        env = Envelope(protocol_version=PROTOCOL_VERSION, run_id=RUN, round=0, sender=server.peer_id.to_bytes(),
                       base_hash=bytes(32), digest=payload_digest(payload), codec="fp32", shapes=((numel,),),
                       n_samples=1, payload_bytes=len(payload))
        book = LatePayloads(capacity=8, max_staleness=4)
        rows, verdicts = await check_rows(client, {sender: env}, expect, config, {}, asyncio.Event(), late=book)
        assert rows == {}
        assert [v.reason for v in verdicts] == [RejectReason.TIMEOUT]
        assert verdicts[0].detail.startswith(TOO_SLOW_DETAIL)
        assert len(book) == 0
        assert book.take(1, lambda _s: None) == ([], [])

    run_with_pair(scenario)
