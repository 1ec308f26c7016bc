"""Local simulated swarms: every peer a real OS process on 127.0.0.1, and the report of a run.

Modules:
    config: ``SimulationConfig``, the checked settings of one run.
    processes: starting processes in their own sessions, stopping them by group, finding them by marker.
    events: incremental reader of the peers' JSON-lines event files.
    orchestrator: ``LocalSwarm`` (start, watch, stop a swarm) and ``run_simulation`` (one run to its end).
    report: the JSON report from events and final models (pure).
    table: the text table of a report (pure).

Nothing is imported here, so that importing a small module (``processes``) does not load torch.
"""
