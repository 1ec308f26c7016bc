"""A peer's Prometheus metrics: an opt-in HTTP endpoint (``--metrics-port``), one registry per peer.

Off by default, and free when off: nothing here imports ``prometheus_client`` until :func:`start_metrics` is called
with a port, and the peer only holds ``None``. When on, the peer builds one :class:`PeerMetrics` with its own
``CollectorRegistry`` (never the library's global one), serves it at ``http://HOST:PORT/metrics`` from a daemon
thread, updates the counters once per round where it emits its ``round`` event (``swarm.peer._emit_round``), and
reads three live values (round, pause state, bans) at scrape time through callbacks.

Metric names (all prefixed ``p2p_guard_``; ``_total`` are counters, the rest gauges):

==================================  ===========================================================================
``round``                           the round the peer is in now (live)
``paused``                          1 while the peer pauses for lack of peers (``protocol.md`` §7.1), else 0 (live)
``banned_peers``                    senders banned by an equivocation proof (live)
``rounds_completed_total``          rounds finished (communicated, stepped, reported)
``rounds_applied_total``            rounds whose aggregate was applied (others' updates arrived)
``updates_accepted_total``          other senders' updates the guard accepted
``updates_rejected_total{reason}``  other senders' updates rejected, by reject reason (``outlier``, ``timeout``...)
``late_updates_applied_total``      updates carried over from an earlier round's deadline (``swarm.late``) that the
                                    guard accepted (also in ``updates_accepted_total``)
``payloads_fetched_total``          payloads fetched from sampled senders
``payloads_served_total``           payloads this peer served
``bytes_sent_total``                bytes of the answer bodies this peer's server wrote: payloads with their chunk
                                    digest lists, and states, every answer cut short or asked again included
                                    (no status bytes, requests, DHT or libp2p framing)
``bytes_received_total``            bytes of the updates and states this peer used: the declared payload size of
                                    each update fetched in full (one taken a round late when it is taken), plus
                                    the θ and momentum states its mixing decoded; not wire bytes (no chunk digest
                                    lists, status bytes or requests, nothing of a fetch that failed, was cut or
                                    was asked again). So it is less than the other peers' ``bytes_sent`` for it
``wire_bytes_received_total``       bytes of the answer bodies this peer's fetches read off the wire: payloads
                                    with their chunk digest lists, and states, every answer cut, failed, rejected
                                    or asked again included (no status bytes, requests, DHT or libp2p framing);
                                    the receive-side twin of the other peers' ``bytes_sent``
``compute_seconds_total``           inner-phase wall time, seconds
``last_round_seconds``              wall time of the last round, seconds
``last_compute_seconds``            inner-phase wall time of the last round, seconds
``mix_distance``                    last mixing step: max ‖θ_j − θ_i‖ / ‖θ_i‖ over the sampled neighbours, before
                                    mixing (NaN until a mixing step used a neighbour)
``mixed_from``                      neighbours the last round's mixing step used (0: no mixing)
``eval_loss``, ``eval_accuracy``    the peer's own evaluation after the last round (accuracy NaN for text tasks)
==================================  ===========================================================================
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from p2p_guard.swarm.verdicts import SenderVerdict

__all__ = ["PREFIX", "PeerMetrics", "start_metrics"]

logger = logging.getLogger(__name__)

PREFIX = "p2p_guard_"


class PeerMetrics:
    """The metrics of one peer, in a registry of their own, and the HTTP server that exposes them.

    Build it with :func:`start_metrics`; call :meth:`bind` once the peer exists, :meth:`observe_round` after each
    round, :meth:`close` at shutdown.

    Args:
        registry: a ``prometheus_client.CollectorRegistry`` (None: a new one).
    """

    def __init__(self, registry: Any = None) -> None:
        from prometheus_client import CollectorRegistry, Counter, Gauge

        self.registry = registry if registry is not None else CollectorRegistry(auto_describe=True)
        self._server: Any = None
        self._thread: threading.Thread | None = None

        def gauge(name: str, doc: str) -> Any:
            return Gauge(PREFIX + name, doc, registry=self.registry)

        def counter(name: str, doc: str, labels: Iterable[str] = ()) -> Any:
            return Counter(PREFIX + name, doc, list(labels), registry=self.registry)

        self.round = gauge("round", "the round the peer is in now")
        self.paused = gauge("paused", "1 while the peer pauses for lack of peers, else 0")
        self.banned_peers = gauge("banned_peers", "senders banned by an equivocation proof")
        self.rounds_completed = counter("rounds_completed", "rounds finished")
        self.rounds_applied = counter("rounds_applied", "rounds whose aggregate was applied")
        self.updates_accepted = counter("updates_accepted", "other senders' updates the guard accepted")
        self.updates_rejected = counter("updates_rejected", "other senders' updates rejected, by reason",
                                        ["reason"])
        self.late_updates_applied = counter("late_updates_applied", "updates carried over from an earlier round's "
                                                                    "deadline that the guard accepted")
        self.payloads_fetched = counter("payloads_fetched", "payloads fetched from sampled senders")
        self.payloads_served = counter("payloads_served", "payloads this peer served")
        self.bytes_sent = counter("bytes_sent", "bytes of answer bodies this peer's server wrote (payloads with "
                                                "their chunk digests, states; retried and cut answers included)")
        self.bytes_received = counter("bytes_received", "bytes of the updates (declared payload size) and states "
                                                        "this peer used; not wire bytes (no digests, status "
                                                        "bytes, failed or repeated fetches)")
        self.wire_bytes_received = counter("wire_bytes_received", "bytes of answer bodies this peer's fetches "
                                                                  "read off the wire (payloads with their chunk "
                                                                  "digests, states; retried and cut answers "
                                                                  "included)")
        self.compute_seconds = counter("compute_seconds", "inner-phase wall time, seconds")
        self.last_round_seconds = gauge("last_round_seconds", "wall time of the last round, seconds")
        self.last_compute_seconds = gauge("last_compute_seconds", "inner-phase wall time of the last round, seconds")
        self.mix_distance = gauge("mix_distance", "last mixing step: max |theta_j - theta_i| / |theta_i| over the "
                                                  "sampled neighbours, before mixing")
        self.mixed_from = gauge("mixed_from", "neighbours the last round's mixing step used")
        self.eval_loss = gauge("eval_loss", "own evaluation loss after the last round")
        self.eval_accuracy = gauge("eval_accuracy", "own evaluation accuracy after the last round")
        self.mix_distance.set(math.nan)
        self.eval_loss.set(math.nan)
        self.eval_accuracy.set(math.nan)

    def bind(self, *, round_: Callable[[], float], paused: Callable[[], float], banned: Callable[[], float]) -> None:
        """Read the live gauges from the peer at scrape time (called from the HTTP thread: cheap reads only).

        Args:
            round_: the peer's current round.
            paused: 1 while paused, else 0.
            banned: how many senders the peer bans.
        """
        self.round.set_function(round_)
        self.paused.set_function(paused)
        self.banned_peers.set_function(banned)

    def observe_round(self, *, verdicts: Iterable[SenderVerdict], me: str, applied: bool, fetched: int,
                      served: int, bytes_sent: int, bytes_received: int, seconds: float, compute_s: float,
                      mix_distance: float | None, mixed_from: int, loss: float | None,
                      accuracy: float | None, late_applied: int = 0, wire_bytes_received: int = 0) -> None:
        """Count one finished round (the values of its ``round`` event).

        Args:
            verdicts: the round's verdicts; our own row is skipped.
            me: our PeerID (base58).
            applied: the aggregate was applied.
            fetched: payloads fetched.
            served: payloads served since the last round.
            bytes_sent: answer-body bytes served since the last round (``bytes_sent_total``).
            bytes_received: bytes of the updates and states used this round (``bytes_received_total``).
            seconds: the round's wall time, seconds.
            compute_s: its inner phase, seconds.
            mix_distance: relative distance to the mixing neighbours (None: no mixing step this round).
            mixed_from: neighbours used by the mixing step.
            loss: evaluation loss (None: not finite).
            accuracy: evaluation accuracy (None: not measured).
            late_applied: accepted updates carried over from an earlier round (``swarm.late``).
            wire_bytes_received: answer-body bytes our fetches read since the last round
                (``wire_bytes_received_total``).
        """
        self.rounds_completed.inc()
        self.late_updates_applied.inc(max(0, late_applied))
        if applied:
            self.rounds_applied.inc()
        for verdict in verdicts:
            if verdict.sender == me:
                continue
            if verdict.accepted:
                self.updates_accepted.inc()
            else:
                self.updates_rejected.labels(reason=str(verdict.reason or "unknown")[:64]).inc()
        self.payloads_fetched.inc(max(0, fetched))
        self.payloads_served.inc(max(0, served))
        self.bytes_sent.inc(max(0, bytes_sent))
        self.bytes_received.inc(max(0, bytes_received))
        self.wire_bytes_received.inc(max(0, wire_bytes_received))
        self.compute_seconds.inc(max(0.0, compute_s))
        self.last_round_seconds.set(seconds)
        self.last_compute_seconds.set(compute_s)
        if mix_distance is not None:
            self.mix_distance.set(mix_distance)
        self.mixed_from.set(mixed_from)
        self.eval_loss.set(math.nan if loss is None else loss)
        self.eval_accuracy.set(math.nan if accuracy is None else accuracy)

    def serve(self, host: str, port: int) -> None:
        """Serve the registry at ``http://host:port/metrics`` from a daemon thread.

        Raises:
            OSError: the port is taken or the address is not local.
        """
        from prometheus_client import start_http_server

        self._server, self._thread = start_http_server(port, addr=host, registry=self.registry)

    def close(self) -> None:
        """Stop the HTTP server (if serving). Safe to call twice."""
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5.0)
            self._thread = None


def start_metrics(port: int | None, host: str) -> PeerMetrics | None:
    """The peer's metrics, served on ``host:port``, or None when ``port`` is None or 0 (off: nothing imported).

    Args:
        port: TCP port of the endpoint (``PeerConfig.metrics_port``).
        host: listen address (the peer's ``host``).

    Returns:
        A serving :class:`PeerMetrics`, or None.

    Raises:
        OSError: the port cannot be bound.
    """
    if not port:
        return None
    metrics = PeerMetrics()
    metrics.serve(host, port)
    logger.info("metrics on http://%s:%d/metrics", host, port)
    return metrics
