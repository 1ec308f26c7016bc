"""The JSON-lines event stream of a peer: verdicts, round summaries, readiness and the final state.

Benchmarks and ``simulate`` read these files; nothing parses log text. One JSON object per line, flushed
after every line so a reader can follow the file while the peer runs.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, TextIO

from p2p_guard.swarm.file_errors import naming

__all__ = ["EventLog"]


class EventLog:
    """Append-only JSON-lines writer (a no-op when ``path`` is None)."""

    def __init__(self, path: str | Path | None) -> None:
        """Open ``path`` for appending (parent folders are created); None disables the log."""
        self._file: TextIO | None = None
        self._path = path
        if path is not None:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            self._file = open(path, "a", encoding="utf-8")  # noqa: SIM115 - closed in close()

    def emit(self, event: str, **fields: Any) -> None:
        """Write one event line ``{"event": event, "time": unix seconds, **fields}``."""
        if self._file is None:
            return
        with naming(str(self._path)):  # a full disk names the event file (swarm.file_errors)
            self._file.write(json.dumps({"event": event, "time": time.time(), **fields}) + "\n")
            self._file.flush()

    def close(self) -> None:
        """Close the file (idempotent)."""
        if self._file is not None:
            self._file.close()
            self._file = None
