"""Unit tests of the settings (``swarm/config.py``, ``simulation/config.py``), of the typed config -> CLI
generator (``cli/typed_config.py``), of the up-front checks, and of every shipped TOML file, read by the real CLI.

No network: the CLI resolvers only parse files and flags; nothing here starts a node. A few tests run the CLI
in a fresh interpreter to see that a bad input is one line, exit 2, before torch or hivemind is imported.
"""

from __future__ import annotations

import argparse
import dataclasses
import enum
import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Literal

import pytest

from p2p_guard.cli import bootstrap_cmd, peer_cmd, simulate_cmd
from p2p_guard.cli.main import build_parser
from p2p_guard.cli.typed_config import add_config_flags, field_docs, flag_name, load_config, type_check
from p2p_guard.plugin_names import ATTACK_NAMES
from p2p_guard.protocol import CODECS
from p2p_guard.simulation.config import SimulationConfig
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
        assert config.outer_lr is None and config.outer_momentum is None and config.ef_decay is None  # the codec's
        assert (config.resolved_outer_lr, config.resolved_outer_momentum, config.resolved_ef_decay) == (0.7, 0.9, 1.0)

    @pytest.mark.parametrize("codec", ["fp32", "fp16", "int8", "int4"])
    def test_dense_codecs_keep_diloco_momentum_and_plain_error_feedback(self, codec: str) -> None:
        config = PeerConfig(codec=codec)
        assert (config.resolved_outer_lr, config.resolved_outer_momentum, config.resolved_ef_decay) == (0.7, 0.9, 1.0)

    @pytest.mark.parametrize("codec", ["topk", "topk:density=0.01", "topk:density=0.05"])
    def test_topk_defaults_to_sparseloco(self, codec: str) -> None:
        """SparseLoCo (arXiv:2508.15706): no outer momentum, error feedback decayed by 0.95."""
        from p2p_guard.training.outer import TOPK_OUTER_LR

        config = PeerConfig(codec=codec)
        assert (config.resolved_outer_lr, config.resolved_outer_momentum, config.resolved_ef_decay) == (
            TOPK_OUTER_LR, 0.0, 0.95)

    def test_explicit_momentum_and_decay_win_over_the_codec(self) -> None:
        config = PeerConfig(codec="topk", outer_lr=0.7, outer_momentum=0.9, ef_decay=1.0)  # the scheme before
        assert (config.resolved_outer_lr, config.resolved_outer_momentum, config.resolved_ef_decay) == (0.7, 0.9, 1.0)
        config = PeerConfig(codec="int8", outer_momentum=0.0, ef_decay=0.5)
        assert (config.resolved_outer_momentum, config.resolved_ef_decay) == (0.0, 0.5)

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
        ({"inner_steps": 1_000_001}, "inner_steps"),
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
        ({"max_parameters": 0}, "max_parameters"),
        ({"max_parameters": -1}, "max_parameters"),
        ({"max_envelope_bytes": 0}, "max_envelope_bytes"),
        ({"request_timeout_s": 0.0}, "request_timeout_s"),
        ({"request_timeout_s": math.inf}, "request_timeout_s"),
        ({"fetch_idle_timeout_s": 0.0}, "fetch_idle_timeout_s"),
        ({"fetch_idle_timeout_s": -1.0}, "fetch_idle_timeout_s"),
        ({"fetch_idle_timeout_s": math.nan}, "fetch_idle_timeout_s"),
        ({"min_fetch_bytes_per_s": 0}, "min_fetch_bytes_per_s"),
        ({"min_fetch_bytes_per_s": 1.5}, "min_fetch_bytes_per_s"),
        ({"min_fetch_bytes_per_s": True}, "min_fetch_bytes_per_s"),
        ({"outer_lr": 0.0}, "outer_lr"),
        ({"outer_lr": math.inf}, "outer_lr"),
        ({"outer_momentum": 1.0}, "outer_momentum"),
        ({"outer_momentum": -0.1}, "outer_momentum"),
        ({"ef_decay": 1.5}, "ef_decay"),
        ({"ef_decay": -0.1}, "ef_decay"),
        ({"ef_decay": math.nan}, "ef_decay"),
        ({"device": "tpu"}, "device"),
        ({"device": "CUDA"}, "device"),
        ({"port": -1}, "port"),
        ({"port": 65536}, "port"),
        ({"early_mix_steps": 0}, r"early_mix_steps must be in \[1, 8\]; got early_mix_steps=0"),
        ({"early_mix_steps": 9}, "early_mix_steps"),
        ({"early_mix_rounds": -1}, "early_mix_rounds must be >= 0"),
        ({"overlap_warmup_rounds": -1}, "overlap_warmup_rounds must be >= 0; got overlap_warmup_rounds=-1"),
        ({"codec": "topk:density=0"}, r"codec 'topk:density=0': expected topk:density=ρ with ρ in \(0, 1\]"),
        ({"codec": "int3"}, r"unknown codec 'int3'; known: fp32, fp16, int8, int4, topk"),
    ])
    def test_constructor_rejects(self, changes: dict[str, Any], name: str) -> None:
        with pytest.raises(ValueError, match=name):
            PeerConfig(**changes)

    @pytest.mark.parametrize("changes", [
        {"rounds": 0}, {"inner_steps": None}, {"inner_steps": 1}, {"quorum_fraction": 1.0},
        {"quorum_fraction": 1e-9}, {"port": 0}, {"port": 65535}, {"device": "cpu"}, {"device": "cuda"},
        {"peer_index": 2, "num_peers": 3}, {"min_peers": 1}, {"early_mix_steps": 1}, {"early_mix_steps": 8},
        {"early_mix_rounds": 0}, {"overlap": True, "overlap_warmup_rounds": 0},
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
        assert bootstrap_cmd.resolve(bootstrap_args()) == bootstrap_cmd.BootstrapConfig()
        assert bootstrap_cmd.BootstrapConfig().port == 31337

    def test_flags_override_the_file(self, tmp_path: Path) -> None:
        path = tmp_path / "b.toml"
        path.write_text("[bootstrap]\nport = 4000\nhost = \"127.0.0.1\"\n", encoding="utf-8")
        values = bootstrap_cmd.resolve(bootstrap_args("--config", str(path), "--port", "5000"))
        assert values.port == 5000
        assert values.host == "127.0.0.1"

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
        assert isinstance(values.identity, str) and values.identity
        assert isinstance(values.host, str) and values.host
        assert type(values.port) is int and 0 <= values.port <= 65535
        for name in ("announce_host", "address_file"):
            assert getattr(values, name) is None or isinstance(getattr(values, name), str)
        from p2p_guard.cli.config_files import read_table

        for key, value in read_table(path, "bootstrap").items():
            assert getattr(values, key) == value, key
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


# --- the typed config -> CLI generator (cli/typed_config.py) -------------------------------------------------------

CONFIG_CLASSES = {"peer": PeerConfig, "simulate": SimulationConfig, "bootstrap": bootstrap_cmd.BootstrapConfig}


class Colour(enum.Enum):
    RED = "red"
    BLUE = "blue"


@dataclasses.dataclass(frozen=True)
class Sample:
    """A settings class as a new field would be added to one.

    Attributes:
        flag: a switch.
        count: how many,
            over two lines.
        ratio: a number.
        name: a name (100% free text).
        where: a path.
        mode: one of two.
        colour: an enum.
        peers: some strings.
        limit: optional int (None: no limit).
        table: a mapping.

    Raises:
        ValueError: never, this entry is outside the Attributes section.
    """

    flag: bool = False
    count: int = 3
    ratio: float = 0.5
    name: str = "x"
    where: Path = Path("a/b")
    mode: Literal["fast", "slow"] = "fast"
    colour: Colour = Colour.RED
    peers: tuple[str, ...] = ()
    limit: int | None = None
    table: dict[str, int] = dataclasses.field(default_factory=dict)


def sample_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="p2p-guard sample")
    add_config_flags(parser, Sample)
    return parser


class TestGenerator:
    def test_field_docs_reads_the_attributes_section_only(self) -> None:
        docs = field_docs(Sample)
        assert list(docs) == [f.name for f in dataclasses.fields(Sample)]
        assert docs["count"] == "how many, over two lines."
        assert "ValueError" not in docs

    def test_help_is_plain_text_without_sphinx_roles(self) -> None:
        from p2p_guard.cli.typed_config import plain_text

        assert plain_text("a mix (:func:`split_attack_mix`) of ``SPEC``") == "a mix (split_attack_mix) of SPEC"
        assert plain_text(":class:`~p2p_guard.guard.Guard`, :py:meth:`a.b`") == "Guard, a.b"
        assert plain_text(":func:`the mix <split_attack_mix>`\n  and :data:`!X`") == "the mix and X"
        assert field_docs(SimulationConfig)["attack"].startswith("attack spec of the Byzantine peers")
        assert "(split_attack_mix)" in field_docs(SimulationConfig)["attack"]
        commands = build_parser()._subparsers._group_actions[0].choices  # type: ignore[union-attr]
        for command, parser in commands.items():
            for action in parser._actions:
                assert ":`" not in (action.help or "") and "``" not in (action.help or ""), (command, action.dest)

    def test_every_field_of_every_command_is_a_flag_with_its_doc_and_one_default(self) -> None:
        commands = build_parser()._subparsers._group_actions[0].choices  # type: ignore[union-attr]
        for command, cls in CONFIG_CLASSES.items():
            docs = field_docs(cls)
            actions = {a.dest: a for a in commands[command]._actions}
            for field in dataclasses.fields(cls):
                assert field.name in docs, f"{cls.__name__}.{field.name} has no entry in Attributes:"
                action = actions[field.name]
                assert flag_name(field.name) in action.option_strings
                assert action.default is argparse.SUPPRESS
                assert action.help is not None
                assert action.help.count("default") <= 1 + docs[field.name].count("default"), action.help
                if field.default is None:
                    continue
                assert action.help.count("(default: ") == 1, action.help

    def test_help_shows_real_defaults(self) -> None:
        commands = build_parser()._subparsers._group_actions[0].choices  # type: ignore[union-attr]
        helps = {a.dest: a.help or "" for a in commands["peer"]._actions}
        assert "(None: from the codec, 0.7 as in DiLoCo" in helps["outer_lr"]  # topk's differs (SparseLoCo)
        assert helps["quorum_fraction"].endswith("(default: 0.666667)")
        assert helps["max_parameters"].endswith("(default: 268435456)")
        assert helps["reputation"].endswith("(default: on)")
        assert helps["reputation_exclusion"].endswith("(default: on)")
        assert helps["task"].endswith("(default: digits)")
        assert helps["inner_steps"].endswith("(None: the task's default)")
        assert "%%" in helps["run_id"] or "%" not in helps["run_id"]
        text = " ".join(commands["simulate"].format_help().split())
        assert text.count("(default: 1200)") == 1
        assert text.count("sign_flip:scale=10") == 1

    def test_flags_of_each_type(self) -> None:
        args = sample_parser().parse_args([
            "--flag", "--count", "7", "--ratio", "2", "--name", "y", "--where", "c/d", "--mode", "slow",
            "--colour", "blue", "--peers", "p", "q", "--limit", "4", "--table", '{"a": 1}'])
        config = load_config(Sample, args=args, table="sample")
        assert config == Sample(flag=True, count=7, ratio=2.0, name="y", where=Path("c/d"), mode="slow",
                                colour=Colour.BLUE, peers=("p", "q"), limit=4, table={"a": 1})
        assert type(config.ratio) is float
        assert load_config(Sample, args=sample_parser().parse_args(["--no-flag"]), table="sample") == Sample()

    @pytest.mark.parametrize("argv", [["--count", "x"], ["--mode", "medium"], ["--colour", "green"], ["--peers"],
                                      ["--table", "{"], ["--limit"]])
    def test_bad_flag_is_a_usage_error(self, argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
        with pytest.raises(SystemExit) as exit_:
            sample_parser().parse_args(argv)
        assert exit_.value.code == 2
        assert capsys.readouterr().err.splitlines()[-1].startswith("p2p-guard sample: error: ")

    def test_toml_of_each_type_and_precedence(self, tmp_path: Path) -> None:
        path = tmp_path / "s.toml"
        path.write_text('[sample]\nflag = true\ncount = 5\nratio = 1\nwhere = "z"\nmode = "slow"\ncolour = "blue"\n'
                        'peers = ["a"]\ntable = {b = 2}\n', encoding="utf-8")
        config = load_config(Sample, args=sample_parser().parse_args(["--count", "9"]), table="sample",
                             config_path=path)
        assert config == Sample(flag=True, count=9, ratio=1.0, where=Path("z"), mode="slow", colour=Colour.BLUE,
                                peers=("a",), table={"b": 2})

    @pytest.mark.parametrize(("values", "match"), [
        ({"count": "ten"}, "count must be an integer; got 'ten'"),
        ({"count": True}, "count must be an integer; got True"),
        ({"count": 1.5}, "count must be an integer"),
        ({"flag": 1}, "flag must be true or false; got 1"),
        ({"ratio": "0.5"}, "ratio must be a number"),
        ({"ratio": float("nan")}, "ratio must be a finite number; got nan"),
        ({"mode": "medium"}, "mode must be one of 'fast', 'slow'"),
        ({"colour": "green"}, "colour must be one of 'red', 'blue'"),
        ({"peers": [1]}, "peers must be a list of a string"),
        ({"limit": "4"}, r"limit must be an integer \(or unset\)"),
        ({"table": {"a": "1"}}, "table must be dict"),
    ])
    def test_type_check_rejects(self, values: dict[str, Any], match: str) -> None:
        with pytest.raises(ValueError, match=match):
            type_check(Sample, values)

    def test_type_check_converts_toml_forms_without_mutating(self) -> None:
        values = {"peers": ["a", "b"], "ratio": 2, "where": "p"}
        assert type_check(Sample, values) == {"peers": ("a", "b"), "ratio": 2.0, "where": Path("p")}
        assert values == {"peers": ["a", "b"], "ratio": 2, "where": "p"}
        assert type_check(Sample, {"peers": "one"}) == {"peers": ("one",)}


class TestEveryPeerSettingIsAFlagAndATomlKey:
    """The six fields that used to be TOML-only, and precedence default < TOML < flag, on the real command."""

    @pytest.mark.parametrize(("name", "flag_value", "toml_value"), [
        ("grace_s", "3.5", "1.5"), ("quorum_fraction", "0.5", "0.75"), ("outer_lr", "0.5", "0.25"),
        ("outer_momentum", "0.5", "0.25"), ("ef_decay", "0.5", "0.25"), ("max_parameters", "1000", "2000"),
        ("max_envelope_bytes", "5000", "6000"),
    ])
    def test_flag_overrides_toml_overrides_default(self, tmp_path: Path, name: str, flag_value: str,
                                                   toml_value: str) -> None:
        path = tmp_path / "p.toml"
        path.write_text(f"[peer]\n{name} = {toml_value}\n", encoding="utf-8")
        kind = type(getattr(PeerConfig(), name)) if getattr(PeerConfig(), name) is not None else float
        default = peer_cmd.resolve_config(peer_args("--initial-peers", MADDR))
        from_file = peer_cmd.resolve_config(peer_args("--config", str(path), "--initial-peers", MADDR))
        from_flag = peer_cmd.resolve_config(peer_args("--config", str(path), "--initial-peers", MADDR,
                                                      flag_name(name), flag_value))
        assert getattr(default, name) == getattr(PeerConfig(), name)
        assert getattr(from_file, name) == kind(toml_value)
        assert getattr(from_flag, name) == kind(flag_value)

    def test_bool_flags_both_ways(self) -> None:
        assert peer_cmd.resolve_config(peer_args("--initial-peers", MADDR, "--no-reputation")).reputation is False
        on = peer_cmd.resolve_config(peer_args("--initial-peers", MADDR))
        assert on.reputation_exclusion is True
        off = peer_cmd.resolve_config(peer_args("--initial-peers", MADDR, "--no-reputation-exclusion"))
        assert off.reputation_exclusion is False

    def test_bad_toml_type_names_file_and_key(self, tmp_path: Path) -> None:
        path = tmp_path / "p.toml"
        path.write_text('[peer]\ngrace_s = "2"\n', encoding="utf-8")
        with pytest.raises(ValueError, match=r"config file .*p\.toml: grace_s must be a number; got '2'"):
            peer_cmd.resolve_config(peer_args("--config", str(path), "--initial-peers", MADDR))

    def test_bad_flag_range_names_the_command_line(self) -> None:
        with pytest.raises(ValueError, match=r"command line: .*quorum_fraction"):
            peer_cmd.resolve_config(peer_args("--initial-peers", MADDR, "--quorum-fraction", "1.5"))

    @pytest.mark.parametrize("spec", ["dirichlet:-1", "dirichlet:0", "dirichlet:x", "zipf"])
    def test_bad_partition(self, spec: str) -> None:
        with pytest.raises(ValueError, match="partition"):
            peer_cmd.resolve_config(peer_args("--initial-peers", MADDR, "--partition", spec))


class TestSimulateSettings:
    def test_todays_flags_keep_their_names(self) -> None:
        argv = ["simulate", "--task", "digits", "--honest", "3", "--byzantine", "1", "--attack", "alie",
                "--rounds", "4", "--seed", "2", "--guard", "median", "--inner-steps", "5", "--partition",
                "dirichlet:0.5", "--no-reputation", "--reputation-exclusion", "--run-id", "r", "--timeout-s", "60",
                "--startup-timeout-s", "30", "--stop-grace-s", "2"]
        config = simulate_cmd._config(build_parser().parse_args(argv))
        assert config == SimulationConfig(task="digits", honest=3, byzantine=1, attack="alie", rounds=4, seed=2,
                                          guard="median", inner_steps=5, partition="dirichlet:0.5",
                                          reputation=False, reputation_exclusion=True, run_id="r",
                                          timeout_s=60.0, startup_timeout_s=30.0, stop_grace_s=2.0)

    def test_toml_table_and_unknown_key(self, tmp_path: Path) -> None:
        path = tmp_path / "s.toml"
        path.write_text('[simulate]\nhonest = 4\nrounds = 3\n', encoding="utf-8")
        config = simulate_cmd._config(build_parser().parse_args(["simulate", "--config", str(path), "--rounds", "5"]))
        assert (config.honest, config.rounds, config.byzantine) == (4, 5, 2)
        path.write_text('[simulate]\nhonst = 4\n', encoding="utf-8")
        with pytest.raises(ValueError, match=r"unknown setting\(s\) \['honst'\]; honst: did you mean honest\?; "
                                             r"see --help for every setting$"):
            simulate_cmd._config(build_parser().parse_args(["simulate", "--config", str(path)]))

    def test_a_renamed_key_names_its_new_name(self, tmp_path: Path) -> None:
        path = tmp_path / "p.toml"
        path.write_text('[peer]\nmax_payload_bytes = 4\nzzz = 1\n', encoding="utf-8")
        with pytest.raises(ValueError, match=r"\['max_payload_bytes', 'zzz'\]; max_payload_bytes was renamed: use "
                                             r"max_parameters \(.*\); see --help for every setting$"):
            peer_cmd.resolve_config(build_parser().parse_args(["peer", "--config", str(path)]))

    @pytest.mark.parametrize(("command", "table"), [("peer", "peer"), ("simulate", "simulate")])
    def test_mix_fp16_names_mix_precision(self, tmp_path: Path, command: str, table: str) -> None:
        """A config of before the rename (977ff9f) got only "unknown setting(s) ['mix_fp16']; see --help"."""
        path = tmp_path / "p.toml"
        path.write_text(f"[{table}]\nmix_fp16 = true\n", encoding="utf-8")
        args = build_parser().parse_args([command, "--config", str(path)])
        with pytest.raises(ValueError) as info:
            peer_cmd.resolve_config(args) if command == "peer" else simulate_cmd._config(args)
        assert str(info.value) == (f"config file {path}: unknown setting(s) ['mix_fp16']; mix_fp16 was renamed: use "
                                   'mix_precision ("fp16" for true, "fp32" for false; or "int8"); see --help for '
                                   "every setting")

    @pytest.mark.parametrize(("guard", "honest", "warned"), [
        ("trimmed_mean:f=1000", 3, "need n > 2f; got n=4, f=1000 in the 4 rows a peer judges (3 sampled senders"),
        ("trimmed_mean:f=5", 20, "got n=9, f=5 in the 9 rows a peer judges (8 sampled senders"),  # fan-out 8
        ("trimmed_mean:f=4", 20, ""),  # 9 > 2·4
        ("trimmed_mean:f=4", 1, "got n=2, f=4 in the 2 rows a peer judges (1 sampled senders"),
        ("multi_krum", 3, "need n > 2f + 2; got n=4, f=1"),  # Krum's own bound: a 4-peer swarm is too small
        ("multi_krum", 5, ""), ("trimmed_mean", 3, ""), ("semantic", 3, ""), ("mean", 3, ""),
    ])  # fmt: skip
    def test_a_guard_that_always_falls_back_is_a_warning(self, guard: str, honest: int, warned: str,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
        simulate_cmd._warn_if_guard_falls_back(SimulationConfig(honest=honest, byzantine=1, attack="alie",
                                                                guard=guard))
        err = capsys.readouterr().err
        if warned:
            assert err.startswith(f"p2p-guard simulate: warning: --guard {guard}: not enough updates: ") and warned in err
        else:
            assert err == ""

    @pytest.mark.parametrize("run_id", ["", "a b", "x" * 65, "ü"])
    def test_simulate_refuses_a_run_id_the_peers_would_refuse(self, run_id: str) -> None:
        with pytest.raises(ValueError, match=r"^run_id must be 1-64 characters of \[A-Za-z0-9._-\]; got run_id="):
            SimulationConfig(run_id=run_id)
        with pytest.raises(ValueError, match=r"^run_id must be 1-64 characters"):
            PeerConfig(run_id=run_id, task="digits")
        assert SimulationConfig(run_id="x" * 64).resolved_run_id == "x" * 64

    @pytest.mark.parametrize(("honest", "byzantine", "warned"), [(1, 3, True), (2, 2, True), (3, 2, False),
                                                                 (1, 0, False)])
    def test_byzantine_majority_is_a_warning(self, honest: int, byzantine: int, warned: bool,
                                             capsys: pytest.CaptureFixture[str]) -> None:
        simulate_cmd._warn_if_byzantine_majority(SimulationConfig(honest=honest, byzantine=byzantine))
        err = capsys.readouterr().err
        if warned:
            assert err.startswith(f"p2p-guard simulate: warning: {byzantine} Byzantine of {honest + byzantine} "
                                  "peers are not a minority")
            assert err.count("\n") == 1
        else:
            assert err == ""

    def test_a_swarm_of_one_peer_is_refused_before_anything_starts(
            self, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
        """``simulate --honest 1 --byzantine 0`` sat paused at round 0 until its 1200 s timeout, then exit 1."""
        from p2p_guard.cli.main import main

        def started(*_args: Any, **_kwargs: Any) -> int:
            raise AssertionError("went past the settings checks")

        monkeypatch.setattr(simulate_cmd, "_check_names", started)
        assert main(["simulate", "--honest", "1", "--byzantine", "0", "--workdir", str(tmp_path / "w")]) == 2
        err = capsys.readouterr().err
        assert err.startswith("p2p-guard simulate: error: honest=1 and byzantine=0 make a swarm of 1 peer;")
        assert err.count("\n") == 1
        assert not (tmp_path / "w").exists()
        simulate_cmd._check_swarm_size(SimulationConfig(honest=1, byzantine=1))  # two peers: fine

    def test_an_unknown_attack_is_refused_even_with_no_byzantine_peer(
            self, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
        """``simulate --byzantine 0 --attack nosuch`` ran the whole swarm (attack=None) without a word."""
        from p2p_guard.cli.main import main

        def started(*_args: Any, **_kwargs: Any) -> None:
            raise AssertionError("went past the name checks")

        monkeypatch.setattr(simulate_cmd, "_check_memory", started)
        argv = ["simulate", "--honest", "3", "--byzantine", "0", "--workdir", str(tmp_path / "w")]
        assert main([*argv, "--attack", "nosuch"]) == 2
        err = capsys.readouterr().err
        assert err.startswith("p2p-guard simulate: error: --attack 'nosuch' does not load: attack spec 'nosuch': "
                              "unknown attack 'nosuch'; expected one of sign_flip,")
        assert err.endswith(" (no peer runs it with --byzantine 0)\n")
        assert err.count("\n") == 1
        assert not (tmp_path / "w").exists()
        simulate_cmd._check_unused_attack("sign_flip:scale=10+my_mod:MyAttack")  # well-formed: not loaded, fine

    @pytest.mark.parametrize("spec", ["sign_flip:scale=nan", "noise+sign_flip:scale=-1", "alie:nosuch=1"])
    def test_a_bad_attack_parameter_is_refused_even_with_no_byzantine_peer(self, spec: str) -> None:
        """``simulate --byzantine 0 --attack sign_flip:scale=nan`` was accepted (only the name was checked), where
        ``--byzantine 1`` refuses it (helper-50)."""
        from p2p_guard.cli.preflight import check_attack

        with pytest.raises(ValueError) as unused:
            simulate_cmd._check_unused_attack(spec)
        bad = spec.split("+")[-1]
        with pytest.raises(ValueError) as run:
            check_attack(bad)  # the message a spec the Byzantine peers run gets
        assert str(unused.value) == (f"--attack {spec!r} does not load: "
                                     f"{str(run.value).removeprefix(f'--attack {bad!r} does not load: ')} "
                                     f"(no peer runs it with --byzantine 0)")

    def test_a_swarm_over_the_machines_memory_is_refused_and_over_what_is_free_warned(
            self, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
        gib = 2**30
        config = SimulationConfig(honest=130, byzantine=6)  # with the bootstrap node and the models: 24.16 GiB
        with pytest.raises(ValueError) as e:
            simulate_cmd._check_memory(config, params=4810, total=24 * gib, available=24 * gib)
        assert str(e.value) == ("136 peers need at least 24.2 GiB of memory (each is its own process, about 181 MiB "
                                "or more with a 4,810-parameter model); this machine has 24.0 GiB: run at most 134 "
                                "peers")
        simulate_cmd._check_memory(SimulationConfig(honest=129, byzantine=5), params=4810, total=24 * gib,
                                   available=24 * gib)
        assert capsys.readouterr().err == ""
        simulate_cmd._check_memory(config, params=4810, total=32 * gib, available=8 * gib)
        assert capsys.readouterr().err == ("p2p-guard simulate: warning: 136 peers need at least 24.2 GiB of memory "
                                           "and 8.0 GiB is available now: expect swapping, or peers killed for "
                                           "memory\n")
        import psutil

        from p2p_guard.cli.main import main

        monkeypatch.setattr(psutil, "virtual_memory", lambda: type("M", (), {"total": 4 * gib, "available": gib}))
        assert main(["simulate", "--honest", "30", "--workdir", str(tmp_path / "w")]) == 2  # + 2 Byzantine
        assert capsys.readouterr().err == ("p2p-guard simulate: error: 32 peers need at least 5.8 GiB of memory "
                                           "(each is its own process, about 181 MiB or more with a 4,810-parameter "
                                           "model); this machine has 4.0 GiB: run at most 21 peers\n")
        assert not (tmp_path / "w").exists()

    def test_the_memory_a_swarm_needs_grows_with_its_models_size(self, capsys: pytest.CaptureFixture[str]) -> None:
        gib = 2**30
        d = 25_338_880  # shakespeare:n_layers=8,d_model=512,n_heads=8
        per_peer = simulate_cmd.PEER_MEMORY_FLOOR_BYTES + simulate_cmd.PEER_MEMORY_BYTES_PER_PARAM * d
        assert per_peer == 4_445_675_520
        with pytest.raises(ValueError) as e:  # 9 such peers were killed for memory on this 24 GiB machine
            simulate_cmd._check_memory(SimulationConfig(honest=9, byzantine=0), params=d, total=24 * gib,
                                       available=24 * gib)
        assert str(e.value) == ("9 peers need at least 37.4 GiB of memory (each is its own process, about 4,240 MiB "
                                "or more with a 25,338,880-parameter model); this machine has 24.0 GiB: run at "
                                "most 5 peers")
        with pytest.raises(ValueError, match=r"^6 peers need at least 25.0 GiB .* run at most 5 peers$"):
            simulate_cmd._check_memory(SimulationConfig(honest=6, byzantine=0), params=d, total=24 * gib,
                                       available=24 * gib)
        simulate_cmd._check_memory(SimulationConfig(honest=5, byzantine=0), params=d, total=24 * gib,
                                   available=24 * gib)
        assert capsys.readouterr().err == ""


def _cli(tmp_path: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    """Run the CLI in a fresh interpreter; it prints whether torch or hivemind were imported by the end."""
    code = ("import sys\nfrom p2p_guard.cli.main import main\ntry:\n    rc = main(sys.argv[1:])\n"
            "except SystemExit as e:\n    rc = e.code\n"
            "print('heavy:', sorted(m for m in ('torch', 'hivemind') if m in sys.modules))\nsys.exit(rc)\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, timeout=120,
                          cwd=tmp_path, env=env, check=False)


@pytest.mark.parametrize(("argv", "toml", "message"), [
    (["peer", "--config", "missing.toml"], None, "p2p-guard peer: error: config file missing.toml does not exist"),
    (["simulate", "--config", "missing.toml"], None,
     "p2p-guard simulate: error: config file missing.toml does not exist"),
    (["bootstrap", "--config", "missing.toml"], None,
     "p2p-guard bootstrap: error: config file missing.toml does not exist"),
    (["peer", "--config", "c.toml"], '[peer]\ninitial_peers = ["x"]\nrounds = "ten"\n',
     "p2p-guard peer: error: config file c.toml: rounds must be an integer; got 'ten'"),
    (["peer", "--initial-peers", MADDR, "--partition", "dirichlet:-1"], None,
     "p2p-guard peer: error: partition must be 'iid' or 'dirichlet:ALPHA' with ALPHA > 0, got 'dirichlet:-1'"),
    (["simulate", "--partition", "dirichlet:-1"], None,
     "p2p-guard simulate: error: command line: partition must be 'iid' or 'dirichlet:ALPHA' with ALPHA > 0, "
     "got 'dirichlet:-1'"),
    (["simulate", "--rounds", "0"], None,
     "p2p-guard simulate: error: command line: rounds must be an integer in [1, 1,000,000,000]; got rounds=0"),
    (["simulate", "--rounds", "99999999999999999999999"], None,
     "p2p-guard simulate: error: command line: rounds must be an integer in [1, 1,000,000,000]; got "
     "rounds=99999999999999999999999"),
    (["peer", "--initial-peers", MADDR, "--rounds", "1000000001"], None,
     "p2p-guard peer: error: command line: rounds must be an integer in [0, 1,000,000,000]; got rounds=1000000001"),
    # argparse's own errors: one line, as ours, not argparse's usage text first (thirty lines for `peer`)
    (["peer", "--rounds", "x"], None,
     "p2p-guard peer: error: argument --rounds: invalid int value: 'x' (see --help)"),
    (["simulate", "--rounds", "abc"], None,
     "p2p-guard simulate: error: argument --rounds: invalid int value: 'abc' (see --help)"),
    (["bootstrap", "--port", "abc"], None,
     "p2p-guard bootstrap: error: argument --port: invalid int value: 'abc' (see --help)"),
    (["bench", "robustness", "--acceptance", "x"], None,
     "p2p-guard bench robustness: error: argument --acceptance: invalid choice: 'x' (choose from 'digits', "
     "'fashion-mnist') (see --help)"),
    (["simulat"], None,
     "p2p-guard: error: argument COMMAND: invalid choice: 'simulat' (choose from 'bootstrap', 'peer', 'simulate', "
     "'status', 'verify-proof', 'bench') (see --help)"),
    ([], None, "p2p-guard: error: the following arguments are required: COMMAND (see --help)"),
    (["bench"], None, "p2p-guard bench: error: the following arguments are required: BENCHMARK (see --help)"),
    # helper-48: an argument no parser took, under a command of a group, was "p2p-guard bench: error: ..."
    (["bench", "robustness", "--guard", "x"], None,
     "p2p-guard bench robustness: error: unrecognized arguments: --guard x (see --help)"),
    (["bench", "wire", "--nope"], None, "p2p-guard bench wire: error: unrecognized arguments: --nope (see --help)"),
    (["bench", "guard", "--nope"], None, "p2p-guard bench guard: error: unrecognized arguments: --nope (see --help)"),
    (["peer", "--initial-peers", MADDR, "--identity", "."], None,
     "p2p-guard peer: error: --identity .: not a regular file"),
    (["peer", "--initial-peers", MADDR, "--identity", "c.toml"], "not a key",
     "p2p-guard peer: error: --identity c.toml: not a libp2p PrivateKey protobuf: unexpected field 13 with "
     "wire type 6"),
    (["bootstrap", "--port", "70000"], None,
     "p2p-guard bootstrap: error: command line: port must be in [0, 65535]; got port=70000"),
    # issue 11: names, addresses and a task's files are checked before torch and hivemind are imported
    (["peer", "--initial-peers", MADDR, "--task", "nosuch"], None,
     "p2p-guard peer: error: unknown task 'nosuch'; known tasks: digits, fashion-mnist, shakespeare (or MODULE:CLASS)"),
    (["simulate", "--task", "nosuch"], None,
     "p2p-guard simulate: error: unknown task 'nosuch'; known tasks: digits, fashion-mnist, shakespeare (or MODULE:CLASS)"),
    (["peer", "--initial-peers", MADDR, "--guard", "nosuch"], None,
     "p2p-guard peer: error: guard spec 'nosuch': unknown guard 'nosuch'; expected one of mean, median, "
     "trimmed_mean, multi_krum, geometric_median, centered_clipping, nnm_trimmed_mean, own_update, semantic or "
     "MODULE:CLASS"),
    (["simulate", "--guard", "mean:f"], None,
     "p2p-guard simulate: error: bad guard spec 'mean:f': parameters are key=value, got 'f'"),
    (["peer", "--initial-peers", MADDR, "--attack", "nosuch"], None,
     "p2p-guard peer: error: --attack 'nosuch' does not load: attack spec 'nosuch': unknown attack 'nosuch'; "
     "expected one of " + ", ".join(ATTACK_NAMES)),
    (["simulate", "--attack", "nosuch"], None,
     "p2p-guard simulate: error: --attack 'nosuch' does not load: attack spec 'nosuch': unknown attack 'nosuch'; "
     "expected one of " + ", ".join(ATTACK_NAMES)),
    (["peer", "--initial-peers", "/ip4/127.0.0.1/tcp/31337"], None,
     "p2p-guard peer: error: bad --initial-peers address '/ip4/127.0.0.1/tcp/31337': expected "
     "/ip4/HOST/tcp/PORT/p2p/PEERID as printed by `p2p-guard bootstrap` (ProtocolLookupError)"),
    (["peer", "--initial-peers", MADDR, "--use-auto-relay", "--relays", "/ip4/1.2.3.4/tcp/1/p2p/abc"], None,
     "p2p-guard peer: error: bad --relays address '/ip4/1.2.3.4/tcp/1/p2p/abc': expected "
     "/ip4/HOST/tcp/PORT/p2p/PEERID as printed by `p2p-guard bootstrap` (StringParseError)"),
    (["peer"], None,
     "p2p-guard peer: error: no --initial-peers given (the multiaddr printed by `p2p-guard bootstrap`)"),
    (["simulate", "--report", "c.toml/r.json"], "x",
     "p2p-guard simulate: error: cannot write there: --report c.toml/r.json: c.toml is a file, not a directory"),
    (["simulate", "--report", "."], None, "p2p-guard simulate: error: cannot write there: --report .: is a "
     "directory, not a file"),
    # the listen and announce addresses and the files a peer or bootstrap node writes, before anything starts
    (["peer", "--initial-peers", MADDR, "--host", "localhost"], None,
     "p2p-guard peer: error: --host localhost: not an IPv4 or IPv6 address (a host name is not accepted; give "
     "this machine's address, or 0.0.0.0 for all)"),
    (["peer", "--initial-peers", MADDR, "--host", "192.0.2.1"], None,
     "p2p-guard peer: error: --host 192.0.2.1: cannot listen there (Cannot assign requested address; is it an "
     "address of this machine?)"),
    (["peer", "--initial-peers", MADDR, "--announce-host", "203.0.113.5"], None,
     "p2p-guard peer: error: --announce-host 203.0.113.5 needs a fixed --port (the router or firewall forwards "
     "that port; --port 0 picks a random one)"),
    (["bootstrap", "--announce-host", "my.host", "--port", "0"], None,
     "p2p-guard bootstrap: error: --announce-host my.host: not an IPv4 or IPv6 address (a host name is not "
     "accepted; give the public IP others dial)"),
    (["peer", "--initial-peers", MADDR, "--events", "c.toml/e.jsonl"], "x",
     "p2p-guard peer: error: --events c.toml/e.jsonl: c.toml is a file, not a directory"),
    (["bootstrap", "--port", "0", "--address-file", "c.toml/a.txt"], "x",
     "p2p-guard bootstrap: error: --address-file c.toml/a.txt: c.toml is a file, not a directory"),
    (["peer", "--initial-peers", MADDR, "--state-out", "c.toml/s.pt"], "x",
     "p2p-guard peer: error: --state-out c.toml/s.pt: c.toml is a file, not a directory"),
    (["peer", "--initial-peers", MADDR, "--checkpoint-dir", "c.toml"], "x",
     "p2p-guard peer: error: --checkpoint-dir c.toml: is a file, not a directory"),
    (["peer", "--initial-peers", MADDR, "--snapshot-dir", "c.toml/snaps"], "x",
     "p2p-guard peer: error: --snapshot-dir c.toml/snaps: c.toml is a file, not a directory"),
    (["peer", "--initial-peers", MADDR, "--seed", "-1"], None,
     "p2p-guard peer: error: command line: seed must be in [0, 2**63 - 1]; got seed=-1"),
    (["simulate", "--seed", str(2**64)], None,
     f"p2p-guard simulate: error: command line: seed must be in [0, 2**63 - 1]; got seed={2**64}"),
    (["peer", "--initial-peers", MADDR, "--port", "45690", "--metrics-port", "45690"], None,
     "p2p-guard peer: error: command line: metrics_port must differ from port; got both 45690"),
    (["peer", "--initial-peers", MADDR, "--inner-steps", "100000000"], None,
     "p2p-guard peer: error: command line: inner_steps must be an integer in [1, 1000000] (10^6); "
     "got inner_steps=100000000"),
    (["simulate", "--inner-steps", "1000001"], None,
     "p2p-guard simulate: error: command line: inner_steps must be an integer in [1, 1000000] (10^6); "
     "got inner_steps=1000001"),
    (["peer", "--initial-peers", MADDR, "--config", "c.toml"], "[peer]\ninner_steps = 100000000\n",
     "p2p-guard peer: error: config file c.toml: inner_steps must be an integer in [1, 1000000] (10^6); "
     "got inner_steps=100000000"),
    (["peer", "--initial-peers", MADDR, "--bogus"], None,
     "p2p-guard peer: error: unrecognized arguments: --bogus (see --help)"),
    (["peer", "--attack", "adaptive+vote_smear"], None,
     "p2p-guard peer: error: --attack 'adaptive+vote_smear': an attack mix (A+B) is for `simulate`, which splits "
     "its Byzantine peers into groups; a peer runs one attack"),
    (["status", "--log-level", "DEBUG"], None,
     "p2p-guard status: error: unrecognized arguments: --log-level DEBUG (--log-level goes before the command: "
     "p2p-guard --log-level DEBUG peer ...) (see --help)"),
])
def test_bad_input_is_one_line_before_torch_or_hivemind(tmp_path: Path, argv: list[str], toml: str | None,
                                                         message: str) -> None:
    if toml is not None:
        (tmp_path / "c.toml").write_text(toml, encoding="utf-8")
        (tmp_path / "c.toml").chmod(0o600)  # as a key file should be (else a warning line comes first)
    done = _cli(tmp_path, *argv)
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines()[-1] == message
    assert len(done.stderr.splitlines()) == 1, done.stderr
    assert done.stdout.strip() == "heavy: []"


@pytest.mark.parametrize("argv", [["simulate", "--task", "fashion-mnist"],
                                  ["peer", "--initial-peers", MADDR, "--task", "fashion-mnist"]])
def test_missing_task_data_is_one_line_before_torch_or_hivemind(tmp_path: Path, argv: list[str]) -> None:
    code = ("import sys, pathlib\nfrom p2p_guard.tasks import fashion_mnist_files\n"
            f"fashion_mnist_files.DEFAULT_DATA_DIR = pathlib.Path({str(tmp_path / 'none')!r})\n"
            "from p2p_guard.cli.main import main\nrc = main(sys.argv[1:])\n"
            "print('heavy:', sorted(m for m in ('torch', 'hivemind') if m in sys.modules))\nsys.exit(rc)\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, timeout=120,
                          cwd=tmp_path, env=env, check=False)
    assert done.returncode == 2, done.stderr
    assert done.stderr == (f"p2p-guard {argv[0]}: error: fashion-mnist: directory {tmp_path / 'none'} does not "
                           "exist; install the Debian package (apt-get install dataset-fashion-mnist), "
                           "or pass --task fashion-mnist:data_dir=DIR\n")
    assert done.stdout.strip() == "heavy: []"


def test_every_attack_of_a_mix_is_built_before_the_swarm_starts(tmp_path: Path) -> None:
    # the light check passes sign_flip:scale=-1 (a well-formed spec); building it is the heavy check, run on the
    # second attack of the mix too, not only the first (whose check also reads the task's data, once)
    done = _cli(tmp_path, "simulate", "--honest", "3", "--byzantine", "2", "--attack", "sign_flip+sign_flip:scale=-1")
    assert done.returncode == 2, done.stderr
    assert done.stderr == ("p2p-guard simulate: error: --attack 'sign_flip:scale=-1' does not load: attack spec "
                           "'sign_flip:scale=-1': scale must be a finite number > 0.0, got -1\n")
    assert not (tmp_path / "runs").exists()


def test_taken_port_is_one_line_before_torch_or_hivemind(tmp_path: Path) -> None:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        done = _cli(tmp_path, "peer", "--initial-peers", MADDR, "--host", "127.0.0.1", "--port", str(port))
    assert done.returncode == 2, done.stderr
    assert done.stderr == (f"p2p-guard peer: error: --port {port}: already in use on 127.0.0.1 (pick another, "
                           "or 0 for any)\n")
    assert done.stdout.strip() == "heavy: []"


class TestPreflight:
    def test_taken_port(self) -> None:
        import socket

        from p2p_guard.cli.preflight import check_port_free

        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            sock.listen()
            port = sock.getsockname()[1]
            with pytest.raises(ValueError, match=f"--port {port}: already in use on 127.0.0.1"):
                check_port_free("127.0.0.1", port)
        check_port_free("127.0.0.1", 0)

    def test_identity_file(self, tmp_path: Path) -> None:
        from p2p_guard.cli.preflight import check_identity_file

        check_identity_file(tmp_path / "new.key")
        with pytest.raises(ValueError, match="not a regular file"):
            check_identity_file(tmp_path)
        (tmp_path / "file").write_text("x", encoding="utf-8")
        with pytest.raises(ValueError, match="cannot be created"):
            check_identity_file(tmp_path / "file" / "id.key")

    def test_missing_fashion_mnist_directory(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        from p2p_guard.cli.preflight import check_task_data
        from p2p_guard.tasks import fashion_mnist_files

        monkeypatch.setattr(fashion_mnist_files, "DEFAULT_DATA_DIR", tmp_path / "nothing")
        with pytest.raises(ValueError, match="fashion-mnist: directory .*nothing does not exist"):
            check_task_data("fashion-mnist")
        with pytest.raises(ValueError, match="unknown task 'fmnist'"):
            check_task_data("fmnist")

    def test_a_model_that_cannot_be_built_fails_up_front(self, monkeypatch: pytest.MonkeyPatch) -> None:
        from p2p_guard.cli.preflight import check_task_data
        from p2p_guard.tasks.digits import DigitsTask

        with pytest.raises(ValueError, match=r"^context 100000 is too long for this corpus: .* and 39 more cannot "
                                             r"hold 2 windows \(context at most 4,920\)$"):
            check_task_data("shakespeare:context=100000")

        def no_memory(self: object, seed: int) -> None:
            raise RuntimeError("[enforce fail at alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator: can't allocate "
                               "memory: you tried to allocate 9 bytes\nmore")

        monkeypatch.setattr(DigitsTask, "build_model", no_memory)
        with pytest.raises(ValueError, match=r"^task 'digits:hidden=7': its model cannot be built here: "
                                             r"DefaultCPUAllocator: can't allocate memory: you tried to allocate 9 "
                                             r"bytes$"):
            check_task_data("digits:hidden=7")

    def test_output_file(self, tmp_path: Path) -> None:
        from p2p_guard.cli.preflight import check_output_file

        check_output_file(tmp_path / "new" / "deeper" / "events.jsonl", flag="--events")  # parents are created
        check_output_file(None, flag="--events")
        (tmp_path / "file").write_text("x", encoding="utf-8")
        with pytest.raises(ValueError, match=r"^--events .*file/e\.jsonl: .*file is a file, not a directory$"):
            check_output_file(tmp_path / "file" / "e.jsonl", flag="--events")
        with pytest.raises(ValueError, match="is a directory, not a file"):
            check_output_file(tmp_path, flag="--report")

    def test_no_file_in_a_kernel_filesystem(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        # /proc and /sys: access(2) lets root write there, creating fails later; the mount table says so first
        from p2p_guard.cli import preflight

        kernel = tmp_path / "kernel"
        kernel.mkdir()
        mounts = tmp_path / "mounts"
        mounts.write_text(f"/dev/sda1 / ext4 rw 0 0\nproc {kernel} proc rw 0 0\n", encoding="utf-8")
        monkeypatch.setattr(preflight, "_MOUNTS", mounts)
        with pytest.raises(ValueError, match=rf"^--identity {kernel}/no/id\.key: cannot be created \({kernel} is "
                                             r"not a writable directory\)$"):
            preflight.check_identity_file(kernel / "no" / "id.key")
        with pytest.raises(ValueError, match=rf"^--report {kernel}/r\.json: cannot be created \({kernel} is not a "
                                             r"writable directory\)$"):
            preflight.check_output_file(kernel / "r.json", flag="--report")
        with pytest.raises(ValueError, match=rf"^--proof-dir {kernel}/p: {kernel} is not writable$"):
            preflight.check_output_dir(kernel / "p", flag="--proof-dir")
        preflight.check_identity_file(tmp_path / "new" / "id.key")  # beside it, an ordinary folder
        preflight.check_output_file(tmp_path / "new" / "r.json", flag="--report")
        assert sorted(p.name for p in tmp_path.iterdir()) == ["kernel", "mounts"]  # nothing was created
        assert list(kernel.iterdir()) == []

    def test_real_proc_is_refused(self) -> None:
        from p2p_guard.cli import preflight

        if not Path("/proc/self/mounts").is_file():
            pytest.skip("no /proc here")
        with pytest.raises(ValueError, match=r"^--identity /proc/nonexistent/x\.key: cannot be created"):
            preflight.check_identity_file("/proc/nonexistent/x.key")
        with pytest.raises(ValueError, match=r"^--report /proc/r\.json: cannot be created"):
            preflight.check_output_file("/proc/r.json", flag="--report")

    def test_commands_refuse_a_kernel_filesystem_up_front(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
        import p2p_guard.simulation.orchestrator as orchestrator
        import p2p_guard.swarm.peer as peer_module
        from p2p_guard.cli import preflight

        kernel = tmp_path / "kernel"
        kernel.mkdir()
        mounts = tmp_path / "mounts"
        mounts.write_text(f"proc {kernel} proc rw 0 0\n", encoding="utf-8")
        monkeypatch.setattr(preflight, "_MOUNTS", mounts)
        started: list[str] = []
        monkeypatch.setattr(peer_module, "run_peer", lambda *a, **k: started.append("peer") or 0)
        monkeypatch.setattr(orchestrator, "run_simulation", lambda *a, **k: started.append("simulate"))
        args = peer_args("--initial-peers", MADDR, "--identity", str(kernel / "no" / "id.key"))
        assert peer_cmd.run(args) == 2
        assert capsys.readouterr().err == (f"p2p-guard peer: error: --identity {kernel}/no/id.key: cannot be "
                                           f"created ({kernel} is not a writable directory)\n")
        args = build_parser().parse_args(["simulate", "--report", str(kernel / "r.json"), "--workdir",
                                          str(tmp_path / "work")])
        assert simulate_cmd.run(args) == 2
        assert capsys.readouterr().err == (f"p2p-guard simulate: error: cannot write there: --report {kernel}/r.json: "
                                           f"cannot be created ({kernel} is not a writable directory)\n")
        assert started == []
        assert not (tmp_path / "work").exists()

    def test_device_cuda_without_a_gpu(self, monkeypatch: pytest.MonkeyPatch) -> None:
        import torch

        from p2p_guard.training.local import pick_device

        monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
        with pytest.raises(ValueError, match=r"^--device cuda: no CUDA device here"):
            pick_device("cuda")
        assert pick_device("auto") == torch.device("cpu")
        assert pick_device("cpu") == torch.device("cpu")


class TestPeerOutput:
    def test_no_bar_off_a_terminal_and_settings_at_debug(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                         caplog: pytest.LogCaptureFixture) -> None:
        import p2p_guard.swarm.peer as peer_module

        calls: list[bool] = []
        monkeypatch.setattr(peer_module, "run_peer", lambda config, progress: calls.append(progress) or 0)
        monkeypatch.setattr(sys.stderr, "isatty", lambda: False, raising=False)
        args = peer_args("--initial-peers", MADDR, "--identity", str(tmp_path / "id.key"))
        with caplog.at_level("DEBUG", logger="p2p_guard"):
            assert peer_cmd.run(args) == 0
        assert calls == [False]
        dumps = [r for r in caplog.records if r.getMessage().startswith("peer config:")]
        assert [r.levelname for r in dumps] == ["DEBUG"]


@pytest.mark.parametrize("flag", ["--identity", "--allow-peers", "--control-file", "--checkpoint-dir",
                                  "--snapshot-dir", "--proof-dir"])
def test_an_empty_path_is_refused_by_peer(flag: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``peer --checkpoint-dir ""`` (say an unset shell variable) was taken and silently turned checkpoints off;
    ``--identity ""`` read as the current folder ('--identity .: not a regular file')."""
    monkeypatch.chdir(tmp_path)
    argv = ["--initial-peers", MADDR, "--host", "127.0.0.1", flag, ""]
    if flag != "--identity":
        argv += ["--identity", str(tmp_path / "id.key")]
    with pytest.raises(ValueError, match=rf"{flag}: empty path$"):
        peer_cmd.resolve_config(peer_args(*argv))


TINY_DENSITY = ("codec {codec!r}: density {rho} keeps less than one value of a 4096-value chunk, and every chunk "
                "sends at least one (the wire would use 1/4096 = 0.000244140625); use topk:density=ρ with ρ in "
                "[0.000244140625, 1] (docs/protocol.md, Codecs)")


@pytest.mark.parametrize(("codec", "rho"), [
    ("topk:density=1e-8", "1e-08"), ("topk:density=0.0002", "0.0002"), ("topk:density=1e-8,dense=head", "1e-08"),
])
def test_a_topk_density_below_one_value_per_chunk_is_refused_at_start_up(codec: str, rho: str) -> None:
    """``topk:density=1e-8`` was accepted silently and sent 1/4096 of the values (one per chunk) all the same."""
    with pytest.raises(ValueError) as raised:
        PeerConfig(codec=codec)
    assert str(raised.value) == TINY_DENSITY.format(codec=codec, rho=rho)


def test_the_smallest_topk_density_one_value_per_chunk_is_accepted_and_envelopes_keep_the_wire_grammar() -> None:
    from p2p_guard.protocol.codecs import CodecSpec, parse_codec

    assert PeerConfig(codec="topk:density=0.000244140625").codec == "topk:density=0.000244140625"
    assert parse_codec("topk:density=1e-8") == CodecSpec("topk", 1e-8)  # a received envelope: protocol unchanged


def test_simulate_refuses_a_tiny_topk_density_before_launching_peers() -> None:
    args = build_parser().parse_args(["simulate", "--codec", "topk:density=1e-8", "--rounds", "1"])
    with pytest.raises(ValueError) as raised:
        simulate_cmd._check_names(simulate_cmd._config(args))
    assert str(raised.value) == "--codec: " + TINY_DENSITY.format(codec="topk:density=1e-8", rho="1e-08")


def test_simulate_prints_the_peers_warning_of_an_upload_cap_too_low(capsys: pytest.CaptureFixture[str]) -> None:
    """``simulate --max-upload-mbit 0.001`` trained nothing and exited 0, the reason only in the peers' logs."""
    from p2p_guard.simulation.config import SimulationConfig

    shapes = ((64, 64), (64,), (10, 64), (10,))  # digits: 4,810 parameters
    config = SimulationConfig(honest=3, byzantine=0, max_upload_mbit=0.001, peer_upload_mbit=("2:100",))
    simulate_cmd._warn_if_upload_too_low(config, 4810, shapes)
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1  # peer 2's 100 Mbit/s is enough
    assert lines[0].startswith("p2p-guard simulate: warning: peers 0, 1: max_upload_mbit=0.001 is below ")
    simulate_cmd._warn_if_upload_too_low(SimulationConfig(honest=3, byzantine=0, max_upload_mbit=100.0), 4810,
                                         shapes)
    assert capsys.readouterr().err == ""
