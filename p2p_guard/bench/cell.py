"""One benchmark cell: a whole DiLoCo swarm under one aggregator and one attack, simulated in one process.

The simulation runs the *same code* as a networked peer (:mod:`p2p_guard.swarm.peer`), only without the
network: every peer is a :class:`~p2p_guard.training.local.LocalModel` built from the run seed (the same θ_0)
with its own shard, and a round is, for every peer index i (honest peers first, the last f are Byzantine):

1. ``Δ_i, loss = LocalModel.train_round(H, round_generator(run, seed, i, r, 1), data_attack)``;
2. a Byzantine peer commits ``attacked_update(attack, Δ_i, known_previous_i, AttackContext(round=r, n=n,
   f=max(1, f), generator=round_generator(run, seed, i, r, 3), guard_name=guard, guard_params=…,
   guard_f=f̂))``, where ``known_previous_i`` holds every other row it received in round r − 1
   (commit-before-reveal lets it see no more), as in ``Peer._attacked``; a peer has no guard parameters to
   pass, so ``guard_params`` is empty except in the ablation, where a white-box attack is told the switches of
   the arm it attacks;
   a data attack acts in step 1 and ``attacked_update`` applies its ``boost``;
3. rows that are not finite or all zero are dropped before the guard by the swarm's own integrity function
   (``guard.integrity.check_values``; recorded as rejections with reason ``non_finite`` or ``zero_update``);
4. each receiver j runs ``judge_rows(guard, rows, me=sender_j, round_=r, previous_aggregate=…, f=f̂,
   generator=round_generator(run, seed, j, r, 4), loss_at=…)`` and applies the aggregate with
   ``LocalModel.apply``; ``loss_at`` (:func:`holdout_loss_at`) is j's loss at θ_j − η·Δ on a batch of
   ``loss_batch`` examples drawn fresh each round (salt 5) from j's own shard's private hold-out, η =
   outer_lr / number of rows;
5. every peer, honest and Byzantine, mixes its post-step θ and outer momentum with ``mix_peers`` sampled others
   (``bench.mixing.mix_peers_once``: the swarm's ``clipped_gossip`` and ``gossip_steps`` with ``PeerConfig``'s
   defaults, 8 neighbours, τ capped at 0.05·‖θ‖, 3 gossip steps in rounds 0-4 and 1 after; samples drawn with
   salt 6), as ``Peer.mixing`` does after every step. ``CellSpec.mixing=False`` leaves it out (the cell before
   2026-12-07).

Reputation (``CellSpec.reputation``, on by default since 2026-12-07, as in a swarm): every peer keeps the swarm's
``guard.reputation.Reputation``, fed after step 4 with its own verdicts and every other peer's ballots of the round
(``bench.standing``, as ``swarm.standing.VoteBook`` feeds it); a sender it excludes is dropped before its guard
from the next round on (step 4 sees the other rows only) and counted as a rejection with reason ``excluded``. The
result lists each exclusion (``exclusions``). Measured on digits (10 peers, 3 ``sign_flip:scale=1``, Dirichlet
0.5, 12 rounds, seed 0): every honest peer excludes the 3 attackers at the fold of round 3, none excludes an honest
peer, and the final accuracy goes from 0.878 (guard alone) to 0.934 (clean: 0.936 both).

Wire attacks (forged envelopes, bad signatures, replays, oversized payloads) are out of scope here: they are
stopped by the integrity stage, which only a networked swarm exercises (``p2p-guard simulate``).

Every receiver, every round (``CellSpec.every_receiver``, the default since 2026-12-07): step 4 runs for each of
the n receivers, as in a swarm, so a guard with state per receiver (the collusion history, the direction record
of ``guard.semantic``) builds it for every receiver from round 0. While every model is still equal bit for bit
(always under the baselines, which ignore ``ctx.own_index`` and ``loss_at``) step 5 is skipped, as a mixing of equal
states moves nothing, and one model is evaluated. Judging every receiver costs the ``semantic`` guard's cells about
half again their CPU time (digits, 10 rounds: docs/benchmarks.md, method) and the baselines' nothing measurable.

The shortcut (``every_receiver=False``, the cell before 2026-12-07): step 4 runs for the first honest peer only,
and its aggregate is applied by every peer. This is *checked* every round, not assumed: the guard is also run for
the last honest peer, and if the two results differ in a single bit (the ``semantic`` guard anchors on the
receiver's own row and uses its private loss) the cell switches, from that round on, to running the guard once
per receiver; the result records which (``shared_theta``). Its cost is fidelity: the other receivers start their
per-sender state only at the switch (round 27 of one clean 40-round cell). The result also holds the seconds spent
in training, in the guard and in ``loss_at`` (``timing``).

Guard verdicts are counted as in the simulation report: every verdict of an honest receiver about another
peer, a rejection being a positive and a Byzantine sender a true positive.
"""

from __future__ import annotations

import functools
import logging
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import torch

from p2p_guard.attacks import load_attack
from p2p_guard.attacks.apply import attacked_update
from p2p_guard.attacks.base import AttackContext
from p2p_guard.bench.mixing import SALT_MIX, mix_peers_once, mixing_sampler
from p2p_guard.bench.standing import EXCLUDED, CellStanding, not_judged
from p2p_guard.guard import build_guard
from p2p_guard.guard.apply import judge_rows
from p2p_guard.guard.base import GuardResult, Verdict
from p2p_guard.guard.integrity import check_values
from p2p_guard.swarm.mixing import consensus_distance
from p2p_guard.tasks import Task, load_task
from p2p_guard.training.local import LocalModel, round_generator
from p2p_guard.training.params import load_flat

__all__ = [
    "NON_FINITE",
    "SALT_ATTACK",
    "SALT_GUARD",
    "SALT_INNER",
    "SALT_LOSS",
    "SALT_MIX",
    "LONE_RULES",
    "CellSpec",
    "backdoor_success",
    "holdout_loss_at",
    "params_of",
    "run_cell",
]

logger = logging.getLogger(__name__)

SALT_INNER = 1
"""``round_generator`` salt of the inner batches (as in ``swarm/peer.py``)."""
SALT_ATTACK = 3
"""``round_generator`` salt of an update attack's randomness (as in ``swarm/peer.py``)."""
SALT_GUARD = 4
"""``round_generator`` salt of the guard's generator (as in ``swarm/peer.py``)."""
SALT_LOSS = 5
"""``round_generator`` salt of the private held-out batch of the guard's loss stage."""

LONE_RULES = frozenset({"own_update"})
"""Rules whose cells never mix (``CellSpec.mixing`` notwithstanding): ``own_update`` stands for a peer that ignores
the swarm and trains alone, the floor that issue 9's rule 1 (self-anchoring) and ``bench robustness --quick``'s
check compare the guard with; mixed with the others it would be gossip averaging of local models instead."""

NON_FINITE = "non_finite"
"""Reason recorded for a row with NaN or infinite values (the swarm's integrity stage rejects it)."""

Params = tuple[tuple[str, Any], ...]


@dataclass(frozen=True)
class CellSpec:
    """Everything that defines one cell; hashable, picklable, and the same cell gives the same result.

    Attributes:
        task: task name (``digits``, ``fashion-mnist``).
        guard: aggregation rule name (one of ``guard.GUARD_NAMES``).
        attack: attack spec of the Byzantine peers (``sign_flip:scale=10``), or None for a clean run (every
            peer honest, the guard still configured with ``assumed_byzantine``).
        n: peers, honest and Byzantine.
        f: Byzantine peers (the last ``f`` indices); 0 with ``attack=None``.
        partition: ``iid`` or ``dirichlet:ALPHA``.
        seed: run seed (θ_0, shards and every generator derive from it).
        rounds: outer rounds.
        inner_steps: H (None: the task's default).
        assumed_byzantine: f̂ handed to the guard (None: the guard's default).
        guard_params: constructor parameters of the rule, as sorted ``(name, value)`` pairs (the ablation's
            switches, e.g. ``(("magnitude", False),)``).
        task_options: options of ``load_task``, as sorted pairs (``(("data_dir", "/x"),)``).
        run_id: the run id the generators are seeded with (None: ``sim-TASK-seedSEED``, the id
            ``p2p-guard simulate`` uses, so the same settings give the same generators there).
        label: the arm's name in tables (None: the guard's name, plus its switched-off stages).
        loss_batch: held-out examples in each honest receiver's private loss batch (``loss_at``, drawn fresh
            every round from its own shard's hold-out); 0: no ``loss_at`` (the semantic guard's loss stage is
            skipped).
        mixing: after the outer step, every peer mixes its θ and outer momentum with a sample of the others as a
            swarm peer does (``bench.mixing``, the swarm's defaults); False: no mixing, the cell before
            2026-12-07 (its figures in docs/ were measured so). Never under the rules of :data:`LONE_RULES`
            (``own_update``): they stand for a peer that ignores the swarm, the floor of issue 9's rule 1.
        every_receiver: run the guard for every receiver from round 0, as a swarm's peers do; False: for two
            receivers while their results agree (one shared θ), then for every receiver (module docstring; the
            cell before 2026-12-07, faster).
        reputation: every peer keeps the swarm's reputation and drops the senders it excludes before its guard,
            as a networked peer does by default (``bench.standing``; ``PeerConfig.reputation_exclusion``);
            False: the guard alone, round by round (the cell until 2026-12-07's reputation change). Never under
            the rules of :data:`LONE_RULES`, which judge no one.
    """

    task: str
    guard: str
    attack: str | None
    n: int
    f: int
    partition: str
    seed: int
    rounds: int
    inner_steps: int | None = None
    assumed_byzantine: int | None = None
    guard_params: Params = ()
    task_options: Params = ()
    run_id: str | None = None
    label: str | None = None
    loss_batch: int = 64
    mixing: bool = True
    every_receiver: bool = True
    reputation: bool = True

    def __post_init__(self) -> None:
        """Check the figures (ValueError naming the field)."""
        if self.n < 1:
            raise ValueError(f"n must be >= 1, got {self.n}")
        if not 0 <= self.f < self.n:
            raise ValueError(f"f must be in [0, n), got f={self.f}, n={self.n}")
        if self.f > 0 and not self.attack:
            raise ValueError(f"f={self.f} Byzantine peers need an attack")
        if self.rounds < 1:
            raise ValueError(f"rounds must be >= 1, got {self.rounds}")
        if self.loss_batch < 0:
            raise ValueError(f"loss_batch must be >= 0, got {self.loss_batch}")

    @property
    def resolved_run_id(self) -> str:
        """The run id the generators use."""
        return self.run_id or f"sim-{self.task}-seed{self.seed}"

    @property
    def arm(self) -> str:
        """The arm's name: ``label``, else the guard and each switched-off stage (``semantic -magnitude``)."""
        if self.label:
            return self.label
        off = [f"-{k}" for k, v in self.guard_params if v is False]
        return " ".join([self.guard, *off])

    @property
    def attack_name(self) -> str:
        """The attack spec, or ``none`` for a clean run."""
        return self.attack or "none"

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able dict of the fields."""
        out = asdict(self)
        out["guard_params"] = dict(self.guard_params)
        out["task_options"] = dict(self.task_options)
        return out


@dataclass
class _Counts:
    tp: int = 0
    fp: int = 0
    tn: int = 0
    fn: int = 0
    reasons: dict[str, int] = field(default_factory=dict)

    def add(self, byzantine: bool, rejected: bool, reason: str | None) -> None:
        if rejected:
            self.reasons[str(reason)] = self.reasons.get(str(reason), 0) + 1
            if byzantine:
                self.tp += 1
            else:
                self.fp += 1
        elif byzantine:
            self.fn += 1
        else:
            self.tn += 1


def _same_result(a: GuardResult, b: GuardResult) -> bool:
    if not torch.equal(a.aggregate, b.aggregate):
        return False
    return [(v.sender, v.accepted, v.reason) for v in a.verdicts] == [
        (v.sender, v.accepted, v.reason) for v in b.verdicts
    ]


def backdoor_success(task: Task, model: torch.nn.Module, attack: object) -> float | None:
    """Attack success rate of a backdoor: the share of triggered test images classified as its target.

    ASR = |{x ∈ test : y(x) ≠ t, argmax model(trigger(x)) = t}| / |{x ∈ test : y(x) ≠ t}|

    where t is the attack's ``target`` and the triggered inputs come from its ``triggered_test_inputs(x, y)``
    (``attacks.data.Backdoor``).

    Args:
        task: the task; it must offer ``test_split()`` (the built-in classification tasks do).
        model: the model, with the parameters to measure loaded.
        attack: the attack object; without ``apply_trigger`` this returns None.

    Returns:
        The rate in [0, 1], or None when the attack has no ``triggered_test_inputs`` or ``target``, or the
        task no ``test_split``.
    """
    triggered = getattr(attack, "triggered_test_inputs", None)
    target = getattr(attack, "target", None)
    test_split = getattr(task, "test_split", None)
    if not callable(triggered) or target is None or not callable(test_split):
        return None
    x, y = test_split()
    inputs = triggered(x, y)
    if len(inputs) == 0:
        return None
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            predicted = model(inputs).argmax(dim=1)
    finally:
        model.train(was_training)
    return float((predicted == int(target)).float().mean())


class _Timer:
    """Seconds and calls spent in ``loss_at`` (the loss stage's cost), and in the guard overall."""

    def __init__(self) -> None:
        self.loss_seconds = 0.0
        self.loss_calls = 0
        self.guard_seconds = 0.0
        self.guard_calls = 0


def holdout_loss_at(local: LocalModel, batch_size: int, generator: torch.Generator, eta: float,
                    timer: _Timer | None = None) -> Callable[[torch.Tensor], float]:
    """The receiver's private loss ``loss_at(delta) = L(θ_i − η·delta)`` on one fresh held-out batch.

    Args:
        local: the receiver (its θ_i, model, task and shard).
        batch_size: examples drawn (with replacement) from the shard's private hold-out, ``>= 1``.
        generator: the batch's generator (fresh per receiver and round).
        eta: η, the step a row is scaled by (the cell uses outer_lr / number of rows).
        timer: where to count the calls and their seconds, or None.

    Returns:
        ``loss_at``; each call loads θ_i − η·delta into ``local.model`` (the caller reloads θ afterwards:
        ``LocalModel.apply`` and ``train_round`` do).
    """
    x, y = local.task.holdout_batch(local.shard, batch_size, generator)
    x, y = x.to(local.device), y.to(local.device)
    theta = local.theta

    def loss_at(delta: torch.Tensor) -> float:
        started = time.perf_counter()
        load_flat(local.model, theta - eta * delta)
        with torch.no_grad():
            value = float(local.task.loss(local.model, x, y))
        if timer is not None:
            timer.loss_seconds += time.perf_counter() - started
            timer.loss_calls += 1
        return value

    return loss_at


def _judge_visible(
    guard: object,
    rows: dict[str, torch.Tensor],
    excluded: Mapping[int, frozenset[str]],
    round_: int,
    spec: CellSpec,
    run_id: str,
    names: Sequence[str],
    peers: Sequence[LocalModel],
    timer: _Timer,
    j: int,
) -> GuardResult | None:
    """Receiver ``j``'s guard call on the rows its reputation has not excluded (:func:`_judge`).

    None when its exclusions leave no other peer's row: a swarm peer then leaves its model unchanged
    (``Peer._aggregate``). Without exclusions the call is :func:`_judge`'s, whatever the rows.
    """
    visible = {s: row for s, row in rows.items() if s not in excluded[j]}
    if excluded[j] and not any(s != names[j] for s in visible):
        return None
    return _judge(guard, visible, round_, spec, run_id, names, peers, timer, j)


def _judge(
    guard: object,
    rows: dict[str, torch.Tensor],
    round_: int,
    spec: CellSpec,
    run_id: str,
    names: Sequence[str],
    peers: Sequence[LocalModel],
    timer: _Timer,
    j: int,
) -> GuardResult:
    """Receiver ``j``'s guard call, as ``Peer._aggregate_and_step`` makes it, with its private ``loss_at``."""
    loss_at = None
    if spec.loss_batch > 0:
        eta = peers[j].outer.lr / len(rows)
        batch_generator = round_generator(run_id, spec.seed, j, round_, SALT_LOSS)
        loss_at = holdout_loss_at(peers[j], spec.loss_batch, batch_generator, eta, timer)
    started = time.perf_counter()
    result = judge_rows(
        guard,
        rows,
        me=names[j],
        round_=round_,
        previous_aggregate=peers[j].previous_aggregate,
        f=spec.assumed_byzantine,
        generator=round_generator(run_id, spec.seed, j, round_, SALT_GUARD),
        loss_at=loss_at,
    )
    load_flat(peers[j].model, peers[j].theta)
    timer.guard_seconds += time.perf_counter() - started
    timer.guard_calls += 1
    return result


def run_cell(
    spec: CellSpec,
    *,
    task: Task | None = None,
    sender_ids: Sequence[str] | None = None,
    check_shared: bool = True,
) -> dict[str, Any]:
    """Run one cell to its end and return its result.

    Args:
        spec: the cell.
        task: a loaded task to reuse (None: ``load_task(spec.task, **spec.task_options)``).
        sender_ids: the senders' names, by peer index (None: ``peer00``, ``peer01``, …). The guard orders rows
            by sender, so passing a networked swarm's PeerIDs reproduces its row order exactly.
        check_shared: run the guard a second time per round for another honest receiver and fall back to one
            guard call per receiver if the results ever differ, when ``spec.every_receiver`` is off (see the
            module docstring). Off: one shared θ is assumed without a check, whatever ``spec.every_receiver``.

    Returns:
        ``{"spec", "arm", "attack", "numel", "rounds": [per-round dict], "final", "verdicts", "shared_theta",
        "state_hash", "seconds", "cpu_seconds"}``; ``state_hash`` is
        ``LocalModel.state_hash()`` of the first honest peer after the last round, the hash a networked peer
        publishes in its ``final`` event. A round holds ``round``, ``accuracy``, ``loss`` (test split),
        ``train_loss`` (mean of the honest peers' inner losses), ``tp``/``fp``/``tn``/``fn``, ``asr`` (backdoor
        success rate, mean over the evaluated honest peers; None for other attacks), ``asr_max`` (the
        evaluated honest peer the backdoor fooled most) and ``spread`` (the honest models' relative consensus
        distance after mixing, ``swarm.mixing.consensus_distance``; 0.0 while θ is shared). ``final`` holds the
        last round's ``accuracy``, ``loss``, ``asr`` and ``asr_max``; ``verdicts`` the totals with ``fp_rate`` =
        fp / (fp + tn) and ``detection_rate`` = tp / (tp + fn) (None where undefined) and the rejection reasons;
        ``skipped_steps`` counts (honest peer, round) pairs whose aggregate was not finite (an overflow
        under a huge attack): the outer step refuses it, so that peer's model stays unchanged that round (a
        networked peer would stop with an error).

    Raises:
        ValueError: on an unknown task, guard or attack, a wire attack (out of scope in-process), or
            ``sender_ids`` of the wrong length or with duplicates.
    """
    started = time.monotonic()
    cpu_started = time.process_time()
    if task is None:
        task = load_task(spec.task, **dict(spec.task_options))
    n, f = spec.n, spec.f
    names = list(sender_ids) if sender_ids is not None else [f"peer{i:02d}" for i in range(n)]
    if len(names) != n or len(set(names)) != n:
        raise ValueError(f"sender_ids must be {n} distinct names, got {names!r}")
    byzantine = [i >= n - f for i in range(n)]
    honest = [i for i in range(n) if not byzantine[i]]
    attacks: dict[int, Any] = {}
    kind = None
    if spec.attack and f > 0:
        for i in range(n - f, n):
            attacks[i] = load_attack(spec.attack)  # one object per attacker, as each peer process has its own
        kind = getattr(attacks[n - 1], "kind", None)
        if kind not in ("update", "data"):
            raise ValueError(
                f"attack {spec.attack!r} has kind {kind!r}: only update and data attacks run in-process "
                f"(wire attacks need the integrity stage of a networked swarm: p2p-guard simulate)"
            )
    guard = build_guard(spec.guard, **dict(spec.guard_params))
    run_id = spec.resolved_run_id
    steps = spec.inner_steps or task.default_hparams.inner_steps
    peers = [
        LocalModel(task, seed=spec.seed, num_shards=n, shard_index=i, partition=spec.partition)
        for i in range(n)
    ]
    known_previous: dict[int, list[torch.Tensor]] = {i: [] for i in attacks}
    shared = not (spec.every_receiver and check_shared)
    standing = CellStanding(names) if spec.reputation and spec.guard not in LONE_RULES else None
    index = {name: i for i, name in enumerate(names)}
    exclusions: list[dict[str, Any]] = []
    mixes = spec.mixing and spec.guard not in LONE_RULES
    probe = honest[-1] if len(honest) > 1 else None
    history: list[dict[str, Any]] = []
    totals = _Counts()
    skipped_steps = 0
    timer = _Timer()
    train_seconds = 0.0

    for r in range(spec.rounds):
        rows: dict[str, torch.Tensor] = {}
        dropped: dict[str, str] = {}
        train_losses = []
        for i, local in enumerate(peers):
            attack = attacks.get(i)
            data_attack = attack if kind == "data" else None
            train_started = time.perf_counter()
            delta, train_loss = local.train_round(
                steps, round_generator(run_id, spec.seed, i, r, SALT_INNER), data_attack
            )
            train_seconds += time.perf_counter() - train_started
            if not byzantine[i]:
                train_losses.append(train_loss)
            if attack is not None:
                ctx = AttackContext(
                    round=r,
                    n=n,
                    f=max(1, f),
                    generator=round_generator(run_id, spec.seed, i, r, SALT_ATTACK),
                    guard_name=spec.guard,
                    guard_params=dict(spec.guard_params),
                    guard_f=spec.assumed_byzantine,
                )
                delta = attacked_update(attack, delta, known_previous[i], ctx)
            problem = check_values(delta)  # the swarm's integrity checks of a decoded update
            if problem is None:
                rows[names[i]] = delta
            else:
                dropped[names[i]] = problem.reason.value

        excluded = {j: standing.excluded(names[j]) if standing else frozenset() for j in range(n)}
        if shared and any(excluded.values()):
            logger.info("%s: a reputation excludes a sender from round %d; running the guard once per receiver "
                        "from now on", spec.arm, r)
            shared = False

        judge = functools.partial(_judge_visible, guard, rows, excluded, r, spec, run_id, names, peers, timer)

        results: dict[int, GuardResult] = {}
        if rows:
            if shared:  # no exclusion yet (the first one ends sharing): every call returns a result
                first = judge(honest[0])
                second = judge(probe) if check_shared and probe is not None else first
                if first is None or second is None or not _same_result(first, second):
                    logger.info(
                        "%s: the guard's result depends on the receiver at round %d; running it "
                        "once per receiver from now on",
                        spec.arm,
                        r,
                    )
                    shared = False
            judged = dict.fromkeys(range(n), first) if shared else {j: judge(j) for j in range(n)}
            results = {j: result for j, result in judged.items() if result is not None}
            for j, local in enumerate(peers):
                if j not in results:
                    continue
                aggregate = results[j].aggregate
                if bool(torch.isfinite(aggregate).all()):
                    local.apply(aggregate)
                else:  # OuterNesterov refuses it; a networked peer would stop with an error here
                    skipped_steps += j in honest
        else:
            logger.warning("%s round %d: no finite row; the model is unchanged", spec.arm, r)
        if mixes and not (shared or _all_equal(peers)):  # mixing equal states moves nothing: skip it
            samplers = [mixing_sampler(round_generator(run_id, spec.seed, i, r, SALT_MIX)) for i in range(n)]
            mix_peers_once(peers, names, r, samplers, excluded=[excluded[i] for i in range(n)])

        counts = _Counts()
        for j in honest:
            verdicts = {v.sender: (v.accepted, v.reason) for v in results[j].verdicts} if j in results else {}
            for i in range(n):
                if i == j:
                    continue
                if names[i] in dropped:
                    counts.add(byzantine[i], True, dropped[names[i]])
                elif names[i] in excluded[j]:
                    counts.add(byzantine[i], True, EXCLUDED)
                else:
                    accepted, reason = verdicts.get(names[i], (False, "missing"))
                    counts.add(byzantine[i], not accepted, reason)
        if standing is not None and results:
            newly = standing.fold(r, _round_verdicts(results, names, dropped, excluded))
            exclusions += [{"round": r, "receiver": receiver, "sender": sender, "byzantine": byzantine[index[sender]],
                            "honest_receiver": not byzantine[index[receiver]]}
                           for receiver, senders in newly.items() for sender in senders]
        for key in ("tp", "fp", "tn", "fn"):
            setattr(totals, key, getattr(totals, key) + getattr(counts, key))
        for reason, k in counts.reasons.items():
            totals.reasons[reason] = totals.reasons.get(reason, 0) + k

        for i in attacks:
            known_previous[i] = [rows[s] for s in sorted(rows) if s != names[i]]

        one_model = shared or all(torch.equal(peers[j].theta, peers[honest[0]].theta) for j in honest)
        evaluated = [honest[0]] if one_model else honest  # equal models score equally: evaluate one
        metrics = [peers[j].evaluate() for j in evaluated]
        asr_values = []
        if attacks and hasattr(attacks[n - 1], "triggered_test_inputs"):
            for j in evaluated:  # each peer's module holds its θ (apply and evaluate load it)
                value = backdoor_success(task, peers[j].model, attacks[n - 1])
                if value is not None:
                    asr_values.append(value)
        history.append(
            {
                "round": r,
                "accuracy": _mean([m.accuracy for m in metrics]),
                "loss": _mean([m.loss for m in metrics]),
                "train_loss": _mean(train_losses),
                "tp": counts.tp,
                "fp": counts.fp,
                "tn": counts.tn,
                "fn": counts.fn,
                "asr": _mean(asr_values) if asr_values else None,
                "asr_max": max(asr_values) if asr_values else None,
                "spread": 0.0 if shared else consensus_distance([peers[j].theta for j in honest]),
            }
        )

    last = history[-1]
    return {
        "spec": spec.to_dict(),
        "arm": spec.arm,
        "attack": spec.attack_name,
        "numel": peers[0].numel,
        "rounds": history,
        "final": {"accuracy": last["accuracy"], "loss": last["loss"], "asr": last["asr"], "asr_max": last["asr_max"]},
        "verdicts": {
            "tp": totals.tp,
            "fp": totals.fp,
            "tn": totals.tn,
            "fn": totals.fn,
            "fp_rate": _ratio(totals.fp, totals.fp + totals.tn),
            "detection_rate": _ratio(totals.tp, totals.tp + totals.fn),
            "reasons": dict(sorted(totals.reasons.items())),
        },
        "shared_theta": shared,
        "exclusions": exclusions,
        "skipped_steps": skipped_steps,
        "state_hash": peers[honest[0]].state_hash().hex(),
        "seconds": time.monotonic() - started,
        "cpu_seconds": time.process_time() - cpu_started,
        "timing": {
            "train_seconds": train_seconds,
            "guard_seconds": timer.guard_seconds,
            "guard_calls": timer.guard_calls,
            "loss_seconds": timer.loss_seconds,
            "loss_calls": timer.loss_calls,
        },
    }


def _round_verdicts(results: Mapping[int, GuardResult], names: Sequence[str], dropped: Mapping[str, str],
                    excluded: Mapping[int, frozenset[str]]) -> dict[str, list[Verdict]]:
    """Each receiver's verdicts of the round for its reputation: its guard's, plus the rows it never judged.

    A row dropped before the guard (``non_finite``, ``zero_update``) is a rejection at every receiver, as the
    swarm's integrity stage records it; a sender the receiver excludes gets the verdict ``excluded``.
    """
    out: dict[str, list[Verdict]] = {}
    for j, result in results.items():
        me = names[j]
        out[me] = [*result.verdicts,
                   *(not_judged(s, reason) for s, reason in sorted(dropped.items()) if s != me),
                   *(not_judged(s, EXCLUDED) for s in sorted(excluded[j]) if s not in dropped)]
    return out


def _all_equal(peers: Sequence[LocalModel]) -> bool:
    """Whether every peer holds the same θ and outer momentum, bit for bit (then a mixing step moves nothing)."""
    first = peers[0]
    return all(torch.equal(p.theta, first.theta) and torch.equal(p.momentum, first.momentum) for p in peers[1:])


def _mean(values: Sequence[float | None]) -> float | None:
    numbers = [v for v in values if v is not None and math.isfinite(v)]
    return sum(numbers) / len(numbers) if numbers else None


def _ratio(num: int, den: int) -> float | None:
    return num / den if den else None


def params_of(mapping: Mapping[str, Any] | None) -> Params:
    """Sorted ``(name, value)`` pairs of a mapping, the hashable form :class:`CellSpec` keeps."""
    return tuple(sorted((mapping or {}).items()))
