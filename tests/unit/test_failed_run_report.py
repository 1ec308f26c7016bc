"""A simulation that fails part-way (a peer exits with an error, ``--timeout-s`` runs out) keeps its figures.

User test (helper-68): ``simulate --honest 2 --byzantine 0 --rounds 50 --timeout-s 25 --report to.json`` ran 12
rounds, then said ``the run did not finish within 25 s (12/50 rounds done)``, exit 1, and wrote no report at all:
neither ``--report`` nor ``workdir/report.json``. A Ctrl+C at the same moment wrote the partial report. The default
``--timeout-s`` is 1200 s, so a long run on a slow machine lost every figure it had measured; so did a run whose
peer stopped on a full disk at round 30 of 40.

The runs use tiny ``python`` stand-ins for the peers (no torch, no network), as ``test_faults.py`` does.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from p2p_guard.cli.main import main as cli_main
from p2p_guard.simulation import orchestrator
from p2p_guard.simulation.config import SimulationConfig
from p2p_guard.simulation.orchestrator import ProcessFailed, SimulationTimeout, run_simulation

# A peer that reports a round every 0.2 s; peer ``FAIL_PEER`` exits with status 3 once it has reported
# ``FAIL_AFTER`` rounds (negative: never).
_STAND_IN = r"""
import json, sys, time
from pathlib import Path

FAIL_PEER, FAIL_AFTER = {fail_peer}, {fail_after}
args = sys.argv[1:]
def opt(name):
    return args[args.index(name) + 1]
if args[0] == "bootstrap":
    Path(opt("--address-file")).write_text("/ip4/127.0.0.1/tcp/1/p2p/QmFake\n")
    time.sleep(600)
    sys.exit(0)
index, n, rounds = int(opt("--peer-index")), int(opt("--num-peers")), int(opt("--rounds"))
events = open(opt("--events"), "a")
def emit(kind, **fields):
    events.write(json.dumps({{"event": kind, "time": time.time(), **fields}}) + "\n")
    events.flush()
emit("ready", peer_id=f"P{{index}}", byzantine=False, attack=None, maddrs=[], numel=2, startup_s=0.1)
for r in range(rounds):
    if index == FAIL_PEER and r == FAIL_AFTER:
        print("peer stopped: [Errno 28] No space left on device", file=sys.stderr)
        sys.exit(3)
    time.sleep(0.2)
    emit("commit", round=r, base_round=r, payload_bytes=8)
    for j in range(n):
        if j != index:
            emit("verdict", round=r, sender=f"P{{j}}", commit_round=r, accepted=True, reason=None, detail="",
                 norm=1.0, cosine=1.0, weight=1.0)
    emit("round", round=r, loss=1.0 / (r + 1), accuracy=0.5, perplexity=None, accepted=n - 1, rejected=0,
         seconds=0.2, compute_s=0.1, bytes_sent=8 * (n - 1), bytes_received=8 * (n - 1), fetched=n - 1,
         served=n - 1, state_hash="h", train_loss=1.0, snapshot=None)
"""


def _stand_in(tmp_path: Path, *, fail_peer: int, fail_after: int) -> tuple[str, str]:
    program = tmp_path / "stand_in_peer.py"
    program.write_text(_STAND_IN.format(fail_peer=fail_peer, fail_after=fail_after))
    return sys.executable, str(program)


def _rounds(report: dict[str, Any]) -> list[int]:
    return [row["round"] for row in report["rounds"] if row.get("loss") is not None]


@pytest.mark.timeout(120)
def test_a_peer_that_fails_part_way_leaves_the_report_of_the_rounds_done(tmp_path: Path) -> None:
    """Peer 1 exits 3 after 3 rounds: ProcessFailed carries the report of rounds 0-2, written to report.json."""
    config = SimulationConfig(honest=2, byzantine=0, attack=None, rounds=40, stop_grace_s=2.0, memory_sample_s=0)
    workdir = tmp_path / "run"
    with pytest.raises(ProcessFailed) as caught:
        run_simulation(config, workdir, entry=_stand_in(tmp_path, fail_peer=1, fail_after=3), poll_interval_s=0.1)
    error = caught.value
    assert error.path == workdir / "report.json"
    assert error.report is not None
    assert json.loads(error.path.read_text()) == json.loads(json.dumps(error.report))
    assert error.report["failed"] == {"rounds_completed": 3, "rounds_planned": 40, "error": str(error)}
    assert _rounds(error.report)[:3] == [0, 1, 2]
    assert error.report["rounds"][2]["loss"] == pytest.approx(1 / 3)
    assert "interrupted" not in error.report


@pytest.mark.timeout(120)
def test_a_run_past_its_timeout_leaves_the_report_of_the_rounds_done(tmp_path: Path) -> None:
    """``timeout_s`` runs out after a few rounds: SimulationTimeout carries the partial report, already written."""
    config = SimulationConfig(honest=2, byzantine=0, attack=None, rounds=500, timeout_s=3.0, stop_grace_s=2.0,
                              memory_sample_s=0)  # fmt: skip
    workdir = tmp_path / "run"
    with pytest.raises(SimulationTimeout) as caught:
        run_simulation(config, workdir, entry=_stand_in(tmp_path, fail_peer=-1, fail_after=-1), poll_interval_s=0.1)
    report = caught.value.report
    assert report is not None
    assert caught.value.path == workdir / "report.json"
    done = report["failed"]["rounds_completed"]
    assert done >= 1
    assert report["failed"]["rounds_planned"] == 500
    assert report["failed"]["error"].startswith("the run did not finish within 3 s (")
    assert _rounds(report)[:done] == list(range(done))


@pytest.mark.timeout(120)
def test_simulate_writes_the_partial_report_of_a_failed_run_to_report_and_says_where(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The CLI prints the table, writes ``--report``, names it in its one error line, and exits 1."""
    entry = _stand_in(tmp_path, fail_peer=0, fail_after=2)
    real = orchestrator.run_simulation
    monkeypatch.setattr(orchestrator, "run_simulation",
                        lambda config, workdir, **kw: real(config, workdir, **{**kw, "entry": entry}))  # fmt: skip
    out, workdir = tmp_path / "partial.json", tmp_path / "run"
    code = cli_main(["simulate", "--honest", "2", "--byzantine", "0", "--rounds", "40", "--stop-grace-s", "2",
                     "--memory-sample-s", "0", "--workdir", str(workdir), "--report", str(out),
                     "--no-progress"])  # fmt: skip
    assert code == 1
    captured = capsys.readouterr()
    report = json.loads(out.read_text())
    assert report == json.loads((workdir / "report.json").read_text())
    assert report["failed"]["rounds_completed"] == 2
    assert "round    loss" in captured.out
    error_lines = [line for line in captured.err.splitlines() if line.startswith("p2p-guard simulate: error:")]
    assert len(error_lines) == 1
    assert error_lines[0].startswith("p2p-guard simulate: error: peer0 exited with code 3 before the end of the run")
    assert error_lines[0].endswith(f"; partial report of 2 completed round(s): {out}")


@pytest.mark.timeout(120)
def test_a_run_that_fails_before_any_round_carries_no_report(tmp_path: Path) -> None:
    """The only peer exits 3 before its first round: the error is raised as before, with no report of nothing."""
    config = SimulationConfig(honest=1, byzantine=0, attack=None, rounds=5, stop_grace_s=2.0, memory_sample_s=0)
    workdir = tmp_path / "run"
    with pytest.raises(ProcessFailed, match=r"^peer0 exited with code 3 before the end of the run") as caught:
        run_simulation(config, workdir, entry=_stand_in(tmp_path, fail_peer=0, fail_after=0), poll_interval_s=0.1)
    assert caught.value.report is None
    assert caught.value.path is None
    assert not (workdir / "report.json").exists()


def _unhandled_hangup(_signum: int, _frame: object) -> None:
    raise RuntimeError("SIGHUP reached the handler simulate found installed: simulate does not handle it")


@pytest.mark.timeout(120)
def test_simulate_hung_up_writes_the_partial_report_and_exits_129(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """SIGHUP (the terminal closed) is a stop like SIGTERM: partial report written and named, exit 128 + 1.

    Before, it ended ``simulate`` at once (exit 129) with no report, and its peers were left to the reapers.
    """
    entry = _stand_in(tmp_path, fail_peer=-1, fail_after=-1)
    real = orchestrator.run_simulation
    monkeypatch.setattr(orchestrator, "run_simulation",
                        lambda config, workdir, **kw: real(config, workdir, **{**kw, "entry": entry}))  # fmt: skip
    previous = signal.signal(signal.SIGHUP, _unhandled_hangup)  # not the default: that would end pytest itself
    out, workdir = tmp_path / "partial.json", tmp_path / "run"
    timer = threading.Timer(4.0, os.kill, (os.getpid(), signal.SIGHUP))
    timer.start()
    try:
        code = cli_main(["simulate", "--honest", "2", "--byzantine", "0", "--rounds", "500", "--stop-grace-s", "2",
                         "--memory-sample-s", "0", "--workdir", str(workdir), "--report", str(out),
                         "--no-progress"])  # fmt: skip
    finally:
        timer.cancel()
        signal.signal(signal.SIGHUP, previous)
    assert code == 129
    report = json.loads(out.read_text())
    done = report["interrupted"]["rounds_completed"]
    assert done >= 1
    error_lines = [line for line in capsys.readouterr().err.splitlines() if "simulate: error:" in line]
    assert error_lines == [f"p2p-guard simulate: error: hung up after {done} completed round(s); every process was "
                           f"stopped; partial report: {out}; logs in {workdir}"]
