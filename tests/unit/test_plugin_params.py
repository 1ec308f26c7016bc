"""Plugin options are read by the constructor's annotations: text stays text where a ``str`` is wanted."""

from __future__ import annotations

import math
import textwrap
from pathlib import Path
from typing import Literal, Optional

from p2p_guard.attacks.registry import load_attack
from p2p_guard.guard.registry import build_guard
from p2p_guard.plugin_spec import parse_spec_text, read_params
from p2p_guard.tasks.registry import load_task


class _Mixed:
    def __init__(self, mode: str, tag: str | None = None, level: Literal["low", "high"] = "low",
                 old: Optional[str] = None, scale: float = 1.0, count: int = 1, flag: bool = False,
                 either: float | str = 0.0, free=None) -> None:  # noqa: ANN001 - unannotated on purpose
        pass


def test_text_annotated_parameters_keep_their_text_and_the_rest_are_read_as_before() -> None:
    raw = {"mode": "nan", "tag": "1", "level": "true", "old": "1e3", "scale": "10", "count": "3", "flag": "true",
           "either": "search", "free": "2.5"}
    assert read_params(_Mixed, raw) == {"mode": "nan", "tag": "1", "level": "true", "old": "1e3", "scale": 10,
                                        "count": 3, "flag": True, "either": "search", "free": 2.5}
    assert math.isnan(read_params(_Mixed, {"either": "nan"})["either"])  # float | str: a number first, as before


def test_unresolvable_annotations_fall_back_to_reading_numbers() -> None:
    namespace: dict[str, object] = {}
    exec("from __future__ import annotations\nclass Odd:\n    def __init__(self, mode: Missing): pass\n", namespace)
    assert read_params(namespace["Odd"], {"mode": "7"}) == {"mode": 7}


def test_parse_spec_text_gives_the_value_text_as_written() -> None:
    assert parse_spec_text("my_mod:Evil:mode=nan, n = 007", what="attack", builtin_names=()) == (
        "my_mod:Evil", {"mode": "nan", "n": "007"})


_PLUGINS = textwrap.dedent('''
    import torch
    from p2p_guard.guard.baselines import Mean

    class Evil:
        kind = "update"

        def __init__(self, mode: str = "zero", scale: float = 1.0):
            self.mode, self.scale = mode, scale

        def __call__(self, honest, own, ctx):
            return own

    class Rule(Mean):
        def __init__(self, label: str = "x"):
            super().__init__()
            self.label = label


    from examples.my_task import MyTask

    class NamedTask(MyTask):
        def __init__(self, *, name: str = "a", hidden: int = 32):
            super().__init__(hidden=hidden)
            self.name = name
''')


def test_user_attack_and_guard_receive_text_for_str_parameters(tmp_path, monkeypatch) -> None:
    (tmp_path / "typed_plugins.py").write_text(_PLUGINS)
    monkeypatch.syspath_prepend(str(tmp_path))
    attack = load_attack("typed_plugins:Evil:mode=nan,scale=2")
    assert (attack.mode, attack.scale) == ("nan", 2)
    guard = build_guard("typed_plugins:Rule:label=1")
    assert guard.aggregator.label == "1"


def test_user_task_receives_text_for_str_parameters(tmp_path, monkeypatch) -> None:
    (tmp_path / "typed_plugins.py").write_text(_PLUGINS)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[2]))  # examples/ from the repository root
    task = load_task("typed_plugins:NamedTask:name=007,hidden=8")
    assert (task.name, task.hidden) == ("007", 8)
