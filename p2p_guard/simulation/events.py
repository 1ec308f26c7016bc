"""Reading a peer's JSON-lines event file while the peer is still writing it.

A peer appends one JSON object per line (``ready``, ``verdict``, ``round``, ``final``). The reader keeps its
offset and returns only complete new lines; an unfinished last line waits for the next call. Lines that are
not a JSON object are skipped with a warning: the file is input, never trusted to be well formed.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

__all__ = ["Event", "EventReader", "read_events"]

logger = logging.getLogger(__name__)

Event = dict[str, Any]


def _parse_line(raw: bytes, path: Path) -> Event | None:
    """Decode one line; None (with a warning) if it is not a JSON object with an ``event`` key."""
    text = raw.decode("utf-8", errors="replace").strip()
    if not text:
        return None
    try:
        value = json.loads(text)
    except ValueError:
        logger.warning("%s: skipping a line that is not JSON: %.80s", path, text)
        return None
    if not isinstance(value, dict) or not isinstance(value.get("event"), str):
        logger.warning("%s: skipping a line that is not an event object: %.80s", path, text)
        return None
    return value


class EventReader:
    """Incremental reader of one event file (which may not exist yet)."""

    def __init__(self, path: Path) -> None:
        """Create a reader positioned at the start of ``path``.

        Args:
            path: the JSON-lines event file of one peer.
        """
        self.path = Path(path)
        self._offset = 0
        self._partial = b""

    def read_new(self, *, final: bool = False) -> list[Event]:
        """Return the events completed since the last call, in file order.

        Args:
            final: the writer has exited; also try the unterminated last line (dropped if it is not JSON).

        Returns:
            New events (possibly none).
        """
        try:
            with open(self.path, "rb") as f:
                f.seek(self._offset)
                chunk = f.read()
        except FileNotFoundError:
            return []
        self._offset += len(chunk)
        lines = (self._partial + chunk).split(b"\n")
        self._partial = lines.pop()
        if final and self._partial:
            lines.append(self._partial)
            self._partial = b""
        return [event for raw in lines if (event := _parse_line(raw, self.path)) is not None]


def read_events(path: Path) -> list[Event]:
    """Return every event of a finished file (an unterminated last line is kept if it parses)."""
    return EventReader(path).read_new(final=True)
