"""``p2p-guard simulate --codec int8 --max-upload-mbit X``: every peer gets both, the report records them, and the
bytes each peer served per round are int8 payloads (``expected_payload_bytes``), not fp32 ones.

Two honest digits peers, two rounds, through the command line (one OS process per peer, real p2pd streams).
What a peer serves in a round is its payload to each receiver plus θ and momentum states for mixing (float16 by
default, ``mix_precision`` fp16: 2·d bytes each), so ``bytes_sent − served · b`` must be a multiple of 2·d with b the int8
payload size; with fp32 payloads it would be off by ``served · (4·d − b)``, not a multiple of 2·d here.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from p2p_guard.protocol.chunks import CHUNK_DIGEST_BYTES, chunk_count
from p2p_guard.protocol.codecs import expected_payload_bytes
from p2p_guard.simulation.events import read_events
from p2p_guard.simulation.orchestrator import peer_paths

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.live]

CAP_MBIT = 50.0


@pytest.mark.timeout(420)
def test_simulate_int8_reports_int8_bytes_per_round(tmp_path: Path) -> None:
    workdir, report_path = tmp_path / "run", tmp_path / "report.json"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    done = subprocess.run(
        [sys.executable, "-m", "p2p_guard.cli.main", "simulate", "--task", "digits", "--honest", "2",
         "--byzantine", "0", "--rounds", "2", "--inner-steps", "5", "--codec", "int8",
         "--max-upload-mbit", str(CAP_MBIT), "--workdir", str(workdir), "--report", str(report_path),
         "--no-progress", "--timeout-s", "360"],
        capture_output=True, text=True, timeout=400, env=env, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(report_path.read_text())
    assert report["config"]["codec"] == "int8"
    assert report["config"]["max_upload_mbit"] == CAP_MBIT
    assert "codec=int8 max_upload_mbit=50" in done.stdout

    served_total = 0
    sent: list[int] = []
    for index in range(2):
        events = read_events(peer_paths(workdir, index)["events"])
        d = next(e["numel"] for e in events if e["event"] == "ready")
        b = expected_payload_bytes("int8", d)
        assert b < d + d // 100  # about one byte per parameter, a quarter of fp32's
        rounds = [e for e in events if e["event"] == "round"]
        assert len(rounds) == 2
        for e in rounds:
            # a served payload is its chunk digests (protocol 3) and then its bytes
            states = e["bytes_sent"] - e["served"] * (CHUNK_DIGEST_BYTES * chunk_count(b) + b)
            assert states >= 0 and states % (2 * d) == 0, (e["bytes_sent"], e["served"], b, d)
            served_total += e["served"]
            sent.append(e["bytes_sent"])
    assert served_total >= 2  # payloads did cross
    mean_sent = report["bytes_sent_per_peer_per_round"]
    assert mean_sent == pytest.approx(sum(sent) / len(sent))
    fp32_equivalent = mean_sent + served_total / len(sent) * (4 * d - b)
    print(f"\nint8, d = {d:,}: {mean_sent:,.0f} bytes sent per peer per round (payload {b:,} B, "
          f"{served_total} payloads served); with fp32 payloads it would be {fp32_equivalent:,.0f}")
    assert mean_sent < fp32_equivalent


@pytest.mark.timeout(420)
def test_simulate_topk_trains_with_sparseloco_defaults(tmp_path: Path) -> None:
    """``--codec topk:density=0.02`` over real streams: peers run SparseLoCo (β = 0.95, no outer momentum), train.

    Three honest peers, three rounds: every round completes, every update crosses, and θ learns (chance is 0.1;
    a 4-round run of this size reached 0.725 when this test was written, fp32 0.897: SparseLoCo starts slower).
    """
    workdir, report_path = tmp_path / "run", tmp_path / "report.json"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    done = subprocess.run(
        [sys.executable, "-m", "p2p_guard.cli.main", "simulate", "--task", "digits", "--honest", "3",
         "--byzantine", "0", "--rounds", "3", "--codec", "topk:density=0.02", "--workdir", str(workdir),
         "--report", str(report_path), "--no-progress", "--timeout-s", "360"],
        capture_output=True, text=True, timeout=400, env=env, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(report_path.read_text())
    assert report["config"]["codec"] == "topk:density=0.02"
    assert report["final"]["accuracy"] > 0.3


@pytest.mark.timeout(420)
def test_simulate_topk_dense_head_serves_its_exact_size(tmp_path: Path) -> None:
    """``--codec topk:density=0.02,dense=head`` over real streams: every served payload is the codec's size for
    the digits MLP's shapes (top-k of 4,096 values, 714 float16 values: 1,621 bytes), every update crosses, θ learns.
    """
    from p2p_guard.tasks import load_task
    from p2p_guard.training.params import param_shapes

    codec = "topk:density=0.02,dense=head"
    shapes = param_shapes(load_task("digits").build_model(0))
    workdir, report_path = tmp_path / "run", tmp_path / "report.json"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    done = subprocess.run(
        [sys.executable, "-m", "p2p_guard.cli.main", "simulate", "--task", "digits", "--honest", "3",
         "--byzantine", "0", "--rounds", "3", "--codec", codec, "--workdir", str(workdir),
         "--report", str(report_path), "--no-progress", "--timeout-s", "360"],
        capture_output=True, text=True, timeout=400, env=env, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(report_path.read_text())
    assert report["config"]["codec"] == codec
    b = expected_payload_bytes(codec, 4810, shapes)
    assert b == 8 + 2 * 82 + 21 + 2 * 714
    served = 0
    for index in range(3):
        for e in (e for e in read_events(peer_paths(workdir, index)["events"]) if e["event"] == "round"):
            states = e["bytes_sent"] - e["served"] * (CHUNK_DIGEST_BYTES * chunk_count(b) + b)
            assert states >= 0 and states % (2 * 4810) == 0, (e["bytes_sent"], e["served"], b)
            served += e["served"]
    assert served >= 6  # payloads did cross
    assert report["final"]["accuracy"] > 0.5
