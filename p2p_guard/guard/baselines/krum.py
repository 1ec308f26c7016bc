"""Multi-Krum (Blanchard et al. 2017; El Mhamdi et al. 2018): average the m rows with the best Krum score."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from p2p_guard.guard.base import (
    AggregationContext,
    GuardResult,
    NotEnoughUpdates,
    check_int,
    check_stack,
    resolve_f,
)
from p2p_guard.guard.linalg import cosines_to, pairwise_distances, row_norms, stable_argsort
from p2p_guard.guard.verdict import NOT_SELECTED, make_verdicts

__all__ = ["MultiKrum", "krum_scores"]


def krum_scores(updates: torch.Tensor, f: int) -> torch.Tensor:
    """Krum score of each row: the sum of squared distances to its n − f − 2 nearest other rows.

    Args:
        updates: ``(n, d)`` float tensor with ``n >= f + 3``; not mutated.
        f: number of Byzantine rows tolerated.

    Returns:
        ``(n,)`` float64 scores (lower is more central).
    """
    n = len(updates)
    sq = pairwise_distances(updates) ** 2
    scores = torch.zeros(n, dtype=torch.float64)
    for i in range(n):
        others = torch.cat([sq[i, :i], sq[i, i + 1 :]])
        scores[i] = torch.sort(others).values[: n - f - 2].sum()
    return scores


@dataclass(frozen=True, kw_only=True)
class MultiKrum:
    """Average of the m rows with the lowest Krum scores; needs n > 2f + 2.

    MultiKrum_{f,m}(x_1, …, x_n) = (1/m) Σ_{i ∈ S} x_i,  S = the m rows with the lowest s(i),
    s(i) = Σ_{j ∈ N_i} ‖x_i − x_j‖₂²

    where
        - x_1, …, x_n are the rows, with n ≥ 2f + 3;
        - f is the number of Byzantine rows tolerated;
        - N_i is the set of the n − f − 2 rows nearest to x_i, x_i itself excluded;
        - m ≤ n − f is the number of rows kept (m = 1 is Krum); ties in s are broken by row index.

    Differences from byzfl 0.0.11 (``byzfl.MultiKrum``): byzfl scores with the *mean* over the n − f − 1
    nearest rows and only requires n > 2f; we follow the papers (sum over n − f − 2, n > 2f + 2). The two
    select the same rows when the outliers are well separated (the oracle test checks that case).

    Args:
        f: Byzantine rows tolerated; ``None`` takes ``ctx.f``, else ``default_f(n)``.
        m: rows averaged; ``None`` means n − f (El Mhamdi et al.'s choice).

    Raises:
        ValueError: when ``f`` is not an integer ``>= 0`` or ``m`` not an integer ``>= 1``.

    Example:
        >>> x = torch.tensor([[0.0], [1.0], [2.0], [3.0], [100.0]])
        >>> MultiKrum(f=1)(x, ctx)   # scores 5, 2, 2, 5, 19013 (sums of 2 squared distances)
        tensor([1.5000])

    References:
        Peva Blanchard, El Mahdi El Mhamdi, Rachid Guerraoui, Julien Stainer. Machine Learning with
        Adversaries: Byzantine Tolerant Gradient Descent. NeurIPS 2017. arXiv:1703.02757.
        El Mahdi El Mhamdi, Rachid Guerraoui, Sébastien Rouault. The Hidden Vulnerability of Distributed
        Learning in Byzantium. ICML 2018. arXiv:1802.07927.
    """

    f: int | None = None
    m: int | None = None

    def __post_init__(self) -> None:
        """Check the fields (ValueError naming the field and its value)."""
        if self.f is not None:
            check_int("f", self.f, minimum=0)
        if self.m is not None:
            check_int("m", self.m, minimum=1)

    def _select(
        self, updates: torch.Tensor, ctx: AggregationContext
    ) -> tuple[torch.Tensor, int, torch.Tensor]:
        f = resolve_f(self.f, ctx, len(updates))
        n = check_stack(updates, f, needed_rows=2 * f + 3, needed="n > 2f + 2")
        m = n - f if self.m is None else self.m
        if m > n - f:
            raise NotEnoughUpdates(n, f, f"m <= n - f (m={m})")
        scores = krum_scores(updates, f)
        selected = torch.sort(stable_argsort(scores)[:m]).values
        return selected, m, scores

    def __call__(self, updates: torch.Tensor, ctx: AggregationContext) -> torch.Tensor:
        """Average the m rows with the lowest Krum scores.

        Args:
            updates: ``(n, d)`` float tensor, not mutated.
            ctx: the round's context (``ctx.f`` when ``f`` is ``None``).

        Returns:
            ``(d,)`` tensor, dtype of ``updates``.

        Raises:
            NotEnoughUpdates: unless ``n > 2f + 2`` and ``m <= n − f``.
        """
        selected, _, _ = self._select(updates, ctx)
        return updates[selected].mean(dim=0)

    def judge(self, updates: torch.Tensor, ctx: AggregationContext) -> GuardResult:
        """Aggregate as :meth:`__call__`, and reject (reason ``"not_selected"``) every row not selected.

        Returns:
            The aggregate and one verdict per row (cosine taken with the aggregate).

        Raises:
            NotEnoughUpdates: unless ``n > 2f + 2`` and ``m <= n − f``.
        """
        selected, m, scores = self._select(updates, ctx)
        aggregate = updates[selected].mean(dim=0)
        kept = set(selected.tolist())
        rejected = {
            i: (NOT_SELECTED, f"Krum score {float(scores[i]):.4g} not among the {m} lowest")
            for i in range(len(updates))
            if i not in kept
        }
        verdicts = make_verdicts(
            ctx.senders,
            row_norms(updates),
            cosines_to(updates, aggregate),
            rejected,
            "selected by Multi-Krum",
        )
        return GuardResult(aggregate=aggregate, verdicts=verdicts)
