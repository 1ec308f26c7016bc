"""Benchmarks: every aggregator against every attack, with peers simulated in one process.

Module map:

- ``cell.py``: :class:`~p2p_guard.bench.cell.CellSpec` and :func:`~p2p_guard.bench.cell.run_cell`, one whole
  swarm run in-process with the networked peer's own training, attack and guard code (one shared θ while the
  guard gives every receiver the same bits, checked every round).
- ``mixing.py``: the swarm's mixing step after each outer step (``swarm.mixing.clipped_gossip`` with the peer's
  defaults), for every peer of a cell.
- ``robustness.py``: the grids of ``p2p-guard bench robustness`` (headline, ablation, sweep), the parallel
  runner (spawned workers, resumable cell file) and the summary (worst cases, false positives, backdoor
  success, the ``--quick`` assertions, the issue's targets).
- ``report.py``: the generated Markdown report with the machine, the versions and the command.
- ``plots.py``: the PNG plots (matplotlib, imported only there).

Nothing heavy is imported here; the CLI (:mod:`p2p_guard.cli.bench_cmd`) imports the modules it needs.
"""
