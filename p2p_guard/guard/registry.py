"""Guards by name: ``build_guard("trimmed_mean", f=2)`` returns a ready :class:`~p2p_guard.guard.Guard`."""

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
    TrimmedMean,
)
from p2p_guard.guard.guard import Guard
from p2p_guard.guard.semantic import SemanticGuard

__all__ = ["DEFAULT_GUARD", "GUARD_NAMES", "build_guard"]

_RULES: Mapping[str, Callable[..., Aggregator]] = MappingProxyType(
    {
        "mean": Mean,
        "median": CoordinateMedian,
        "trimmed_mean": TrimmedMean,
        "multi_krum": MultiKrum,
        "geometric_median": GeometricMedian,
        "centered_clipping": CenteredClipping,
        "nnm_trimmed_mean": NNMTrimmedMean,
        "semantic": SemanticGuard,
    }
)

GUARD_NAMES: tuple[str, ...] = tuple(_RULES)
"""Every name :func:`build_guard` accepts."""

DEFAULT_GUARD = "semantic"
"""The guard a peer runs unless told otherwise."""


def build_guard(name: str = DEFAULT_GUARD, **params: Any) -> Guard:
    """Build the guard registered under ``name`` with the given hyper-parameters.

    Args:
        name: one of :data:`GUARD_NAMES`.
        **params: keyword arguments of the rule's constructor (for example ``f=2`` for ``trimmed_mean``).

    Returns:
        A :class:`~p2p_guard.guard.guard.Guard` wrapping the rule, falling back to the coordinate-wise median.

    Raises:
        ValueError: on an unknown name, an unknown parameter or a parameter out of range.
    """
    try:
        rule = _RULES[name]
    except KeyError:
        raise ValueError(f"unknown guard {name!r}; expected one of {', '.join(GUARD_NAMES)}") from None
    try:
        aggregator = rule(**params)
    except TypeError as exc:
        raise ValueError(f"guard {name!r}: bad parameters {sorted(params)}: {exc}") from exc
    return Guard(name=name, aggregator=aggregator)
