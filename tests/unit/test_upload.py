"""The upload cap (``swarm/upload.py``): the shared token bucket on a fake clock, the cut-off bound and its warning.

Rates and depths are powers of two, so every expected time and token count is exact in floating point. The
capped transfer between two real p2pd daemons is in ``tests/integration/test_transport_limits.py``.
"""

from __future__ import annotations

import asyncio
import math
import time
from pathlib import Path

import pytest

from p2p_guard.swarm.config import PeerConfig
from p2p_guard.swarm.transport import AnswerSender, PayloadServer, _write_within
from p2p_guard.swarm.upload import (
    PIECE_BYTES,
    UploadLimiter,
    mbit_to_bytes_per_s,
    min_upload_bytes_per_s,
    upload_cap_warning,
    upload_receivers,
)


class FakeTime:
    """A clock and a sleep that moves it by exactly the time asked (and yields once to the loop)."""

    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def clock(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds
        await asyncio.sleep(0)


def limiter(rate: float = 1024.0, burst_s: float = 0.25) -> tuple[UploadLimiter, FakeTime]:
    fake = FakeTime()
    return UploadLimiter(rate, burst_s=burst_s, clock=fake.clock, sleep=fake.sleep), fake


def test_known_answer() -> None:
    bucket, fake = limiter()  # 1024 B/s, 0.25 s deep: 256 bytes
    assert bucket.capacity == 256.0
    assert bucket.piece_bytes == 256

    async def scenario() -> None:
        await bucket.acquire(256)  # a full bucket: at once
        assert fake.sleeps == []
        await bucket.acquire(256)  # empty: 256 / 1024 s
        assert fake.sleeps == [0.25]
        await bucket.acquire(128)
        assert fake.sleeps == [0.25, 0.125]
        assert fake.now == 0.375
        assert bucket.available() == 0.0
        fake.now += 0.0625
        assert bucket.available() == 64.0
        await bucket.acquire(192)  # 64 there, 128 missing: one sleep of 0.125 s
        assert fake.sleeps == [0.25, 0.125, 0.125]
        assert fake.now == 0.5625

    asyncio.run(scenario())


def test_a_burst_after_a_quiet_spell_is_bounded_by_the_depth() -> None:
    bucket, fake = limiter()

    async def scenario() -> None:
        fake.now += 1000.0  # a long quiet spell refills to 256 bytes, not 1024 · 1000
        assert bucket.available() == 256.0
        await bucket.acquire(128)
        await bucket.acquire(128)
        assert fake.sleeps == []
        await bucket.acquire(128)
        assert fake.sleeps == [0.125]

    asyncio.run(scenario())


def test_sustained_rate_is_exact_and_sleeps_once_per_wait() -> None:
    bucket, fake = limiter()

    async def scenario() -> None:
        for _ in range(20):
            await bucket.acquire(128)

    asyncio.run(scenario())
    # 2560 bytes, the first 256 from the full bucket, the rest at 1024 B/s; one sleep per wait (no polling).
    assert fake.now == (20 * 128 - 256) / 1024 == 2.25
    assert len(fake.sleeps) == 18
    assert set(fake.sleeps) == {0.125}


def test_concurrent_streams_share_the_rate_in_turn() -> None:
    bucket, fake = limiter()
    order: list[str] = []

    async def stream(name: str) -> None:
        for _ in range(4):
            await bucket.acquire(128)
            order.append(name)

    async def scenario() -> None:
        await bucket.acquire(256)  # empty the bucket: a full one would go to whoever asks first
        await asyncio.gather(stream("a"), stream("b"), stream("c"))

    asyncio.run(scenario())
    assert order == ["a", "b", "c"] * 4  # FIFO behind the lock: equal shares, in turn
    assert fake.now == 12 * 128 / 1024 == 1.5  # the cap holds for all streams together


def test_a_tiny_rate_still_has_a_one_byte_bucket() -> None:
    bucket, fake = limiter(rate=2.0)  # 0.25 s of 2 B/s is half a byte: the bucket holds 1
    assert bucket.capacity == 1.0
    assert bucket.piece_bytes == 1

    async def scenario() -> None:
        for _ in range(3):
            await bucket.acquire(1)

    asyncio.run(scenario())
    assert fake.sleeps == [0.5, 0.5]


def test_piece_size_is_at_most_piece_bytes() -> None:
    assert UploadLimiter(mbit_to_bytes_per_s(100.0)).piece_bytes == PIECE_BYTES
    assert UploadLimiter(8192.0).piece_bytes == 2048


@pytest.mark.parametrize("rate", [0, -1.0, math.inf, math.nan, True, "1"])
def test_bad_rate_is_refused(rate: object) -> None:
    with pytest.raises(ValueError, match="bytes_per_s must be finite and > 0"):
        UploadLimiter(rate)  # type: ignore[arg-type]


def test_bad_burst_is_refused() -> None:
    with pytest.raises(ValueError, match="burst_s must be finite and > 0"):
        UploadLimiter(1024.0, burst_s=0.0)


@pytest.mark.parametrize("nbytes", [0, 257, 1.5, True])
def test_bad_acquire_is_refused(nbytes: object) -> None:
    bucket, _ = limiter()
    with pytest.raises(ValueError, match=r"nbytes must be an int in \[1, 256\]"):
        asyncio.run(bucket.acquire(nbytes))  # type: ignore[arg-type]


def test_mbit_is_ten_to_the_six_bits() -> None:
    assert mbit_to_bytes_per_s(8.0) == 1_000_000.0
    assert mbit_to_bytes_per_s(20.0) == 2_500_000.0


LIMITS = {"fetch_timeout_s": 30.0, "fetch_idle_timeout_s": 5.0, "min_fetch_bytes_per_s": 65536}


def test_min_upload_bound() -> None:
    # Large answers: the deadline binds (b / T per receiver).
    assert min_upload_bytes_per_s(3_000_000, 8, **LIMITS) == 800_000.0
    # An answer that fits the rate rule's allowance: 16 KiB + 5 · 64 KiB is due within 5 + 5 s, so half the floor
    # per receiver is enough.
    assert min_upload_bytes_per_s(16384 + 5 * 65536, 1, **LIMITS) == 34406.4
    # Tiny answers: they must not leave a stream idle for I (b / I per receiver).
    assert min_upload_bytes_per_s(1000, 8, **LIMITS) == 1600.0
    assert min_upload_bytes_per_s(10**9, 0, **LIMITS) == 0.0
    assert min_upload_bytes_per_s(0, 8, **LIMITS) == 0.0
    # For large b the rate term tends to the floor m: 100 MB at T = ∞ in effect.
    big = min_upload_bytes_per_s(10**8, 1, fetch_timeout_s=1e9, fetch_idle_timeout_s=5.0, min_fetch_bytes_per_s=65536)
    assert 0.99 * 65536 < big < 65536
    with pytest.raises(ValueError):
        min_upload_bytes_per_s(-1, 8, **LIMITS)
    with pytest.raises(ValueError):
        min_upload_bytes_per_s(1, 8, fetch_timeout_s=0.0, fetch_idle_timeout_s=5.0, min_fetch_bytes_per_s=65536)


def test_receivers_follow_fanout_and_swarm_size() -> None:
    assert upload_receivers(PeerConfig(num_peers=4), 8) == 3
    assert upload_receivers(PeerConfig(num_peers=20), 8) == 8
    assert upload_receivers(PeerConfig(), 8) == 8  # num_peers 1: the swarm size is not given


def test_start_up_warning() -> None:
    d = 1_000_000
    base = PeerConfig(num_peers=9, fanout=8, mix_peers=4, mix_precision="fp32")
    assert upload_cap_warning(base, d) is None  # no cap
    # fp32: 4,000,000-byte payloads to 8 within their deadline max(30, 5 + 4e6 / 65536) = 66.0 s: the rate rule
    # binds, 8 · 4e6 / (5 + (4e6 − 16384) / 65536) B/s = 3.89 Mbit/s; the states (4e6 bytes to 4, paced the same
    # way since their deadline grows with their size: 4 · 4e6 / 65.8 B/s = 1.95 Mbit/s) need less. With one 30 s
    # deadline for every state they needed 4.27 Mbit/s.
    assert upload_cap_warning(base.replace(max_upload_mbit=4.0), d) is None
    line = upload_cap_warning(base.replace(max_upload_mbit=3.0), d)
    assert line is not None and "\n" not in line
    assert "below 3.89 Mbit/s" in line and "4,000,000-byte fp32 payloads to 8 at once" in line
    assert upload_cap_warning(base.replace(max_upload_mbit=3.9), d) is None
    # int8: 1,003,908-byte payloads, the rate rule binds: 8 · b / (5 + (b − 16384) / 65536) B/s = 3.2 Mbit/s
    line = upload_cap_warning(base.replace(codec="int8", max_upload_mbit=1.0), d)
    assert line is not None and "below 3.2 Mbit/s" in line and "1,003,908-byte int8 payloads" in line
    # topk: the payloads are small, so θ sets the bound: 4e6 bytes to 4 receivers, 1.95 Mbit/s
    line = upload_cap_warning(base.replace(codec="topk:density=0.02", max_upload_mbit=1.0), d)
    assert line is not None and "below 1.95 Mbit/s" in line and "fp32 states (mixing) to 4" in line
    assert upload_cap_warning(base.replace(codec="topk:density=0.02", max_upload_mbit=1.0, mix_every=0), d) is None


@pytest.mark.parametrize("value", [0.0, -1.0, math.inf, math.nan])
def test_config_refuses_a_bad_cap(value: float) -> None:
    with pytest.raises(ValueError, match="max_upload_mbit must be finite and > 0"):
        PeerConfig(max_upload_mbit=value)


def test_server_takes_the_cap_from_the_config() -> None:
    assert PayloadServer.from_config(PeerConfig(), None).upload is None
    server = PayloadServer.from_config(PeerConfig(max_upload_mbit=8.0), None)
    assert server.upload is not None and server.upload.rate == 1_000_000.0
    with pytest.raises(ValueError, match="max_upload_bytes_per_s must be finite and > 0"):
        PayloadServer("run", max_upload_bytes_per_s=0.0)


class FakeWriter:
    """An asyncio stream writer that keeps what is written."""

    def __init__(self) -> None:
        self.data = bytearray()

    def write(self, chunk: bytes | memoryview) -> None:
        self.data += chunk

    async def drain(self) -> None:
        await asyncio.sleep(0)


def test_waiting_for_tokens_does_not_count_against_the_serve_limit() -> None:
    """A 0.1 s serve limit and 24 KiB at 64 KiB/s (0.125 s beyond the 16 KiB bucket): written, not cut."""
    async def scenario() -> None:
        writer = FakeWriter()
        sender = AnswerSender(writer, UploadLimiter(65536.0), lambda n: None)  # type: ignore[arg-type]
        assert await _write_within(sender.send(bytes(24 * 1024)), 0.1, sender)
        assert len(writer.data) == 24 * 1024
        assert sender.throttled_s(time.monotonic()) >= 0.1  # the 8 KiB beyond the bucket: 0.125 s

    asyncio.run(scenario())


def test_a_write_past_the_serve_limit_is_cut() -> None:
    async def stall() -> None:
        await asyncio.sleep(10.0)

    async def scenario() -> None:
        sender = AnswerSender(FakeWriter(), None, lambda n: None)  # type: ignore[arg-type]
        assert not await _write_within(stall(), 0.05, sender)

    asyncio.run(scenario())


def test_the_cap_comes_from_the_flag_and_from_toml(tmp_path: Path) -> None:
    from p2p_guard.cli import peer_cmd
    from p2p_guard.cli.main import build_parser

    maddr = "/ip4/127.0.0.1/tcp/31337/p2p/12D3KooWDpJ7As7BWAwRMfu1VU2WCqNjvq387JEYKDBj4kx6nXTN"
    parse = build_parser().parse_args
    assert peer_cmd.resolve_config(parse(["peer", "--initial-peers", maddr])).max_upload_mbit is None
    flag = peer_cmd.resolve_config(parse(["peer", "--initial-peers", maddr, "--max-upload-mbit", "20"]))
    assert flag.max_upload_mbit == 20.0
    path = tmp_path / "peer.toml"
    path.write_text("[peer]\nmax_upload_mbit = 2.5\n")
    toml = peer_cmd.resolve_config(parse(["peer", "--config", str(path), "--initial-peers", maddr]))
    assert toml.max_upload_mbit == 2.5


def test_start_up_warning_with_float16_mixing_states() -> None:
    """The default mix_precision fp16: the states are 2·d bytes, so at d = 1e6 the fp32 or int8 payloads set the bound."""
    d = 1_000_000
    base = PeerConfig(num_peers=9, fanout=8, mix_peers=4)
    # states: 2,000,000 bytes to 4 within their paced deadline max(30, 5 + 2e6 / 65536) = 35.5 s: the rate rule
    # binds, 4 · 2e6 / (5 + (2e6 − 16384) / 65536) B/s = 1.81 Mbit/s, below the fp32 payloads' 3.89 Mbit/s
    assert upload_cap_warning(base.replace(max_upload_mbit=3.9), d) is None
    line = upload_cap_warning(base.replace(max_upload_mbit=3.0), d)
    assert line is not None
    assert "below 3.89 Mbit/s" in line and "4,000,000-byte fp32 payloads to 8" in line
    line = upload_cap_warning(base.replace(codec="int8", max_upload_mbit=1.0), d)
    assert line is not None
    assert "below 3.2 Mbit/s" in line and "1,003,908-byte int8 payloads" in line
    line = upload_cap_warning(base.replace(codec="topk:density=0.02", max_upload_mbit=1.0), d)
    assert line is not None
    assert "below 1.81 Mbit/s" in line and "2,000,000-byte fp16 states (mixing) to 4 at once" in line
