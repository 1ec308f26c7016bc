"""The ``store``/``read`` of ``SwarmDHT`` over a dict, shared by the unit tests of the round's DHT records."""

from __future__ import annotations


class FakeDHT:
    """``{key: {subkey: value}}``; the last store under a subkey wins; ``reads`` counts reads per key."""

    def __init__(self) -> None:
        self.data: dict[str, dict[str, bytes]] = {}
        self.reads: dict[str, int] = {}

    async def store(self, key: str, subkey: str, value: bytes, ttl_s: float) -> bool:
        self.data.setdefault(key, {})[subkey] = value
        return True

    async def read(self, key: str) -> dict[str, bytes]:
        self.reads[key] = self.reads.get(key, 0) + 1
        return dict(self.data.get(key, {}))
