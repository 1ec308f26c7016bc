"""The honest consensus distance per round, from the θ snapshots the peers write (``snapshot_dir/rNNNNN.npy``).

A round's distance is computed once every honest peer has moved past it (or at the end of the run, from whatever
snapshots exist), so only one round's models are in memory at a time; the files are then deleted unless kept.
A snapshot is a peer's output, read as untrusted input: a missing, unreadable or misshapen file is left out of
that round (and counted), never fatal.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import torch

from p2p_guard.simulation.report import consensus_distance

__all__ = ["ConsensusTracker", "load_snapshot", "snapshot_path"]

logger = logging.getLogger(__name__)


def snapshot_path(snapshot_dir: Path, round_: int) -> Path:
    """Where a peer with ``snapshot_dir`` writes θ after round ``round_``."""
    return snapshot_dir / f"r{round_:05d}.npy"


def load_snapshot(path: Path) -> torch.Tensor | None:
    """Read one snapshot: a float32 ``(d,)`` array; None (with a warning) if it is missing or malformed."""
    try:
        array = np.load(path, allow_pickle=False)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as e:
        logger.warning("skipping the unreadable snapshot %s: %s", path, e)
        return None
    if array.ndim != 1 or array.dtype != np.float32 or array.size == 0:
        logger.warning(
            "skipping the snapshot %s: want float32 (d,), got %s %s", path, array.dtype, array.shape
        )
        return None
    return torch.from_numpy(array.copy())


class ConsensusTracker:
    """Computes each round's honest consensus distance as soon as every honest peer is past that round."""

    def __init__(self, snapshot_dirs: Mapping[int, Path], *, keep: bool = False) -> None:
        """Track the honest peers' snapshot folders.

        Args:
            snapshot_dirs: ``honest peer index -> its snapshot_dir``.
            keep: keep the files after use (default: delete them).
        """
        self.snapshot_dirs = dict(snapshot_dirs)
        self.keep = keep
        self.distances: dict[int, tuple[float | None, int]] = {}

    def update(self, positions: Mapping[int, int], *, final: bool = False) -> None:
        """Compute every round r that all honest peers are past by one more round (every remaining one if ``final``).

        A peer may write its snapshot of round r just after its round event, so round r waits until every honest
        peer has reported round r + 1.

        Args:
            positions: ``honest index -> 1 + its highest reported round`` (0 before any round).
            final: the run is over: also compute the rounds some peer never finished.
        """
        if not positions:
            return
        done = max(positions.values()) if final else min(positions.get(i, 0) for i in self.snapshot_dirs) - 1
        for round_ in range(done):
            if round_ not in self.distances:
                self.distances[round_] = self._measure(round_)

    def _measure(self, round_: int) -> tuple[float | None, int]:
        """``(distance, snapshots used)`` of one round; deletes the files unless ``keep``."""
        thetas = []
        paths = [snapshot_path(d, round_) for d in self.snapshot_dirs.values()]
        for path in paths:
            theta = load_snapshot(path)
            if theta is not None:
                thetas.append(theta)
        if not thetas:
            return None, 0
        shapes = {tuple(t.shape) for t in thetas}
        if len(shapes) > 1:
            common = max(shapes, key=lambda s: sum(tuple(t.shape) == s for t in thetas))
            logger.warning(
                "round %d: snapshots of different shapes %s; using the %s ones", round_, shapes, common
            )
            thetas = [t for t in thetas if tuple(t.shape) == common]
        distance = consensus_distance(thetas)
        if not self.keep:
            for path in paths:
                path.unlink(missing_ok=True)
        return distance, len(thetas)
