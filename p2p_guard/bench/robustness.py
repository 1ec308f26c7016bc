"""The robustness benchmark: every aggregator against every update and data attack, side by side.

Three grids, all at the same outer-round budget (``rounds`` × H inner steps) for every arm:

- **headline**: every rule of ``guard.GUARD_NAMES`` × (a clean column ``none`` + every update or data attack
  of ``attacks.ATTACK_NAMES``, with the literature's parameter variants of :data:`LITERATURE_VARIANTS`) at
  n = 10, f = 3, Dirichlet α = 1, over ``seeds`` seeds;
- **ablation**: the ``semantic`` guard with each of its stages switched off in turn (every ``bool`` field of
  :class:`~p2p_guard.guard.semantic.SemanticGuard` whose default is True), over the headline's attacks and
  seeds;
- **sweep**: each rule's three worst headline attacks across Byzantine fractions 0, 0.2, 0.3, 0.4 and
  partitions ``iid``, ``dirichlet:1``, ``dirichlet:0.1``.

No oracle: no rule is told the number of Byzantine peers f. A rule that can run without it runs without it
(the ``semantic`` guard takes f̂ = ⌊(n − 1)/2⌋); a rule that needs f (trimmed mean, Multi-Krum, NNM) gets
f̂ = ``default_f(n)``, the default a user's peer gets. A second grid, **true f given (expert override)**,
runs the rules that accept an f with the true f (the ``--assumed-byzantine`` a user could set if they knew
it); its arms are labelled ``RULE (true f)``. The rules' parameters are otherwise the registry's defaults,
fixed before the grid runs and the same for every attack. Every honest receiver has a private ``loss_at`` on
its own shard's held-out data (the ``semantic`` guard's loss stage).

Each cell runs in-process (:mod:`p2p_guard.bench.cell`, the networked peer's own training, attack and guard
code); cells run in parallel in ``jobs`` worker processes (spawned, one torch thread each). Finished cells are
appended to a JSON-lines file, so an interrupted run resumes where it stopped (``resume=True``).
"""

from __future__ import annotations

import ast
import contextlib
import dataclasses
import hashlib
import json
import logging
import math
import multiprocessing
import os
import signal
import statistics
import traceback
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from p2p_guard.bench.cell import LONE_RULES, CellSpec, Params, params_of, run_cell

__all__ = [
    "ACCEPTANCE_ROUNDS",
    "ACCEPTANCE_TOLERANCE",
    "LITERATURE_VARIANTS",
    "BenchConfig",
    "Check",
    "Grid",
    "ablation_cells",
    "ablation_flags",
    "ABSENT",
    "acceptance_checks",
    "acceptance_config",
    "bench_attacks",
    "code_digest",
    "code_fingerprint",
    "full_config",
    "expert_arm",
    "expert_cells",
    "headline_cells",
    "quick_checks",
    "quick_config",
    "run_cells",
    "summarise",
    "sweep_cells",
]

logger = logging.getLogger(__name__)

LITERATURE_VARIANTS: dict[str, tuple[str, ...]] = {
    "sign_flip": ("sign_flip:scale=1", "sign_flip:scale=10"),
    "scale": ("scale:factor=10", "scale:factor=1000"),
    "ipm": ("ipm:epsilon=0.1", "ipm:epsilon=100"),
    "alie": ("alie", "alie:z=search"),
}
"""Parameter variants the literature runs (DESIGN.md, Attacks); any other attack runs with its defaults."""

QUICK_ATTACKS = ("sign_flip:scale=10", "ipm:epsilon=0.1", "alie", "label_flip")
"""The attacks of ``--quick`` (those of them the registry has)."""

CLEAN = "none"
"""Name of the clean column (no attacker)."""

QUICK_ABLATION = ("anchoring", "clip_remaining")
"""The stages ``--quick`` switches off (self-anchoring, the new one; the full run ablates every stage on by
default)."""

SIGN_FLIP_10 = "sign_flip:scale=10"
GUARD = "semantic"

EXPERT_GUARDS = ("trimmed_mean", "multi_krum", "nnm_trimmed_mean", "semantic")
"""Rules that accept an f, run a second time with the true f in the expert-override grid."""

EXPERT_SUFFIX = " (true f)"
"""Suffix of an expert-override arm's label."""


def expert_arm(guard: str) -> str:
    """The label of ``guard``'s expert-override arm (told the true f)."""
    return guard + EXPERT_SUFFIX


@dataclass(frozen=True)
class BenchConfig:
    """What one benchmark run covers.

    Attributes:
        mode: ``full`` or ``quick``.
        task: task name; task_options: its ``load_task`` options as sorted pairs.
        n, f, partition: the headline setting.
        rounds, inner_steps: the outer-round budget of every arm, and H.
        seeds: headline seeds (``0 .. seeds − 1``); ablation_seeds: the ablation's (the first of them).
        guards: the rules compared.
        attacks: the attack specs (the clean column is added apart).
        skipped_attacks: ``(spec, reason)`` of attacks that could not run in-process.
        ablation_flags: the ``semantic`` stages switched off one at a time.
        sweep_fractions, sweep_partitions: the sweep's axes; sweep_worst: attacks per rule; sweep_seeds: its
            seeds.
        expert_guards: the rules also run with the true f (the second table); empty: no such grid.
        expert_seeds: that grid's seeds (the first of the headline's; None: as many as the headline).
    """

    mode: str
    task: str
    task_options: Params
    n: int
    f: int
    partition: str
    rounds: int
    inner_steps: int
    seeds: int
    ablation_seeds: int
    guards: tuple[str, ...]
    attacks: tuple[str, ...]
    skipped_attacks: tuple[tuple[str, str], ...]
    ablation_flags: tuple[str, ...]
    sweep_fractions: tuple[float, ...]
    sweep_partitions: tuple[str, ...]
    sweep_worst: int
    sweep_seeds: int
    expert_guards: tuple[str, ...] = ()
    expert_seeds: int | None = None

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able dict."""
        out = dataclasses.asdict(self)
        out["task_options"] = dict(self.task_options)
        return out


def bench_attacks(names: Iterable[str] | None = None) -> tuple[tuple[str, ...], tuple[tuple[str, str], ...]]:
    """The update and data attacks of the registry, with their literature variants.

    Args:
        names: attack names to consider (None: every name of ``attacks.ATTACK_NAMES``).

    Returns:
        ``(specs, skipped)``: the specs that load and are of kind ``update`` or ``data``; and ``(spec, why)``
        for each variant that does not load (e.g. a parameter the attack does not have yet).
    """
    from p2p_guard.attacks import ATTACK_NAMES, WIRE_ATTACK_NAMES, load_attack

    specs: list[str] = []
    skipped: list[tuple[str, str]] = []
    for name in ATTACK_NAMES if names is None else names:
        if name in WIRE_ATTACK_NAMES:
            continue
        for spec in LITERATURE_VARIANTS.get(name, (name,)):
            try:
                attack = load_attack(spec)
            except ValueError as exc:
                skipped.append((spec, str(exc)))
                continue
            if getattr(attack, "kind", None) in ("update", "data"):
                specs.append(spec)
            else:
                skipped.append((spec, f"kind {getattr(attack, 'kind', None)!r} does not run in-process"))
    return tuple(specs), tuple(skipped)


def ablation_flags() -> tuple[str, ...]:
    """The stage switches of the semantic guard: its ``bool`` fields whose default is True."""
    from p2p_guard.guard.semantic import SemanticGuard

    return tuple(
        f.name for f in dataclasses.fields(SemanticGuard) if isinstance(f.default, bool) and f.default is True
    )


def full_config(*, data_dir: str | None = None, seeds: int = 3, sweep_seeds: int = 1) -> BenchConfig:
    """The full benchmark on Fashion-MNIST (about 960 cells; see ``docs/benchmarks.md`` for the time).

    The headline runs ``seeds`` seeds; the ablation and the true-f grid the first seed only, and the sweep each
    rule's worst attack (and the backdoor): version 2's cells judge every receiver's sample apart, so the grid of
    stop 14 (three seeds everywhere, three sweep attacks: about 1,500 cells) no longer fits a 2-core afternoon.

    Args:
        data_dir: directory of the Fashion-MNIST IDX files (None: the Debian package's).
        seeds: headline seeds, ``>= 3`` for the published table.
        sweep_seeds: seeds of each sweep cell.
    """
    from p2p_guard.guard import GUARD_NAMES

    attacks, skipped = bench_attacks()
    options = {"hidden": 32} | ({"data_dir": str(data_dir)} if data_dir else {})
    return BenchConfig(
        mode="full", task="fashion-mnist", task_options=params_of(options), n=10, f=3,
        partition="dirichlet:1", rounds=20, inner_steps=20, seeds=seeds, ablation_seeds=1,
        guards=tuple(GUARD_NAMES),
        attacks=attacks, skipped_attacks=skipped, ablation_flags=ablation_flags(),
        sweep_fractions=(0.0, 0.1, 0.2, 0.3, 0.4), sweep_partitions=("iid", "dirichlet:1", "dirichlet:0.1"),
        sweep_worst=1, sweep_seeds=sweep_seeds, expert_guards=EXPERT_GUARDS, expert_seeds=1,
    )  # fmt: skip


#: The acceptance grid's outer rounds per task: the rounds a user's ``simulate`` runs on digits (12), and the full
#: benchmark's on Fashion-MNIST (20).
ACCEPTANCE_ROUNDS = {"digits": 12, "fashion-mnist": 20}
#: Byzantine fractions of the acceptance grid, and the most its rule may lose to its worst attack there
#: (points below its own clean accuracy).
ACCEPTANCE_TOLERANCE = {0.2: 3.0, 0.3: 3.0, 0.4: 6.0}


def acceptance_config(task: str, *, data_dir: str | None = None, seeds: int = 1) -> BenchConfig:
    """``--acceptance TASK``: every rule × every attack at 20, 30 and 40 % Byzantine, ``dirichlet:0.5``, f unknown.

    The acceptance of the guard's issue: on digits and Fashion-MNIST, 10 peers, ``dirichlet:0.5``, the semantic
    guard's worst case over the full suite is within 3 points of its clean accuracy at 20 and 30 %, within 6 at
    40 %, and above every baseline's worst case at each fraction (:func:`acceptance_checks`). The headline is the
    30 % fraction; the sweep runs every attack (not only the worst) at the other fractions, on seed 0 … seeds − 1.
    No ablation, no true-f grid. About 530 cells: 15-30 min on digits, over an hour on Fashion-MNIST (2 cores).

    Args:
        task: ``digits`` or ``fashion-mnist``.
        data_dir: directory of the Fashion-MNIST IDX files (None: the Debian package's; digits: must be None).
        seeds: seeds of every cell.

    Raises:
        ValueError: for another task, or a ``data_dir`` with digits.
    """
    from p2p_guard.guard import GUARD_NAMES

    if task not in ACCEPTANCE_ROUNDS:
        raise ValueError(f"--acceptance runs on {' or '.join(ACCEPTANCE_ROUNDS)}, not {task!r}")
    if data_dir is not None and task != "fashion-mnist":
        raise ValueError("--data-dir names the Fashion-MNIST files; digits ships with scikit-learn")
    attacks, skipped = bench_attacks()
    options = ({"hidden": 32} if task == "fashion-mnist" else {}) | ({"data_dir": str(data_dir)} if data_dir else {})
    return BenchConfig(
        mode="acceptance", task=task, task_options=params_of(options), n=10, f=3, partition="dirichlet:0.5",
        rounds=ACCEPTANCE_ROUNDS[task], inner_steps=20, seeds=seeds, ablation_seeds=1, guards=tuple(GUARD_NAMES),
        attacks=attacks, skipped_attacks=skipped, ablation_flags=(),
        sweep_fractions=(0.0, *ACCEPTANCE_TOLERANCE), sweep_partitions=("dirichlet:0.5",),
        sweep_worst=len(attacks), sweep_seeds=seeds,
    )  # fmt: skip


def quick_config(*, seeds: int = 2) -> BenchConfig:
    """``--quick``: digits, four attacks, a small sweep; a few minutes, for CI."""
    from p2p_guard.guard import GUARD_NAMES

    attacks, skipped = bench_attacks(sorted({a.partition(":")[0] for a in QUICK_ATTACKS}))
    attacks = tuple(a for a in QUICK_ATTACKS if a in attacks)
    return BenchConfig(
        mode="quick", task="digits", task_options=(), n=10, f=3, partition="dirichlet:1", rounds=10,
        inner_steps=20, seeds=seeds, ablation_seeds=1, guards=tuple(GUARD_NAMES), attacks=attacks,
        skipped_attacks=tuple(s for s in skipped if s[0] in QUICK_ATTACKS), ablation_flags=QUICK_ABLATION,
        sweep_fractions=(0.0, 0.4), sweep_partitions=("iid", "dirichlet:0.1"), sweep_worst=1, sweep_seeds=1,
    )  # fmt: skip


def _cell(
    cfg: BenchConfig,
    guard: str,
    attack: str | None,
    *,
    f: int,
    partition: str,
    seed: int,
    guard_params: Params = (),
    true_f: bool = False,
) -> CellSpec:
    """One cell; no oracle (``assumed_byzantine=None``) unless ``true_f`` (the expert-override grid)."""
    told = (f if attack else cfg.f) if true_f else None
    return CellSpec(
        task=cfg.task, guard=guard, attack=attack, n=cfg.n, f=f if attack else 0, partition=partition,
        seed=seed, rounds=cfg.rounds, inner_steps=cfg.inner_steps,
        assumed_byzantine=told, guard_params=guard_params,
        task_options=cfg.task_options, label=expert_arm(guard) if true_f else None,
    )  # fmt: skip


def headline_cells(cfg: BenchConfig) -> list[CellSpec]:
    """Every guard × (clean + every attack) × seed at the headline setting."""
    return [
        _cell(cfg, guard, attack, f=cfg.f, partition=cfg.partition, seed=seed)
        for guard in cfg.guards
        for attack in (None, *cfg.attacks)
        for seed in range(cfg.seeds)
    ]


def expert_cells(cfg: BenchConfig) -> list[CellSpec]:
    """The expert-override grid: each rule of ``cfg.expert_guards`` told the true f, headline setting."""
    return [
        _cell(cfg, guard, attack, f=cfg.f, partition=cfg.partition, seed=seed, true_f=True)
        for guard in cfg.expert_guards
        for attack in (None, *cfg.attacks)
        for seed in range(cfg.seeds if cfg.expert_seeds is None else cfg.expert_seeds)
    ]


def ablation_cells(cfg: BenchConfig) -> list[CellSpec]:
    """The semantic guard with one stage off, × (clean + every attack) × seed at the headline setting."""
    return [
        _cell(cfg, GUARD, attack, f=cfg.f, partition=cfg.partition, seed=seed, guard_params=((flag, False),))
        for flag in cfg.ablation_flags
        for attack in (None, *cfg.attacks)
        for seed in range(cfg.ablation_seeds)
    ]


def sweep_attacks(cfg: BenchConfig, worst: Sequence[str]) -> list[str]:
    """A guard's ``cfg.sweep_worst`` worst attacks, plus each backdoor attack of ``cfg.attacks`` (for ASR)."""
    chosen = list(worst[: cfg.sweep_worst])
    return chosen + [a for a in cfg.attacks if a.partition(":")[0] == "backdoor" and a not in chosen]


def sweep_cells(cfg: BenchConfig, worst: dict[str, list[str]]) -> list[CellSpec]:
    """Each guard's worst attacks (and the backdoor, for its ASR) across Byzantine fractions and partitions.

    f = 0 is one clean cell per guard and partition.

    Args:
        cfg: the run.
        worst: each guard's worst attacks, worst first (from :func:`summarise` of the headline).
    """
    cells = []
    for guard in cfg.guards:
        for partition in cfg.sweep_partitions:
            for fraction in cfg.sweep_fractions:
                f = round(fraction * cfg.n)
                attacks: Sequence[str | None] = sweep_attacks(cfg, worst.get(guard, [])) if f else [None]
                for attack in attacks:
                    for seed in range(cfg.sweep_seeds):
                        cells.append(_cell(cfg, guard, attack, f=f, partition=partition, seed=seed))
    return cells


# ------------------------------------------------------------------------------------------------ running

_TASKS: dict[tuple[str, Params], Any] = {}


def _task_for(spec: CellSpec) -> Any:
    from p2p_guard.tasks import load_task

    key = (spec.task, spec.task_options)
    if key not in _TASKS:
        _TASKS[key] = load_task(spec.task, **dict(spec.task_options))
    return _TASKS[key]


def _init_worker(log_level: int) -> None:
    """Worker set-up: ignore SIGINT (the parent handles Ctrl+C), one torch thread, quiet logs."""
    import torch

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    torch.set_num_threads(1)
    logging.getLogger("p2p_guard").setLevel(log_level)


def _run_job(spec: CellSpec) -> dict[str, Any]:
    """Run one cell; a failure is returned as a result with ``error`` (the traceback), not raised."""
    try:
        return run_cell(spec, task=_task_for(spec))
    except Exception:  # noqa: BLE001 - one failing cell must not end a long run; it is reported
        return {"spec": spec.to_dict(), "arm": spec.arm, "attack": spec.attack_name,
                "error": traceback.format_exc(limit=8)}  # fmt: skip


def cell_key(spec: CellSpec | dict[str, Any]) -> str:
    """Stable text key of a cell (its fields as sorted JSON)."""
    fields = spec.to_dict() if isinstance(spec, CellSpec) else spec
    return json.dumps(fields, sort_keys=True)


_NOT_IN_FINGERPRINT = (
    "attacks/wire.py",  # wire attacks never run in a cell (they need the network)
    "swarm/",
    "simulation/",
    "bench/robustness.py",
    "bench/wire.py",  # the other benchmarks: a cell imports neither
    "bench/guard_cost.py",
    "bench/report.py",
    "bench/plots.py",
    "bench/__init__.py",
    "cli/",
)


def code_fingerprint(root: Path | None = None) -> str:
    """SHA-256 over the code a cell's result depends on: every ``p2p_guard`` module but the reporting ones.

    The benchmark's grid, report and plots, the other benchmarks (``bench wire``, ``bench guard-cost``), the CLI,
    and the networked code a cell never imports (``swarm/``, ``simulation/``, the wire attacks) are left out
    (they do not change a cell's figures), and torch's version is put in. Each module counts by its syntax tree
    without docstrings (:func:`code_digest`), so a docstring, comment or formatting edit keeps the fingerprint
    and a benchmark of hours can still be resumed after it. A resumed run reuses only cells stamped with the
    current fingerprint, so results of an older guard, attack or training code never mix with new ones.

    Args:
        root: the package directory (None: this installed ``p2p_guard``).

    Returns:
        16 hex digits.
    """
    import torch

    root = Path(__file__).resolve().parents[1] if root is None else root
    digest = hashlib.sha256(f"torch {torch.__version__}\n".encode())
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        if rel.startswith(_NOT_IN_FINGERPRINT):
            continue
        digest.update(rel.encode() + b"\0" + code_digest(path.read_text(encoding="utf-8")) + b"\0")
    return digest.hexdigest()[:16]


def code_digest(source: str) -> bytes:
    """SHA-256 of a module's syntax tree without its bare string statements.

    Those are the docstrings and the strings that document a constant after it; comments and layout never reach
    the tree.

    Args:
        source: Python source text.

    Returns:
        32 bytes; the raw source's digest when it does not parse (so a broken file still changes the fingerprint).
    """
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return hashlib.sha256(source.encode()).digest()
    for node in ast.walk(tree):
        for field in ("body", "orelse", "finalbody"):
            statements = getattr(node, field, None)
            if isinstance(statements, list) and statements and isinstance(statements[0], ast.stmt):
                kept = [stmt for stmt in statements if not _is_bare_string(stmt)]
                setattr(node, field, kept or [ast.Pass()])
    return hashlib.sha256(ast.dump(tree).encode()).digest()


def _is_bare_string(statement: ast.stmt) -> bool:
    """A statement that is only a string literal: a docstring, or an attribute's documentation after it."""
    return isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant) and isinstance(
        statement.value.value, str)


def load_cells(path: Path, fingerprint: str | None = None) -> dict[str, dict[str, Any]]:
    """Results already in a JSON-lines cell file, by :func:`cell_key`.

    A line that is not a cell (a torn last line, bytes that are not UTF-8, JSON that is not an object with a
    ``spec``: another file named as ``--cells``) is skipped, as a cell not yet run.

    Args:
        path: the cell file.
        fingerprint: keep only results stamped with this :func:`code_fingerprint` (None: keep all).
    """
    done: dict[str, dict[str, Any]] = {}
    if not path.exists():
        return done
    for line in path.read_bytes().decode("utf-8", errors="replace").splitlines():
        try:
            result = json.loads(line)
        except json.JSONDecodeError:
            continue
        if not isinstance(result, dict) or not isinstance(result.get("spec"), dict):
            continue
        if fingerprint is None or result.get("code") == fingerprint:
            done[cell_key(result["spec"])] = result
    return done


def run_cells(
    specs: Sequence[CellSpec],
    *,
    jobs: int,
    done: dict[str, dict[str, Any]] | None = None,
    sink: Callable[[dict[str, Any]], None] | None = None,
    progress: Callable[[int], Any] | None = None,
    log_level: int = logging.ERROR,
) -> list[dict[str, Any]]:
    """Run the cells not in ``done`` (``jobs`` worker processes) and return the results of all of ``specs``.

    Args:
        specs: the cells (duplicates run once).
        jobs: worker processes; 1 runs the cells in this process.
        done: results already known, by :func:`cell_key`; updated in place.
        sink: called with each new result as it arrives (e.g. to append it to the cell file).
        progress: ``progress(total)`` returns a bar with ``update(1)`` and ``set_postfix_str`` (tqdm), or
            None.
        log_level: level of the ``p2p_guard`` loggers in the workers.

    Returns:
        One result per spec, in the order of ``specs``. A cell that raised is a result with ``error`` (its
        traceback) and no figures; it is logged, left out of ``sink``, and left out of every summary.

    Raises:
        KeyboardInterrupt: on Ctrl+C, after the workers were terminated.

    Note:
        Workers run one torch thread. Float results depend on the thread count (kernels split reductions
        differently), so ``jobs=1`` reproduces the workers' bits only when this process runs one thread too,
        which the CLI sets.
    """
    done = {} if done is None else done
    todo: dict[str, CellSpec] = {}
    for spec in specs:
        key = cell_key(spec)
        if key not in done:
            todo[key] = spec
    bar = progress(len(todo)) if progress is not None and todo else None

    def finished(result: dict[str, Any]) -> None:
        done[cell_key(result["spec"])] = result
        if "error" in result:
            logger.error("cell %s / %s (seed %s) failed:\n%s", result["arm"], result["attack"],
                         result["spec"]["seed"], result["error"])  # fmt: skip
        elif sink is not None:  # failed cells stay out of the cell file, so --resume retries them
            sink(result)
        if bar is not None:
            acc = result.get("final", {}).get("accuracy")
            shown = "failed" if acc is None else f"{100 * acc:.1f}%"
            bar.set_postfix_str(f"{result['arm']} / {result['attack']}: {shown}", refresh=False)
            bar.update(1)

    try:
        if jobs <= 1:
            for spec in todo.values():
                finished(_run_job(spec))
        elif todo:
            context = multiprocessing.get_context("spawn")
            # Longest first: update attacks that search (z=search, adaptive) cost the most.
            order = sorted(
                todo.values(),
                key=lambda s: "search" not in (s.attack or "") and "adaptive" not in (s.attack or ""),
            )
            with context.Pool(jobs, initializer=_init_worker, initargs=(log_level,)) as pool:
                for result in pool.imap_unordered(_run_job, order):
                    finished(result)
    finally:
        if bar is not None:
            bar.close()
    return [done[cell_key(spec)] for spec in specs]


# ---------------------------------------------------------------------------------------------- summaries


@dataclass(frozen=True)
class Stat:
    """Mean and sample standard deviation of a figure over seeds.

    Attributes:
        mean: the mean; std: the sample standard deviation (0 for one seed); count: the number of seeds.
    """

    mean: float
    std: float
    count: int

    @staticmethod
    def of(values: Iterable[float | None]) -> Stat | None:
        """The statistic of the finite values, or None if there is none."""
        numbers = [v for v in values if v is not None and math.isfinite(v)]
        if not numbers:
            return None
        std = statistics.stdev(numbers) if len(numbers) > 1 else 0.0
        return Stat(statistics.fmean(numbers), std, len(numbers))


@dataclass(frozen=True)
class Check:
    """One assertion of ``--quick`` (or one target of the issue), with the figures that decided it."""

    name: str
    passed: bool
    detail: str


Group = tuple[str, str, int, str]  # (arm, attack, f, partition)


class Grid:
    """Results indexed by (arm, attack, f, partition), each a list over seeds."""

    def __init__(self, results: Iterable[dict[str, Any]]) -> None:
        """Index the results."""
        self.cells: dict[Group, list[dict[str, Any]]] = defaultdict(list)
        self.failed: list[dict[str, Any]] = []
        for result in results:
            spec = result["spec"]
            if "error" in result:
                self.failed.append(result)
                continue
            group = (result["arm"], result["attack"], int(spec["f"]), str(spec["partition"]))
            if all(r["spec"]["seed"] != spec["seed"] for r in self.cells[group]):
                self.cells[group].append(result)

    def get(
        self, arm: str, attack: str, f: int, partition: str, seeds: int | None = None
    ) -> list[dict[str, Any]]:
        """The results of one group (clean groups have f = 0) by seed; only seeds < ``seeds`` if set."""
        runs = self.cells.get((arm, attack, 0 if attack == CLEAN else f, partition), [])
        runs = [r for r in runs if seeds is None or r["spec"]["seed"] < seeds]
        return sorted(runs, key=lambda r: r["spec"]["seed"])

    def final(
        self, arm: str, attack: str, f: int, partition: str, key: str = "accuracy", seeds: int | None = None
    ) -> Stat | None:
        """Statistic over seeds of the final ``key`` (``accuracy``, ``asr`` or ``asr_max``).

        A cell recorded before ``asr_max`` existed (a cell file of an earlier version) gives its ``asr`` for it.
        """
        return Stat.of(r["final"].get(key, r["final"].get("asr")) if key == "asr_max" else r["final"][key]
                       for r in self.get(arm, attack, f, partition, seeds))

    def curve(self, arm: str, attack: str, f: int, partition: str) -> list[float]:
        """Accuracy per round, mean over seeds."""
        runs = self.get(arm, attack, f, partition)
        if not runs:
            return []
        rounds = min(len(r["rounds"]) for r in runs)
        return [statistics.fmean(r["rounds"][k]["accuracy"] for r in runs) for k in range(rounds)]

    def verdicts(
        self, arm: str, attacks: Iterable[str], f: int, partition: str, seeds: int | None = None
    ) -> dict[str, int]:
        """Verdict counts summed over the given attacks and seeds."""
        total = {"tp": 0, "fp": 0, "tn": 0, "fn": 0}
        for attack in attacks:
            for result in self.get(arm, attack, f, partition, seeds):
                for key in total:
                    total[key] += int(result["verdicts"][key])
        return total


def worst_attacks(
    grid: Grid, arm: str, attacks: Sequence[str], f: int, partition: str, seeds: int | None = None
) -> list[tuple[str, Stat]]:
    """The attacks sorted from the lowest mean final accuracy up (attacks without results left out)."""
    rows = [(a, s) for a in attacks if (s := grid.final(arm, a, f, partition, seeds=seeds)) is not None]
    return sorted(rows, key=lambda row: (row[1].mean, row[0]))


def _rate(num: int, den: int) -> float | None:
    return num / den if den else None


def summarise(cfg: BenchConfig, results: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """Tables of the run: headline, worst cases, false positives, backdoor, ablation, sweep.

    Args:
        cfg: the run's configuration.
        results: every cell result (headline, ablation and sweep together).

    Returns:
        A dict of plain figures (see the keys below); :mod:`p2p_guard.bench.report` renders it.
    """
    grid = Grid(results)
    f, part = cfg.f, cfg.partition
    columns = (CLEAN, *cfg.attacks)
    headline = {g: {a: grid.final(g, a, f, part) for a in columns} for g in cfg.guards}
    worst = {g: worst_attacks(grid, g, cfg.attacks, f, part) for g in cfg.guards}
    worst_case = {g: (rows[0] if rows else None) for g, rows in worst.items()}
    fp = {}
    for g in cfg.guards:
        counts = grid.verdicts(g, columns, f, part)
        fp[g] = {
            **counts,
            "fp_rate": _rate(counts["fp"], counts["fp"] + counts["tn"]),
            "detection_rate": _rate(counts["tp"], counts["tp"] + counts["fn"]),
        }
    backdoor = [a for a in cfg.attacks if a.partition(":")[0] == "backdoor"]
    asr = {a: {g: grid.final(g, a, f, part, key="asr_max") for g in cfg.guards} for a in backdoor}

    ablation = {}
    k = cfg.ablation_seeds
    for arm in (GUARD, *(f"{GUARD} -{flag}" for flag in cfg.ablation_flags)):
        rows = worst_attacks(grid, arm, cfg.attacks, f, part, seeds=k)
        counts = grid.verdicts(arm, columns, f, part, seeds=k)
        ablation[arm] = {
            "worst": rows[0] if rows else None,
            "clean": grid.final(arm, CLEAN, f, part, seeds=k),
            "fp_rate": _rate(counts["fp"], counts["fp"] + counts["tn"]),
            "per_attack": {a: grid.final(arm, a, f, part, seeds=k) for a in columns},
        }

    sweep: dict[str, dict[str, dict[float, Any]]] = {}
    fraction_table: dict[str, dict[str, dict[float, dict[str, Any]]]] = {}
    fractions = {fr: round(fr * cfg.n) for fr in cfg.sweep_fractions}
    for g in cfg.guards:
        chosen = sweep_attacks(cfg, [a for a, _ in worst[g]])
        sweep[g] = {}
        fraction_table[g] = {}
        for p in cfg.sweep_partitions:
            sweep[g][p] = {}
            fraction_table[g][p] = {}
            for fr, k in fractions.items():
                cands = [CLEAN] if k == 0 else chosen
                rows = worst_attacks(grid, g, cands, k, p)
                sweep[g][p][fr] = rows[0] if rows else None
                counts = grid.verdicts(g, [*cands, CLEAN], k, p)
                fraction_table[g][p][fr] = {
                    "worst": rows[0] if rows else None,
                    "clean": grid.final(g, CLEAN, 0, p),
                    "asr": {a: grid.final(g, a, k, p, key="asr_max") for a in backdoor} if k else {},
                    "fp_rate": _rate(counts["fp"], counts["fp"] + counts["tn"]),
                    "absent": grid.final(g, ABSENT, k, p) if k and ABSENT in cands else None,
                }

    curves = {g: (grid.curve(g, wc[0], f, part) if wc else []) for g, wc in worst_case.items()}
    per_attack_curves = {a: {g: grid.curve(g, a, f, part) for g in cfg.guards} for a in columns}
    clean_mean = headline.get("mean", {}).get(CLEAN)
    return {
        "headline": headline,
        "columns": columns,
        "worst": worst,
        "worst_case": worst_case,
        "fp": fp,
        "asr": asr,
        "ablation": ablation,
        "sweep": sweep,
        "sweep_attacks": {g: sweep_attacks(cfg, [a for a, _ in worst[g]]) for g in cfg.guards},
        "fraction_table": fraction_table,
        "expert": {
            arm: {
                "headline": {a: grid.final(arm, a, f, part) for a in columns},
                "worst": (rows[0] if (rows := worst_attacks(grid, arm, cfg.attacks, f, part)) else None),
            }
            for arm in (expert_arm(g) for g in cfg.expert_guards)
        },
        "curves": curves,
        "per_attack_curves": per_attack_curves,
        "clean_mean": clean_mean,
        "checks": quick_checks(headline, worst_case),
        "targets": targets(cfg, headline, worst_case, fp, asr, sweep),
        "acceptance": acceptance_checks(cfg, fraction_table),
        "failed": [
            {
                "arm": r["arm"],
                "attack": r["attack"],
                "seed": r["spec"]["seed"],
                "f": r["spec"]["f"],
                "partition": r["spec"]["partition"],
                "error": r["error"].strip().splitlines()[-1],
            }
            for r in grid.failed
        ],  # fmt: skip
        "shared_theta": all(r["shared_theta"] for rs in grid.cells.values() for r in rs),
        "mixing": all(r["spec"].get("mixing", False) for rs in grid.cells.values() for r in rs),
        "every_receiver": all(r["spec"].get("every_receiver", False) for rs in grid.cells.values() for r in rs),
        "reputation": all(r["spec"].get("reputation", False) for rs in grid.cells.values() for r in rs
                          if r["spec"]["guard"] not in LONE_RULES),
        "cell_seconds": sum(r["seconds"] for rs in grid.cells.values() for r in rs),
        "cell_cpu_seconds": sum(r.get("cpu_seconds", 0.0) for rs in grid.cells.values() for r in rs),
        "skipped_steps": sum(int(r.get("skipped_steps", 0)) for rs in grid.cells.values() for r in rs),
        "cells": sum(len(rs) for rs in grid.cells.values()),
    }


def quick_checks(
    headline: dict[str, dict[str, Stat | None]], worst_case: dict[str, tuple[str, Stat] | None]
) -> list[Check]:
    """The assertions of ``--quick``.

    Every rule runs with f unknown (no ``assumed_byzantine``):

    1. Under ``sign_flip:scale=10`` the semantic guard's mean final accuracy beats ``mean``'s by ≥ 30 points.
    2. The semantic guard's worst case over the attacks is ≥ that of ``median``, of ``trimmed_mean`` (which
       gets the user's default f̂) and of ``own_update`` (the peer ignoring the swarm), where they ran.
    """
    checks = []
    ours = headline.get(GUARD, {}).get(SIGN_FLIP_10)
    theirs = headline.get("mean", {}).get(SIGN_FLIP_10)
    if ours is None or theirs is None:
        checks.append(
            Check(
                "semantic beats mean by >= 30 points under sign_flip:scale=10",
                False,
                "no result for sign_flip:scale=10",
            )
        )
    else:
        gap = 100 * (ours.mean - theirs.mean)
        checks.append(
            Check(
                "semantic beats mean by >= 30 points under sign_flip:scale=10",
                gap >= 30.0,
                f"semantic {100 * ours.mean:.1f}%, mean {100 * theirs.mean:.1f}%: {gap:+.1f} points",
            )
        )
    mine = worst_case.get(GUARD)
    for other in ("median", "trimmed_mean", "own_update"):
        if other not in worst_case:
            continue
        theirs_wc = worst_case.get(other)
        name = f"semantic worst case >= {other} worst case"
        if mine is None or theirs_wc is None:
            checks.append(Check(name, False, "missing results"))
            continue
        checks.append(
            Check(
                name,
                mine[1].mean >= theirs_wc[1].mean,
                f"semantic {100 * mine[1].mean:.1f}% ({mine[0]}), "
                f"{other} {100 * theirs_wc[1].mean:.1f}% ({theirs_wc[0]})",
            )
        )
    return checks


def targets(
    cfg: BenchConfig,
    headline: dict[str, dict[str, Stat | None]],
    worst_case: dict[str, tuple[str, Stat] | None],
    fp: dict[str, dict[str, Any]],
    asr: dict[str, dict[str, Stat | None]],
    sweep: dict[str, dict[str, dict[float, Any]]],
) -> list[Check]:
    """The issue's targets, measured (reported, never asserted)."""
    out = []
    clean = headline.get("mean", {}).get(CLEAN)
    mine = worst_case.get(GUARD)
    if clean is not None and mine is not None:
        out.append(
            Check(
                f"f = {cfg.f}: semantic worst case >= C - 2 points",
                mine[1].mean >= clean.mean - 0.02,
                f"worst {100 * mine[1].mean:.1f}% ({mine[0]}); C = clean mean {100 * clean.mean:.1f}%",
            )
        )
    for frac, label in ((cfg.f / cfg.n, f"f = {cfg.f}"), (0.4, "f = 4")):
        values = {}
        for g in cfg.guards:
            if math.isclose(frac, cfg.f / cfg.n):
                wc = worst_case.get(g)
            else:
                wc = sweep.get(g, {}).get(cfg.partition, {}).get(frac)
            if wc is not None:
                values[g] = wc
        if GUARD in values and len(values) > 1:
            best_other = max((v for g, v in values.items() if g != GUARD), key=lambda v: v[1].mean)
            other_name = next(g for g, v in values.items() if v is best_other)
            out.append(
                Check(
                    f"{label}: semantic worst case > every baseline's worst case",
                    values[GUARD][1].mean > best_other[1].mean,
                    f"semantic {100 * values[GUARD][1].mean:.1f}%, best baseline {other_name} "
                    f"{100 * best_other[1].mean:.1f}%",
                )
            )
    rate = fp.get(GUARD, {}).get("fp_rate")
    if rate is not None:
        out.append(Check("semantic honest false-positive rate <= 2%", rate <= 0.02, f"{100 * rate:.2f}%"))
    for attack, by_guard in asr.items():
        stat = by_guard.get(GUARD)
        if stat is not None:
            out.append(
                Check(
                    f"{attack} success rate against semantic <= 5% (f = {cfg.f})",
                    stat.mean <= 0.05,
                    f"{100 * stat.mean:.1f}%",
                )
            )
    return out


ABSENT = "free_rider"
"""The attack that stands for "the attackers are simply absent": zero rows, dropped before the guard by the
integrity stage, so a run under it is the honest peers alone; under non-IID shards the attackers' data is then
never learned, the ceiling no defence can pass. The acceptance checks quote it next to clean accuracy."""


def acceptance_checks(cfg: BenchConfig, fraction_table: dict[str, dict[str, dict[float, dict[str, Any]]]]
                      ) -> list[Check]:
    """The guard issue's acceptance on the sweep's fractions (:func:`acceptance_config`), for its first partition.

    At each fraction of :data:`ACCEPTANCE_TOLERANCE` that was run: the semantic guard's worst case over the swept
    attacks is within the tolerance of its own clean accuracy (same partition, no attacker), and above every other
    rule's worst case at that fraction. Means over the sweep's seeds.

    Args:
        cfg: the run.
        fraction_table: ``summarise``'s per-fraction table.
    """
    out: list[Check] = []
    mine_by_part = fraction_table.get(GUARD, {})
    if not cfg.sweep_partitions or not mine_by_part:
        return out
    part = cfg.sweep_partitions[0]
    for fr, tolerance in ACCEPTANCE_TOLERANCE.items():
        cell = mine_by_part.get(part, {}).get(fr)
        if cell is None:
            continue
        k = round(fr * cfg.n)
        label = f"{round(100 * fr)}% (f = {k} of {cfg.n}), `{part}`"
        worst, clean = cell["worst"], cell["clean"]
        if worst is None or clean is None:
            out.append(Check(f"{label}: semantic worst case within {tolerance:g} points of clean", False,
                             "missing results"))
            continue
        drop = 100 * (clean.mean - worst[1].mean)
        absent = cell.get("absent")
        context = (f"; the {cfg.n - k} honest peers alone (`{ABSENT}`: the attackers send nothing, their shards "
                   f"unlearned) {100 * absent.mean:.1f}%" if absent is not None else "")
        out.append(Check(f"{label}: semantic worst case within {tolerance:g} points of clean", drop <= tolerance,
                         f"worst {100 * worst[1].mean:.1f}% (`{worst[0]}`), clean {100 * clean.mean:.1f}%: "
                         f"{-drop:+.1f} points{context}"))
        others = {g: by[part][fr]["worst"] for g, by in fraction_table.items()
                  if g != GUARD and by.get(part, {}).get(fr, {}).get("worst") is not None}
        if others:
            best = max(others, key=lambda g: others[g][1].mean)
            out.append(Check(f"{label}: semantic worst case above every baseline's",
                             worst[1].mean > others[best][1].mean,
                             f"semantic {100 * worst[1].mean:.1f}%, best baseline `{best}` "
                             f"{100 * others[best][1].mean:.1f}% (`{others[best][0]}`)"))
    return out


def iter_specs(cfg: BenchConfig) -> Iterator[CellSpec]:
    """The cells of the first phase (headline and ablation); the sweep needs the headline's results."""
    yield from headline_cells(cfg)
    yield from expert_cells(cfg)
    yield from ablation_cells(cfg)


ProgressFactory = Callable[[int, str], Any]


def end_torn_line(path: Path) -> None:
    """End a file's torn last line (a run killed mid-write) with a newline, so the next appended cell stands alone.

    Without it, the first cell a resumed run appends joins the torn line and is lost to the next resume.

    Args:
        path: a JSON-lines file; missing or empty: nothing to do.

    Raises:
        OSError: if the file cannot be read or appended to.
    """
    with contextlib.suppress(FileNotFoundError), open(path, "rb+") as fh:
        if fh.seek(0, os.SEEK_END) > 0:
            fh.seek(-1, os.SEEK_END)
            if fh.read(1) != b"\n":
                fh.write(b"\n")


def run_benchmark(
    cfg: BenchConfig,
    *,
    jobs: int,
    cells_path: Path | None = None,
    resume: bool = False,
    progress: ProgressFactory | None = None,
    log_level: int = logging.ERROR,
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Run the headline and ablation grids, then the sweep over each rule's worst attacks.

    Args:
        cfg: the run.
        jobs: worker processes.
        cells_path: JSON-lines file each finished cell is appended to (None: none).
        resume: reuse the results already in ``cells_path`` that carry the current :func:`code_fingerprint`
            (otherwise the file is started afresh).
        progress: ``progress(total, phase)`` returns a tqdm-like bar, or None for no bar.
        log_level: level of the ``p2p_guard`` loggers in the workers.

    Returns:
        ``(results, summary)``: every cell result, and :func:`summarise` of them.

    Raises:
        KeyboardInterrupt: on Ctrl+C (the workers are terminated; finished cells stay in ``cells_path``).
    """
    done: dict[str, dict[str, Any]] = {}
    sink = None
    fingerprint = code_fingerprint()
    if cells_path is not None:
        cells_path.parent.mkdir(parents=True, exist_ok=True)
        if resume:
            done = load_cells(cells_path, fingerprint)
            end_torn_line(cells_path)
            logger.info("resuming: %d cells of code %s already in %s", len(done), fingerprint, cells_path)
        else:
            cells_path.write_text("")

        def sink(result: dict[str, Any]) -> None:
            with open(cells_path, "a") as out:
                out.write(json.dumps({**result, "code": fingerprint}, allow_nan=False) + "\n")

    def bar(phase: str) -> Callable[[int], Any] | None:
        return None if progress is None else (lambda total: progress(total, phase))

    first = run_cells(
        list(iter_specs(cfg)),
        jobs=jobs,
        done=done,
        sink=sink,
        progress=bar("headline+ablation"),
        log_level=log_level,
    )
    grid = Grid(first)
    worst = {g: [a for a, _ in worst_attacks(grid, g, cfg.attacks, cfg.f, cfg.partition)] for g in cfg.guards}
    second = run_cells(
        sweep_cells(cfg, worst), jobs=jobs, done=done, sink=sink, progress=bar("sweep"), log_level=log_level
    )
    results = first + second
    return results, summarise(cfg, results)
