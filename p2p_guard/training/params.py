"""Model parameters as one flat float32 vector, the unit every update, hash and codec works on.

The order is ``model.parameters()`` order (registration order; a parameter shared by two modules appears
once). Buffers are not included: the built-in models have none, and a task whose model keeps state in buffers
(e.g. BatchNorm running statistics) must keep them out of training or synchronise them itself.
"""

from __future__ import annotations

import logging

import torch
from torch import Tensor, nn

__all__ = ["flatten", "load_flat", "num_params", "param_shapes", "raw_bytes"]

logger = logging.getLogger(__name__)


def raw_bytes(vector: Tensor) -> memoryview:
    """The raw bytes of a CPU tensor in native byte order (little-endian on every supported machine), no copy.

    A read-only byte view (``format "B"``, ``len`` in bytes) of the tensor's own memory, equal to
    ``vector.numpy().tobytes()`` but without the copy; it keeps the tensor's memory alive. For a tensor that is
    replaced, never changed in place (θ, the outer momentum b, a mixing step's state): what a served state was,
    it stays.

    Args:
        vector: a contiguous CPU tensor without grad.

    Returns:
        A read-only ``memoryview`` of ``vector.numel() · vector.element_size()`` bytes.

    Raises:
        ValueError: ``vector`` is not contiguous.
    """
    if not vector.is_contiguous():
        raise ValueError("raw_bytes needs a contiguous tensor")
    return vector.detach().reshape(-1).view(torch.uint8).numpy().data.toreadonly()


def flatten(model: nn.Module) -> Tensor:
    """Copy the model's parameters into one vector.

    Args:
        model: Any module (on any device, any floating dtype).

    Returns:
        ``(d,)`` float32 CPU tensor, a copy (later changes to the model do not show in it), detached.
    """
    parts = [p.detach().reshape(-1).to(device="cpu", dtype=torch.float32) for p in model.parameters()]
    if not parts:
        return torch.zeros(0, dtype=torch.float32)
    return torch.cat(parts)


def load_flat(model: nn.Module, vector: Tensor) -> None:
    """Overwrite the model's parameters, in place, with the values of a flat vector.

    The copy is made under ``torch.no_grad()`` (autograd does not record it), converting to each parameter's
    device and dtype. Optimiser state that refers to the parameters stays valid (same tensor objects).

    Args:
        model: The module to write into.
        vector: ``(d,)`` floating tensor, ``d`` = the model's number of parameters, in :func:`flatten` order.

    Raises:
        ValueError: If ``vector`` is not 1-D floating point of the right length.
    """
    expected = num_params(model)
    if vector.dim() != 1 or not vector.is_floating_point() or vector.numel() != expected:
        raise ValueError(
            f"expected a 1-D floating vector of {expected} values, got dtype {vector.dtype} shape "
            f"{tuple(vector.shape)}"
        )
    offset = 0
    with torch.no_grad():
        for p in model.parameters():
            n = p.numel()
            p.copy_(vector[offset : offset + n].view_as(p))
            offset += n


def param_shapes(model: nn.Module) -> tuple[tuple[int, ...], ...]:
    """Shapes of the model's parameters, in :func:`flatten` order (for the update envelope).

    Args:
        model: Any module.

    Returns:
        One shape tuple per parameter.
    """
    return tuple(tuple(int(s) for s in p.shape) for p in model.parameters())


def num_params(model: nn.Module) -> int:
    """``d``, the length of :func:`flatten`'s vector.

    Args:
        model: Any module.

    Returns:
        Total number of parameter elements.
    """
    return sum(p.numel() for p in model.parameters())
