"""Rule 9: a peer whose clock is off joins (its DHT time corrected) or exits with one line; never a traceback.

A bootstrap node and one peer run with the machine's clock; a second peer runs under Debian's ``faketime``
(libfaketime shifts every clock of that process by the offset). hivemind alone refuses a node more than 3 s
off its initial peers with an uncaught "local time must be within 3 seconds of others" traceback.

- At ±30 s the skewed peer measures its offset against the bootstrap node, logs one warning naming it, and both
  peers complete their rounds and exit 0; no log has a traceback, and the other peer is never told to check
  ``--initial-peers``.
- At +900 s (beyond ``MAX_CLOCK_CORRECTION_S``) the skewed peer exits 1 at start-up with one error line that
  says how far off its clock is and to enable NTP, and no traceback.

Skipped with a reason when ``faketime`` is not installed (``apt-get install faketime``).
"""

from __future__ import annotations

import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_swarm import Swarm, _wait

from p2p_guard.simulation.processes import launch
from p2p_guard.swarm.clock import MAX_CLOCK_CORRECTION_S

pytestmark = [
    pytest.mark.integration,
    pytest.mark.slow,
    pytest.mark.live,
    pytest.mark.skipif(shutil.which("faketime") is None,
                       reason="faketime is not installed (Debian: apt-get install faketime)"),
]

REPO = Path(__file__).resolve().parents[2]
START_TIMEOUT_S = 240.0
RUN_TIMEOUT_S = 300.0
ROUNDS = 3
CLI = [sys.executable, "-m", "p2p_guard.cli.main"]


class SkewSwarm(Swarm):
    """The live-swarm harness (``test_swarm.Swarm``) with its own commands: some peers under ``faketime``."""

    def start_bootstrap(self) -> str:
        addr = self.workdir / "bootstrap.addr"
        self.procs["bootstrap"] = launch(
            "bootstrap", [*CLI, "bootstrap", "--identity", str(self.workdir / "bootstrap.key"), "--host",
                          "127.0.0.1", "--port", "0", "--address-file", str(addr)],
            log_path=self.workdir / "bootstrap.log", env=self.env, cwd=REPO)
        self.wait(lambda: addr.exists() and addr.read_text().strip() != "", START_TIMEOUT_S, "bootstrap address")
        return addr.read_text().split()[0]

    def start_peer(self, index: int, maddr: str, *, offset: str | None = None,  # type: ignore[override]
                   min_peers: int = 2) -> None:
        name = f"peer{index}"
        command = [*CLI, "peer", "--initial-peers", maddr, "--run-id", "clock-skew", "--task", "digits",
                   "--num-peers", "2", "--min-peers", str(min_peers), "--peer-index", str(index), "--rounds",
                   str(ROUNDS), "--inner-steps", "2", "--identity", str(self.workdir / f"{name}.key"), "--host",
                   "127.0.0.1", "--no-progress", "--no-nat-port-map", "--no-use-auto-relay"]
        if offset is not None:
            command = ["faketime", "-f", offset, *command]
        self.procs[name] = launch(name, command, log_path=self.workdir / f"{name}.log", env=self.env, cwd=REPO)

    def log(self, name: str) -> str:  # type: ignore[override]
        """The log of process ``name`` (``peer0``, ``bootstrap``, ...)."""
        return (self.workdir / f"{name}.log").read_text(errors="replace")

    def wait(self, predicate: object, timeout_s: float, what: str) -> None:
        """Poll ``predicate`` until true; on timeout fail with every log's tail."""
        _wait(predicate, timeout_s, what, self)


@pytest.fixture
def skew(tmp_path: Path) -> Iterator[SkewSwarm]:
    swarm = SkewSwarm(tmp_path)
    try:
        yield swarm
    finally:
        swarm.stop()


@pytest.mark.timeout(600)
@pytest.mark.parametrize(("offset", "direction"), [("+30s", "ahead of"), ("-30s", "behind")])
def test_a_peer_30_s_off_joins_and_completes_rounds(skew: SkewSwarm, offset: str, direction: str) -> None:
    maddr = skew.start_bootstrap()
    skew.start_peer(0, maddr)
    skew.start_peer(1, maddr, offset=offset)
    codes = skew.wait_exit(["peer0", "peer1"], RUN_TIMEOUT_S)
    logs = {name: skew.log(name) for name in ("peer0", "peer1", "bootstrap")}
    assert codes == {"peer0": 0, "peer1": 0}, f"{codes}\n{logs['peer1'][-3000:]}"
    for name, text in logs.items():
        assert "Traceback" not in text and "within 3 seconds" not in text, f"{name}:\n{text[-3000:]}"
    assert "check --initial-peers" not in logs["peer0"]
    corrections = [line for line in logs["peer1"].splitlines() if "clock is" in line]
    assert len(corrections) == 1, logs["peer1"][-3000:]
    seconds = float(corrections[0].split("clock is ")[1].split(" s ")[0])
    assert 27.0 <= seconds <= 33.0 and direction in corrections[0], corrections
    for name in ("peer0", "peer1"):
        assert f"peer finished after {ROUNDS} round(s)" in logs[name], logs[name][-3000:]
    assert "clock is" not in logs["peer0"]


@pytest.mark.timeout(400)
def test_a_peer_too_far_off_exits_with_one_line(skew: SkewSwarm) -> None:
    maddr = skew.start_bootstrap()
    skew.start_peer(1, maddr, offset="+900s", min_peers=1)
    codes = skew.wait_exit(["peer1"], START_TIMEOUT_S)
    text = skew.log("peer1")
    assert codes == {"peer1": 1}, text[-3000:]
    assert "Traceback" not in text, text[-3000:]
    errors = [line for line in text.splitlines() if " ERROR " in line]
    assert len(errors) == 1, text[-3000:]
    assert "clock is 900 s ahead of the swarm's" in errors[0], errors
    assert f"more than {MAX_CLOCK_CORRECTION_S:.0f} s cannot be corrected" in errors[0]
    assert "NTP" in errors[0]
