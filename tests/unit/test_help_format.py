"""``--help`` of the bench commands shows each real default once (issue 11: "--help shows each default once")."""

from __future__ import annotations

import contextlib
import io
import re

import pytest

from p2p_guard.cli.main import build_parser


def _help(*argv: str) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit):
        build_parser().parse_args([*argv, "--help"])
    return " ".join(out.getvalue().split())


@pytest.mark.parametrize("command", [("bench", "robustness"), ("bench", "wire")])
def test_no_default_twice_none_or_false(command: tuple[str, ...]) -> None:
    text = _help(*command)
    assert "(default: None)" not in text and "(default: False)" not in text
    assert not re.search(r"\(default[^)]*\) \(default", text)  # a help text that names its default gets no second


def test_a_real_default_is_shown() -> None:
    assert "seed of the updates and of the run (default: 0)" in _help("bench", "wire")


def test_robustness_help_names_the_sweep_the_grid_runs() -> None:
    from p2p_guard.bench.robustness import full_config

    text = _help("bench", "robustness")
    assert full_config().sweep_worst == 1  # the help's "worst attack" (one per aggregator) says so
    assert "three worst attacks" not in text
    assert "a sweep of each aggregator's worst attack (and the backdoor" in text


def _flag_help(text: str, flag: str) -> str:
    """The help of one option in a whitespace-joined ``--help`` text: from its name to the next option."""
    start = text.index(f"{flag} ", text.index("options:"))
    following = re.search(r" --[a-z][a-z-]* [A-Z(]| --[a-z][a-z-]*, --no-| -h, ", text[start + len(flag):])
    return text[start:start + len(flag) + following.start()] if following else text[start:]


@pytest.mark.parametrize(("command", "flag"), [
    (("simulate",), "--report"),
    (("peer",), "--events"),
    (("peer",), "--state-out"),
    (("peer",), "--proof-dir"),
    (("bootstrap",), "--address-file"),
    (("bench", "wire"), "--json"),
    (("bench", "guard"), "--json"),
])
def test_output_files_say_their_missing_folders_are_created(command: tuple[str, ...], flag: str) -> None:
    """The one rule: an output file's missing folders are created, a key file's are not (the help says both)."""
    assert "missing folders are created" in _flag_help(_help(*command), flag)


def test_identity_help_says_its_folder_must_exist() -> None:
    peer = _flag_help(_help("peer"), "--identity")
    assert "only in an existing directory: a mistyped directory is an error (unlike an output file's, a key " \
           "file's missing folder is not created: a new key is a new PeerID)" in peer
    bootstrap = _flag_help(_help("bootstrap"), "--identity")
    assert "another path's folder must exist (a mistyped one is an error, not a new PeerID), whereas an output " \
           "file's missing folders are created" in bootstrap
