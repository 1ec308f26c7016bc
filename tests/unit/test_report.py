"""The simulation report from synthetic event files: confusion counts, round means, consensus, and its inputs.

Pure and fast: no process, no network. Also covers the event reader (partial lines), the text table, the
settings' checks and the command lines the simulator starts.
"""

from __future__ import annotations

import json
import math
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from p2p_guard.simulation import figures
from p2p_guard.simulation.config import SimulationConfig, check_partition, split_attack_mix
from p2p_guard.simulation.events import EventReader, read_events
from p2p_guard.simulation.orchestrator import bootstrap_command, peer_command, write_report
from p2p_guard.simulation.report import (
    CONSENSUS_BOUND,
    PeerLog,
    RunObservations,
    build_report,
    consensus_distance,
    guard_confusion,
    mean_bytes_sent,
    round_summaries,
)
from p2p_guard.simulation.snapshots import ConsensusTracker, snapshot_path
from p2p_guard.simulation.table import format_table

# -- synthetic swarm: peers A, B honest, Z Byzantine -------------------------------------------------------


def _ready(peer_id: str, byzantine: bool) -> dict[str, Any]:
    return {"event": "ready", "peer_id": peer_id, "byzantine": byzantine, "attack": None, "time": 0.0}


def _verdict(round_: int, sender: str, accepted: bool) -> dict[str, Any]:
    reason = None if accepted else "outlier"
    return {
        "event": "verdict",
        "round": round_,
        "sender": sender,
        "accepted": accepted,
        "reason": reason,
        "detail": "",
    }


def _round(
    round_: int,
    loss: float,
    accuracy: float | None,
    *,
    bytes_sent: int = 100,
    state_hash: str = "h",
    perplexity: float | None = None,
    seconds: float = 1.0,
) -> dict[str, Any]:
    return {
        "event": "round",
        "round": round_,
        "loss": loss,
        "accuracy": accuracy,
        "perplexity": perplexity,
        "accepted": 0,
        "rejected": 0,
        "seconds": seconds,
        "bytes_sent": bytes_sent,
        "state_hash": state_hash,
        "peers_seen": 3,
    }


def _swarm() -> list[PeerLog]:
    """Two rounds. A rejects Z both rounds and wrongly rejects B in round 1; B accepts Z in round 0."""
    a = [
        _ready("A", False),
        _verdict(0, "A", True),
        _verdict(0, "B", True),
        _verdict(0, "Z", False),
        _round(0, 2.0, 0.5),
        _verdict(1, "A", True),
        _verdict(1, "B", False),
        _verdict(1, "Z", False),
        _round(1, 1.0, 0.7),
        {"event": "final", "rounds_completed": 2, "state_path": "a.pt"},
    ]
    b = [
        _ready("B", False),
        _verdict(0, "B", False),
        _verdict(0, "A", True),
        _verdict(0, "Z", True),
        _round(0, 4.0, 0.3, bytes_sent=300),
        _verdict(1, "A", True),
        _verdict(1, "Z", False),
        _round(1, 3.0, 0.9, bytes_sent=300),
    ]
    z = [
        _ready("Z", True),
        _verdict(0, "A", False),
        _verdict(0, "B", False),
        _round(0, 99.0, 0.0, bytes_sent=10_000),
    ]
    return [PeerLog(0, False, a), PeerLog(1, False, b), PeerLog(2, True, z)]


def test_confusion_counts_honest_receivers_only_and_skips_self_verdicts() -> None:
    guard = guard_confusion(_swarm())
    # A: B ok (TN), Z rej (TP) | B rej (FP), Z rej (TP). B: A ok (TN), Z ok (FN) | A ok (TN), Z rej (TP).
    assert guard["true_positive"] == 3
    assert guard["false_positive"] == 1
    assert guard["true_negative"] == 3
    assert guard["false_negative"] == 1
    assert guard["unknown_sender"] == 0
    assert guard["false_positive_rate"] == pytest.approx(1 / 4)
    assert guard["true_positive_rate"] == pytest.approx(3 / 4)
    assert guard["reasons"] == {"outlier": 4}


def test_confusion_separates_circumstantial_false_positives() -> None:
    peers = _swarm()
    late = dict(_verdict(2, "B", False), reason="timeout")  # a stopped honest peer: not the guard's fault
    peers[0].events.insert(-1, late)
    guard = guard_confusion(peers)
    assert (guard["false_positive"], guard["false_positive_circumstantial"], guard["true_negative"]) == (2, 1, 3)
    assert guard["false_positive_rate"] == pytest.approx(2 / 5)
    assert guard["false_positive_rate_on_content"] == pytest.approx(1 / 4)
    assert guard_confusion(_swarm())["false_positive_circumstantial"] == 0


def test_confusion_counts_unknown_senders_apart() -> None:
    peers = [PeerLog(0, False, [_ready("A", False), _verdict(0, "X", False)])]
    guard = guard_confusion(peers)
    assert guard["unknown_sender"] == 1
    assert guard["true_positive"] + guard["false_positive"] == 0
    assert guard["false_positive_rate"] is None


def test_round_summaries_are_honest_means_and_verdict_totals() -> None:
    rounds = round_summaries(_swarm())
    assert [r["round"] for r in rounds] == [0, 1]
    assert rounds[0]["loss"] == pytest.approx(3.0)  # (2 + 4) / 2; Z's 99 is left out
    assert rounds[0]["accuracy"] == pytest.approx(0.4)
    assert rounds[1]["accuracy"] == pytest.approx(0.8)
    assert rounds[0]["perplexity"] is None
    assert (rounds[0]["accepted"], rounds[0]["rejected"]) == (3, 1)
    assert (rounds[1]["accepted"], rounds[1]["rejected"]) == (1, 3)
    assert rounds[0]["peers"] == 2
    assert (rounds[0]["consensus_distance"], rounds[0]["consensus_peers"]) == (None, 0)  # no snapshots given


def test_round_summaries_carry_the_snapshot_distances_and_skip_non_numbers() -> None:
    peers = [
        PeerLog(0, False, [_round(0, 1.0, None, perplexity=5.0, state_hash="x")]),
        PeerLog(1, False, [_round(0, float("nan"), None, perplexity=7.0, state_hash="y")]),
    ]
    (row,) = round_summaries(peers, {0: (0.25, 2), 7: (0.5, 2)})
    assert (row["consensus_distance"], row["consensus_peers"]) == (0.25, 2)
    assert (
        "state_hashes_agree" not in row
    )  # version 2: honest models differ, the distance replaces hash equality
    assert row["loss"] == pytest.approx(1.0)
    assert row["accuracy"] is None
    assert row["perplexity"] == pytest.approx(6.0)


def test_mean_bytes_sent_is_per_honest_peer_and_round() -> None:
    assert mean_bytes_sent(_swarm()) == pytest.approx((100 + 100 + 300 + 300) / 4)


def test_consensus_distance_is_the_largest_relative_pairwise_distance() -> None:
    a = torch.tensor([3.0, 4.0])  # norm 5
    b = torch.tensor([3.0, 4.5])  # |a - b| = 0.5
    c = torch.tensor([3.0, 4.0])
    assert consensus_distance([a, c]) == 0.0
    assert consensus_distance([a]) == 0.0
    assert consensus_distance([]) is None
    # max(0.5 / 5, 0.5 / |b|) = 0.1
    assert consensus_distance([a, b, c]) == pytest.approx(0.1)
    assert consensus_distance([torch.zeros(2), a]) == math.inf


def test_consensus_distance_rejects_models_of_different_shapes() -> None:
    with pytest.raises(ValueError, match="shapes"):
        consensus_distance([torch.zeros(2), torch.zeros(3)])


def test_build_report_has_the_issue_keys_and_the_last_round_as_final() -> None:
    thetas = [torch.ones(4), torch.ones(4) * 1.001]
    report = build_report({"task": "digits"}, _swarm(), thetas)
    assert {
        "config",
        "rounds",
        "final",
        "guard",
        "consensus_distance",
        "bytes_sent_per_peer_per_round",
    } <= set(report)
    assert report["final"] == {"accuracy": pytest.approx(0.8), "loss": pytest.approx(2.0), "perplexity": None}
    assert report["consensus_distance"] == pytest.approx(0.001, rel=1e-3)  # no snapshots: the final states
    assert report["consensus"]["source"] == "final_states"
    assert report["rounds_completed"] == {"0": 2, "1": None, "2": None}
    assert json.loads(json.dumps(report))  # plain JSON types only


def test_write_report_turns_non_finite_numbers_into_null(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "r.json"
    write_report({"consensus_distance": math.inf, "rounds": [{"loss": math.nan}]}, path)
    assert json.loads(path.read_text()) == {"consensus_distance": None, "rounds": [{"loss": None}]}


def test_format_table_shows_rounds_confusion_and_consensus() -> None:
    report = build_report({"task": "digits", "guard": "semantic"}, _swarm(), [torch.ones(3), torch.ones(3)])
    text = format_table(report)
    header = text.splitlines()[2]
    assert "accuracy" in header
    assert "perplexity" not in header  # no peer reported one: the column is dropped
    assert "false positive rate: 25.00%" in text
    assert "consensus distance" in text
    assert "final: accuracy=0.8000" in text


def test_format_table_survives_an_empty_report() -> None:
    assert "consensus distance" in format_table({})


# -- event files -------------------------------------------------------------------------------------------


def test_event_reader_waits_for_the_end_of_a_partial_line(tmp_path: Path) -> None:
    path = tmp_path / "peer0.events.jsonl"
    reader = EventReader(path)
    assert reader.read_new() == []  # no file yet
    first = json.dumps(_ready("A", False))
    second = json.dumps(_round(0, 1.0, 0.5))
    path.write_text(first + "\n" + second[:10])
    assert [e["event"] for e in reader.read_new()] == ["ready"]
    assert reader.read_new() == []
    with open(path, "a") as f:
        f.write(second[10:] + "\n")
    assert [e["event"] for e in reader.read_new()] == ["round"]


def test_event_reader_skips_garbage_and_drops_a_torn_last_line(tmp_path: Path) -> None:
    path = tmp_path / "e.jsonl"
    path.write_text(
        'not json\n[1, 2]\n{"no_event": 1}\n{"event": "final", "rounds_completed": 1}\n{"event": "ro'
    )
    events = read_events(path)
    assert events == [{"event": "final", "rounds_completed": 1}]


def test_event_reader_keeps_an_unterminated_but_complete_last_line_at_the_end(tmp_path: Path) -> None:
    path = tmp_path / "e.jsonl"
    path.write_text('{"event": "final", "rounds_completed": 3}')
    assert EventReader(path).read_new() == []
    assert read_events(path) == [{"event": "final", "rounds_completed": 3}]


# -- settings and command lines -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "settings",
    [
        {"honest": 0},
        {"byzantine": -1},
        {"rounds": 0},
        {"inner_steps": 0},
        {"inner_steps": 1_000_001},
        {"byzantine": 1, "attack": None},
        {"partition": "dirichlet:0"},
        {"partition": "dirichlet:x"},
        {"partition": "shards"},
        {"timeout_s": 0},
        {"timeout_s": math.inf},
        {"honest": True},
        {"codec": ""},
        {"max_upload_mbit": 0.0},
        {"max_upload_mbit": math.inf},
        {"max_upload_mbit": True},
    ],
)
def test_config_rejects_bad_settings(settings: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match=next(iter(settings))):
        SimulationConfig(**settings)


def test_check_partition_accepts_iid_and_dirichlet() -> None:
    assert check_partition("iid") == "iid"
    assert check_partition("dirichlet:0.5") == "dirichlet:0.5"


def test_peer_commands_put_honest_peers_first_and_give_attackers_the_attack(tmp_path: Path) -> None:
    config = SimulationConfig(honest=2, byzantine=1, attack="sign_flip:scale=10", rounds=4, inner_steps=5)
    maddrs = ["/ip4/127.0.0.1/tcp/1/p2p/Qm1", "/ip4/127.0.0.1/tcp/1/p2p/Qm2"]
    honest = peer_command(config, 1, maddrs, tmp_path)
    attacker = peer_command(config, 2, maddrs, tmp_path)
    assert honest[:4] == [sys.executable, "-m", "p2p_guard.cli.main", "peer"]
    assert honest[honest.index("--initial-peers") + 1 : honest.index("--initial-peers") + 3] == maddrs
    assert honest[honest.index("--peer-index") + 1] == "1"
    assert honest[honest.index("--num-peers") + 1] == "3"
    assert honest[honest.index("--start-peers") + 1] == "3"
    assert honest[honest.index("--inner-steps") + 1] == "5"
    assert honest[honest.index("--events") + 1] == str(tmp_path / "peer1.events.jsonl")
    assert "--attack" not in honest and "--overlap" not in honest and "--no-overlap" not in honest  # automatic
    assert "--overlap" in peer_command(replace(config, overlap=True), 1, maddrs, tmp_path)
    assert "--no-overlap" in peer_command(replace(config, overlap=False), 1, maddrs, tmp_path)
    assert attacker[attacker.index("--attack") + 1] == "sign_flip:scale=10"
    assert attacker[attacker.index("--byzantine-count") + 1] == "1"


def test_an_attack_mix_splits_the_attackers_into_contiguous_groups(tmp_path: Path) -> None:
    config = SimulationConfig(honest=7, byzantine=3, attack="adaptive+vote_smear", rounds=4)
    assert [config.attack_of(i) for i in range(10)] == [None] * 7 + [("adaptive", 2)] * 2 + [("vote_smear", 1)]
    maddrs = ["/ip4/127.0.0.1/tcp/1/p2p/Qm1"]
    commands = [peer_command(config, i, maddrs, tmp_path) for i in range(10)]
    assert [c[c.index("--attack") + 1] for c in commands[7:]] == ["adaptive", "adaptive", "vote_smear"]
    assert [c[c.index("--byzantine-count") + 1] for c in commands[7:]] == ["2", "2", "1"]
    assert all("--attack" not in c for c in commands[:7])
    three = SimulationConfig(honest=2, byzantine=4, attack="alie+noise:std=1e+3+sign_flip:scale=10")
    assert [three.attack_of(i) for i in range(2, 6)] == [("alie", 2), ("alie", 2), ("noise:std=1e+3", 1),
                                                         ("sign_flip:scale=10", 1)]


@pytest.mark.parametrize(
    ("spec", "parts"),
    [("sign_flip", ("sign_flip",)), ("vote_smear+adaptive:margin=0.2", ("vote_smear", "adaptive:margin=0.2")),
     ("noise:std=1e+3", ("noise:std=1e+3",)), ("my.mod:Cls:k=1+alie", ("my.mod:Cls:k=1", "alie"))],
)
def test_split_attack_mix(spec: str, parts: tuple[str, ...]) -> None:
    assert split_attack_mix(spec) == parts


@pytest.mark.parametrize("spec", ["alie++noise", "+alie", "alie+", "alie+ "])
def test_split_attack_mix_rejects_an_empty_part(spec: str) -> None:
    with pytest.raises(ValueError, match="no empty part"):
        split_attack_mix(spec)


def test_an_attack_mix_needs_a_peer_per_attack() -> None:
    with pytest.raises(ValueError, match="names 2 attacks for byzantine=1 peers"):
        SimulationConfig(honest=3, byzantine=1, attack="alie+vote_smear")


def test_peer_commands_carry_the_codec_and_the_upload_cap(tmp_path: Path) -> None:
    maddrs = ["/ip4/127.0.0.1/tcp/1/p2p/Qm1"]
    plain = peer_command(SimulationConfig(honest=2, byzantine=0), 0, maddrs, tmp_path)
    assert plain[plain.index("--codec") + 1] == "fp32"
    assert "--max-upload-mbit" not in plain
    config = SimulationConfig(honest=2, byzantine=1, codec="topk:density=0.05", max_upload_mbit=20)
    for index in range(3):  # honest and Byzantine peers alike
        command = peer_command(config, index, maddrs, tmp_path)
        assert command[command.index("--codec") + 1] == "topk:density=0.05"
        assert command[command.index("--max-upload-mbit") + 1] == "20.0"
    recorded = config.to_dict()
    assert recorded["codec"] == "topk:density=0.05"
    assert recorded["max_upload_mbit"] == 20
    assert "codec=topk:density=0.05 max_upload_mbit=20" in format_table({"config": recorded})


def test_bootstrap_command_listens_on_loopback_with_an_address_file(tmp_path: Path) -> None:
    command = bootstrap_command(tmp_path)
    assert command[3] == "bootstrap"
    assert command[command.index("--host") + 1] == "127.0.0.1"
    assert command[command.index("--port") + 1] == "0"
    assert command[command.index("--address-file") + 1] == str(tmp_path / "bootstrap.addr")


# -- version 2 swarm health: A, B, C honest (C slow), Z Byzantine --------------------------------------------

MIB = 1024 * 1024


def _ev(kind: str, **fields: Any) -> dict[str, Any]:
    return {"event": kind, **fields}


def _v2(round_: int, sender: str, commit_round: int, accepted: bool) -> dict[str, Any]:
    return _ev("verdict", round=round_, sender=sender, commit_round=commit_round, accepted=accepted,
               reason=None if accepted else "outlier", detail="", norm=1.0, cosine=0.5, weight=1.0)  # fmt: skip


def _r2(round_: int, seconds: float, compute_s: float, fetched: int, served: int) -> dict[str, Any]:
    return _ev("round", round=round_, loss=1.0, accuracy=0.5, perplexity=None, accepted=0, rejected=0,
               seconds=seconds, compute_s=compute_s, bytes_sent=100 * served, bytes_received=100 * fetched,
               wire_bytes_received=132 * fetched, fetched=fetched, served=served, state_hash="h", train_loss=1.0,
               snapshot=None)  # fmt: skip


def _v2_swarm() -> list[PeerLog]:
    """Two rounds. B rejects A in round 1 (B trains alone then); A applies C's round-0 update late, in round 1."""
    a = [
        _ev("ready", peer_id="A", byzantine=False, time=10.0, startup_s=2.0),
        _ev("commit", round=0, base_round=0, payload_bytes=10),
        _v2(0, "B", 0, True),
        _v2(0, "Z", 0, False),
        _r2(0, 2.0, 1.5, 2, 1),
        _ev("commit", round=1, base_round=1, payload_bytes=10),
        _v2(1, "B", 1, True),
        _v2(1, "C", 0, True),
        _v2(1, "Z", 1, True),
        _r2(1, 2.0, 1.8, 3, 3),
    ]
    b = [
        _ev("ready", peer_id="B", byzantine=False, time=11.0, startup_s=3.0),
        _ev("commit", round=0, base_round=0, payload_bytes=10),
        _ev("commit", round=0, base_round=0, payload_bytes=10),  # repeated after a restart: counts once
        _v2(0, "A", 0, True),
        _v2(0, "B", 0, True),  # about itself: never counts
        _r2(0, 3.0, 1.5, 1, 2),
        _ev("pause", round=1, present=0, needed=1),
        _ev("resume", round=1, paused_s=4.5),
        _ev("commit", round=1, base_round=1, payload_bytes=10),
        _v2(1, "A", 1, False),
        _r2(1, 1.0, 0.5, 0, 1),
    ]
    c = [
        _ev("ready", peer_id="C", byzantine=False, time=14.0),
        _ev("commit", round=0, base_round=0, payload_bytes=10),
        _v2(0, "A", 0, True),
        _r2(0, 6.0, 1.5, 1, 0),
        _ev("commit", round=1, base_round=0, payload_bytes=10),
        _ev("pause", round=1, present=0, needed=1),
    ]
    z = [
        _ev("ready", peer_id="Z", byzantine=True, time=9.0, startup_s=1.0),
        _ev("commit", round=0, base_round=0, payload_bytes=10),
        _v2(0, "A", 0, True),  # a Byzantine receiver's verdicts never count
        _r2(0, 1.0, 1.0, 9, 9),
    ]
    return [PeerLog(0, False, a), PeerLog(1, False, b), PeerLog(2, False, c), PeerLog(3, True, z)]


def test_updates_applied_counts_honest_commits_applied_by_another_honest_peer() -> None:
    applied = figures.updates_applied(_v2_swarm())
    # committed A0 A1 B0 B1 C0 C1; applied: A0 (by B and C), B0 and B1 (by A), C0 (by A, late); not A1, C1
    assert (applied["committed"], applied["applied"]) == (6, 4)
    assert applied["fraction"] == pytest.approx(4 / 6)
    assert applied["fraction_before_last_round"] == 1.0  # A0 B0 C0
    assert applied["mean_appliers"] == pytest.approx((2 + 0 + 1 + 1 + 1 + 0) / 6)
    assert applied["by_peer"] == {
        "0": {"committed": 2, "applied": 1, "fraction": 0.5},
        "1": {"committed": 2, "applied": 2, "fraction": 1.0},
        "2": {"committed": 2, "applied": 1, "fraction": 0.5},
    }


def test_updates_applied_is_undefined_without_commits() -> None:
    applied = figures.updates_applied([PeerLog(0, False, [_ready("A", False)])])
    assert (applied["committed"], applied["fraction"], applied["mean_appliers"]) == (0, None, None)


def test_trained_alone_is_a_round_that_used_no_other_peers_update() -> None:
    assert figures.trained_alone(_v2_swarm()) == {"any": True, "rounds": 1, "by_peer": {"1": [1]}}
    only_self = [PeerLog(0, False, [_ready("A", False), _v2(0, "A", 0, True), _r2(0, 1.0, 1.0, 0, 0)])]
    assert figures.trained_alone(only_self)["by_peer"] == {"0": [0]}
    unchanged = {**_r2(0, 1.0, 1.0, 0, 0), "applied": False}  # nothing arrived: the model was left as it was
    left_alone = [PeerLog(0, False, [_ready("A", False), _v2(0, "A", 0, True), unchanged])]
    assert figures.trained_alone(left_alone) == {"any": False, "rounds": 0, "by_peer": {}}


def test_rounds_unchanged_are_honest_rounds_that_applied_nothing() -> None:
    assert figures.rounds_unchanged(_v2_swarm()) == {"rounds": 0, "by_peer": {}}
    unchanged = [{**_r2(r, 1.0, 1.0, 0, 0), "applied": False} for r in (1, 2)]
    ahead = PeerLog(0, False, [_ready("A", False), _r2(0, 1.0, 1.0, 3, 3), *unchanged])
    byzantine = PeerLog(1, True, [_ready("Z", True), unchanged[0]])  # never counted
    assert figures.rounds_unchanged([ahead, byzantine]) == {"rounds": 2, "by_peer": {"0": [1, 2]}}
    report = {"config": {}, "rounds_unchanged": figures.rounds_unchanged([ahead, byzantine])}
    assert ("rounds an honest peer applied nothing (no other update arrived; model unchanged): 2 (peer0: 2)"
            in format_table(report).splitlines())
    assert "applied nothing" not in format_table({"config": {}, "rounds_unchanged": {"rounds": 0, "by_peer": {}}})


def test_pauses_total_the_pause_and_resume_events() -> None:
    assert figures.pauses(_v2_swarm()) == {
        "pauses": 2,
        "resumes": 1,
        "paused_s": 4.5,
        "unresumed": 1,
        "by_peer": {"1": {"pauses": 1, "paused_s": 4.5}, "2": {"pauses": 1, "paused_s": 0.0}},
    }


def test_utilization_is_compute_over_wall_time_per_peer() -> None:
    util = figures.utilization(_v2_swarm())
    assert util["by_peer"] == {"0": pytest.approx(3.3 / 4), "1": pytest.approx(0.5), "2": pytest.approx(0.25)}
    assert util["min"] == pytest.approx(0.25)
    assert util["mean"] == pytest.approx((0.825 + 0.5 + 0.25) / 3)
    assert figures.utilization([PeerLog(0, False, [_round(0, 1.0, 0.5)])])["by_peer"] == {"0": None}


#: wire bytes per round by honest peer: 132 bytes per payload fetched (peer 0 fetched 2 and 3, peer 1 1 and 0, peer 2 1)
BY_PEER_WIRE = {"0": {"mean": 330.0, "max": 396.0}, "1": {"mean": 66.0, "max": 132.0},
                "2": {"mean": 132.0, "max": 132.0}}


def test_fan_out_means_and_maxima_over_honest_round_events() -> None:
    fan = figures.fan_out(_v2_swarm())
    assert fan["fetched"] == {"mean": pytest.approx((2 + 3 + 1 + 0 + 1) / 5), "max": 3.0}  # Z's 9 left out
    assert fan["served"] == {"mean": pytest.approx((1 + 3 + 2 + 1 + 0) / 5), "max": 3.0}
    assert fan["bytes_received"]["max"] == 300.0
    assert fan["wire_bytes_received"] == {"mean": pytest.approx(132 * 7 / 5), "max": 396.0}  # digests and retries
    assert {i: fan["by_peer"][i]["wire_bytes_received"] for i in ("0", "1", "2")} == BY_PEER_WIRE
    assert fan["by_peer"]["1"]["served"] == {"mean": 1.5, "max": 2.0}
    assert "3" not in fan["by_peer"]


def test_the_table_shows_the_wire_bytes_received_per_peer_per_round() -> None:
    lines = format_table({"fan_out": figures.fan_out(_v2_swarm())}).splitlines()
    assert "bytes per peer per round: sent mean 140, max 300; received (used) mean 140, max 300; received on the " \
           "wire mean 185, max 396" in lines
    assert "wire bytes received per round, mean by peer: peer0 330, peer1 66, peer2 132" in lines


def test_startup_round_time_and_memory_figures() -> None:
    startup = figures.startup_times(_v2_swarm(), {0: 5.0, 1: 5.0, 2: 6.0, 3: 6.0}, run_started=4.0)
    assert startup["by_peer"] == {"0": 5.0, "1": 6.0, "2": 8.0, "3": 3.0}
    assert (startup["mean"], startup["max"], startup["swarm_s"]) == (5.5, 8.0, 10.0)
    assert startup["peer_reported_mean"] == 2.0
    assert figures.startup_times(_v2_swarm(), {})["swarm_s"] is None
    assert figures.round_times(_v2_swarm()) == {"mean": pytest.approx(14 / 5), "max": 6.0}
    memory = figures.memory_summary({0: [100 * MIB, 200 * MIB], 1: [300 * MIB], 2: []})
    assert memory["by_peer"] == {
        "0": {"max_mib": 200.0, "mean_mib": 150.0, "samples": 2},
        "1": {"max_mib": 300.0, "mean_mib": 300.0, "samples": 1},
    }
    assert (memory["max_mib"], memory["mean_mib"]) == (300.0, 225.0)
    assert figures.memory_summary({})["max_mib"] is None


def test_build_report_takes_the_last_snapshot_round_and_records_fault_recovery() -> None:
    seen = RunObservations(
        round_distances={0: (0.002, 3), 1: (0.02, 2)},
        run_started=4.0,
        launch_times={0: 5.0, 1: 5.0, 2: 6.0, 3: 6.0},
        start_attempts={0: 1, 2: 3},
        memory_samples={0: [MIB]},
        fault_plan={"source": "plan.toml", "faults": []},
        faults=[
            {"number": 1, "kind": "stop", "peer": 2, "round": 0, "fired": True, "fired_round": 0},
            {"number": 2, "kind": "kill_restart", "peer": 1, "round": 1, "fired": True, "fired_round": 1},
            {"number": 3, "kind": "kill_bootstrap", "round": 9, "fired": False, "fired_round": None},
        ],
    )
    report = build_report({"task": "digits"}, _v2_swarm(), [torch.ones(3), torch.ones(3)], seen)
    assert report["consensus_distance"] == 0.02  # the last round's, not the final states' 0.0
    assert report["consensus"] == {
        "final": 0.02,
        "source": "snapshots",
        "final_states": 0.0,
        "max": 0.02,
        "bound": CONSENSUS_BOUND,
        "rounds_over_bound": [1],
    }
    assert [r["consensus_distance"] for r in report["rounds"]] == [0.002, 0.02]
    # round 0 is under the bound but round 1, after it, is not: no fault has recovered
    assert [f["recovered_round"] for f in report["faults"]] == [None, None, None]
    assert [f["recovery_rounds"] for f in report["faults"]] == [None, None, None]
    assert report["start_retries"] == {"2": 2}
    assert report["startup"]["swarm_s"] == 10.0
    assert report["memory"]["max_mib"] == 1.0
    assert report["trained_alone"]["any"] is True
    assert report["rounds_unchanged"] == {"rounds": 0, "by_peer": {}}
    assert report["fault_plan"] == {"source": "plan.toml", "faults": []}
    text = format_table(report)
    assert "honest updates applied by another honest peer: 4/6 (66.7%" in text
    assert "rounds an honest peer trained alone: 1 (peer1: 1)" in text
    assert "fault 1: stop peer2 at round 0: fired at round 0" in text
    assert "fault 3: kill_bootstrap bootstrap at round 9: NOT fired" in text
    assert "failed starts retried: peer2×2" in text
    assert json.loads(json.dumps(report))


def _write_snapshot(folder: Path, round_: int, values: list[float], dtype: Any = np.float32) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = snapshot_path(folder, round_)
    np.save(path, np.asarray(values, dtype=dtype))
    return path


def test_consensus_tracker_waits_for_every_honest_peer_then_measures_and_deletes(tmp_path: Path) -> None:
    dirs = {0: tmp_path / "p0", 1: tmp_path / "p1"}
    _write_snapshot(dirs[0], 0, [3.0, 4.0])
    _write_snapshot(dirs[1], 0, [3.0, 4.5])
    kept = _write_snapshot(dirs[0], 1, [1.0, 0.0])
    _write_snapshot(dirs[1], 1, [1.0, 0.0], dtype=np.float64)  # misshapen input: left out
    tracker = ConsensusTracker(dirs)
    tracker.update({0: 2, 1: 1})  # peer 1 has not reported round 1: its round-0 snapshot may still come
    assert tracker.distances == {}
    tracker.update({0: 2, 1: 2})
    assert tracker.distances[0][1] == 2
    assert tracker.distances[0][0] == pytest.approx(0.5 / 5)
    assert not snapshot_path(dirs[0], 0).exists()  # deleted once used
    assert kept.exists()
    tracker.update({0: 2, 1: 2}, final=True)
    assert tracker.distances[1] == (0.0, 1)


def test_consensus_tracker_records_a_round_without_snapshots_as_unmeasured(tmp_path: Path) -> None:
    tracker = ConsensusTracker({0: tmp_path / "none"}, keep=True)
    tracker.update({0: 3}, final=True)
    assert tracker.distances == {0: (None, 0), 1: (None, 0), 2: (None, 0)}


def test_consensus_distance_of_many_models_matches_the_pairwise_definition() -> None:
    generator = torch.Generator().manual_seed(0)
    thetas = [torch.randn(50, generator=generator, dtype=torch.float64) for _ in range(6)]
    expected = max(
        float(torch.linalg.vector_norm(a - b) / torch.linalg.vector_norm(a))
        for i, a in enumerate(thetas)
        for j, b in enumerate(thetas)
        if i != j
    )
    assert consensus_distance(thetas) == pytest.approx(expected, rel=1e-12)


def test_peer_commands_carry_snapshot_control_checkpoint_and_a_join_timeout_growing_with_n(
    tmp_path: Path,
) -> None:
    small = peer_command(SimulationConfig(honest=4, byzantine=0), 0, ["/ip4/1.2.3.4/tcp/1/p2p/Qm"], tmp_path)
    large = peer_command(SimulationConfig(honest=32, byzantine=0), 5, ["/ip4/1.2.3.4/tcp/1/p2p/Qm"], tmp_path)
    assert small[small.index("--join-timeout-s") + 1] == "300"
    assert large[large.index("--join-timeout-s") + 1] == "640"
    assert large[large.index("--snapshot-dir") + 1] == str(tmp_path / "peer5.snapshots")
    assert large[large.index("--control-file") + 1] == str(tmp_path / "peer5.control.json")
    assert large[large.index("--checkpoint-dir") + 1] == str(tmp_path / "peer5.checkpoint")
    fixed = peer_command(SimulationConfig(honest=32, byzantine=0, join_timeout_s=50.0), 0, ["/x"], tmp_path)
    assert fixed[fixed.index("--join-timeout-s") + 1] == "50"


def test_a_fault_recovers_only_where_the_distance_stays_under_the_bound() -> None:
    """The spike of a frozen peer comes two rounds after its fault fired: recovery is after the spike."""
    from p2p_guard.simulation.report import _fault_recovery

    rounds = [{"round": r, "consensus_distance": d} for r, d in enumerate([0.001, 0.002, 0.003, 0.2, 0.02, 0.004,
                                                                           0.003, 0.002])]
    faults = [{"number": 1, "fired": True, "fired_round": 1}, {"number": 2, "fired": True, "fired_round": 6},
              {"number": 3, "fired": True, "fired_round": 7}]
    got = [(f["recovered_round"], f["recovery_rounds"]) for f in _fault_recovery(faults, rounds)]
    assert got == [(5, 4), (6, 0), (7, 0)]  # the last rounds have fewer rounds after them to check


def test_updates_applied_counts_rows_taken_a_round_late_by_honest_peers_only() -> None:
    """``swarm.late`` rows were counted only in the round events and metrics; the report now sums them."""
    honest = [_ready("A", False), {**_r2(0, 1.0, 1.0, 1, 1), "late_applied": 0},
              {**_r2(1, 1.0, 1.0, 1, 1), "late_applied": 2}, {**_r2(2, 1.0, 1.0, 1, 1), "late_applied": True},
              _r2(3, 1.0, 1.0, 1, 1)]  # a bool or a missing field counts nothing
    other = [_ready("B", False), {**_r2(1, 1.0, 1.0, 1, 1), "late_applied": 1}]
    byzantine = [_ready("Z", True), {**_r2(1, 1.0, 1.0, 1, 1), "late_applied": 5}]
    peers = [PeerLog(0, False, honest), PeerLog(1, False, other), PeerLog(2, True, byzantine)]
    assert figures.updates_applied(peers)["late_applied"] == 3
    assert figures.updates_applied(_v2_swarm())["late_applied"] == 0
    report = {"updates_applied": {"applied": 4, "committed": 6, "fraction": 4 / 6, "late_applied": 3}}
    assert "honest updates applied by another honest peer: 4/6 (66.7%; before the last round -; 3 taken a round " \
           "late)" in format_table(report)


def test_simulate_passes_its_peer_log_level_to_every_peer(tmp_path: Path) -> None:
    """``simulate`` gave its peers no log level, so a failing user task's traceback (logged at DEBUG) could only be
    seen by running a peer by hand (helper-49). ``--peer-log-level`` goes before the command, as for one peer."""
    maddrs = ["/ip4/127.0.0.1/tcp/1/p2p/Qm1"]
    entry = [sys.executable, "-m", "p2p_guard.cli.main"]
    assert peer_command(SimulationConfig(honest=2, byzantine=0), 0, maddrs, tmp_path)[:4] == [*entry, "peer"]
    debug = SimulationConfig(honest=2, byzantine=0, peer_log_level="debug")
    assert debug.peer_log_level == "DEBUG"
    assert peer_command(debug, 1, maddrs, tmp_path)[:6] == [*entry, "--log-level", "DEBUG", "peer"]
    with pytest.raises(ValueError, match=r"^peer_log_level must be one of DEBUG, INFO, WARNING, ERROR; "
                                         r"got peer_log_level='LOUD'$"):
        SimulationConfig(peer_log_level="loud")
