"""Geometric median by the smoothed Weiszfeld algorithm (Pillutla et al. 2022, RFA)."""

from __future__ import annotations

import logging
from dataclasses import dataclass

import torch

from p2p_guard.guard.base import AggregationContext, check_int, check_real, check_stack
from p2p_guard.guard.linalg import row_norms

logger = logging.getLogger(__name__)

__all__ = ["GeometricMedian"]


@dataclass(frozen=True, kw_only=True)
class GeometricMedian:
    """Smoothed geometric median; breakdown point 1/2, weak against ALIE and IPM without momentum.

    GM_ν(x_1, …, x_n) = argmin_z Σ_{i=1}^{n} g_ν(‖z − x_i‖₂),  g_ν(r) = r if r ≥ ν, else r²/(2ν) + ν/2

    computed by the smoothed Weiszfeld iteration from z⁰ = mean of the rows:

        z^{t+1} = Σ_i β_i x_i / Σ_i β_i,  β_i = 1 / max(ν, ‖z^t − x_i‖₂)

    stopped after ``max_iter`` steps or when |G(z^t) − G(z^{t+1})| ≤ tol · G(z^{t+1}), G(z) = Σ_i ‖z − x_i‖₂

    where
        - x_1, …, x_n are the rows, n ≥ 1;
        - ν > 0 is the smoothing radius, in the units of the rows: rows closer than ν to z all weigh the
          same, so a ν larger than the honest spread turns the rule into a mean. Lower it for small
          pseudo-gradients.

    Differences from byzfl 0.0.11 (``byzfl.GeometricMedian``): byzfl starts at z⁰ = 0 and runs a fixed
    T = 3 steps; we start at the mean (as RFA does) and iterate to convergence. Both converge to the same
    minimiser (the oracle test runs byzfl with many steps).

    Args:
        nu: smoothing radius ν, ``> 0``.
        max_iter: most Weiszfeld steps, ``>= 1``.
        tol: relative decrease of G under which the iteration stops, ``>= 0`` (0 runs all ``max_iter``).

    Raises:
        ValueError: on a parameter out of range (the message names it).

    Example:
        >>> x = torch.tensor([[0.0, 0.0], [1.0, 0.0], [0.0, 1.0], [50.0, 50.0]])
        >>> GeometricMedian(nu=1e-6, max_iter=1000, tol=0.0)(x, ctx)   # where the diagonals cross
        tensor([0.5000, 0.5000])

        The mean would be (12.75, 12.75).

    References:
        Krishna Pillutla, Sham M. Kakade, Zaid Harchaoui. Robust Aggregation for Federated Learning. IEEE
        Transactions on Signal Processing 70, 2022. arXiv:1912.13445.
        Endre Weiszfeld. Sur le point pour lequel la somme des distances de n points donnés est minimum.
        Tohoku Mathematical Journal 43, 1937.
    """

    nu: float = 0.1
    max_iter: int = 100
    tol: float = 1e-6

    def __post_init__(self) -> None:
        """Check the fields (ValueError naming the field and its value)."""
        check_real("nu", self.nu, minimum=0.0)
        check_int("max_iter", self.max_iter, minimum=1)
        check_real("tol", self.tol, minimum=0.0, inclusive=True)

    def __call__(self, updates: torch.Tensor, ctx: AggregationContext) -> torch.Tensor:
        """Run the smoothed Weiszfeld iteration.

        Args:
            updates: ``(n, d)`` float tensor, not mutated.
            ctx: the round's context (unused).

        Returns:
            ``(d,)`` tensor, dtype of ``updates``.

        Raises:
            NotEnoughUpdates: when ``n == 0``.
        """
        check_stack(updates, 0, needed_rows=1, needed="n >= 1")
        z = updates.mean(dim=0)
        dists = row_norms(updates - z)
        objective = float(dists.sum())
        for step in range(self.max_iter):
            beta = 1.0 / torch.clamp(dists, min=self.nu)
            weights = (beta / beta.sum()).to(updates.dtype)
            # Elementwise product then a sum over rows: a fixed summation order, unlike a BLAS gemv.
            z = (weights[:, None] * updates).sum(dim=0)
            dists = row_norms(updates - z)
            new_objective = float(dists.sum())
            converged = abs(objective - new_objective) <= self.tol * new_objective
            objective = new_objective
            if converged:
                logger.debug("geometric median converged after %d steps", step + 1)
                break
        return z
