"""Checks run before anything heavy starts (no torch, no hivemind unless said), shared by the commands.

Each raises ``ValueError`` with a message naming the setting and the bad value; the commands print it in the
one error format of :mod:`p2p_guard.cli.errors` and exit 2.

Two passes over the names: :func:`check_names` (task, guard and attack names, a built-in task's options, the
task's files present: no torch, a fraction of a second) runs first, so a typo or a missing directory is reported
at once; then :func:`check_plugins` (build the task, importing a ``MODULE:CLASS`` task's module, and the guard and
the attack with their parameters, read the task's data: torch).
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import ipaddress
import os
import re
import socket
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["check_announce_host", "check_identity_file", "check_listen_host", "check_names", "check_output_dir",
           "check_output_file", "check_plugins", "check_port_free", "check_report_with_plots",
           "check_seed_and_threads", "check_task_data", "lock_checkpoint_dir", "lock_identity", "MAX_TORCH_THREADS",
           "nonempty_path"]


def nonempty_path(value: str) -> Path:
    """The argparse type of a path option: an empty path is refused.

    ``Path("")`` is the current directory, so ``--report ""`` was reported as ``--report .: is a directory``.
    """
    if not value.strip():
        raise argparse.ArgumentTypeError("empty path")
    return Path(value)


def check_identity_file(path: str | Path, *, flag: str = "--identity", create_folder: bool = True) -> None:
    """An existing identity file must be a readable Ed25519 key file; a missing one must be creatable.

    Imports ``cryptography`` (a fraction of a second), not torch.

    Args:
        path: the identity file.
        flag: its option, for messages.
        create_folder: whether a missing file's missing folders may be created (a bootstrap node's default
            ``bootstrap/identity.key``); False (a peer): a new key file goes only into an existing folder, so that
            a mistyped folder is an error rather than a new PeerID.

    Raises:
        ValueError: naming the path and what is wrong with it.
    """
    path = Path(path)
    if path.exists():
        if not path.is_file():
            raise ValueError(f"{flag} {path}: not a regular file")
        from p2p_guard.identity import Identity

        try:
            Identity.load(path)
        except PermissionError:
            raise ValueError(f"{flag} {path}: not readable (permission denied)") from None
        except (OSError, ValueError) as e:
            raise ValueError(f"{flag} {e}") from None
        return
    parent = _first_existing(path.parent)
    if not _writable_dir(parent):
        raise ValueError(f"{flag} {path}: cannot be created ({parent} is not a writable directory)")
    if not create_folder and parent != path.parent:
        raise ValueError(f"{flag} {path}: no such directory {path.parent} (a new identity, with a new PeerID, is "
                         f"created only in an existing directory; check the path)")


_HOST_HINTS = {"--host": "this machine's address, or 0.0.0.0 for all", "--announce-host": "the public IP others dial"}


def _ip_literal(host: str, flag: str) -> str:
    """``host`` as an IPv4 or IPv6 literal (a multiaddr's ``/ip4/`` or ``/ip6/`` part: no host names).

    Raises:
        ValueError: naming ``flag`` and the value.
    """
    try:
        return str(ipaddress.ip_address(host))
    except ValueError:
        hint = _HOST_HINTS.get(flag, _HOST_HINTS["--host"])
        raise ValueError(f"{flag} {host}: not an IPv4 or IPv6 address (a host name is not accepted; give "
                         f"{hint})") from None


def check_listen_host(host: str, *, flag: str = "--host") -> None:
    """``host`` must be an IP address of this machine (or a wildcard): a test bind to port 0 there.

    Raises:
        ValueError: on a host name or an address this machine does not have.
    """
    _ip_literal(host, flag)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((host, 0))
        except OSError as e:
            raise ValueError(f"{flag} {host}: cannot listen there ({e.strerror or e}; is it an address of this "
                             "machine?)") from None


def check_announce_host(host: str | None, port: int) -> None:
    """An ``--announce-host`` must be an IP address and needs a fixed ``--port`` (others dial host:port).

    Raises:
        ValueError: on a host name, or ``port == 0`` (a random port cannot be announced in advance).
    """
    if host is None:
        return
    _ip_literal(host, "--announce-host")
    if port == 0:
        raise ValueError(f"--announce-host {host} needs a fixed --port (the router or firewall forwards that "
                         "port; --port 0 picks a random one)")


def check_output_file(path: str | Path | None, *, flag: str, replaced: bool = True) -> None:
    """A file the command will write (``--report``, ``--events``, ``--address-file``) must be creatable there.

    Missing parent directories are fine (they are created); a parent that is a file, an unwritable one, a
    ``path`` that is a directory, or, when the command ``replaced`` the file (written to a temporary file and
    renamed over it: ``--report``, ``--address-file``), one that exists and is not a regular file (a device such
    as ``/dev/full``, a FIFO) is not. A symlink's own folder is checked (``write_report`` writes through it). A
    file written in place (``--events``, ``--state-out``: ``replaced=False``) may be a device.

    Raises:
        ValueError: naming ``flag``, the path and the part in the way.
    """
    if path is None:
        return
    if not str(path).strip():
        raise ValueError(f"{flag}: empty path")
    path = Path(path)
    if path.is_dir():
        raise ValueError(f"{flag} {path}: is a directory, not a file")
    if replaced and path.exists() and not path.is_file():
        raise ValueError(f"{flag} {path}: exists and is not a regular file (a device or a pipe); name a file")
    parent = _first_existing(path.parent)
    if not parent.is_dir():
        raise ValueError(f"{flag} {path}: {parent} is a file, not a directory")
    if not _writable_dir(parent):
        raise ValueError(f"{flag} {path}: cannot be created ({parent} is not a writable directory)")
    if path.exists() and not os.access(path, os.W_OK):
        raise ValueError(f"{flag} {path}: not writable")


MAX_TORCH_THREADS = 1024
"""Most torch threads a command takes (``bench wire`` and ``bench guard``'s ``--threads``): 100,000 crashed torch."""


def check_seed_and_threads(seed: int, threads: int) -> None:
    """A bench's ``--seed`` in ``[0, 2**63 - 1]`` (a run seed's range) and ``--threads`` in ``[1, MAX_TORCH_THREADS]``.

    A negative or huge seed was a traceback in numpy or torch's generators after minutes of work, and
    ``torch.set_num_threads(100000)`` a segmentation fault.

    Raises:
        ValueError: naming the flag and the value.
    """
    from p2p_guard.swarm.config import MAX_SEED

    if not 0 <= seed <= MAX_SEED:
        raise ValueError(f"--seed must be in [0, 2**63 - 1]; got {seed}")
    if not 1 <= threads <= MAX_TORCH_THREADS:
        raise ValueError(f"--threads must be in [1, {MAX_TORCH_THREADS}]; got {threads}")


def check_report_with_plots(path: str | Path | None, *, flag: str) -> None:
    """A bench report whose plots go to the folder of its name without suffix (``docs/wire.md``: ``docs/wire/``).

    :func:`check_output_file`, and the report needs a suffix: without one the plots' folder is the report's own
    path (the plots were written, then the report failed on that folder); that folder must not be a file.

    Raises:
        ValueError: naming ``flag``, the path and the part in the way.
    """
    check_output_file(path, flag=flag)
    if path is None:
        return
    path = Path(path)
    plots = path.with_suffix("")
    if plots == path:
        raise ValueError(f"{flag} {path}: needs a suffix such as .md (the plots go to the folder of the same name "
                         "without suffix)")
    check_output_dir(plots, flag=f"{flag} {path}: its plots' folder")


def check_output_dir(path: str | Path | None, *, flag: str) -> None:
    """A folder the command will write into must be an existing writable directory, or creatable.

    For ``--checkpoint-dir``, ``--snapshot-dir`` and ``--proof-dir``: creatable means that its first existing
    ancestor is a writable directory. An empty path is refused, as :func:`check_output_file` does
    (``peer --checkpoint-dir ""``, an unset shell variable, was taken and silently turned checkpoints off).

    Raises:
        ValueError: naming ``flag``, the path and the part in the way, or ``FLAG: empty path``.
    """
    if path is None:
        return
    if not str(path).strip():
        raise ValueError(f"{flag}: empty path")
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise ValueError(f"{flag} {path}: is a file, not a directory")
    parent = _first_existing(path)
    if not parent.is_dir():
        raise ValueError(f"{flag} {path}: {parent} is a file, not a directory")
    if not _writable_dir(parent):
        raise ValueError(f"{flag} {path}: {parent} is not writable")


def check_replaceable_files(folder: str | Path | None, names: Sequence[str], *, flag: str) -> None:
    """The files a command replaces in ``folder`` (``os.replace``) must not exist as folders.

    A folder named ``checkpoint.pt`` in a peer's ``--checkpoint-dir`` would otherwise stop the peer at its first
    save, after it had trained a round.

    Args:
        folder: the folder (None or missing: nothing to check).
        names: the file names inside it that will be replaced.
        flag: the command-line flag named in the error.

    Raises:
        ValueError: naming ``flag`` and the first path in the way.
    """
    if folder is None:
        return
    for name in names:
        path = Path(folder) / name
        if path.is_dir() and not path.is_symlink():  # rename(2) cannot replace a folder by a file
            raise ValueError(f"{flag} {folder}: {path} is a folder, not a file (it is replaced on every round); "
                             "move it away")


def lock_identity(path: str | Path, *, flag: str = "--identity") -> contextlib.AbstractContextManager[Any]:
    """Take this machine's advisory lock (``flock(2)``) on an existing identity file, for the process's life.

    Peers and the bootstrap node both take it. A second peer started with the same key on this machine would
    otherwise run until its first commit and then be refused as another session of the identity (and its first
    commit could equivocate); a second bootstrap node would share the first's PeerID, and a peer given the
    bootstrap's key said only that it could not reach its --initial-peers. The lock is the
    kernel's: it goes with the process, even after ``kill -9``, and ``p2pd`` does not inherit it. A key file that
    does not exist yet is not locked here: the peer (``StartIdentity.keep``) and the bootstrap node
    (``run_bootstrap``) lock it once they have created it. Peers on other machines are not
    seen; they are caught at their first commit, as before.

    Args:
        path: the identity file.
        flag: its option, for messages.

    Returns:
        A context manager that releases the lock on exit (already held; a no-op one if the file is missing).

    Raises:
        ValueError: another process on this machine holds the lock.
    """
    from p2p_guard.identity.keys import key_in_use, lock_key_file

    try:
        handle = lock_key_file(path)
    except FileNotFoundError:
        return contextlib.nullcontext()
    except BlockingIOError:
        raise ValueError(key_in_use(path, flag)) from None
    except OSError as e:
        raise ValueError(f"{flag} {path}: cannot be opened ({e.strerror})") from None
    return contextlib.nullcontext() if handle is None else handle  # None: a filesystem without flock, no lock


CHECKPOINT_LOCK_NAME = ".lock"
"""The file in a ``--checkpoint-dir`` whose ``flock(2)`` a running peer holds (:func:`lock_checkpoint_dir`)."""


def lock_checkpoint_dir(folder: str | Path | None, *,
                        flag: str = "--checkpoint-dir") -> contextlib.AbstractContextManager[Any]:
    """Take this machine's advisory lock on a peer's checkpoint folder, for the process's life.

    Two peers on one folder (a second volunteer pointed at the first's ``--checkpoint-dir``, with another
    identity) overwrote each other's ``checkpoint.pt`` and ``last_commit`` every round: each resumed or caught up
    from the other's model, and the commit mark that keeps a restarted peer from equivocating was the other
    peer's. The lock is ``flock(2)`` on ``folder/.lock`` (created, with the folder, if missing; left in place
    when the peer ends): it goes with the process, even after ``kill -9``, and ``p2pd`` does not inherit it.

    Args:
        folder: the checkpoint folder; None (no checkpoint) locks nothing.
        flag: its option, for messages.

    Returns:
        A context manager that releases the lock on exit (already held; a no-op one for None or a filesystem
        without ``flock``).

    Raises:
        ValueError: another process on this machine holds the lock, or the folder cannot be created.
    """
    import fcntl

    if folder is None:
        return contextlib.nullcontext()
    path = Path(folder)
    try:
        path.mkdir(parents=True, exist_ok=True)
        handle = open(path / CHECKPOINT_LOCK_NAME, "ab")  # noqa: SIM115 - returned: the caller closes it
    except OSError as e:
        raise ValueError(f"{flag} {folder}: cannot be used ({e.strerror or e})") from None
    try:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.close()
        raise ValueError(f"{flag} {folder}: another peer on this machine is using this checkpoint folder; stop "
                         "it first, or give this one its own --checkpoint-dir") from None
    except OSError:
        handle.close()
        return contextlib.nullcontext()  # a filesystem without flock: no lock there
    return handle


_MOUNTS = Path("/proc/self/mounts")
"""The mount table read by :func:`_on_pseudo_filesystem` (Linux; elsewhere it is missing and nothing is pseudo)."""

_PSEUDO_FILESYSTEMS = frozenset({
    "proc", "sysfs", "cgroup", "cgroup2", "devpts", "securityfs", "debugfs", "tracefs", "configfs", "pstore",
    "bpf", "efivarfs", "fusectl", "binfmt_misc",
})
"""Kernel filesystems where no ordinary file or folder can be created, whatever ``access(2)`` says (root)."""


def _writable_dir(path: Path) -> bool:
    """True if ``path`` is a directory a new file or folder can be created in (checked without creating one).

    ``os.access`` answers yes to root everywhere except on a read-only mount, also in ``/proc`` or ``/sys``,
    where creating fails later; those kernel filesystems are looked up in the mount table.
    """
    return path.is_dir() and os.access(path, os.W_OK | os.X_OK) and not _on_pseudo_filesystem(path)


def _on_pseudo_filesystem(path: Path) -> bool:
    """True if ``path`` lies on a kernel filesystem of :data:`_PSEUDO_FILESYSTEMS` (by its longest mount point)."""
    try:
        lines = _MOUNTS.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return False
    real = Path(os.path.realpath(path))
    best: tuple[int, str] | None = None
    for line in lines:
        fields = line.split()
        if len(fields) < 3:
            continue
        mount_point = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), fields[1])
        if real.is_relative_to(mount_point) and (best is None or len(mount_point) >= best[0]):
            best = (len(mount_point), fields[2])
    return best is not None and best[1] in _PSEUDO_FILESYSTEMS


def _first_existing(path: Path) -> Path:
    """``path`` or its nearest ancestor that exists (the folder a missing path would be created under)."""
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def check_port_free(host: str, port: int) -> None:
    """A fixed TCP port (``port > 0``) must be free to listen on at ``host``.

    Raises:
        ValueError: if the port is taken or the address cannot be bound.
    """
    if port == 0:
        return
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as e:
            if e.errno == errno.EADDRINUSE:
                raise ValueError(f"--port {port}: already in use on {host} (pick another, or 0 for any)") from None
            raise ValueError(f"--host {host} --port {port}: cannot listen there: {e.strerror or e}") from None


def _describe(exc: BaseException) -> str:
    """``TYPE: message`` of an exception a user's task method raised (``sys.exit(N)`` for a SystemExit)."""
    if isinstance(exc, SystemExit):
        return "sys.exit()" if exc.code is None else f"sys.exit({exc.code!r})"
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


def check_task_data(task_spec: str, *, shard: tuple[int, int, str, int] | None = None) -> tuple[tuple[int, ...], ...]:
    """Build the task (its spec: name or ``MODULE:CLASS``, and options) and its model once, and read its data now.

    Imports torch (through the task) and, for ``MODULE:CLASS``, the user's module; call it after the cheap
    checks, so a missing data set, a class that is not a task, or options the model cannot be built with (a
    context longer than the corpus allows, a width that does not fit in memory) fail up front with one line, not
    in every peer (``simulate`` launched such peers again and again; user test, stop 22). The model is built on
    the CPU with seed 0 and dropped.

    Args:
        task_spec: the task spec.
        shard: ``(num_shards, index, partition, seed)``: also cut the training data as that peer does (a swarm of
            more peers than the task has training items: every peer stopped at start, and ``simulate`` launched
            them again and again until its timeout).

    Returns:
        The model's parameter shapes (``training.params.param_shapes``), for the checks that need its size.

    Raises:
        ValueError: on an unknown task, bad options, a module that does not import, a class that is not a
            task, a model that cannot be built (its memory included), missing or malformed data files (the
            message says which package or directory is missing), or data that cannot be cut into ``shard``;
            for a ``MODULE:CLASS`` task also a ``build_model`` or ``shard`` that raises anything (or calls
            ``sys.exit()``), and a ``build_model`` that returns no ``torch.nn.Module``.
    """
    from p2p_guard.tasks import load_task
    from p2p_guard.tasks.registry import parse_task_spec

    task = load_task(task_spec)
    user_task = not parse_task_spec(task_spec).builtin
    check = getattr(task, "check_data", None)
    if callable(check):
        try:
            check()
        except OSError as e:
            raise ValueError(str(e)) from None
    _check_model_fits_memory(task, task_spec)
    try:
        model = task.build_model(0)
    except OSError as e:  # the model's size comes from the data (shakespeare's vocabulary): missing texts
        raise ValueError(f"task {task_spec!r}: {e}") from None
    except (RuntimeError, MemoryError) as e:  # torch's allocator: "DefaultCPUAllocator: can't allocate memory"
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        first = re.sub(r"^\[enforce fail at [^\]]*\]\s*(err == 0\.\s*)?", "", first)  # torch's C++ location
        raise ValueError(f"task {task_spec!r}: its model cannot be built here: {first}") from None
    except (Exception, SystemExit) as e:  # noqa: BLE001 - a user's build_model: anything it raises is a bad task
        if not user_task:
            raise
        raise ValueError(f"task {task_spec!r}: build_model(0) raised {_describe(e)}") from None
    import torch

    if not isinstance(model, torch.nn.Module):  # else a traceback in param_shapes (user test, helper hC)
        raise ValueError(f"task {task_spec!r}: build_model(0) returned a {type(model).__name__}, not a "
                         f"torch.nn.Module (see docs/tasks.md)")
    if shard is not None:
        try:
            task.shard(*shard)
        except ValueError as e:  # partition.split_*: "cannot cut 1437 items into 1700 non-empty shards"
            raise ValueError(f"task {task_spec!r}: {e} (fewer peers, or a task with more data)") from None
        except (Exception, SystemExit) as e:  # noqa: BLE001 - a user's shard(): anything it raises is a bad task
            if not user_task:
                raise
            raise ValueError(f"task {task_spec!r}: shard{shard!r} raised {_describe(e)}") from None
    from p2p_guard.training.params import param_shapes

    return param_shapes(model)


def _check_model_fits_memory(task: Any, task_spec: str) -> None:
    """Refuse a model whose float32 parameters alone exceed this machine's memory, before building it.

    Only for a task that can count its parameters without building the model (``parameter_count()``: the
    built-in ``shakespeare``); the others are built, and torch's allocator error is reported as before.

    Raises:
        ValueError: the model needs more than the machine's total memory, or its data cannot be read.
    """
    count = getattr(task, "parameter_count", None)
    if not callable(count):
        return
    import psutil

    try:
        params = int(count())
    except OSError as e:  # the count needs the vocabulary: missing texts
        raise ValueError(f"task {task_spec!r}: {e}") from None
    total = psutil.virtual_memory().total
    if 4 * params > total:
        gib = 2**30
        raise ValueError(f"task {task_spec!r}: its model cannot be built here: {params:,} parameters need "
                         f"{4 * params / gib:.1f} GiB in float32, more than this machine's {total / gib:.1f} GiB "
                         "of memory")


def check_names(task: str, guard: str, attack: str | None = None) -> None:
    """Fail on an unknown task, guard or attack name, a bad spec syntax, or a task's missing files; no torch.

    Args:
        task: a task spec: a name of ``p2p_guard.tasks.TASK_NAMES`` (exactly: no case folding) or
            ``MODULE:CLASS``, with ``:key=value,...`` options. A built-in task's option names and value types
            are checked here; a ``MODULE:CLASS`` spec only for its syntax (:func:`check_plugins` imports it).
        guard: a guard spec (``NAME[:key=value,...]`` or ``MODULE:CLASS[:...]``).
        attack: an attack spec, or None for no attack.

    Raises:
        ValueError: naming the bad value and the valid choices, or the missing directory or file.
    """
    from p2p_guard.plugin_names import check_attack_name, check_guard_name
    from p2p_guard.tasks.registry import check_task_files, check_task_spec

    check_task_spec(task)
    check_guard_name(guard)
    if attack:
        try:
            check_attack_name(attack)
        except ValueError as e:
            raise ValueError(f"--attack {attack!r} does not load: {e}") from None
    try:
        check_task_files(task)
    except OSError as e:
        raise ValueError(str(e)) from None


def check_plugins(task: str, guard: str, attack: str | None = None, *,
                  shard: tuple[int, int, str, int] | None = None) -> tuple[tuple[int, ...], ...]:
    """Build the guard and the attack once (parameters, ``MODULE:CLASS`` imports) and read the task's data.

    Imports torch: call it after :func:`check_names` and every other cheap check. ``shard``: as for
    :func:`check_task_data`.

    Returns:
        The task model's parameter shapes (:func:`check_task_data`).

    Raises:
        ValueError: on a guard or attack that does not build, or data that is missing or malformed.
    """
    from p2p_guard.guard.registry import check_guard_spec

    check_guard_spec(guard)  # a name, NAME:key=value,... or module:Class (the message names the problem)
    shapes = check_task_data(task, shard=shard)
    if attack:
        check_attack(attack)
    return shapes


def check_attack(attack: str) -> None:
    """Build the attack once (its parameters, a ``MODULE:CLASS`` import). Imports torch.

    Raises:
        ValueError: the spec does not load (the message names it and the cause).
    """
    from p2p_guard.attacks import load_attack

    try:
        load_attack(attack)
    except Exception as e:  # noqa: BLE001 - whatever the user's spec raises is a usage error
        raise ValueError(f"--attack {attack!r} does not load: {e}") from None
