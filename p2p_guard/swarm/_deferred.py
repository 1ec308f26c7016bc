"""Defer importing a module that a library imports at import time but the swarm code never uses.

``import hivemind`` (which ``import hivemind.p2p`` and ``import hivemind.dht`` run first) imports
``hivemind.averaging``, whose ``load_balancing`` module imports ``scipy.optimize`` at its top for one function
(``linprog`` in ``load_balance_peers``, used by hivemind's averager). The swarm uses only hivemind's ``P2P`` and
``DHTNode``, yet ``scipy.optimize`` costs every peer process about 25 MiB of private memory.

:func:`defer_import` puts a placeholder module in ``sys.modules`` (``importlib.util.LazyLoader`` does not
help here: an ``import`` statement reads ``__spec__``, which makes a lazy module load at once). The placeholder
has a ``__spec__`` that is not initialising (and the real ``__file__``), so ``import scipy.optimize`` takes it
as imported; the first read of any other attribute (``scipy.optimize.linprog``, ``__path__`` for a submodule,
``from scipy.optimize import x``) imports the real module, replaces the placeholder in ``sys.modules`` and on
the parent package, and answers from the real module, so code that does use it works unchanged, only later.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import sys
import types
from typing import Any

__all__ = ["defer_import"]


class _Deferred(types.ModuleType):
    """Placeholder for module ``name``: imports the real one when an attribute it lacks is first read."""

    def __init__(self, name: str, origin: str | None) -> None:
        """A module object with ``__name__``, ``__file__`` and a non-initialising ``__spec__``, nothing else.

        ``__file__`` (the real module's file) is there because scanners such as ``inspect.getmodule`` (which
        torch runs at import time) ask every module in ``sys.modules`` for it; ``__path__`` is left out, so
        importing a submodule imports the real package first.
        """
        super().__init__(name)
        self.__spec__ = importlib.machinery.ModuleSpec(name, None)
        if origin is not None:
            self.__file__ = origin

    def __getattr__(self, attr: str) -> Any:
        """Import the real module (once) and return its attribute ``attr``."""
        name = self.__name__
        if sys.modules.get(name) is self:
            del sys.modules[name]
        real = importlib.import_module(name)  # also sets it on the parent package
        return getattr(real, attr)


def defer_import(name: str) -> bool:
    """Register a placeholder for the dotted module ``name`` unless it is imported already or not installed.

    The parent package is imported now (for ``scipy.optimize``: ``scipy`` itself, which is light).

    Args:
        name: a dotted module name, e.g. ``"scipy.optimize"``.

    Returns:
        True if a placeholder was registered, False if the module was already imported or cannot be found.
    """
    if name in sys.modules:
        return False
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return False
    if spec is None or name in sys.modules:
        return False
    placeholder = _Deferred(name, spec.origin)
    sys.modules[name] = placeholder
    parent, _, child = name.rpartition(".")
    if parent:
        setattr(sys.modules[parent], child, placeholder)
    return True
