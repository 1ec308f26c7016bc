"""Who each honest peer's reputation would exclude, replayed over an in-process cell's per-receiver verdicts.

    python docs/scripts/reputation_replay.py --attack mimic --f 3 --partition dirichlet:0.5 --rounds 40
    python docs/scripts/reputation_replay.py --attack mimic --f 2 --smear 1 --partition dirichlet:0.1 --rounds 40

One cell of ``p2p_guard.bench.cell.run_cell`` (digits, 10 peers, f not told, the attackers are the last ``--f``
peers), every receiver's guard run every round (no shared result), then, for each honest receiver, its
``guard.reputation.Reputation`` (defaults: exclusion on) fed as ``swarm.standing.VoteBook`` feeds it: its own
verdicts of round r, its edge rows, and every other peer's ballots of r, folded after round r (the swarm folds
round r during r + 1, so an exclusion at fold r drops the sender from round r + 1 on; the replay then leaves
our own later verdicts on it out, as the verdict ``excluded`` does). ``--smear K`` makes the last K honest-index
peers ``vote_smear`` voters (their rows honest, their ballots accuse every peer but the attackers), as
``--attack A+vote_smear`` does in ``p2p-guard simulate`` (with ``--f`` counting only the update attackers).

Open loop: an exclusion does not take the row out of the replayed aggregate (the cell ran without
reputation), so figures after a receiver's first exclusion are approximate; the question asked, whether an
honest sender is ever excluded, is decided at the first one.

It replays three times from the same verdicts: ``before`` treats only ``protocol.reasons.CIRCUMSTANTIAL_REASONS``
as no evidence (the rule before copyable reasons), ``after`` treats ``protocol.reasons.NOT_EVIDENCE_REASONS``
(circumstantial and copyable: ``duplicate``, ``colluding``) so; both with the default ``Reputation`` (edge rows in
each of a sender's last 4 judged rounds exclude it, ``edge_strikes``). ``after, edge_strikes=None`` is ``after``
with the rule before that (an outright rejection needed). The summary line also gives the longest honest row
an honest receiver accepted, in multiples of the round's median norm there, how many were edge rows (> 2×), and
the most edge rows one honest receiver found from one honest sender in a row (4 exclude it by default), and the
*highest 4-row low*: over every honest receiver, honest sender and 4 of its accepted rows running there, the
largest value of the shortest of the 4 (in multiples of the median; edge rows alone exclude only above 2).
``--task`` is the cell's task spec (``digits``, ``fashion-mnist[:data_dir=DIR]``); ``--f 0`` runs it with no attacker:

    python docs/scripts/reputation_replay.py --f 0 --partition dirichlet:0.05 --task fashion-mnist --rounds 40
"""

from __future__ import annotations

import argparse
import statistics
from collections import Counter
from typing import Any

import torch

import p2p_guard.bench.cell as cell
from p2p_guard.bench.cell import CellSpec, run_cell
from p2p_guard.guard.reputation import Reputation, edge_rows
from p2p_guard.protocol.reasons import CIRCUMSTANTIAL_REASONS, NOT_EVIDENCE_REASONS
from p2p_guard.tasks.registry import parse_task_spec


def replay(record: dict[int, dict[int, Any]], names: list[str], honest: list[int], smear: set[int],
           byzantine: set[int], no_evidence: frozenset[str], edge_strikes: int | None | str = "window",
           ) -> dict[str, Any]:
    """Fold the recorded verdicts into one Reputation per honest receiver; return exclusions and closeness."""
    rounds = sorted(record)
    out: dict[str, Any] = {"exclusions": [], "honest_min_score": 1.0, "honest_max_strikes": 0,
                           "honest_max_streak": 0, "attacker_first_exclusion": {}}
    for o in honest:
        rep = Reputation(me=names[o], edge_strikes=edge_strikes)  # type: ignore[arg-type]
        for r in rounds:
            ballots: dict[str, dict[str, bool]] = {}
            own: dict[str, bool] = {}
            edge: frozenset[str] = frozenset()
            for v, (verdicts, norms) in record[r].items():
                accepted = {s for s, (a, _) in verdicts.items() if a and s != names[v]}
                v_edge = edge_rows(norms, accepted)
                judged = {s: a and s not in v_edge for s, (a, reason) in verdicts.items()
                          if s != names[v] and (a or reason not in no_evidence)}
                if v == o:
                    own = {s: a for s, (a, reason) in verdicts.items()
                           if s != names[v] and (a or reason not in no_evidence) and not rep.is_excluded(s)}
                    edge = v_edge
                elif v in smear:
                    ballots[names[v]] = {names[s]: s in byzantine for s in range(len(names)) if s != v}
                else:
                    ballots[names[v]] = judged
            update = rep.update(r, own, ballots, edge=edge)
            for s in update.newly_excluded:
                i = names.index(s)
                out["exclusions"].append((names[o], s, r, "byzantine" if i in byzantine else "honest"))
                if i in byzantine:
                    out["attacker_first_exclusion"].setdefault(s, {}).setdefault(names[o], r)
            for s, st in update.standings.items():
                if names.index(s) not in byzantine:
                    out["honest_min_score"] = min(out["honest_min_score"], st.score)
                    out["honest_max_strikes"] = max(out["honest_max_strikes"], st.own_strikes)
                    out["honest_max_streak"] = max(out["honest_max_streak"], st.below_streak)
    return out


def main() -> None:
    """Run the cell with every receiver judged, record the verdicts, replay the reputations, print a summary."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--attack", default="mimic")
    parser.add_argument("--f", type=int, default=3, help="update attackers of 10 (the last f peers)")
    parser.add_argument("--smear", type=int, default=0, help="vote_smear voters (the last honest-index peers)")
    parser.add_argument("--partition", default="dirichlet:0.5")
    parser.add_argument("--task", default="digits", help="task spec of the cell (digits, fashion-mnist:data_dir=DIR)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--rounds", type=int, default=40)
    args = parser.parse_args()
    torch.set_num_threads(1)
    task = parse_task_spec(args.task)
    n = 10
    names = [f"peer{i:02d}" for i in range(n)]
    record: dict[int, dict[int, Any]] = {}
    original = cell._judge

    def judge(guard: Any, rows: Any, round_: int, spec: Any, run_id: Any, names_: Any, peers: Any, timer: Any,
              j: int) -> Any:
        result = original(guard, rows, round_, spec, run_id, names_, peers, timer, j)
        norms = {s: float(x.norm()) for s, x in rows.items()}
        record.setdefault(round_, {})[j] = ({v.sender: (v.accepted, v.reason) for v in result.verdicts}, norms)
        return result

    cell._judge = judge  # type: ignore[assignment]
    cell._same_result = lambda a, b: False  # type: ignore[assignment]  # every receiver judged every round
    result = run_cell(CellSpec(task=task.name, task_options=tuple(sorted(task.options)), guard="semantic",
                               attack=args.attack if args.f else None, n=n, f=args.f, partition=args.partition,
                               seed=args.seed, rounds=args.rounds, reputation=False))
    byzantine = set(range(n - args.f, n))
    smear = set(range(n - args.f - args.smear, n - args.f))
    honest = [i for i in range(n) if i not in byzantine and i not in smear]
    reasons: Counter[str] = Counter()
    for r in record:
        for o in honest:
            verdicts, _ = record[r][o]
            for s, (a, reason) in verdicts.items():
                if not a and names.index(s) in set(honest) | smear and s != names[o]:
                    reasons[str(reason)] += 1
    longest, honest_edge = 0.0, 0
    run: Counter[tuple[int, str]] = Counter()  # (receiver, sender): edge rows in a row, over the judged rounds
    longest_run = 0
    last4: dict[tuple[int, str], list[float]] = {}  # (receiver, sender): norm / median of each accepted row
    # the highest, over receivers, senders and 4 accepted rows running, of the 4 rows' shortest (and where)
    window_low, window_at = 0.0, "none"
    for r in sorted(record):
        for o in honest:
            verdicts, norms = record[r][o]
            accepted = {s for s, (a, _) in verdicts.items() if a and s != names[o]}
            median = statistics.median(norms.values())
            for s in accepted:
                if names.index(s) not in byzantine:
                    longest = max(longest, norms[s] / median)
            edge = edge_rows(norms, accepted)
            honest_edge += sum(1 for s in edge if names.index(s) not in byzantine)
            for s in accepted:
                if names.index(s) not in byzantine:
                    run[o, s] = run[o, s] + 1 if s in edge else 0
                    longest_run = max(longest_run, run[o, s])
                    last4.setdefault((o, s), []).append(norms[s] / median)
                    if len(last4[o, s]) >= 4 and min(last4[o, s][-4:]) > window_low:
                        window_low, window_at = min(last4[o, s][-4:]), f"{s} at {names[o]}, round {r}"
    attacker_rows: Counter[str] = Counter()
    for r in record:
        for o in honest:
            verdicts, _ = record[r][o]
            for s, (a, reason) in verdicts.items():
                if names.index(s) in byzantine:
                    attacker_rows["accepted" if a else str(reason)] += 1
    print(f"{args.task} attack {args.attack} f={args.f} smear={args.smear} {args.partition} seed {args.seed} "  # noqa: T201
          f"{args.rounds} rounds: final accuracy {result['final']['accuracy']:.4f}; honest rows rejected by "
          f"honest receivers {sum(reasons.values())} {dict(sorted(reasons.items()))}; attackers' rows at honest "
          f"receivers {dict(sorted(attacker_rows.items()))}; longest honest row accepted {longest:.2f}x the "
          f"median norm, {honest_edge} honest edge rows, at most {longest_run} in a row for one sender and receiver, "
          f"highest 4-row low {window_low:.2f}x ({window_at})")
    for label, no_evidence, edge_strikes in (("before", CIRCUMSTANTIAL_REASONS, "window"),
                                             ("after", NOT_EVIDENCE_REASONS, "window"),
                                             ("after, edge_strikes=None", NOT_EVIDENCE_REASONS, None)):
        out = replay(record, names, honest, smear, byzantine, no_evidence, edge_strikes)
        honest_ex = [e for e in out["exclusions"] if e[3] == "honest"]
        byz_first = {s: sorted(d.values()) for s, d in sorted(out["attacker_first_exclusion"].items())}
        folds: dict[str, list[int]] = {}
        for _, s, r, _ in honest_ex:
            folds.setdefault(s, []).append(r)
        by_sender = {s: dict(sorted(Counter(rs).items())) for s, rs in sorted(folds.items())}
        print(f"  {label}: honest exclusions {len(honest_ex)} (sender: {{fold: receivers}}) {by_sender}; "  # noqa: T201
              f"honest min score "
              f"{out['honest_min_score']:.3f}, max own strikes {out['honest_max_strikes']}, max below-streak "
              f"{out['honest_max_streak']}; attackers' first exclusion round per honest receiver {byz_first}")


if __name__ == "__main__":
    main()
