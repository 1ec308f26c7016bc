"""Task specs (``--task NAME[:k=v,...]`` / ``--task MODULE:CLASS[:k=v,...]``), issue 10 items 5 and 6.

- One parser: built-in names with options, ``MODULE:CLASS`` with options, values read as the constructor wants.
- The torch-free check knows each built-in task's options (a table kept equal to the constructors' signatures).
- ``load_task`` gives one-line errors for an unknown option, a bad value, a module that does not import, a name
  that is not a class, a class that is not a Task.
- The example task of docs/tasks.md builds and trains; the simulation's run id tells task specs apart.
- A 25M-parameter Shakespeare configuration builds with the parameter count of its formula.
"""

from __future__ import annotations

import inspect
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from p2p_guard.simulation.config import SimulationConfig
from p2p_guard.tasks import Task, load_task, registry
from p2p_guard.tasks.registry import BUILTIN_OPTIONS, TASK_NAMES, check_task_spec, parse_task_spec

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = "examples.my_task:MyTask"


@pytest.fixture(autouse=True)
def _repo_on_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(REPO))  # examples/ is importable from the repository root, as documented


class TestParse:
    @pytest.mark.parametrize(("spec", "name", "options"), [
        ("digits", "digits", ()),
        ("shakespeare:n_layers=8,d_model=512", "shakespeare", (("n_layers", "8"), ("d_model", "512"))),
        ("fashion-mnist:data_dir=/data/a:b", "fashion-mnist", (("data_dir", "/data/a:b"),)),
        ("examples.my_task:MyTask", EXAMPLE, ()),
        ("pkg.mod:Cls:width=3, flag=true", "pkg.mod:Cls", (("width", "3"), ("flag", "true"))),
    ])
    def test_grammar(self, spec: str, name: str, options: tuple[tuple[str, str], ...]) -> None:
        parsed = parse_task_spec(spec)
        assert (parsed.name, parsed.options) == (name, options)

    @pytest.mark.parametrize(("spec", "message"), [
        ("nosuch", "unknown task 'nosuch'; known tasks: digits, fashion-mnist, shakespeare (or MODULE:CLASS)"),
        ("Digits", "unknown task 'Digits'"),
        ("fashion_mnist:hidden=3", "unknown task 'fashion_mnist'"),
        ("digits:hidden", "bad task spec 'digits:hidden': parameter 'hidden' is not key=value"),
        ("digits:", "bad task spec 'digits:': nothing after ':'"),
        ("digits:hidden=1,hidden=2", "bad task spec 'digits:hidden=1,hidden=2': parameter 'hidden' given twice"),
        ("my-pkg:Cls", "bad task spec 'my-pkg:Cls': expected NAME[:key=value,...] or MODULE:CLASS"),
        ("pkg:Cls:", "bad task spec 'pkg:Cls:': nothing after ':'"),
        ("", "task spec must be a non-empty string"),
    ])
    def test_syntax_errors(self, spec: str, message: str) -> None:
        with pytest.raises(ValueError, match="^" + _literal(message)):
            parse_task_spec(spec)

    def test_values_are_read_as_the_builtin_constructor_takes_them(self) -> None:
        spec = parse_task_spec("shakespeare:context=32,holdout_works=macbeth+tempest,texts_dir=007")
        assert spec.values() == {"context": 32, "holdout_works": ("macbeth", "tempest"), "texts_dir": "007"}
        assert parse_task_spec("digits:test_fraction=1").values() == {"test_fraction": 1.0}
        assert parse_task_spec("pkg:C:a=1,b=0.5,c=TRUE,d=x").values() == {"a": 1, "b": 0.5, "c": True, "d": "x"}

    def test_canonical_and_run_id(self) -> None:
        a = parse_task_spec("shakespeare:n_layers=8,d_model=512")
        b = parse_task_spec("shakespeare:d_model=512,n_layers=8")
        assert a.canonical == b.canonical == "shakespeare:d_model=512,n_layers=8"
        assert a.run_id_part() == b.run_id_part() != parse_task_spec("shakespeare:n_layers=4").run_id_part()
        assert SimulationConfig(task="digits").resolved_run_id == "sim-digits-seed0"  # unchanged for a plain name
        for spec in ("shakespeare:n_layers=8", f"{EXAMPLE}:hidden=64", "a.very.long.module.path.of.many.parts:C"):
            run_id = SimulationConfig(task=spec).resolved_run_id
            from p2p_guard.swarm.config import _RUN_ID

            assert _RUN_ID.fullmatch(run_id), run_id


class TestLightCheck:
    def test_builtin_options_are_the_constructors_keywords(self) -> None:
        assert set(BUILTIN_OPTIONS) == set(TASK_NAMES)
        for name, (module, cls_name) in registry._BUILTIN.items():
            cls = getattr(__import__(module, fromlist=[cls_name]), cls_name)
            keywords = [p.name for p in inspect.signature(cls).parameters.values()]
            assert list(BUILTIN_OPTIONS[name]) == keywords, name

    @pytest.mark.parametrize(("spec", "message"), [
        ("shakespeare:layers=8", "task 'shakespeare:layers=8': unknown option 'layers'; shakespeare takes context, "
                                 "d_model, n_layers, n_heads, eval_windows, holdout_works, texts_dir"),
        ("shakespeare:n_layers=abc", "task 'shakespeare:n_layers=abc': option n_layers='abc' must be an integer"),
        ("digits:test_fraction=x", "task 'digits:test_fraction=x': option test_fraction='x' must be a number"),
        ("fashion-mnist:data_dir=", "task 'fashion-mnist:data_dir=': option data_dir needs a value"),
    ])
    def test_bad_builtin_options(self, spec: str, message: str) -> None:
        with pytest.raises(ValueError, match="^" + _literal(message)):
            check_task_spec(spec)
        with pytest.raises(ValueError, match="^" + _literal(message)):
            load_task(spec)  # the same words from the heavy path

    def test_light_check_imports_no_task_module(self) -> None:
        code = ("import sys\nfrom p2p_guard.tasks.registry import check_task_spec\n"
                "check_task_spec('shakespeare:n_layers=8,d_model=512'); check_task_spec('no.such.module:Cls:x=1')\n"
                "print(sorted(m for m in sys.modules if m in ('torch', 'numpy', 'no.such.module')"
                " or m.startswith('p2p_guard.tasks.')))")
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO,
                              timeout=60)
        assert done.stdout.strip() == "['p2p_guard.tasks.registry']"


class TestLoad:
    def test_builtin_options(self) -> None:
        task = load_task("shakespeare:n_layers=3,d_model=64,context=32")
        assert (task.n_layers, task.d_model, task.context) == (3, 64, 32)  # type: ignore[attr-defined]
        assert load_task("digits:hidden=8", test_fraction=0.3).test_fraction == 0.3  # type: ignore[attr-defined]
        with pytest.raises(ValueError, match="given in the spec and as keywords"):
            load_task("digits:hidden=8", hidden=4)

    def test_the_example_task(self) -> None:
        task = load_task(f"{EXAMPLE}:hidden=16")
        assert isinstance(task, Task)
        model = task.build_model(0)
        assert all(torch.equal(a, b) for a, b in zip(model.parameters(), task.build_model(0).parameters(), strict=True))
        shards = [task.shard(2, i, "iid", seed=0) for i in range(2)]
        assert not set(shards[0].train.tolist()) & set(shards[1].train.tolist())
        x, y = task.sample_batch(shards[0], 8, torch.Generator().manual_seed(0))
        assert (x.shape, x.dtype, y.shape, y.dtype) == ((8, 30), torch.float32, (8,), torch.int64)
        assert task.loss(model, x, y).requires_grad
        metrics = task.evaluate(model)
        assert 0.0 <= metrics.accuracy <= 1.0  # type: ignore[operator]
        assert metrics.perplexity is None

    @pytest.mark.parametrize(("spec", "message"), [
        (f"{EXAMPLE}:width=3", f"task '{EXAMPLE}:width=3': unknown option 'width'; MyTask takes hidden, "
                               "test_fraction"),
        (f"{EXAMPLE}:hidden=x", f"task '{EXAMPLE}:hidden=x': hidden='x' must be an integer >= 1"),
        ("examples.nosuch:MyTask", "task 'examples.nosuch:MyTask': no module named 'examples.nosuch' here or on "
                                   "the Python path (run from the directory that holds it, or add that directory "
                                   "to PYTHONPATH)"),
        ("examples.my_task:Nope", "task 'examples.my_task:Nope': module 'examples.my_task' has no class 'Nope'"),
        ("examples.my_task:np", "task 'examples.my_task:np': examples.my_task:np is a module, not a class"),
        ("collections:OrderedDict", "task 'collections:OrderedDict': collections:OrderedDict is not a Task: it "
                                    "lacks the method(s) build_model, shard"),
    ])
    def test_one_line_errors(self, spec: str, message: str) -> None:
        with pytest.raises(ValueError, match="^" + _literal(message)) as info:
            load_task(spec)
        assert "\n" not in str(info.value)

    def test_a_module_that_raises_on_import_and_an_instance_without_attributes(self, tmp_path: Path,
                                                                              monkeypatch: pytest.MonkeyPatch) -> None:
        (tmp_path / "broken_task.py").write_text("raise RuntimeError('no GPU here')\n")
        methods = "".join(f"    def {m}(self, *a): ...\n" for m in registry.TASK_METHODS)
        (tmp_path / "half_task.py").write_text(f"class Half:\n{methods}")
        monkeypatch.syspath_prepend(str(tmp_path))
        with pytest.raises(ValueError, match=r"^task 'broken_task:T': module 'broken_task' does not import: "
                                             r"RuntimeError: no GPU here$"):
            load_task("broken_task:T")
        with pytest.raises(ValueError, match=r"^task 'half_task:Half': half_task:Half is not a Task: its "
                                             r"instances lack name, kind, num_classes, default_hparams"):
            load_task("half_task:Half")


def test_shakespeare_25m_builds_with_the_formula_count() -> None:
    """2·V·d + T·d + L·(12·d² + 13·d) + 2·d with V = 84, d = 512, T = 256, L = 8: 25,437,184 (not trained)."""
    task = load_task("shakespeare:n_layers=8,d_model=512,n_heads=8,context=256")
    vocab, width, context, layers = task.num_classes, 512, 256, 8
    assert vocab == 84
    expected = 2 * vocab * width + context * width + layers * (12 * width**2 + 13 * width) + 2 * width
    assert expected == 25_437_184
    model = task.build_model(0)
    assert sum(p.numel() for p in model.parameters()) == expected
    assert task.parameter_count() == expected  # type: ignore[attr-defined]
    assert "phoenix_and_the_turtle" not in task.works  # type: ignore[attr-defined]  # too short for T = 256
    shard = task.shard(4, 0, "iid", seed=0)
    x, y = task.sample_batch(shard, 1, torch.Generator().manual_seed(0))
    assert x.shape == y.shape == (1, 256)


def test_shakespeare_defaults_unchanged() -> None:
    task = load_task("shakespeare")
    assert sum(p.numel() for p in task.build_model(0).parameters()) == 246_144
    assert task.parameter_count() == 246_144  # type: ignore[attr-defined]
    assert len(task.works) == 42  # type: ignore[attr-defined]


def test_a_shakespeare_model_larger_than_the_memory_is_refused_before_it_is_built(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """n_layers=100,d_model=4096 (20 billion parameters) was allocated by the up-front check and ran for minutes
    on a 24 GiB machine (helper-63); the count now comes from the formula and the model is never built."""
    import psutil

    from p2p_guard.cli.preflight import check_task_data
    from p2p_guard.tasks.shakespeare import ShakespeareTask

    spec = "shakespeare:n_layers=100,d_model=4096,n_heads=8"

    class Memory:
        total = 24 * 2**30

    monkeypatch.setattr(psutil, "virtual_memory", lambda: Memory())

    def never(self: ShakespeareTask, seed: int) -> None:
        raise AssertionError("built")

    monkeypatch.setattr(ShakespeareTask, "build_model", never)
    with pytest.raises(ValueError) as raised:
        check_task_data(spec)
    assert str(raised.value) == (f"task {spec!r}: its model cannot be built here: 20,138,942,464 parameters need "
                                 "75.0 GiB in float32, more than this machine's 24.0 GiB of memory")


def _literal(text: str) -> str:
    import re

    return re.escape(text)


@pytest.mark.parametrize("command", ["simulate", "peer"])
def test_toml_task_spec_is_checked_like_the_flag(tmp_path: Path, command: str,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    from p2p_guard.cli.main import main

    config = tmp_path / "c.toml"
    config.write_text(f'[{command}]\ntask = "shakespeare:n_layers=8,width=512"\n', encoding="utf-8")
    extra = ["--initial-peers", "/ip4/127.0.0.1/tcp/31337/p2p/12D3KooWDpJ7As7BWAwRMfu1VU2WCqNjvq387JEYKDBj4kx6nXTN",
             "--identity", str(tmp_path / "k.key"), "--port", "0"] if command == "peer" else []
    assert main([command, "--config", str(config), *extra]) == 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        f"p2p-guard {command}: error: task 'shakespeare:n_layers=8,width=512': unknown option 'width'; shakespeare "
        "takes context, d_model, n_layers, n_heads, eval_windows, holdout_works, texts_dir")


def test_a_user_module_is_found_in_the_current_directory_when_not_on_the_path(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The ``p2p-guard`` console script's sys.path lacks the current directory; the module is found anyway."""
    from p2p_guard.plugin_spec import import_user_module

    (tmp_path / "cwd_only_task_mod.py").write_text("VALUE = 42\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    monkeypatch.delitem(sys.modules, "cwd_only_task_mod", raising=False)
    before = list(sys.path)
    with pytest.raises(ModuleNotFoundError):
        import_user_module("cwd_only_task_mod_absent")
    assert sys.path == before  # the directory is not left on the path after a miss
    assert import_user_module("cwd_only_task_mod").VALUE == 42
    assert sys.path == [*before, str(tmp_path)]  # appended last: it never shadows an installed module
    sys.modules.pop("cwd_only_task_mod")


@pytest.mark.parametrize(("code", "call"), [("import sys\nsys.exit()\n", "sys.exit()"),
                                            ("raise SystemExit(3)\n", "sys.exit(3)")])
def test_a_plugin_module_that_calls_sys_exit_on_import_is_a_one_line_error(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], code: str,
        call: str) -> None:
    """``sys.exit()`` at import would end the run silently (exit 0): it is a bad spec, as any other import failure."""
    from p2p_guard.attacks import load_attack
    from p2p_guard.cli.main import main
    from p2p_guard.guard.registry import build_guard

    (tmp_path / "exiting_plugin.py").write_text(code)
    monkeypatch.syspath_prepend(str(tmp_path))
    reason = f"module 'exiting_plugin' does not import: ImportError: it calls {call} on import"
    for load, what in ((load_task, "task"), (build_guard, "guard spec"), (load_attack, "attack spec")):
        with pytest.raises(ValueError) as info:
            load("exiting_plugin:Plugin")
        assert str(info.value) == f"{what} 'exiting_plugin:Plugin': {reason}"
    assert "exiting_plugin" not in sys.modules
    assert main(["simulate", "--guard", "exiting_plugin:Plugin", "--workdir", str(tmp_path / "run")]) == 2
    assert capsys.readouterr().err == f"p2p-guard simulate: error: guard spec 'exiting_plugin:Plugin': {reason}\n"


_EXITING_CONSTRUCTORS = '''
import sys
from p2p_guard.tasks.digits import DigitsTask


class ExitTask(DigitsTask):
    def __init__(self, **kwargs):
        sys.exit(0)


class ExitGuard:
    def __init__(self):
        sys.exit(0)

    def __call__(self, updates, ctx):
        return updates.mean(0)


class RaisingGuard(ExitGuard):
    def __init__(self):
        raise RuntimeError("no GPU for my rule")


class ExitAttack:
    kind = "update"

    def __init__(self):
        sys.exit(0)

    def __call__(self, *args, **kwargs):
        return None
'''


def test_a_plugin_constructor_that_calls_sys_exit_or_raises_is_a_one_line_error(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """``simulate --task/--guard/--attack mod:Class`` whose constructor calls ``sys.exit(0)`` ended with exit 0 and
    no output at all; a user guard whose constructor raised RuntimeError printed a traceback (exit 1)."""
    from p2p_guard.attacks import load_attack
    from p2p_guard.cli.main import main
    from p2p_guard.guard.registry import build_guard

    (tmp_path / "exiting_ctor.py").write_text(_EXITING_CONSTRUCTORS)
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ValueError, match=r"^task 'exiting_ctor:ExitTask': RuntimeError: ExitTask\(\) calls "
                                         r"sys\.exit\(0\) in its constructor$"):
        load_task("exiting_ctor:ExitTask")
    with pytest.raises(ValueError, match=r"^guard 'exiting_ctor:ExitGuard': RuntimeError: ExitGuard\(\) calls "
                                         r"sys\.exit\(0\) in its constructor$"):
        build_guard("exiting_ctor:ExitGuard")
    with pytest.raises(RuntimeError, match=r"^ExitAttack\(\) calls sys\.exit\(0\) in its constructor$"):
        load_attack("exiting_ctor:ExitAttack")
    cases = (
        (["--task", "exiting_ctor:ExitTask"],
         "task 'exiting_ctor:ExitTask': RuntimeError: ExitTask() calls sys.exit(0) in its constructor"),
        (["--guard", "exiting_ctor:ExitGuard"],
         "guard 'exiting_ctor:ExitGuard': RuntimeError: ExitGuard() calls sys.exit(0) in its constructor"),
        (["--guard", "exiting_ctor:RaisingGuard"],
         "guard 'exiting_ctor:RaisingGuard': RuntimeError: no GPU for my rule"),
        (["--attack", "exiting_ctor:ExitAttack"],
         "--attack 'exiting_ctor:ExitAttack' does not load: ExitAttack() calls sys.exit(0) in its constructor"),
    )
    for flags, message in cases:
        assert main(["simulate", "--honest", "2", "--byzantine", "1", *flags,
                     "--workdir", str(tmp_path / "run")]) == 2, flags
        assert capsys.readouterr().err == f"p2p-guard simulate: error: {message}\n"
        assert not (tmp_path / "run").exists()
    sys.modules.pop("exiting_ctor")


_FAILING_TASK_METHODS = '''
import sys
from p2p_guard.tasks.digits import DigitsTask


class NotAModel(DigitsTask):
    def build_model(self, seed):
        return 42


class BuildFails(DigitsTask):
    def build_model(self, seed):
        raise KeyError("layer_sizes")


class ShardFails(DigitsTask):
    def shard(self, num_shards, index, partition, seed):
        raise RuntimeError("my data server is down")


class ShardExits(DigitsTask):
    def shard(self, num_shards, index, partition, seed):
        sys.exit(4)
'''


@pytest.mark.parametrize(("cls", "message"), [
    ("NotAModel", "build_model(0) returned a int, not a torch.nn.Module (see docs/tasks.md)"),
    ("BuildFails", "build_model(0) raised KeyError: 'layer_sizes'"),
    ("ShardFails", "shard(3, 0, 'iid', 0) raised RuntimeError: my data server is down"),
    ("ShardExits", "shard(3, 0, 'iid', 0) raised sys.exit(4)"),
])
def test_a_user_task_whose_build_model_or_shard_fails_is_a_one_line_error(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], cls: str,
        message: str) -> None:
    """``simulate --task mod:T`` printed a traceback (exit 1) when T.build_model returned no module or raised
    something else than OSError/RuntimeError, or T.shard raised something else than ValueError."""
    from p2p_guard.cli.main import main

    (tmp_path / "failing_task_methods.py").write_text(_FAILING_TASK_METHODS)
    monkeypatch.syspath_prepend(str(tmp_path))
    spec = f"failing_task_methods:{cls}"
    assert main(["simulate", "--task", spec, "--honest", "3", "--byzantine", "0",
                 "--workdir", str(tmp_path / "run")]) == 2
    assert capsys.readouterr().err == f"p2p-guard simulate: error: task {spec!r}: {message}\n"
    assert not (tmp_path / "run").exists()
    sys.modules.pop("failing_task_methods")
