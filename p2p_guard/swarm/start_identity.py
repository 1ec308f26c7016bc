"""A peer's identity during start-up: a new key file appears only once the peer has started.

``Identity.load_or_create`` writes a fresh key file at once, so a start that failed afterwards (an unreachable
``--initial-peers`` address, a task that cannot be built, a taken port) still left ``peer_identity.key`` in the
current folder. :class:`StartIdentity` keeps a fresh key in a private scratch folder (mode 0700, the key file
0600) for ``p2pd`` to read at start-up, and writes it to its real path only when :meth:`StartIdentity.keep` is
called, after the DHT is up. An existing key file is used as before, in place.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
from pathlib import Path
from typing import IO

from p2p_guard.identity import Identity
from p2p_guard.identity.keys import (
    _create_exclusive,  # the key module's atomic 0600 create (not re-implemented)
    lock_key_file,
)

__all__ = ["StartIdentity"]

logger = logging.getLogger(__name__)


class StartIdentity:
    """Our key for a peer's start-up, and the key file ``p2pd`` reads meanwhile.

    Args:
        path: the identity file (``--identity``). If it exists it is loaded (a corrupt one raises, as
            ``Identity.load`` does) and ``key_path`` is ``path``; else a fresh key is generated and
            ``key_path`` is a scratch copy of it outside ``path``'s folder, until :meth:`keep`.

    Attributes:
        identity: our key.
        key_path: the file to hand ``p2pd`` (``start_dht(identity_path=...)``).
        fresh: True while a fresh key has not been written to ``path`` yet.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._scratch: Path | None = None
        self._lock: IO[bytes] | None = None
        if self.path.exists():
            self.identity = Identity.load(self.path)
            self.key_path = self.path
            return
        self.identity = Identity.generate()
        self._scratch = Path(tempfile.mkdtemp(prefix="p2p_guard-identity-"))  # mode 0700
        self.key_path = self._scratch / "identity.key"
        descriptor = os.open(self.key_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(descriptor, "wb") as handle:
            handle.write(self.identity.to_key_bytes())

    @property
    def fresh(self) -> bool:
        """Whether the key is a fresh one not yet written to :attr:`path`."""
        return self.identity.path is None

    def discard_scratch(self) -> None:
        """Remove the scratch copy of a fresh key (``p2pd`` has read it, or will not start); idempotent."""
        if self._scratch is not None:
            shutil.rmtree(self._scratch, ignore_errors=True)
            self._scratch = None

    def keep(self) -> Identity:
        """Start-up got through: write a fresh key to :attr:`path` (mode 0600, atomically); return the identity.

        The new file is locked (``identity.keys.lock_key_file``) until :meth:`release`: a second peer started on it
        meanwhile is refused at start, as on a key that existed when this one started.

        A no-op for a key loaded from its file, or a second time.

        Raises:
            ValueError: another process created :attr:`path` while we started (it now holds another key than
                the one this peer runs with).
            OSError: the file or its folder cannot be written.
        """
        self.discard_scratch()
        if not self.fresh:
            return self.identity
        self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        if not _create_exclusive(self.path, self.identity.to_key_bytes()):
            raise ValueError(f"--identity {self.path}: another process created this file while this peer started "
                             f"with a new key ({self.identity.peer_id_b58}); start one peer per identity file")
        self.identity.path = self.path
        try:  # held for the peer's life, like the lock `p2p-guard peer` takes on an existing key at start
            self._lock = lock_key_file(self.path)
        except BlockingIOError:
            raise ValueError(f"--identity {self.path}: another peer or bootstrap node on this machine took this new "
                             "identity file while this peer started; start one peer per identity file") from None
        logger.info("created a new identity at %s (PeerID %s); keep this file: it is this peer's identity",
                    self.path, self.identity.peer_id_b58)
        return self.identity

    def release(self) -> None:
        """Release the lock :meth:`keep` took on a fresh key file (the peer stops); idempotent."""
        if self._lock is not None:
            self._lock.close()
            self._lock = None
