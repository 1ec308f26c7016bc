"""Baseline aggregation rules, one module per rule, for side-by-side benchmarks with the semantic guard.

- ``mean.py``: :class:`Mean`, the undefended average.
- ``median.py``: :class:`CoordinateMedian` and :func:`coordinate_median` (Yin et al. 2018).
- ``trimmed_mean.py``: :class:`TrimmedMean` and :func:`coordinate_trimmed_mean` (Yin et al. 2018).
- ``krum.py``: :class:`MultiKrum` and :func:`krum_scores` (Blanchard et al. 2017; El Mhamdi et al. 2018).
- ``geometric_median.py``: :class:`GeometricMedian`, smoothed Weiszfeld (Pillutla et al. 2022).
- ``centered_clipping.py``: :class:`CenteredClipping` around the previous aggregate and :func:`centered_clip`
  (Karimireddy et al. 2021).
- ``own.py``: :class:`OwnUpdate`, the receiver's own row only (the bar at any Byzantine fraction).
- ``nnm.py``: :class:`NNMTrimmedMean`, :func:`nearest_neighbour_mixing` and the blockwise
  :func:`mixed_trimmed_mean` (Allouah et al. 2023).
"""

from p2p_guard.guard.baselines.centered_clipping import CenteredClipping, centered_clip
from p2p_guard.guard.baselines.geometric_median import GeometricMedian
from p2p_guard.guard.baselines.krum import MultiKrum, krum_scores
from p2p_guard.guard.baselines.mean import Mean
from p2p_guard.guard.baselines.median import CoordinateMedian, coordinate_median
from p2p_guard.guard.baselines.nnm import NNMTrimmedMean, mixed_trimmed_mean, nearest_neighbour_mixing
from p2p_guard.guard.baselines.own import OwnUpdate
from p2p_guard.guard.baselines.trimmed_mean import TrimmedMean, coordinate_trimmed_mean

__all__ = [
    "CenteredClipping",
    "CoordinateMedian",
    "GeometricMedian",
    "Mean",
    "MultiKrum",
    "NNMTrimmedMean",
    "OwnUpdate",
    "TrimmedMean",
    "centered_clip",
    "coordinate_median",
    "coordinate_trimmed_mean",
    "krum_scores",
    "mixed_trimmed_mean",
    "nearest_neighbour_mixing",
]
