"""Every ``p2p-guard`` command takes SIGINT back at start, even when it was started with SIGINT ignored.

A non-interactive shell starts a background job (``p2p-guard simulate ... &`` in a script) with SIGINT set to
``SIG_IGN``, and Python installs no ``KeyboardInterrupt`` handler then: ``kill -INT %1`` did nothing.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

#: A child that ignores SIGINT (as a background job does), then runs ``main(["simulate"])`` whose command sends
#: itself SIGINT and would otherwise sleep 20 s and return 0.
CHILD = """
import os, signal, sys, time
signal.signal(signal.SIGINT, signal.SIG_IGN)
from p2p_guard.cli import main, simulate_cmd

def fake_run(_args):
    os.kill(os.getpid(), signal.SIGINT)
    time.sleep(20)
    return 0

simulate_cmd.run = fake_run
code = main.main(["simulate"])
print("handler restored:", signal.getsignal(signal.SIGINT) is signal.default_int_handler)
sys.exit(code)
"""


def test_a_command_started_with_sigint_ignored_stops_on_sigint() -> None:
    done = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, timeout=60, cwd=REPO,
                          check=False)
    assert done.returncode == 130, done.stderr
    assert done.stdout == "handler restored: True\n"


def test_take_sigint_replaces_an_inherited_ignore() -> None:
    from p2p_guard.cli.main import take_sigint

    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        take_sigint()
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    finally:
        signal.signal(signal.SIGINT, previous)
