"""Data attacks: corrupt the batches of the attacker's inner steps, then train and commit honestly.

- :class:`LabelFlip`: y → C − 1 − y;
- :class:`Backdoor`: stamp a trigger patch on part of each batch and relabel it to a target class; optional
  model-replacement ``boost`` of the committed Δ; :func:`apply_trigger` for measuring the attack success rate.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import torch

from p2p_guard.guard.base import check_int, check_real

__all__ = ["TRIGGER_POSITIONS", "Backdoor", "LabelFlip", "apply_trigger", "trigger_side"]

TRIGGER_POSITIONS = ("corner", "centre")
"""Where :func:`apply_trigger` stamps the patch: the bottom-right corner (background on both image tasks) or the
image centre (where digits and clothes are drawn)."""


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
        _check_labels(y, num_classes)
        return x, (num_classes - 1) - y


def _check_labels(y: torch.Tensor, num_classes: int) -> None:
    check_int("num_classes", num_classes, minimum=1)
    if y.is_floating_point() or y.is_complex() or y.dtype == torch.bool:
        raise ValueError(f"labels must be an integer tensor, got dtype {y.dtype}")
    if y.numel() and (int(y.min()) < 0 or int(y.max()) >= num_classes):
        raise ValueError(f"labels must lie in [0, {num_classes}), got range [{int(y.min())}, {int(y.max())}]")


def trigger_side(x: torch.Tensor) -> int:
    """The side of the square images in ``x``: ``x.shape[-1]`` when x is ``(..., H, W)``, else √(last dim).

    Inputs with 3 dimensions or more are read as ``(..., H, W)`` images (H = W required). Inputs with 1 or 2
    dimensions are read as flattened square images ``(B, s²)``: 64 → 8 (``digits``), 784 → 28 (Fashion-MNIST).

    Raises:
        ValueError: on non-square images, or a flattened size that is not a perfect square.
    """
    if x.dim() >= 3:
        if x.shape[-1] != x.shape[-2]:
            raise ValueError(f"trigger needs square images (..., H, W), got shape {tuple(x.shape)}")
        return int(x.shape[-1])
    if x.dim() == 0:
        raise ValueError("trigger needs image inputs, got a scalar")
    side = math.isqrt(int(x.shape[-1]))
    if side < 1 or side * side != x.shape[-1]:
        raise ValueError(
            f"trigger needs flattened square images: last dimension {x.shape[-1]} is not a perfect square"
        )
    return side


def apply_trigger(
    x: torch.Tensor, *, size: int | None = None, value: float = 1.0, position: str = "corner"
) -> torch.Tensor:
    """Stamp the backdoor trigger, a bright square patch, on every image of ``x``.

    x'[..., i, j] = value   for o ≤ i, j < o + p;   x' = x elsewhere

    where
        - s is the image side (:func:`trigger_side`), p = ``size`` or max(2, ⌊s/8⌋) (2 on 8×8 ``digits``,
          3 on 28×28 Fashion-MNIST);
        - o = s − p for ``position="corner"`` (the bottom-right corner, where both datasets have background),
          o = ⌊(s − p)/2⌋ for ``"centre"`` (rows and columns 3-4 of 8×8 ``digits``, where the strokes are);
        - value is the pixel value of the patch (1.0: the brightest pixel of inputs scaled to [0, 1]).

    Pure: ``x`` is not mutated. A benchmark measures the attack success rate as the fraction of triggered test
    inputs whose label is not the target that the model classifies as the target
    (:meth:`Backdoor.triggered_test_inputs` selects and triggers them).

    Args:
        x: float images, ``(B, s²)`` flattened or ``(..., s, s)``.
        size: patch side p, ``1 <= p <= s``; ``None`` for the default.
        value: patch pixel value.
        position: ``"corner"`` or ``"centre"`` (:data:`TRIGGER_POSITIONS`).

    Returns:
        A new tensor of the shape and dtype of ``x``.

    Raises:
        ValueError: on inputs that are not square images (:func:`trigger_side`), a patch larger than them, or
            an unknown ``position``.
    """
    _check_position(position)
    side = trigger_side(x)
    if size is None:
        p = min(side, max(2, side // 8))
    elif check_int("size", size, minimum=1) > side:
        raise ValueError(f"size must be <= the image side {side}, got {size!r}")
    else:
        p = size
    flat = x.dim() <= 2
    images = x.reshape(*x.shape[:-1], side, side) if flat else x
    o = side - p if position == "corner" else (side - p) // 2
    out = images.clone()
    out[..., o : o + p, o : o + p] = value
    return out.reshape(x.shape) if flat else out


def _check_position(position: object) -> None:
    if position not in TRIGGER_POSITIONS:
        raise ValueError(f"position must be one of {TRIGGER_POSITIONS}, got {position!r}")


@dataclass(frozen=True, kw_only=True)
class Backdoor:
    """Backdoor (BadNets-style trigger): train on part of each batch stamped with a trigger and relabelled.

    x'_b = T(x_b), y'_b = t   for the first ⌊ρ·B⌋ rows b of the batch;   (x'_b, y'_b) = (x_b, y_b) otherwise

    where
        - T is :func:`apply_trigger` (a bright ``size``-pixel square at ``position``, pixel ``value``);
        - t = ``target``, ρ = ``fraction``, B the batch size (batches are drawn at random, so the first rows
          are a random subset);
        - the rest of the batch keeps the main task, so the model stays accurate on clean inputs and the
          update looks like an honest one.

    Model replacement: ``boost`` (β) scales the Δ the attacker trained before it is committed, Δ' = β·Δ;
    Bagdasaryan et al. use β = n/η to replace the global model in one round. The swarm peer and the benchmark
    apply it through :func:`~p2p_guard.attacks.apply.attacked_update` (any data attack with a ``boost``
    attribute); β = 1 (default) is a pure data attack. A boosted Δ is as easy to see as ``scale``; the default
    keeps the attack stealthy.

    The attack success rate (reported apart from accuracy) is the fraction of :meth:`triggered_test_inputs`
    classified as ``target``.

    Knowledge: its own data and the task's input format; nothing about other peers or the guard.

    Args:
        target: the class t triggered inputs are relabelled to, ``>= 0`` (0).
        fraction: ρ, the fraction of each batch poisoned, in ``(0, 1]`` (0.5).
        size: trigger side in pixels, ``>= 1``; ``None`` for max(2, ⌊s/8⌋).
        value: trigger pixel value (1.0).
        position: where the trigger goes, ``"corner"`` (bottom-right, on background: the default) or
            ``"centre"`` (on the strokes, where clean inputs are active).
        boost: β, the factor on the committed Δ, ``> 0`` (1).

    Raises:
        ValueError: on a parameter out of range (the message names it).

    References:
        Tianyu Gu, Brendan Dolan-Gavitt, Siddharth Garg. BadNets: Identifying Vulnerabilities in the Machine
        Learning Model Supply Chain. arXiv:1708.06733, 2017.
        Eugene Bagdasaryan, Andreas Veit, Yiqing Hua, Deborah Estrin, Vitaly Shmatikov. How To Backdoor
        Federated Learning. AISTATS 2020. arXiv:1807.00459.
    """

    kind: ClassVar[str] = "data"
    target: int = 0
    fraction: float = 0.5
    size: int | None = None
    value: float = 1.0
    position: str = "corner"
    boost: float = 1.0

    def __post_init__(self) -> None:
        """Check the fields (ValueError naming the field and its value)."""
        check_int("target", self.target, minimum=0)
        if check_real("fraction", self.fraction, minimum=0.0) > 1.0:
            raise ValueError(f"fraction must be in (0, 1], got {self.fraction!r}")
        if self.size is not None:
            check_int("size", self.size, minimum=1)
        check_real("value", self.value, minimum=-math.inf)
        _check_position(self.position)
        check_real("boost", self.boost, minimum=0.0)

    def apply_trigger(self, x: torch.Tensor) -> torch.Tensor:
        """:func:`apply_trigger` with this attack's ``size``, ``value`` and ``position``."""
        return apply_trigger(x, size=self.size, value=self.value, position=self.position)

    def transform(
        self, x: torch.Tensor, y: torch.Tensor, num_classes: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Poison one batch.

        Args:
            x: float images ``(B, s²)`` or ``(B, ..., s, s)``; not mutated.
            y: ``(B,)`` integer labels in ``[0, num_classes)``; not mutated.
            num_classes: C, ``> target``.

        Returns:
            ``(x', y')``, new tensors of the shapes and dtypes of ``x`` and ``y``.

        Raises:
            ValueError: on labels that are not integers in range, a target ``>= num_classes``, a batch whose
                inputs and labels differ in length, or inputs that are not square images.
        """
        _check_labels(y, num_classes)
        if self.target >= num_classes:
            raise ValueError(f"target must be < num_classes={num_classes}, got {self.target}")
        if y.dim() != 1 or len(x) != len(y):
            raise ValueError(
                f"expected (B, ...) inputs and (B,) labels, got {tuple(x.shape)} and {tuple(y.shape)}"
            )
        k = int(self.fraction * len(y))
        x_out, y_out = x.clone(), y.clone()
        if k:
            x_out[:k] = self.apply_trigger(x[:k])
            y_out[:k] = self.target
        return x_out, y_out

    def triggered_test_inputs(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """The inputs on which the attack success rate is measured: non-target test inputs, triggered.

        ASR = (1/|S|) Σ_{b ∈ S} 1[argmax model(T(x_b)) = t],  S = {b : y_b ≠ t}

        Args:
            x: test images ``(N, s²)`` or ``(N, ..., s, s)``.
            y: ``(N,)`` integer test labels.

        Returns:
            ``(|S|, ...)`` triggered inputs, dtype of ``x`` (empty when every label is the target).
        """
        if y.dim() != 1 or len(x) != len(y):
            raise ValueError(
                f"expected (N, ...) inputs and (N,) labels, got {tuple(x.shape)} and {tuple(y.shape)}"
            )
        return self.apply_trigger(x[y != self.target])
