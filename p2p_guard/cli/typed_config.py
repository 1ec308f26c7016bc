"""Command-line flags, TOML loading and type checks, generated from a settings dataclass.

One dataclass (``PeerConfig``, ``SimulationConfig``, ``BootstrapConfig``) is the single description of a
command's settings. From it this module derives, with no per-field code:

- one flag per field: ``--field-name`` (underscores become dashes), its type from the annotation, its help
  text from the field's entry in the class docstring's ``Attributes:`` section, followed by the real default
  (shown once);
- the TOML table of a ``--config`` file: every field is also a key; an unknown key is an error;
- the type check of every value (a TOML string where a number belongs, a bool for an int, ...), before the
  dataclass's own range checks in ``__post_init__``.

Precedence: a flag given on the command line overrides the TOML file, which overrides the field's default.
Flags are registered with ``default=argparse.SUPPRESS``, so only the flags actually given reach the namespace.

Annotation to flag:

==========================  ==============================================================
``bool``                    ``--x`` / ``--no-x`` (``argparse.BooleanOptionalAction``)
``int``, ``float``, ``str``  one value of that type
``pathlib.Path``            one path
``Literal[...]``, ``Enum``  one of the choices
``tuple[X, ...]``           one or more values (``nargs="+"``)
``X | None``                as ``X`` (``None`` is the "not set" default; it cannot be given)
anything else               one JSON value (``--x '{"a": 1}'``), type-checked like a TOML value
==========================  ==============================================================

This is a dataclass-driven ``argparse`` rather than pydantic-settings or tyro: the settings already are
frozen stdlib dataclasses with their own checks, the CLI must start in well under a second (before torch
and hivemind are imported), and neither library is a dependency today.
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import enum
import inspect
import json
import math
import re
import types
import typing
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

from p2p_guard.cli.config_files import read_table

__all__ = [
    "add_config_flags",
    "field_docs",
    "flag_name",
    "given_flags",
    "load_config",
    "plain_text",
    "type_check",
]

T = TypeVar("T")

_SECTION = re.compile(r"^(\s*)Attributes:\s*$")
_ENTRY = re.compile(r"^(\s*)([A-Za-z_][A-Za-z0-9_]*)(?:\s*\([^)]*\))?:\s*(.*)$")
_ROLE = re.compile(r":(?:[a-z]+:)?[a-z]+:`([^`]*)`")
"""A Sphinx cross-reference such as ``:func:`x``` or ``:py:class:`~a.B```; group 1 is its target."""


def plain_text(text: str) -> str:
    """``text`` of a docstring as plain help text: Sphinx roles become their names, double backticks go.

    ``:func:`split_attack_mix``` gives ``split_attack_mix``, ``:class:`~a.b.Guard``` gives ``Guard`` (the
    ``~`` form shows the last part, as Sphinx does) and ``:func:`the mix <split_attack_mix>``` gives
    ``the mix``. Whitespace is collapsed.
    """

    def name(match: re.Match[str]) -> str:
        target = match.group(1).strip()
        titled = re.fullmatch(r"(.*?)\s*<[^>]*>", target)
        if titled:
            return titled.group(1)
        return target[1:].rsplit(".", 1)[-1] if target.startswith("~") else target.lstrip("!")

    return re.sub(r"\s+", " ", _ROLE.sub(name, text).replace("``", "")).strip()


def flag_name(field: str) -> str:
    """The command-line flag of a settings field: ``peer_index`` -> ``--peer-index``."""
    return "--" + field.replace("_", "-")


def field_docs(cls: type) -> dict[str, str]:
    """Each field's entry in the ``Attributes:`` section of ``cls``'s Google-style docstring.

    An entry starts with ``name: text`` at the section's item indentation; deeper-indented lines continue it.
    The text is plain (:func:`plain_text`): Sphinx roles become their names, RST double backticks are dropped
    and whitespace is collapsed.

    Args:
        cls: a class with a docstring.

    Returns:
        ``{field name: one-line text}``, in docstring order.
    """
    lines = inspect.cleandoc(cls.__doc__ or "").splitlines()
    docs: dict[str, list[str]] = {}
    section_indent: int | None = None
    item_indent: int | None = None
    current: list[str] | None = None
    for line in lines:
        if section_indent is None:
            match = _SECTION.match(line)
            if match:
                section_indent = len(match.group(1))
            continue
        if not line.strip():
            current = None
            continue
        indent = len(line) - len(line.lstrip())
        if indent <= section_indent:
            break  # the next section (Examples:, Raises:, ...) or the end of the docstring
        entry = _ENTRY.match(line)
        if entry and (item_indent is None or indent == item_indent):
            item_indent = indent
            current = docs.setdefault(entry.group(2), [])
            current.append(entry.group(3))
        elif current is not None:
            current.append(line.strip())
    return {name: plain_text(" ".join(parts)) for name, parts in docs.items()}


def _strip_optional(hint: Any) -> tuple[Any, bool]:
    """``(X, True)`` for ``X | None`` / ``Optional[X]``, else ``(hint, False)``."""
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        if len(args) < len(typing.get_args(hint)):
            return (args[0] if len(args) == 1 else typing.Union[tuple(args)]), True  # noqa: UP007
    return hint, False


def _format_default(name: str, value: Any) -> str:
    """The default as the help shows it."""
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, enum.Enum):
        return str(value.value)
    if isinstance(value, float):
        return f"{value:.6g}"
    if isinstance(value, int) and "bytes" in name:
        for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
            if value >= size and value % size == 0:
                return f"{value} = {value // size} {unit}"
        return str(value)
    if isinstance(value, (tuple, list)):
        return " ".join(str(v) for v in value) if value else "none"
    if isinstance(value, Mapping):
        return json.dumps(dict(value)) if value else "none"
    return str(value)


def _json_value(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise argparse.ArgumentTypeError(f"not a JSON value: {text!r} ({e.msg})") from e


def _scalar_options(hint: Any) -> dict[str, Any] | None:
    """The ``argparse`` options for one value of type ``hint``; None if it has no plain flag form."""
    if hint is int:
        return {"type": int, "metavar": "N"}
    if hint is float:
        return {"type": float, "metavar": "X"}
    if hint is str:
        return {"type": str}
    if hint is Path:
        return {"type": Path, "metavar": "PATH"}
    if typing.get_origin(hint) is typing.Literal:
        choices = typing.get_args(hint)
        return {"type": type(choices[0]), "choices": choices}
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return {"type": hint, "choices": list(hint), "metavar": "{" + ",".join(str(m.value) for m in hint) + "}"}
    return None


def _flag_options(name: str, hint: Any) -> dict[str, Any]:
    """The ``argparse.add_argument`` options for a field of type ``hint``."""
    hint, _ = _strip_optional(hint)
    if hint is bool:
        return {"action": argparse.BooleanOptionalAction}
    origin = typing.get_origin(hint)
    if origin in (tuple, list, frozenset, set):
        args = typing.get_args(hint)
        item = args[0] if args else str
        scalar = _scalar_options(item)
        if scalar is not None and (origin is not tuple or len(args) == 2 and args[1] is Ellipsis):
            return {**scalar, "nargs": "+"}
    scalar = _scalar_options(hint)
    if scalar is not None:
        return scalar
    return {"type": _json_value, "metavar": "JSON"}


def add_config_flags(
    parser: argparse.ArgumentParser | argparse._ArgumentGroup,
    cls: type,
    *,
    metavars: Mapping[str, str] | None = None,
    skip: tuple[str, ...] = (),
) -> None:
    """Add one flag per field of the dataclass ``cls`` (see the module docstring for the mapping).

    Args:
        parser: the parser (or argument group) to add to.
        cls: a dataclass whose fields all have defaults; its docstring's ``Attributes:`` give the help.
        metavars: cosmetic metavar per field name (``{"initial_peers": "MULTIADDR"}``); optional.
        skip: field names that get no flag.

    Raises:
        TypeError: if ``cls`` is not a dataclass.
    """
    if not dataclasses.is_dataclass(cls):
        raise TypeError(f"{cls!r} is not a dataclass")
    hints = typing.get_type_hints(cls)
    docs = field_docs(cls)
    for field in dataclasses.fields(cls):
        if field.name in skip or not field.init:
            continue
        options = _flag_options(field.name, hints[field.name])
        if metavars and field.name in metavars and "action" not in options:
            options["metavar"] = metavars[field.name]
        doc = docs.get(field.name, "").rstrip(".")
        default = _default_of(field)
        if default is None and "None:" in doc:
            help_text = doc  # the doc says what unset means: that is the default, shown once
        elif doc:
            help_text = f"{doc} (default: {_format_default(field.name, default)})"
        else:
            help_text = f"default: {_format_default(field.name, default)}"
        parser.add_argument(flag_name(field.name), dest=field.name, default=argparse.SUPPRESS,
                            help=help_text.replace("%", "%%"), **options)


def _default_of(field: dataclasses.Field[Any]) -> Any:
    if field.default is not dataclasses.MISSING:
        return field.default
    if field.default_factory is not dataclasses.MISSING:
        return field.default_factory()
    return None


def given_flags(args: argparse.Namespace, cls: type) -> dict[str, Any]:
    """The fields of ``cls`` that were given as flags (flags are registered with ``default=SUPPRESS``)."""
    return {f.name: getattr(args, f.name) for f in dataclasses.fields(cls) if hasattr(args, f.name)}


def _type_name(hint: Any) -> str:
    hint, optional = _strip_optional(hint)
    origin = typing.get_origin(hint)
    if origin is typing.Literal:
        name = "one of " + ", ".join(repr(a) for a in typing.get_args(hint))
    elif origin in (tuple, list, frozenset, set):
        args = typing.get_args(hint)
        name = f"a list of {_type_name(args[0]) if args else 'values'}"
    elif origin is not None:
        name = getattr(origin, "__name__", str(origin))
    elif isinstance(hint, type) and issubclass(hint, enum.Enum):
        name = "one of " + ", ".join(repr(m.value) for m in hint)
    elif hint is Path:
        name = "a path"
    elif hint is Any:
        name = "any value"
    else:
        name = {int: "an integer", float: "a number", str: "a string", bool: "true or false"}.get(
            hint, getattr(hint, "__name__", str(hint)))
    return f"{name} (or unset)" if optional else name


class _Mismatch(Exception):
    """A value does not fit its annotation (internal: turned into one ``ValueError``)."""


def _coerce(value: Any, hint: Any) -> Any:
    """``value`` checked against ``hint`` and converted where the TOML form differs (list -> tuple, int -> float)."""
    if hint is Any or hint is object:
        return value
    hint, optional = _strip_optional(hint)
    if value is None:
        if optional:
            return None
        raise _Mismatch
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        for arg in typing.get_args(hint):
            try:
                return _coerce(value, arg)
            except _Mismatch:
                continue
        raise _Mismatch
    if origin is typing.Literal:
        if any(value == choice and type(value) is type(choice) for choice in typing.get_args(hint)):
            return value
        raise _Mismatch
    if origin in (tuple, list, frozenset, set):
        if isinstance(value, str) and origin is tuple:
            value = [value]  # one multiaddr given as a string
        if not isinstance(value, (list, tuple)):
            raise _Mismatch
        args = typing.get_args(hint)
        if origin is tuple and args and not (len(args) == 2 and args[1] is Ellipsis):
            if len(args) != len(value):
                raise _Mismatch
            return tuple(_coerce(v, a) for v, a in zip(value, args, strict=True))
        item = args[0] if args else Any
        return origin(_coerce(v, item) for v in value)
    if origin in (dict, Mapping) or hint is dict:
        if not isinstance(value, Mapping):
            raise _Mismatch
        key_hint, value_hint = typing.get_args(hint) or (Any, Any)
        return {_coerce(k, key_hint): _coerce(v, value_hint) for k, v in value.items()}
    if origin is not None:
        return value  # an annotation this checker does not know: left to the dataclass
    if hint is bool:
        if isinstance(value, bool):
            return value
        raise _Mismatch
    if hint is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise _Mismatch
    if hint is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        raise _Mismatch
    if hint is Path:
        if isinstance(value, (str, Path)):
            return Path(value)
        raise _Mismatch
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        try:
            return value if isinstance(value, hint) else hint(value)
        except ValueError:
            raise _Mismatch from None
    if isinstance(hint, type):
        if isinstance(value, hint):
            return value
        raise _Mismatch
    return value


def type_check(cls: type, values: Mapping[str, Any]) -> dict[str, Any]:
    """Check each value against its field's annotation and convert its TOML form (list -> tuple, int -> float).

    Args:
        cls: the settings dataclass.
        values: ``{field name: value}``, every key a field of ``cls``.

    Returns:
        The converted values (a new dict; ``values`` is not changed).

    Raises:
        ValueError: naming the first field whose value does not fit, the expected type and the value.
    """
    hints = typing.get_type_hints(cls)
    out: dict[str, Any] = {}
    for name, value in values.items():
        try:
            out[name] = _coerce(value, hints[name])
        except _Mismatch:
            raise ValueError(f"{name} must be {_type_name(hints[name])}; got {value!r}") from None
        if isinstance(out[name], float) and math.isnan(out[name]):
            raise ValueError(f"{name} must be a finite number; got nan")
    return out


def load_config(
    cls: type[T],
    *,
    args: argparse.Namespace,
    table: str,
    config_path: str | Path | None = None,
    extra: Mapping[str, Any] | None = None,
    precheck: Callable[[Mapping[str, Any]], object] | None = None,
) -> T:
    """Build a ``cls`` from its defaults, the ``[table]`` of ``config_path`` and the flags given, in that order.

    Args:
        cls: the settings dataclass.
        args: the parsed command line (flags from :func:`add_config_flags`).
        table: the TOML table name (``peer``, ``bootstrap``, ``simulate``).
        config_path: the ``--config`` file, or None.
        extra: values set by the command itself, applied last.
        precheck: called with every field's merged value (defaults included) before the dataclass is built;
            raises ``ValueError``. For checks the dataclass does not make itself, or that should come before
            one of its checks that needs a heavy import.

    Returns:
        The validated settings.

    Raises:
        ValueError: on a missing or malformed file, an unknown key, a value of the wrong type or out of range;
            the message names the file (or "command line") and the setting.
    """
    known = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    values: dict[str, Any] = {}
    if config_path is not None:
        file_values = read_table(config_path, table)
        unknown = sorted(set(file_values) - known)
        if unknown:
            raise ValueError(f"config file {config_path}: unknown setting(s) {unknown}"
                             f"{_unknown_hints(unknown, known)}")
        try:
            values.update(type_check(cls, file_values))
        except ValueError as e:
            raise ValueError(f"config file {config_path}: {e}") from None
    given = given_flags(args, cls)
    try:
        values.update(type_check(cls, given))
    except ValueError as e:
        raise ValueError(f"command line: {e}") from None
    values.update(extra or {})
    if precheck is not None:
        precheck({f.name: values.get(f.name, _default_of(f)) for f in dataclasses.fields(cls)})  # type: ignore[arg-type]
    try:
        return cls(**values)
    except (TypeError, ValueError) as e:
        from_flags = bool(_named(e, known) & set(given)) or config_path is None
        source = "command line" if from_flags else f"config file {config_path}"
        raise ValueError(f"{source}: {e}") from None


def _named(error: Exception, known: set[str]) -> set[str]:
    """Field names an error message mentions (to say where a bad value came from)."""
    return {word for word in re.findall(r"[A-Za-z_][A-Za-z0-9_]*", str(error)) if word in known}


#: Settings that were renamed, with what replaces them (a file written for an older version gets this hint).
RENAMED_SETTINGS: dict[str, str] = {
    "max_payload_bytes": "max_parameters (a parameter count; each codec's byte cap follows from it, protocol 3)",
    "mix_fp16": 'mix_precision ("fp16" for true, "fp32" for false; or "int8")',
}


def _unknown_hints(unknown: list[str], known: set[str]) -> str:
    """'; did you mean …' for each unknown key: its new name if it was renamed, else the closest known names."""
    hints = []
    for key in unknown:
        if key in RENAMED_SETTINGS and RENAMED_SETTINGS[key].split()[0] in known:
            hints.append(f"{key} was renamed: use {RENAMED_SETTINGS[key]}")
        else:
            close = difflib.get_close_matches(key, sorted(known), n=3, cutoff=0.6)
            if close:
                hints.append(f"{key}: did you mean {' or '.join(close)}?")
    tail = "; see --help for every setting"
    return ("; " + "; ".join(hints) + tail) if hints else tail
