"""Ctrl+C on a bootstrap node: exit 0 within seconds, with no traceback and no ``p2pd`` ERROR line.

A terminal sends Ctrl+C's SIGINT to its whole foreground process group, so hivemind's ``p2pd`` (a child in the
same group) gets it too and drops our control connection at once (it exits, or lingers until the SIGTERM of our
shutdown: both happen). The node's shutdown then waited ``SHUTDOWN_TIMEOUT_S`` (10 s) for
``p2pd``'s replies to the removal of its handlers, ``p2pd`` logged ``error accepting connection ... use of closed
network connection`` at ERROR, and asyncio printed two "Task exception was never retrieved" tracebacks (the
control connection's reader and writer). SIGINT to the Python process alone was always clean; both are checked.
"""

from __future__ import annotations

import asyncio
import gc
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from p2p_guard.swarm.dht import SHUTDOWN_TIMEOUT_S, start_dht

pytestmark = [pytest.mark.integration, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
START_TIMEOUT_S = 60.0
#: Well under ``SHUTDOWN_TIMEOUT_S``, which the group case took before; the process alone takes about 1 s.
EXIT_LIMIT_S = 5.0
NOISE = ("Traceback", "never retrieved", "[ERROR]", "use of closed network connection")


@pytest.mark.timeout(120)
@pytest.mark.parametrize("whole_group", [True, False], ids=["process-group", "process-alone"])
def test_bootstrap_stops_on_ctrl_c_at_once_and_quietly(tmp_path: Path, whole_group: bool) -> None:
    """SIGINT to the node's process group (a terminal's Ctrl+C) or to the node alone: the same clean stop."""
    addr, log_path = tmp_path / "addr", tmp_path / "bootstrap.log"
    command = [sys.executable, "-m", "p2p_guard.cli.main", "bootstrap", "--identity", str(tmp_path / "id.key"),
               "--host", "127.0.0.1", "--port", "0", "--address-file", str(addr), "--no-use-relay",
               "--reachability", "private"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,  # noqa: S603
                                env=env, cwd=tmp_path, start_new_session=True)
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while not (addr.exists() and addr.read_text().strip()):
            assert proc.poll() is None, log_path.read_text(errors="replace")
            assert time.monotonic() < deadline, log_path.read_text(errors="replace")
            time.sleep(0.1)
        sent = time.monotonic()
        if whole_group:
            os.killpg(proc.pid, signal.SIGINT)  # what a terminal does on Ctrl+C
        else:
            proc.send_signal(signal.SIGINT)
        code = proc.wait(timeout=3 * SHUTDOWN_TIMEOUT_S)
        exit_s = time.monotonic() - sent
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    output = log_path.read_text(errors="replace")
    print(f"bootstrap exited {exit_s:.1f} s after SIGINT")
    assert code == 0, output
    assert exit_s < EXIT_LIMIT_S, f"exited {exit_s:.1f} s after SIGINT:\n{output}"
    assert "stopping the bootstrap node" in output
    assert not [line for line in output.splitlines() if any(word in line for word in NOISE)], output


@pytest.mark.timeout(120)
def test_dht_shutdown_after_p2pd_died_is_quick_and_leaves_no_unretrieved_errors() -> None:
    """The cause, in one process: ``p2pd`` dies of SIGINT before ``SwarmDHT.shutdown``."""
    asyncio_errors: list[dict[str, Any]] = []

    async def run() -> float:
        asyncio.get_running_loop().set_exception_handler(lambda _loop, context: asyncio_errors.append(context))
        dht = await start_dht(identity_path=None, host="127.0.0.1", port=0, correct_clock=False)
        dht.p2p._child.send_signal(signal.SIGINT)  # noqa: SLF001 - as Ctrl+C in a terminal does
        # p2pd drops our control connection at once; it does not always exit (SIGTERM at shutdown ends it). Now and
        # then it ignored SIGINT altogether here and worked on; the shutdown is then the ordinary one, quick too
        # (this test cannot tell; the process-group case above fails reliably without the fix).
        await asyncio.wait({dht.p2p._client.control._read_task}, timeout=2.0)  # noqa: SLF001
        started = time.monotonic()
        await dht.shutdown()
        took = time.monotonic() - started
        del dht
        gc.collect()  # a task whose exception nobody retrieved reports it when it is collected
        return took

    took = asyncio.run(run())
    assert took < EXIT_LIMIT_S / 2, f"shutdown took {took:.1f} s"
    assert not [c for c in asyncio_errors if "never retrieved" in str(c.get("message", ""))], asyncio_errors
