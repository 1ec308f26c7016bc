"""Verdicts and robust aggregation, run by each receiving peer over the updates of a round.

Module map:

- ``base.py``: :class:`AggregationContext`, the :class:`Aggregator` / :class:`JudgingAggregator` Protocols,
  :class:`NotEnoughUpdates`, :class:`Verdict`, :class:`GuardResult`, :func:`default_f`.
- ``integrity.py``: envelope and payload checks (signature, run, round, base, codec, shapes, digest).
- ``linalg.py``: float64 norms, distances, cosines and medians shared by the rules.
- ``magnitude.py``, ``centre.py``, ``verdict.py``, ``collusion.py``: the stages of the semantic guard;
  ``loss_score.py`` and ``noise.py`` (FLAME's noise): its stages that are off by default.
- ``semantic.py``: :class:`SemanticGuard`, the default pipeline, with its extension points
  :class:`RowCheck` and :class:`Anchor`.
- ``baselines/``: mean, coordinate-wise median, trimmed mean, Multi-Krum, geometric median, centered clipping,
  NNM + trimmed mean.
- ``guard.py``: :class:`Guard`, a rule wrapped with canonical ordering, a non-finite filter, the median
  fallback and one verdict per sender.
- ``registry.py``: :func:`build_guard` and :data:`GUARD_NAMES`.
"""

from p2p_guard.guard.base import (
    AggregationContext,
    Aggregator,
    GuardResult,
    JudgingAggregator,
    NotEnoughUpdates,
    Verdict,
    default_f,
)
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
from p2p_guard.guard.registry import DEFAULT_GUARD, GUARD_NAMES, build_guard
from p2p_guard.guard.semantic import Anchor, RowCheck, SemanticGuard

__all__ = [
    "DEFAULT_GUARD",
    "GUARD_NAMES",
    "AggregationContext",
    "Aggregator",
    "Anchor",
    "CenteredClipping",
    "CoordinateMedian",
    "GeometricMedian",
    "Guard",
    "GuardResult",
    "JudgingAggregator",
    "Mean",
    "MultiKrum",
    "NNMTrimmedMean",
    "NotEnoughUpdates",
    "RowCheck",
    "SemanticGuard",
    "TrimmedMean",
    "Verdict",
    "build_guard",
    "default_f",
]
