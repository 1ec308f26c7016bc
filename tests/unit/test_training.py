"""Training: flat parameter vectors, the inner AdamW phase and the outer Nesterov step."""

from __future__ import annotations

import dataclasses
import math
import threading

import pytest
import torch
from torch import Tensor

from p2p_guard.tasks import Task, load_task
from p2p_guard.training import (
    InnerAdamW,
    InnerPhaseStopped,
    autocast_dtype,
    inner_autocast,
    OuterNesterov,
    TOPK_OUTER_LR,
    TOPK_OUTER_MOMENTUM,
    flatten,
    load_flat,
    make_inner_optimizer,
    num_params,
    outer_defaults,
    param_shapes,
    run_inner_steps,
)


@pytest.fixture(scope="module")
def digits() -> Task:
    return load_task("digits")


# ------------------------------------------------------------------ params


def test_flatten_load_round_trip(digits: Task) -> None:
    model = digits.build_model(0)
    vec = flatten(model)
    assert vec.shape == (num_params(model),) == (4810,)
    assert vec.dtype == torch.float32 and vec.device.type == "cpu" and not vec.requires_grad
    assert sum(torch.Size(s).numel() for s in param_shapes(model)) == vec.numel()
    assert param_shapes(model) == ((64, 64), (64,), (10, 64), (10,))

    original = vec.clone()
    vec.add_(1.0)  # a copy: the model does not change
    assert torch.equal(flatten(model), original)

    other = digits.build_model(1)
    load_flat(other, vec)
    assert torch.equal(flatten(other), vec)
    assert all(p.requires_grad and p.grad_fn is None for p in other.parameters())
    loaded = vec.clone()
    vec.zero_()  # loaded by copy, too
    assert torch.equal(flatten(other), loaded)


@pytest.mark.parametrize("bad", [torch.zeros(4809), torch.zeros(4810, dtype=torch.int64), torch.zeros(2, 2405)])
def test_load_flat_rejects(digits: Task, bad: Tensor) -> None:
    with pytest.raises(ValueError, match="4810"):
        load_flat(digits.build_model(0), bad)


# ------------------------------------------------------------------- outer


@pytest.mark.parametrize(("lr", "momentum"), [(0.7, 0.9), (0.3, 0.0), (1.0, 0.5)])
def test_outer_nesterov_matches_torch_sgd(lr: float, momentum: float) -> None:
    gen = torch.Generator().manual_seed(0)
    d = 1003
    theta = torch.randn(d, generator=gen)
    param = torch.nn.Parameter(theta.clone())
    sgd = torch.optim.SGD([param], lr=lr, momentum=momentum, nesterov=momentum > 0)
    outer = OuterNesterov(lr=lr, momentum=momentum)
    for _ in range(6):
        aggregate = torch.randn(d, generator=gen)
        before = (theta.clone(), aggregate.clone())
        new = outer.step(theta, aggregate)
        assert torch.equal(theta, before[0]) and torch.equal(aggregate, before[1])  # inputs untouched
        param.grad = aggregate.clone()
        sgd.step()
        assert torch.equal(new, param.detach())
        if momentum:
            assert outer.momentum_buffer is not None
            assert torch.equal(outer.momentum_buffer, sgd.state[param]["momentum_buffer"])
        theta = new


@pytest.mark.parametrize("codec", ["fp32", "fp16", "int8", "int4"])
def test_outer_defaults_dense_codecs_are_diloco(codec: str) -> None:
    assert outer_defaults(codec) == (0.7, 0.9)


@pytest.mark.parametrize("codec", ["topk", "topk:density=0.01", "topk:density=0.05"])
def test_outer_defaults_topk_is_sparseloco_without_momentum(codec: str) -> None:
    assert TOPK_OUTER_MOMENTUM == 0.0
    assert outer_defaults(codec) == (TOPK_OUTER_LR, 0.0)


def test_outer_without_momentum_is_theta_minus_lr_times_aggregate() -> None:
    """SparseLoCo's outer step θ ← θ − α · mean(Δ̂): exact numbers, and no buffer kept."""
    outer = OuterNesterov(lr=0.5, momentum=0.0)
    theta = torch.tensor([1.0, -2.0, 0.25])
    for aggregate, want in [([2.0, 0.0, -0.5], [0.0, -2.0, 0.5]), ([1.0, 1.0, 1.0], [-0.5, -2.5, 0.0])]:
        theta = outer.step(theta, torch.tensor(aggregate))
        assert theta.tolist() == want and outer.momentum_buffer is None


def test_outer_nesterov_state_round_trip_and_determinism() -> None:
    gen = torch.Generator().manual_seed(1)
    theta = torch.randn(50, generator=gen)
    aggregates = [torch.randn(50, generator=gen) for _ in range(4)]
    a, b = OuterNesterov(), OuterNesterov()
    assert a.momentum_buffer is None
    ta = tb = theta
    for g in aggregates[:2]:
        ta, tb = a.step(ta, g), b.step(tb, g)
    assert torch.equal(ta, tb)
    c = OuterNesterov(lr=0.1, momentum=0.1)
    c.load_state_dict(a.state_dict())
    assert (c.lr, c.momentum) == (0.7, 0.9)
    state = a.state_dict()
    state["momentum_buffer"].add_(1.0)  # state_dict hands out a copy
    tc = ta
    for g in aggregates[2:]:
        ta, tc = a.step(ta, g), c.step(tc, g)
    assert torch.equal(ta, tc)


@pytest.mark.parametrize(
    "state",
    [
        {"lr": 0.7, "momentum": 0.9},
        {"lr": -1.0, "momentum": 0.9, "momentum_buffer": None},
        {"lr": 0.7, "momentum": 0.9, "momentum_buffer": torch.zeros(3, dtype=torch.float64)},
        {"lr": 0.7, "momentum": 0.9, "momentum_buffer": torch.tensor([float("nan")])},
        {"lr": 0.7, "momentum": 0.9, "momentum_buffer": [0.0]},
    ],
)
def test_outer_load_state_rejects(state: dict[str, object]) -> None:
    outer = OuterNesterov()
    with pytest.raises(ValueError):  # noqa: PT011 - each case has its own message
        outer.load_state_dict(state)
    assert outer.momentum_buffer is None


@pytest.mark.parametrize(("lr", "momentum"), [(0.0, 0.9), (float("inf"), 0.9), (0.7, 1.0), (0.7, -0.1), (True, 0.9)])
def test_outer_constructor_rejects(lr: float, momentum: float) -> None:
    with pytest.raises(ValueError, match="lr|momentum"):
        OuterNesterov(lr=lr, momentum=momentum)


def test_outer_step_rejects_bad_vectors() -> None:
    outer = OuterNesterov()
    theta = torch.zeros(5)
    for bad in (torch.zeros(4), torch.zeros(5, dtype=torch.float64), torch.zeros(1, 5), torch.full((5,), float("nan"))):
        with pytest.raises(ValueError):  # noqa: PT011
            outer.step(theta, bad)
    outer.step(theta, torch.ones(5))
    with pytest.raises(ValueError, match="buffer"):
        outer.step(torch.zeros(6), torch.ones(6))


# ------------------------------------------------------------------- inner


def test_make_inner_optimizer_uses_task_defaults(digits: Task) -> None:
    model = digits.build_model(0)
    opt = make_inner_optimizer(model, digits)
    group = opt.param_groups[0]
    hp = digits.default_hparams
    assert isinstance(opt, InnerAdamW)
    assert (group["lr"], group["betas"], group["weight_decay"]) == (hp.inner_lr, hp.betas, hp.weight_decay)
    assert make_inner_optimizer(model, digits, lr=1e-4).param_groups[0]["lr"] == 1e-4
    with pytest.raises(ValueError, match="lr"):
        make_inner_optimizer(model, digits, lr=0.0)


def _two_models(digits: Task) -> tuple[torch.nn.Module, torch.nn.Module]:
    first, second = digits.build_model(0), digits.build_model(0)
    assert torch.equal(flatten(first), flatten(second))
    return first, second


@pytest.mark.parametrize("weight_decay", [0.0, 0.1])
def test_inner_adamw_matches_torch_adamw_bit_for_bit(digits: Task, weight_decay: float) -> None:
    """Same parameters, gradients and learning rates: θ and both moments equal torch.optim.AdamW's exactly."""
    ours_model, torch_model = _two_models(digits)
    hp = digits.default_hparams
    ours = InnerAdamW(ours_model.parameters(), lr=hp.inner_lr, betas=hp.betas, weight_decay=weight_decay)
    reference = torch.optim.AdamW(torch_model.parameters(), lr=hp.inner_lr, betas=hp.betas,
                                  weight_decay=weight_decay)
    shard = digits.shard(1, 0, "iid", seed=0)
    gen = torch.Generator().manual_seed(5)
    for step in range(60):
        x, y = digits.sample_batch(shard, 32, gen)
        lr = hp.inner_lr * (step + 1) / 10 if step < 10 else hp.inner_lr / (1 + step // 20)  # warm-up, then decay
        for model, opt in ((ours_model, ours), (torch_model, reference)):
            opt.param_groups[0]["lr"] = lr
            opt.zero_grad(set_to_none=True)
            digits.loss(model, x, y).backward()
            if step % 7 == 3:  # a parameter without gradient this step: skipped, its state untouched
                list(model.parameters())[-1].grad = None
            opt.step()
        assert torch.equal(flatten(ours_model), flatten(torch_model)), f"θ differs after step {step}"
    for p_ours, p_torch in zip(ours_model.parameters(), torch_model.parameters(), strict=True):
        mine, theirs = ours.state[p_ours], reference.state[p_torch]
        assert torch.equal(mine["step"], theirs["step"]) and mine["step"].dtype == theirs["step"].dtype
        assert torch.equal(mine["exp_avg"], theirs["exp_avg"])
        assert torch.equal(mine["exp_avg_sq"], theirs["exp_avg_sq"])


def test_inner_adamw_rejects_bad_settings(digits: Task) -> None:
    params = list(digits.build_model(0).parameters())
    for kwargs in ({"lr": -1.0}, {"lr": float("nan")}, {"eps": -1e-8}, {"betas": (1.0, 0.9)},
                   {"betas": (0.9, -0.1)}, {"weight_decay": -0.1}):
        with pytest.raises(ValueError):
            InnerAdamW(params, **kwargs)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="empty"):
        InnerAdamW([])


def test_inner_optimizer_does_not_import_dynamo() -> None:
    """The peer's inner phase must not pull in torch._dynamo (about 70 MiB per peer): checked in a fresh process."""
    import subprocess
    import sys

    code = (
        "import sys, torch\n"
        "from p2p_guard.tasks import load_task\n"
        "from p2p_guard.training import make_inner_optimizer, run_inner_steps\n"
        "task = load_task('digits'); model = task.build_model(0); opt = make_inner_optimizer(model, task)\n"
        "run_inner_steps(model, task, task.shard(1, 0, 'iid', seed=0), 3, opt, torch.Generator())\n"
        "print(sorted(m for m in ('torch._dynamo', 'sympy') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=300)
    assert out.stdout.strip() == "[]"


def test_run_inner_steps_learns_and_is_deterministic(digits: Task) -> None:
    shard = digits.shard(2, 0, "iid", seed=0)

    def train() -> tuple[list[float], Tensor]:
        model = digits.build_model(0)
        opt = make_inner_optimizer(model, digits)
        gen = torch.Generator().manual_seed(3)
        losses = [run_inner_steps(model, digits, shard, 20, opt, gen) for _ in range(3)]
        return losses, flatten(model)

    losses, theta = train()
    again, theta_again = train()
    assert losses == again
    assert torch.equal(theta, theta_again)
    assert losses[2] < losses[0] < 2.5


@pytest.mark.parametrize(
    ("device", "enabled", "expected"),
    [
        ("cpu", True, None),
        ("cpu", False, None),
        (torch.device("cpu"), True, None),
        ("cuda", True, torch.bfloat16),
        (torch.device("cuda", 1), True, torch.bfloat16),
        ("cuda", False, None),
    ],
)
def test_autocast_dtype_is_bf16_on_cuda_only_unless_disabled(
    device: torch.device | str, enabled: bool, expected: torch.dtype | None
) -> None:
    assert autocast_dtype(device, enabled) == expected


def test_inner_autocast_context_without_a_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    import contextlib

    assert isinstance(inner_autocast("cpu", True), contextlib.nullcontext)
    assert isinstance(inner_autocast("cuda", False), contextlib.nullcontext)
    made: list[dict[str, object]] = []
    monkeypatch.setattr(torch, "autocast", lambda **kwargs: made.append(kwargs) or contextlib.nullcontext())
    inner_autocast(torch.device("cuda"), True)
    assert made == [{"device_type": "cuda", "dtype": torch.bfloat16}]


def test_run_inner_steps_on_cpu_is_unchanged_by_the_autocast_flag(digits: Task) -> None:
    shard = digits.shard(2, 0, "iid", seed=0)

    def train(mixed_precision: bool) -> tuple[float, Tensor]:
        model = digits.build_model(0)
        opt = make_inner_optimizer(model, digits)
        loss = run_inner_steps(model, digits, shard, 5, opt, torch.Generator().manual_seed(3),
                               mixed_precision=mixed_precision)
        return loss, flatten(model)

    (loss_on, theta_on), (loss_off, theta_off) = train(True), train(False)
    assert loss_on == loss_off
    assert torch.equal(theta_on, theta_off)


def test_run_inner_steps_rejects(digits: Task) -> None:
    model = digits.build_model(0)
    opt = make_inner_optimizer(model, digits)
    shard = digits.shard(2, 0, "iid", seed=0)
    with pytest.raises(ValueError, match="steps"):
        run_inner_steps(model, digits, shard, 0, opt, torch.Generator())
    with pytest.raises(ValueError, match="batch_size"):
        run_inner_steps(model, digits, shard, 1, opt, torch.Generator(), batch_size=0)


class _HaltAfter:
    """A no-op data transform that sets ``halt`` during step ``k`` (1-based): the phase must stop after it."""

    def __init__(self, halt: threading.Event, k: int) -> None:
        self.halt, self.k, self.calls = halt, k, 0

    def transform(self, x: Tensor, y: Tensor, num_classes: int) -> tuple[Tensor, Tensor]:
        self.calls += 1
        if self.calls == self.k:
            self.halt.set()
        return x, y


def test_halt_stops_the_inner_phase_within_one_step(digits: Task) -> None:
    model = digits.build_model(0)
    opt = make_inner_optimizer(model, digits)
    shard = digits.shard(2, 0, "iid", seed=0)
    halt = threading.Event()
    stopper = _HaltAfter(halt, 3)
    with pytest.raises(InnerPhaseStopped) as stopped:
        run_inner_steps(model, digits, shard, 1_000_000, opt, torch.Generator().manual_seed(0), "cpu", stopper,
                        halt=halt)
    assert stopped.value.steps_done == 3
    assert stopper.calls == 3
    assert all(group["inner_step"] == 3 for group in opt.param_groups)
    with pytest.raises(InnerPhaseStopped) as again:  # already set: not one step
        run_inner_steps(model, digits, shard, 5, opt, torch.Generator(), halt=halt)
    assert again.value.steps_done == 0
    assert all(group["inner_step"] == 3 for group in opt.param_groups)


def test_an_unset_halt_changes_nothing(digits: Task) -> None:
    shard = digits.shard(2, 0, "iid", seed=0)
    results = []
    for halt in (None, threading.Event()):
        model = digits.build_model(0)
        opt = make_inner_optimizer(model, digits)
        loss = run_inner_steps(model, digits, shard, 7, opt, torch.Generator().manual_seed(1), halt=halt)
        results.append((loss, flatten(model)))
    assert results[0][0] == results[1][0]
    assert torch.equal(results[0][1], results[1][1])


def test_a_stopped_train_from_restores_theta(digits: Task) -> None:
    from p2p_guard.training.local import LocalModel

    local = LocalModel(digits, seed=0, num_shards=2, shard_index=0, partition="iid")
    theta = local.theta.clone()
    halt = threading.Event()
    with pytest.raises(InnerPhaseStopped):
        local.train_from(theta + 0.01, 50, torch.Generator().manual_seed(0), _HaltAfter(halt, 2), halt=halt)
    assert torch.equal(local.theta, theta)
    assert torch.equal(flatten(local.model), theta)


class _RecordingFlip:
    """Label flip y → C − 1 − y that records its calls."""

    def __init__(self) -> None:
        self.calls: list[tuple[int, int]] = []

    def transform(self, x: Tensor, y: Tensor, num_classes: int) -> tuple[Tensor, Tensor]:
        self.calls.append((int(y.shape[0]), num_classes))
        return x, num_classes - 1 - y


def test_data_attack_applies_to_every_batch(digits: Task) -> None:
    shard = digits.shard(1, 0, "iid", seed=0)
    model = digits.build_model(0)
    opt = make_inner_optimizer(model, digits)
    attack = _RecordingFlip()
    for _ in range(4):
        run_inner_steps(model, digits, shard, 25, opt, torch.Generator().manual_seed(0), "cpu", attack)
    assert attack.calls == [(32, 10)] * 100
    data = digits._data  # type: ignore[attr-defined]
    with torch.no_grad():
        predicted = model(data.x_test).argmax(dim=1)
    flipped = float((predicted == 9 - data.y_test).float().mean())
    assert flipped > 0.6
    assert digits.evaluate(model).accuracy < 0.2


def test_warmup_is_linear_and_spans_rounds(digits: Task) -> None:
    task = dataclasses.replace(digits.default_hparams, warmup_steps=10)

    class Warm:
        name, kind, num_classes, default_hparams = digits.name, digits.kind, digits.num_classes, task
        sample_batch = digits.sample_batch
        loss = digits.loss

    model = digits.build_model(0)
    opt = make_inner_optimizer(model, digits)
    shard = digits.shard(1, 0, "iid", seed=0)
    gen = torch.Generator().manual_seed(0)
    lr = digits.default_hparams.inner_lr
    run_inner_steps(model, Warm(), shard, 4, opt, gen)  # type: ignore[arg-type]
    assert opt.param_groups[0]["lr"] == pytest.approx(lr * 4 / 10)
    run_inner_steps(model, Warm(), shard, 4, opt, gen)  # type: ignore[arg-type]
    assert opt.param_groups[0]["lr"] == pytest.approx(lr * 8 / 10)
    run_inner_steps(model, Warm(), shard, 4, opt, gen)  # type: ignore[arg-type]
    assert opt.param_groups[0]["lr"] == pytest.approx(lr)
    assert opt.param_groups[0]["inner_step"] == 12


def test_local_model_shift_momentum_feeds_the_next_outer_step(digits: Task) -> None:
    from p2p_guard.training.local import LocalModel

    model = LocalModel(digits, seed=0, num_shards=2, shard_index=0, partition="iid", outer_lr=0.5, outer_momentum=0.5)
    g = torch.full_like(model.theta, 0.25)
    model.apply(g)  # b = g
    model.shift_momentum(torch.full_like(model.theta, 0.75))  # b = 1.0
    assert torch.equal(model.momentum, torch.full_like(model.theta, 1.0))
    assert model.momentum_bytes() == model.momentum.numpy().tobytes()
    before = model.theta.clone()
    model.apply(torch.zeros_like(model.theta))  # b = 0.5·1.0 + 0 = 0.5; θ −= η·(0 + 0.5·0.5)
    assert torch.allclose(model.theta, before - 0.5 * 0.25)
    with pytest.raises(ValueError, match="finite"):
        model.shift_momentum(torch.full_like(model.theta, float("nan")))
    with pytest.raises(ValueError, match="finite"):
        model.shift_momentum(torch.zeros(3))


def test_train_from_runs_from_the_given_point_and_leaves_theta_in_the_model(digits: Task) -> None:
    from p2p_guard.training.local import LocalModel, round_generator
    from p2p_guard.training.params import flatten

    a = LocalModel(digits, seed=0, num_shards=2, shard_index=0, partition="iid")
    b = LocalModel(digits, seed=0, num_shards=2, shard_index=0, partition="iid")
    delta, loss = a.train_round(5, round_generator("r", 0, 0, 0, 1))
    end, loss_b = b.train_from(b.theta, 5, round_generator("r", 0, 0, 0, 1))
    assert torch.equal(delta, b.theta - end)  # train_round is train_from θ
    assert loss == loss_b
    assert torch.equal(flatten(b.model), b.theta)  # the model holds θ afterwards, not the end point
    start = b.theta + 0.01
    same, nan = b.train_from(start, 0, round_generator("r", 0, 0, 0, 1))
    assert torch.equal(same, start) and same is not start and math.isnan(nan)
    with pytest.raises(ValueError, match="shape"):
        b.train_from(torch.zeros(3), 1, round_generator("r", 0, 0, 0, 1))
    with pytest.raises(ValueError, match="steps must be >= 0"):
        b.train_from(b.theta, -1, round_generator("r", 0, 0, 0, 1))


def test_evaluate_at_scores_the_given_theta_on_a_second_copy(digits: Task) -> None:
    from p2p_guard.training.local import LocalModel
    from p2p_guard.training.params import flatten

    model = LocalModel(digits, seed=0, num_shards=2, shard_index=0, partition="iid")
    other = model.theta * 0.5
    at = model.evaluate_at(other)
    assert torch.equal(flatten(model.model), model.theta)  # the training copy is untouched
    model.adopt(other)
    assert at == model.evaluate()
    assert model.evaluate_at(model.theta) == model.evaluate()
