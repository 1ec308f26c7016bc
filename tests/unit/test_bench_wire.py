"""``bench wire`` without a swarm: exact sizes per codec, the in-process DiLoCo check, the CLI."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest
import torch

from p2p_guard.bench.wire import (
    WIRE_CODECS,
    codec_hparams,
    convergence,
    format_guard_table,
    format_tables,
    guard_worst_case,
    measure_codecs,
    synthetic_update,
)
from p2p_guard.cli import bench_wire_cmd


def test_synthetic_update_is_seeded() -> None:
    a, b = synthetic_update(5000, 1), synthetic_update(5000, 1)
    assert torch.equal(a, b) and a.dtype == torch.float32 and a.shape == (5000,)
    assert not torch.equal(a, synthetic_update(5000, 2))


@pytest.mark.timeout(300)
def test_measure_codecs_sizes_and_errors() -> None:
    rows = measure_codecs(WIRE_CODECS, [8192], repeats=1)
    by_codec = {row["codec"]: row for row in rows}
    assert [row["codec"] for row in rows] == list(WIRE_CODECS)
    # 8192 = 2 chunks of 4096: topk keeps 41 / 82 / 205 per chunk; int8 8 scales; int4 128 scales
    assert {c: r["payload_bytes"] for c, r in by_codec.items()} == {
        "fp32": 32768, "fp16": 16384, "int8": 4 * 8 + 8192, "int4": 4 * 128 + 4096,
        "topk:density=0.01": 16 + 2 * 82 + 21, "topk:density=0.02": 16 + 2 * 164 + 41,
        "topk:density=0.05": 16 + 2 * 410 + 103,
        # synthetic layout: 82 dense values (the output layer, ⌈8192/100⌉); 8110 top-k: k 82 + ⌈82·4014/4096⌉ = 81
        "topk:density=0.02,dense=head": 16 + 2 * 163 + 41 + 2 * 82,
    }  # fmt: skip
    assert by_codec["fp32"]["rel_error"] == 0.0
    errors = [by_codec[c]["rel_error"] for c in ("fp16", "int8", "int4", "topk:density=0.05")]
    assert errors == sorted(errors) and 0 < errors[0] < 1e-3 < errors[-1] < 1
    assert all(r["encode_s"] >= 0 and r["decode_s"] >= 0 for r in rows)


@pytest.mark.timeout(300)  # a few seconds alone; minutes on a loaded 2-core machine
def test_convergence_matches_fp32_exactly_for_fp32_twice() -> None:
    rows = convergence(["fp32", "fp32", "topk:density=0.01"], workers=2, rounds=2, inner_steps=3)
    assert rows[0]["accuracy"] == rows[1]["accuracy"]  # same seed, same run
    assert rows[0]["accuracy_vs_fp32"] == 0.0 and rows[0]["residual_norm"] == 0.0
    assert rows[0]["bytes_per_param"] == 4.0 and rows[2]["bytes_per_param"] < 0.05
    assert rows[2]["residual_norm"] > 0
    # each codec's own outer step and error feedback: DiLoCo's for fp32, SparseLoCo's for topk
    assert (rows[0]["ef_decay"], rows[0]["outer_lr"], rows[0]["outer_momentum"]) == (1.0, 0.7, 0.9)
    assert (rows[2]["ef_decay"], rows[2]["outer_momentum"]) == (0.95, 0.0)
    assert rows[0]["row_norm"] > 0 and rows[2]["row_norm"] > 0
    table = format_tables([], rows)
    assert "| topk:density=0.01 | 0.95 |" in table and "2 workers, 2 rounds" in table
    assert "| fp32 | 1 | 0.7 | 0.9 | 4.0000 |" in table
    assert rows[0]["curve"] == [[2, rows[0]["accuracy"]]]  # eval_every=0: the last round only


@pytest.mark.timeout(300)
def test_convergence_curve_evaluates_every_n_rounds_and_the_last() -> None:
    rows = convergence(["fp32"], workers=2, rounds=5, inner_steps=2, eval_every=2)
    assert [r for r, _ in rows[0]["curve"]] == [2, 4, 5]
    assert rows[0]["curve"][-1][1] == rows[0]["accuracy"]
    shorter = convergence(["fp32"], workers=2, rounds=2, inner_steps=2)
    assert rows[0]["curve"][0][1] == shorter[0]["accuracy"]  # evaluating does not change the run
    with pytest.raises(ValueError, match="eval_every"):
        convergence(["fp32"], workers=2, rounds=2, eval_every=-1)


def test_codec_hparams_overrides_only_topk() -> None:
    from p2p_guard.training.outer import TOPK_OUTER_LR

    assert codec_hparams("int4") == (1.0, 0.7, 0.9)
    assert codec_hparams("topk") == (0.95, TOPK_OUTER_LR, 0.0)
    old = {"topk_ef_decay": 1.0, "topk_outer_lr": 0.7, "topk_outer_momentum": 0.9}  # the scheme before SparseLoCo
    assert codec_hparams("topk:density=0.05", **old) == (1.0, 0.7, 0.9)
    assert codec_hparams("int8", topk_ef_decay=0.5, topk_outer_lr=1.0, topk_outer_momentum=0.0) == (1.0, 0.7, 0.9)


def test_cli_rejects_bad_topk_settings(capsys: pytest.CaptureFixture[str]) -> None:
    args = argparse.Namespace(codecs=["topk"], quick=True, workers=4, rounds=1, seed=0, threads=1, json=None,
                              guard_attacks=[], byzantine=None, out=None, topk_ef_decay=1.5, topk_outer_lr=None,
                              topk_outer_momentum=None)
    assert bench_wire_cmd.run_wire(args) == bench_wire_cmd.EXIT_USAGE
    assert "--topk-ef-decay must be in [0, 1]" in capsys.readouterr().err


def test_cli_rejects_an_unknown_guard_attack_before_any_run(capsys: pytest.CaptureFixture[str]) -> None:
    args = argparse.Namespace(codecs=["fp32"], quick=True, workers=4, rounds=1, seed=0, threads=1, json=None,
                              guard_attacks=["sign_flp"], byzantine=None, out=None)
    assert bench_wire_cmd.run_wire(args) == bench_wire_cmd.EXIT_USAGE
    err = capsys.readouterr().err
    assert err.startswith("p2p-guard bench wire: error: --guard-attacks: attack spec 'sign_flp'") and "\n" == err[-1:]


def test_cli_rejects_unknown_codec(capsys: pytest.CaptureFixture[str]) -> None:
    args = argparse.Namespace(codecs=["int9"], quick=True, workers=None, rounds=None, seed=0, threads=1,
                              json=None, guard_attacks=None, byzantine=None, out=None)
    assert bench_wire_cmd.run_wire(args) == bench_wire_cmd.EXIT_USAGE
    assert capsys.readouterr().err == ("p2p-guard bench wire: error: --codecs: unknown codec 'int9'; known: fp32, "
                                       "fp16, int8, int4, topk\n")


def test_cli_names_the_codecs_own_reason(capsys: pytest.CaptureFixture[str]) -> None:
    """A density out of range was reported as an unknown codec (the peer and simulate name the range)."""
    args = argparse.Namespace(codecs=["fp32", "topk:density=2"], quick=True, workers=None, rounds=None, seed=0,
                              threads=1, json=None, guard_attacks=None, byzantine=None, out=None)
    assert bench_wire_cmd.run_wire(args) == bench_wire_cmd.EXIT_USAGE
    assert capsys.readouterr().err == ("p2p-guard bench wire: error: --codecs: codec 'topk:density=2': expected "
                                       "topk:density=ρ with ρ in (0, 1], optionally followed by ,dense=head\n")


def test_cli_refuses_a_topk_density_no_chunk_can_send(capsys: pytest.CaptureFixture[str]) -> None:
    """Under 1/4096 every chunk still sends one value: the benchmark would have measured 1/4096, not ρ."""
    args = argparse.Namespace(codecs=["topk:density=1e-8"], quick=True, workers=None, rounds=None, seed=0,
                              threads=1, json=None, guard_attacks=None, byzantine=None, out=None)
    assert bench_wire_cmd.run_wire(args) == bench_wire_cmd.EXIT_USAGE
    assert capsys.readouterr().err == (
        "p2p-guard bench wire: error: --codecs: codec 'topk:density=1e-8': density 1e-08 keeps less than one value "
        "of a 4096-value chunk, and every chunk sends at least one (the wire would use 1/4096 = 0.000244140625); "
        "use topk:density=ρ with ρ in [0.000244140625, 1] (docs/protocol.md, Codecs)\n")


def test_cli_rejects_a_bad_partition_before_any_run(capsys: pytest.CaptureFixture[str]) -> None:
    args = argparse.Namespace(codecs=["fp32"], quick=True, workers=4, rounds=1, seed=0, threads=1, json=None,
                              guard_attacks=[], byzantine=None, out=None, partition="dirichlet:0")
    assert bench_wire_cmd.run_wire(args) == bench_wire_cmd.EXIT_USAGE
    assert capsys.readouterr().err == (
        "p2p-guard bench wire: error: partition 'dirichlet:0': alpha=0.0 must be finite and > 0\n")


def test_cli_runs_the_canonical_partition_spec(monkeypatch: pytest.MonkeyPatch) -> None:
    """' DIRICHLET:0.50' reaches the run (and so the report's title) as dirichlet:0.5."""
    seen: list[str] = []

    class _Stop(Exception):
        pass

    import p2p_guard.bench.wire as wire

    monkeypatch.setattr(wire, "measure_codecs", lambda *a, **k: [])

    def convergence(*args: object, partition: str, **kwargs: object) -> None:
        seen.append(partition)
        raise _Stop

    monkeypatch.setattr(wire, "convergence", convergence)
    args = argparse.Namespace(codecs=["fp32"], quick=True, workers=4, rounds=1, seed=0, threads=1, json=None,
                              guard_attacks=[], byzantine=None, out=None, partition=" DIRICHLET:0.50")
    with pytest.raises(_Stop):
        bench_wire_cmd.run_wire(args)
    assert seen == ["dirichlet:0.5"]


@pytest.mark.timeout(300)
def test_convergence_on_a_non_iid_partition_is_another_run_and_says_so() -> None:
    iid = convergence(["fp32"], workers=2, rounds=1, inner_steps=2)
    skewed = convergence(["fp32"], workers=2, rounds=1, inner_steps=2, partition="dirichlet:0.1")
    assert iid[0]["partition"] == "iid" and skewed[0]["partition"] == "dirichlet:0.1"
    assert iid[0]["loss"] != skewed[0]["loss"]
    assert "Digits, 2 workers" in format_tables([], iid)
    assert "Digits (partition `dirichlet:0.1`), 2 workers" in format_tables([], skewed)


@pytest.mark.timeout(300)
def test_cli_quick_run_writes_json(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(bench_wire_cmd, "QUICK_SIZES", (4096,))
    out = tmp_path / "wire.json"
    args = argparse.Namespace(codecs=["fp32", "int8"], quick=True, workers=2, rounds=2, seed=0, threads=1,
                              json=out, guard_attacks=[], byzantine=None, out=None)
    code = bench_wire_cmd.run_wire(args)
    data = json.loads(out.read_text())
    assert [row["codec"] for row in data["sizes"]] == ["fp32", "int8"]
    assert [row["codec"] for row in data["convergence"]] == ["fp32", "int8"]
    accuracies = [row["accuracy"] for row in data["convergence"]]
    assert code == (0 if min(accuracies) >= 0.8 and accuracies[0] - accuracies[1] <= 0.01 else 1)


@pytest.mark.timeout(300)
def test_guard_per_codec_rejects_every_scaled_sign_flip() -> None:
    rows = convergence(["fp32", "int8"], workers=4, rounds=2, inner_steps=3, guard="semantic",
                       attack="sign_flip:scale=10", byzantine=1)
    for row in rows:
        # 3 honest receivers x 2 rounds judge the attacker's row; each judges the 2 other honest rows
        assert row["rejected"][:2] == [6, 6] and row["rejected"][3] == 12
        assert (row["guard"], row["attack"], row["byzantine"]) == ("semantic", "sign_flip:scale=10", 1)
        assert row["accuracy"] > 0.3  # chance is 0.1; 2 rounds of 3 steps
    assert rows[0]["accuracy_vs_fp32"] == 0.0


def test_guard_worst_case_and_table() -> None:
    def row(codec: str, attack: str, accuracy: float) -> dict[str, object]:
        return {"codec": codec, "attack": attack, "accuracy": accuracy, "guard": "semantic", "workers": 8,
                "byzantine": 2, "rounds": 20, "rejected": [1, 2, 3, 4]}

    rows = [row("fp32", "a", 0.90), row("fp32", "b", 0.88), row("int8", "a", 0.85), row("int8", "b", 0.87)]
    assert [(w["codec"], w["worst_attack"], round(w["worst_vs_fp32"], 6)) for w in guard_worst_case(rows)] == [
        ("fp32", "b", 0.0), ("int8", "a", -3.0)]
    table = format_guard_table(rows)
    assert "| int8 | 0.8500 (1/2, 3/4) | 0.8700 (1/2, 3/4) | 0.8500 | -3.00 | no |" in table
    assert "| fp32 | 0.9000 (1/2, 3/4) | 0.8800 (1/2, 3/4) | 0.8800 | +0.00 | yes |" in table


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [({"attack": "alie", "byzantine": 1}, "needs a guard"), ({"guard": "semantic", "attack": "alie"}, "needs"),
     ({"guard": "semantic", "attack": "alie", "byzantine": 4}, "byzantine=4")],
)
def test_convergence_rejects_bad_attack_settings(kwargs: dict[str, object], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        convergence(["fp32"], workers=4, rounds=1, **kwargs)  # type: ignore[arg-type]


def test_cli_rejects_a_byzantine_majority(capsys: pytest.CaptureFixture[str]) -> None:
    args = argparse.Namespace(codecs=["fp32"], quick=True, workers=4, rounds=1, seed=0, threads=1, json=None,
                              guard_attacks=None, byzantine=2, out=None)
    assert bench_wire_cmd.run_wire(args) == bench_wire_cmd.EXIT_USAGE
    assert "--byzantine must be >= 1 and a minority of --workers 4; got 2" in capsys.readouterr().err


@pytest.mark.timeout(300)
def test_convergence_on_a_language_model_reports_perplexity() -> None:
    task = "shakespeare:d_model=16,n_layers=1,n_heads=2,context=16,eval_windows=4"
    rows = convergence(["fp32", "int8", "fp32"], workers=2, rounds=1, inner_steps=2, task=task)
    assert [(r["task"], r["metric"], r["accuracy"]) for r in rows] == [(task, "perplexity", None)] * 3
    assert rows[0]["perplexity"] == rows[2]["perplexity"] == rows[0]["quality"] > 1.0
    assert rows[0]["quality_vs_fp32"] == 0.0 and rows[0]["accuracy_vs_fp32"] is None
    assert rows[1]["quality_vs_fp32"] == pytest.approx(100 * (rows[1]["perplexity"] / rows[0]["perplexity"] - 1))
    table = format_tables([], rows)
    assert f"`{task}`, 2 workers, 1 rounds" in table and "| perplexity | vs fp32 (%) |" in table


def test_guard_worst_case_of_perplexity_is_the_highest() -> None:
    def row(codec: str, attack: str, perplexity: float) -> dict[str, object]:
        return {"codec": codec, "attack": attack, "metric": "perplexity", "perplexity": perplexity,
                "task": "shakespeare", "guard": "semantic", "workers": 8, "byzantine": 2, "rounds": 20,
                "rejected": [1, 2, 3, 4]}

    rows = [row("fp32", "a", 8.0), row("fp32", "b", 10.0), row("topk", "a", 10.5), row("topk", "b", 9.0)]
    assert [(w["codec"], w["worst_attack"], w["worst_quality"], round(w["worst_vs_fp32"], 6))
            for w in guard_worst_case(rows)] == [("fp32", "b", 10.0, 0.0), ("topk", "a", 10.5, 5.0)]
    table = format_guard_table(rows)
    assert "| worst vs fp32 (%) | within 3 % |" in table
    assert "| topk | 10.5000 (1/2, 3/4) | 9.0000 (1/2, 3/4) | 10.5000 | +5.00 | no |" in table


def test_cli_names_a_failing_user_task_in_one_line(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """``bench wire --task MODULE:CLASS`` whose loss raised ended in a raw traceback (through convergence and the
    inner loop); now one line naming the task, class, method and exception, exit 1, as peer and simulate do."""
    (tmp_path / "failing_wire_task.py").write_text(
        "from p2p_guard.tasks.digits import DigitsTask\n\n\n"
        "class Failing(DigitsTask):\n"
        "    def loss(self, model, x, y):\n"
        "        return 1 / 0\n", encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(bench_wire_cmd, "QUICK_SIZES", (4096,))
    args = argparse.Namespace(codecs=["fp32"], quick=True, workers=2, rounds=1, seed=0, threads=1, json=None,
                              guard_attacks=[], byzantine=None, out=None, task="failing_wire_task:Failing")
    assert bench_wire_cmd.run_wire(args) == bench_wire_cmd.EXIT_FAILED
    assert capsys.readouterr().err.splitlines()[-1] == (
        "p2p-guard bench wire: error: task 'failing_wire_task:Failing': Failing.loss raised ZeroDivisionError: "
        "division by zero (p2p-guard --log-level DEBUG bench wire ... logs its traceback)")
