"""Unit tests of the peer settings (``swarm/config.py``) and of every shipped TOML file, read by the real CLI.

No network: the CLI resolvers only parse files and flags; nothing here starts a node.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

import pytest

from p2p_guard.cli import bootstrap_cmd, peer_cmd
from p2p_guard.cli.main import build_parser
from p2p_guard.protocol import CODECS
from p2p_guard.swarm.config import PeerConfig, config_from_mapping

REPO = Path(__file__).resolve().parents[2]
MADDR = "/ip4/127.0.0.1/tcp/31337/p2p/12D3KooWDpJ7As7BWAwRMfu1VU2WCqNjvq387JEYKDBj4kx6nXTN"
TOML_FILES = sorted([*REPO.glob("bootstrap/*.toml"), *REPO.glob("peers/*.toml")])


def peer_args(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(["peer", *argv])


def bootstrap_args(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(["bootstrap", *argv])


class TestPeerConfigValidation:
    def test_defaults_are_valid(self) -> None:
        config = PeerConfig()
        assert config.codec in CODECS
        assert config.outer_lr == 0.7
        assert config.outer_momentum == 0.9

    def test_read_limit_defaults_cut_a_hopeless_sender_well_before_the_fetch_deadline(self) -> None:
        config = PeerConfig()
        assert (config.request_timeout_s, config.fetch_idle_timeout_s, config.min_fetch_bytes_per_s) == \
            (10.0, 5.0, 64 * 1024)
        assert config.fetch_idle_timeout_s < config.fetch_timeout_s / 2

    @pytest.mark.parametrize(("changes", "name"), [
        ({"num_peers": 0}, "num_peers"),
        ({"num_peers": -3, "peer_index": 0}, "num_peers"),
        ({"min_peers": 0}, "min_peers"),
        ({"min_peers": -1}, "min_peers"),
        ({"peer_index": -1}, "peer_index"),
        ({"peer_index": 1, "num_peers": 1}, "peer_index"),
        ({"peer_index": 5, "num_peers": 3}, "peer_index"),
        ({"rounds": -1}, "rounds"),
        ({"inner_steps": 0}, "inner_steps"),
        ({"inner_steps": -5}, "inner_steps"),
        ({"quorum_fraction": 0.0}, "quorum_fraction"),
        ({"quorum_fraction": -0.5}, "quorum_fraction"),
        ({"quorum_fraction": 1.01}, "quorum_fraction"),
        ({"quorum_fraction": math.nan}, "quorum_fraction"),
        ({"grace_s": 0.0}, "grace_s"),
        ({"grace_s": -1.0}, "grace_s"),
        ({"commit_timeout_s": 0}, "commit_timeout_s"),
        ({"reveal_wait_s": 0.0}, "reveal_wait_s"),
        ({"reveal_wait_s": -1.0}, "reveal_wait_s"),
        ({"reveal_wait_s": math.inf}, "reveal_wait_s"),
        ({"reveal_wait_s": math.nan}, "reveal_wait_s"),
        ({"reveal_wait_s": "10"}, "reveal_wait_s"),
        ({"fetch_timeout_s": -0.1}, "fetch_timeout_s"),
        ({"join_timeout_s": 0.0}, "join_timeout_s"),
        ({"max_payload_bytes": 0}, "max_payload_bytes"),
        ({"max_payload_bytes": -1}, "max_payload_bytes"),
        ({"max_envelope_bytes": 0}, "max_envelope_bytes"),
        ({"request_timeout_s": 0.0}, "request_timeout_s"),
        ({"request_timeout_s": math.inf}, "request_timeout_s"),
        ({"fetch_idle_timeout_s": 0.0}, "fetch_idle_timeout_s"),
        ({"fetch_idle_timeout_s": -1.0}, "fetch_idle_timeout_s"),
        ({"fetch_idle_timeout_s": math.nan}, "fetch_idle_timeout_s"),
        ({"min_fetch_bytes_per_s": 0}, "min_fetch_bytes_per_s"),
        ({"min_fetch_bytes_per_s": 1.5}, "min_fetch_bytes_per_s"),
        ({"min_fetch_bytes_per_s": True}, "min_fetch_bytes_per_s"),
        ({"device": "tpu"}, "device"),
        ({"device": "CUDA"}, "device"),
        ({"port": -1}, "port"),
        ({"port": 65536}, "port"),
    ])
    def test_constructor_rejects(self, changes: dict[str, Any], name: str) -> None:
        with pytest.raises(ValueError, match=name):
            PeerConfig(**changes)

    @pytest.mark.parametrize("changes", [
        {"rounds": 0}, {"inner_steps": None}, {"inner_steps": 1}, {"quorum_fraction": 1.0},
        {"quorum_fraction": 1e-9}, {"port": 0}, {"port": 65535}, {"device": "cpu"}, {"device": "cuda"},
        {"peer_index": 2, "num_peers": 3}, {"min_peers": 1},
    ])
    def test_boundaries_accepted(self, changes: dict[str, Any]) -> None:
        PeerConfig(**changes)

    def test_reveal_wait_is_comfortably_above_the_grace_window(self) -> None:
        config = PeerConfig()
        assert config.reveal_wait_s == 10.0
        assert config.reveal_wait_s >= 4 * config.grace_s

    def test_reveal_wait_flag(self) -> None:
        config = peer_cmd.resolve_config(peer_args("--initial-peers", MADDR, "--reveal-wait-s", "3.5"))
        assert config.reveal_wait_s == 3.5

    def test_replace_validates_again(self) -> None:
        config = PeerConfig(num_peers=3, peer_index=2)
        assert config.replace(rounds=5).rounds == 5
        with pytest.raises(ValueError, match="peer_index"):
            config.replace(num_peers=2)

    def test_frozen(self) -> None:
        config = PeerConfig()
        with pytest.raises(AttributeError):
            config.rounds = 3  # type: ignore[misc]

    def test_to_dict_is_json(self) -> None:
        config = PeerConfig(initial_peers=(MADDR,), attack="sign_flip:scale=10")
        data = config.to_dict()
        assert data["initial_peers"] == [MADDR]
        assert json.loads(json.dumps(data)) == data


class TestConfigFromMapping:
    def test_builds_a_config(self) -> None:
        config = config_from_mapping({"initial_peers": [MADDR], "rounds": 3, "codec": "fp16"})
        assert config.initial_peers == (MADDR,)
        assert config.rounds == 3
        assert config.codec == "fp16"

    def test_unknown_key(self) -> None:
        with pytest.raises(ValueError, match=r"my\.toml: unknown setting\(s\) \['lr', 'roundz'\]"):
            config_from_mapping({"roundz": 3, "lr": 0.1, "rounds": 2}, source="my.toml")

    def test_invalid_value_names_source_and_key(self) -> None:
        with pytest.raises(ValueError, match=r"my\.toml: .*rounds"):
            config_from_mapping({"rounds": -2}, source="my.toml")

    def test_type_error_becomes_value_error(self) -> None:
        with pytest.raises(ValueError, match=r"my\.toml"):
            config_from_mapping({"rounds": "ten"}, source="my.toml")

    def test_does_not_mutate_its_input(self) -> None:
        values = {"initial_peers": [MADDR]}
        config_from_mapping(values)
        assert values == {"initial_peers": [MADDR]}


class TestPeerResolver:
    def test_flags_override_the_file(self, tmp_path: Path) -> None:
        path = tmp_path / "p.toml"
        path.write_text('[peer]\nrounds = 10\nrun_id = "file-run"\n', encoding="utf-8")
        config = peer_cmd.resolve_config(peer_args("--config", str(path), "--initial-peers", MADDR,
                                                   "--rounds", "3"))
        assert config.rounds == 3
        assert config.run_id == "file-run"
        assert config.initial_peers == (MADDR,)

    def test_read_limit_flags(self) -> None:
        config = peer_cmd.resolve_config(peer_args("--initial-peers", MADDR, "--request-timeout-s", "2.5",
                                                   "--fetch-idle-timeout-s", "1.5",
                                                   "--min-fetch-bytes-per-s", "4096"))
        assert (config.request_timeout_s, config.fetch_idle_timeout_s, config.min_fetch_bytes_per_s) == \
            (2.5, 1.5, 4096)

    def test_flags_alone(self) -> None:
        config = peer_cmd.resolve_config(peer_args("--initial-peers", MADDR, MADDR, "--codec", "fp16"))
        assert config.initial_peers == (MADDR, MADDR)
        assert config.codec == "fp16"

    def test_initial_peers_required(self) -> None:
        with pytest.raises(ValueError, match="initial-peers"):
            peer_cmd.resolve_config(peer_args())

    def test_unknown_key_in_file(self, tmp_path: Path) -> None:
        path = tmp_path / "p.toml"
        path.write_text("[peer]\nspeed = 3\n", encoding="utf-8")
        with pytest.raises(ValueError, match="speed"):
            peer_cmd.resolve_config(peer_args("--config", str(path), "--initial-peers", MADDR))

    @pytest.mark.parametrize(("text", "match"), [
        ("[bootstrap]\nport = 1\n", r"no \[peer\] table"),
        ("[peer\n", "not valid TOML"),
    ])
    def test_bad_file(self, tmp_path: Path, text: str, match: str) -> None:
        path = tmp_path / "p.toml"
        path.write_text(text, encoding="utf-8")
        with pytest.raises(ValueError, match=match):
            peer_cmd.resolve_config(peer_args("--config", str(path), "--initial-peers", MADDR))

    def test_missing_file(self, tmp_path: Path) -> None:
        with pytest.raises(ValueError, match="does not exist"):
            peer_cmd.resolve_config(peer_args("--config", str(tmp_path / "nope.toml"),
                                              "--initial-peers", MADDR))


class TestBootstrapResolver:
    def test_defaults(self) -> None:
        assert bootstrap_cmd.resolve(bootstrap_args()) == bootstrap_cmd.DEFAULTS

    def test_flags_override_the_file(self, tmp_path: Path) -> None:
        path = tmp_path / "b.toml"
        path.write_text("[bootstrap]\nport = 4000\nhost = \"127.0.0.1\"\n", encoding="utf-8")
        values = bootstrap_cmd.resolve(bootstrap_args("--config", str(path), "--port", "5000"))
        assert values["port"] == 5000
        assert values["host"] == "127.0.0.1"

    def test_unknown_key(self, tmp_path: Path) -> None:
        path = tmp_path / "b.toml"
        path.write_text("[bootstrap]\nprot = 4000\n", encoding="utf-8")
        with pytest.raises(ValueError, match="prot"):
            bootstrap_cmd.resolve(bootstrap_args("--config", str(path)))


def _table_of(path: Path) -> str:
    text = path.read_text(encoding="utf-8")
    tables = [name for name in ("peer", "bootstrap") if f"[{name}]" in text]
    assert len(tables) == 1, f"{path} must hold exactly one of [peer] or [bootstrap], found {tables}"
    return tables[0]


def test_toml_files_exist() -> None:
    names = {path.relative_to(REPO).as_posix() for path in TOML_FILES}
    assert "bootstrap/bootstrap.toml" in names
    assert any(name.startswith("peers/") for name in names)


@pytest.mark.parametrize("path", TOML_FILES, ids=lambda p: p.relative_to(REPO).as_posix())
def test_shipped_toml_validates(path: Path) -> None:
    """Every shipped config goes through the very resolver the CLI uses, and its names resolve."""
    if _table_of(path) == "bootstrap":
        values = bootstrap_cmd.resolve(bootstrap_args("--config", str(path)))
        assert set(values) == set(bootstrap_cmd.DEFAULTS)
        assert isinstance(values["identity"], str) and values["identity"]
        assert isinstance(values["host"], str) and values["host"]
        assert type(values["port"]) is int and 0 <= values["port"] <= 65535
        for name in ("announce_host", "address_file"):
            assert values[name] is None or isinstance(values[name], str)
        return

    from p2p_guard.attacks import load_attack
    from p2p_guard.guard.registry import GUARD_NAMES
    from p2p_guard.tasks import TASK_NAMES
    from p2p_guard.tasks.partition import parse_partition

    config = peer_cmd.resolve_config(peer_args("--config", str(path), "--initial-peers", MADDR))
    assert config.initial_peers == (MADDR,)
    assert config.codec in CODECS
    assert config.guard in GUARD_NAMES
    assert config.task in TASK_NAMES
    parse_partition(config.partition)
    assert 1 <= len(config.run_id.encode("utf-8")) <= 256
    assert config.min_peers <= config.num_peers
    if config.attack is not None:
        load_attack(config.attack)
    # What the file says survives resolution (flags that were not given do not override it).
    from p2p_guard.cli.config_files import read_table

    for key, value in read_table(path, "peer").items():
        assert getattr(config, key) == (tuple(value) if key == "initial_peers" else value), key
