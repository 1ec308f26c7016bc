"""Unit tests of ``swarm/allowlist.py``: the ``--allow-peers`` file format and the allow-list filter."""

from __future__ import annotations

from pathlib import Path

import pytest

from p2p_guard.identity import Identity
from p2p_guard.swarm.allowlist import (
    MAX_ALLOWLIST_BYTES,
    filter_allowed,
    is_allowed,
    load_allowlist,
    parse_allowlist,
)

A, B, C = (Identity.from_seed(bytes([i]) * 32).peer_id_b58 for i in (1, 2, 3))
RSA_STYLE = "QmYyQSo1c1Ym7orWxLYvCrM2EmxFTANf8wXmmE7DWjhx5N"  # a sha256 multihash: a PeerID, but not Ed25519


class TestParse:
    def test_ids_comments_and_blank_lines(self) -> None:
        text = f"# swarm of two\n\n{A}\n   {B}   # the second peer\n\t\n# {C} commented out\n"
        assert parse_allowlist(text) == frozenset({A, B})

    def test_duplicates_collapse(self) -> None:
        assert parse_allowlist(f"{A}\n{A}\n") == frozenset({A})

    def test_empty_text_is_an_empty_set(self) -> None:
        assert parse_allowlist("") == frozenset()
        assert parse_allowlist("# nobody\n\n") == frozenset()

    def test_crlf_line_ends(self) -> None:
        assert parse_allowlist(f"{A}\r\n{B}\r\n") == frozenset({A, B})

    @pytest.mark.parametrize(("line", "message"), [
        ("not-a-peer-id", "not a base58 PeerID"),
        ("0OIl", "not a base58 PeerID"),  # characters outside the base58 alphabet
        (A[:-3], "not a base58 PeerID"),  # truncated: multihash length mismatch
        (RSA_STYLE, "not an Ed25519 PeerID"),
        (f"{A} {B}", "one PeerID per line"),
        ("/ip4/1.2.3.4/tcp/1/p2p/" + A, "not a base58 PeerID"),
        ("x" * 500, "not a base58 PeerID"),
    ])
    def test_bad_line_names_source_and_line(self, line: str, message: str) -> None:
        text = f"# header\n{A}\n{line}\n"
        with pytest.raises(ValueError, match=message) as excinfo:
            parse_allowlist(text, source="peers.allow")
        assert str(excinfo.value).startswith("peers.allow:3: ")
        assert len(str(excinfo.value)) < 200  # a huge line is shortened in the message


class TestLoad:
    def test_file(self, tmp_path: Path) -> None:
        path = tmp_path / "allow.txt"
        path.write_text(f"{A}\n{B}\n", encoding="utf-8")
        assert load_allowlist(path) == frozenset({A, B})
        assert load_allowlist(str(path)) == frozenset({A, B})

    def test_bad_line_names_the_file(self, tmp_path: Path) -> None:
        path = tmp_path / "allow.txt"
        path.write_text(f"{A}\n\nbogus\n", encoding="utf-8")
        with pytest.raises(ValueError, match=rf"^{path}:3: not a base58 PeerID: 'bogus'"):
            load_allowlist(path)

    @pytest.mark.parametrize("text", ["", "\n\n", "# the members, one a line\n"])
    def test_a_file_with_no_peer_id_is_refused(self, tmp_path: Path, text: str,
                                               capsys: pytest.CaptureFixture[str]) -> None:
        from p2p_guard.cli.main import main

        path = tmp_path / "allow.txt"
        path.write_text(text, encoding="utf-8")
        message = (f"{path}: the allow-list holds no PeerID (one base58 PeerID per line); a peer that hears nobody "
                   "never trains (leave --allow-peers out for an open swarm)")
        with pytest.raises(ValueError) as excinfo:
            load_allowlist(path)
        assert str(excinfo.value) == message
        assert main(["peer", "--initial-peers", "/ip4/127.0.0.1/tcp/1/p2p/" + A, "--identity",
                     str(tmp_path / "id.key"), "--port", "0", "--allow-peers", str(path)]) == 2
        assert capsys.readouterr().err == f"p2p-guard peer: error: {message}\n"

    def test_a_file_with_only_our_own_peer_id_is_refused(self, tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
        from p2p_guard.cli.main import main

        key = tmp_path / "id.key"
        identity = Identity.from_seed(bytes([9]) * 32)
        key.write_bytes(identity.to_key_bytes())
        key.chmod(0o600)
        own = identity.peer_id_b58
        path = tmp_path / "allow.txt"
        path.write_text(f"# just me\n{own}\n", encoding="utf-8")
        args = ["peer", "--initial-peers", "/ip4/127.0.0.1/tcp/1/p2p/" + A, "--identity", str(key), "--port", "0",
                "--allow-peers", str(path)]
        assert main(args) == 2
        assert capsys.readouterr().err == (
            f"p2p-guard peer: error: {path}: the allow-list holds only this peer's own PeerID {own}; a peer that "
            "hears nobody never trains (list the other members' PeerIDs)\n")

    def test_missing_file(self, tmp_path: Path) -> None:
        with pytest.raises(ValueError, match="cannot read the allow-list"):
            load_allowlist(tmp_path / "nope.txt")

    def test_not_utf8(self, tmp_path: Path) -> None:
        path = tmp_path / "allow.txt"
        path.write_bytes(b"\xff\xfe\x00")
        with pytest.raises(ValueError, match="not UTF-8"):
            load_allowlist(path)

    def test_too_large(self, tmp_path: Path) -> None:
        path = tmp_path / "allow.txt"
        path.write_bytes(b"#" * (MAX_ALLOWLIST_BYTES + 1))
        with pytest.raises(ValueError, match="larger than"):
            load_allowlist(path)


class TestFilter:
    def test_open_swarm_keeps_everything_in_a_new_dict(self) -> None:
        mapping = {A: 1, B: 2}
        out = filter_allowed(mapping, None)
        assert out == mapping
        assert out is not mapping

    def test_keeps_only_allowed_in_order(self) -> None:
        mapping = {C: 3, A: 1, B: 2}
        out = filter_allowed(mapping, frozenset({A, C}))
        assert list(out.items()) == [(C, 3), (A, 1)]
        assert mapping == {C: 3, A: 1, B: 2}  # input not mutated

    def test_empty_allow_list_drops_everyone(self) -> None:
        assert filter_allowed({A: 1}, frozenset()) == {}

    def test_is_allowed(self) -> None:
        assert is_allowed(A, None)
        assert is_allowed(A, frozenset({A}))
        assert not is_allowed(B, frozenset({A}))


class TestConfigAndCli:
    def test_peer_config_field(self, tmp_path: Path) -> None:
        from p2p_guard.swarm.config import PeerConfig

        assert PeerConfig().allow_peers is None
        assert PeerConfig(allow_peers=str(tmp_path / "a")).allow_peers == str(tmp_path / "a")
        with pytest.raises(ValueError, match="max_inbound_streams_per_peer"):
            PeerConfig(max_inbound_streams_per_peer=0)
        with pytest.raises(ValueError, match="serve_timeout_s"):
            PeerConfig(serve_timeout_s=float("inf"))
        with pytest.raises(ValueError, match="max_requests_per_peer_per_s"):
            PeerConfig(max_requests_per_peer_per_s=-1.0)

    def test_cli_rejects_a_bad_allow_list_at_start(self, tmp_path: Path) -> None:
        import argparse

        from p2p_guard.cli.peer_cmd import add_parser, resolve_config

        parser = argparse.ArgumentParser()
        add_parser(parser.add_subparsers())
        good, bad = tmp_path / "good.txt", tmp_path / "bad.txt"
        good.write_text(f"{A}\n", encoding="utf-8")
        bad.write_text("oops\n", encoding="utf-8")
        peers = ["--initial-peers", "/ip4/127.0.0.1/tcp/1/p2p/" + A]
        args = parser.parse_args(["peer", *peers, "--allow-peers", str(good),
                                  "--max-inbound-streams-per-peer", "2"])
        config = resolve_config(args)
        assert config.allow_peers == str(good)
        assert config.max_inbound_streams_per_peer == 2
        with pytest.raises(ValueError, match=rf"{bad}:1:"):
            resolve_config(parser.parse_args(["peer", *peers, "--allow-peers", str(bad)]))
