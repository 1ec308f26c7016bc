"""Edge rows and exclusions in a ``p2p-guard simulate`` work directory, from the peers' events.jsonl.

    python docs/scripts/edge_rows_events.py runs/<timestamp>

For every peer (receiver) and round, the ``verdict`` events give each judged row's norm (after the staleness
weight, as the guard saw it), its verdict and its staleness. As ``swarm.standing.VoteBook.publish`` does, the
round's median runs over every verdict with a norm (the receiver's own row included), and an edge row is an
accepted row of another sender longer than twice it (``guard.reputation.edge_rows``). Printed: the ``exclude``
and ``exclude_candidate`` events (receiver, sender, round, strikes, rejections); the longest accepted row of
another sender in multiples of the receiver's median, split into fresh rows (staleness 0) and carried ones
(staleness > 0); the edge rows; and the most edge rows one receiver found from one sender in a row over the
rounds in which it judged that sender (4 exclude it by default, ``Reputation(edge_strikes=...)``), and
``window_low``: over every receiver, sender and 4 of its accepted rows running there, the largest value of the
shortest of the 4 (edge rows alone exclude only above 2). Last, for the honest and for the Byzantine senders'
accepted rows over 2x the median (as the receivers' guards saw them): how many, how long, and their cosines to
the guard's centre (the verdicts' ``cosine``), and for each Byzantine sender and receiver the shortest of its
first 4 judged rows there (accepted or not). The peers are named ``peerN`` by their events file;
a peer whose ``ready`` event says ``byzantine`` is left out, as receiver and as sender.
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any


def load(workdir: Path) -> tuple[dict[str, str], dict[str, list[dict[str, Any]]], set[str]]:
    """Read every ``peerN.events.jsonl``: ``({peer_id: name}, {name: events}, byzantine names)``."""
    names: dict[str, str] = {}
    events: dict[str, list[dict[str, Any]]] = {}
    byzantine: set[str] = set()
    for path in sorted(workdir.glob("peer*.events.jsonl")):
        name = path.name.split(".")[0]
        rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        events[name] = rows
        for e in rows:
            if e.get("event") == "ready":
                names[e["peer_id"]] = name
                if e.get("byzantine"):
                    byzantine.add(name)
    return names, events, byzantine


def summarise(workdir: Path) -> dict[str, Any]:
    """The figures the module docstring lists, for one work directory."""
    names, events, byzantine = load(workdir)
    out: dict[str, Any] = {"exclusions": [], "longest_fresh": 0.0, "longest_stale": 0.0, "edge_rows": 0,
                           "edge_stale": 0, "most_in_a_row": 0, "judged_rows": 0, "stale_rows": 0,
                           "stale_ratios": [], "window_low": 0.0,
                           "honest_long": [], "byzantine_long": [], "byzantine_first_lows": []}
    for receiver, rows in sorted(events.items()):
        if receiver in byzantine:
            continue
        by_round: dict[int, list[dict[str, Any]]] = defaultdict(list)
        # a restarted peer appends to the same file: keep each round's last batch of verdicts
        for e in rows:
            if e.get("event") == "verdict":
                by_round[e["round"]].append(e)
            elif e.get("event") in ("exclude", "exclude_candidate"):
                out["exclusions"].append((receiver, names.get(e["sender"], e["sender"][-8:]), e["round"], e["event"],
                                          e.get("own_strikes"), e.get("own_rejections")))
        run: Counter[str] = Counter()
        last4: dict[str, list[float]] = defaultdict(list)
        first4: dict[str, list[float]] = defaultdict(list)  # a Byzantine sender's judged rows here, in order
        for r in sorted(by_round):
            latest: dict[str, dict[str, Any]] = {}
            for e in by_round[r]:
                latest[e["sender"]] = e
            me = next((pid for pid, n in names.items() if n == receiver), None)
            norms = [e["norm"] for e in latest.values() if e.get("norm") is not None]
            if not norms:
                continue
            median = statistics.median(norms)
            for sender, e in latest.items():
                if sender == me or e.get("norm") is None:
                    continue
                if names.get(sender) in byzantine:
                    first4[sender].append(e["norm"] / median if median > 0 else 0.0)
                    if len(first4[sender]) == 4:
                        out["byzantine_first_lows"].append(round(min(first4[sender]), 2))
                    if e["accepted"] and median > 0 and e["norm"] > 2.0 * median and e.get("cosine") is not None:
                        out["byzantine_long"].append((round(e["norm"] / median, 2), round(e["cosine"], 3)))
                    continue
                if e["accepted"] and median > 0 and e["norm"] > 2.0 * median and e.get("cosine") is not None:
                    out["honest_long"].append((round(e["norm"] / median, 2), round(e["cosine"], 3)))
                out["judged_rows"] += 1
                stale = (e.get("staleness") or 0) > 0
                out["stale_rows"] += stale
                if not e["accepted"]:
                    continue  # a rejection (for content) is a strike of its own; the run of edge rows goes on
                ratio = e["norm"] / median if median > 0 else 0.0
                key = "longest_stale" if stale else "longest_fresh"
                out[key] = max(out[key], ratio)
                if stale:
                    out["stale_ratios"].append(round(ratio, 2))
                edge = ratio > 2.0
                out["edge_rows"] += edge
                out["edge_stale"] += edge and stale
                run[sender] = run[sender] + 1 if edge else 0
                out["most_in_a_row"] = max(out["most_in_a_row"], run[sender])
                last4[sender].append(ratio)
                if len(last4[sender]) >= 4:
                    out["window_low"] = max(out["window_low"], min(last4[sender][-4:]))
    return out


def main() -> None:
    """Print the summary of one work directory."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("workdir", type=Path)
    args = parser.parse_args()
    out = summarise(args.workdir)
    stale = sorted(out.pop("stale_ratios"))
    long_rows = {k: out.pop(k) for k in ("honest_long", "byzantine_long")}
    first_lows = sorted(out.pop("byzantine_first_lows"))
    print(json.dumps(out))  # noqa: T201
    if first_lows:
        print(f"Byzantine senders' first 4 judged rows at each receiver, the shortest of the 4 (x the median), "  # noqa: T201
              f"sorted: {first_lows}")
    for k, rows in long_rows.items():
        if rows:
            cos = sorted(c for _, c in rows)
            print(f"{k} accepted rows over 2x the median: {len(rows)}, {min(r for r, _ in rows):.2f}-"  # noqa: T201
                  f"{max(r for r, _ in rows):.2f}x, cosine to the guard's centre {cos[0]:.2f} to {cos[-1]:.2f} "
                  f"(median {statistics.median(cos):.2f})")
    print(f"carried rows' norm / median, sorted: {stale}")  # noqa: T201


if __name__ == "__main__":
    main()
