"""The swarm: DHT, rounds, transport and the peer (see ``docs/architecture.md``).

Importing this package defers ``scipy.optimize`` (``swarm._deferred``): hivemind imports it at import time for
an averager's load balancer the swarm never runs; it is imported for real on first use.
"""

from p2p_guard.swarm._deferred import defer_import

defer_import("scipy.optimize")
