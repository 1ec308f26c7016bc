"""A user's task (``--task MODULE:CLASS``) whose method raises stops the peer with one line, not a traceback.

helper-48: a ``loss`` that raised stopped the peer with a raw traceback through the inner phase's thread and
asyncio, naming neither the task nor the method, and exited through ``asyncio.run`` without the run's exit code.
Now every method of a user's task raises ``TaskFailed`` (``tasks/guarded.py``), and the peer logs one ERROR line
naming the spec, class, method and exception, shuts down as on a stop, and exits 1. The live run (a real swarm)
is ``tests/integration/test_user_task_failure_live.py``.
"""

from __future__ import annotations

import asyncio
import math
import logging
from pathlib import Path

import pytest
import torch

from p2p_guard.swarm import peer as peer_module
from p2p_guard.swarm.config import PeerConfig
from p2p_guard.tasks import load_task
from p2p_guard.tasks.guarded import GuardedTask, TaskFailed, guard_user_task
from p2p_guard.training.local import LocalModel

FAILING_TASK = '''
from p2p_guard.tasks.digits import DigitsTask


class Failing(DigitsTask):
    """digits, except that its loss divides by zero and its evaluation has no data."""

    name = "failing"

    def loss(self, model, x, y):
        return 1 / 0

    def evaluate(self, model, device="cpu"):
        raise FileNotFoundError("held-out split missing")
'''
SPEC = "failing_task:Failing"
LOSS_LINE = "task 'failing_task:Failing': Failing.loss raised ZeroDivisionError: division by zero"


@pytest.fixture
def failing_task(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> GuardedTask:
    (tmp_path / "failing_task.py").write_text(FAILING_TASK, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    task = guard_user_task(load_task(SPEC), SPEC)
    assert isinstance(task, GuardedTask)
    return task


def test_a_failing_method_is_one_error_naming_spec_class_method_and_exception(failing_task: GuardedTask) -> None:
    model = failing_task.build_model(0)
    with pytest.raises(TaskFailed) as caught:
        failing_task.loss(model, torch.zeros(2, 64), torch.zeros(2, dtype=torch.int64))
    assert str(caught.value) == LOSS_LINE
    assert isinstance(caught.value.__cause__, ZeroDivisionError)  # the user's traceback stays attached
    assert (caught.value.spec, caught.value.class_name, caught.value.method) == (SPEC, "Failing", "loss")
    with pytest.raises(TaskFailed, match=r"^task 'failing_task:Failing': Failing\.evaluate raised "
                                         r"FileNotFoundError: held-out split missing$"):
        failing_task.evaluate(model)


def test_the_wrapper_passes_everything_else_through(failing_task: GuardedTask) -> None:
    assert (failing_task.name, failing_task.kind, failing_task.num_classes) == ("failing", "classification", 10)
    assert failing_task.default_hparams == failing_task.task.default_hparams
    shard = failing_task.shard(2, 1, "iid", 0)
    x, y = failing_task.sample_batch(shard, 4, torch.Generator().manual_seed(0))
    assert (tuple(x.shape), tuple(y.shape)) == ((4, 64), (4,))


def test_builtin_tasks_are_not_wrapped() -> None:
    task = load_task("digits")
    assert guard_user_task(task, "digits") is task


def test_the_inner_phase_raises_it_from_the_user_loss(failing_task: GuardedTask) -> None:
    local = LocalModel(failing_task, seed=0, num_shards=2, shard_index=0, partition="iid")
    with pytest.raises(TaskFailed, match=r"^task 'failing_task:Failing': Failing\.loss raised ZeroDivisionError"):
        local.train_round(2, torch.Generator().manual_seed(0))


def test_the_peer_logs_one_line_and_exits_1(failing_task: GuardedTask, monkeypatch: pytest.MonkeyPatch,
                                            caplog: pytest.LogCaptureFixture) -> None:
    local = LocalModel(failing_task, seed=0, num_shards=2, shard_index=0, partition="iid")

    async def main(config: PeerConfig, progress: bool, stop: asyncio.Event) -> int:
        local.train_round(1, torch.Generator().manual_seed(0))  # the peer's inner phase, without a swarm
        return 0

    monkeypatch.setattr(peer_module, "_main", main)
    with caplog.at_level(logging.INFO, logger="p2p_guard"):
        assert asyncio.run(peer_module._run_with_signals(PeerConfig(task=SPEC), False)) == 1
    errors = [(r.levelname, r.getMessage()) for r in caplog.records if r.levelno >= logging.WARNING]
    hint = "(p2p-guard --log-level DEBUG peer ..., or simulate --peer-log-level DEBUG, logs its traceback)"
    assert errors == [("ERROR", f"peer stopped: {LOSS_LINE} {hint}")]
    assert all(r.exc_info is None for r in caplog.records)  # no traceback at INFO


def test_at_debug_the_traceback_is_logged(failing_task: GuardedTask, monkeypatch: pytest.MonkeyPatch,
                                          caplog: pytest.LogCaptureFixture) -> None:
    async def main(config: PeerConfig, progress: bool, stop: asyncio.Event) -> int:
        failing_task.loss(torch.nn.Identity(), torch.zeros(1), torch.zeros(1))
        return 0

    monkeypatch.setattr(peer_module, "_main", main)
    with caplog.at_level(logging.DEBUG, logger="p2p_guard"):
        assert asyncio.run(peer_module._run_with_signals(PeerConfig(task=SPEC), False)) == 1
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert errors == [f"peer stopped: {LOSS_LINE}"]
    traced = [r for r in caplog.records if r.exc_info is not None]
    assert [r.getMessage() for r in traced] == ["traceback of the task's failure"]
    assert isinstance(traced[0].exc_info[1].__cause__, ZeroDivisionError)  # type: ignore[index]


def test_a_background_report_with_a_failing_evaluate_stops_the_rounds(failing_task: GuardedTask) -> None:
    """A failed report (disk full, DHT down) is logged and training goes on; a user's broken evaluate() is not."""
    async def evaluate() -> None:
        failing_task.evaluate(torch.nn.Identity())

    async def disk_full() -> None:
        raise OSError("No space left on device")

    async def scenario() -> None:
        reports = peer_module._Reports()
        reports.start(disk_full())
        await reports.wait()  # swallowed, as before
        reports.start(evaluate())
        await reports.wait()

    with pytest.raises(TaskFailed, match=r"Failing\.evaluate raised FileNotFoundError: held-out split missing$"):
        asyncio.run(scenario())


BAD_TASKS = '''
import sys

import torch
import torch.nn.functional as F

from p2p_guard.tasks.digits import DigitsTask


class Exits(DigitsTask):
    def loss(self, model, x, y):
        sys.exit(3)


class ExitsZero(DigitsTask):
    def loss(self, model, x, y):
        sys.exit(0)


class ExitsNone(DigitsTask):
    def sample_batch(self, shard, batch_size, generator):
        sys.exit()


class Interrupts(DigitsTask):
    def sample_batch(self, shard, batch_size, generator):
        raise KeyboardInterrupt


class Float(DigitsTask):
    def loss(self, model, x, y):
        return 0.5


class Vector(DigitsTask):
    def loss(self, model, x, y):
        return F.cross_entropy(model(x), y, reduction="none")[:3]


class Integer(DigitsTask):
    def loss(self, model, x, y):
        return torch.tensor(1)


class Detached(DigitsTask):
    def loss(self, model, x, y):
        return F.cross_entropy(model(x), y).detach()


class NaNAt(DigitsTask):
    """Its loss is NaN at the calls listed in ``nan_at`` (0-based), else digits' own."""

    def __init__(self, nan_at=(), **kwargs):
        super().__init__(**kwargs)
        self.nan_at, self.calls = set(nan_at), 0

    def loss(self, model, x, y):
        self.calls += 1
        loss = super().loss(model, x, y)
        return loss * float("nan") if self.calls - 1 in self.nan_at else loss
'''


@pytest.fixture
def bad_tasks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "bad_tasks.py").write_text(BAD_TASKS, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))


def _guarded(name: str) -> GuardedTask:
    spec = f"bad_tasks:{name}"
    task = guard_user_task(load_task(spec), spec)
    assert isinstance(task, GuardedTask)
    return task


def _in_a_thread(call: object) -> BaseException | None:
    """Run ``call()`` in a worker thread (as the peer's inner phase does); what it raised, None if nothing."""
    import threading

    raised: list[BaseException] = []

    def run() -> None:
        try:
            call()  # type: ignore[operator]
        except BaseException as e:  # noqa: BLE001 - a KeyboardInterrupt here must not end the test session
            raised.append(e)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    return raised[0] if raised else None


@pytest.mark.usefixtures("bad_tasks")
def test_sys_exit_in_a_method_is_a_task_failure() -> None:
    """A user's sys.exit(3) in loss went up through asyncio.to_thread and asyncio.run: the peer process ended with
    status 3, no line, no leave record."""
    local = LocalModel(_guarded("Exits"), seed=0, num_shards=2, shard_index=0, partition="iid")
    raised = _in_a_thread(lambda: local.train_round(2, torch.Generator().manual_seed(0)))
    assert isinstance(raised, TaskFailed)
    assert str(raised) == "task 'bad_tasks:Exits': Exits.loss called sys.exit(3)"
    assert isinstance(raised.__cause__, SystemExit)


@pytest.mark.usefixtures("bad_tasks")
def test_a_keyboard_interrupt_outside_the_main_thread_is_a_task_failure() -> None:
    """No Ctrl+C reaches a worker thread: there a KeyboardInterrupt is the task's own (the peer ended with 130 and
    no line). In the main thread it may be a real Ctrl+C and stays one."""
    task = _guarded("Interrupts")
    shard = task.shard(2, 0, "iid", 0)
    raised = _in_a_thread(lambda: task.sample_batch(shard, 4, torch.Generator().manual_seed(0)))
    assert isinstance(raised, TaskFailed)
    assert str(raised) == "task 'bad_tasks:Interrupts': Interrupts.sample_batch raised KeyboardInterrupt"
    with pytest.raises(KeyboardInterrupt):
        task.sample_batch(shard, 4, torch.Generator().manual_seed(0))


@pytest.mark.parametrize(("name", "returned"), [
    ("Float", "returned a float (0.5), not a scalar tensor"),
    ("Vector", "returned a tensor of shape [3], not a scalar tensor (reduce it, e.g. .mean())"),
    ("Integer", "returned a torch.int64 tensor, not a floating-point scalar"),
    ("Detached", "returned a tensor without autograd (computed under no_grad, or detached), so nothing can be "
                 "trained from it"),
])
@pytest.mark.usefixtures("bad_tasks")
def test_a_loss_that_is_no_scalar_tensor_is_one_line(name: str, returned: str) -> None:
    """These failed in loss.backward() (AttributeError, RuntimeError) with a traceback naming neither the task
    nor the method."""
    local = LocalModel(_guarded(name), seed=0, num_shards=2, shard_index=0, partition="iid")
    with pytest.raises(TaskFailed) as caught:
        local.train_round(2, torch.Generator().manual_seed(0))
    assert str(caught.value) == f"task 'bad_tasks:{name}': {name}.loss {returned}"


@pytest.mark.parametrize(("nan_at", "warnings"), [
    ((1,), ["inner step 2 of 3: task 'digits': loss returned nan; step skipped (no backward, no optimizer step)"]),
    ((0, 1, 2), ["inner step 1 of 3: task 'digits': loss returned nan; step skipped (no backward, no optimizer "
                 "step)", "inner phase: every one of its 3 steps had a non-finite loss; the model did not move "
                 "(a zero update)"]),
])
@pytest.mark.usefixtures("bad_tasks")
def test_a_non_finite_loss_skips_its_step(nan_at: tuple[int, ...], warnings: list[str],
                                          caplog: pytest.LogCaptureFixture) -> None:
    """A NaN loss was backpropagated: every weight of the peer's own model became NaN for good (its Δ too).
    Now that step is skipped with a warning, the model stays finite, and the loss is the mean of the others."""
    spec = "bad_tasks:NaNAt"
    task = guard_user_task(load_task(spec, nan_at=nan_at), spec)
    local = LocalModel(task, seed=0, num_shards=2, shard_index=0, partition="iid")
    with caplog.at_level(logging.WARNING, logger="p2p_guard"):
        delta, loss = local.train_round(3, torch.Generator().manual_seed(0))
    assert [r.getMessage() for r in caplog.records] == warnings
    assert bool(torch.isfinite(delta).all())
    if len(nan_at) == 3:
        assert not bool(delta.any()) and math.isnan(loss)
    else:
        assert bool(delta.any()) and math.isfinite(loss)


@pytest.mark.usefixtures("bad_tasks")
def test_the_peer_stops_with_one_line_on_a_sys_exit_in_its_inner_phase(monkeypatch: pytest.MonkeyPatch,
                                                                      caplog: pytest.LogCaptureFixture) -> None:
    local = LocalModel(_guarded("Exits"), seed=0, num_shards=2, shard_index=0, partition="iid")

    async def main(config: PeerConfig, progress: bool, stop: asyncio.Event) -> int:
        await asyncio.to_thread(local.train_round, 1, torch.Generator().manual_seed(0))  # as the peer runs it
        return 0

    monkeypatch.setattr(peer_module, "_main", main)
    with caplog.at_level(logging.INFO, logger="p2p_guard"):
        assert asyncio.run(peer_module._run_with_signals(PeerConfig(task="bad_tasks:Exits"), False)) == 1
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(errors) == 1
    assert errors[0].startswith("peer stopped: task 'bad_tasks:Exits': Exits.loss called sys.exit(3) (")


@pytest.mark.usefixtures("bad_tasks")
@pytest.mark.parametrize(("name", "method", "call"), [("ExitsZero", "loss", "sys.exit(0)"),
                                                      ("ExitsNone", "sample_batch", "sys.exit()")])
def test_sys_exit_0_says_plainly_that_training_ended_early_as_a_failure(
        name: str, method: str, call: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """A user's sys.exit(0) asks for success, but the peer stops mid-run and exits 1: the line says why."""
    local = LocalModel(_guarded(name), seed=0, num_shards=2, shard_index=0, partition="iid")

    async def main(config: PeerConfig, progress: bool, stop: asyncio.Event) -> int:
        await asyncio.to_thread(local.train_round, 1, torch.Generator().manual_seed(0))  # as the peer runs it
        return 0

    monkeypatch.setattr(peer_module, "_main", main)
    with caplog.at_level(logging.INFO, logger="p2p_guard"):
        assert asyncio.run(peer_module._run_with_signals(PeerConfig(task=f"bad_tasks:{name}"), False)) == 1
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(errors) == 1
    assert errors[0].startswith(
        f"peer stopped: task 'bad_tasks:{name}': {name}.{method} called {call}: training ended early, and that is "
        f"a failure (a task method cannot end a peer's training with success; set --rounds, or stop the peer with "
        f"Ctrl+C or SIGTERM) (p2p-guard --log-level DEBUG")
