"""``swarm/metrics.py``: a registry per peer, counters from a round's values, live gauges, no cost when off."""

from __future__ import annotations

import math
import socket
import subprocess
import sys
import urllib.request

from p2p_guard.protocol.reasons import RejectReason
from p2p_guard.swarm.metrics import PeerMetrics, start_metrics
from p2p_guard.swarm.verdicts import SenderVerdict


def _value(metrics: PeerMetrics, name: str, **labels: str) -> float:
    value = metrics.registry.get_sample_value(name, labels or None)
    assert value is not None, name
    return value


def _observe(metrics: PeerMetrics, **changes: object) -> None:
    values: dict = {"verdicts": [SenderVerdict("me", 3, True, "accepted"), SenderVerdict("a", 3, True, "accepted"),
                                 SenderVerdict("b", 3, False, "outlier"),
                                 SenderVerdict.rejected("c", 3, RejectReason.TIMEOUT, "no answer in 30 s")],
                    "me": "me", "applied": True, "fetched": 3, "served": 2, "bytes_sent": 1000,
                    "bytes_received": 3000, "seconds": 4.5, "compute_s": 1.5, "mix_distance": 0.01,
                    "mixed_from": 2, "loss": 0.7, "accuracy": None}
    values.update(changes)
    metrics.observe_round(**values)


def test_round_values_become_counters_and_gauges() -> None:
    metrics = PeerMetrics()
    state = {"round": 3, "paused": False}
    metrics.bind(round_=lambda: state["round"], paused=lambda: float(state["paused"]), banned=lambda: 1)
    _observe(metrics)
    _observe(metrics, verdicts=[SenderVerdict("b", 4, False, "outlier")], applied=False,
             mix_distance=None, seconds=2.0)
    assert _value(metrics, "p2p_guard_rounds_completed_total") == 2
    assert _value(metrics, "p2p_guard_rounds_applied_total") == 1
    assert _value(metrics, "p2p_guard_updates_accepted_total") == 1  # our own row is not counted
    assert _value(metrics, "p2p_guard_updates_rejected_total", reason="outlier") == 2
    assert _value(metrics, "p2p_guard_updates_rejected_total", reason="timeout") == 1
    assert _value(metrics, "p2p_guard_bytes_sent_total") == 2000
    assert _value(metrics, "p2p_guard_bytes_received_total") == 6000
    assert _value(metrics, "p2p_guard_payloads_served_total") == 4
    assert _value(metrics, "p2p_guard_payloads_fetched_total") == 6
    assert _value(metrics, "p2p_guard_compute_seconds_total") == 3.0
    assert _value(metrics, "p2p_guard_last_round_seconds") == 2.0
    assert _value(metrics, "p2p_guard_mix_distance") == 0.01  # kept from the last mixing step
    assert _value(metrics, "p2p_guard_eval_loss") == 0.7
    assert math.isnan(_value(metrics, "p2p_guard_eval_accuracy"))
    assert _value(metrics, "p2p_guard_round") == 3 and _value(metrics, "p2p_guard_paused") == 0
    state.update(round=4, paused=True)
    assert _value(metrics, "p2p_guard_round") == 4 and _value(metrics, "p2p_guard_paused") == 1
    assert _value(metrics, "p2p_guard_banned_peers") == 1


def test_two_peers_have_separate_registries() -> None:
    a, b = PeerMetrics(), PeerMetrics()
    _observe(a)
    assert _value(a, "p2p_guard_rounds_completed_total") == 1
    assert _value(b, "p2p_guard_rounds_completed_total") == 0


def test_endpoint_serves_and_stops() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    metrics = start_metrics(port, "127.0.0.1")
    assert metrics is not None
    try:
        _observe(metrics)
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
        assert "p2p_guard_rounds_completed_total 1.0" in text
        assert 'p2p_guard_updates_rejected_total{reason="outlier"} 1.0' in text
        assert "process_cpu_seconds_total" not in text  # our registry, not the library's global one
    finally:
        metrics.close()
        metrics.close()
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # Linux: refused while anything listens there
        sock.bind(("127.0.0.1", port))  # the port is free again
        sock.listen()


def test_off_costs_nothing() -> None:
    assert start_metrics(None, "127.0.0.1") is None and start_metrics(0, "127.0.0.1") is None
    code = ("import sys, p2p_guard.swarm.metrics as m; assert m.start_metrics(None, 'x') is None; "
            "assert 'prometheus_client' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_the_byte_counters_say_what_they_count() -> None:
    """``bytes_received`` was described as "payload bytes fetched": it also counts the mixing's states, counts only
    what was used (the declared payload size of updates that arrived in full), and no wire bytes (digest lists,
    status bytes, failed or repeated fetches), while ``bytes_sent`` counts every answer body written."""
    metrics = PeerMetrics()
    helps = {m.name: m.documentation for m in metrics.registry.collect()}
    assert helps["p2p_guard_bytes_received"] == (
        "bytes of the updates (declared payload size) and states this peer used; not wire bytes (no digests, "
        "status bytes, failed or repeated fetches)")
    assert helps["p2p_guard_bytes_sent"] == (
        "bytes of answer bodies this peer's server wrote (payloads with their chunk digests, states; retried and "
        "cut answers included)")
