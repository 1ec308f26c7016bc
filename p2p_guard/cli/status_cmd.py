"""``p2p-guard status``: a read-only look at a running swarm, from its DHT records.

It joins the DHT as a hivemind *client* with a fresh, throw-away identity: it announces no presence, commits
nothing, publishes no close record or vote, and answers no DHT request. It reads the run's records, opens each
with the protocol's own checks (``p2p_guard.swarm.status``; invalid ones are skipped and counted) and prints
one table, or with ``--json`` one JSON object; ``--watch SECONDS`` refreshes until Ctrl+C.

Every :class:`StatusConfig` field is a flag and a key of the ``[status]`` table of ``--config``.

Exit codes: 0 printed (``--watch``: also when Ctrl+C or SIGTERM ends it after a first print, its normal end, as
for a peer's clean stop), 1 the DHT could not be joined or did not answer within ``--timeout-s`` (with
``--watch``, a read that times out is one warning line and is tried again at the next refresh), 2 a usage error,
130 Ctrl+C (143 SIGTERM) before anything was printed (as for ``simulate``: the status was not given).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import math
import re
import signal
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from p2p_guard.cli.errors import EXIT_FAILED, EXIT_USAGE, print_error, print_warning, silence_stdout
from p2p_guard.cli.typed_config import add_config_flags, load_config
from p2p_guard.swarm.config import check_run_id

if TYPE_CHECKING:
    from p2p_guard.swarm.status import SwarmStatus

__all__ = ["StatusConfig", "add_parser", "render_json", "render_table", "run", "shard_line"]

logger = logging.getLogger(__name__)

COMMAND = "status"
#: The codec text of an envelope is the sender's: only these characters are printed to a terminal.
_PRINTABLE = re.compile(r"[^A-Za-z0-9:._=+-]")
_MAX_CODEC_CHARS = 16
#: A ``--watch`` refresh whose read timed out (a warning was printed; the next refresh tries again).
_TIMED_OUT = object()


@dataclass(frozen=True)
class StatusConfig:
    """Settings of ``p2p-guard status``.

    Attributes:
        initial_peers: multiaddrs of one or more DHT nodes of the swarm (``/ip4/HOST/tcp/PORT/p2p/PEERID``).
        run_id: the run whose records are read (the peers' ``run_id``).
        depth: rounds read below the swarm's round (the lower median of the presence rounds).
        json: print one JSON object instead of the table (one per line with ``--watch``).
        watch: refresh every this many seconds until Ctrl+C; a refresh whose read times out prints one warning
            line and the next one tries again (None: print once and exit).
        timeout_s: limit for the whole command, in seconds: joining the DHT, reading the records and leaving
            it again (with ``watch``: the join and the first print, then each refresh).
    """

    initial_peers: tuple[str, ...] = ()
    run_id: str = "p2p-guard"
    depth: int = 3
    json: bool = False
    watch: float | None = None
    timeout_s: float = 30.0

    def __post_init__(self) -> None:
        """Check the values.

        Raises:
            ValueError: naming the bad setting and its value.
        """
        if not self.initial_peers:
            raise ValueError("no --initial-peers given (the multiaddr of the bootstrap node or of any peer)")
        check_run_id(self.run_id)  # as a peer checks it: a run id no peer can have finds nothing
        if not 0 <= self.depth <= 100:
            raise ValueError(f"depth must be in [0, 100]; got depth={self.depth}")
        if self.watch is not None and not (math.isfinite(self.watch) and self.watch > 0):
            raise ValueError(f"watch must be finite and > 0 seconds; got watch={self.watch}")
        if not (math.isfinite(self.timeout_s) and self.timeout_s > 0):
            raise ValueError(f"timeout_s must be finite and > 0; got timeout_s={self.timeout_s}")


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register ``status`` on the CLI's subparsers.

    Args:
        subparsers: what ``ArgumentParser.add_subparsers()`` returned.

    Returns:
        The sub-command's parser.
    """
    parser: argparse.ArgumentParser = subparsers.add_parser(
        COMMAND, help="show a running swarm from its DHT records (read-only)",
        description="Join the swarm's DHT as a read-only client and print its peers, their latest commit "
                    "claims, close records, votes and equivocation proofs. Every setting is a flag and a key "
                    "of the [status] table of --config.")
    parser.add_argument("--config", metavar="TOML", help="config file with a [status] table")
    add_config_flags(parser.add_argument_group("settings"), StatusConfig,
                     metavars={"initial_peers": "MULTIADDR", "watch": "SECONDS", "depth": "ROUNDS"})
    parser.set_defaults(func=run)
    return parser


# -- rendering (pure) ----------------------------------------------------------------------------------------------


def _codec_text(codec: str) -> str:
    text = _PRINTABLE.sub("?", codec)
    return text if len(text) <= _MAX_CODEC_CHARS else text[:_MAX_CODEC_CHARS - 1] + "…"


def _cell(value: object) -> str:
    return "-" if value is None else str(value)


def _align(headers: Sequence[str], rows: Sequence[Sequence[str]], right: set[int]) -> list[str]:
    widths = [max([len(h), *(len(r[i]) for r in rows)]) for i, h in enumerate(headers)]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths,
                                                                                                  strict=True)))

    return [line(headers).rstrip(), *(line(r).rstrip() for r in rows)]


def render_table(status: SwarmStatus) -> str:
    """The human-readable view of a snapshot: a summary line, one row per peer, claims, proofs, skipped records.

    Columns: PEER (last 8 characters of the PeerID), ROUND (its presence round, ``-``: no live presence record),
    SHARD (the data shard it claims to train, ``S/N``: shard S of N; ``-``: no valid claim), COMMIT / BASE /
    BASE_HASH / CODEC (its latest commit envelope: the round, the claimed base round and the first 8 hex digits
    of the claimed base hash, the codec), CLOSED (its latest close record: round and, in brackets, the commits in
    its closed set), VOTED / ACC / REJ (its latest votes record: round, senders accepted and rejected), NOTE
    (``banned``: a valid equivocation proof accuses it; ``left``: its signed leave record replaced its presence).
    Below the rows, when a peer is present, one ``data shards:`` line: how many shards the present peers' claims
    cover, which no present peer trains and which several share (:func:`shard_line`).

    Args:
        status: a snapshot from :func:`~p2p_guard.swarm.status.collect_status`.

    Returns:
        The text, one line per line, no trailing newline.
    """
    from p2p_guard.swarm.status import SHORT_HASH_CHARS

    span = (f"rounds read {status.rounds_read[0]}-{status.rounds_read[-1]}" if status.rounds_read
            else "no rounds read")
    lines = [f"run {status.run_id}: {len(status.present)} peer(s) present, swarm round "
             f"{_cell(status.swarm_round)}; {span}"]
    rows = []
    for p in status.peers:
        c, k, v = p.commit, p.close, p.votes
        notes = [n for n, on in (("banned", p.banned), ("left", p.left),
                                  ("not present", p.presence_round is None and not p.left)) if on]
        rows.append([
            p.short_id, _cell(p.presence_round), "-" if p.shard is None else f"{p.shard.shard}/{p.shard.num_shards}",
            _cell(c and c.round), _cell(c and c.base_round), "-" if c is None else c.base_hash[:SHORT_HASH_CHARS],
            "-" if c is None else _codec_text(c.codec),
            "-" if k is None else f"{k.round} ({k.commits})",
            _cell(v and v.round), _cell(v and v.accepted), _cell(v and v.rejected), ", ".join(notes)])
    headers = ["PEER", "ROUND", "SHARD", "COMMIT", "BASE", "BASE_HASH", "CODEC", "CLOSED", "VOTED", "ACC", "REJ",
               "NOTE"]
    lines += _align(headers, rows, right={1, 2, 3, 4, 7, 8, 9, 10}) if rows else [
        f"(no valid records of run {status.run_id!r}: is that the swarm's run_id? Pass it with --run-id)"]
    if status.present:
        lines.append(shard_line(status))
    if status.base_hash_claims:
        claims = "; ".join(f"round {r}: {len(c)} distinct in {sum(c.values())} commit(s)"
                           for r, c in sorted(status.base_hash_claims.items()))
        lines.append(f"base_hash claims: {claims}")
    if status.proofs:
        lines.append(f"equivocation proofs: {len(status.proofs)} (every honest peer bans the accused)")
        lines += [f"  {p.accused[-8:]}  round {p.round}  digests {p.digest_a[:SHORT_HASH_CHARS]} / "
                  f"{p.digest_b[:SHORT_HASH_CHARS]}" for p in status.proofs]
    else:
        lines.append("equivocation proofs: none")
    skipped = ", ".join(f"{kind} {n}" for kind, n in sorted(status.skipped.items()))
    lines.append(f"invalid records skipped: {skipped or 'none'}")
    return "\n".join(lines)


def shard_line(status: SwarmStatus) -> str:
    """The table's ``data shards:`` line: the present peers' shard claims, covered, uncovered and shared.

    E.g. ``data shards: 2 of 3 claimed by the 3 present peers; trained by none: 0; by several: 1 (Lr2NASuq,
    yKSUKPH5)``; ``…; trained by none: 0, 1, … and 7 more`` past ``MAX_LISTED``; ``(N claim(s) for another number
    of shards left out)`` when some present peer cuts the data otherwise; with no claim at all, says so (a peer of
    an older version publishes none).
    """
    cov = status.shards
    present = len(status.present)
    if cov is None:
        return (f"data shards: none of the {present} present peer(s) claims one (a peer of an older version "
                "publishes none)")
    claimers = sum(len(peers) for peers in cov.peers_by_shard.values())
    more = cov.uncovered_count - len(cov.uncovered)
    none = ", ".join(str(s) for s in cov.uncovered) + (f", … and {more} more" if more else "")
    parts = [f"data shards: {len(cov.peers_by_shard)} of {cov.num_shards} claimed by {claimers} of the {present} "
             f"present peer(s)", f"trained by none: {none or '-'}"]
    if cov.shared:
        parts.append("by several: " + ", ".join(f"{s} ({', '.join(p[-8:] for p in peers)})"
                                                for s, peers in cov.shared.items()))
    line = "; ".join(parts)
    if status.shard_other:
        line += f" ({status.shard_other} claim(s) for another number of shards left out)"
    return line


def render_json(status: SwarmStatus) -> str:
    """The snapshot as one line of JSON (``SwarmStatus.to_json``, keys sorted), no trailing newline."""
    return json.dumps(status.to_json(), sort_keys=True)


# -- the command ---------------------------------------------------------------------------------------------------


def run(args: argparse.Namespace) -> int:
    """Check the settings, join the DHT as a client, print the status (repeatedly with ``--watch``).

    Args:
        args: the parsed command line.

    Returns:
        0 after printing (or on Ctrl+C / SIGTERM while watching, or once the reader of a pipe has gone), 1 if the
        DHT could not be joined, 2 on a usage error (one line on stderr).
    """
    from p2p_guard.swarm._deferred import defer_import

    started = time.monotonic()  # --timeout-s bounds the whole command: importing hivemind takes seconds too
    defer_import("scipy.optimize")
    try:
        config = load_config(StatusConfig, args=args, table="status", config_path=getattr(args, "config", None))
        from p2p_guard.swarm.addresses import check_initial_peers  # hivemind's parser, without hivemind

        check_initial_peers(config.initial_peers)
    except ValueError as e:
        print_error(COMMAND, str(e))
        return EXIT_USAGE
    from p2p_guard.swarm.reaper import start_reaper, stop_reaper_if_clean

    reaper = start_reaper()  # our p2pd never outlives us, even after SIGKILL (as for peers and bootstrap nodes)
    try:
        return _run_bounded(_main(config, started=started))
    finally:
        stop_reaper_if_clean(reaper)


CLEANUP_S = 5.0
"""How long the tasks still running when :func:`_main` returns get to end once cancelled, in seconds."""


def _run_bounded(main: Any) -> int:
    """``asyncio.run(main)``, except that the tasks left running get :data:`CLEANUP_S` to end once cancelled.

    ``asyncio.run`` waits for every leftover task without a limit: Ctrl+C while ``status`` was joining the DHT on a
    loaded machine left a hivemind task that never ended, and the command hung (its ``p2pd`` already gone) until a
    second Ctrl+C.
    """
    loop = asyncio.new_event_loop()
    try:
        asyncio.set_event_loop(loop)
        return int(loop.run_until_complete(main))
    finally:
        try:
            pending = [task for task in asyncio.all_tasks(loop) if not task.done()]
            for task in pending:
                task.cancel()
            if pending:
                loop.run_until_complete(asyncio.wait(pending, timeout=CLEANUP_S))
            loop.run_until_complete(loop.shutdown_asyncgens())
            with contextlib.suppress(asyncio.TimeoutError):
                loop.run_until_complete(asyncio.wait_for(loop.shutdown_default_executor(), CLEANUP_S))
        finally:
            asyncio.set_event_loop(None)
            loop.close()


async def _main(config: StatusConfig, *, started: float | None = None) -> int:
    """The command once its settings are checked; ``started`` is when it began (``time.monotonic``; None: now)."""
    from hivemind.p2p import P2PDaemonError

    from p2p_guard.swarm.dht import start_dht
    from p2p_guard.swarm.status import collect_status
    from p2p_guard.swarm.validator import RecordValidator

    stop = asyncio.Event()
    caught: list[int] = []  # the stop signal, for the exit status of a run stopped before it printed anything
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, _stop, stop, caught, sig)
    # One limit for the whole command: start_dht's own steps (p2pd, clock ping, DHT ping) each had theirs, and
    # a frozen bootstrap node (p2pd up, its Python stopped) made `--timeout-s 10` take 22-26 s.
    deadline = loop.time() + config.timeout_s - (0.0 if started is None else time.monotonic() - started)
    peers = ", ".join(config.initial_peers)
    try:
        try:
            dht = await _until(stop, _within(deadline, start_dht(
                identity_path=None, initial_peers=config.initial_peers, host="127.0.0.1", port=0,
                startup_timeout_s=config.timeout_s, record_validators=[RecordValidator([config.run_id])],
                client_mode=True)))
        except (OSError, TimeoutError, ValueError, P2PDaemonError) as e:
            detail = str(e) or (f"no answer from the initial peer(s) {peers} within {config.timeout_s:g} s "
                                "(--timeout-s)" if isinstance(e, TimeoutError) else type(e).__name__)
            print_error(COMMAND, f"cannot join the DHT: {detail}")
            return EXIT_FAILED
        if dht is None:
            return _interrupted(caught)
        printed = False
        try:
            while not stop.is_set():
                try:
                    status = await _until(stop, _within(deadline, collect_status(dht, config.run_id,
                                                                                  depth=config.depth)))
                except TimeoutError:
                    message = (f"the DHT (initial peer(s) {peers}) did not answer a read of run "
                               f"{config.run_id!r}'s records within {config.timeout_s:g} s (--timeout-s)")
                    if config.watch is None:
                        print_error(COMMAND, message)
                        return EXIT_FAILED
                    # --watch: one line, and the next refresh tries again (a busy or restarting node is no end)
                    print_warning(COMMAND, f"{time.strftime('%H:%M:%S')} {message}; trying again in "
                                           f"{config.watch:g} s")
                    status = _TIMED_OUT
                if status is None:
                    break
                if status is not _TIMED_OUT:
                    try:
                        _print(status, config)
                    except BrokenPipeError:  # `status --watch 1 | head -3`: the reader has gone; stop as on Ctrl+C
                        silence_stdout()
                        return 0
                    printed = True
                if config.watch is None:
                    break
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(stop.wait(), config.watch)
                deadline = loop.time() + config.timeout_s  # each refresh has the whole limit
        finally:
            await dht.shutdown()  # local only (a client stores nothing): never cut, so p2pd is always stopped
        return 0 if printed else _interrupted(caught)
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)


async def _within(deadline: float, work: Any) -> Any:
    """``await work``, cancelled at ``deadline`` (the loop's clock), then TimeoutError.

    Raises:
        TimeoutError: ``work`` had not ended by ``deadline`` (it is cancelled and its clean-up awaited).
    """
    return await asyncio.wait_for(work, max(deadline - asyncio.get_running_loop().time(), 0.0))


def _stop(stop: asyncio.Event, caught: list[int], sig: signal.Signals) -> None:
    """SIGINT or SIGTERM: note the first one and set ``stop``."""
    if not caught:
        caught.append(int(sig))
    stop.set()


def _interrupted(caught: list[int]) -> int:
    """The exit status of a run a signal stopped before it printed anything: 128 + the signal (130: Ctrl+C)."""
    return 128 + (caught[0] if caught else signal.SIGINT)


async def _until(stop: asyncio.Event, work: Any) -> Any:
    """``await work``, or None (``work`` cancelled) once ``stop`` is set first."""
    task = asyncio.ensure_future(work)
    stopper = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait({task, stopper}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopper.cancel()
    if task.done():
        return task.result()
    task.cancel()
    with contextlib.suppress(BaseException):
        result = await task
        if result is not None and hasattr(result, "shutdown"):  # a DHT that came up as we stopped
            await result.shutdown()
    return None


def _print(status: SwarmStatus, config: StatusConfig) -> None:
    if config.json:
        print(render_json(status), flush=True)
        return
    text = render_table(status)
    if config.watch is not None:
        clear = "\x1b[H\x1b[2J" if sys.stdout.isatty() else ""
        text = f"{clear}{time.strftime('%H:%M:%S')}  (every {config.watch:g} s; Ctrl+C to stop)\n{text}\n"
    print(text, flush=True)
