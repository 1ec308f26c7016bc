"""``topk`` 2 % on Shakespeare over 40 rounds: the gap to fp32 now, and the error-feedback decay β.

    python docs/scripts/topk_shakespeare40.py --seed S                          # fp32, topk 2 %, dense=head
    python docs/scripts/topk_shakespeare40.py --seed S --codecs topk:density=0.02,dense=head --ef-decay B

An exploratory measurement, not a default: ``bench.wire.convergence`` (Shakespeare char-GPT, 246,144 parameters,
8 workers, IID, the mean of the decoded rows, error feedback per worker, one torch thread, evaluation every 10
rounds), the same as ``p2p-guard bench wire --task shakespeare --rounds 40 --eval-every 10 --guard-attacks none
--seed S --codecs ... [--topk-ef-decay B]``, which is what the runs below used (``--json``; wall times on a
2-core machine shared with other people's runs, load 3 to 12, so they only say roughly what a run costs).
Issue 10 asks for topk 2 % within 3 % of fp32's final perplexity.

Measured 2026-12-08 at 62a73e4 (perplexity after rounds 10 / 20 / 30 / 40; vs fp32 after 40; bytes per parameter
per round of one worker's payload):

| seed | codec | β | α | perplexity 10 / 20 / 30 / 40 | vs fp32 | bytes/param/round | wall |
|---:|---|---:|---:|---|---:|---:|---:|
| 0 | ``fp32`` | | 0.7, μ 0.9 | 8.0496 / 6.5500 / 6.0407 / 5.6427 | | 4.0000 | 437 s |
| 0 | ``topk:density=0.02`` | 0.95 | 3 | 9.7248 / 7.1772 / 6.4490 / 6.1337 | +8.70 % | 0.0470 | 557 s |
| 0 | ``topk:density=0.02,dense=head`` | 0.95 | 3 | 8.8546 / 6.7098 / 6.2316 / 5.9723 | +5.84 % | 0.1323 | 745 s |
| 0 | ``topk:density=0.02,dense=head`` | 0.9 | 3 | 8.8866 / 6.6615 / 6.1865 / 5.8983 | +4.53 % | 0.1323 | 502 s |
| 0 | ``topk:density=0.02,dense=head`` | 0.8 | 3 | 8.7270 / 6.7099 / 6.2281 / 5.9261 | +5.02 % | 0.1323 | 939 s |
| 1 | ``fp32`` | | 0.7, μ 0.9 | 8.1614 / 6.5467 / 6.0385 / 5.6825 | | 4.0000 | 750 s |
| 1 | ``topk:density=0.02,dense=head`` | 0.95 | 3 | – / 6.7671 / – / 5.8576 (docs/protocol.md §2, at 40683dc) | +3.08 % | 0.1323 | not rerun |
| 1 | ``topk:density=0.02,dense=head`` | 0.9 | 3 | 9.1442 / 6.7080 / 6.1976 / 5.8970 | +3.77 % | 0.1323 | 767 s |

The first three rows are one run (``--codecs fp32 topk:density=0.02 topk:density=0.02,dense=head``, 1,742 s with
the codec-size part); they repeat docs/protocol.md §2's seed-0 figures at 40683dc bit for bit (fp32 5.6427,
``dense=head`` 5.9723), and add plain ``topk`` 2 % at 40 rounds: +8.70 %. The other rows are
``--codecs topk:density=0.02,dense=head --topk-ef-decay B``, compared with the fp32 row of the same seed.
docs/protocol.md §2 has β = 0.99 on seed 0 (6.7780 after 20, 6.0415 after 40): over β = 0.99 / 0.95 / 0.9 / 0.8
the final perplexity is 6.0415 / 5.9723 / 5.8983 / 5.9261, best at 0.9 and at most 2.5 points of percent apart,
which one seed does not rank (seed-to-seed spread of the shipped codec: +3.08 to +5.84 %).

Digits (``p2p-guard bench wire --rounds 40 --codecs fp32 topk:density=0.02 --guard-attacks none``, 13 s; and
``--codecs topk:density=0.02 --topk-ef-decay 0.9``): fp32 0.9667, topk 2 % 0.9639 (−0.28 points) at β = 0.95 and
0.9639 at β = 0.9, 0.0489 bytes/param/round; seed 1 (``--seed 1``): fp32 0.9750, topk 0.9778 (+0.28) at β = 0.95
and 0.9750 (0.00) at β = 0.9. β = 0.9 does not hurt digits, nor help it.

Verdict: topk 2 % is not within 3 % of fp32 after 40 rounds with any setting tried here, on either seed (seed 0:
plain +8.70 %, ``dense=head`` +5.84 % as shipped, +4.53 % at β = 0.9; seed 1: ``dense=head`` +3.08 % as shipped,
+3.77 % at β = 0.9). β = 0.9's seed-0 gain does not carry over to seed 1, where it is worse than the shipped 0.95.
fp32 on seed 1 repeats 40683dc's 5.6825 bit for bit, as seed 0 did for both codecs, so the shipped seed-1 row
taken from docs/protocol.md presumably holds at 62a73e4 (not rerun). No default changed. Not run to the end:
smaller chunks (``TOPK_LATE_CHUNK=1024 python docs/scripts/topk_late.py base 0 40``, k = 21 of 1,024, 2.05 %),
stopped after 4 rounds to make room for the β runs.
"""

from __future__ import annotations

import argparse

import torch

from p2p_guard.bench.wire import convergence

CODECS = ("fp32", "topk:density=0.02", "topk:density=0.02,dense=head")


def main() -> None:
    """Parse the arguments, run ``bench.wire.convergence`` once, print one line per codec."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--codecs", nargs="+", default=list(CODECS))
    parser.add_argument("--task", default="shakespeare")
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--eval-every", type=int, default=10)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--ef-decay", type=float, default=None, help="β of the topk codecs (default: the codec's)")
    parser.add_argument("--outer-lr", type=float, default=None, help="α of the topk codecs (default: the codec's)")
    args = parser.parse_args()
    if args.rounds < 1 or args.eval_every < 0:
        parser.error("--rounds must be >= 1 and --eval-every >= 0")
    torch.set_num_threads(1)
    rows = convergence(args.codecs, task=args.task, rounds=args.rounds, seed=args.seed, eval_every=args.eval_every,
                       topk_ef_decay=args.ef_decay, topk_outer_lr=args.outer_lr)
    for row in rows:
        curve = " / ".join(f"{q:.4f}" for _, q in row["curve"])
        delta = row["quality_vs_fp32"]
        print(f"{args.task} seed {args.seed} {row['codec']} β={row['ef_decay']:g} α={row['outer_lr']:g}: "
              f"{row['metric']} {curve}" + ("" if delta is None else f" ({delta:+.2f} % vs fp32)")
              + f", {row['bytes_per_param']:.4f} bytes/param/round, {row['seconds']:.0f} s", flush=True)


if __name__ == "__main__":
    main()
