"""A failed peer start leaves no new identity file behind (swarm.start_identity); a good start writes it."""

from __future__ import annotations

import asyncio
import os
import stat
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from hivemind.p2p import P2PDaemonError

from p2p_guard.identity import Identity
from p2p_guard.swarm import peer as peer_module
from p2p_guard.swarm.config import PeerConfig
from p2p_guard.swarm.start_identity import StartIdentity

BOOTSTRAP = "/ip4/127.0.0.1/tcp/1/p2p/" + Identity.from_seed(b"\x07" * 32).peer_id_b58


class _Reached(Exception):
    """Raised by a stand-in right after the DHT came up, to end ``_main`` there."""


class _FakeDHT:
    p2p = None

    async def shutdown(self) -> None:
        return None


@pytest.fixture
def seen(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """Stand-ins for the task, model and metrics; ``seen`` records the key file p2pd was handed."""
    seen: dict[str, Any] = {}
    monkeypatch.setattr(peer_module, "load_task", lambda spec: object())
    model = SimpleNamespace(numel=0, shapes=(), shard=SimpleNamespace(num_samples=0))
    monkeypatch.setattr(peer_module, "LocalModel", lambda *a, **k: model)
    monkeypatch.setattr(peer_module, "check_model_fits", lambda *a: None)  # the stand-in model has no size

    def no_metrics(*args: Any) -> None:
        raise _Reached

    monkeypatch.setattr(peer_module, "start_metrics", no_metrics)
    return seen


def _config(tmp_path: Path) -> PeerConfig:
    return PeerConfig(initial_peers=(BOOTSTRAP,), identity=str(tmp_path / "keys" / "peer_identity.key"))


def _run_main(config: PeerConfig) -> None:
    asyncio.run(peer_module._main(config, False, asyncio.Event()))


def test_an_unreachable_bootstrap_leaves_no_identity_file(tmp_path: Path, seen: dict[str, Any],
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    async def unreachable(*, identity_path: str, **kwargs: Any) -> Any:
        seen["key"] = Identity.load(identity_path)
        seen["path"] = identity_path
        raise P2PDaemonError("cannot reach any of the --initial-peers")

    monkeypatch.setattr(peer_module, "start_dht", unreachable)
    config = _config(tmp_path)
    with pytest.raises(P2PDaemonError):
        _run_main(config)
    assert not Path(config.identity).exists()
    assert not Path(config.identity).parent.exists()
    assert not Path(seen["path"]).exists()  # the scratch copy p2pd read is gone too


def test_a_task_that_fails_to_build_leaves_no_identity_file(tmp_path: Path, seen: dict[str, Any],
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    def bad_task(spec: str) -> Any:
        raise ValueError("task digits: data not found")

    monkeypatch.setattr(peer_module, "load_task", bad_task)
    config = _config(tmp_path)
    with pytest.raises(ValueError, match="data not found"):
        _run_main(config)
    assert not Path(config.identity).exists()


def test_a_started_dht_writes_the_key_it_started_with(tmp_path: Path, seen: dict[str, Any],
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    async def up(*, identity_path: str, **kwargs: Any) -> Any:
        seen["key"] = Identity.load(identity_path)
        seen["path"] = identity_path
        return _FakeDHT()

    monkeypatch.setattr(peer_module, "start_dht", up)
    config = _config(tmp_path)
    with pytest.raises(_Reached):
        _run_main(config)
    written = Identity.load(config.identity)
    assert written.peer_id == seen["key"].peer_id
    assert stat.S_IMODE(os.stat(config.identity).st_mode) == 0o600
    assert seen["path"] != config.identity and not Path(seen["path"]).exists()


def test_an_existing_key_file_is_used_in_place(tmp_path: Path, seen: dict[str, Any],
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    config = _config(tmp_path)
    before = Identity.load_or_create(config.identity)
    content = Path(config.identity).read_bytes()

    async def unreachable(*, identity_path: str, **kwargs: Any) -> Any:
        seen["path"] = identity_path
        raise P2PDaemonError("cannot reach any of the --initial-peers")

    monkeypatch.setattr(peer_module, "start_dht", unreachable)
    with pytest.raises(P2PDaemonError):
        _run_main(config)
    assert seen["path"] == config.identity
    assert Path(config.identity).read_bytes() == content
    assert StartIdentity(config.identity).identity.peer_id == before.peer_id


def test_keep_refuses_a_file_another_process_created_meanwhile(tmp_path: Path) -> None:
    path = tmp_path / "peer_identity.key"
    starting = StartIdentity(path)
    other = Identity.load_or_create(path)
    with pytest.raises(ValueError, match="another process created this file"):
        starting.keep()
    assert Identity.load(path).peer_id == other.peer_id
    assert not starting.key_path.exists()


def test_keep_logs_the_new_identity_its_path_and_peer_id(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A new key file means a new PeerID: said at INFO (the default level), with the path and the PeerID."""
    path = tmp_path / "peer_identity.key"
    starting = StartIdentity(path)
    with caplog.at_level("INFO", logger="p2p_guard"):
        starting.keep()
        starting.keep()  # once only
    assert [(r.levelname, r.getMessage()) for r in caplog.records] == [
        ("INFO", f"created a new identity at {path} (PeerID {starting.identity.peer_id_b58}); keep this file: it is "
                 "this peer's identity")]


def test_the_peer_command_creates_no_identity_in_a_missing_directory(tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """A mistyped --identity folder is a usage error (exit 2), not a new PeerID in a new folder."""
    from p2p_guard.cli.main import main
    from p2p_guard.cli.preflight import check_identity_file

    path = tmp_path / "keys" / "peer0.key"
    assert main(["peer", "--initial-peers", BOOTSTRAP, "--identity", str(path), "--port", "0"]) == 2
    assert capsys.readouterr().err == (
        f"p2p-guard peer: error: --identity {path}: no such directory {path.parent} (a new identity, with a new "
        "PeerID, is created only in an existing directory; check the path)\n")
    assert list(tmp_path.iterdir()) == []
    check_identity_file(path)  # a bootstrap node's (its default bootstrap/identity.key): its folder is created
    check_identity_file(tmp_path / "peer0.key", create_folder=False)  # an existing folder: created on start


def test_the_bootstrap_command_creates_no_identity_in_a_missing_directory_but_its_default(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """A mistyped bootstrap --identity folder was created with a new key: every multiaddr handed out broke."""
    from p2p_guard.cli import bootstrap_cmd
    from p2p_guard.cli.main import main

    path = tmp_path / "nodir" / "b.key"
    assert main(["bootstrap", "--identity", str(path), "--host", "127.0.0.1", "--port", "0"]) == 2
    assert capsys.readouterr().err == (
        f"p2p-guard bootstrap: error: --identity {path}: no such directory {path.parent} (a new identity, with a "
        "new PeerID, is created only in an existing directory; check the path)\n")
    assert list(tmp_path.iterdir()) == []
    started: list[str] = []
    monkeypatch.setattr("p2p_guard.swarm.bootstrap.run_bootstrap", lambda identity_path, **_: started.append(
        identity_path) or 0)
    monkeypatch.chdir(tmp_path)  # the default, bootstrap/identity.key, gets its folder
    assert main(["bootstrap", "--host", "127.0.0.1", "--port", "0"]) == 0
    assert started == [bootstrap_cmd.BootstrapConfig.identity]


def test_a_key_created_on_first_start_is_locked_until_released(tmp_path: Path) -> None:
    """README: a second peer on a running peer's key is refused at start (exit 2). A peer whose key was created on
    its first start (the README's own volunteer flow) held no lock: a second `p2p-guard peer --identity` on it
    started, and the first stopped at its next commit as 'another session of this identity' (helper-57)."""
    from p2p_guard.cli.preflight import lock_identity

    path = tmp_path / "peer_identity.key"
    starting = StartIdentity(path)
    starting.keep()
    with pytest.raises(ValueError, match="another peer or bootstrap node on this machine is running"):
        lock_identity(path)
    starting.release()
    starting.release()  # idempotent
    with lock_identity(path):
        pass


def test_the_peer_releases_the_lock_on_its_new_key_when_it_stops(tmp_path: Path, seen: dict[str, Any],
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    from p2p_guard.cli.preflight import lock_identity

    held: list[bool] = []

    async def up(*, identity_path: str, **kwargs: Any) -> Any:
        return _FakeDHT()

    def metrics_seen_while_running(*args: Any) -> None:
        with pytest.raises(ValueError, match="another peer or bootstrap node"):
            lock_identity(config.identity)
        held.append(True)
        raise _Reached

    monkeypatch.setattr(peer_module, "start_dht", up)
    monkeypatch.setattr(peer_module, "start_metrics", metrics_seen_while_running)
    config = _config(tmp_path)
    with pytest.raises(_Reached):
        _run_main(config)
    assert held == [True]
    with lock_identity(config.identity):  # the peer stopped: released
        pass


def test_a_bootstrap_node_locks_the_key_it_created(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`p2p-guard bootstrap` locked only a key that existed at start; one created on its first start (README step 1)
    was free, so a second bootstrap node, or a peer, on it started (helper-57)."""
    from p2p_guard.cli.preflight import lock_identity
    from p2p_guard.swarm import bootstrap as bootstrap_module

    path = tmp_path / "identity.key"
    held: list[bool] = []

    def serve(coroutine: Any) -> None:
        coroutine.close()
        with pytest.raises(ValueError, match="another peer or bootstrap node"):
            lock_identity(path)
        held.append(True)

    monkeypatch.setattr(bootstrap_module.asyncio, "run", serve)
    monkeypatch.setattr(bootstrap_module, "start_reaper", lambda: None)
    monkeypatch.setattr(bootstrap_module, "stop_reaper_if_clean", lambda reaper: None)
    assert bootstrap_module.run_bootstrap(identity_path=str(path), host="127.0.0.1", port=0) == 0
    assert held == [True]
    with lock_identity(path):  # released when the node stops
        pass
