"""Unit tests for ``SwarmDHT.read_expirations`` and ``records.presence_stored_at`` (over a fake ``DHTNode``)."""

from __future__ import annotations

import asyncio
from typing import Any

from hivemind.utils import ValueWithExpiration

from p2p_guard.swarm.dht import SwarmDHT
from p2p_guard.swarm.records import PRESENCE_TTL_S, presence_key, presence_stored_at


class FakeNode:
    """``get(key, latest=True)`` answers what ``found`` holds for ``key``; raises when ``fail`` is set."""

    def __init__(self, found: dict[str, Any], fail: bool = False) -> None:
        self.found = found
        self.fail = fail

    async def get(self, key: str, latest: bool = False) -> Any:
        if self.fail:
            raise TimeoutError("no replica answered")
        return self.found.get(key)


def _dht(found: dict[str, Any], fail: bool = False) -> SwarmDHT:
    return SwarmDHT(FakeNode(found, fail), p2p=None)  # type: ignore[arg-type]


def test_presence_stored_at_is_each_values_expiration_less_the_presence_ttl() -> None:
    key = presence_key("run")
    subkeys = {
        "a": ValueWithExpiration(b"presence-a", 1030.0),
        "b": ValueWithExpiration(b"presence-b", 1012.5),
        "not-bytes": ValueWithExpiration(["a", "list"], 1040.0),  # dropped, as read() drops it
        7: ValueWithExpiration(b"int subkey", 1040.0),
    }
    dht = _dht({key: ValueWithExpiration(subkeys, 1040.0)})
    assert asyncio.run(dht.read_expirations(key)) == {"a": 1030.0, "b": 1012.5}
    assert asyncio.run(dht.read(key)) == {"a": b"presence-a", "b": b"presence-b"}
    assert asyncio.run(presence_stored_at(dht, "run")) == {"a": 1030.0 - PRESENCE_TTL_S, "b": 1012.5 - PRESENCE_TTL_S}


def test_a_missing_key_a_non_dict_value_or_a_failed_read_is_empty() -> None:
    key = presence_key("run")
    assert asyncio.run(_dht({}).read_expirations(key)) == {}
    assert asyncio.run(_dht({key: ValueWithExpiration(b"flat", 1.0)}).read_expirations(key)) == {}
    assert asyncio.run(_dht({key: ValueWithExpiration({"a": ValueWithExpiration(b"x", 1.0)}, 1.0)},
                            fail=True).read_expirations(key)) == {}
