"""Attack success rate of a backdoor on the honest peers' final models (for the simulation report).

A peer never learns the attack; the orchestrator does (it launched the attackers), so it measures the ASR
after the run, on the final θ each honest peer wrote, with the attack's own trigger:

    ASR_i = |{x ∈ test : y(x) ≠ t, argmax f_{θ_i}(T(x)) = t}| / |{x ∈ test : y(x) ≠ t}|

(:func:`p2p_guard.bench.cell.backdoor_success`, the benchmark's definition), reported per honest peer and as
their mean. Only an attack with ``triggered_test_inputs`` and ``target`` (``attacks.data.Backdoor``) and a task
with ``test_split`` have one.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

__all__ = ["backdoor_asr"]


def backdoor_asr(task_spec: str, attack_spec: str | None, seed: int,
                 thetas: Sequence[torch.Tensor]) -> dict[str, Any] | None:
    """ASR of a backdoor attack on each honest final model.

    Args:
        task_spec: the run's task spec (``digits``).
        attack_spec: the Byzantine peers' attack spec, or None.
        seed: the run seed (builds the model the θ are loaded into).
        thetas: honest peers' final flat models, each ``(d,)`` float32.

    Returns:
        ``{"per_peer": [ASR_i, ...], "mean": mean ASR}`` (rates in [0, 1]), or None when there is no attack,
        the attack has no trigger, the task no test split, or no θ.
    """
    if not attack_spec or not thetas:
        return None
    from p2p_guard.attacks import load_attack
    from p2p_guard.bench.cell import backdoor_success
    from p2p_guard.tasks import load_task
    from p2p_guard.training.params import load_flat

    attack = load_attack(attack_spec)
    if not hasattr(attack, "triggered_test_inputs"):
        return None
    task = load_task(task_spec)
    model = task.build_model(seed)
    per_peer = []
    for theta in thetas:
        load_flat(model, theta)
        value = backdoor_success(task, model, attack)
        if value is None:
            return None
        per_peer.append(value)
    return {"per_peer": per_peer, "mean": sum(per_peer) / len(per_peer)}
