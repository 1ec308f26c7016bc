"""Checking bootstrap and relay multiaddrs with hivemind's own parser, without importing hivemind.

hivemind 1.1.12 parses multiaddrs with its own copy of py-multiaddr 0.0.9 (``hivemind/utils/multiaddr``: pure
Python, on ``varint``, ``netaddr``, ``idna``, ``base58`` and ``py-cid``; there is no separate ``multiaddr``
distribution installed). Importing it the usual way (``hivemind.utils.multiaddr``) first runs
``hivemind/__init__``, which imports all of hivemind and torch: 5 to 10 s on a loaded two-core machine, for a
check of a typo. :func:`check_initial_peers` loads that same copy on its own (about 0.1 s), under the private
name :data:`PRIVATE_NAME`, so the CLI's early check accepts and rejects exactly what the peer's DHT will. Once
hivemind itself is imported, its module is used instead; if hivemind's layout ever changes so that the copy is not
found at its file path, hivemind is imported after all (slow, never wrong).
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

import base58

__all__ = ["PRIVATE_NAME", "check_initial_peers"]

PRIVATE_NAME = "_p2p_guard_hivemind_multiaddr"
"""The ``sys.modules`` name under which hivemind's copy of py-multiaddr is loaded when hivemind is not."""

_HIVEMIND_NAME = "hivemind.utils.multiaddr"


def _multiaddr_module() -> ModuleType:
    """The ``hivemind.utils.multiaddr`` package: hivemind's own once imported, else the same files loaded alone."""
    for name in (_HIVEMIND_NAME, PRIVATE_NAME):
        module = sys.modules.get(name)
        if module is not None:
            return module
    spec = importlib.util.find_spec("hivemind")  # a top-level name: found, not imported
    locations = list(spec.submodule_search_locations or ()) if spec is not None else []
    package = Path(locations[0], "utils", "multiaddr") if locations else None
    if package is None or not (package / "__init__.py").is_file():
        return importlib.import_module(_HIVEMIND_NAME)  # layout changed: the slow way, same parser
    private = importlib.util.spec_from_file_location(PRIVATE_NAME, package / "__init__.py",
                                                     submodule_search_locations=[str(package)])
    if private is None or private.loader is None:
        return importlib.import_module(_HIVEMIND_NAME)
    module = importlib.util.module_from_spec(private)
    sys.modules[PRIVATE_NAME] = module  # its relative imports (codecs, protocols) resolve through this entry
    try:
        private.loader.exec_module(module)
    except BaseException:
        del sys.modules[PRIVATE_NAME]
        raise
    return module


def check_initial_peers(maddrs: Sequence[str], *, what: str = "--initial-peers") -> None:
    """Check that every bootstrap (or relay) address is a multiaddr ending in ``/p2p/<PeerID>``.

    The check ``p2p_guard.swarm.dht`` has always made (hivemind's ``Multiaddr``, ``value_for_protocol("p2p")``,
    then ``PeerID.from_base58``, which is ``base58.b58decode``), with hivemind's parser loaded as the module
    docstring says: no torch, no hivemind.

    Args:
        maddrs: the addresses.
        what: the setting they come from, for the message.

    Raises:
        ValueError: naming the first malformed address.
    """
    if not maddrs:
        return
    multiaddr_class = _multiaddr_module().Multiaddr
    for text in maddrs:
        try:
            maddr = multiaddr_class(text)
            peer = maddr.value_for_protocol("p2p")
            base58.b58decode(peer)  # what hivemind's PeerID.from_base58 does
        except Exception as e:  # noqa: BLE001 - the multiaddr parser raises many types
            raise ValueError(f"bad {what} address {text!r}: expected /ip4/HOST/tcp/PORT/p2p/PEERID "
                             f"as printed by `p2p-guard bootstrap` ({type(e).__name__})") from None
