"""A tiny local swarm through the Python API: 3 honest peers on digits, 2 rounds, then one benchmark cell.

    python examples/tiny_swarm.py [WORKDIR]

WORKDIR must be new or empty (default: a fresh ``runs/tiny-swarm-<YYYYmmdd-HHMMSS>``): in an earlier run's folder the
peers would resume from its checkpoints and train nothing, so ``run_local_swarm`` refuses it.

Each peer is its own OS process with a real hivemind DHT on 127.0.0.1 (about a minute on a laptop, more on a
loaded machine). Prints the per-round accuracy, the honest consensus distance and where the report is; then the
same 3 peers in one process (``run_bench_cell``), no network. See docs/python-api.md.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import p2p_guard


def main(workdir: Path) -> None:
    """Run the swarm and the cell and print what they measured."""
    config = p2p_guard.SimulationConfig(task="digits", honest=3, byzantine=0, attack=None, rounds=2, seed=0,
                                        inner_steps=5, timeout_s=600.0)
    report = p2p_guard.run_local_swarm(config, workdir)
    for row in report["rounds"]:
        print(f"swarm round {row['round']}: accuracy {row['accuracy']:.3f}")
    print(f"consensus distance {report['consensus_distance']:.2e}")
    print(f"report: {workdir / 'report.json'}")
    cell = p2p_guard.run_bench_cell(p2p_guard.CellSpec(task="digits", guard="semantic", attack=None, n=3, f=0,
                                                       partition="iid", seed=0, rounds=2, inner_steps=5))
    print(f"bench cell: accuracy {cell['final']['accuracy']:.3f} after {len(cell['rounds'])} rounds "
          f"in {cell['seconds']:.1f} s")


if __name__ == "__main__":
    default = f"runs/tiny-swarm-{time.strftime('%Y%m%d-%H%M%S')}"
    main(Path(sys.argv[1] if len(sys.argv) > 1 else default).resolve())
