"""The plugin spec grammar shared by attacks (``--attack``) and guards (``--guard``).

Spec grammar::

    spec   := NAME [":" params] | MODULE ":" CLASS [":" params]
    params := key "=" value ("," key "=" value)*

A value is read as a bool (``true`` / ``false``, any case), an int, a float, or else kept as a string; when the
plugin's class is known, :func:`read_params` keeps the text of every parameter its constructor annotates as
text (``str``, ``str | None``, a ``Literal`` of strings), so ``mode=nan`` reaches a ``mode: str`` as ``"nan"``.
``parse_spec("trimmed_mean:f=2", what="guard", builtin_names=...)`` gives ``("trimmed_mean", {"f": 2})``;
``MODULE:CLASS`` is returned as the name ``"MODULE:CLASS"`` and imported with :func:`import_class`.
"""

from __future__ import annotations

import importlib
import inspect
import os
import re
import sys
import types
import typing
from collections.abc import Callable, Collection, Mapping
from typing import Any

__all__ = ["ParamValue", "check_known_params", "construct_plugin", "import_class", "import_user_module",
           "keyword_parameters", "parse_spec", "parse_spec_text", "parse_value", "read_params", "split_params"]

ParamValue = bool | int | float | str

_IDENT = r"[A-Za-z_][A-Za-z0-9_]*"
_NAME = re.compile(_IDENT)
_MODULE = re.compile(rf"{_IDENT}(\.{_IDENT})*")
_INT = re.compile(r"[+-]?\d+")


def parse_spec(spec: str, *, what: str, builtin_names: Collection[str]) -> tuple[str, dict[str, ParamValue]]:
    """Split a plugin spec into its name and its parameters.

    Args:
        spec: ``"name"``, ``"name:key=value,..."``, ``"module:Class"`` or ``"module:Class:key=value,..."``.
        what: the plugin kind for messages (``"attack"``, ``"guard"``).
        builtin_names: the built-in names (a built-in followed by a non-``key=value`` part is an error).

    Returns:
        ``(name, params)``: the built-in name or ``"module:Class"``, and each key's value read as bool, int,
        float or str (:func:`parse_value`; :func:`read_params` reads them by the class's annotations instead).

    Raises:
        ValueError: on bad syntax; the message quotes the spec.
    """
    name, raw = parse_spec_text(spec, what=what, builtin_names=builtin_names)
    return name, {key: parse_value(text) for key, text in raw.items()}


def parse_spec_text(spec: str, *, what: str, builtin_names: Collection[str]) -> tuple[str, dict[str, str]]:
    """:func:`parse_spec`, with each parameter's value text as written (stripped), not yet read.

    Raises:
        ValueError: on bad syntax; the message quotes the spec.
    """
    article = "an" if what[:1] in "aeiou" else "a"
    if not isinstance(spec, str):
        raise ValueError(f"{what} spec must be a string, got {spec!r}")
    parts = spec.strip().split(":")
    if len(parts) == 1 or (len(parts) == 2 and "=" in parts[1]):
        name, params_text = parts[0], (parts[1] if len(parts) == 2 else None)
        if not _NAME.fullmatch(name):
            raise ValueError(f"bad {what} spec {spec!r}: {name!r} is not {article} {what} name")
    elif len(parts) in (2, 3):
        module, cls = parts[0], parts[1]
        if module in builtin_names:
            raise ValueError(f"bad {what} spec {spec!r}: parameters are key=value, got {cls!r}")
        if not _MODULE.fullmatch(module) or not _NAME.fullmatch(cls):
            raise ValueError(f"bad {what} spec {spec!r}: expected NAME[:key=value,...] or MODULE:CLASS[:...]")
        name, params_text = f"{module}:{cls}", (parts[2] if len(parts) == 3 else None)
    else:
        raise ValueError(f"bad {what} spec {spec!r}: too many ':'")
    return name, (split_params(params_text, spec=spec, what=what) if params_text is not None else {})


def split_params(params_text: str, *, spec: str, what: str) -> dict[str, str]:
    """Split ``key=value,key=value`` into its keys and their values' text (stripped, not yet read).

    Args:
        params_text: the part of the spec after the name.
        spec: the whole spec, for messages.
        what: the plugin kind for messages (``"guard"``, ``"task"``).

    Returns:
        Each key's value text, in the order given; :func:`parse_value` reads one.

    Raises:
        ValueError: on an item that is not ``key=value`` or a key given twice; the message quotes the spec.
    """
    params: dict[str, str] = {}
    for item in params_text.split(","):
        key, sep, text = item.partition("=")
        key = key.strip()
        if not sep or not _NAME.fullmatch(key):
            raise ValueError(f"bad {what} spec {spec!r}: parameter {item!r} is not key=value")
        if key in params:
            raise ValueError(f"bad {what} spec {spec!r}: parameter {key!r} given twice")
        params[key] = text.strip()
    return params


def parse_value(text: str) -> ParamValue:
    """Read a parameter value: bool (any case), int, float, else the text itself."""
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    if _INT.fullmatch(text):
        return int(text)
    try:
        return float(text)
    except ValueError:
        return text


def read_params(cls: Callable[..., Any], raw: Mapping[str, str]) -> dict[str, ParamValue]:
    """Read a plugin's parameter texts as its constructor takes them.

    A parameter that ``cls``'s constructor annotates as text (``str``, ``str | None``, ``Optional[str]``, a
    ``Literal`` of strings) keeps its text as written: ``mode=nan``, ``name=1`` or ``flag=true`` reach it as
    ``"nan"``, ``"1"``, ``"true"``. Every other value is read by :func:`parse_value` (bool, int, float, else
    text), including those of a constructor whose annotations cannot be resolved; the constructor judges them.

    Args:
        cls: the plugin class (or callable).
        raw: each key's value text (:func:`parse_spec_text`).

    Returns:
        Each key's value, in the order of ``raw``.
    """
    text_keys = _text_parameters(cls)
    return {key: text if key in text_keys else parse_value(text) for key, text in raw.items()}


def _text_parameters(cls: Callable[..., Any]) -> frozenset[str]:
    """The names of ``cls``'s constructor parameters annotated as text; empty when they cannot be resolved."""
    try:
        parameters = inspect.signature(cls, eval_str=True).parameters.values()
    except Exception:  # noqa: BLE001 - a user's unresolvable annotation (NameError, ...): read values as before
        return frozenset()
    return frozenset(p.name for p in parameters if _is_text(p.annotation))


def _is_text(annotation: Any) -> bool:
    """Whether an annotation admits text and nothing else but None: ``str``, ``str | None``, ``Literal["a"]``."""
    if annotation is str:
        return True
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Literal:
        return bool(args) and all(isinstance(arg, str) for arg in args)
    if origin in (typing.Union, types.UnionType):
        members = [arg for arg in args if arg is not type(None)]
        return bool(members) and all(_is_text(arg) for arg in members)
    return False


def keyword_parameters(cls: Callable[..., Any]) -> list[inspect.Parameter] | None:
    """The parameters of ``cls``'s constructor that a ``key=value`` option can name, in order.

    Returns:
        Its positional-or-keyword and keyword-only parameters; None when it takes ``**kwargs`` or has no
        signature to read (a C class): then only the constructor can judge the options.
    """
    try:
        parameters = list(inspect.signature(cls).parameters.values())
    except (TypeError, ValueError):
        return None
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters):
        return None
    named = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    return [p for p in parameters if p.kind in named]


def check_known_params(cls: Callable[..., Any], keys: Collection[str], *, label: str, name: str) -> None:
    """Refuse parameters that ``cls``'s constructor does not name, listing those it takes.

    Args:
        cls: the plugin class.
        keys: the parameter names given.
        label: how the message starts, e.g. ``"guard 'trimmed_mean:g=2'"``.
        name: the plugin's name for the message (``trimmed_mean``, ``my_mod:MyRule``).

    Raises:
        ValueError: ``"<label>: unknown parameter(s) g; trimmed_mean takes f"`` when a key is not a keyword
            parameter of the constructor; nothing is checked when it takes ``**kwargs`` or has no signature.
    """
    named = keyword_parameters(cls)
    if named is None:
        return
    unknown = sorted(set(keys) - {p.name for p in named})
    if unknown:
        raise ValueError(f"{label}: unknown parameter(s) {', '.join(unknown)}; {name} takes "
                         f"{', '.join(p.name for p in named) or 'none'}")


def import_user_module(module_name: str) -> types.ModuleType:
    """Import a user's plugin module, from ``sys.path`` or else from the current directory.

    ``python -m p2p_guard ...`` puts the current directory on ``sys.path``; the ``p2p-guard`` console script puts
    its own folder there instead. So that ``p2p-guard simulate --task my_tasks:MyTask`` run beside ``my_tasks.py``
    finds it either way, a module not found on ``sys.path`` is looked for once more with the current directory
    appended (last: it never shadows an installed module).

    Raises:
        ModuleNotFoundError: when neither finds it; ImportError: the module calls ``sys.exit()`` on import (which
            would otherwise end the run silently); anything else the module raises on import.
    """
    try:
        return _import_module(module_name)
    except SystemExit as exc:
        call = "sys.exit()" if exc.code is None else f"sys.exit({exc.code!r})"
        raise ImportError(f"it calls {call} on import") from None


def _import_module(module_name: str) -> types.ModuleType:
    """:func:`import_user_module` but for its ``sys.exit()`` check: ``sys.path`` first, then the current folder."""
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        top = module_name.partition(".")[0]
        cwd = os.getcwd()
        if exc.name not in (module_name, top) or cwd in sys.path or "" in sys.path:
            raise
    sys.path.append(cwd)
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError:
        sys.path.remove(cwd)
        raise


def construct_plugin(cls: Callable[..., Any], params: Mapping[str, Any]) -> Any:
    """Call a plugin class (a task, guard rule or attack) with its parameters, turning ``sys.exit()`` into an error.

    A user's constructor that called ``sys.exit(0)`` ended ``p2p-guard simulate --task my_mod:MyTask`` (or
    ``--guard``, ``--attack``) during its up-front checks with exit status 0 and not a word printed, as if the
    run had succeeded; :func:`import_user_module` already reports the same call made on import.

    Args:
        cls: the class (or any callable) to build.
        params: its keyword arguments.

    Returns:
        What ``cls(**params)`` returns.

    Raises:
        RuntimeError: the constructor calls ``sys.exit()``; anything else it raises propagates as raised.
    """
    try:
        return cls(**params)
    except SystemExit as exc:
        call = "sys.exit()" if exc.code is None else f"sys.exit({exc.code!r})"
        name = getattr(cls, "__name__", type(cls).__name__)
        raise RuntimeError(f"{name}() calls {call} in its constructor") from None


def import_class(spec: str, name: str, *, what: str) -> type:
    """Import ``MODULE:CLASS`` (``name``) for the plugin spec ``spec``.

    Raises:
        ValueError: when the module cannot be imported (not found, or it raises or calls ``sys.exit()`` on import)
            or holds no class of that name.
    """
    module_name, _, class_name = name.partition(":")
    try:
        module = import_user_module(module_name)
    except ModuleNotFoundError as exc:
        raise ValueError(f"{what} spec {spec!r}: cannot import module {module_name!r}: {exc}") from exc
    except Exception as exc:  # noqa: BLE001 - whatever a user's module raises on import is a bad spec
        raise ValueError(f"{what} spec {spec!r}: module {module_name!r} does not import: "
                         f"{type(exc).__name__}: {exc}") from None
    cls = getattr(module, class_name, None)
    if not isinstance(cls, type):
        raise ValueError(f"{what} spec {spec!r}: module {module_name!r} has no class {class_name!r}")
    return cls
