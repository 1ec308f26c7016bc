"""The simulation report from synthetic event files: confusion counts, round means, consensus, and its inputs.

Pure and fast: no process, no network. Also covers the event reader (partial lines), the text table, the
settings' checks and the command lines the simulator starts.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from p2p_guard.simulation.config import SimulationConfig, check_partition
from p2p_guard.simulation.events import EventReader, read_events
from p2p_guard.simulation.orchestrator import bootstrap_command, peer_command, write_report
from p2p_guard.simulation.report import (
    PeerLog,
    build_report,
    consensus_distance,
    guard_confusion,
    mean_bytes_sent,
    round_summaries,
)
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
    assert "state_hashes_agree" not in row  # version 2: honest models differ, the distance replaces hash equality
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
        {"byzantine": 1, "attack": None},
        {"partition": "dirichlet:0"},
        {"partition": "dirichlet:x"},
        {"partition": "shards"},
        {"timeout_s": 0},
        {"timeout_s": math.inf},
        {"honest": True},
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
    assert honest[honest.index("--min-peers") + 1] == "3"
    assert honest[honest.index("--inner-steps") + 1] == "5"
    assert honest[honest.index("--events") + 1] == str(tmp_path / "peer1.events.jsonl")
    assert "--attack" not in honest
    assert attacker[attacker.index("--attack") + 1] == "sign_flip:scale=10"
    assert attacker[attacker.index("--byzantine-count") + 1] == "1"


def test_bootstrap_command_listens_on_loopback_with_an_address_file(tmp_path: Path) -> None:
    command = bootstrap_command(tmp_path)
    assert command[3] == "bootstrap"
    assert command[command.index("--host") + 1] == "127.0.0.1"
    assert command[command.index("--port") + 1] == "0"
    assert command[command.index("--address-file") + 1] == str(tmp_path / "bootstrap.addr")
