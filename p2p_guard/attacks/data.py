"""Data attacks: corrupt the batches of the attacker's inner steps, then train and commit honestly."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from p2p_guard.guard.base import check_int

__all__ = ["LabelFlip"]


@dataclass(frozen=True, kw_only=True)
class LabelFlip:
    """Train on flipped labels.

    y' = C − 1 − y

    where
        - y holds integer class labels in [0, C) (any shape);
        - C = ``num_classes``.

    For a language-model task, y holds next-token targets and C is the vocabulary size: the same formula maps
    each token to its mirror in the vocabulary (a fixed permutation of the targets), so the attacker learns to
    predict the wrong token everywhere, the LM analogue of a label flip. Inputs x are returned unchanged.

    Example:
        >>> LabelFlip().transform(x, torch.tensor([0, 3, 9]), 10)[1]
        tensor([9, 6, 0])

    References:
        Vale Tolpegin, Stacey Truex, Mehmet Emre Gursoy, Ling Liu. Data Poisoning Attacks Against Federated
        Learning Systems. ESORICS 2020. arXiv:2007.08432.
    """

    kind: ClassVar[str] = "data"

    def transform(
        self, x: torch.Tensor, y: torch.Tensor, num_classes: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Flip the labels of one batch.

        Args:
            x: inputs, any shape; returned as they are.
            y: integer labels in ``[0, num_classes)``, any shape; not mutated.
            num_classes: C, ``>= 1``.

        Returns:
            ``(x, C − 1 − y)``, the labels a new tensor of the dtype of ``y``.

        Raises:
            ValueError: when ``y`` is not an integer tensor, ``num_classes < 1``, or a label is out of range.
        """
        check_int("num_classes", num_classes, minimum=1)
        if y.is_floating_point() or y.is_complex() or y.dtype == torch.bool:
            raise ValueError(f"labels must be an integer tensor, got dtype {y.dtype}")
        if y.numel() and (int(y.min()) < 0 or int(y.max()) >= num_classes):
            raise ValueError(
                f"labels must lie in [0, {num_classes}), got range [{int(y.min())}, {int(y.max())}]"
            )
        return x, (num_classes - 1) - y
