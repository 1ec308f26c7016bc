"""Helpers shared by the built-in tasks: generator-driven initialisation and evaluation plumbing."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator

import torch
from torch import Tensor, nn

__all__ = [
    "check_batch_size",
    "evaluating",
    "gather_rows",
    "init_generator",
    "linear_default_",
    "materialize",
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


def materialize(factory: Callable[[], nn.Module], init: Callable[[nn.Module], None]) -> nn.Module:
    """Build a module without touching the global RNG, then initialise it.

    The module is constructed on the ``meta`` device (no storage, no random draws), moved to CPU storage with
    ``to_empty`` and filled by ``init``, which must set every parameter and buffer.

    Args:
        factory: Builds the module's structure.
        init: Fills every parameter and buffer in place (deterministically).

    Returns:
        The initialised module on CPU, in float32 and train mode.
    """
    with torch.device("meta"):
        module = factory()
    module = module.to_empty(device="cpu")
    with torch.no_grad():
        init(module)
    return module.float().train()


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


def gather_rows(data: Tensor, index: Tensor) -> Tensor:
    """``data[index]`` for a 1-D ``int64`` index (kept as a function for clarity at call sites).

    Args:
        data: ``(N, ...)`` tensor.
        index: ``(B,)`` int64 indices into ``data``.

    Returns:
        ``(B, ...)`` rows of ``data``.
    """
    return data.index_select(0, index)
