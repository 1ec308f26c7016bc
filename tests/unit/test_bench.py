"""The robustness benchmark: one in-process cell, the grid, the summary, the report and the CLI, on digits."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
import torch

from p2p_guard.bench import cell as cell_module
from p2p_guard.bench.cell import CellSpec, run_cell
from p2p_guard.bench.report import render, write_report
from p2p_guard.bench.robustness import (
    CLEAN,
    BenchConfig,
    Grid,
    Stat,
    ablation_flags,
    acceptance_checks,
    acceptance_config,
    bench_attacks,
    cell_key,
    code_digest,
    code_fingerprint,
    end_torn_line,
    expert_cells,
    headline_cells,
    load_cells,
    quick_checks,
    quick_config,
    run_benchmark,
    run_cells,
    sweep_cells,
)
from p2p_guard.cli.main import main
from p2p_guard.guard import Guard, GuardResult

ROUND_KEYS = {"round", "accuracy", "loss", "train_loss", "tp", "fp", "tn", "fn", "asr", "asr_max", "spread"}


def _spec(**changes: Any) -> CellSpec:
    base = CellSpec(task="digits", guard="mean", attack=None, n=2, f=0, partition="iid", seed=0, rounds=1)
    return dataclasses.replace(base, **changes)


def _tiny(**changes: Any) -> BenchConfig:
    cfg = quick_config(seeds=1)
    base = dataclasses.replace(
        cfg, guards=("mean", "semantic"), attacks=("sign_flip:scale=10",), n=4, f=1, rounds=1, inner_steps=2,
        ablation_flags=("verdict",), sweep_fractions=(0.0, 0.25), sweep_partitions=("iid",), sweep_worst=1,
    )  # fmt: skip
    return dataclasses.replace(base, **changes)


def test_two_peers_one_round_runs_with_the_report_keys() -> None:
    result = run_cell(_spec())
    assert set(result) >= {
        "spec",
        "arm",
        "attack",
        "numel",
        "rounds",
        "final",
        "verdicts",
        "shared_theta",
        "state_hash",
        "seconds",
        "cpu_seconds",
        "skipped_steps",
    }
    assert result["numel"] == 64 * 64 + 64 + 64 * 10 + 10
    assert len(result["rounds"]) == 1 and set(result["rounds"][0]) == ROUND_KEYS
    assert 0.0 <= result["final"]["accuracy"] <= 1.0
    assert result["shared_theta"] is False  # every receiver judged (CellSpec.every_receiver, the default)
    assert run_cell(_spec(every_receiver=False))["shared_theta"] is True  # the shortcut: one θ, checked
    # Each of the 2 honest receivers judges the other peer: 2 verdicts, both honest and accepted.
    assert {k: result["verdicts"][k] for k in ("tp", "fp", "tn", "fn")} == {
        "tp": 0,
        "fp": 0,
        "tn": 2,
        "fn": 0,
    }
    assert (result["arm"], result["attack"]) == ("mean", CLEAN)
    json.dumps(result, allow_nan=False)


def test_cell_is_deterministic() -> None:
    spec = _spec(n=3, f=1, attack="sign_flip:scale=10", guard="semantic", rounds=2, inner_steps=3)
    a, b = run_cell(spec), run_cell(spec)
    assert a["state_hash"] == b["state_hash"]
    assert a["rounds"] == b["rounds"]


def test_cell_matches_a_hand_written_round() -> None:
    """One round of the harness equals the swarm's recipe written out by hand (mean guard, no attack)."""
    from p2p_guard.tasks import load_task
    from p2p_guard.training.local import LocalModel, round_generator

    spec = _spec(n=3, rounds=1, inner_steps=4)
    result = run_cell(spec)
    task = load_task("digits")
    peers = [LocalModel(task, seed=0, num_shards=3, shard_index=i, partition="iid") for i in range(3)]
    deltas = [
        p.train_round(4, round_generator(spec.resolved_run_id, 0, i, 0, 1))[0] for i, p in enumerate(peers)
    ]
    peers[0].apply(torch.stack(deltas).mean(dim=0))
    assert abs(peers[0].evaluate().accuracy - result["final"]["accuracy"]) < 1e-9
    assert pytest.approx(peers[0].evaluate().loss, rel=1e-6) == result["final"]["loss"]


def test_attack_counts_and_data_attack() -> None:
    result = run_cell(
        _spec(n=5, f=2, attack="sign_flip:scale=10", guard="semantic", inner_steps=3, assumed_byzantine=2)
    )
    v = result["verdicts"]
    # 3 honest receivers x (2 other honest + 2 Byzantine senders).
    assert v["tp"] + v["fn"] == 6 and v["fp"] + v["tn"] == 6
    flipped = run_cell(_spec(n=3, f=1, attack="label_flip", inner_steps=3))
    assert flipped["final"]["asr"] is None


def test_backdoor_reports_attack_success_rate() -> None:
    names, _ = bench_attacks(["backdoor"])
    if not names:
        pytest.skip("no backdoor attack in the registry")
    result = run_cell(_spec(n=3, f=1, attack=names[0], inner_steps=3))
    assert 0.0 <= result["final"]["asr"] <= result["final"]["asr_max"] <= 1.0


def test_the_backdoor_headline_is_the_most_fooled_honest_peer() -> None:
    """Grid.final(key="asr_max") reads the worst honest peer; a cell recorded before asr_max gives its mean."""
    def cell(seed: int, final: dict[str, float]) -> dict[str, object]:
        spec = {"arm": "semantic", "attack": "backdoor", "f": 1, "partition": "iid", "seed": seed}
        return {"spec": spec, "arm": "semantic", "attack": "backdoor", "final": final}

    grid = Grid([cell(0, {"accuracy": 0.9, "asr": 0.2, "asr_max": 0.6}), cell(1, {"accuracy": 0.9, "asr": 0.4})])
    stat = grid.final("semantic", "backdoor", 1, "iid", key="asr_max")
    assert stat is not None and stat.mean == pytest.approx(0.5)  # (0.6 + 0.4) / 2
    mean = grid.final("semantic", "backdoor", 1, "iid", key="asr")
    assert mean is not None and mean.mean == pytest.approx(0.3)


def test_wire_attacks_are_refused() -> None:
    with pytest.raises(ValueError, match="only update and data attacks run in-process"):
        run_cell(_spec(n=3, f=1, attack="nan"))


def test_sender_ids_must_match_n() -> None:
    with pytest.raises(ValueError, match="sender_ids"):
        run_cell(_spec(), sender_ids=["a"])
    with pytest.raises(ValueError, match="sender_ids"):
        run_cell(_spec(), sender_ids=["a", "a"])


def test_spec_checks() -> None:
    with pytest.raises(ValueError, match="f must be"):
        _spec(f=2)
    with pytest.raises(ValueError, match="need an attack"):
        _spec(n=3, f=1)
    assert _spec(guard="semantic", guard_params=(("verdict", False),)).arm == "semantic -verdict"


@dataclasses.dataclass(frozen=True)
class _SelfishMean:
    """A rule that depends on the receiver: the mean, plus a nudge of the receiver's own row."""

    def __call__(self, updates: torch.Tensor, ctx: Any) -> torch.Tensor:
        out = updates.mean(dim=0)
        return out + 0.1 * updates[ctx.own_index] if ctx.own_index is not None else out


def test_receiver_dependent_guard_runs_once_per_receiver(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(
        cell_module, "build_guard", lambda name, **_: Guard(name="selfish", aggregator=_SelfishMean())
    )
    result = run_cell(_spec(n=3, rounds=2, inner_steps=2))
    assert result["shared_theta"] is False
    assert run_cell(_spec(n=3, rounds=2, inner_steps=2))["state_hash"] == result["state_hash"]


def test_non_finite_aggregate_skips_the_step(monkeypatch: pytest.MonkeyPatch) -> None:
    def inf_guard(updates: torch.Tensor, ctx: Any) -> GuardResult:
        return GuardResult(torch.full_like(updates[0], float("inf")), ())

    monkeypatch.setattr(cell_module, "judge_rows", lambda *a, **k: inf_guard(a[1]["peer00"][None], None))
    result = run_cell(_spec(n=2, rounds=1))
    assert result["skipped_steps"] == 2


def test_grid_builders_cover_every_arm() -> None:
    cfg = _tiny(seeds=2)
    cells = headline_cells(cfg)
    assert len(cells) == 2 * 2 * 2  # guards x (clean + 1 attack) x seeds
    clean = [c for c in cells if c.attack is None]
    assert all(c.f == 0 for c in clean)
    assert {c.assumed_byzantine for c in cells} == {None}  # no oracle
    assert {c.rounds for c in cells} == {cfg.rounds}
    assert expert_cells(cfg) == []
    expert = expert_cells(dataclasses.replace(cfg, expert_guards=("semantic",)))
    assert [(c.arm, c.attack, c.assumed_byzantine) for c in expert] == [
        ("semantic (true f)", None, cfg.f),
        ("semantic (true f)", None, cfg.f),
        ("semantic (true f)", "sign_flip:scale=10", cfg.f),
        ("semantic (true f)", "sign_flip:scale=10", cfg.f),
    ]
    sweep = sweep_cells(cfg, {"mean": ["sign_flip:scale=10"], "semantic": ["sign_flip:scale=10"]})
    assert sorted({(c.f, c.attack) for c in sweep}) == [(0, None), (1, "sign_flip:scale=10")]
    assert "verdict" in ablation_flags()


def test_resume_reuses_only_cells_of_the_same_code(tmp_path: Path) -> None:
    path = tmp_path / "cells.jsonl"
    result = run_cell(_spec())
    path.write_text(
        json.dumps({**result, "code": "old"}) + "\n" + json.dumps({**result, "code": "new"}) + "\n"
    )
    assert len(load_cells(path, "new")) == 1
    assert load_cells(path, "other") == {}
    assert len(code_fingerprint()) == 16


def test_resume_skips_lines_that_are_not_cells(tmp_path: Path) -> None:
    """--resume --cells with another file was a traceback (UnicodeDecodeError, or a JSON line without a spec)."""
    path = tmp_path / "cells.jsonl"
    cell = {"spec": {"guard": "mean"}, "code": "c", "final_accuracy": 0.5}
    path.write_bytes(b"\x90\xff\xfe garbage\n1\n[]\n{\"code\": \"c\"}\n{\"spec\": 3}\n" + json.dumps(cell).encode() + b"\n")
    assert load_cells(path, "c") == {cell_key(cell["spec"]): cell}
    assert load_cells(path) == {cell_key(cell["spec"]): cell}


def test_code_fingerprint_ignores_docstrings_and_comments_but_not_code(tmp_path: Path) -> None:
    module = tmp_path / "guard" / "rule.py"
    module.parent.mkdir()
    module.write_text('"""Doc."""\nX = 1\n"""X\'s doc."""\n\n\ndef f(a):\n    """Doc."""\n    return a + X  # why\n')
    before = code_fingerprint(tmp_path)
    module.write_text('"""Other doc."""\nX = 1\n\n\ndef f(a):\n    return (a +\n            X)\n')
    assert code_fingerprint(tmp_path) == before
    module.write_text('"""Doc."""\nX = 2\n\n\ndef f(a):\n    return a + X\n')
    assert code_fingerprint(tmp_path) != before
    module.write_text('def f(a):\n    """Only a docstring."""\n')
    assert code_digest('def f(a):\n    pass\n') == code_digest(module.read_text())
    assert code_digest("def (") != code_digest("def )")  # a file that does not parse still counts
    without_cli = code_fingerprint(tmp_path)
    (tmp_path / "cli").mkdir()
    (tmp_path / "cli" / "main.py").write_text("Y = 3\n")  # the CLI is left out
    assert code_fingerprint(tmp_path) == without_cli and len(before) == 16


def test_run_cells_resumes_from_the_cell_file(tmp_path: Path) -> None:
    path = tmp_path / "cells.jsonl"
    specs = [_spec(), _spec(seed=1)]
    lines: list[str] = []
    first = run_cells(specs, jobs=1, sink=lambda r: lines.append(json.dumps(r)))
    path.write_text("\n".join(lines) + "\n{torn")
    done = load_cells(path)
    assert set(done) == {cell_key(s) for s in specs}
    again = run_cells(specs, jobs=1, done=done, sink=lambda r: pytest.fail("reran a finished cell"))
    assert [r["state_hash"] for r in again] == [r["state_hash"] for r in first]


def test_a_resumed_run_does_not_append_to_a_torn_last_line(tmp_path: Path) -> None:
    """A kill mid-write left '{torn' with no newline; the first cell of the resumed run joined it and was lost."""
    path = tmp_path / "cells.jsonl"
    path.write_text("{torn")
    results, _ = run_benchmark(_tiny(), jobs=1, cells_path=path, resume=True)
    lines = path.read_text().splitlines()
    assert lines[0] == "{torn" and len(lines) == 1 + len(results)
    assert len(load_cells(path)) == len({cell_key(r["spec"]) for r in results})
    path.write_bytes(b"")
    end_torn_line(path)
    end_torn_line(tmp_path / "missing.jsonl")
    assert path.read_bytes() == b"" and not (tmp_path / "missing.jsonl").exists()


def test_a_failing_cell_is_reported_not_raised() -> None:
    lines: list[dict[str, Any]] = []
    (result,) = run_cells([_spec(guard="no_such_rule")], jobs=1, sink=lines.append)
    assert "unknown guard" in result["error"]
    assert lines == []  # left out of the cell file, so --resume retries it
    grid = Grid([result, run_cell(_spec())])
    assert len(grid.failed) == 1
    assert grid.final("mean", CLEAN, 0, "iid") is not None


@pytest.mark.slow
@pytest.mark.timeout(180)
@pytest.mark.usefixtures("process_reaper")  # worker processes
def test_worker_processes_give_the_same_results() -> None:
    """Workers run one torch thread; with one thread here too, the bits agree (they depend on the count)."""
    specs = [_spec(), _spec(seed=1)]
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        here = [r["state_hash"] for r in run_cells(specs, jobs=1)]
    finally:
        torch.set_num_threads(threads)
    assert [r["state_hash"] for r in run_cells(specs, jobs=2)] == here


def test_tiny_benchmark_summary_and_report(tmp_path: Path) -> None:
    cfg = _tiny()
    results, summary = run_benchmark(cfg, jobs=1, cells_path=tmp_path / "cells.jsonl")
    assert len(load_cells(tmp_path / "cells.jsonl")) == len({cell_key(r["spec"]) for r in results})
    assert set(summary) >= {
        "headline",
        "worst_case",
        "fp",
        "asr",
        "ablation",
        "sweep",
        "curves",
        "checks",
        "targets",
        "clean_mean",
    }
    assert set(summary["headline"]) == {"mean", "semantic"}
    assert set(summary["headline"]["mean"]) == {CLEAN, "sign_flip:scale=10"}
    assert set(summary["ablation"]) == {"semantic", "semantic -verdict"}
    assert set(summary["sweep"]["semantic"]["iid"]) == {0.0, 0.25}
    assert set(summary["fraction_table"]["semantic"]["iid"][0.25]) == {"worst", "clean", "asr", "fp_rate", "absent"}
    assert summary["expert"] == {}
    assert len(summary["curves"]["semantic"]) == cfg.rounds
    meta = {
        "command": "p2p-guard bench robustness --quick",
        "wall_s": 1.0,
        "jobs": 1,
        "numel": 4810,
        "model": "MLP",
        "finished": "now",
        "cells_file": "x",
        "machine": {
            k: "?" for k in ("cpu", "cores", "memory", "os", "python", "torch", "numpy", "p2p_guard")
        },
    }
    text = render(cfg, summary, meta, "plots")
    assert summary["mixing"] is True  # every cell ran the swarm's mixing step (CellSpec.mixing's default)
    assert summary["every_receiver"] is True
    assert "After the outer step every peer mixed its θ" in text
    assert "Every cell ran the guard for every receiver in every round" in text
    assert "No mixing step" in render(cfg, {**summary, "mixing": False}, meta, "plots")
    for heading in (
        "## Final test accuracy",
        "## Worst case over attacks",
        "## Verdicts on honest peers",
        "## Backdoor attack success rate",
        "## Ablation",
        "## Sweep",
        "25% attackers (f = 1 of 4)",
        "## Plots",
        "`sign_flip:scale=10`",
        "p2p-guard bench robustness --quick",
    ):
        assert heading in text
    out = tmp_path / "docs" / "bench.md"
    plots = write_report(cfg, summary, meta, out)
    assert out.read_text().startswith("# Robustness benchmark (quick)")
    assert {p.name for p in plots.glob("*.png")} >= {
        "worst-case.png",
        "sweep.png",
        "attack-none.png",
        "attack-sign_flip-scale-10.png",
    }


def test_quick_checks() -> None:
    def s(v: float) -> Stat:
        return Stat(v, 0.0, 1)

    headline = {"semantic": {"sign_flip:scale=10": s(0.9)}, "mean": {"sign_flip:scale=10": s(0.1)}}
    worst = {"semantic": ("alie", s(0.8)), "median": ("alie", s(0.7)), "trimmed_mean": ("alie", s(0.85))}
    checks = quick_checks(headline, worst)  # type: ignore[arg-type]
    assert [c.passed for c in checks] == [True, True, False]
    worst["own_update"] = ("alie", s(0.81))
    assert [c.passed for c in quick_checks(headline, worst)] == [True, True, False, False]  # type: ignore[arg-type]
    headline["mean"]["sign_flip:scale=10"] = s(0.65)
    assert not quick_checks(headline, worst)[0].passed  # type: ignore[arg-type]


def test_acceptance_grid_runs_every_attack_at_each_fraction_on_dirichlet_half() -> None:
    cfg = acceptance_config("digits")
    assert (cfg.mode, cfg.task, cfg.partition, cfg.rounds, cfg.n, cfg.f) == ("acceptance", "digits", "dirichlet:0.5",
                                                                             12, 10, 3)
    assert cfg.sweep_fractions == (0.0, 0.2, 0.3, 0.4) and cfg.sweep_partitions == ("dirichlet:0.5",)
    assert cfg.ablation_flags == () and cfg.expert_guards == ()
    headline = headline_cells(cfg)
    assert {c.assumed_byzantine for c in headline} == {None}  # no oracle
    worst = {g: list(cfg.attacks) for g in cfg.guards}
    sweep = sweep_cells(cfg, worst)
    per_guard = len(cfg.guards)
    assert len(headline) == per_guard * (len(cfg.attacks) + 1)
    assert len(sweep) == per_guard * (1 + 3 * len(cfg.attacks))  # clean + every attack at 20/30/40 %
    assert {(c.f, c.partition) for c in sweep} == {(0, "dirichlet:0.5"), (2, "dirichlet:0.5"), (3, "dirichlet:0.5"),
                                                   (4, "dirichlet:0.5")}
    assert acceptance_config("fashion-mnist").rounds == 20
    assert dict(acceptance_config("fashion-mnist").task_options) == {"hidden": 32}
    with pytest.raises(ValueError, match="digits or fashion-mnist"):
        acceptance_config("shakespeare")
    with pytest.raises(ValueError, match="--data-dir"):
        acceptance_config("digits", data_dir="/tmp")


def test_acceptance_checks_tolerances_and_baselines() -> None:
    def s(v: float) -> Stat:
        return Stat(v, 0.0, 1)

    cfg = acceptance_config("digits")
    part = "dirichlet:0.5"

    def row(worst: float, clean: float) -> dict[str, Any]:
        return {"worst": ("alie", s(worst)), "clean": s(clean), "asr": {}, "fp_rate": 0.0}

    table = {
        "semantic": {part: {0.2: row(0.88, 0.90), 0.3: row(0.869, 0.90), 0.4: row(0.85, 0.90)}},
        "median": {part: {0.2: row(0.80, 0.88), 0.3: row(0.87, 0.88), 0.4: row(0.70, 0.88)}},
    }
    checks = acceptance_checks(cfg, table)
    assert [c.name for c in checks] == [
        "20% (f = 2 of 10), `dirichlet:0.5`: semantic worst case within 3 points of clean",
        "20% (f = 2 of 10), `dirichlet:0.5`: semantic worst case above every baseline's",
        "30% (f = 3 of 10), `dirichlet:0.5`: semantic worst case within 3 points of clean",
        "30% (f = 3 of 10), `dirichlet:0.5`: semantic worst case above every baseline's",
        "40% (f = 4 of 10), `dirichlet:0.5`: semantic worst case within 6 points of clean",
        "40% (f = 4 of 10), `dirichlet:0.5`: semantic worst case above every baseline's",
    ]
    # 30 %: 3.1 points below clean (fails), and median's 0.87 beats 0.869 (fails); 40 %: 5 points (passes)
    assert [c.passed for c in checks] == [True, True, False, False, True, True]
    assert "best baseline `median` 87.0%" in checks[3].detail
    table["semantic"][part][0.4]["worst"] = None
    assert acceptance_checks(cfg, table)[-1].detail == "missing results"


def test_cli_rejects_bad_arguments(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "robustness", "--quick", "--data-dir", str(tmp_path)]) == 2
    assert main(["bench", "robustness", "--jobs", "0"]) == 2
    assert (
        main(["bench", "robustness", "--data-dir", str(tmp_path / "none"), "--out", str(tmp_path / "x.md")])
        == 2
    )
    assert "apt-get install dataset-fashion-mnist" in capsys.readouterr().err


def test_cli_checks_out_and_cells_before_any_cell(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A folder as --out or --cells was a traceback (--cells) or minutes of cells lost (--out, at the report)."""
    assert main(["bench", "robustness", "--quick", "--cells", str(tmp_path), "--out", str(tmp_path / "x.md")]) == 2
    assert main(["bench", "robustness", "--quick", "--out", str(tmp_path)]) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"p2p-guard bench robustness: error: --cells {tmp_path}: is a directory, not a file",
        f"p2p-guard bench robustness: error: --out {tmp_path}: is a directory, not a file",
    ]
    assert list(tmp_path.iterdir()) == []


def test_cli_missing_data_suggests_its_own_data_dir_flag(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """bench robustness takes no --task: the task's hint for another folder becomes --data-dir."""
    missing, empty = tmp_path / "none", tmp_path / "empty"
    empty.mkdir()
    out = ["--out", str(tmp_path / "x.md")]
    assert main(["bench", "robustness", "--data-dir", str(missing), *out]) == 2
    assert main(["bench", "robustness", "--acceptance", "fashion-mnist", "--data-dir", str(empty), *out]) == 2
    lines = capsys.readouterr().err.splitlines()
    assert lines[0] == (f"p2p-guard bench robustness: error: fashion-mnist: directory {missing} does not exist; "
                        "install the Debian package (apt-get install dataset-fashion-mnist), or pass --data-dir DIR")
    assert lines[1].startswith(f"p2p-guard bench robustness: error: fashion-mnist: train-images-idx3-ubyte[.gz] "
                               f"not found in {empty}; ")
    assert lines[1].endswith(", or pass --data-dir DIR")
    assert len(lines) == 2


def test_loss_at_is_the_private_holdout_loss() -> None:
    from p2p_guard.tasks import load_task
    from p2p_guard.training.local import LocalModel

    task = load_task("digits")
    local = LocalModel(task, seed=0, num_shards=3, shard_index=1, partition="iid")
    loss_at = cell_module.holdout_loss_at(local, 16, torch.Generator().manual_seed(0), 0.5)
    x, y = task.holdout_batch(local.shard, 16, torch.Generator().manual_seed(0))
    theta = local.theta.clone()
    delta = torch.randn(local.numel, generator=torch.Generator().manual_seed(1)) * 0.01
    with torch.no_grad():
        assert loss_at(torch.zeros_like(delta)) == pytest.approx(float(task.loss(local.model, x, y)))
        cell_module.load_flat(local.model, theta - 0.5 * delta)
        expected = float(task.loss(local.model, x, y))
    assert loss_at(delta) == pytest.approx(expected)
    assert torch.equal(local.theta, theta)


def test_semantic_cell_times_its_loss_stage() -> None:
    with_loss = (("loss_check", True),)
    result = run_cell(_spec(n=3, f=1, attack="sign_flip:scale=10", guard="semantic", rounds=1, inner_steps=2,
                            guard_params=with_loss))
    timing = result["timing"]
    assert timing["guard_calls"] >= 2  # first honest receiver and the probe, then one per receiver if they differ
    assert timing["loss_calls"] == 4 * timing["guard_calls"]  # ℓ_0 + one per row, 3 rows
    without = run_cell(_spec(n=3, f=1, attack="sign_flip:scale=10", guard="semantic", rounds=1, inner_steps=2,
                             guard_params=with_loss, loss_batch=0))
    assert without["timing"]["loss_calls"] == 0


def test_what_a_swarm_gets_says_where_the_guard_loses() -> None:
    from types import SimpleNamespace

    from p2p_guard.bench.report import _what_a_swarm_gets

    def s(v: float) -> Stat:
        return Stat(v, 0.0, 1)

    cfg = SimpleNamespace(f=3, n=10, partition="dirichlet:1", sweep_partitions=("iid",), sweep_fractions=(0.0, 0.2),
                          sweep_seeds=1)
    summary = {
        "worst_case": {"semantic": ("adaptive", s(0.79)), "median": ("mimic", s(0.73)), "mean": None},
        "headline": {"semantic": {"none": s(0.82)}},
        "sweep": {"semantic": {"iid": {0.0: ("none", s(0.84)), 0.2: ("adaptive", s(0.80))}},
                  "median": {"iid": {0.0: ("none", s(0.84)), 0.2: ("mimic", s(0.80))}}},
        "asr": {"backdoor": {"semantic": s(0.98)}},
        "fp": {"semantic": {"fp_rate": 0.0004}},
    }
    lines = _what_a_swarm_gets(cfg, summary)
    assert lines[2] == ("- With the defaults a peer runs (the `semantic` guard, f unknown), 3 Byzantine of 10 on "
                        "`dirichlet:1`: final accuracy 79.0 % under its worst attack (`adaptive`), against 82.0 % "
                        "with no attacker (-3.0 points); above the best other rule's worst case, `median` 73.0 % "
                        "(`mimic`).")
    assert lines[3].endswith("`semantic` has the best worst case in 0 of 1 (partition, fraction) settings; not in "
                             "`iid` at 20 % (`semantic` 80.0, `median` 80.0).")
    assert lines[4] == ("- `backdoor` at 3 of 10: attack success rate 98.0 % against `semantic` on the honest peer "
                        "it fooled most (not defended).")
    assert lines[5].startswith("- Honest updates rejected by honest `semantic` receivers: 0.04% of verdicts")
