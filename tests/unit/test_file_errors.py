"""A peer's output that fails to be written (full disk) says which file.

User test (helper-68): a peer whose ``--checkpoint-dir`` was on a full 200 KiB tmpfs stopped with
``peer stopped: [Errno 28] No space left on device`` and no file name; ``mark_committed`` also left a
``.commit-*`` temporary file behind each time. ``/dev/full`` gives the same ``ENOSPC`` on write, without a file name.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest
import torch

from p2p_guard.swarm import checkpoint as checkpoint_module
from p2p_guard.swarm.checkpoint import Checkpoint, load_checkpoint, mark_committed, save_checkpoint
from p2p_guard.swarm.events import EventLog
from p2p_guard.swarm.file_errors import naming

_ENOSPC = "No space left on device"


def _disk_full(_fd: int) -> None:
    raise OSError(errno.ENOSPC, _ENOSPC)


def test_naming_adds_the_path_to_an_error_that_names_no_file() -> None:
    """The errno and text are kept; an error that names its file already is left alone."""
    with pytest.raises(OSError) as caught, naming("ck/checkpoint.pt"):
        raise OSError(errno.ENOSPC, _ENOSPC)
    assert str(caught.value) == "[Errno 28] No space left on device: 'ck/checkpoint.pt'"
    assert caught.value.errno == errno.ENOSPC
    with pytest.raises(OSError) as caught, naming("ck/checkpoint.pt"):
        raise FileNotFoundError(errno.ENOENT, "No such file or directory", "other")
    assert str(caught.value) == "[Errno 2] No such file or directory: 'other'"  # a named one is left as it is
    with pytest.raises(OSError) as caught, naming("e.jsonl"):
        raise OSError("odd")
    assert str(caught.value) == "e.jsonl: odd"


def test_a_full_disk_while_saving_a_checkpoint_names_it_and_keeps_the_old_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ENOSPC at the fsync: the error names checkpoint.pt, the temporary file goes, the last checkpoint stays."""
    old = Checkpoint("run", 3, torch.ones(4), torch.zeros(4), {})
    save_checkpoint(tmp_path, old)
    monkeypatch.setattr(checkpoint_module.os, "fsync", _disk_full)
    with pytest.raises(OSError) as caught:
        save_checkpoint(tmp_path, Checkpoint("run", 4, torch.full((4,), 2.0), torch.zeros(4), {}))
    assert str(caught.value) == f"[Errno 28] No space left on device: '{tmp_path / 'checkpoint.pt'}'"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint.pt"]  # no temporary file left
    loaded = load_checkpoint(tmp_path, run_id="run", numel=4)
    assert loaded is not None
    assert loaded.round == 3


def test_a_full_disk_while_marking_a_commit_names_the_mark_and_leaves_no_temporary_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ENOSPC at the fsync of the commit mark: it names last_commit, and no ``.commit-*`` file is left."""
    monkeypatch.setattr(checkpoint_module.os, "fsync", _disk_full)
    with pytest.raises(OSError) as caught:
        mark_committed(tmp_path, 7)
    assert str(caught.value) == f"[Errno 28] No space left on device: '{tmp_path / 'last_commit'}'"
    assert list(tmp_path.iterdir()) == []


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs Linux's /dev/full")
def test_a_full_disk_under_the_event_log_names_the_event_file() -> None:
    """A write to /dev/full fails with ENOSPC at the flush; the error names the event file."""
    events = EventLog("/dev/full")
    try:
        with pytest.raises(OSError) as caught:
            events.emit("round", round=0)
        assert str(caught.value) == "[Errno 28] No space left on device: '/dev/full'"
    finally:
        try:
            events.close()
        except OSError:  # the buffered line fails again on close
            pass
