"""Guards by spec: ``build_guard("trimmed_mean:f=2")``, ``build_guard("my_pkg.rules:Rule:tau=0.5")``.

The spec grammar is the attacks' (:mod:`p2p_guard.plugin_spec`)::

    spec   := NAME [":" params] | MODULE ":" CLASS [":" params]
    params := key "=" value ("," key "=" value)*

A built-in NAME is looked up in :data:`GUARD_NAMES`; ``MODULE:CLASS`` is imported with importlib and must
satisfy the :class:`~p2p_guard.guard.base.Aggregator` Protocol (``__call__(updates, ctx) -> Tensor``; a
``judge(updates, ctx) -> GuardResult`` method, if it has one, makes it a
:class:`~p2p_guard.guard.base.JudgingAggregator` with verdicts of its own). The parameters are the class's
keyword-only constructor arguments; keyword arguments given to :func:`build_guard` are added to them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any

from p2p_guard.guard.base import Aggregator
from p2p_guard.guard.baselines import (
    CenteredClipping,
    CoordinateMedian,
    GeometricMedian,
    Mean,
    MultiKrum,
    NNMTrimmedMean,
    OwnUpdate,
    TrimmedMean,
)
from p2p_guard.guard.guard import Guard
from p2p_guard.guard.semantic import SemanticGuard
from p2p_guard.plugin_names import GUARD_NAMES, unknown_guard_error
from p2p_guard.plugin_spec import (
    check_known_params,
    construct_plugin,
    import_class,
    parse_spec,
    parse_spec_text,
    read_params,
)

__all__ = ["DEFAULT_GUARD", "GUARD_NAMES", "build_guard", "check_guard_spec", "parse_guard_spec"]

_RULES: Mapping[str, Callable[..., Aggregator]] = MappingProxyType(
    {
        "mean": Mean,
        "median": CoordinateMedian,
        "trimmed_mean": TrimmedMean,
        "multi_krum": MultiKrum,
        "geometric_median": GeometricMedian,
        "centered_clipping": CenteredClipping,
        "nnm_trimmed_mean": NNMTrimmedMean,
        "own_update": OwnUpdate,
        "semantic": SemanticGuard,
    }
)

# GUARD_NAMES (every built-in name build_guard accepts) is p2p_guard.plugin_names's, which the CLI checks without
# importing torch; a unit test asserts that it equals tuple(_RULES).

DEFAULT_GUARD = "semantic"
"""The guard a peer runs unless told otherwise."""

_METHODS = (("__call__", "__call__(updates, ctx) -> Tensor"),)


def parse_guard_spec(spec: str) -> tuple[str, dict[str, Any]]:
    """Split a guard spec into its name (built-in or ``"module:Class"``) and its parameters.

    Raises:
        ValueError: on bad syntax; the message quotes the spec.
    """
    return parse_spec(spec, what="guard", builtin_names=GUARD_NAMES)


def _rule_class(spec: str, name: str) -> Callable[..., Aggregator]:
    if ":" not in name:
        try:
            return _RULES[name]
        except KeyError:
            raise unknown_guard_error(spec, name) from None
    cls = import_class(spec, name, what="guard")
    for method, signature in _METHODS:
        if not any(method in vars(klass) for klass in cls.__mro__ if klass is not object):
            raise ValueError(
                f"guard spec {spec!r}: {name} has no method {signature}, which the aggregator Protocol "
                f"(p2p_guard.guard.base.Aggregator) requires"
            )
    judge = getattr(cls, "judge", None)
    if judge is not None and not callable(judge):
        raise ValueError(f"guard spec {spec!r}: {name}.judge must be a method (updates, ctx) -> GuardResult")
    return cls  # type: ignore[no-any-return]


def build_guard(spec: str = DEFAULT_GUARD, **params: Any) -> Guard:
    """Build the guard a spec names, with the spec's parameters plus ``params``.

    Args:
        spec: a built-in name of :data:`GUARD_NAMES` (``"semantic"``), with parameters
            (``"trimmed_mean:f=2"``), or a user's rule ``"module:Class[:key=value,...]"``.
        **params: further keyword arguments of the rule's constructor (a key may not be given twice).

    Returns:
        A :class:`~p2p_guard.guard.guard.Guard` wrapping the rule (named by ``spec``), falling back to the
        coordinate-wise median.

    Raises:
        ValueError: on bad syntax, an unknown name, a module or class that cannot be imported, a class that
            misses a method of the Protocol (the message names it), a parameter given twice, parameters
            the constructor rejects, or a user rule's constructor that raises anything else or calls
            ``sys.exit()``.
    """
    name, raw = parse_spec_text(spec, what="guard", builtin_names=GUARD_NAMES)
    both = sorted(set(raw) & set(params))
    if both:
        raise ValueError(f"guard spec {spec!r}: parameter(s) {both} given both in the spec and as arguments")
    rule = _rule_class(spec, name)
    merged = {**read_params(rule, raw), **params}
    check_known_params(rule, merged, label=f"guard {spec!r}", name=name)
    try:
        aggregator = construct_plugin(rule, merged)
    except TypeError as exc:
        raise ValueError(f"guard {spec!r}: bad parameters {sorted(merged)}: {exc}") from exc
    except ValueError as exc:
        raise ValueError(f"guard {spec!r}: {exc}") from exc
    except Exception as exc:
        if ":" not in name:  # a built-in rule failing otherwise is a bug of ours: keep its traceback
            raise
        # a user's rule: whatever its constructor raises is a bad spec (one line at start, not a traceback)
        raise ValueError(f"guard {spec!r}: {type(exc).__name__}: {exc}") from exc
    return Guard(name=spec, aggregator=aggregator, plugin=":" in name)


def check_guard_spec(spec: str) -> None:
    """Build the guard once and drop it: fail at CLI start, not in round 1.

    Raises:
        ValueError: as :func:`build_guard`.
    """
    build_guard(spec)
