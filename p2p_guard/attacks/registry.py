"""Attacks by spec: ``load_attack("sign_flip:scale=10")`` or ``load_attack("my_pkg.attacks:Drift:eps=0.01")``.

Spec grammar::

    spec   := NAME [":" params] | MODULE ":" CLASS [":" params]
    params := key "=" value ("," key "=" value)*

A value is read as a bool (``true`` / ``false``, any case), an int, a float, or else kept as a string. A
built-in NAME is looked up in the registry (update and data attacks here; wire attacks in
``p2p_guard.attacks.wire``, imported only when one is asked for). ``MODULE:CLASS`` is imported with
importlib; the class must carry ``kind`` (``"update"``, ``"data"`` or ``"wire"``) and define the method that
kind needs (``__call__``, ``transform`` or ``mutate``).
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from p2p_guard.attacks.base import ATTACK_KINDS
from p2p_guard.attacks.data import Backdoor, LabelFlip
from p2p_guard.attacks.evasive import Drift, NullSpace, Sleeper
from p2p_guard.attacks.update import (
    ALittleIsEnough,
    FreeRider,
    GaussianNoise,
    InnerProductManipulation,
    Mimic,
    MinMax,
    MinSum,
    Scale,
    SignFlip,
)
from p2p_guard.attacks.whitebox import Adaptive

__all__ = ["ATTACK_NAMES", "WIRE_ATTACK_NAMES", "load_attack", "parse_attack_spec"]

ParamValue = bool | int | float | str

_BUILTIN: Mapping[str, type] = MappingProxyType(
    {
        "sign_flip": SignFlip,
        "noise": GaussianNoise,
        "scale": Scale,
        "alie": ALittleIsEnough,
        "ipm": InnerProductManipulation,
        "label_flip": LabelFlip,
        "free_rider": FreeRider,
        "min_max": MinMax,
        "min_sum": MinSum,
        "mimic": Mimic,
        "drift": Drift,
        "null_space": NullSpace,
        "sleeper": Sleeper,
        "backdoor": Backdoor,
        "adaptive": Adaptive,
    }
)

WIRE_ATTACK_NAMES: tuple[str, ...] = (
    "copycat",
    "equivocate",
    "forged_signature",
    "impersonate",
    "replay",
    "unsigned",
    "bad_signature",
    "wrong_run",
    "wrong_round",
    "stale_base",
    "digest_mismatch",
    "wrong_shape",
    "nan",
    "oversized",
    "vote_smear",
    "slowloris",
)
"""Wire attacks, defined in ``p2p_guard.attacks.wire`` (its ``WIRE_ATTACKS`` maps these names to classes)."""

ATTACK_NAMES: tuple[str, ...] = (*_BUILTIN, *WIRE_ATTACK_NAMES)
"""Every built-in attack name :func:`load_attack` accepts."""

_WIRE_MODULE = "p2p_guard.attacks.wire"
_METHOD_OF_KIND = MappingProxyType({"update": "__call__", "data": "transform", "wire": "mutate"})
_IDENT = r"[A-Za-z_][A-Za-z0-9_]*"
_NAME = re.compile(_IDENT)
_MODULE = re.compile(rf"{_IDENT}(\.{_IDENT})*")
_INT = re.compile(r"[+-]?\d+")


def parse_attack_spec(spec: str) -> tuple[str, dict[str, ParamValue]]:
    """Split an attack spec into its name and its parameters.

    Args:
        spec: ``"name"``, ``"name:key=value,..."``, ``"module:Class"`` or ``"module:Class:key=value,..."``.

    Returns:
        ``(name, params)``: name is the built-in name or ``"module:Class"``; params maps each key to its value
        read as bool, int, float or str. ``parse_attack_spec("sign_flip:scale=10")`` gives
        ``("sign_flip", {"scale": 10})``.

    Raises:
        ValueError: on bad syntax; the message quotes the spec.
    """
    if not isinstance(spec, str):
        raise ValueError(f"attack spec must be a string, got {spec!r}")
    parts = spec.strip().split(":")
    if len(parts) == 1 or (len(parts) == 2 and "=" in parts[1]):
        name, params_text = parts[0], (parts[1] if len(parts) == 2 else None)
        if not _NAME.fullmatch(name):
            raise ValueError(f"bad attack spec {spec!r}: {name!r} is not an attack name")
    elif len(parts) in (2, 3):
        module, cls = parts[0], parts[1]
        if module in ATTACK_NAMES:
            raise ValueError(f"bad attack spec {spec!r}: parameters are key=value, got {cls!r}")
        if not _MODULE.fullmatch(module) or not _NAME.fullmatch(cls):
            raise ValueError(f"bad attack spec {spec!r}: expected NAME[:key=value,...] or MODULE:CLASS[:...]")
        name, params_text = f"{module}:{cls}", (parts[2] if len(parts) == 3 else None)
    else:
        raise ValueError(f"bad attack spec {spec!r}: too many ':'")
    params: dict[str, ParamValue] = {}
    if params_text is not None:
        for item in params_text.split(","):
            key, sep, text = item.partition("=")
            key = key.strip()
            if not sep or not _NAME.fullmatch(key):
                raise ValueError(f"bad attack spec {spec!r}: parameter {item!r} is not key=value")
            if key in params:
                raise ValueError(f"bad attack spec {spec!r}: parameter {key!r} given twice")
            params[key] = _parse_value(text.strip())
    return name, params


def _parse_value(text: str) -> ParamValue:
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    if _INT.fullmatch(text):
        return int(text)
    try:
        return float(text)
    except ValueError:
        return text


def load_attack(spec: str) -> Any:
    """Build the attack a spec names.

    Args:
        spec: see :func:`parse_attack_spec`.

    Returns:
        An instance with ``kind`` in ``("update", "data", "wire")`` and the method that kind needs.

    Raises:
        ValueError: on bad syntax, an unknown name, a module or class that cannot be found, a class without
            ``kind`` or without the method its kind needs (the message names it), or constructor parameters
            it rejects.
    """
    name, params = parse_attack_spec(spec)
    cls = _import_class(spec, name) if ":" in name else _builtin_class(spec, name)
    kind = getattr(cls, "kind", None)
    if kind not in ATTACK_KINDS:
        raise ValueError(
            f"attack spec {spec!r}: {name} must define kind, one of {ATTACK_KINDS}; got {kind!r}"
        )
    method = _METHOD_OF_KIND[kind]
    if not any(method in vars(klass) for klass in cls.__mro__) or not callable(getattr(cls, method)):
        raise ValueError(f"attack spec {spec!r}: {name} has kind {kind!r} but no method {method}()")
    try:
        return cls(**params)
    except TypeError as exc:
        raise ValueError(f"attack spec {spec!r}: bad parameters {sorted(params)}: {exc}") from exc
    except ValueError as exc:
        raise ValueError(f"attack spec {spec!r}: {exc}") from exc


def _builtin_class(spec: str, name: str) -> type:
    if name in _BUILTIN:
        return _BUILTIN[name]
    if name not in WIRE_ATTACK_NAMES:
        raise ValueError(
            f"attack spec {spec!r}: unknown attack {name!r}; expected one of {', '.join(ATTACK_NAMES)}"
        )
    try:
        wire = importlib.import_module(_WIRE_MODULE)
    except ModuleNotFoundError as exc:
        if exc.name != _WIRE_MODULE:
            raise
        raise ValueError(f"attack spec {spec!r}: wire attacks need {_WIRE_MODULE}, which is missing") from exc
    try:
        cls: type = wire.WIRE_ATTACKS[name]
    except KeyError:
        raise ValueError(f"attack spec {spec!r}: {_WIRE_MODULE}.WIRE_ATTACKS has no {name!r}") from None
    return cls


def _import_class(spec: str, name: str) -> type:
    module_name, _, class_name = name.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        raise ValueError(f"attack spec {spec!r}: cannot import module {module_name!r}: {exc}") from exc
    cls = getattr(module, class_name, None)
    if not isinstance(cls, type):
        raise ValueError(f"attack spec {spec!r}: module {module_name!r} has no class {class_name!r}")
    return cls
