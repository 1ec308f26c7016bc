"""Attacks by spec: ``load_attack("sign_flip:scale=10")`` or ``load_attack("my_pkg.attacks:Drift:eps=0.01")``.

Spec grammar::

    spec   := NAME [":" params] | MODULE ":" CLASS [":" params]
    params := key "=" value ("," key "=" value)*

A value is read as a bool (``true`` / ``false``, any case), an int, a float, or else kept as a string; a
parameter the attack's constructor annotates as text keeps its text (:func:`p2p_guard.plugin_spec.read_params`). A
built-in NAME is looked up in the registry (update and data attacks here; wire attacks in
``p2p_guard.attacks.wire``, imported only when one is asked for). ``MODULE:CLASS`` is imported with
importlib; the class must carry ``kind`` (``"update"``, ``"data"`` or ``"wire"``) and define the method that
kind needs (``__call__``, ``transform`` or ``mutate``).
"""

from __future__ import annotations

import importlib
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
from p2p_guard.plugin_names import ATTACK_NAMES, WIRE_ATTACK_NAMES, unknown_attack_error
from p2p_guard.plugin_spec import (
    ParamValue,
    check_known_params,
    construct_plugin,
    import_class,
    parse_spec,
    parse_spec_text,
    read_params,
)

__all__ = ["ATTACK_NAMES", "WIRE_ATTACK_NAMES", "load_attack", "parse_attack_spec"]


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

# ATTACK_NAMES (every built-in name load_attack accepts: the keys of _BUILTIN, then WIRE_ATTACK_NAMES, the keys of
# p2p_guard.attacks.wire.WIRE_ATTACKS) are p2p_guard.plugin_names's, which the CLI checks without importing torch;
# a unit test asserts that they equal these keys.

_WIRE_MODULE = "p2p_guard.attacks.wire"
_METHOD_OF_KIND = MappingProxyType({"update": "__call__", "data": "transform", "wire": "mutate"})


def parse_attack_spec(spec: str) -> tuple[str, dict[str, ParamValue]]:
    """Split an attack spec into its name and its parameters (the grammar of :mod:`p2p_guard.plugin_spec`).

    Args:
        spec: ``"name"``, ``"name:key=value,..."``, ``"module:Class"`` or ``"module:Class:key=value,..."``.

    Returns:
        ``(name, params)``: name is the built-in name or ``"module:Class"``; params maps each key to its value
        read as bool, int, float or str. ``parse_attack_spec("sign_flip:scale=10")`` gives
        ``("sign_flip", {"scale": 10})``.

    Raises:
        ValueError: on bad syntax; the message quotes the spec.
    """
    return parse_spec(spec, what="attack", builtin_names=ATTACK_NAMES)


def load_attack(spec: str) -> Any:
    """Build the attack a spec names.

    Args:
        spec: see :func:`parse_attack_spec`.

    Returns:
        An instance with ``kind`` in ``("update", "data", "wire")`` and the method that kind needs.

    Raises:
        ValueError: on bad syntax, an unknown name, a module or class that cannot be found, a class without
            ``kind`` or without the method its kind needs (the message names it), a parameter its constructor
            does not name (the message lists those it takes), or constructor parameters it rejects.
        RuntimeError: the constructor calls ``sys.exit()`` (:func:`~p2p_guard.plugin_spec.construct_plugin`);
            anything else it raises propagates (``cli.preflight.check_attack`` makes it one line).
    """
    name, raw = parse_spec_text(spec, what="attack", builtin_names=ATTACK_NAMES)
    cls = _import_class(spec, name) if ":" in name else _builtin_class(spec, name)
    kind = getattr(cls, "kind", None)
    if kind not in ATTACK_KINDS:
        raise ValueError(
            f"attack spec {spec!r}: {name} must define kind, one of {ATTACK_KINDS}; got {kind!r}"
        )
    method = _METHOD_OF_KIND[kind]
    if not any(method in vars(klass) for klass in cls.__mro__) or not callable(getattr(cls, method)):
        raise ValueError(f"attack spec {spec!r}: {name} has kind {kind!r} but no method {method}()")
    check_known_params(cls, raw, label=f"attack spec {spec!r}", name=name)
    params = read_params(cls, raw)
    try:
        return construct_plugin(cls, params)
    except TypeError as exc:
        raise ValueError(f"attack spec {spec!r}: bad parameters {sorted(params)}: {exc}") from exc
    except ValueError as exc:
        raise ValueError(f"attack spec {spec!r}: {exc}") from exc


def _builtin_class(spec: str, name: str) -> type:
    if name in _BUILTIN:
        return _BUILTIN[name]
    if name not in WIRE_ATTACK_NAMES:
        raise unknown_attack_error(spec, name)
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
    return import_class(spec, name, what="attack")
