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


@pytest.mark.timeout(300)
def test_no_asr_without_a_trigger_or_attack_or_model() -> None:
    theta = flatten(load_task("digits").build_model(0))
    assert backdoor_asr("digits", "sign_flip:scale=10", 0, [theta]) is None
    assert backdoor_asr("digits", None, 0, [theta]) is None
    assert backdoor_asr("digits", "backdoor", 0, []) is None


def test_table_prints_the_asr() -> None:
    text = format_table({"config": {}, "rounds": [], "final": {"accuracy": 0.9, "asr": 0.125}})
    assert text.endswith("final: accuracy=0.9000 asr=0.1250")
