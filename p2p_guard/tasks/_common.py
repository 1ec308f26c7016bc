"""Helpers shared by the built-in tasks: generator-driven initialisation and evaluation plumbing."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator

import torch
from torch import Tensor, nn

__all__ = [
    "DeferredEmbedding",
    "DeferredLinear",
    "check_batch_size",
    "evaluating",
    "init_generator",
    "linear_default_",
]


def init_generator(seed: int) -> torch.Generator:
    """A CPU generator seeded with ``seed``, independent of the global RNG.

    Args:
        seed: Integer seed (any value ``torch.Generator.manual_seed`` accepts).

    Returns:
        The generator.

    Raises:
        ValueError: If ``seed`` is not an integer.
    """
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise ValueError(f"seed={seed!r} must be an integer")
    generator = torch.Generator(device="cpu")
    generator.manual_seed(seed)
    return generator


class DeferredLinear(nn.Linear):
    """``nn.Linear`` whose constructor draws nothing: its storage is left for ``build_model`` to fill.

    ``nn.Linear.__init__`` calls ``reset_parameters``, which draws from the global RNG; here that call does
    nothing, so building a model neither reads nor advances the global RNG. Fill it with
    :func:`linear_default_` or another initialiser that takes a ``generator``.
    """

    def reset_parameters(self) -> None:
        """Leave the parameters uninitialised (see the class docstring)."""


class DeferredEmbedding(nn.Embedding):
    """``nn.Embedding`` whose constructor draws nothing (as :class:`DeferredLinear`)."""

    def reset_parameters(self) -> None:
        """Leave the parameters uninitialised (see the class docstring)."""


def linear_default_(layer: nn.Linear, generator: torch.Generator) -> None:
    """PyTorch's default ``nn.Linear`` initialisation, drawn from ``generator``.

    Weight and bias ~ U(−1/√fan_in, 1/√fan_in) (what ``kaiming_uniform_(a=√5)`` amounts to).

    Args:
        layer: The layer to fill in place.
        generator: Source of randomness.
    """
    bound = 1.0 / math.sqrt(layer.in_features)
    layer.weight.uniform_(-bound, bound, generator=generator)
    if layer.bias is not None:
        layer.bias.uniform_(-bound, bound, generator=generator)


def check_batch_size(batch_size: int) -> None:
    """Raise ``ValueError`` unless ``batch_size`` is an integer ``>= 1``.

    Args:
        batch_size: The batch size to check.

    Raises:
        ValueError: If it is not a positive integer.
    """
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size={batch_size!r} must be an integer >= 1")


@contextlib.contextmanager
def evaluating(model: nn.Module) -> Iterator[nn.Module]:
    """Context manager: eval mode and no autograd inside, the model's previous train/eval mode restored after.

    Args:
        model: The module to evaluate.

    Yields:
        ``model``, in eval mode.
    """
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            yield model
    finally:
        model.train(was_training)
