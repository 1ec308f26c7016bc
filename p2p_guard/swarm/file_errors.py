"""Errors of a peer's own output files that say which file: a full or failing disk names the place to look.

A ``write``, ``flush`` or ``fsync`` that fails (``ENOSPC``, ``EIO``) raises an ``OSError`` that names no file, unlike
an ``open`` that fails. A peer whose checkpoint folder filled up stopped with ``peer stopped: [Errno 28] No space
left on device`` and nothing else (user test, helper-68): which of its checkpoint, snapshot, event or state folders
was full was left to guess.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

__all__ = ["naming"]


@contextlib.contextmanager
def naming(path: str | Path) -> Iterator[None]:
    """Re-raise an ``OSError`` of the block that names no file as one that names ``path``.

    Args:
        path: the file the block writes (its final name, not a temporary one).

    Raises:
        OSError: the block's, unchanged when it names a file already; else of the same ``errno`` and text with
            ``filename`` set to ``path`` (``[Errno 28] No space left on device: 'ck/checkpoint.pt'``), or, without
            an ``errno``, ``"<path>: <error>"``; chained to the original.
    """
    try:
        yield
    except OSError as e:
        if e.filename is not None:
            raise
        if e.errno is None:
            raise OSError(f"{path}: {e}") from e
        raise OSError(e.errno, e.strerror or str(e), str(path)) from e
