"""A user's task (``--task MODULE:CLASS``) whose failures are named: :class:`GuardedTask` and :class:`TaskFailed`.

A peer calls the task's methods deep in its round (``sample_batch`` and ``loss`` in the inner phase's thread,
``evaluate`` in the round's report). When a user's method raised there, the peer stopped with a raw traceback
through asyncio and the inner loop, which names neither the task nor the method. :func:`guard_user_task` wraps a
``MODULE:CLASS`` task so that anything one of its methods raises comes out as one :class:`TaskFailed`, whose
message names the spec, the class, the method and the exception; the user's traceback stays attached as its
``__cause__`` (the peer logs it at DEBUG). Built-in tasks are returned as they are: their failures are local bugs.

Two more ways out of a user's method are failures of the task too: ``sys.exit(...)`` (a ``SystemExit`` raised in the
inner phase's thread ended the whole process through ``asyncio.run``, silently, with no leave record), and a
``KeyboardInterrupt`` raised outside the main thread (a real Ctrl+C only ever reaches the main thread; a peer
turns it into a clean stop before any task method runs).

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

    Also ``CLASS.METHOD called sys.exit(CODE)``.

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


def _describe(error: BaseException) -> str:
    """``raised TYPE: MESSAGE``, or ``called sys.exit(CODE)``."""
    if isinstance(error, SystemExit):
        return "called sys.exit()" if error.code is None else f"called sys.exit({error.code!r})"
    return f"raised {type(error).__name__}: {error}" if str(error) else f"raised {type(error).__name__}"


class GuardedTask:
    """A user's task whose six methods raise :class:`TaskFailed` for anything the user's code raises.

    The four attributes (``name``, ``kind``, ``num_classes``, ``default_hparams``) are read from the wrapped task
    on each access; the methods pass their arguments and results through unchanged. ``sys.exit(...)`` in a
    method is a :class:`TaskFailed` too, and so is a ``KeyboardInterrupt`` raised outside the main thread (a real
    Ctrl+C only reaches the main thread, where it is left alone: a stop request stays one).
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
        """The wrapped ``loss(model, x, y)``.

        Raises:
            TaskFailed: it raised.
        """
        return self._call("loss", lambda: self.task.loss(model, x, y))

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
