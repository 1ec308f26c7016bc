"""The white-box attacks against the default guard and the coordinate-wise median, one line per cell.

Digits, 10 peers, Dirichlet 0.5 (``--partition`` for another split), 12 rounds (``--rounds``), f not told.

    python docs/scripts/adaptive_cells.py                         # the first table (about 3 min on 2 cores)
    python docs/scripts/adaptive_cells.py --guards semantic --fractions 4 --seeds 0
    python docs/scripts/adaptive_cells.py --attack alie:z=search --fractions 3 4      # the second table

Since 2026-12-07 the cell judges every receiver every round and mixes the models after each step, as a swarm does
(``CellSpec.every_receiver``, ``CellSpec.mixing``); the figures below measured before then are reproduced with
``--no-mixing --shortcut`` (``--every-receiver`` in an older command: ``--no-mixing`` alone).

Each cell is ``p2p_guard.bench.cell.run_cell`` (the benchmark's in-process cell: the guard is never told f, the
attackers are told the guard's name, as in ``p2p-guard bench robustness``), with ``attack="adaptive"`` at f of 10
and a clean run (f = 0) for reference. A line holds the final accuracy and the guard's verdict counts over every
honest receiver's view (tp: Byzantine rows rejected, fn: accepted, fp: honest rows rejected), the backdoor's attack
success rate (``asr``, else null), the accuracy after each round and the mean of the last 4 rounds (8-11 at the
default ``--rounds 12``).

Why: issue 9 (honest numbers: a white-box attack must attack the guard as it is). The attack ran the real guard
all along (``simulated_guard`` builds it with ``build_guard``); what it got wrong was this round's honest rows,
simulated by the previous round's: their centre points where the previous round's did (fixed by the turned model,
``drift_cosine``; it changes nothing at the default ``cos_min``, where the target cosine is 0) and their length is
the previous round's, while pseudo-gradients shrink 15-30 % a round early in training, so rows sized for the
previous median were rejected for their norm in rounds 3-5 (fixed by ``drift_scale``). In round 0, with one
known row, the colluders' rows came out nearly identical and the duplicate stage grouped them (fixed by jittering
with the own row's norm as the typical distance).

The first two tables and the collusion table after them predate the collusion stage as the default (the last
section): their ``semantic`` rows are ``semantic:collusion=False`` now, and ``semantic:collusion=True`` ran with
groups of two (``collusion_group=2``; groups of three give the same cells under these two attacks).

Measured 2026-12-06 (final accuracy, seeds 0 1 2 3 4, then their mean; tp = the attack's rows rejected, summed
over every honest receiver's 12 rounds). Versions: before = main at 9e8e978; scale = 227ca33 (turned and
scaled models; d3278c2, the turned model alone, changed no cell but semantic at 4 of 10 on seed 4, by −0.3
points); round 0 = the commit after 227ca33 that adds the round-0 jitter and this table::

    | guard | f | version | seeds 0 1 2 3 4 | mean | tp, seeds 0-4 |
    |---|---:|---|---|---:|---|
    | semantic | 0 | all three | 0.936 0.936 0.917 0.942 0.876 | 0.921 | |
    | semantic | 3 | before | 0.919 0.853 0.917 0.933 0.911 | 0.907 | 77 63 28 42 63 |
    | semantic | 3 | scale | 0.917 0.850 0.914 0.931 0.911 | 0.905 | 42 56 21 28 42 |
    | semantic | 3 | round 0 | 0.925 0.858 0.925 0.919 0.922 | 0.910 | 21 49 0 14 28 |
    | semantic | 4 | before | 0.919 0.839 0.919 0.919 0.917 | 0.903 | 48 30 36 48 48 |
    | semantic | 4 | scale | 0.875 0.839 0.922 0.914 0.919 | 0.894 | 24 30 54 24 24 |
    | semantic | 4 | round 0 | 0.900 0.839 0.922 0.919 0.919 | 0.900 | 0 0 12 6 0 |
    | median | 0 | all three | 0.936 0.872 0.839 0.936 0.847 | 0.886 | |
    | median | 3 | before, scale | 0.894 0.822 0.875 0.886 0.886 | 0.873 | |
    | median | 3 | round 0 | 0.886 0.828 0.869 0.875 0.889 | 0.869 | |
    | median | 4 | before | 0.744 0.622 0.647 0.653 0.828 | 0.699 | |
    | median | 4 | scale | 0.750 0.625 0.647 0.642 0.825 | 0.698 | |
    | median | 4 | round 0 | 0.753 0.583 0.647 0.656 0.825 | 0.693 | |

What it says: the attack now passes the guard as it is (its rows rejected 0-49 times a cell where they were
28-77), but getting its rows in is not the same as doing damage. Against before, the default guard's accuracy
moved by −1.9 to +1.1 points a cell with the round-0 jitter (means +0.3 at 3 of 10, −0.3 at 4 of 10) and by −4.4
to +0.3 without it (means −0.2, −0.9), with no consistent sign: single cells differ by a few points with any change
of the trajectory. The default guard stays above the coordinate-wise median under the same attack in every cell
(on the issue's seeds 0 and 1, 3 of 10: 92.5 / 85.8 % against 88.6 / 82.8 %; 4 of 10: 90.0 / 83.9 % against
75.3 / 58.3 %).

Rows still rejected with the round-0 jitter: for their norm in rounds 3-5 (every rejection but one round's;
the norms shrink there and an attacker whose own Δ is longer than the round's median has no witness of it), and
for direction once (4 of 10, seed 2, round 8: two rows at cosine −0.51 with the centre, where the simulation had
them at 0 or above).

``alie:z=search`` (``--attack alie:z=search``: ALIE, μ − zσ over the known rows, with z searched against the
simulated guard). Its search had the same gap: it simulated the guard on the previous round's rows alone, and
scored a z by how far the aggregate moved from μ (which holds the colluders' rows of the previous round), so a z
whose rows the guard rejects could win. Now it takes the largest z that, with √2·z, the guard accepts on both
models of this round's honest rows (``honest_models``: as they are, and scaled and turned by ``drift_scale`` and
``drift_cosine``). Measured 2026-12-06 (final accuracy, seeds 0 1 2 3 4, then their mean; tp = the attack's rows
rejected, of 252 at 3 of 10 and 288 at 4 of 10, summed over every honest receiver's 12 rounds). Versions: before =
main at 610ab89; after = the commit that adds this table::

    | guard | f | version | seeds 0 1 2 3 4 | mean | tp, seeds 0-4 |
    |---|---:|---|---|---:|---|
    | semantic | 3 | before | 0.936 0.847 0.928 0.931 0.906 | 0.909 | 182 189 189 210 210 |
    | semantic | 3 | after | 0.919 0.844 0.903 0.922 0.889 | 0.896 | 0 0 0 0 14 |
    | semantic | 4 | before | 0.906 0.839 0.931 0.922 0.919 | 0.903 | 228 198 222 228 240 |
    | semantic | 4 | after | 0.897 0.856 0.903 0.900 0.897 | 0.891 | 54 42 30 48 114 |
    | median | 3 | before | 0.897 0.850 0.919 0.925 0.900 | 0.898 | |
    | median | 3 | after | 0.897 0.844 0.917 0.922 0.906 | 0.897 | |
    | median | 4 | before | 0.869 0.803 0.883 0.894 0.892 | 0.868 | |
    | median | 4 | after | 0.872 0.806 0.878 0.894 0.892 | 0.868 | |

What it says: the attack now gets its rows in (rejected 0-14 times a cell at 3 of 10, where it was 182-210) and
does more damage to the default guard: −1.3 points on the mean at 3 of 10 (cells −2.5 to −0.3) and −1.2 at 4 of
10 (cells −2.8 to +1.7). At 3 of 10 the default guard is no longer above the coordinate-wise median: below it on
seeds 2 (90.3 against 91.7 %) and 4 (88.9 against 90.6 %), level on seeds 1 and 3, above on seed 0 (91.9 against
89.7 %); means 89.6 against 89.7 %. At 4 of 10 it stays above the median in every cell (means 89.1 against
86.8 %). (Against the median, which rejects nothing, every z passes and the search takes the top of its grid.)

Rows still rejected at 4 of 10 (and 3 of 10 seed 4): for their cosine to the robust centre, just below
cos_min = −0.3, in rounds 8-11 (7-11 on seed 4 at 4 of 10). On seed 4 at 4 of 10 the rows meet the previous
round's honest mean at −0.26 to −0.32 in rounds 7-11 and this round's at −0.31 to −0.36: the honest centre turns
away from a persistent attack (the honest updates correct last round's push), which the turned model, a turn
unrelated to the attack's plane, does not foresee; and μ, σ over the known rows include the colluders' rows of the
previous round, so the row barely changes from round to round (cosine 0.99 with the previous round's attack rows)
and a smaller z does not turn it back.

The collusion stage (off by default, ``p2p_guard/guard/collusion.py``), measured 2026-12-06 at 77580cd, final
accuracy for seeds 0 / 1 / 2 / 3 / 4 (attack rows rejected; 0 honest rows rejected in every cell)::

    python docs/scripts/adaptive_cells.py --attack alie:z=search --fractions 3 4 --guards "semantic:collusion=True"
    python docs/scripts/adaptive_cells.py --fractions 0 3 4 --guards "semantic:collusion=True"

| attack | f | ``semantic:collusion=True`` | rejected |
|---|---:|---|---:|
| none | 0 | 0.9361 0.9361 0.9167 0.9417 0.8764 (as the default guard) | - |
| ``alie:z=search`` | 3 | 0.9333 0.8500 0.9250 0.9306 0.9056 (median: 0.897 0.844 0.917 0.922 0.906) | 210 of 252 |
| ``alie:z=search`` | 4 | 0.9056 0.8417 0.9333 0.9222 0.9194 | 240 of 288 |
| ``adaptive`` | 3 | 0.9389 0.8556 0.9333 0.9306 0.9139 | 210 of 252 |
| ``adaptive`` | 4 | 0.9083 0.8472 0.9250 0.9167 0.9306 | 240 of 288 |

It rejects every attack row from round 2 on (its warm-up), where the default guard accepts them. It was kept off
for one cost on Dirichlet 0.1: ``python docs/scripts/adaptive_cells.py --attack sign_flip:scale=1 --partition
dirichlet:0.1 --fractions 3 --seeds 0 1 2 --guards semantic:collusion=False
"semantic:collusion=True,collusion_group=2"`` gives 0.5306 / 0.6889 / 0.6448 without the stage and 0.4659 /
0.6889 / 0.5730 with it.

The collusion stage on by default, in groups of three (``collusion_group=3``), measured 2026-12-06. Why that
cost was not what it looked like: the stage rejected attacker rows only there (21 and 14 on seeds 0 and 2, no
honest row), and the mean accuracy of rounds 8-11 moved by −0.1 and −0.6 points (0.5014 → 0.5006, 0.5813 →
0.5758); under sign flip on Dirichlet 0.1 both runs swing by up to 10 points from one round to the next (seed 0
without the stage: 0.511, 0.436, 0.531 in rounds 9-11) and the final round fell on the other side of a swing.
The cost that is real was elsewhere: on clean ``dirichlet:0.1`` seed 3, the pair rule (g = 2) rejected two
honest peers with the same dominant labels from round 2 on, 180 of 1080 honest verdicts (16.7 %), accuracy
0.800 → 0.728 (``python docs/scripts/collusion_probe.py --partition dirichlet:0.1 --seed 3 --guard
semantic:collusion_group=2``: the pair's history cosine 0.71 → 0.87, above the least attacker pair's 0.83 in
round 2 of ``alie:z=search``, while its second-best partner stays at 0.05-0.21). Groups of three keep them:
0 honest rows rejected on clean Dirichlet 0.1 and 0.5, seeds 0-4, accuracy as without the stage
(0.814 0.703 0.739 0.800 0.672 and 0.936 0.936 0.917 0.942 0.876)::

    python docs/scripts/adaptive_cells.py --fractions 0 --partition dirichlet:0.1 --guards semantic
    for a in alie:z=search adaptive sign_flip:scale=1 sign_flip:scale=10 ipm:epsilon=100 min_max null_space \
             backdoor label_flip; do
      for p in dirichlet:0.5 dirichlet:0.1; do
        python docs/scripts/adaptive_cells.py --attack $a --partition $p --fractions 3 4 \
            --guards semantic:collusion=False semantic median
      done
    done

Final accuracy, seeds 0-4 and (their mean); α of ``dirichlet:α``; before = ``semantic:collusion=False`` (the
former default), now = ``semantic`` ("same": every seed equal, the stage rejected nothing), median = the
coordinate-wise median's mean. The stage rejected no honest row in any of these 180 cells (the honest rows
rejected in 10 of them, 5-15 each, were all rejected by the verdict stage, for norm or direction, as without the
stage). Attack rows it rejected, of every honest receiver's verdicts on attack rows (the verdict stage rejects
some of the rest), on Dirichlet 0.5: alie z=search 1050/1260 (3 of 10), 1176/1440 (4 of 10); adaptive 931/1260,
1176/1440; sign_flip ×1 189/1260, 210/1440; null_space 189/1260, 200/1440; label_flip 42/1260 at 3 of 10; on
Dirichlet 0.1: alie z=search 1020/1260, 894/1440; adaptive 1001/1260, 1068/1440; sign_flip ×1 96/1440 and
null_space 138/1440 at 4 of 10; none elsewhere::

    | α | attack | f | before: seeds 0-4 (mean) | now: seeds 0-4 (mean) | median |
    |---|---|---:|---|---|---:|
    | 0.5 | alie z=search | 3 | 0.919 0.844 0.903 0.922 0.889 (0.896) | 0.933 0.850 0.925 0.931 0.906 (0.909) | 0.897 |
    | 0.5 | alie z=search | 4 | 0.897 0.856 0.903 0.900 0.897 (0.891) | 0.906 0.842 0.933 0.922 0.919 (0.904) | 0.868 |
    | 0.5 | adaptive | 3 | 0.925 0.858 0.925 0.919 0.922 (0.910) | 0.939 0.856 0.933 0.931 0.914 (0.914) | 0.869 |
    | 0.5 | adaptive | 4 | 0.900 0.839 0.922 0.919 0.919 (0.900) | 0.908 0.847 0.925 0.917 0.931 (0.906) | 0.693 |
    | 0.5 | sign_flip ×1 | 3 | 0.908 0.850 0.847 0.889 0.883 (0.876) | 0.908 0.858 0.847 0.894 0.883 (0.878) | 0.782 |
    | 0.5 | sign_flip ×1 | 4 | 0.780 0.817 0.826 0.803 0.892 (0.824) | 0.838 0.808 0.828 0.856 0.892 (0.844) | 0.647 |
    | 0.5 | sign_flip ×10 | 3 | 0.933 0.858 0.922 0.939 0.911 (0.913) | same | 0.763 |
    | 0.5 | sign_flip ×10 | 4 | 0.903 0.850 0.939 0.925 0.925 (0.908) | same | 0.624 |
    | 0.5 | ipm ε=100 | 3 | 0.939 0.858 0.933 0.936 0.911 (0.916) | same | 0.904 |
    | 0.5 | ipm ε=100 | 4 | 0.903 0.850 0.939 0.925 0.925 (0.908) | same | 0.893 |
    | 0.5 | min_max | 3 | 0.922 0.850 0.925 0.927 0.907 (0.906) | same | 0.894 |
    | 0.5 | min_max | 4 | 0.864 0.844 0.925 0.922 0.922 (0.896) | same | 0.881 |
    | 0.5 | null_space | 3 | 0.907 0.850 0.886 0.889 0.886 (0.884) | 0.907 0.858 0.886 0.878 0.886 (0.883) | 0.782 |
    | 0.5 | null_space | 4 | 0.795 0.814 0.819 0.808 0.892 (0.826) | 0.836 0.812 0.822 0.834 0.892 (0.839) | 0.649 |
    | 0.5 | backdoor | 3 | 0.928 0.931 0.911 0.936 0.906 (0.922) | same | 0.871 |
    | 0.5 | backdoor | 4 | 0.925 0.929 0.911 0.933 0.904 (0.920) | same | 0.862 |
    | 0.5 | label_flip | 3 | 0.917 0.867 0.925 0.894 0.894 (0.899) | 0.922 0.867 0.925 0.894 0.894 (0.901) | 0.811 |
    | 0.5 | label_flip | 4 | 0.914 0.836 0.903 0.894 0.872 (0.884) | same | 0.638 |
    | 0.1 | alie z=search | 3 | 0.666 0.653 0.667 0.569 0.703 (0.652) | 0.578 0.708 0.663 0.600 0.706 (0.651) | 0.548 |
    | 0.1 | alie z=search | 4 | 0.547 0.656 0.419 0.544 0.625 (0.558) | 0.544 0.594 0.397 0.547 0.594 (0.536) | 0.395 |
    | 0.1 | adaptive | 3 | 0.639 0.719 0.661 0.586 0.697 (0.661) | 0.581 0.692 0.664 0.603 0.719 (0.652) | 0.556 |
    | 0.1 | adaptive | 4 | 0.567 0.628 0.478 0.586 0.636 (0.579) | 0.492 0.572 0.389 0.575 0.586 (0.523) | 0.306 |
    | 0.1 | sign_flip ×1 | 3 | 0.531 0.689 0.645 0.544 0.594 (0.601) | same | 0.444 |
    | 0.1 | sign_flip ×1 | 4 | 0.450 0.563 0.311 0.494 0.405 (0.445) | 0.439 0.563 0.256 0.494 0.405 (0.431) | 0.329 |
    | 0.1 | sign_flip ×10 | 3 | 0.592 0.708 0.664 0.614 0.711 (0.658) | same | 0.429 |
    | 0.1 | sign_flip ×10 | 4 | 0.478 0.567 0.389 0.600 0.575 (0.522) | same | 0.346 |
    | 0.1 | ipm ε=100 | 3 | 0.592 0.697 0.664 0.608 0.711 (0.654) | same | 0.564 |
    | 0.1 | ipm ε=100 | 4 | 0.478 0.567 0.389 0.600 0.575 (0.522) | same | 0.493 |
    | 0.1 | min_max | 3 | 0.587 0.715 0.678 0.614 0.719 (0.663) | same | 0.546 |
    | 0.1 | min_max | 4 | 0.536 0.607 0.403 0.622 0.593 (0.552) | same | 0.499 |
    | 0.1 | null_space | 3 | 0.511 0.667 0.646 0.550 0.608 (0.596) | same | 0.433 |
    | 0.1 | null_space | 4 | 0.453 0.525 0.255 0.494 0.483 (0.442) | 0.469 0.525 0.261 0.494 0.483 (0.447) | 0.337 |
    | 0.1 | backdoor | 3 | 0.803 0.697 0.736 0.781 0.631 (0.729) | same | 0.452 |
    | 0.1 | backdoor | 4 | 0.800 0.694 0.711 0.781 0.639 (0.725) | same | 0.442 |
    | 0.1 | label_flip | 3 | 0.431 0.622 0.525 0.633 0.483 (0.539) | same | 0.397 |
    | 0.1 | label_flip | 4 | 0.372 0.433 0.286 0.517 0.350 (0.392) | same | 0.287 |

What it says: (1) rule 1 of issue 9 under ``alie:z=search``: at 3 of 10 on Dirichlet 0.5 the guard is now at or
above the median on every seed (it was below on seeds 2 and 4), and at or above it wherever the former default
was, in every cell of both partitions; the 5 seed-cells below the median (``min_max`` at 4 of 10 seeds 0 and 3
on Dirichlet 0.1 and seed 0 on 0.5, ``ipm:epsilon=100`` at 4 of 10 seed 0 on 0.1, ``backdoor`` at 3 of 10 seed 0
on 0.5) are the former default's, unchanged. (2) The mean over the 180 seed-cells moves by −0.06 points (Dirichlet
0.5 +0.42, Dirichlet 0.1 −0.54). (3) The cells that lose are the white-box attacks on Dirichlet 0.1 at 4 of 10:
−5.6 points (``adaptive``) and −2.3 (``alie:z=search``). There the former default accepted nearly every attack
row, and with it the attackers' own data (the attack is weak against label skew: its rows stay near the honest
mean); rejecting them leaves what rejecting every attacker row from round 0 gives (``sign_flip:scale=10`` and
``ipm:epsilon=100``, whose rows the verdict stage rejects: 0.522, the same five seeds), plus round 0 and 1:
0.523. A detector that works costs the data of the peers it detects; still 0.14-0.22 above the median.
(4) Backdoor ASR is unchanged (0.857 at 3 of 10 on Dirichlet 0.5): with τ = 0.6 and groups of three the stage
never fires on the backdoor group (its trio's history cosines reached 0.01-0.53 in the screens of
``docs/scripts/backdoor_cells.py``, below τ).

Over 40 rounds (``--rounds 40 --fractions 0 3 --seeds 0 1 2 --guards semantic``, then the other guards at 3 of 10),
the stage still rejects no honest row (clean: 0, 9 and 0 honest rows of 3600 rejected on Dirichlet 0.5 and 0, 27
and 0 on 0.1, all by the verdict stage; ``adaptive`` at 3 of 10: 0) and every ``adaptive`` row from round 2 on
(768 of 840 on Dirichlet 0.5, 773-798 on 0.1). But on Dirichlet 0.5 under ``adaptive`` at 3 of 10 the final
accuracy is 0.874 / 0.876 / 0.868 (seeds 0 / 1 / 2; clean 0.926 / 0.975 / 0.936), against 0.889 / 0.836 / 0.926
for ``semantic:collusion=False`` and 0.914 / 0.839 / 0.869 for the median: below the median on seeds 0 and 2
(the former default on seed 0). Both semantic arms peak at 0.93-0.96 around rounds 15-25 and then fall (seed 2,
every third round from round 0: 0.153 0.772 0.878 0.917 0.936 0.944 0.953 0.958 0.956 0.947 0.932 0.914 0.908
0.867 with the stage, ... 0.942 0.950 0.944 0.906 0.947 0.917 0.926 without); rejecting every attack row from
round 0 instead (``--attack sign_flip:scale=10``, the verdict stage) ends at 0.882 / 0.871 / 0.947. Explained
in the next paragraph. Recomputing the robust centre without the rows the stage rejected (tried in a scratch
change, not kept) made it worse: 0.852 / 0.821 / 0.799.

Why it falls (measured 2026-12-06 at 5c0b2fa; a 40-round cell took 4-15 s here): the direction weights (stage 4c
of ``p2p_guard/guard/semantic.py``), not the training setup. With no attacker (``--rounds 40 --fractions 0
--seeds 0 1 2 --guards semantic mean median``), final accuracy (peak, its round), and every fifth round 0-35
then round 39 for the curves that fall::

    seed 0: semantic 0.926 (0.956, r16)  0.375 0.903 0.942 0.955 0.953 0.944 0.940 0.932 | 0.926
            mean     0.956 (0.964, r23)  0.375 0.903 0.942 0.956 0.958 0.964 0.958 0.953 | 0.956
            median   0.964 (0.969, r25)
    seed 1: semantic 0.975 (0.975, r33)  mean 0.972 (0.975, r35)  median 0.931 (0.953, r25)
    seed 2: semantic 0.936 (0.956, r28)  0.281 0.814 0.908 0.939 0.954 0.952 0.946 0.943 | 0.936
            mean     0.956 (0.958, r22)  0.281 0.814 0.908 0.939 0.956 0.956 0.950 0.950 | 0.956
            median   0.928 (0.936, r35)

The mean does not fall (final within 0.9 points of its peak on every seed), so it is not overfitting of the small
shards nor the outer Nesterov (lr 0.7, momentum 0.9) over 40 rounds; the median falls on seed 1 only (0.953 in
round 25, 0.917-0.950 in rounds 30-39). The default guard falls with no attacker at all, by 3.0 and 2.0 points on
seeds 0 and 2, and its curve is the mean's to three decimals through round 12 (seed 0). What it does instead (a
scratch probe, not kept, recording the stages per round on clean seed 0, averaged over the 10 receivers): it
rejects no row, the self-anchor never binds, the centered clipping clips 1-2 rows a receiver in six rounds and none
after round 20, so the aggregate is the direction-weighted mean of the rows. From round 11 on, in every round but
15 and 21, 1-4 honest rows a receiver (0.8-3.6 on average) lie at a cosine below 0 with the centre (the least −0.02
to −0.26 a round); the ramp (weight (cos − cos_min) / (cos_full − cos_min), cos_min −0.3, cos_full 0) brings the
weights to a sum of 8.4-9.9 of 10, and the aggregate lies 2-42 % of the plain mean's norm away from it (rounds
36-39: 25, 18, 37, 42 %). Late in training the honest rows that point away from the centre are those whose shard
holds what the shared model fits worst; weighing them down every round lets the model drift off it (which peers
they were was not recorded).

Turning the ramp off (``semantic:direction_weights=False``; ``--rounds 40 --fractions 0 --seeds 0 2`` and
``--fractions 3 --seeds 0 1 2``): clean seed 0 ends at 0.954 (peak 0.964, r23; the mean's curve to three decimals
through round 26; 9 honest rows rejected by the verdict stage, 0 with the ramp); under ``adaptive`` at 3 of 10 the
final accuracy is 0.933 / 0.881 / 0.969 (peaks 0.953 r24, 0.881 r37, 0.969 r37; last 4 rounds 0.936 / 0.879 /
0.960) against 0.874 / 0.876 / 0.868 with it and the median's 0.914 / 0.839 / 0.869: above the median on every
seed, and seed 2 no longer falls. The attack rows are still rejected (798 of 840 each seed; 735 / 742 / 777 by the
collusion stage) and honest rows rejected were 0 / 24 / 6 (verdict stage). Not all of it: clean seed 2 without the
ramp still ends at 0.937 (peak 0.961, r24; 0.958 in round 33, 0.921 in round 34, then 0.949 0.950 0.940 0.941
0.937), with 18 honest rows rejected by the verdict stage (0 with the ramp), against the mean's 0.956; not
explained. ``sign_flip:scale=10`` without the ramp was not run. The guard is not changed here: the ramp was chosen
on 12-round cells where it helped under attack (``sign_flip`` 85.3 → 89.5 %, ``null_space`` 85.0 → 89.8 % at 3 of
10, stage 4c), so removing or flattening it needs those cells and these re-measured at 12 and 40 rounds.

Should the ramp go (issue 9 rule 1)? Measured 2026-12-06 at 1e3cb35 (the guard as at 5c0b2fa); no default
changed: ``semantic:direction_weights=False`` fails the decision rule on Dirichlet 0.1. Candidates: the ramp off,
and milder ramps (``cos_full`` −0.2 and −0.15, with ``cos_min`` −0.3 kept: a lower ``cos_min`` would also move the
direction test's rejection floor). Commands (each guard list in one call; seeds 3 4 on Dirichlet 0.1 for the
ramp off, the default and the median only)::

    G="semantic semantic:direction_weights=False median"   # then "semantic:cos_full=-0.15 semantic:cos_full=-0.2"
    python docs/scripts/adaptive_cells.py --fractions 0 --seeds 0 1 2 --guards $G
    for a in sign_flip:scale=1 null_space adaptive alie:z=search sign_flip:scale=10 ipm:epsilon=100 min_max \
             backdoor; do
      python docs/scripts/adaptive_cells.py --attack $a --fractions 3 4 --seeds 0 1 2 --guards $G
    done
    G="semantic semantic:direction_weights=False semantic:cos_full=-0.15 median"
    python docs/scripts/adaptive_cells.py --fractions 0 --partition dirichlet:0.1 --seeds 0 1 2 --guards $G
    for a in sign_flip:scale=1 null_space adaptive; do
      python docs/scripts/adaptive_cells.py --attack $a --partition dirichlet:0.1 --fractions 3 4 --seeds 0 1 2 \
          --guards $G
    done
    python docs/scripts/adaptive_cells.py --rounds 40 --fractions 0 3 --seeds 0 1 2 --guards $G   # adaptive

12 rounds, final accuracy, seeds 0 1 2 (mean); dw off = ``semantic:direction_weights=False``;
fpN = N honest rows rejected, summed over the three seeds (of 1080 honest verdicts a clean cell)::

    Dirichlet 0.5
    | attack | f | ``semantic`` (default) | dw off | median |
    |---|---:|---|---|---|
    | none | 0 | 0.936 0.936 0.917 (0.930) | 0.936 0.936 0.917 (0.930) | 0.936 0.872 0.839 (0.882) |
    | sign_flip ×1 | 3 | 0.908 0.858 0.847 (0.871) | 0.875 0.858 0.842 (0.858) | 0.819 0.819 0.747 (0.795) |
    | sign_flip ×1 | 4 | 0.838 0.808 0.828 (0.825) fp25 | 0.776 0.817 0.811 (0.801) fp50 | 0.608 0.606 0.592 (0.602) |
    | sign_flip ×10 | 3 | 0.933 0.858 0.922 (0.904) | 0.939 0.858 0.933 (0.910) fp6 | 0.797 0.808 0.744 (0.783) |
    | sign_flip ×10 | 4 | 0.903 0.850 0.939 (0.897) | 0.903 0.850 0.939 (0.897) | 0.539 0.644 0.589 (0.591) |
    | null_space | 3 | 0.907 0.858 0.886 (0.884) | 0.878 0.858 0.836 (0.857) | 0.814 0.814 0.758 (0.795) |
    | null_space | 4 | 0.836 0.812 0.822 (0.823) fp25 | 0.843 0.817 0.806 (0.822) fp50 | 0.608 0.622 0.586 (0.606) |
    | alie z=search | 3 | 0.933 0.850 0.925 (0.903) | 0.933 0.850 0.931 (0.905) | 0.897 0.844 0.917 (0.886) |
    | alie z=search | 4 | 0.906 0.842 0.933 (0.894) | 0.906 0.842 0.933 (0.894) | 0.872 0.806 0.878 (0.852) |
    | adaptive | 3 | 0.939 0.856 0.933 (0.909) | 0.936 0.858 0.936 (0.910) | 0.886 0.828 0.869 (0.861) |
    | adaptive | 4 | 0.908 0.847 0.925 (0.894) | 0.903 0.847 0.936 (0.895) | 0.753 0.583 0.647 (0.661) |
    | ipm ε=100 | 3 | 0.939 0.858 0.933 (0.910) | 0.939 0.858 0.933 (0.910) | 0.919 0.853 0.919 (0.897) |
    | ipm ε=100 | 4 | 0.903 0.850 0.939 (0.897) | 0.903 0.850 0.939 (0.897) | 0.900 0.847 0.911 (0.886) |
    | min_max | 3 | 0.922 0.850 0.925 (0.899) | 0.935 0.850 0.928 (0.904) fp12 | 0.897 0.844 0.911 (0.884) |
    | min_max | 4 | 0.864 0.844 0.925 (0.878) fp5 | 0.882 0.847 0.933 (0.888) fp10 | 0.878 0.825 0.894 (0.866) |
    | backdoor | 3 | 0.928 0.931 0.911 (0.923) | 0.933 0.931 0.911 (0.925) fp6 | 0.942 0.853 0.794 (0.863) |
    | backdoor | 4 | 0.925 0.929 0.911 (0.922) | 0.931 0.931 0.908 (0.923) | 0.925 0.858 0.778 (0.854) |

    Dirichlet 0.1
    | attack | f | ``semantic`` (default) | dw off | median |
    |---|---:|---|---|---|
    | none | 0 | 0.814 0.703 0.739 (0.752) | 0.811 0.728 0.742 (0.760) | 0.622 0.531 0.508 (0.554) |
    | sign_flip ×1 | 3 | 0.531 0.689 0.645 (0.621) | 0.472 0.678 0.589 (0.580) | 0.350 0.436 0.400 (0.395) |
    | sign_flip ×1 | 4 | 0.439 0.563 0.256 (0.419) fp5 | 0.431 0.472 0.297 (0.400) fp10 | 0.350 0.381 0.236 (0.322) |
    | null_space | 3 | 0.511 0.667 0.646 (0.608) | 0.528 0.572 0.494 (0.531) | 0.350 0.428 0.364 (0.381) |
    | null_space | 4 | 0.469 0.525 0.261 (0.418) fp10 | 0.431 0.408 0.242 (0.360) fp15 | 0.356 0.378 0.239 (0.324) |
    | adaptive | 3 | 0.581 0.692 0.664 (0.645) | 0.581 0.711 0.658 (0.650) | 0.539 0.586 0.525 (0.550) |
    | adaptive | 4 | 0.492 0.572 0.389 (0.484) | 0.475 0.572 0.386 (0.478) | 0.419 0.289 0.108 (0.272) |

    milder ramps, Dirichlet 0.5 (then 0.1, ``cos_full=-0.15`` only)
    | attack | f | ``semantic:cos_full=-0.2`` | ``semantic:cos_full=-0.15`` |
    |---|---:|---|---|
    | none | 0 | 0.936 0.933 0.917 (0.929) | 0.936 0.933 0.917 (0.929) |
    | sign_flip ×1 | 3 | 0.878 0.858 0.822 (0.853) | 0.860 0.858 0.847 (0.855) |
    | sign_flip ×1 | 4 | 0.837 0.738 0.811 (0.795) fp35 | 0.838 0.736 0.783 (0.786) fp40 |
    | sign_flip ×10 | 3 | 0.939 0.858 0.933 (0.910) fp6 | 0.939 0.858 0.933 (0.910) fp6 |
    | sign_flip ×10 | 4 | 0.903 0.850 0.939 (0.897) | 0.903 0.850 0.939 (0.897) |
    | null_space | 3 | 0.873 0.858 0.853 (0.861) | 0.859 0.858 0.833 (0.850) |
    | null_space | 4 | 0.839 0.780 0.789 (0.802) fp30 | 0.850 0.740 0.781 (0.790) fp40 |
    | alie z=search | 3 | 0.933 0.850 0.931 (0.905) | 0.933 0.850 0.931 (0.905) |
    | alie z=search | 4 | 0.906 0.842 0.933 (0.894) | 0.906 0.842 0.933 (0.894) |
    | adaptive | 3 | 0.936 0.858 0.933 (0.909) | 0.939 0.856 0.936 (0.910) |
    | adaptive | 4 | 0.903 0.850 0.936 (0.896) | 0.908 0.847 0.936 (0.897) |
    | ipm ε=100 | 3 | 0.939 0.858 0.933 (0.910) | 0.939 0.858 0.933 (0.910) |
    | ipm ε=100 | 4 | 0.903 0.850 0.939 (0.897) | 0.903 0.850 0.939 (0.897) |
    | min_max | 3 | 0.930 0.850 0.928 (0.903) fp12 | 0.930 0.850 0.928 (0.903) fp6 |
    | min_max | 4 | 0.882 0.850 0.933 (0.889) fp10 | 0.866 0.850 0.933 (0.883) |
    | backdoor | 3 | 0.933 0.931 0.911 (0.925) fp6 | 0.933 0.931 0.911 (0.925) |
    | backdoor | 4 | 0.931 0.931 0.908 (0.923) | 0.928 0.930 0.908 (0.922) |
    | none | 0 | | 0.811 0.728 0.742 (0.760) |
    | sign_flip ×1 | 3 | | 0.475 0.711 0.600 (0.595) |
    | sign_flip ×1 | 4 | | 0.536 0.422 0.217 (0.392) fp5 |
    | null_space | 3 | | 0.431 0.669 0.633 (0.578) |
    | null_space | 4 | | 0.475 0.514 0.314 (0.434) fp5 |
    | adaptive | 3 | | 0.586 0.706 0.661 (0.651) |
    | adaptive | 4 | | 0.478 0.572 0.386 (0.479) |

Backdoor ASR, seeds 0 1 2 (Dirichlet 0.5), default / dw off / median: 3 of 10 0.852 0.867 0.923 / 0.830 0.861
0.923 / 0.472 0.713 0.534; 4 of 10 0.948 0.999 0.994 / 0.954 1.000 0.994 / 0.941 1.000 0.975 (``cos_full`` −0.2
and −0.15 as dw off within 0.006).

Dirichlet 0.1, seeds 3 4 (``--seeds 3 4``; default / dw off / median): clean 0.800 0.672 / 0.808 0.672 (27 honest
rows rejected on seed 3, 2.5 % of 1080, all by the verdict stage as outliers; 0 with the ramp) / 0.622 0.586;
``sign_flip`` ×1 f 3: 0.544 0.594 / 0.592 0.589 / 0.528 0.508; f 4: 0.494 0.405 / 0.500 0.392 / 0.400 0.281;
``null_space`` f 3: 0.550 0.608 / 0.586 0.592 / 0.519 0.506; f 4: 0.494 0.483 / 0.506 0.375 / 0.406 0.308;
``adaptive`` f 3: 0.603 0.719 / 0.608 0.714 / 0.539 0.589; f 4: 0.575 0.586 / 0.553 0.581 / 0.328 0.386.

40 rounds, Dirichlet 0.5, final accuracy seeds 0 1 2 (mean), the mean of the last 4 rounds per seed, honest rows
rejected per seed (of 3600 a clean cell)::

    | attack | f | guard | final, seeds 0 1 2 (mean) | last 4 rounds | fp |
    |---|---:|---|---|---|---|
    | none | 0 | ``semantic`` | 0.926 0.975 0.936 (0.946) | 0.926 0.974 0.937 | 0 9 0 |
    | none | 0 | dw off | 0.954 0.972 0.937 (0.954) | 0.953 0.974 0.942 | 9 18 18 |
    | none | 0 | ``cos_full=-0.15`` | 0.946 0.972 0.943 (0.954) | 0.946 0.974 0.946 | 0 27 0 |
    | none | 0 | ``median`` | 0.964 0.931 0.928 (0.941) | 0.960 0.935 0.932 | 0 0 0 |
    | adaptive | 3 | ``semantic`` | 0.874 0.876 0.868 (0.872) | 0.878 0.875 0.896 | 0 0 0 |
    | adaptive | 3 | dw off | 0.933 0.881 0.969 (0.928) | 0.936 0.878 0.960 | 0 24 6 |
    | adaptive | 3 | ``cos_full=-0.15`` | 0.887 0.878 0.967 (0.910) | 0.890 0.878 0.958 | 6 0 6 |
    | adaptive | 3 | ``median`` | 0.914 0.839 0.869 (0.874) | 0.898 0.837 0.890 | 0 0 0 |

The decision rule (flip only if the candidate is at or above the median in every seed-cell where the default is,
its mean over the 12-round attack cells is at most 0.5 point below the default's, honest false positives on clean
stay <= 1 % on Dirichlet 0.5 and <= 2 % on 0.1, and the 40-round cells improve), for the ramp off:
(1) median: met; it is below the median in no seed-cell where the default is not, on either partition (seeds 0-4
on 0.1 too), and lifts the default's one such cell at 4 of 10 (``min_max`` seed 0: 0.864 → 0.882, median 0.878).
(2) mean over the 12-round attack cells: met on Dirichlet 0.5 (48 seed-cells: 0.8896 → 0.8873, −0.23 points), not
on 0.1 (18 seed-cells, seeds 0-2: 0.5328 → 0.4998, −3.30 points; seeds 0-4, 30 seed-cells: 0.5416 → 0.5195,
−2.21); all 66 seed-cells of seeds 0-2: −1.26 points. The losses are where the ramp was chosen: ``null_space`` at
3 of 10 −2.7 points on 0.5 and −7.7 on 0.1 (seed 2: 0.646 → 0.494), ``sign_flip`` ×1 at 3 of 10 −1.3 and −4.1, at
4 of 10 −2.4 on 0.5 (seed 0: 0.838 → 0.776); on Dirichlet 0.5 the white-box attacks, ``sign_flip`` ×10, IPM,
min-max and the backdoor move by −0.5 to +1.8 points a seed-cell, and the backdoor's ASR is unchanged (0.83-1.00
either way). Under ``sign_flip`` ×1 and ``null_space`` at 4 of 10 on Dirichlet 0.5 it rejects twice the honest
rows (50 against 25 over three seeds). (3) clean false positives: 0 of 1080 on every 12-round clean cell of seeds
0-2 (accuracy as the default on Dirichlet 0.5, +0.8 points on 0.1), but 27 of 1080 (2.5 %) on Dirichlet 0.1 seed
3, above the 2 %; over 40 rounds 9 / 18 / 18 of 3600 (0.5 %) where the default has 0 / 9 / 0. (4) 40 rounds: met;
clean mean 0.946 → 0.954, ``adaptive`` at 3 of 10 0.872 → 0.928 (above the median's 0.874 on every seed). So it
fixes the 40-round fall but costs 2-3 points under sign flips on Dirichlet 0.1 at 12 rounds: not flipped.
The milder ramps do worse at 12 rounds (mean over the 48 Dirichlet 0.5 attack seed-cells: ``cos_full`` −0.2
0.8856, −0.40 points; −0.15 0.8834, −0.62; both lose more than the ramp off under ``sign_flip`` ×1 and
``null_space`` at 4 of 10); ``cos_full=-0.15`` is below the median where the default is not (Dirichlet 0.1,
``sign_flip`` ×1 at 4 of 10, seed 2: 0.217 against 0.236; its mean there −1.13 points) and over 40 rounds it
mends seed 2 under ``adaptive`` (0.967) but not seed 0 (0.887, median 0.914). Left for rule 1 over 40 rounds: a
weighting that acts early (where it helps against sign flips) and not late (where it drags the honest rows of
poorly fitted shards), or one that damps only rows far outside the honest spread; not tried here.

Copies count against f̂ (issue 9, rule 1 at 12 rounds: the five seed-cells below the median in the collusion
table, ``min_max`` at 4 of 10 seed 0 on Dirichlet 0.5 and seeds 0 and 3 on 0.1, ``ipm:epsilon=100`` at 4 of 10
seed 0 on 0.1, ``backdoor`` at 3 of 10 seed 0 on 0.5). Measured 2026-12-07 on main at 40683dc and with the
change (``semantic:duplicate_credit``, stage 2 of ``p2p_guard/guard/semantic.py``). Where each cell loses:

- ``min_max`` at 4 of 10: the duplicate stage rejects every attack row from round 1 on (264 of 288; the 24
  accepted are round 0's, where min-max with one known row sends the attacker's own Δ), no other stage fires
  (0-5 honest rows rejected a cell), so the loss is not an attack row let in: it is the centre of the 6 honest
  rows left, taken at f̂' = min(4, ⌊5/2⌋) = 2 of 6, whose cosine with their mean falls to 0.26-0.72 from round 4
  on (``python docs/scripts/centre_probe.py --attack min_max --f 4 --guard semantic:duplicate_credit=False``),
  so the direction weights damp honest rows. The change counts the group's 3 certain copies against f̂ (f̂' = 1).
- ``ipm:epsilon=100`` at 4 of 10 on Dirichlet 0.1: the verdict stage rejects all 288 attack rows for their norm
  (no group forms; the change does nothing here); the cell is what rejecting every attack row from round 0 gives,
  the same five seeds as ``sign_flip:scale=10`` (0.478 0.567 0.389 0.600 0.575 in the table above). The median
  keeps more on seed 0 (0.561; mean of rounds 8-11 0.515 against the guard's 0.479) and less on seeds 2-4 (0.314
  0.506 0.519 against 0.389 0.600 0.575). Not lifted: nothing is left to the guard but the 6 honest rows, and it
  applies their plain mean: on seed 0 its centre is their mean (cosine 1.00) and the direction weights sum to 6 of
  6 in every round (``python docs/scripts/centre_probe.py --attack ipm:epsilon=100 --partition dirichlet:0.1 --f 4
  --seed 0``); the median's edge on one seed is the trajectory of a different rule under label skew.
- ``backdoor`` at 3 of 10 seed 0 on Dirichlet 0.5: no stage rejects a backdoor row (tp 0, ASR 0.852); the guard
  ends at 0.928 (rounds 8-11: 0.919) against its own clean run's 0.936 (0.930), while the median ends at 0.942
  (0.929), above its own clean 0.936 (median ASR 0.472). Not lifted: the 1.1 points the guard loses are the
  backdoor rows' (stopping them needs a backdoor defence; the noise stage's cost is in stage 5b), and the gap
  to the median is within what one seed's trajectory moves (the median gains 0.6 from an attack).

Commands (``--guards semantic:duplicate_credit=False`` is the guard as at 40683dc)::

    python docs/scripts/adaptive_cells.py --attack ipm:epsilon=100 --partition dirichlet:0.1 --fractions 4 \
        --guards semantic median
    python docs/scripts/adaptive_cells.py --attack backdoor --fractions 3 --seeds 0 --guards semantic median
    python docs/scripts/adaptive_cells.py --fractions 0 --seeds 0 1 2 --guards semantic      # and dirichlet:0.1
    for p in dirichlet:0.5 dirichlet:0.1; do
      python docs/scripts/adaptive_cells.py --attack min_max --partition $p --fractions 3 4 --guards semantic
      for a in min_sum alie ipm:epsilon=0.1 mimic; do
        python docs/scripts/adaptive_cells.py --attack $a --partition $p --fractions 3 4 --seeds 0 1 2 \
            --guards semantic semantic:duplicate_credit=False median
      done
      for a in adaptive alie:z=search sign_flip:scale=10 null_space; do
        python docs/scripts/adaptive_cells.py --attack $a --partition $p --fractions 3 4 --seeds 0 --guards semantic
      done
      for a in adaptive alie:z=search; do
        python docs/scripts/adaptive_cells.py --attack $a --partition $p --fractions 3 4 --seeds 1 2 --guards semantic
      done
    done

Final accuracy, seeds 0-2 and (their mean); α of ``dirichlet:α``; before = ``semantic:duplicate_credit=False``
(for ``min_max``, the collusion table's ``semantic``, the same guard), now = ``semantic``; median "-" where not run
(``min_max`` at 3 of 10: means 0.894 and 0.546 in the collusion table). ``min_max`` seeds 3 and 4, before → now
(median): Dirichlet 0.5, 3 of 10 0.927 0.907 → 0.936 0.901; 4 of 10 0.922 0.922 → 0.925 0.917 (0.911 0.897);
Dirichlet 0.1, 3 of 10 0.614 0.719 → 0.617 0.731; 4 of 10 0.622 0.593 → 0.586 0.587 (0.625 0.539); over seeds
0-4 at 4 of 10 the mean moves 0.895 → 0.905 on Dirichlet 0.5 and 0.552 → 0.543 on 0.1::

    | α | attack | f | before | now | median |
    |---|---|---:|---|---|---|
    | 0.5 | min_max | 3 | 0.922 0.850 0.925 (0.899) | 0.931 0.856 0.933 (0.907) | - |
    | 0.5 | min_max | 4 | 0.864 0.844 0.925 (0.878) | 0.906 0.847 0.931 (0.894) | 0.878 0.825 0.894 (0.866) |
    | 0.5 | min_sum | 3 | 0.922 0.850 0.925 (0.899) | 0.931 0.856 0.933 (0.907) | 0.900 0.844 0.911 (0.885) |
    | 0.5 | min_sum | 4 | 0.864 0.844 0.925 (0.878) | 0.906 0.847 0.931 (0.894) | 0.872 0.828 0.900 (0.867) |
    | 0.5 | alie | 3 | 0.922 0.850 0.925 (0.899) | 0.931 0.856 0.933 (0.907) | 0.864 0.772 0.853 (0.830) |
    | 0.5 | alie | 4 | 0.864 0.844 0.925 (0.878) | 0.906 0.847 0.931 (0.894) | 0.778 0.614 0.439 (0.610) |
    | 0.5 | ipm ε=0.1 | 3 | 0.924 0.853 0.936 (0.904) | 0.917 0.858 0.933 (0.903) | 0.897 0.836 0.878 (0.870) |
    | 0.5 | ipm ε=0.1 | 4 | 0.861 0.847 0.925 (0.878) | 0.903 0.847 0.936 (0.895) | 0.881 0.744 0.825 (0.817) |
    | 0.5 | mimic | 3 | 0.882 0.839 0.920 (0.880) | 0.915 0.836 0.917 (0.889) | 0.819 0.828 0.853 (0.833) |
    | 0.5 | mimic | 4 | 0.835 0.715 0.911 (0.820) | 0.906 0.719 0.919 (0.848) | 0.825 0.639 0.447 (0.637) |
    | 0.1 | min_max | 3 | 0.587 0.715 0.678 (0.660) | 0.590 0.725 0.678 (0.664) | - |
    | 0.1 | min_max | 4 | 0.536 0.607 0.403 (0.515) | 0.536 0.621 0.383 (0.513) | 0.564 0.431 0.336 (0.444) |
    | 0.1 | min_sum | 3 | 0.587 0.715 0.678 (0.660) | 0.590 0.725 0.678 (0.664) | 0.419 0.667 0.597 (0.561) |
    | 0.1 | min_sum | 4 | 0.536 0.607 0.403 (0.515) | 0.536 0.621 0.383 (0.513) | 0.558 0.514 0.339 (0.470) |
    | 0.1 | alie | 3 | 0.587 0.715 0.678 (0.660) | 0.590 0.725 0.678 (0.664) | 0.536 0.589 0.531 (0.552) |
    | 0.1 | alie | 4 | 0.536 0.607 0.403 (0.515) | 0.536 0.621 0.383 (0.513) | 0.247 0.378 0.108 (0.244) |
    | 0.1 | ipm ε=0.1 | 3 | 0.594 0.681 0.661 (0.645) | 0.593 0.697 0.669 (0.653) | 0.556 0.608 0.608 (0.591) |
    | 0.1 | ipm ε=0.1 | 4 | 0.489 0.520 0.392 (0.467) | 0.478 0.573 0.386 (0.479) | 0.411 0.350 0.356 (0.372) |
    | 0.1 | mimic | 3 | 0.494 0.602 0.486 (0.527) | 0.544 0.700 0.501 (0.582) | 0.458 0.369 0.303 (0.377) |
    | 0.1 | mimic | 4 | 0.469 0.432 0.373 (0.425) | 0.479 0.431 0.472 (0.461) | 0.272 0.122 0.217 (0.204) |

What it says: (1) rule 1: ``min_max`` at 4 of 10 seed 0 on Dirichlet 0.5 is lifted (0.864 → 0.906, median 0.878);
the guard is now at or above the median in every Dirichlet 0.5 seed-cell of this table where the median ran. On
Dirichlet 0.1 at 4 of 10, ``min_max`` seed 0 is unchanged (0.536, median 0.564; rounds 8-11 0.553 against the
median's 0.463) and seed 3 moves 0.622 → 0.586 (median 0.625; rounds 8-11 0.560 → 0.562, median 0.597): there every
attack row is rejected with the change or without it, and the final round falls on either side of a swing of several
points (on seed 3 with the change the centre of the 6 honest rows, at f̂' = 1, still falls to cosine 0.85 and 0.68
with their mean in rounds 10 and 11, where the direction weights sum to 5.26 and 5.38 of 6: ``python
docs/scripts/centre_probe.py --attack min_max --partition dirichlet:0.1 --f 4 --seed 3``); ``min_sum`` at 4 of 10
seed 0 on 0.1 is a sixth such cell (0.536 against 0.558, unchanged; the guard's cells under ``min_sum``, ``min_max``
and ``alie`` agree to the digit: all three are rejected whole from round 1 on). (2) The mean over each partition's
30 seed-cells (seeds 0-2): Dirichlet 0.5 0.8813 → 0.8939 (+1.3 points; worst cell −0.7, ``ipm:epsilon=0.1`` at 3 of
10 seed 0), Dirichlet 0.1 0.5590 → 0.5707 (+1.2; worst −2.0, ``min_max`` at 4 of 10 seed 2; −3.6 on seed 3). (3)
Honest rows rejected: 43 → 0 over the 36 seed-cells of ``min_sum``, ``alie`` and ``ipm:epsilon=0.1`` (all by the
verdict stage, for direction against the poorer centre); under ``mimic`` 597 → 582 over its 12 seed-cells, most of
them by the collusion stage (point 5). (4) Unchanged, bit for bit, where no group forms: seeds 0-2 of ``adaptive``
and ``alie:z=search`` and seed 0 of ``sign_flip:scale=10`` and ``null_space`` at 3 and 4 of 10, clean seeds 0-2,
both partitions (as in the tables above; clean: 0 honest rows rejected). (5) Not fixed, seen on the way: under
``mimic`` the collusion stage rejects honest senders (with the change, ``colluding`` 25-72 honest rows a seed-cell
on Dirichlet 0.5, 19-66 on 0.1; ``python docs/scripts/collusion_probe.py --attack mimic --f 4 --seed 1``, one shared
model, 60 of 360 honest verdicts rejected: for receiver peer00 two honest senders, peer03 and peer05, reach
second-best history cosines of 0.36-0.80 with the others, the larger of the two at 0.56-0.80 in rounds 2-11 against
τ = 0.6, and the attackers 0.55-0.96; why was not probed further: ``mimic`` copies the previous round's most
atypical honest row, so a guess is that the copied senders' histories point where the attackers' do); the guard
stays above the median there, but the collusion stage's "no honest row rejected" holds only for the attacks it was
measured on.

The direction record (issue 9 rule 1 over 40 rounds; default since 2026-12-07). The rule left above, made
observable: a receiver keeps per sender the mean of its cosines with the centre over the rounds it has judged it
(``guard.verdict.DirectionRecord``), and a sender whose mean is at least ``cos_record`` is spared the ramp (its row
weighs 1). Sign-flipped rows point against the centre from round 0 (records −0.15 to −0.42 at every round of
``sign_flip`` ×1 at 3 of 10, Dirichlet 0.5, seed 0), so they keep the ramp; an honest sender's late dips below 0
follow many rounds along the centre (records 0.13-0.41 through round 26 of the clean 40-round cell, seed 0).
Measured 2026-12-07 on 40683dc plus this change: "before" = ``semantic:direction_record=False`` (the guard as at
40683dc; its figures are the tables above), ``cos_record=0`` = ``semantic:direction_record=True,cos_record=0``,
"record" = ``semantic`` (``direction_record=True,cos_record=0.1``). Commands (G one of those)::

    python docs/scripts/adaptive_cells.py --rounds 40 --fractions 3 --seeds 0 1 2 --guards $G      # adaptive
    python docs/scripts/adaptive_cells.py --rounds 40 --fractions 0 --seeds 0 1 2 --guards $G
    python docs/scripts/adaptive_cells.py --rounds 40 --fractions 0 --seeds 0 1 2 --every-receiver --guards $G
    python docs/scripts/adaptive_cells.py --partition dirichlet:0.1 --fractions 0 --seeds 0 1 2 3 4 --guards $G
    for a in sign_flip:scale=1 null_space adaptive; do
      python docs/scripts/adaptive_cells.py --attack $a --partition dirichlet:0.1 --fractions 3 4 --seeds 0 1 2 \
          --guards $G
    done
    for a in sign_flip:scale=1 null_space adaptive min_max sign_flip:scale=10 alie:z=search ipm:epsilon=100 \
             backdoor; do
      python docs/scripts/adaptive_cells.py --attack $a --fractions 3 4 --seeds 0 1 2 --guards $G
    done
    python docs/scripts/adaptive_cells.py --fractions 0 --seeds 0 1 2 --guards $G

What ran: record, every line (Dirichlet 0.1 seed 3 in a call of its own, also with ``cos_record=0.2``);
``cos_record=0``, the first two lines and the clean and 3-of-10 ``sign_flip`` ×1 and ``null_space`` cells of
Dirichlet 0.1; before, the ``--every-receiver`` line only (the rest is in the tables above: no change to the guard,
the bench or the attacks since they were measured, and ``adaptive`` at 3 of 10 over 40 rounds, seed 0, ran again
at 40683dc as ``semantic``: 0.8738, as in the table).

40 rounds, Dirichlet 0.5 (final accuracy seeds 0 1 2 (mean), the mean of the last 4 rounds, honest rows rejected
per seed of 3600 a clean cell)::

    | attack | f | guard | final, seeds 0 1 2 (mean) | last 4 rounds | fp |
    |---|---:|---|---|---|---|
    | adaptive | 3 | before | 0.874 0.876 0.868 (0.872) | 0.878 0.875 0.896 | 0 0 0 |
    | adaptive | 3 | ``cos_record=0`` | 0.936 0.875 0.967 (0.926) | | 0 6 6 |
    | adaptive | 3 | record | 0.936 0.881 0.964 (0.927) | 0.940 0.878 0.956 | 0 0 6 |
    | adaptive | 3 | ``median`` | 0.914 0.839 0.869 (0.874) | 0.898 0.837 0.890 | 0 0 0 |
    | none | 0 | before | 0.926 0.975 0.936 (0.946) | 0.926 0.974 0.937 | 0 9 0 |
    | none | 0 | ``cos_record=0`` | 0.933 0.972 0.921 (0.942) | | 9 27 18 |
    | none | 0 | record | 0.916 0.975 0.931 (0.941) | 0.926 0.974 0.937 | 9 9 0 |
    | none | 0 | before, --every-receiver | 0.925 0.929 0.936 (0.930) | 0.924 0.933 0.937 | 0 9 0 |
    | none | 0 | record, --every-receiver | 0.954 0.947 0.944 (0.948) | 0.953 0.948 0.946 | 9 18 0 |

Under ``adaptive`` at 3 of 10 the record is above the median on every seed (rule 1 met; every attacker row is
rejected from round 2 on either way, tp 798 of 840). Clean, the benchmark's cell shows no gain because of how it
runs the guard: for two receivers while their results agree (shared θ), so the other receivers' records start
only when it switches to one call per receiver (round 27 on seed 0 with ``cos_record=0``), and their honest senders
that dip below 0 then have no record and get the ramp. With every receiver judged from round 0, as in a swarm,
the record ends at 0.954 0.947 0.944 where before ends at 0.925 0.929 0.936 (the plain mean, in the shared cell:
0.956 0.972 0.956; judging every receiver changes the trajectories, so seed 1 is lower for both).

12 rounds, final accuracy seeds 0 1 2 (mean), fpN as above (``cos_record=0`` gave the same cells as the record on
Dirichlet 0.1 under ``sign_flip`` ×1 and ``null_space`` at 3 of 10; before and median: the tables above)::

    | attack | f | Dirichlet 0.5, record | Dirichlet 0.1, record |
    |---|---:|---|---|
    | none | 0 | 0.936 0.936 0.917 (0.930) | 0.811 0.728 0.742 (0.760); seeds 3 4: 0.817 fp9, 0.672 |
    | sign_flip ×1 | 3 | 0.886 0.858 0.861 (0.869) | 0.531 0.719 0.622 (0.624) |
    | sign_flip ×1 | 4 | 0.776 0.800 0.828 (0.801) fp65 | 0.442 0.450 0.297 (0.396) fp5 |
    | sign_flip ×10 | 3 | 0.939 0.858 0.933 (0.910) fp6 | |
    | sign_flip ×10 | 4 | 0.903 0.850 0.939 (0.897) | |
    | null_space | 3 | 0.856 0.858 0.886 (0.867) | 0.506 0.678 0.625 (0.603) |
    | null_space | 4 | 0.838 0.800 0.822 (0.820) fp50 | 0.469 0.450 0.336 (0.419) fp5 |
    | alie z=search | 3 | 0.933 0.850 0.931 (0.905) | |
    | alie z=search | 4 | 0.906 0.842 0.933 (0.894) | |
    | adaptive | 3 | 0.939 0.858 0.933 (0.910) | 0.581 0.700 0.661 (0.647) |
    | adaptive | 4 | 0.908 0.847 0.939 (0.898) | 0.492 0.572 0.386 (0.483) |
    | ipm ε=100 | 3 | 0.939 0.858 0.933 (0.910) | |
    | ipm ε=100 | 4 | 0.903 0.850 0.939 (0.897) | |
    | min_max | 3 | 0.928 0.850 0.928 (0.902) fp12 | |
    | min_max | 4 | 0.870 0.847 0.922 (0.880) fp10 | |
    | backdoor | 3 | 0.933 0.931 0.911 (0.925) fp6 | |
    | backdoor | 4 | 0.931 0.931 0.908 (0.923) | |

Backdoor ASR (record): 3 of 10 0.830 0.861 0.923, 4 of 10 0.954 1.000 0.994 (before 0.852 0.867 0.923 and 0.948
0.999 0.994). The decision rule of "Should the ramp go": (1) median: the record is below the median in no
seed-cell where before is not (its two such cells are before's: ``min_max`` at 4 of 10 seed 0, 0.870 against
0.878, before 0.864; ``backdoor`` at 3 of 10 seed 0, 0.933 against 0.942, before 0.928). (2) mean over the 12-round
attack cells: Dirichlet 0.5 (48 seed-cells) 0.8895 → 0.8880 (−0.15 points), Dirichlet 0.1 (18) 0.5329 → 0.5287
(−0.42; the ramp off: −3.30), all 66 0.7923 → 0.7900 (−0.23). The cells that move are the ones the ramp was chosen
on, and only on seed 0 of Dirichlet 0.5 at 3 of 10 (``sign_flip`` ×1 0.908 → 0.886, ``null_space`` 0.907 → 0.856):
there the attackers keep the ramp (their records −0.15 to −0.42), and what the record changes is two honest
senders (peer00, peer04) whose rows dipped to −0.07 .. −0.28 in rounds 5, 8 and 11 and now weigh 1, as with the
ramp off (0.875, 0.878); on Dirichlet 0.1, ``sign_flip`` ×1 at 4 of 10 seed 1 0.563 → 0.450 and seed 2 0.256 →
0.297. Under ``sign_flip`` ×1 and ``null_space`` at 4 of 10 on Dirichlet 0.5 it rejects more honest rows (65
and 50 over three seeds, before 25 and 25, the ramp off 50 and 50). (3) clean false positives: 0 on every
12-round clean cell but Dirichlet 0.1 seed 3 (9 of 1080, 0.8 %; ``cos_record=0``: 27, 2.5 %, as the ramp off;
``semantic:cos_record=0.2``: 18); over 40 rounds 9 / 9 / 0 of 3600. (4) 40 rounds: ``adaptive`` at 3 of 10
met on every seed; clean as before in the benchmark's cell, better with every receiver judged from round 0.
Not done: the white-box attack does not build a record first (module docstring of ``p2p_guard.guard.semantic``,
stage 4c); ``cos_record`` was tried at 0, 0.1 and 0.2 only (0.2 on Dirichlet 0.1 seed 3 only).

The record's known gap, measured with ``sleeper`` (honest for k rounds, then ``sign_flip`` ×1: it builds a record
and then spends it), 12 rounds, 3 of 10, final accuracy seeds 0 1 2 (mean); decay 0.8 =
``semantic:record_decay=0.8`` (each earlier judged round weighs 0.8 times the next)::

    for p in dirichlet:0.1 dirichlet:0.5; do for a in sleeper:k=6 sleeper; do
      python docs/scripts/adaptive_cells.py --attack $a --partition $p --fractions 3 --seeds 0 1 2 \
          --guards semantic semantic:direction_record=False median      # then semantic:record_decay=0.8
    done; done
    python docs/scripts/adaptive_cells.py --rounds 40 --fractions 3 --seeds 0 2 --guards semantic:record_decay=0.8

    | partition | attack | guard | seeds 0 1 2 (mean) | fp |
    |---|---|---|---|---:|
    | Dirichlet 0.1 | sleeper k=3 | record | 0.550 0.664 0.631 (0.615) | 0 |
    | Dirichlet 0.1 | sleeper k=3 | before | 0.596 0.713 0.642 (0.650) | 0 |
    | Dirichlet 0.1 | sleeper k=3 | decay 0.8 | 0.550 0.567 0.605 (0.574) | 0 |
    | Dirichlet 0.1 | sleeper k=3 | median | 0.428 0.467 0.425 (0.440) | 0 |
    | Dirichlet 0.1 | sleeper k=6 | record | 0.548 0.731 0.650 (0.643) | 6 |
    | Dirichlet 0.1 | sleeper k=6 | before | 0.662 0.589 0.770 (0.674) | 6 |
    | Dirichlet 0.1 | sleeper k=6 | decay 0.8 | 0.614 0.728 0.653 (0.665) | 12 |
    | Dirichlet 0.1 | sleeper k=6 | median | 0.408 0.472 0.383 (0.421) | 0 |
    | Dirichlet 0.5 | sleeper k=3 | record | 0.883 0.861 0.856 (0.867) | 12 |
    | Dirichlet 0.5 | sleeper k=3 | before | 0.879 0.858 0.861 (0.866) | 12 |
    | Dirichlet 0.5 | sleeper k=3 | decay 0.8 | 0.881 0.861 0.831 (0.858) | 18 |
    | Dirichlet 0.5 | sleeper k=3 | median | 0.817 0.839 0.847 (0.834) | 0 |
    | Dirichlet 0.5 | sleeper k=6 | record | 0.856 0.844 0.861 (0.854) | 0 |
    | Dirichlet 0.5 | sleeper k=6 | before | 0.916 0.850 0.869 (0.879) | 0 |
    | Dirichlet 0.5 | sleeper k=6 | decay 0.8 | 0.856 0.847 0.867 (0.857) | 0 |
    | Dirichlet 0.5 | sleeper k=6 | median | 0.828 0.844 0.903 (0.858) | 0 |

The record costs 2.5-3.5 points under ``sleeper`` in three of the four cells (means; lower on every seed with k = 3
on Dirichlet 0.1 and with k = 6 on Dirichlet 0.5, mixed with k = 6 on Dirichlet 0.1, level with k = 3 on 0.5),
stays far above the median on Dirichlet 0.1, and on Dirichlet 0.5 with k = 6 is at the median on seed 1 (0.844)
and below it on seed 2 (0.861 against 0.903), where the ramp alone is below it too (0.869). The
decay does not mend it (k = 3 on Dirichlet 0.1 loses 4 more points) and over 40 rounds under ``adaptive`` at 3 of
10 it ends below the median on seed 0 (0.879, last 4 rounds 0.880; median 0.914; seed 2 0.964), so the default
keeps the plain mean (decay 1).

``mimic`` over 40 rounds (issue 9 rule 1; docs/threat-model.md §3.7a has the cells before the direction record).
Measured 2026-12-07 on main at 781df57 (direction record on), 3 of 10 only::

    python docs/scripts/adaptive_cells.py --attack mimic --rounds 40 --fractions 3 --seeds 0 1 2 \
        --guards semantic median                                # then with --partition dirichlet:0.1

Final accuracy seeds 0 1 2, honest rows rejected per seed (of 1680)::

    | partition | ``semantic`` | fp | ``median`` |
    |---|---|---|---|
    | Dirichlet 0.5 | 0.856 0.861 0.933 | 58 306 234 | 0.894 0.844 0.783 |
    | Dirichlet 0.1 | 0.419 0.697 0.308 | 189 256 207 | 0.469 0.689 0.467 |

Below the median on seed 0 of both partitions and seed 2 of Dirichlet 0.1. Rejections for ``colluding`` (all
rows; the attack rows are rejected as ``duplicate``): 46 228 186 on Dirichlet 0.5, 135 190 79 on 0.1.

Copies as one partner (``semantic:collusion_merge_copies=True``, ``p2p_guard/guard/collusion.py``'s docstring):
the collusion stage's partners that the duplicate stage put in one group this round count once, so the two
copies of an honest peer's previous row are no longer its two aligned partners. Same commands, with ``--guards
semantic:collusion_merge_copies=True semantic:collusion=False``::

    | partition | ``collusion_merge_copies=True`` | fp | ``collusion=False`` | fp | ``median`` |
    |---|---|---|---|---|---|
    | Dirichlet 0.5 | 0.867 0.869 0.939 | 18 60 30 | 0.867 0.869 0.939 | 18 60 30 | 0.894 0.844 0.783 |
    | Dirichlet 0.1 | 0.494 0.756 0.358 | 36 72 54 | 0.494 0.756 0.358 | 36 72 54 | 0.469 0.689 0.467 |

With the copies merged the collusion stage rejects no row under ``mimic`` (every cell equals the guard without
the stage, to the digit; the attack rows stay rejected as ``duplicate``; the honest rows still rejected are
``outlier`` and a few ``duplicate``). It lifts all six cells (Dirichlet 0.5 +1.0 +0.8 +0.6 points, 0.1 +7.5 +5.9 +5.0) and seed 0 of
Dirichlet 0.1 to above the median, but seed 0 of Dirichlet 0.5 (0.867 against 0.894) and seed 2 of 0.1 (0.358
against 0.467) stay below it: what is left there is not the collusion stage's.

Made the default (2026-12-07) after the cells where the collusion stage does its work, 12 rounds, Dirichlet 0.5,
seeds 0 1 2, ``G="semantic semantic:collusion_merge_copies=True"`` run while the default was off (so
``semantic`` there is the stage as before), then ``sign_flip:scale=1`` and ``null_space`` with
``G="semantic:collusion_merge_copies=False semantic:collusion_merge_copies=True"``::

    python docs/scripts/adaptive_cells.py --attack alie:z=search --fractions 3 4 --seeds 0 1 2 --guards $G
    python docs/scripts/adaptive_cells.py --attack adaptive --fractions 3 4 --seeds 0 1 2 --guards $G
    python docs/scripts/adaptive_cells.py --fractions 0 --seeds 0 1 2 --guards $G      # and --partition dirichlet:0.1
    for a in sign_flip:scale=1 null_space; do
      python docs/scripts/adaptive_cells.py --attack $a --fractions 3 4 --seeds 0 1 2 --guards $G
    done

Every one of these 30 seed-cells per guard is equal with and without the rule, per round and per reason (no
duplicate group forms: the attackers jitter or send their own rows): ``alie:z=search`` 0.933 0.850 0.931 at 3 of
10 and 0.906 0.842 0.933 at 4 (attack rows rejected ``colluding`` from round 2 on), ``adaptive`` 0.939 0.858 0.933 and 0.908
0.847 0.939, ``sign_flip`` ×1 0.886 0.858 0.861 and 0.776 0.800 0.828, ``null_space`` 0.856 0.858 0.886 and 0.838
0.800 0.822; clean 0.936 0.936 0.917 (Dirichlet 0.5) and 0.811 0.728 0.742 (0.1), 0 honest rows rejected.
``mimic`` at 4 of 10 over 40 rounds (``--attack mimic --rounds 40 --fractions 4 --seeds 0 1 2 --guards
semantic:collusion_merge_copies=False semantic:collusion_merge_copies=True median``), final accuracy (honest rows
rejected, of 1200): before 0.807 (67) 0.679 (118) 0.928 (160); with the rule 0.928 (0) 0.861 (50) 0.953 (10);
median 0.772 0.653 0.525. The same on Dirichlet 0.1 (``--partition dirichlet:0.1``, guards
``semantic:collusion_merge_copies=False semantic median`` after the flip): before 0.414 (48) 0.403 (134) 0.248
(134); with the rule 0.562 (25) 0.452 (35) 0.347 (280: 275 of them ``duplicate``, the copied peer's new row near
the copies); median 0.364 0.350 0.231.

What is left below the median (Dirichlet 0.5 seed 0, 0.1 seed 2; found at the deadline, not fixed): the cell's
fall-back to one guard call per receiver (``run_cell`` switches once two receivers' results differ; the median's
never do). With one shared θ (``python docs/scripts/shared_theta_probe.py --attack mimic --partition P --seed S
--shared``) the default guard ends at 0.931 and 0.675 where the per-receiver cell (the same command without
``--shared``) ends at 0.867 and 0.358 (peer00 rejects the three copies from round 3 on in both); on 0.1 seed 2 the per-receiver run
peaks at 0.652 in round 9 and falls every round after. The receivers differ where the copied honest peer's new
row falls within the duplicate radius of the copies of its previous row: every receiver rejects it but its own
(rounds 6, 7 and 11 of that cell). docs/threat-model.md §3.7a.

Resolved 2026-12-07: what parted the receivers' models was the cell's missing mixing step (a swarm's peers mix
their θ after every step). With the swarm's mixing and every receiver judged (the cell's defaults now; same
commands) the default guard ends at 0.936 0.868 0.943 on Dirichlet 0.5 and 0.747 0.748 0.675 on 0.1, above the
median in all six cells; docs/threat-model.md §3.7a has the table, with ``--no-mixing --shortcut`` (the old cell).

The six 12-round seed-cells below the median above (``min_max`` and ``min_sum`` on Dirichlet 0.1, ``ipm:epsilon=100``,
``backdoor``, ``sleeper:k=6``) re-run with the new cell on 2026-12-07 (16d90b5): all six still below it in the final
round, moved by −2.3 to +0.8 points; docs/threat-model.md §3.8 has the table and commands.
"""

from __future__ import annotations

import argparse
import json
import time

import torch

from p2p_guard.bench.cell import CellSpec, run_cell


def main() -> None:
    """Parse the arguments and print one JSON line per (seed, guard, f)."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--guards", nargs="+", default=["semantic", "median"])
    parser.add_argument("--fractions", type=int, nargs="+", default=[0, 3, 4], help="f, Byzantine of 10 (0: clean)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--attack", default="adaptive", help="attack spec at f > 0 (alie:z=search: the second table)")
    parser.add_argument("--partition", default="dirichlet:0.5", help="how the data is split (as bench robustness)")
    parser.add_argument("--rounds", type=int, default=12, help="outer rounds per cell")
    parser.add_argument("--every-receiver", action="store_true",
                        help="run the guard for every receiver from round 0, as a swarm's peers do (the cell's "
                             "default since 2026-12-07; kept so that older commands still run)")
    parser.add_argument("--shortcut", action="store_true",
                        help="judge two receivers while their results agree (CellSpec.every_receiver=False: the "
                             "cell before 2026-12-07; --no-mixing --shortcut reproduces its figures)")
    parser.add_argument("--reputation", action="store_true",
                        help="every peer also runs the swarm's reputation (CellSpec.reputation, the benchmark's "
                             "default since 2026-12-07); without it the guard alone, as every figure here was measured")
    parser.add_argument("--no-mixing", action="store_true",
                        help="leave out the swarm's mixing step (CellSpec.mixing=False: the cell before 2026-12-07)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    for seed in args.seeds:
        for guard in args.guards:
            for f in args.fractions:
                started = time.monotonic()
                result = run_cell(CellSpec(task="digits", guard=guard, attack=args.attack if f else None, n=10, f=f,
                                           partition=args.partition, seed=seed, rounds=args.rounds,
                                           mixing=not args.no_mixing, every_receiver=not args.shortcut,
                                           reputation=args.reputation))
                verdicts = result["verdicts"]
                line = {"attack": args.attack if f else None, "partition": args.partition, "guard": guard, "f": f,
                        "seed": seed,
                        "accuracy": round(result["final"]["accuracy"], 4), "tp": verdicts["tp"], "fn": verdicts["fn"],
                        "fp": verdicts["fp"], "asr": result["final"]["asr"],
                        "reasons": verdicts["reasons"], "seconds": round(time.monotonic() - started, 1),
                        "cpu_seconds": round(result["cpu_seconds"], 1), "guard_calls": result["timing"]["guard_calls"],
                        "per_round": [round(r["accuracy"], 3) for r in result["rounds"]],
                        "spread": [round(r["spread"], 4) for r in result["rounds"]],
                        "shared_theta": result["shared_theta"],
                        "last_4_rounds": round(sum(r["accuracy"] for r in result["rounds"][-4:]) / 4, 4)}
                print(json.dumps(line), flush=True)  # noqa: T201


if __name__ == "__main__":
    main()
