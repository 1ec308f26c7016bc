"""The simulation report's backdoor attack success rate (measured by the orchestrator on honest final θ)."""

from __future__ import annotations

import pytest
import torch

from p2p_guard.attacks import load_attack
from p2p_guard.bench.cell import backdoor_success
from p2p_guard.simulation.asr import backdoor_asr
from p2p_guard.simulation.table import format_table
from p2p_guard.tasks import load_task
from p2p_guard.training.params import flatten, load_flat


@pytest.mark.timeout(300)  # loads and evaluates digits twice: seconds, minutes on a loaded machine
def test_asr_per_peer_and_mean_match_the_benchmark_definition() -> None:
    task = load_task("digits")
    model = task.build_model(0)
    theta0 = flatten(model).clone()
    theta1 = theta0.clone()
    theta1[-10:] = torch.tensor([50.0, *([0.0] * 9)])  # output bias: every input lands on class 0
    out = backdoor_asr("digits", "backdoor", 0, [theta0, theta1])
    assert out is not None
    load_flat(model, theta0)
    expected0 = backdoor_success(task, model, load_attack("backdoor"))
    assert out["per_peer"] == [expected0, 1.0]
    assert out["mean"] == (expected0 + 1.0) / 2
    assert out["max"] == 1.0


@pytest.mark.timeout(300)
def test_no_asr_without_a_trigger_or_attack_or_model() -> None:
    theta = flatten(load_task("digits").build_model(0))
    assert backdoor_asr("digits", "sign_flip:scale=10", 0, [theta]) is None
    assert backdoor_asr("digits", None, 0, [theta]) is None
    assert backdoor_asr("digits", "backdoor", 0, []) is None


def test_table_prints_the_asr() -> None:
    text = format_table({"config": {}, "rounds": [], "final": {"accuracy": 0.9, "asr": 0.125, "asr_max": 0.25}})
    assert text.endswith("final: accuracy=0.9000 asr=0.1250 asr_max=0.2500")


def test_a_mix_without_a_backdoor_has_no_asr() -> None:
    theta = torch.zeros(3)  # no backdoor part: no model is built, θ is never read
    assert backdoor_asr("digits", "nan+oversized", 0, [theta]) is None
    assert backdoor_asr("digits", "wrong_shape+digest_mismatch", 0, [theta]) is None


@pytest.mark.timeout(300)
def test_a_mix_measures_each_backdoor_part() -> None:
    task = load_task("digits")
    model = task.build_model(0)
    theta = flatten(model).clone()
    theta[-10:] = torch.tensor([0.0, 50.0, *([0.0] * 8)])  # output bias: every input lands on class 1
    one = backdoor_asr("digits", "nan+backdoor:target=1", 0, [theta])
    assert one == {"attack": "backdoor:target=1", "per_peer": [1.0], "mean": 1.0, "max": 1.0}
    two = backdoor_asr("digits", "backdoor:target=2+sign_flip+backdoor:target=1", 0, [theta])
    assert two is not None
    assert two["attack"] == "backdoor:target=1"
    assert two["per_peer"] == [1.0]
    assert two["mean"] == 1.0
    assert set(two["by_attack"]) == {"backdoor:target=2", "backdoor:target=1"}
    assert two["by_attack"]["backdoor:target=2"] == {"per_peer": [0.0], "mean": 0.0, "max": 0.0}


def test_a_failing_asr_never_loses_the_report(monkeypatch: pytest.MonkeyPatch) -> None:
    from p2p_guard.simulation import orchestrator
    from p2p_guard.simulation.config import SimulationConfig

    def broken(*_args: object) -> None:
        raise ValueError("bad attack spec")

    monkeypatch.setattr(orchestrator, "backdoor_asr", broken)
    report: dict = {"final": {"accuracy": 0.5}}
    config = SimulationConfig(honest=4, byzantine=2, attack="backdoor+nan", rounds=1)
    orchestrator._add_asr(report, config, [torch.zeros(3)])
    assert report == {"final": {"accuracy": 0.5}}
