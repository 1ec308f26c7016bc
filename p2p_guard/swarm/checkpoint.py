"""A peer's own checkpoint: written atomically every round, verified on load.

Version 2 of the round: every peer owns its model, so a restarted peer (same identity file, after a crash or
SIGKILL) resumes from its own last state and then catches up, instead of asking the swarm for one.

File format (``checkpoint_dir/checkpoint.pt``, ``torch.save`` of a dict of plain tensors and ints)::

    {"format": 1, "run_id": str, "round": int, "numel": int,
     "theta": (d,) float32, "momentum": (d,) float32, "extra": {str: Tensor},
     "digest": SHA-256 hex of the tensors' bytes and the header fields,
     "guard_state": {str: plain values and tensors},       # optional (absent before 2026-12-07)
     "guard_digest": SHA-256 hex of guard_state, run_id and round}

``guard_state`` is what the peer's guard and reputation learned about each sender over the rounds
(``swarm.guard_state``: the semantic guard's direction record and collusion history, the reputation, our
verdicts of the last round not yet folded). It has its own digest, so a damaged or edited ``guard_state`` costs only
that state (:attr:`Checkpoint.state_problem`), not θ; a file without it (written by an earlier version) loads
with ``state`` None.

It is written to a temporary file in the same folder, fsynced, then renamed over the old one (atomic on POSIX),
so a kill at any instant leaves either the previous or the new checkpoint, never half of one. ``torch.load`` runs
with ``weights_only=True``: a tampered file cannot execute code, and a wrong digest is refused.

The checkpoint it replaces is kept as ``checkpoint_dir/checkpoint.prev.pt`` (one round older), so a checkpoint that
was damaged afterwards (a disk error, a truncated copy) costs one round, not the whole training:
:func:`load_resumable` falls back to it. A kill between the two renames leaves only ``checkpoint.prev.pt``.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from p2p_guard.swarm.file_errors import naming

__all__ = ["Checkpoint", "CheckpointError", "OtherModelCheckpoint", "Resumable", "last_committed", "load_checkpoint",
           "load_resumable", "mark_committed", "save_checkpoint"]

logger = logging.getLogger(__name__)

FILE_NAME = "checkpoint.pt"
PREVIOUS_NAME = "checkpoint.prev.pt"
COMMIT_MARK = "last_commit"
FORMAT = 1


def _brief(text: str, limit: int = 120) -> str:
    """The first sentence of an exception's text, cut at a word boundary with ``…`` if longer than ``limit``.

    ``_brief("failed finding central directory. This is an internal error...")`` gives
    ``"failed finding central directory"``.
    """
    text = " ".join(text.split())
    sentence = re.split(r"(?<=[.!?])\s", text, maxsplit=1)[0].rstrip(".")
    if len(sentence) <= limit:
        return sentence
    cut = sentence[:limit].rsplit(" ", 1)[0] if " " in sentence[:limit] else sentence[:limit]
    return cut.rstrip(" ,;:") + "…"


class CheckpointError(ValueError):
    """A checkpoint file exists but is corrupt, for another run, or for another model."""


class OtherModelCheckpoint(CheckpointError):
    """An intact checkpoint of our run (its digest matches) for a model of another size.

    Not a damaged file but a setting that differs from the one it was written with (a mistyped ``--task``):
    :func:`load_resumable` raises it instead of skipping the file, since the peer would otherwise start afresh and
    overwrite both checkpoint files of the real model within two rounds.
    """


@dataclass
class Checkpoint:
    """A peer's resumable state.

    Attributes:
        run_id: the training run.
        round: the next outer round to run.
        theta: ``(d,)`` float32 model parameters.
        momentum: ``(d,)`` float32 outer Nesterov buffer.
        extra: other ``(·)`` tensors to keep (the error-feedback buffer of a lossy codec).
        state: the guard state (``swarm.guard_state.capture``): nested dicts, lists and tuples of str, int, float,
            bool, None and CPU tensors. None: none saved (a file of an earlier version), or refused on load.
        state_problem: on load, why ``state`` was refused (its digest does not match, or it holds a type a
            checkpoint never holds); None otherwise. The caller logs it and starts that state empty.
    """

    run_id: str
    round: int
    theta: torch.Tensor
    momentum: torch.Tensor
    extra: dict[str, torch.Tensor] = field(default_factory=dict)
    state: dict[str, Any] | None = None
    state_problem: str | None = None


def _compact(tensor: torch.Tensor) -> torch.Tensor:
    """``tensor`` detached on the CPU, itself when it is the whole of its storage, else a compact copy.

    ``torch.save`` writes a tensor's whole storage: a view would drag its base along. The copy this avoids in the
    common case was 4 bytes per parameter for each of θ, b and the residual, at the peak of a round.
    """
    flat = tensor.detach().cpu()
    whole = (flat.is_contiguous() and flat.storage_offset() == 0
             and flat.untyped_storage().nbytes() == flat.numel() * flat.element_size())
    return flat if whole else flat.clone()


def _digest(run_id: str, round_: int, tensors: dict[str, torch.Tensor]) -> str:
    """SHA-256 hex of the header fields and each tensor's name and float32 bytes (names sorted).

    The bytes are hashed in place (a uint8 view of the float32 tensor, no ``tobytes`` copy of θ, the momentum
    or a residual: 4 B per parameter each); a tensor of another dtype is converted to float32 first (a copy).
    """
    h = hashlib.sha256(f"{FORMAT}|{run_id}|{round_}".encode())
    for name in sorted(tensors):
        h.update(name.encode() + b"\0")
        flat = tensors[name].detach().to(torch.float32).contiguous().reshape(-1)
        if flat.numel():
            h.update(flat.view(torch.uint8).numpy().data)
    return h.hexdigest()


def _dense_cpu(tensor: torch.Tensor) -> bool:
    """Whether ``tensor`` is a dense (strided) tensor with its data on the CPU (not sparse, not ``meta``)."""
    return tensor.layout == torch.strided and tensor.device.type == "cpu"


class _Unhashable(TypeError):
    """A guard state holds a value of a type :func:`_state_digest` does not take."""


def _state_digest(run_id: str, round_: int, state: object) -> str:
    """SHA-256 hex of ``state`` (a canonical walk: dict keys sorted, tensors by dtype, shape and bytes), run and round.

    Raises:
        _Unhashable: ``state`` holds something other than dict, list, tuple, str, int, float, bool, None or a
            dense CPU Tensor (``torch.load(weights_only=True)`` also reads sparse and meta tensors back, whose bytes
            cannot be hashed).
    """
    h = hashlib.sha256(f"{FORMAT}|{run_id}|{round_}|guard_state".encode())

    def walk(value: object) -> None:
        if isinstance(value, torch.Tensor):
            if not _dense_cpu(value):
                raise _Unhashable("a tensor that is not a dense CPU one")
            flat = value.detach().cpu().contiguous().reshape(-1)
            h.update(f"T{flat.dtype}{tuple(value.shape)}".encode())
            if flat.numel():
                h.update(flat.view(torch.uint8).numpy().data)  # no copy of a large history
        elif isinstance(value, dict):
            if not all(isinstance(k, str) for k in value):
                raise _Unhashable("a mapping with a key that is not a str")
            h.update(f"D{len(value)}".encode())
            for key in sorted(value):
                h.update(key.encode("utf-8", "surrogatepass") + b"\0")
                walk(value[key])
        elif isinstance(value, (list, tuple)):
            h.update(f"L{len(value)}".encode())
            for item in value:
                walk(item)
        elif value is None or isinstance(value, (bool, int, float, str)):
            h.update(f"{type(value).__name__}:{value!r}".encode("utf-8", "surrogatepass") + b"\0")
        else:
            raise _Unhashable(f"a value of type {type(value).__name__}")

    walk(state)
    return h.hexdigest()


def save_checkpoint(folder: str | Path, ckpt: Checkpoint) -> Path:
    """Write ``ckpt`` atomically to ``folder/checkpoint.pt`` (the folder is created).

    The checkpoint it replaces, if any, becomes ``checkpoint.prev.pt`` (the fallback of :func:`load_resumable`).
    The tensors are written from their own memory, not copied (a view of a larger storage is copied, so that the
    file holds its elements only): they must not be changed in place until it returns (the peer passes θ and
    b, which are replaced, never changed, and a copy of the error-feedback residual).

    Returns:
        The checkpoint's path.

    Raises:
        OSError: if the folder cannot be written; one that names no file (a full disk) is raised naming
            ``checkpoint.pt`` (``swarm.file_errors.naming``). The temporary file is removed.
        TypeError: ``ckpt.state`` holds a value a checkpoint does not take (a local bug).
    """
    path = Path(folder)
    path.mkdir(parents=True, exist_ok=True)
    tensors = {"theta": ckpt.theta, "momentum": ckpt.momentum, **{f"extra.{k}": v for k, v in ckpt.extra.items()}}
    data = {"format": FORMAT, "run_id": ckpt.run_id, "round": int(ckpt.round), "numel": int(ckpt.theta.numel()),
            "theta": _compact(ckpt.theta), "momentum": _compact(ckpt.momentum),
            "extra": {k: _compact(v) for k, v in ckpt.extra.items()},
            "digest": _digest(ckpt.run_id, ckpt.round, tensors)}
    if ckpt.state is not None:
        data["guard_state"] = ckpt.state
        data["guard_digest"] = _state_digest(ckpt.run_id, ckpt.round, ckpt.state)
    fd, tmp = tempfile.mkstemp(prefix=".checkpoint-", dir=path)
    try:
        with naming(path / FILE_NAME), os.fdopen(fd, "wb") as fh:
            torch.save(data, fh)
            fh.flush()
            os.fsync(fh.fileno())
        if (path / FILE_NAME).exists():
            os.replace(path / FILE_NAME, path / PREVIOUS_NAME)
        os.replace(tmp, path / FILE_NAME)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return path / FILE_NAME


def load_checkpoint(folder: str | Path, *, run_id: str, numel: int) -> Checkpoint | None:
    """Load and verify ``folder/checkpoint.pt``.

    Args:
        folder: the checkpoint folder.
        run_id: the run we are in; a checkpoint of another run is refused.
        numel: d of our model; a checkpoint of another model is refused.

    Returns:
        The checkpoint, or None if there is no file.

    Raises:
        CheckpointError: the file is unreadable, its digest does not match, or it is for another run or model.
    """
    return _load_file(Path(folder) / FILE_NAME, run_id=run_id, numel=numel)


@dataclass
class Resumable:
    """What :func:`load_resumable` found.

    Attributes:
        checkpoint: the state to resume from (None: none usable, start from the initial model).
        problems: one line per checkpoint file refused (path and why), newest first.
        previous: True when ``checkpoint`` is ``checkpoint.prev.pt`` because ``checkpoint.pt`` was refused.
    """

    checkpoint: Checkpoint | None
    problems: list[str] = field(default_factory=list)
    previous: bool = False


def load_resumable(folder: str | Path, *, run_id: str, numel: int) -> Resumable:
    """Our latest usable checkpoint: ``checkpoint.pt``, else (missing or refused) ``checkpoint.prev.pt``.

    A damaged file or one of another run is skipped: each refused one is a line in ``problems``.

    Args:
        folder: the checkpoint folder.
        run_id: the run we are in; a checkpoint of another run is refused.
        numel: d of our model.

    Raises:
        OtherModelCheckpoint: an intact checkpoint of this run is for a model of another size (a ``--task`` other
            than the one it was written with); nothing is skipped, so that nothing overwrites it.
    """
    problems: list[str] = []
    for name in (FILE_NAME, PREVIOUS_NAME):
        try:
            ckpt = _load_file(Path(folder) / name, run_id=run_id, numel=numel)
        except OtherModelCheckpoint:
            raise
        except CheckpointError as e:
            problems.append(str(e))
            continue
        if ckpt is not None:
            return Resumable(ckpt, problems, previous=name == PREVIOUS_NAME)
    return Resumable(None, problems)


def _load_file(path: Path, *, run_id: str, numel: int) -> Checkpoint | None:
    """Load and verify one checkpoint file (:func:`load_checkpoint`); None if it does not exist."""
    if not path.exists():
        return None
    try:
        data = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # noqa: BLE001 - any unpickling failure is a corrupt file
        raise CheckpointError(f"{path}: unreadable checkpoint ({type(e).__name__}: {_brief(str(e))})") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise CheckpointError(f"{path}: not a p2p_guard checkpoint of format {FORMAT}")
    try:
        theta, momentum, extra = data["theta"], data["momentum"], dict(data["extra"])
        ckpt_run, round_ = str(data["run_id"]), int(data["round"])
        digest = str(data["digest"])
    except (KeyError, TypeError, ValueError) as e:
        raise CheckpointError(f"{path}: missing or malformed field ({e})") from None
    if ckpt_run != run_id:
        raise CheckpointError(f"{path}: checkpoint of run {ckpt_run!r}, not {run_id!r}")
    if not all(isinstance(t, torch.Tensor) and _dense_cpu(t) for t in (theta, momentum, *extra.values())):
        raise CheckpointError(f"{path}: malformed tensors")  # a sparse or meta one: its digest cannot be taken
    tensors = {"theta": theta, "momentum": momentum, **{f"extra.{k}": v for k, v in extra.items()}}
    if _digest(ckpt_run, round_, tensors) != digest:
        raise CheckpointError(f"{path}: digest mismatch (corrupt or edited checkpoint)")
    if theta.shape != (numel,) or momentum.shape != (numel,):  # intact (digest checked): another --task
        raise OtherModelCheckpoint(f"{path}: checkpoint of a model with {theta.numel()} parameters, ours has "
                                   f"{numel}: start with the --task it was written with, or give another "
                                   "--checkpoint-dir (the checkpoint is left as it is)")
    if not (torch.isfinite(theta).all() and torch.isfinite(momentum).all()):
        raise CheckpointError(f"{path}: non-finite values")
    state, problem = _guard_state(data, ckpt_run, round_)
    return Checkpoint(ckpt_run, round_, theta.to(torch.float32), momentum.to(torch.float32), extra, state, problem)


def _guard_state(data: dict[str, Any], run_id: str, round_: int) -> tuple[dict[str, Any] | None, str | None]:
    """The checkpoint's verified ``guard_state`` and None, or None and why it was refused (None, None: absent)."""
    if "guard_state" not in data:
        return None, None
    state = data["guard_state"]
    if not isinstance(state, dict):
        return None, f"guard state is a {type(state).__name__}, not a mapping"
    try:
        digest = _state_digest(run_id, round_, state)
    except _Unhashable as e:
        return None, f"guard state holds {e}"
    if digest != data.get("guard_digest"):
        return None, "guard state digest mismatch (corrupt or edited)"
    return state, None


def mark_committed(folder: str | Path, round_: int) -> None:
    """Record, durably and before the commit is stored, that we sign an envelope for ``round_``.

    A peer killed after committing round r but before its round-r checkpoint would otherwise commit a second,
    different envelope for r on restart: an equivocation, and a ban by every honest peer.

    Raises:
        OSError: if the folder cannot be written (naming ``last_commit`` when the error named no file); the
            temporary file is removed.
    """
    path = Path(folder)
    path.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".commit-", dir=path)
    try:
        with naming(path / COMMIT_MARK), os.fdopen(fd, "w") as fh:
            fh.write(str(int(round_)))
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path / COMMIT_MARK)
    except BaseException:  # a full disk left a temporary file behind every time
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def last_committed(folder: str | Path | None) -> int | None:
    """The last round :func:`mark_committed` recorded in ``folder``, None if none (or unreadable)."""
    if folder is None:
        return None
    try:
        return int((Path(folder) / COMMIT_MARK).read_text().strip())
    except (OSError, ValueError):
        return None
