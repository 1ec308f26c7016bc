"""The ``p2p-guard`` command line (the only package that prints, installs log handlers or reads argv).

Modules:
    main: the parser and the entry point.
    typed_config: flags, TOML loading and type checks generated from a settings dataclass.
    config_files: reading a ``[table]`` of a TOML file.
    preflight: checks run before anything heavy starts (identity file, port, task, guard and attack names,
        task data).
    errors: the one error format, ``p2p-guard CMD: error: ...``.
    logging_setup: log handlers.
    bootstrap_cmd, peer_cmd, simulate_cmd, verify_proof_cmd, bench_cmd: one sub-command each.
"""
