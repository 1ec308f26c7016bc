"""Verdict stage: which rows are outliers, and the :class:`Verdict` records that say so.

A row is an outlier when it is too long or points away from the robust centre:

    reject_i  ⇔  ‖x_i‖₂ > c_reject · median_j ‖x_j‖₂   or   cos(x_i, centre) < cos_min

where
    - x_i is sender i's raw row (before clipping), so that a scaled update is caught even though clipping
      already bounded its effect;
    - median_j ‖x_j‖₂ is the median norm of the round's rows (own included);
    - centre is the robust centre of :mod:`p2p_guard.guard.centre`;
    - c_reject > 1 and cos_min ∈ [−1, 1) are the stage's thresholds.

The norm test catches scaling and large sign-flip attacks; the direction test catches sign flip, IPM and
anything else that points against the consensus of the majority, whatever its norm.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch

from p2p_guard.guard.base import Verdict

__all__ = ["OUTLIER", "make_verdicts", "outlier_rows"]

OUTLIER = "outlier"
"""Reason given to a row rejected by a statistical test (verdict stage, Multi-Krum)."""


def outlier_rows(
    norms: torch.Tensor,
    cosines: torch.Tensor,
    median_norm: float,
    *,
    c_reject: float,
    cos_min: float,
) -> dict[int, str]:
    """Apply the norm and direction tests to every row.

    Args:
        norms: ``(n,)`` float64 raw row norms.
        cosines: ``(n,)`` float64 cosines of the raw rows with the robust centre.
        median_norm: median of ``norms``.
        c_reject: a row longer than ``c_reject × median_norm`` is rejected.
        cos_min: a row whose cosine is below ``cos_min`` is rejected.

    Returns:
        Row index → detail (the figures that decided) for each rejected row; accepted rows are absent.
    """
    limit = c_reject * median_norm
    rejected: dict[int, str] = {}
    for i, (norm, cos) in enumerate(zip(norms.tolist(), cosines.tolist(), strict=True)):
        why = []
        if norm > limit:
            why.append(f"norm {norm:.4g} > {c_reject:g} x median norm {median_norm:.4g}")
        if cos < cos_min:
            why.append(f"cosine to robust centre {cos:.3f} < {cos_min:g}")
        if why:
            rejected[i] = "; ".join(why)
    return rejected


def make_verdicts(
    senders: Sequence[str],
    norms: torch.Tensor,
    cosines: torch.Tensor,
    rejected: Mapping[int, tuple[str, str]],
    accepted_detail: str,
    loss_scores: torch.Tensor | None = None,
) -> tuple[Verdict, ...]:
    """Build one :class:`Verdict` per row.

    Args:
        senders: PeerIDs in row order.
        norms: ``(n,)`` raw row norms.
        cosines: ``(n,)`` cosines with the rule's reference.
        rejected: row index → ``(reason, detail)`` for each rejected row.
        accepted_detail: detail recorded for every accepted row.
        loss_scores: ``(n,)`` semantic-stage scores in row order, or None (each verdict's ``loss_score``).

    Returns:
        Verdicts in row order.
    """
    out = []
    for i, sender in enumerate(senders):
        reason, detail = rejected.get(i, (None, accepted_detail))
        out.append(
            Verdict(
                sender=sender,
                accepted=reason is None,
                reason=reason,
                detail=detail,
                norm=float(norms[i]),
                cosine=float(cosines[i]),
                loss_score=None if loss_scores is None else float(loss_scores[i]),
            )
        )
    return tuple(out)
