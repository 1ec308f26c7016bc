"""Heterogeneity against the guards: benchmark cells (10 peers, digits, 12 rounds), arms × cells × seeds.

    python docs/scripts/het_cells.py                                  # mean vs semantic, clean Dirichlet 0.1, seeds 0-4
    python docs/scripts/het_cells.py --arm semantic --arm "dw0=semantic:direction_weights=False"
    python docs/scripts/het_cells.py --partition dirichlet:0.5 --seeds 0 --arm semantic --cell clean --cell alie@3

Prints a markdown table, one row per arm and one column per cell: the final accuracy (mean over the seeds, then
each seed's value) and, for a clean cell, the honest false-positive rate (honest rows rejected by honest
receivers / honest rows judged, over all rounds; ``fp_rate`` of the cell's verdicts), for a ``backdoor`` cell
also its attack success rate (ASR, ``final["asr"]``); then, per number of
attackers F, the worst attack cell's seed-mean accuracy. A cell is ``clean`` or ``ATTACK@F`` (F Byzantine peers
of 10, the last F). Each cell is ``p2p_guard.api.run_bench_cell`` (the benchmark's in-process cell, H = 20, one
torch thread, as ``p2p-guard bench`` runs it); no arm is told f (``assumed_byzantine=None``). An arm is
``[LABEL=]GUARD[:key=value,...]`` (``True``/``False`` booleans, integers, else floats). Results are cached in
``--cache`` (JSON lines, one per cell, keyed by guard, parameters, attack, f, partition and seed), so a table can
be re-printed or extended without rerunning its cells.

Measured 2026-12-04 (the rule of the guard issue: with no attacker on Dirichlet 0.1, honest FP ≤ 2 % and accuracy
within 1 point of the plain mean). ``e43d5aa`` is the semantic guard's defaults before this script,
``semantic:c_radius=1.0,cos_min=-0.2``; every ablation arm below is that plus the switch its label names
(``dw_off`` ``direction_weights=False``, ``cos_full-0.1``, ``dup_off`` ``duplicates=False``, ``anchor_off``
``anchoring=False``, ``clip_off`` ``clip_remaining=False``, ``all_off`` the four off), and ``rR_cos_min-X`` sets
``c_radius=R,cos_min=X``. ``new`` is ``semantic`` since (``c_radius=1.5,cos_min=-0.3``).

Clean Dirichlet 0.1, seeds 0-4 (``--arm mean --arm "e43d5aa=semantic:c_radius=1.0,cos_min=-0.2" ...``):

| arm | clean acc | clean honest FP |
|---|---|---|
| mean | 0.746 (0.811, 0.725, 0.742, 0.783, 0.669) | 0 |
| median | 0.574 (0.622, 0.531, 0.508, 0.622, 0.586) | 0 |
| e43d5aa | 0.729 (0.819, 0.692, 0.711, 0.772, 0.653) | 0.0017 (0, 0, 0, 0.0083, 0) |
| dw_off | 0.734 (0.819, 0.697, 0.728, 0.775, 0.653) | 0.0050 (0, 0, 0, 0.0250, 0) |
| cos_full-0.1 | 0.735 (0.819, 0.697, 0.711, 0.794, 0.653) | 0.0050 (0, 0, 0, 0.0250, 0) |
| dup_off | 0.729 (0.819, 0.692, 0.711, 0.772, 0.653) | 0.0017 (0, 0, 0, 0.0083, 0) |
| anchor_off | 0.729 (0.819, 0.692, 0.711, 0.772, 0.653) | 0.0017 (0, 0, 0, 0.0083, 0) |
| clip_off | 0.733 (0.811, 0.711, 0.739, 0.733, 0.669) | 0.0117 (0, 0, 0, 0.0583, 0) |
| all_off | 0.752 (0.811, 0.725, 0.742, 0.814, 0.669) | 0.0133 (0, 0, 0, 0.0667, 0) |
| r1_cos_min-0.3 | 0.733 (0.819, 0.697, 0.714, 0.781, 0.653) | 0 |
| r1_cos_min-0.4 | 0.734 (0.819, 0.697, 0.717, 0.786, 0.653) | 0 |
| r1.5_cos_min-0.2 | 0.733 (0.811, 0.708, 0.731, 0.742, 0.672) | 0.0067 (0, 0, 0, 0.0333, 0) |
| r2_cos_min-0.2 | 0.733 (0.811, 0.711, 0.739, 0.733, 0.669) | 0.0117 (0, 0, 0, 0.0583, 0) |
| r3_cos_min-0.2 | 0.733 (0.811, 0.711, 0.739, 0.733, 0.669) | 0.0117 (0, 0, 0, 0.0583, 0) |
| r2_cos_min-0.3 | 0.733 (0.814, 0.700, 0.744, 0.739, 0.669) | 0.0017 (0, 0, 0, 0.0083, 0) |
| r2_cos_min-0.4 | 0.736 (0.811, 0.711, 0.744, 0.744, 0.669) | 0 |
| r1.5_cos_min-0.4 | 0.748 (0.811, 0.714, 0.739, 0.806, 0.672) | 0 |
| **new** (r1.5_cos_min-0.3) | **0.746** (0.814, 0.703, 0.739, 0.800, 0.672) | **0** |

Seeds 0-9 (``--seeds 0 1 2 3 4 5 6 7 8 9``): mean 0.763, e43d5aa 0.749 (seeds 5-9: 0.817, 0.775, 0.742, 0.831,
0.677 against the mean's 0.872, 0.800, 0.739, 0.822, 0.669), new 0.764, r1.5_cos_min-0.4 0.766, clip_off 0.755,
dw_off 0.751; honest FP 0 for new on every seed (e43d5aa 0.0008). The gap of e43d5aa is real: −1.4 points over
10 seeds, 6 of them lower by 1.1 to 5.5 points, none higher by more than 0.9.

Where it came from. Switching off the duplicate stage or the self-anchor changed nothing (the figures of e43d5aa);
the direction weights and the clipping each cost part of it. Under Dirichlet 0.1 an honest peer with classes of its
own sends a row far from the robust centre and, late in training, at cosine −0.3 to −0.4 with it (seed 3,
``r2_cos_min-0.2``: rows at −0.28 to −0.39 rejected in rounds 7, 9, 10 and 11 by every receiver): at radius 1 (the
median distance) half the rows are clipped, and a floor at −0.2 rejects or down-weighs exactly these rows. Each
change alone (radius 1.5, floor −0.3 or −0.4) recovered 0.4-0.5 points, the radius alone raised honest FP (seed 3:
the trajectory changes and more rows fall below −0.2), both together all of it.

Under attack, Dirichlet 0.5, seeds 0-3 (``--partition dirichlet:0.5 --seeds 0 1 2 3 --cell clean --cell
sign_flip:scale=1@3 ... --cell adaptive@4``: the seven attacks at 3 and at 4 of 10); mean over the seeds:

| arm | clean (FP) | sf:1 | sf:10 | null_space | mimic | alie | ipm:0.1 | adaptive | worst |
|---|---|---|---|---|---|---|---|---|---|
| e43d5aa, 3 of 10 | 0.929 (0.0021) | 0.870 | 0.914 | 0.886 | 0.898 | 0.903 | 0.904 | 0.906 | 0.870 |
| new, 3 of 10 | 0.933 (0) | 0.874 | 0.913 | 0.883 | 0.900 | 0.906 | 0.910 | 0.906 | 0.874 |
| r1.5_cos_min-0.4, 3 of 10 | 0.933 (0) | 0.862 | 0.917 | 0.877 | 0.902 | 0.909 | 0.913 | 0.903 | 0.862 |
| e43d5aa, 4 of 10 | | 0.763 | 0.904 | 0.789 | 0.887 | 0.887 | 0.889 | 0.903 | 0.763 |
| new, 4 of 10 | | 0.806 | 0.904 | 0.809 | 0.884 | 0.889 | 0.889 | 0.899 | 0.806 |
| r1.5_cos_min-0.4, 4 of 10 | | 0.777 | 0.904 | 0.811 | 0.888 | 0.894 | 0.894 | 0.894 | 0.777 |

Seed 0 (the reference of ``p2p-guard bench robustness --acceptance digits``): e43d5aa worst 0.895 at 3 of 10 and
0.781 at 4 (both ``sign_flip:scale=1``), clean 0.931; new 0.907 and 0.780, clean 0.936. Per cell, new against
e43d5aa over the four seeds: −0.35 points at worst (``adaptive`` at 4 of 10; single seeds down to −1.2: ``mimic`` at
4 of 10 on seed 1, ``adaptive`` at 4 of 10 on seed 3), +4.3 under ``sign_flip:scale=1`` and +2.0 under
``null_space`` at 4 of 10. IID (seeds 0, 1): mean 0.956, e43d5aa 0.955, new 0.956. So the default became
``c_radius=1.5, cos_min=-0.3``; −0.4 helps clean as much but costs ``sign_flip:scale=1`` at 3 of 10 (0.862).

More cells, mean over the seeds (each seed's value in the script's output):

| partition, seeds | arm | alie:z=search@3 | alie:z=search@4 | backdoor@3 acc | backdoor@3 ASR |
|---|---|---|---|---|---|
| dirichlet:0.5, 0-3 | e43d5aa | 0.911 | 0.900 | 0.919 | 0.889 (0.867, 0.926, 0.969, 0.793) |
| dirichlet:0.5, 0-3 | new | 0.910 | 0.899 | 0.926 | 0.862 (0.852, 0.867, 0.923, 0.806) |

| dirichlet:0.1, seeds 0 1, 3 of 10 | sf:1 | sf:10 | null_space | alie | ipm:0.1 | adaptive | worst |
|---|---|---|---|---|---|---|---|
| e43d5aa | 0.589 | 0.647 | 0.551 | 0.638 | 0.623 | 0.651 | 0.551 |
| new | 0.610 | 0.650 | 0.589 | 0.651 | 0.637 | 0.681 | 0.589 |
| mean | 0.394 | 0.100 | 0.401 | 0.689 | 0.618 | 0.100 | 0.100 |

(``--partition dirichlet:0.1 --seeds 0 1 --cell sign_flip:scale=1@3 ... --arm mean``.) Under attack on Dirichlet
0.1 the new defaults are better too (worst 0.551 → 0.589), the backdoor's ASR is unchanged within the seeds.

Not measured here: Fashion-MNIST, more than 12 rounds, 20 % attackers, the live swarm (mixing, sampling), the
full ``p2p-guard bench robustness`` grids (``docs/benchmarks.md`` still shows the old defaults).
"""

from __future__ import annotations

import argparse
import json
import pathlib
from typing import Any

import torch

from p2p_guard.api import run_bench_cell
from p2p_guard.plugin_spec import parse_value, split_params
from p2p_guard.bench.cell import CellSpec

N = 10
PARTITION = "dirichlet:0.1"
Params = tuple[tuple[str, Any], ...]


def parse_params(text: str) -> Params:
    """``k=v,...`` → sorted pairs, values read as the guard spec parser reads them (``p2p_guard.plugin_spec``)."""
    if not text:
        return ()
    return tuple(sorted((key, parse_value(raw)) for key, raw in split_params(text, spec=text, what="arm").items()))


def parse_arm(arm: str) -> tuple[str, str, Params]:
    """``[LABEL=]GUARD[:k=v,...]`` → (label, guard, params)."""
    head = arm.split(":", 1)[0]
    label, spec = arm.split("=", 1) if "=" in head else (arm, arm)
    name, _, rest = spec.partition(":")
    return label, name, parse_params(rest)


def parse_cell(cell: str) -> tuple[str | None, int]:
    """``clean`` → (None, 0); ``ATTACK@F`` → (attack, F)."""
    if cell == "clean":
        return None, 0
    attack, _, f = cell.rpartition("@")
    return attack, int(f)


class Cache:
    """JSON-lines cache of cell results (accuracy, fp_rate, asr, tp, fp, tn, fn), keyed by the cell's definition."""

    def __init__(self, path: pathlib.Path | None) -> None:
        self.path = path
        self.rows: dict[str, dict[str, Any]] = {}
        if path is not None and path.exists():
            for line in path.read_text().splitlines():
                record = json.loads(line)
                self.rows[record["key"]] = record

    def get(self, guard: str, params: Params, attack: str | None, f: int, partition: str,
            seed: int) -> dict[str, Any]:
        """The cell's record, run now unless cached."""
        key = json.dumps([guard, params, attack, f, partition, seed])
        if key not in self.rows:
            spec = CellSpec(task="digits", guard=guard, attack=attack, n=N, f=f, partition=partition, seed=seed,
                            rounds=12, guard_params=params, reputation=False)
            result = run_bench_cell(spec)
            v = result["verdicts"]
            asr = result["final"].get("asr")
            record = {"key": key, "accuracy": float(result["final"]["accuracy"]), "fp_rate": float(v["fp_rate"]),
                      "asr": None if asr is None else float(asr),
                      **{k: v.get(k) for k in ("tp", "fp", "tn", "fn")}}
            self.rows[key] = record
            if self.path is not None:
                with self.path.open("a") as fh:
                    fh.write(json.dumps(record) + "\n")
        return self.rows[key]


def entry(values: list[float], digits: int = 3) -> str:
    """``mean (v_0, v_1, ...)``."""
    mean = sum(values) / len(values)
    if len(values) == 1:
        return f"{mean:.{digits}f}"
    return f"{mean:.{digits}f} ({', '.join(f'{v:.{digits}f}' for v in values)})"


def main() -> None:
    """Run the cells and print the table."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--arm", action="append", default=None, help="[LABEL=]GUARD[:k=v,...]")
    p.add_argument("--cell", action="append", default=None, help="clean or ATTACK@F (default: clean)")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    p.add_argument("--partition", default=PARTITION, help=f"the cells' data partition (default: {PARTITION})")
    p.add_argument("--cache", type=pathlib.Path, default=None, help="JSON-lines cache of cell results")
    args = p.parse_args()
    torch.set_num_threads(1)
    arms = args.arm or ["mean", "semantic"]
    cells = args.cell or ["clean"]
    cache = Cache(args.cache)
    head = ["arm"]
    for c in cells:
        head += [f"{c} acc", f"{c} honest FP"] if c == "clean" else [f"{c} acc"]
        head += [f"{c} ASR"] if c.startswith("backdoor") else []
    fs = sorted({parse_cell(c)[1] for c in cells if c != "clean"})
    head += [f"worst @{f}" for f in fs]
    print(f"partition {args.partition}, seeds {' '.join(map(str, args.seeds))}\n")  # noqa: T201
    print("| " + " | ".join(head) + " |")  # noqa: T201
    print("|" + "---|" * len(head), flush=True)  # noqa: T201
    for arm in arms:
        label, guard, params = parse_arm(arm)
        row = [label]
        worst: dict[int, float] = {}
        for c in cells:
            attack, f = parse_cell(c)
            runs = [cache.get(guard, params, attack, f, args.partition, s) for s in args.seeds]
            row.append(entry([r["accuracy"] for r in runs]))
            if attack is None:
                row.append(entry([r["fp_rate"] for r in runs], 4))
            elif attack.startswith("backdoor"):
                row.append(entry([r["asr"] for r in runs]))
            else:
                mean = sum(r["accuracy"] for r in runs) / len(runs)
                worst[f] = min(worst.get(f, mean), mean)
        row += [f"{worst[f]:.3f}" for f in fs]
        print("| " + " | ".join(row) + " |", flush=True)  # noqa: T201


if __name__ == "__main__":
    main()
