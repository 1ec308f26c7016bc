"""Time and peak extra memory to fetch a 100M-parameter update over loopback, streamed and checked chunk by chunk.

    python docs/scripts/wire_stream.py                          # d = 100,000,000 in int8 and fp16
    python docs/scripts/wire_stream.py --params 25000000 --codecs fp32 int8 int4 topk --whole
    python docs/scripts/wire_stream.py --params 25338880 --max-upload-mbit 20 --codecs fp32 fp16 int8 int4 \
        topk:density=0.01 topk:density=0.02 topk:density=0.05      # the 25M char-GPT's payload at a home uplink
    python docs/scripts/wire_stream.py --task shakespeare:n_layers=8,d_model=512,n_heads=8 --max-upload-mbit 20 \
        --codecs topk:density=0.02 topk:density=0.02,dense=head    # d and the dense set from the task's model

Two hivemind p2pd daemons on 127.0.0.1 in this process: an honest ``PayloadServer`` reveals a payload of the
codec's exact size for d parameters (random bytes: the transport never looks inside; ``payload_cap_bytes`` says
whether the default cap lets it through), and the receiver fetches it with ``transport.fetch_payload`` through a
``ChunkVerifier`` built from the payload's root, as ``swarm.rounds`` does. For each codec it prints the payload
size, the seconds of the fetch, its rate, and the peak extra memory of the fetch: Python allocations
(tracemalloc, started after the server holds the payload) and the process RSS sampled every 20 ms (peak minus
the value before the fetch; the two p2pd daemons are other processes and not counted). ``--whole`` also reads the
same bytes with the whole-answer ``transport.fetch`` (served as a state), the version 2 way, for comparison.
``--max-upload-mbit`` caps the server's upload (``PayloadServer(max_upload_bytes_per_s=...)``, the peer's
``--max-upload-mbit``), to time one payload at a home uplink on loopback. ``--task SPEC`` takes d and the parameter
shapes (which a ``dense=head`` codec's size needs) from the task's model instead of ``--params``.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import time
import tracemalloc

from hivemind.p2p import P2P

from p2p_guard.protocol import ChunkVerifier, expected_payload_bytes, payload_cap_bytes, payload_digest
from p2p_guard.swarm.transport import OK, FetchResult, PayloadServer, fetch, fetch_payload

RUN = "wire-stream"
LOOPBACK = ["/ip4/127.0.0.1/tcp/0"]


def rss_bytes() -> int:
    with open("/proc/self/statm", encoding="ascii") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


async def measured(fetching: asyncio.Future[FetchResult] | object) -> tuple[FetchResult, float, int, int]:
    """(result, seconds, peak extra traced bytes, peak extra RSS bytes) of awaiting ``fetching``."""
    peak_rss = start_rss = rss_bytes()
    done = asyncio.Event()

    async def sample() -> None:
        nonlocal peak_rss
        while not done.is_set():
            peak_rss = max(peak_rss, rss_bytes())
            await asyncio.sleep(0.02)

    sampler = asyncio.create_task(sample())
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    started = time.monotonic()
    try:
        result = await fetching  # type: ignore[misc]
    finally:
        took = time.monotonic() - started
        peak = tracemalloc.get_traced_memory()[1] - base
        tracemalloc.stop()
        done.set()
        await sampler
    peak_rss = max(peak_rss, rss_bytes())
    return result, took, peak, peak_rss - start_rss


async def main(params: int, codecs: list[str], whole: bool, max_upload_mbit: float | None,
               shapes: tuple[tuple[int, ...], ...] | None = None) -> None:
    server = await P2P.create(host_maddrs=LOOPBACK, nat_port_map=False)
    client = await P2P.create(initial_peers=[str(m) for m in await server.get_visible_maddrs()],
                              host_maddrs=LOOPBACK, nat_port_map=False)
    try:
        cap = None if max_upload_mbit is None else max_upload_mbit * 1e6 / 8
        served = PayloadServer(RUN, max_upload_bytes_per_s=cap)
        await served.attach(server)
        print(f"| codec | payload (bytes) | cap at 2^28 params | fetch (s) | MiB/s | peak extra Python | "
              f"peak extra RSS |{' whole read: Python / RSS |' if whole else ''}")
        print(f"|---|---:|---:|---:|---:|---:|---:|{'---:|' if whole else ''}")
        for round_, codec in enumerate(codecs):
            size = expected_payload_bytes(codec, params, shapes)
            payload = os.urandom(size)
            root = payload_digest(payload)
            served.reveal(round_, payload)
            result, took, peak, rss = await measured(fetch_payload(
                client, server.peer_id, RUN, round_, ChunkVerifier(root, size), timeout_s=3600))
            if result.status != OK or result.data is None or payload_digest(result.data) != root:
                raise SystemExit(f"{codec}: fetch failed: {result.status} {result.detail}")
            del result
            row = (f"| {codec} | {size:,} | {payload_cap_bytes(codec):,} | {took:.2f} | {size / took / 2**20:.1f} | "
                   f"{peak / 2**20:.1f} MiB ({peak / size:.2f}×) | {rss / 2**20:.1f} MiB ({rss / size:.2f}×) |")
            if whole:
                served.publish_state(root, payload)
                old, _, old_peak, old_rss = await measured(fetch(
                    client, server.peer_id, RUN, ["state", root], max_bytes=size, timeout_s=3600))
                if old.status != OK:
                    raise SystemExit(f"{codec}: whole read failed: {old.detail}")
                del old
                row += f" {old_peak / size:.2f}× / {old_rss / size:.2f}× |"
            print(row, flush=True)
            del payload
    finally:
        await client.shutdown()
        await server.shutdown()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--params", type=int, default=100_000_000, help="d, parameters (default: 100,000,000)")
    parser.add_argument("--codecs", nargs="+", default=["int8", "fp16"], help="codec strings (default: int8 fp16)")
    parser.add_argument("--task", default=None, help="take d and the shapes from this task's model (a task spec)")
    parser.add_argument("--whole", action="store_true", help="also time the whole-answer read (version 2)")
    parser.add_argument("--max-upload-mbit", type=float, default=None,
                        help="cap the server's upload at this many Mbit/s (default: no cap)")
    args = parser.parse_args()
    task_shapes = None
    if args.task is not None:
        from p2p_guard.tasks import load_task
        from p2p_guard.training.params import param_shapes

        task_shapes = param_shapes(load_task(args.task).build_model(0))
        args.params = sum(math.prod(shape) for shape in task_shapes)
    asyncio.run(main(args.params, args.codecs, args.whole, args.max_upload_mbit, task_shapes))
