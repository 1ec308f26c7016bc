"""A user's task (``--task MODULE:CLASS``) whose failures are named: :class:`GuardedTask` and :class:`TaskFailed`.

A peer calls the task's methods deep in its round (``sample_batch`` and ``loss`` in the inner phase's thread,
``evaluate`` in the round's report). When a user's method raised there, the peer stopped with a raw traceback
through asyncio and the inner loop, which names neither the task nor the method. :func:`guard_user_task` wraps a
``MODULE:CLASS`` task so that anything one of its methods raises comes out as one :class:`TaskFailed`, whose
message names the spec, the class, the method and the exception; the user's traceback stays attached as its
``__cause__`` (the peer logs it at DEBUG). Built-in tasks are returned as they are: their failures are local bugs.

Two more ways out of a user's method are failures of the task too: ``sys.exit(...)`` (a ``SystemExit`` raised in the
inner phase's thread ended the whole process through ``asyncio.run``, silently, with no leave record; even
``sys.exit(0)``, since the peer stops in the middle of its rounds: its message says that training ended early and
that this is a failure, so that a requested exit status 0 is not a puzzling 1), and a
``KeyboardInterrupt`` raised outside the main thread (a real Ctrl+C only ever reaches the main thread; a peer
turns it into a clean stop before any task method runs). A ``loss`` must return a scalar tensor: anything else
(a Python float, a tensor of shape ``(3,)``, a tensor cut from the autograd graph) failed later in
``loss.backward()`` with a traceback that named neither the task nor the method. A *finite* loss is not checked
here: a NaN or infinite loss is a training event, not a bug (``training.inner.run_inner_steps`` skips the step).

No torch at import (the hints are only for the type checker).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    import torch
    from torch import Tensor, nn

    from p2p_guard.tasks.base import Batch, HParams, Metrics, Shard, Task, TaskKind

__all__ = ["GuardedTask", "TaskFailed", "guard_user_task"]

_T = TypeVar("_T")


class TaskFailed(RuntimeError):
    """A method of a user's task failed: ``task 'SPEC': CLASS.METHOD raised TYPE: MESSAGE``.

    Also ``CLASS.METHOD called sys.exit(CODE)`` (for ``sys.exit(0)`` or ``sys.exit()``: ``..., training ended
    early, and that is a failure (...)``), and for a ``loss`` that is no scalar tensor
    ``CLASS.loss returned WHAT, not a scalar tensor`` (``error`` is then a ``TypeError`` saying so).

    Attributes:
        spec: the task spec (``my_pkg.tasks:MyTask:width=64``).
        class_name: the task's class name.
        method: the method that raised (``loss``).
        error: what it raised (also the exception's ``__cause__``).
    """

    def __init__(self, spec: str, class_name: str, method: str, error: BaseException) -> None:
        """Name the spec, the class, the method and the exception in one line."""
        super().__init__(f"task {spec!r}: {class_name}.{method} {_describe(error)}")
        self.spec = spec
        self.class_name = class_name
        self.method = method
        self.error = error


class _BadLoss(TypeError):
    """What a ``loss`` returned that is no scalar tensor (the message says what it was)."""


def _describe(error: BaseException) -> str:
    """``raised TYPE: MESSAGE``, ``called sys.exit(CODE)``, or for a bad loss ``returned WHAT``."""
    if isinstance(error, SystemExit):
        if error.code is None or error.code == 0:  # a request to end with success, which a task cannot make
            return (f"called sys.exit({'' if error.code is None else '0'}): training ended early, and that is a "
                    f"failure (a task method cannot end a peer's training with success; set --rounds, or stop "
                    f"the peer with Ctrl+C or SIGTERM)")
        return f"called sys.exit({error.code!r})"
    if isinstance(error, _BadLoss):
        return str(error)
    return f"raised {type(error).__name__}: {error}" if str(error) else f"raised {type(error).__name__}"


def _check_loss(loss: object) -> None:
    """Raise :class:`_BadLoss` unless ``loss`` is a one-element floating tensor (with autograd when it is on)."""
    import torch

    if not isinstance(loss, torch.Tensor):
        shown = repr(loss)
        shown = shown if len(shown) <= 40 else shown[:39] + "…"
        raise _BadLoss(f"returned a {type(loss).__name__} ({shown}), not a scalar tensor")
    if loss.numel() != 1:
        raise _BadLoss(f"returned a tensor of shape {list(loss.shape)}, not a scalar tensor (reduce it, e.g. "
                       f".mean())")
    if not loss.is_floating_point():
        raise _BadLoss(f"returned a {loss.dtype} tensor, not a floating-point scalar")
    if torch.is_grad_enabled() and not loss.requires_grad:
        raise _BadLoss("returned a tensor without autograd (computed under no_grad, or detached), so nothing "
                       "can be trained from it")


class GuardedTask:
    """A user's task whose six methods raise :class:`TaskFailed` for anything the user's code raises.

    The four attributes (``name``, ``kind``, ``num_classes``, ``default_hparams``) are read from the wrapped task
    on each access; the methods pass their arguments and results through unchanged. ``sys.exit(...)`` in a
    method is a :class:`TaskFailed` too, and so is a ``KeyboardInterrupt`` raised outside the main thread (a real
    Ctrl+C only reaches the main thread, where it is left alone: a stop request stays one). ``loss`` also fails
    when it returns anything but a one-element floating tensor (with autograd, where autograd is on).
    """

    def __init__(self, task: Task, spec: str) -> None:
        """Wrap ``task``, built from ``spec``."""
        self.task = task
        self.spec = spec

    def __repr__(self) -> str:
        """``GuardedTask(<the wrapped task's repr>)``."""
        return f"GuardedTask({self.task!r})"

    def _call(self, method: str, call: Callable[[], _T]) -> _T:
        try:
            return call()
        except KeyboardInterrupt as e:
            if threading.current_thread() is threading.main_thread():
                raise  # may be a real Ctrl+C
            raise TaskFailed(self.spec, type(self.task).__name__, method, e) from e
        except (Exception, SystemExit) as e:
            raise TaskFailed(self.spec, type(self.task).__name__, method, e) from e

    @property
    def name(self) -> str:
        """The wrapped task's ``name``."""
        return self.task.name

    @property
    def kind(self) -> TaskKind:
        """The wrapped task's ``kind``."""
        return self.task.kind

    @property
    def num_classes(self) -> int:
        """The wrapped task's ``num_classes``."""
        return self.task.num_classes

    @property
    def default_hparams(self) -> HParams:
        """The wrapped task's ``default_hparams``."""
        return self.task.default_hparams

    def build_model(self, seed: int) -> nn.Module:
        """The wrapped ``build_model(seed)``.

        Raises:
            TaskFailed: it raised.
        """
        return self._call("build_model", lambda: self.task.build_model(seed))

    def shard(self, num_shards: int, index: int, partition: str, seed: int) -> Shard:
        """The wrapped ``shard(num_shards, index, partition, seed)``.

        Raises:
            TaskFailed: it raised.
        """
        return self._call("shard", lambda: self.task.shard(num_shards, index, partition, seed))

    def sample_batch(self, shard: Shard, batch_size: int, generator: torch.Generator) -> Batch:
        """The wrapped ``sample_batch(shard, batch_size, generator)``.

        Raises:
            TaskFailed: it raised.
        """
        return self._call("sample_batch", lambda: self.task.sample_batch(shard, batch_size, generator))

    def holdout_batch(self, shard: Shard, batch_size: int, generator: torch.Generator) -> Batch:
        """The wrapped ``holdout_batch(shard, batch_size, generator)``.

        Raises:
            TaskFailed: it raised.
        """
        return self._call("holdout_batch", lambda: self.task.holdout_batch(shard, batch_size, generator))

    def loss(self, model: nn.Module, x: Tensor, y: Tensor) -> Tensor:
        """The wrapped ``loss(model, x, y)``, checked: a one-element floating tensor (with autograd, where it is on).

        Raises:
            TaskFailed: it raised, or returned anything else (a float, a tensor of shape ``(3,)``, ...).
        """
        def checked() -> Tensor:
            loss = self.task.loss(model, x, y)
            _check_loss(loss)
            return loss

        return self._call("loss", checked)

    def evaluate(self, model: nn.Module, device: torch.device | str = "cpu") -> Metrics:
        """The wrapped ``evaluate(model, device)``.

        Raises:
            TaskFailed: it raised.
        """
        return self._call("evaluate", lambda: self.task.evaluate(model, device))


def guard_user_task(task: Task, spec: str) -> Task:
    """``task`` wrapped in a :class:`GuardedTask` when ``spec`` names a user's ``MODULE:CLASS``, else ``task``.

    Args:
        task: the task :func:`~p2p_guard.tasks.registry.load_task` built from ``spec``.
        spec: its spec.

    Returns:
        A :class:`~p2p_guard.tasks.base.Task`.
    """
    from p2p_guard.tasks.registry import parse_task_spec

    return task if parse_task_spec(spec).builtin else GuardedTask(task, spec)
