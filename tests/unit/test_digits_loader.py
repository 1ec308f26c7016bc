"""Unit tests for the digits loader's child process (``tasks.digits._load_digits``) with a scripted child."""

from __future__ import annotations

import signal
import subprocess

import pytest

from p2p_guard.tasks import digits


def _child_exits(monkeypatch: pytest.MonkeyPatch, returncode: int, stderr: bytes) -> None:
    def run(command: list[str], **_kwargs: object) -> subprocess.CompletedProcess[bytes]:
        return subprocess.CompletedProcess(command, returncode, b"", stderr)

    monkeypatch.setattr(digits.subprocess, "run", run)
    digits._load_digits.cache_clear()


def test_ctrl_c_in_the_child_is_a_keyboard_interrupt(monkeypatch: pytest.MonkeyPatch) -> None:
    # a Ctrl+C at the terminal reaches the loading child too; the command then exits 130 without a traceback
    _child_exits(monkeypatch, -signal.SIGINT, b"Traceback ...\nKeyboardInterrupt\n")
    with pytest.raises(KeyboardInterrupt):
        digits._load_digits(0.2, 1)


def test_a_failing_child_is_a_runtime_error_with_its_stderr(monkeypatch: pytest.MonkeyPatch) -> None:
    _child_exits(monkeypatch, 1, b"Traceback ...\nModuleNotFoundError: No module named 'sklearn'\n")
    with pytest.raises(RuntimeError, match=r"^digits: loading scikit-learn's digits failed: Traceback \.\.\. \| "
                                           r"ModuleNotFoundError: No module named 'sklearn'$"):
        digits._load_digits(0.2, 1)
    digits._load_digits.cache_clear()
