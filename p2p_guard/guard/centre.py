"""Robust-centre stage: the reference direction the verdict stage judges every row against.

centre = TM_f̂(NNM_f̂(x̃_1, …, x̃_n))

where
    - x̃_1, …, x̃_n are the rows after the magnitude stage;
    - NNM_f̂ replaces each row by the mean of its n − f̂ nearest rows (itself included);
    - TM_f̂ is the coordinate-wise trimmed mean dropping f̂ values at each end;
    - f̂ is the configured number of Byzantine rows, with n > 2f̂.

Mixing first makes the trimmed mean robust under heterogeneous (non-IID) honest rows, where a plain
coordinate-wise rule is biased (Allouah et al. 2023). The centre is computed from the received rows only, with
no row singled out, so it does not depend on who computes it.

References:
    Youssef Allouah, Sadegh Farhadkhani, Rachid Guerraoui, Nirupam Gupta, Rafaël Pinot, John Stephan.
    Fixing by Mixing: A Recipe for Optimal Byzantine ML under Heterogeneity. AISTATS 2023. arXiv:2302.01772.
"""

from __future__ import annotations

import torch

from p2p_guard.guard.baselines.nnm import mixed_trimmed_mean
from p2p_guard.guard.baselines.trimmed_mean import coordinate_trimmed_mean

__all__ = ["robust_centre"]


def robust_centre(updates: torch.Tensor, f: int, *, mixing: bool = True) -> torch.Tensor:
    """NNM (optional) followed by the coordinate-wise trimmed mean.

    Args:
        updates: ``(n, d)`` float tensor with ``n > 2f``; not mutated.
        f: number of Byzantine rows tolerated, ``>= 0``.
        mixing: apply nearest-neighbour mixing first (switch off to measure its worth).

    Returns:
        ``(d,)`` tensor, dtype of ``updates``; computed one column block at a time (linear in d, the mixed
        rows never held whole), with the bits of the two stages run one after the other.
    """
    if mixing:
        return mixed_trimmed_mean(updates, f)
    return coordinate_trimmed_mean(updates, f)
