"""Built-in tasks by name.

``load_task("digits")``, ``load_task("fashion-mnist", data_dir="/data/fmnist")`` or
``load_task("shakespeare", d_model=128)`` returns a task instance. A task's
module is imported only when the task is loaded, and its data is read on first use, so importing this module
and listing :data:`TASK_NAMES` is free.
"""

from __future__ import annotations

import importlib
import logging
from typing import Any

from p2p_guard.tasks.base import Task

__all__ = ["TASK_NAMES", "load_task"]

logger = logging.getLogger(__name__)

_BUILTIN: dict[str, tuple[str, str]] = {
    "digits": ("p2p_guard.tasks.digits", "DigitsTask"),
    "fashion-mnist": ("p2p_guard.tasks.fashion_mnist", "FashionMnistTask"),
    "shakespeare": ("p2p_guard.tasks.shakespeare", "ShakespeareTask"),
}

TASK_NAMES: tuple[str, ...] = tuple(sorted(_BUILTIN))
"""Names :func:`load_task` knows."""


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
