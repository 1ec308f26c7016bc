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
