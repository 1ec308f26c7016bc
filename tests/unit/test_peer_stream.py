"""Volunteers on the default ``--peer-index`` train on their own batches; explicit indices keep their numbers.

Before the fix every volunteer of ``peers/volunteer.toml`` had ``peer_index = 0``: one shard, one batch stream,
bit-identical updates, and each rejected the other as a ``duplicate``.
"""

from __future__ import annotations

import asyncio
import hashlib
import tomllib
from pathlib import Path

import pytest
import torch

from p2p_guard.identity import Identity
from p2p_guard.swarm.config import PeerConfig
from p2p_guard.swarm.peer import Peer, build_local_model
from p2p_guard.tasks import load_task
from p2p_guard.training.local import LocalModel, round_generator
from p2p_guard.training.streams import PeerStream, derived_shard_index, peer_stream

STEPS = 3


def _identity(byte: int) -> Identity:
    return Identity.from_seed(bytes([byte]) * 32)


def _peer(config: PeerConfig, identity: Identity) -> Peer:
    """A ``Peer`` as ``run_peer`` builds it, with no network (the inner phase needs none)."""
    local = build_local_model(config, identity, load_task(config.task))
    return Peer(config, identity, local, None, None, None, None)  # type: ignore[arg-type]


def _first_update(config: PeerConfig, identity: Identity) -> torch.Tensor:
    return asyncio.run(_peer(config, identity).inner(0)).delta


def _config(**kw: object) -> PeerConfig:
    return PeerConfig(run_id="stream-test", num_peers=3, inner_steps=STEPS, device="cpu", reputation=False,
                      **kw)  # type: ignore[arg-type]


def test_two_volunteers_on_default_configs_send_different_first_updates() -> None:
    a, b = _first_update(_config(), _identity(1)), _first_update(_config(), _identity(2))
    assert not torch.equal(a, b)


def test_two_volunteers_on_one_derived_shard_still_draw_their_own_batches() -> None:
    a, b = _peer(_config(), _identity(2)), _peer(_config(), _identity(3))
    assert a.local.shard.index == b.local.shard.index == 2  # SHA-256 put both PeerIDs on shard 2 of 3
    assert torch.equal(a.local.shard.train, b.local.shard.train)
    assert not torch.equal(asyncio.run(a.inner(0)).delta, asyncio.run(b.inner(0)).delta)


def test_a_volunteer_on_the_default_config_repeats_its_stream_with_the_same_key() -> None:
    """A restart with the same identity key resumes the same shard and batches."""
    config = _config()
    assert torch.equal(_first_update(config, _identity(1)), _first_update(config, _identity(1)))
    peer = _peer(config, _identity(1))
    assert peer.stream == PeerStream(0, peer.me, derived=True)
    assert peer.local.shard.index == 0


def test_derived_shard_index_is_sha256_of_the_peer_id_mod_num_peers() -> None:
    peer_id = _identity(1).peer_id_b58
    assert peer_id == "12D3KooWK99VoVxNE7XzyBwXEzW7xhK7Gpv85r9F3V3fyKSUKPH5"
    assert [derived_shard_index(peer_id, n) for n in (1, 2, 3, 7)] == [0, 1, 0, 5]
    assert peer_stream(None, peer_id, 7) == PeerStream(5, peer_id, derived=True)
    assert peer_stream(6, peer_id, 7) == PeerStream(6, 6, derived=False)


@pytest.mark.parametrize(("index", "peer_id", "num_peers", "message"), [
    (None, "12D3KooWabc", 0, "num_peers must be >= 1; got 0"),
    (None, "", 3, "peer_id must not be empty"),
    (3, "12D3KooWabc", 3, "peer_index must be in [0, num_peers); got peer_index=3, num_peers=3"),
    (-1, "12D3KooWabc", 3, "peer_index must be in [0, num_peers); got peer_index=-1, num_peers=3"),
])
def test_peer_stream_refuses(index: int | None, peer_id: str, num_peers: int, message: str) -> None:
    with pytest.raises(ValueError) as raised:
        peer_stream(index, peer_id, num_peers)
    assert str(raised.value) == message


def test_the_default_config_sets_no_index_and_the_volunteer_file_none() -> None:
    assert PeerConfig().peer_index is None
    volunteer = (Path(__file__).parents[2] / "peers" / "volunteer.toml").read_text()
    assert "peer_index" not in tomllib.loads(volunteer)["peer"]


@pytest.mark.parametrize("index", [0, 1, 2])
def test_an_explicit_peer_index_keeps_the_shard_and_batches_it_had(index: int) -> None:
    """The numbers of ``simulate``, the benchmarks and the README's ``--peer-index`` runs stay as they were."""
    config = _config(peer_index=index)
    peer = _peer(config, _identity(7))
    # the seeds of its generators, taken before peers without an index got their own streams
    assert [peer._generator(0, salt).initial_seed() for salt in (1, 4)] == {
        0: [6175512913209431784, 551774901936877365],
        1: [1863726254234072594, 4928724821586364908],
        2: [4504012946818063410, 3443991300133556320],
    }[index]
    # its update is the one the shard of ``index`` and ``round_generator(run, seed, index, …)`` give, on any key
    by_hand = LocalModel(load_task("digits"), seed=0, num_shards=3, shard_index=index, partition="iid")
    expected, _ = by_hand.train_round(STEPS, round_generator("stream-test", 0, index, 0, 1))
    assert torch.equal(asyncio.run(peer.inner(0)).delta, expected)
    assert torch.equal(_first_update(config, _identity(8)), expected)
    shard = peer.local.shard
    assert shard.index == index
    assert hashlib.sha256(shard.train.numpy().tobytes() + shard.holdout.numpy().tobytes()).hexdigest()[:16] == {
        0: "626cd9ec0917e240", 1: "d8927cdf4eb1a65b", 2: "fbe2dcd29c360d47",
    }[index]
