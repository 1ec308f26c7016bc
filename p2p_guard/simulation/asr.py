"""Attack success rate of a backdoor on the honest peers' final models (for the simulation report).

A peer never learns the attack; the orchestrator does (it launched the attackers), so it measures the ASR
after the run, on the final θ each honest peer wrote, with the attack's own trigger:

    ASR_i = |{x ∈ test : y(x) ≠ t, argmax f_{θ_i}(T(x)) = t}| / |{x ∈ test : y(x) ≠ t}|

(:func:`p2p_guard.bench.cell.backdoor_success`, the benchmark's definition), reported per honest peer and as
their mean and maximum (the honest peer the backdoor fooled most: a swarm's worst member, the honest headline).
Only an attack with ``triggered_test_inputs`` and ``target`` (``attacks.data.Backdoor``) and a task
with ``test_split`` have one. The attack may be a mix ``SPEC+SPEC+...``
(:func:`p2p_guard.simulation.config.split_attack_mix`): each backdoor part of it is measured, the others are
skipped.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

__all__ = ["backdoor_asr"]


def backdoor_asr(task_spec: str, attack_spec: str | None, seed: int,
                 thetas: Sequence[torch.Tensor]) -> dict[str, Any] | None:
    """ASR of each backdoor attack of the run on each honest final model.

    Args:
        task_spec: the run's task spec (``digits``).
        attack_spec: the Byzantine peers' attack spec or mix ``SPEC+SPEC+...``, or None.
        seed: the run seed (builds the model the θ are loaded into).
        thetas: honest peers' final flat models, each ``(d,)`` float32.

    Returns:
        ``{"attack": spec, "per_peer": [ASR_i, ...], "mean": mean ASR, "max": max ASR}`` (rates in [0, 1])
        for the backdoor part of the attack; with several backdoor parts in a mix, those keys are the part with
        the highest mean and ``by_attack`` maps each backdoor part's spec to its ``{"per_peer", "mean", "max"}``.
        None when there is no attack, no part of it has a trigger, the task has no test split, or there is no θ.

    Raises:
        ValueError: a bad attack spec or mix.
    """
    if not attack_spec or not thetas:
        return None
    from p2p_guard.attacks import load_attack
    from p2p_guard.simulation.config import split_attack_mix

    backdoors = {}
    for spec in split_attack_mix(attack_spec):
        attack = load_attack(spec)
        if hasattr(attack, "triggered_test_inputs") and spec not in backdoors:
            backdoors[spec] = attack
    if not backdoors:
        return None
    from p2p_guard.bench.cell import backdoor_success
    from p2p_guard.tasks import load_task
    from p2p_guard.training.params import load_flat

    task = load_task(task_spec)
    model = task.build_model(seed)
    by_attack: dict[str, dict[str, Any]] = {}
    for spec, attack in backdoors.items():
        per_peer = []
        for theta in thetas:
            load_flat(model, theta)
            value = backdoor_success(task, model, attack)
            if value is None:
                return None
            per_peer.append(value)
        by_attack[spec] = {"per_peer": per_peer, "mean": sum(per_peer) / len(per_peer), "max": max(per_peer)}
    worst = max(by_attack, key=lambda spec: by_attack[spec]["mean"])
    out: dict[str, Any] = {"attack": worst, **by_attack[worst]}
    if len(by_attack) > 1:
        out["by_attack"] = by_attack
    return out
