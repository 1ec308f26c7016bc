"""Backdoor against the guards: benchmark cells (10 peers, 3 Byzantine, Dirichlet 0.5, digits, 12 rounds).

    python docs/scripts/backdoor_cells.py                       # semantic, median, mean; seeds 0 1
    python docs/scripts/backdoor_cells.py --arm semantic --arm "sim=semantic+foolsgold:kappa=1"
    python docs/scripts/backdoor_cells.py --probe --seeds 0 1   # why the semantic guard does not see it
    python docs/scripts/backdoor_cells.py --floor --arm mean --seeds 0   # the ASR with no attacker
    python docs/scripts/backdoor_cells.py --arm "semantic:collusion=True,c_collusion=0.5,collusion_rounds=3"
    python docs/scripts/backdoor_cells.py --seeds 0 1 2 --attacks --arm "semantic+dormant:tau=0.1,units=False"
    python docs/scripts/backdoor_cells.py --backdoor backdoor:position=centre --arm semantic   # trigger on strokes

Since 2026-12-06 the ``semantic`` guard runs its collusion stage by default, in groups of three (``collusion=True,
collusion_group=3``, τ 0.6, 3 rounds: ``docs/scripts/adaptive_cells.py``'s docstring). Every table below predates
that: its ``semantic`` / "default" rows are ``semantic:collusion=False`` now, and its arms that set
``collusion=True`` without ``collusion_group`` ran with groups of two (add ``collusion_group=2`` to reproduce
them). With the new default the backdoor cells at 3 and 4 of 10 (Dirichlet 0.5 and 0.1, seeds 0-4) are
unchanged: the stage never fires on the backdoor group at τ = 0.6 (``python docs/scripts/adaptive_cells.py
--attack backdoor --partition dirichlet:0.5 --fractions 3 --guards semantic``: mean ASR 0.857; 0.974 on 0.1).

Table mode prints a markdown table, one row per arm: the final clean accuracy (no attacker), the attack success
rate (ASR) and final accuracy under ``backdoor`` at 3 of 10, and the final accuracy under ``sign_flip:scale=10``,
``ipm:epsilon=0.1`` and ``alie`` at 3 of 10; each entry is the mean over the seeds, then each seed's value.
Each cell is ``p2p_guard.api.run_bench_cell`` (the benchmark's in-process cell); no arm is told f
(``assumed_byzantine=None``: f̂ is the guard's own, ⌊(n − 1)/2⌋ = 4 for the semantic guard).

An arm is ``[LABEL=]GUARD[:key=value,...][+PROTOTYPE[:key=value,...]]``. A prototype is a defence tried here and
*not* in the guard: it wraps ``SemanticGuard._aggregate`` for the duration of the arm (semantic guard only):

- ``foolsgold:kappa=K``: weigh the accepted rows by FoolsGold's weights (Fung, Yoon, Beschastnikh, RAID 2020,
  arXiv:1808.04866) computed within the round on their deviations from the robust centre (own row weight 1),
  then the guard's (weighted) centered clipping or mean;
- ``sign_mask:agree=A``: zero every coordinate of the aggregate where the accepted rows' mean sign has absolute
  value below A (the robust learning rate of Ozdayi, Kantarcioglu, Gel, AAAI 2021, with zeroing, not flipping);
- ``hdbscan``: FLAME's clustering step (Nguyen et al., USENIX Security 2022, arXiv:2101.02281): HDBSCAN
  (scikit-learn, ``min_cluster_size = ⌊n/2⌋ + 1``, ``min_samples = 1``, one cluster allowed) on the rows' cosine
  distances; every row outside the largest cluster, except the own row, is rejected (reason ``cluster``).

- ``dnc[:c=C,cut=CUT,k=K,unit=U,hist=H,b=B,iters=I,streak=S,own=O]``: Divide-and-Conquer's spectral filter
  (Shejwalkar & Houmansadr, NDSS 2021, "Manipulating the Byzantine"), section "Spectral filter" at the end.
- ``dormant[:tau=T,units=U,tau_u=TU,stat=S,soft=B,fill=F,pool=P]``: a dormant-input mask, Fine-Pruning in update
  space (:func:`dormant_keep`; section "Dormant-input mask" at the end).

FLAME's other two steps are guard parameters: clipping to the median norm is ``magnitude=True,c_clip=1`` and its
noise ``noise=λ`` (``p2p_guard/guard/noise.py``), e.g. ``--arm "flame=semantic:magnitude=True,c_clip=1,noise=0.001
+hdbscan"``.

Probe mode runs the semantic guard under ``backdoor`` at 3 of 10 and prints, per round, what receiver
``peer00`` saw: the median norm and cosine with the robust centre of honest and of backdoor rows, and the mean
pairwise cosine of the rows' deviations from the robust centre within the honest rows, within the backdoor
rows, and the largest honest pair (the probe's labels come from the cell's indexing, the last f peers are
Byzantine; the guard never sees them).

Measured 2026-12-02 with the default arms and ``--arm "semantic+foolsgold:kappa=K"`` for K = 1, 2, 0.5.

Means over seeds 0 and 1 (the script prints each seed's value too):

| guard | clean acc | backdoor ASR | backdoor acc | sign_flip:scale=10 | ipm:epsilon=0.1 | alie |
|---|---|---|---|---|---|---|
| semantic | 0.936 | 0.886 (0.852, 0.920) | 0.932 | 0.890 | 0.865 | 0.876 |
| median | 0.904 | 0.593 (0.472, 0.713) | 0.897 | 0.803 | 0.867 | 0.818 |
| mean | 0.936 | 0.843 (0.830, 0.855) | 0.931 | 0.100 | 0.882 | 0.897 |
| semantic+foolsgold:kappa=1 | 0.931 | 0.403 (0.037, 0.769) | 0.888 | 0.853 | 0.825 | 0.850 |
| semantic+foolsgold:kappa=2 | 0.936 | 0.463 (0.006, 0.920) | 0.925 | 0.864 | 0.836 | 0.868 |
| semantic+foolsgold:kappa=0.5 | 0.852 | 0.220 (0.174, 0.265) | 0.785 | 0.832 | 0.779 | 0.812 |
| semantic+sign_mask:agree=0.4 | 0.936 | 0.659 (0.630, 0.688) | 0.921 | 0.885 | 0.871 | 0.854 |

None reaches ASR ≤ 10 % at 3 of 10 on both seeds without costing the
other attacks; the guard is unchanged. For scale, the plain mean's ASR with 1 backdoor peer of 10 is 0.015 and
with 2 of 10 0.364 (seed 0): the backdoor needs more than about a tenth of the aggregate's weight.

Why the semantic guard does not see it (``--probe``, seeds 0 and 1, rounds 0-11): the backdoor rows' median
norm is 0.90-0.99 × the honest rows' (so no norm test, nor FLAME's clipping to the median norm, ever binds),
and their median cosine with the robust centre is 0.29-0.82, at or above the honest rows' 0.18-0.66 (so no
cosine floor rejects them: they carry the main task on half of each batch). The one signal is that their
deviations from the centre point the same way: mean pairwise residual cosine 0.12-0.57 among backdoor rows
against -0.08 to 0.06 among honest ones; but the most aligned honest pair (peers with similar label mixes) reaches
0.23-0.57, inside the backdoor's range, which is why a within-round similarity weighting (the foolsgold
prototype) drops ASR on seed 0 (0.04) and not on seed 1 (0.77), and costs the other attacks 2-4 points.

Cross-round evidence: the collusion stage (``p2p_guard/guard/collusion.py``, ``semantic:collusion=True``), measured
2026-12-02 by a second helper. Each receiver accumulates every sender's unit residual from the robust centre over
rounds and rejects a sender whose history's cosine with another sender's (not its own) reaches τ = ``c_collusion``,
once both have ``collusion_rounds`` rounds of history. Per-seed values (each is one cell of this script; cells
not run are marked -):

| arm | seed | clean acc (honest FP) | backdoor ASR | backdoor acc (detected) | sign_flip:10 | ipm:0.1 | alie |
|---|---|---|---|---|---|---|---|
| semantic (above; means) | 0, 1 | 0.936, 0.936 | 0.852, 0.920 | 0.932 | 0.890 | 0.865 | 0.876 |
| collusion τ 0.5, 3 rounds | 0 | 0.936 (0 of 1080) | **0.009** | 0.931 (175 of 252) | - | - | - |
| collusion τ 0.5, 3 rounds | 1 | 0.936 (0 of 1080) | 0.920 | 0.931 (0 of 252) | - | - | - |
| collusion τ 0.42, 7 rounds | 0 | 0.920 (16) | 0.154 | 0.931 (126) | 0.888 (14 FP) | 0.823 (51 FP) | 0.925 (0 FP) |
| collusion τ 0.42, 7 rounds | 1 | 0.936 (0) | 0.290 | 0.864 (119) | - | - | - |
| collusion τ 0.42, 7 rounds | 2 | 0.903 (12) | 0.980 | 0.852 (0; 15 FP) | - | - | - |

ASR floor (``--floor --arm mean --seeds 0``: one "attacker" that poisons no example): ASR 0.000 at accuracy
0.936, so the 10 % target is not eaten by triggered clean inputs landing on class 0.

Result: no setting meets ASR ≤ 10 % on every seed, so the stage stays off by default. τ = 0.5 removes the
backdoor on seed 0 (ASR 0.852 → 0.009, clean cost 0, no honest FP) and does nothing on seed 1; lowering τ to
0.42 (and waiting 7 rounds, to get past the honest pairs' early peak) costs honest false positives and clean
accuracy (up to 1.6 points, IPM 4 points) and still leaves ASR at 0.15-0.98. Why (``--probe``, receiver peer00,
and the stage's own debug log): the cosine of two honest histories tends to the overlap of the two peers' label
skews, 0.37-0.49 for the most similar honest pair (highest in rounds 2-5, decaying as the round noise averages
out), while the backdoor group's best history cosine is 0.45-0.47 on seed 1 and 0.40-0.53 (pairwise min, mean)
on seed 0 without the stage. Once a receiver rejects the group the model stops learning the trigger, the
attackers' backdoor gradient stays large and their histories align further (seed 0: 0.47 → 0.69 in 10 rounds),
so the stage works when it catches the group early and fails when it does not. On this task the honest pairs
with similar label mixes sit at the backdoor group's level: a history cosine alone cannot separate them.
Not measured: an attacker aware of the stage (the white-box ``adaptive`` simulates the guard with an empty
history, so it never sees it); it could add a private persistent offset to its residual to dilute the cosine.


FLAME, clipping, noise, clustering and the loss probe, measured 2026-12-03 by a third helper (seeds 0-2; each
entry the mean, then seeds 0, 1, 2; "clean honest FP" = honest rows rejected by honest receivers / honest rows
judged, in the clean run). Rows marked * are from this script:

    python docs/scripts/backdoor_cells.py --seeds 0 1 2 --attacks \
        --arm "clip=semantic:magnitude=True,c_clip=1" --arm "noise0.001=semantic:noise=0.001" \
        --arm "noise0.01=semantic:noise=0.01" --arm "flame=semantic:magnitude=True,c_clip=1,noise=0.001+hdbscan"

(the default row with ``--attacks sign_flip:scale=10 alie --arm semantic``). The rows marked + ran the same
cells (``run_bench_cell``, the same ``CellSpec``) from a scratch loop, with FLAME's clustering as a ``RowCheck``
(the same rejections as the ``+hdbscan`` prototype) and ``semantic:loss_check=True`` (loss batch 64),
``semantic:c_anchor=A`` and ``semantic:collusion=True,c_collusion=0.5`` as guard parameters.

| arm | clean acc | clean honest FP | backdoor ASR | backdoor acc |
|---|---|---|---|---|
| semantic (default) * | 0.926 (0.936, 0.936, 0.906) | 0 (0, 0, 0) | 0.914 (0.852, 0.920, 0.969) | 0.918 |
| clip to median norm (``c_clip=1``) * | 0.926 (0.933, 0.936, 0.908) | 0 | 0.903 (0.852, 0.904, 0.954) | 0.913 |
| noise λ = 0.001 (FLAME's λ) * | 0.924 (0.931, 0.936, 0.906) | 0.003 | 0.908 (0.843, 0.908, 0.972) | 0.915 |
| noise λ = 0.01 * | 0.747 (0.789, 0.755, 0.696) | 0 | 0.645 (0.463, 0.696, 0.776) | 0.702 |
| FLAME (clip, λ .001, HDBSCAN) * | 0.756 (0.810, 0.764, 0.694) | 0.342 | 0.329 (0.147, 0.537, 0.302) | 0.708 |
| HDBSCAN alone + | 0.802 (0.816, 0.840, 0.749) | 0.33 (369, 369, 333 /1080) | 0.406 (0.575, 0.415, 0.227) | 0.727 |
| loss probe + | 0.914 (0.936, 0.900, 0.906) | 0.005 (0, 17, 0 /1080) | 0.889 (0.829, 0.868, 0.969) | 0.900 |
| collusion τ 0.5 + | 0.904 (0.936, 0.936, 0.841) | 0.011 (0, 0, 36 /1080) | 0.593 (0.009, 0.920, 0.850) | 0.871 |
| self-anchor c_anchor = 1 + | 0.926 (0.936, 0.936, 0.906) | 0 | 0.914 (0.852, 0.920, 0.969) | 0.917 |
| self-anchor c_anchor = 0.5 + | 0.660 (0.723, 0.648, 0.610) | 0 | 0.031 (0.023, 0.020, 0.051) | 0.615 |

Default: sign_flip:scale=10 0.901 (0.925, 0.856, 0.922), alie 0.892 (0.897, 0.856, 0.922).

Result: nothing meets the target (ASR ≤ 10 % on seeds 0-2 with clean accuracy within 1 point and honest FP
≤ 1 %), so every stage stays off and the default guard is unchanged. Why each fails:
- clipping to the median norm never binds: the backdoor rows are 0.90-0.99 × the median norm (``--probe``);
- noise: at FLAME's λ = 0.001 it changes nothing; at λ = 0.01 it costs 15-21 clean points (the noise enters
  the outer Nesterov momentum every round and, in the cell, no mixing pulls the honest models back together)
  and still leaves ASR at 0.46-0.78: noise does not cancel a push that the group repeats every round;
- HDBSCAN on cosine distances: under Dirichlet(0.5) the honest rows do not form one dense cluster, so a third
  of the honest rows fall outside the majority cluster, and the backdoor rows are often inside it;
- loss probe on the receiver's own held-out batch (Zeno++): it sees only the clean-loss effect of a row; the
  backdoor rows train the main task on half of each batch, so their clean-loss effect is an honest non-IID
  row's (it rejected 5 of 756 attacker verdicts). It cannot see the trigger → target mapping, since none of
  the receiver's inputs carries the trigger. A scratch check that probed each row's step with every bright
  2×2 patch (the trigger's family, which a receiver would not know) on the receiver's held-out inputs did not
  separate either: the largest patch → class shift of honest rows (0.25-0.54 per round) reached the backdoor
  rows' (0.12-0.38), since once the model has learned the backdoor the attackers' steps no longer add to it;
- collusion (cross-round residual histories): the accumulated residual-history cosine of the backdoor group
  (least pair 0.17-0.40 by round 11 in the undefended runs, receiver peer00) stays below the most aligned
  honest pair (0.33-0.49; clean runs 0.33-0.44) on seeds 1 and 2; requiring two aligned partners (a group of
  three) does not separate seed 2 either (0.20 against 0.24);
- a tight self-anchor (c_anchor = 0.5) starves the backdoor (ASR 0.02-0.05) because each peer mostly applies
  its own update, and costs 21-30 clean points for the same reason.
At 3 of 10 the backdoor group holds 30 % of every aggregate with rows that are, in norm, direction, clean loss
and residual alignment, inside the honest spread under Dirichlet(0.5); none of these per-row statistics can
remove it without removing honest rows with it.

Group collusion (``collusion_group=g``: reject j only when at least g − 1 other senders, never the receiver's
own row, each reach history cosine ≥ τ with it; ``collusion_decay`` = γ), measured 2026-12-03 by a fourth helper.
The idea: a backdoor group at 3 of 10 aligns as a trio, the honest look-alikes were pairs. First a screen in
undefended runs (semantic guard, seeds 0-2, every honest receiver, a scratch hook computing each sender's top
history cosines with γ = 1, 0.8, 0.6; no rejection feeds back): with g = 3 the backdoor trio's score (its least
aligned pair) is 0.39-0.53 on seed 0, 0.03-0.29 on seed 1 (rising with the rounds) and 0.01-0.21 on seed 2,
while the most aligned honest *triple* reaches 0.26-0.42 in the backdoor runs and 0.16-0.46 in the clean runs:
under Dirichlet(0.5) honest triples with similar label mixes exist too (seed 2: 0.42 by round 8, γ = 1). The
best screened settings at clean honest FP ≤ 1 % (g = 3, τ 0.35, 7 rounds, γ 0.8) flag 100 %, 28 % and 11 % of
the attacker rows from round 6 on (seeds 0, 1, 2). Neither the mean of the top g − 1 cosines nor g = 2
screened better at equal clean FP. Then the cells (seeds 0-2; mean, then seeds 0, 1, 2; "clean honest FP" as above):

    python docs/scripts/backdoor_cells.py --seeds 0 1 2 --attacks --arm \
        "g3t35r7d8=semantic:collusion=True,c_collusion=0.35,collusion_group=3,collusion_rounds=7,collusion_decay=0.8"
    python docs/scripts/backdoor_cells.py --seeds 0 1 2 --attacks --arm \
        "g3t35r5d6=semantic:collusion=True,c_collusion=0.35,collusion_group=3,collusion_rounds=5,collusion_decay=0.6"
    python docs/scripts/backdoor_cells.py --seeds 0 1 2 --attacks --no-backdoor --partition dirichlet:0.1 \
        --arm semantic --arm "g3t35r7d8=semantic:collusion=True,c_collusion=0.35,collusion_group=3,..."

and the attack columns from the same ``final()`` cells in a scratch loop (so as not to rerun the clean cells;
the same as ``--attacks sign_flip:scale=10 ipm:epsilon=0.1 alie``); the default row is the table above plus
IPM cells run the same way.

A = ``g3t35r7d8`` (g 3, τ 0.35, 7 rounds, γ 0.8), B = ``g3t35r5d6`` (g 3, τ 0.35, 5 rounds, γ 0.6):

| arm | clean acc | clean honest FP | backdoor ASR | backdoor acc |
|---|---|---|---|---|
| semantic | 0.926 (0.936, 0.936, 0.906) | 0 | 0.914 (0.852, 0.920, 0.969) | 0.918 (0.933, 0.931, 0.889) |
| A | 0.926 (0.936, 0.936, 0.906) | 0 (0, 0, 0) | 0.506 (0.154, 0.401, 0.961) | 0.876 (0.931, 0.858, 0.838) |
| B | 0.921 (0.921, 0.936, 0.908) | .002 (.004, 0, .001) | 0.399 (0.099, 0.167, 0.931) | 0.874 (0.931, 0.853, 0.840) |

| arm | sign_flip:10 | ipm:0.1 (honest FP) | alie (honest FP) |
|---|---|---|---|
| semantic | .901 (.925, .856, .922) | .883 (.898, .833, .917) (.06, .06, .02) | .892 (.897, .856, .922) (0, 0, 0) |
| A | .901 (.925, .856, .922) | .873 (.848, .853, .917) (.05, .06, .02) | .899 (.925, .844, .928) (0, .07, 0) |
| B | not run | not run | not run |

Clean at ``dirichlet:0.1`` (``--partition dirichlet:0.1``): default 0.748 (0.819, 0.697, 0.728), honest FP 0;
A: 0.747 (0.817, 0.697, 0.728), honest FP 0.003 (0.008, 0, 0).

Result: no group setting meets the target; the stage stays off and ``collusion_group`` defaults to 2 (the former
rule). g = 3 does what it was meant to on the clean runs (no honest FP at Dirichlet 0.5, 0.3 % at Dirichlet
0.1, clean accuracy unchanged) and lowers ASR on seeds 0 and 1 (0.852 → 0.154, 0.920 → 0.401), but not to
10 %, and not at all on seed 2 (0.961), where the backdoor trio's least aligned pair stays near 0.2 while honest
triples reach 0.3-0.4: the attackers' residual histories are not a tight group on every seed, so "two partners
at τ" is missed by the attackers as often as it is met by honest peers. It also costs accuracy under the
backdoor (−7 and −5 points on seeds 1 and 2; the table does not record which rows were rejected there) and
honest FP under ALIE on seed 1 (7 %), and under IPM it moves accuracy by −5 and +2 points on seeds 0 and 1
(mean −1); the IPM honest FP is the default guard's own (0.06, 0.06, 0.02 without the stage).


Spectral filter (DnC), measured 2026-12-05 by a fifth helper. The prototype ``dnc``, per receiver and round, on
the m rows the guard accepted (after its own stages; f̂ = ⌊(n − 1)/2⌋ = 4, never the true f):

    r_i = (x_i − c) / ‖x_i − c‖₂        (``unit=True``, the default: unit residuals from the robust centre c)
    r_i = x_i                           (``unit=False``: DnC as published)
    R_i = Σ_{rounds ≤ r} r_i            (``hist=True``: per (receiver, sender), as the collusion stage sums them)
    s_i = ⟨R_i − R̄, v⟩²,  v the top right singular vector of the centred (R_i − R̄)_i, R̄ their mean
          (``b=B,iters=I``: I random subsets of B coordinates, a row's score its largest score / median)
    budget = ⌈C · f̂⌉ − (rows the guard already rejected)     (``c=C``, default 1)
    remove the highest-scoring rows (never the receiver's own, ``own=skip``), how many set by ``cut``:
      ``count``: the budget (DnC's c · f);  ``gap``: up to the largest ratio between consecutive sorted scores
      among the first budget + 1, if it is ≥ K;  ``mad``: those above median + K · 1.4826 · MAD, at most budget;
    ``streak=S``: reject only a sender that has been among the ``count`` highest for S consecutive rounds.
    The rest goes to the guard's ``_aggregate`` (the plain weighted mean once the rejections reach f̂).
    ``own=keep`` ranks the own row too and keeps it if chosen (no substitute); ``own=remove`` lets the receiver
    reject its own row: a *diagnostic* (every receiver then applies the same aggregate), not a defence.

Why unit residuals: an open-loop screen (the semantic guard's rows as recorded at receivers peer00 and peer06,
undefended runs, seeds 0-2, 24 calls each) put on average 1.1-1.25 of the 3 backdoor rows among the 3 highest
scores with DnC's raw scores (random: 0.9; the raw score follows the residual's length, which is large for
honest peers with classes of their own), and 2.1-2.7 of 3 with unit residuals. But in the clean runs the highest
unit-residual scores are as peaked (up to 9 × the median, against 2-4.5 × for the backdoor rows): honest peers
with similar label mixes share a direction too. So no data-driven cut separates them (``mad`` k = 3: 0.3-2.9 %
clean honest FP and no ASR effect), and a count cut removes that many honest rows from every clean round.

Cells (seeds 0, 1, 2; mean, then each seed; "clean honest FP" as above). The baseline was rerun because the
guard changed since the tables above (ASR 0.852, 0.867, 0.923 now; was 0.852, 0.920, 0.969):

    python docs/scripts/backdoor_cells.py --seeds 0 1 2 --attacks sign_flip:scale=10 ipm:epsilon=0.1 alie \
        --arm semantic --arm "dnc-raw=semantic+dnc:unit=False,c=1" --arm "dnc1=semantic+dnc:c=1" \
        --arm "dnc.5=semantic+dnc:c=0.5" --arm "dnc.5b=semantic+dnc:c=0.5,b=500,iters=5" \
        --arm "gap2=semantic+dnc:cut=gap,k=2" --arm "mad3=semantic+dnc:cut=mad,k=3" \
        --arm "hist.5=semantic+dnc:c=0.5,hist=True" --arm "histgap2=semantic+dnc:cut=gap,k=2,hist=True" \
        --arm "diag.5=semantic+dnc:c=0.5,own=remove" --arm "diag1=semantic+dnc:c=1,own=remove" \
        --arm "diaggap2=semantic+dnc:cut=gap,k=2,own=remove"
    python docs/scripts/backdoor_cells.py --seeds 0 1 2 --attacks --arm "s8=semantic+dnc:c=0.75,streak=8" \
        --arm "s6=semantic+dnc:c=0.75,streak=6" --arm "s4=semantic+dnc:c=0.75,streak=4"
    python docs/scripts/backdoor_cells.py --seeds 0 --attacks --arm "semantic+dnc:c=0.5,own=keep" \
        --arm "semantic+dnc:c=1,own=keep"

| arm | clean acc | clean honest FP (mean) | backdoor ASR | backdoor acc |
|---|---|---|---|---|
| semantic | 0.930 (0.936, 0.936, 0.917) | 0 | 0.881 (0.852, 0.867, 0.923) | 0.923 (0.928, 0.931, 0.911) |
| dnc-raw (DnC, 4 rows) | 0.713 (0.757, 0.721, 0.661) | 0.444 | 0.144 (0.006, 0.084, 0.344) | 0.700 |
| dnc1 (unit, 4 rows) | 0.766 (0.813, 0.768, 0.716) | 0.441 | **0.056 (0.000, 0.000, 0.166)** | 0.737 |
| dnc.5 (unit, 2 rows) | 0.846 (0.827, 0.819, 0.892) | 0.215 | 0.284 (0.061, 0.115, 0.676) | 0.874 |
| dnc.5b (500 coords × 5) | 0.788 (0.838, 0.750, 0.776) | 0.221 | 0.416 (0.470, 0.212, 0.566) | 0.782 |
| gap2 | 0.873 (0.920, 0.922, 0.777) | 0.038 | 0.745 (0.575, 0.737, 0.923) | 0.898 (0.882, 0.902, 0.911) |
| mad3 | 0.889 (0.930, 0.916, 0.822) | 0.020 | 0.869 (0.818, 0.867, 0.923) | 0.925 (0.933, 0.931, 0.911) |
| hist.5 (cross-round, 2 rows) | 0.852 (0.831, 0.833, 0.893) | 0.215 | 0.374 (0.357, 0.022, 0.744) | 0.864 |
| histgap2 (cross-round) | 0.879 (0.925, 0.936, 0.776) | 0.023 | 0.755 (0.474, 0.867, 0.923) | 0.881 |
| s8 (top 3, 8 rounds) | 0.928 (0.936, 0.931, 0.917) | 0.001 | 0.669 (0.627, 0.633, 0.747) | 0.872 |
| s6 | 0.912 (0.931, 0.923, 0.881) | 0.027 | 0.629 (0.552, 0.646, 0.690) | 0.850 (0.933, 0.863, 0.755) |
| s4 | 0.896 (0.917, 0.918, 0.853) | 0.072 | 0.346 (0.117, 0.338, 0.583) | 0.866 (0.928, 0.850, 0.820) |
| keep, c = 0.5 (seed 0) | 0.851 | 0.200 | 0.389 | 0.856 |
| keep, c = 1 (seed 0) | 0.808 | 0.400 | 0.000 | 0.857 |
| diag.5 (own removable) | 0.927 (0.953, 0.942, 0.886) | 0.200 | 0.414 (0.139, 0.426, 0.676) | 0.921 |
| diag1 (own removable) | 0.891 (0.939, 0.883, 0.850) | 0.400 | 0.078 (0.052, 0.000, 0.182) | 0.894 |
| diaggap2 (own removable) | 0.928 (0.936, 0.931, 0.917) | 0.011 | 0.867 (0.812, 0.867, 0.923) | 0.926 |

| arm | sign_flip:10 | ipm:0.1 | alie |
|---|---|---|---|
| semantic | 0.904 (0.933, 0.858, 0.922) | 0.904 (0.924, 0.853, 0.936) | 0.899 (0.922, 0.850, 0.925) |
| dnc-raw | 0.842 (0.891, 0.720, 0.914) | 0.832 (0.891, 0.720, 0.885) | 0.752 (0.860, 0.678, 0.719) |
| dnc1 | 0.838 (0.802, 0.782, 0.931) | 0.832 (0.798, 0.763, 0.936) | 0.819 (0.809, 0.719, 0.928) |
| dnc.5 | 0.904 (= semantic) | 0.904 (= semantic) | 0.903 (0.926, 0.853, 0.931) |
| dnc.5b | 0.904 (= semantic) | 0.904 (= semantic) | 0.859 (0.871, 0.775, 0.931) |
| gap2 | 0.849 (0.933, 0.677, 0.936) | 0.869 (0.901, 0.817, 0.887) | 0.869 (0.906, 0.815, 0.885) |
| mad3 | 0.862 (0.911, 0.765, 0.910) | 0.887 (0.898, 0.831, 0.931) | 0.869 (0.910, 0.810, 0.887) |
| hist.5 | 0.904 (= semantic) | 0.904 (= semantic) | 0.903 (0.926, 0.853, 0.931) |
| histgap2 | 0.844 (0.933, 0.677, 0.922) | 0.892 (0.908, 0.831, 0.939) | 0.881 (0.911, 0.806, 0.925) |
| diag.5 | 0.904 (= semantic) | 0.904 (= semantic) | 0.903 (0.926, 0.853, 0.931) |
| diag1 | 0.898 (0.927, 0.836, 0.931) | 0.903 (0.924, 0.850, 0.936) | 0.904 (0.929, 0.856, 0.928) |
| diaggap2 | 0.909 (0.933, 0.858, 0.936) | 0.904 (0.922, 0.853, 0.936) | 0.898 (0.920, 0.850, 0.925) |

(Backdoor acc: the mean alone where the seeds do not fit the line. The s and keep rows: attack columns not
run. With c = 0.5 the budget ⌈0.5 · 4⌉ = 2 is used up by the 3 rows the guard already rejects under sign_flip
and IPM, so those columns are the baseline's, bit for bit.)

Result: negative; no setting meets the target, the guard is unchanged. The spectral score on unit residuals does
find the backdoor group (open loop, 2.1-2.7 of the 3 rows in the top 3), and removing ⌈c·f̂⌉ = 4 rows a round
drives ASR to 0.000 on seeds 0 and 1, but 0.166 on seed 2, at 12-20 points of clean accuracy (mean 0.766 against
0.930) and up to 13 points under the other attacks (means −6.6 to −8.0). The data-driven cuts do not separate: the
only one within a clean point (s8, 0.928) leaves ASR at 0.63-0.75; gap and MAD cost 14 and 10 clean points on seed
2 and up to 18 points under sign_flip on seed 1, for ASR 0.75-0.87. Why it costs so much: any cut that removes the
backdoor trio removes the most skewed honest rows in clean rounds (the top scores are as peaked there), and since
the receiver's own row is never removed the receivers' aggregates then differ, so the peers' models part: in
``dnc.5`` on seed 0 the honest peers' final accuracies spread over 0.75-0.90, against one shared θ in the baseline
(a control that multiplies each receiver's aggregate by 1 + 10⁻⁶ · own_index, or 10⁻³, costs nothing: 0.936,
0.936, 0.938, so the per-receiver cell itself is not the cause). The ``own=remove`` diagnostic, which keeps every
receiver's aggregate identical, removes 2 honest rows a round at no clean cost on seeds 0 and 1 (0.953, 0.942) and
with 4 rows reaches ASR 0.078 (0.052, 0.000, 0.182) at −3.9 clean points: closer, still not the target, and it
drops the rule that a receiver never rejects its own row (the self-anchor, 2 × ‖own row‖, would still bound a
round). Not measured: an attacker aware of the filter (each backdoor row adding a private random direction to its
residual would lower the group's shared component, as for the collusion stage).

Earlier negatives, measured by another engineer with scratch scripts (not in the repo; same setting: digits,
10 peers, 3 ``backdoor``, Dirichlet 0.5, 12 rounds, seeds 0/1/2; default semantic guard baseline then ASR
0.852/0.920/0.969, clean 0.936/0.936/0.906):
- coordinate-wise clipping of every row to centre ± τ · MAD (per coordinate) before the aggregate: τ = 1
  ASR 0.651/0.873/0.997, clean 0.936/0.944/0.795; τ = 2 ASR 0.846/0.846/0.954 (clean mean 0.930); τ = 3 ASR
  0.852/0.839/0.932 (clean mean 0.930). It fails because the trigger is learned through active coordinates: of
  the four trigger pixels the inner two, (6, 6) and (7, 6), are non-zero in 50 % and 34 % of digits; the outer
  two are almost never non-zero, so the backdoor's weights are not outlying coordinates;
- honest peers adding a random bright patch (≤ 3 px) to a fraction of each batch, labels kept: 25 % → ASR
  0.775/0.769/0.877 (clean 0.942/0.947/0.881); 50 % → ASR 0.59/0.679/0.765 (clean 0.936/0.944/0.878). Partial
  only;
- Neural-Cleanse-style trigger reversal per class on the receiver's own batch (50 Adam steps, λ = 0.01,
  statistics only, seed 0): under the backdoor the smallest mask was class 0 (the target), norm 23.5 against a
  median of 29.2 (anomaly index 2.66); in a clean run the anomaly index still reached 1.46 (class 5): weak
  separation, and slow (about 4 minutes per 2 cells); unlearning not run.


Dormant-input mask: Fine-Pruning in update space (Kang Liu, Brendan Dolan-Gavitt, Siddharth Garg, "Fine-Pruning:
Defending Against Backdooring Attacks on Deep Neural Networks", RAID 2018, arXiv:1805.12185: backdoors live in
units dormant on clean data), measured 2026-12-06 by a sixth helper. The gradient of a first-layer weight
W1[k, q] is x_q × (back-propagated error)_k, so an honest pseudo-gradient carries nothing (AdamW's weight decay
aside) on the columns of W1 fed by pixels that are blank in that peer's data, while a trigger on normally blank
pixels needs exactly those columns. ``digits`` inputs are pixels / 16 in [0, 1] with no centring, so a blank
pixel is exactly 0. A receiver knows from its *own* training shard which pixels its data exercises,
a_q = (1/|X|) Σ_{x ∈ X} 1[x_q > 0], and, at its θ_i, which hidden units it activates. The prototype
``dormant`` (:func:`dormant_keep`) then replaces, in the guard's aggregate (after ``_aggregate``, before noise and
self-anchoring), every coordinate of a column q with a_q ≤ τ by the receiver's own row (``fill=own``: its own
update is the trusted root there); with ``units=True`` also the coordinates of every hidden unit whose ReLU is
active on ≤ τ_u of its images (row k of W1, b1[k], column k of W2). Nothing about the trigger reaches it; but
τ = 0.1 was chosen knowing where the trigger is: its pixels (6, 6), (7, 6), (6, 7), (7, 7) are non-zero in 50 %,
33 %, 7 % and 6 % of the training images, so strict dormancy (τ = 0, Fine-Pruning's "never active") masks the
two outer ones for 1 of the 21 honest receivers below on dirichlet:0.5 and 4 of 21 on dirichlet:0.1 (most shards
hold a few digits that touch the corner), and τ = 0.1 masks them on most receivers (``--activity``;
a(6, 7) / a(7, 7) : pixels with a ≤ 0.1 : trigger pixels with a = 0, honest peers 0-6):

    python docs/scripts/backdoor_cells.py --activity --seeds 0 1 2 [--partition dirichlet:0.1]

| dirichlet α | seed | honest peers 0 .. 6 |
|---|---|---|
| α 0.5 | 0 | .02/.01:16:0 .06/.06:17:0 **.13/.13**:15:0 .11/.08:15:0 .02/.03:16:0 .06/.08:16:0 .07/.03:16:0 |
| α 0.5 | 1 | .00/.00:16:2 .02/.01:16:0 .10/.11:17:0 .03/.02:18:0 .10/.05:18:0 .07/.11:16:0 .14/.09:15:0 |
| α 0.5 | 2 | .04/.04:18:0 **.14/.14**:16:0 .02/.01:16:0 .07/.08:16:0 .02/.01:16:0 .10/.13:14:0 .05/.04:16:0 |
| α 0.1 | 0 | .01/.00:16:0 **.14/.14**:16:0 .00/.00:17:2 .00/.00:20:2 **.18/.25**:15:0 .02/.00:16:1 .10/.06:20:0 |
| α 0.1 | 1 | .04/.02:17:0 .02/.02:20:0 .00/.00:17:2 .03/.03:18:0 .00/.00:21:2 **.12/.13**:18:0 **.16/.14**:18:0 |
| α 0.1 | 2 | .01/.01:18:0 **.16/.17**:19:0 .01/.01:16:0 .04/.07:17:0 .04/.04:19:0 .02/.03:17:0 .09/.04:17:0 |

(bold: a receiver that masks neither outer trigger pixel at τ = 0.1.)

Cells (seeds 0, 1, 2; the mean, then each seed; 10 peers, 3 attackers, 12 rounds; no arm is told f). Each entry is
one ``final()`` cell of this script; they were run from a scratch loop over ``final()`` that prints a line per
cell (and, through a hook on ``p2p_guard.bench.cell.backdoor_success``, each honest peer's final ASR), the same
cells as

    python docs/scripts/backdoor_cells.py --seeds 0 1 2 --attacks sign_flip:scale=10 ipm:epsilon=0.1 alie \
        --arm semantic --arm "A=semantic+dormant:tau=0.1,tau_u=0" --arm "P=semantic+dormant:tau=0.1,units=False"
    python docs/scripts/backdoor_cells.py --seeds 0 1 2 --attacks --partition dirichlet:0.1 \
        --arm semantic --arm "P=semantic+dormant:tau=0.1,units=False"
    python docs/scripts/backdoor_cells.py --seeds 0 1 2 --attacks --backdoor backdoor:position=centre \
        --arm semantic --arm "P=semantic+dormant:tau=0.1,units=False"      # and position=centre,value=-1
    python docs/scripts/backdoor_cells.py --seeds 0 1 2 --attacks --partition dirichlet:0.1 \
        --arm "M=semantic+dormant:tau=0.1,units=False,pool=median"
    python docs/scripts/backdoor_cells.py --seeds 0 1 2 --attacks sign_flip:scale=10 ipm:epsilon=0.1 alie \
        --arm "M=semantic+dormant:tau=0.1,units=False,pool=median"
    python docs/scripts/backdoor_cells.py --seeds 0 1 2 --attacks \
        --arm "Mz=semantic+dormant:tau=0.1,units=False,pool=median,lie=zeros" \
        --arm "P2=semantic+dormant:tau=0.2,units=False"
    python docs/scripts/backdoor_cells.py --seeds 0 --attacks --arm "semantic+dormant:tau=0.1,tau_u=0.02" \
        --arm "semantic+dormant:stat=mean,soft=True,tau=0.3,tau_u=0.02"

A = pixel mask (τ 0.1) and dormant hidden units (τ_u 0, at the receiver's θ_i); P = pixel mask only (τ 0.1);
M = P with a_q the lower median of every peer's published a_q (Byzantine peers publishing 1), so that every
receiver masks the same pixels (a different design: it trusts what the majority publishes about its data).
The semantic row was rerun today; its dirichlet:0.5 clean and backdoor cells match the spectral-filter table's
above to three decimals on every seed, so the attack columns' baseline is that table's (not rerun).

| arm | partition | clean acc | backdoor ASR | backdoor acc |
|---|---|---|---|---|
| semantic | dirichlet:0.5 | 0.930 (0.936, 0.936, 0.917) | 0.881 (0.852, 0.867, 0.923) | 0.923 (0.928, 0.931, 0.911) |
| A | dirichlet:0.5 | 0.918 (0.931, 0.919, 0.903) | 0.035 (0.010, 0.004, 0.092) | 0.905 (0.920, 0.889, 0.906) |
| P | dirichlet:0.5 | 0.929 (0.939, 0.933, 0.915) | **0.047 (0.017, 0.005, 0.120)** | 0.928 (0.935, 0.932, 0.917) |
| M | dirichlet:0.5 | 0.926 (0.931, 0.935, 0.911) | **0.003 (0.003, 0.003, 0.004)** | 0.926 (0.930, 0.929, 0.920) |
| semantic | dirichlet:0.1 | 0.752 (0.814, 0.703, 0.739) | 0.991 (1.000, 1.000, 0.972) | 0.745 (0.803, 0.697, 0.736) |
| P | dirichlet:0.1 | **0.714 (0.776, 0.656, 0.711)** | 0.178 (0.138, 0.250, 0.147) | 0.690 (0.765, 0.611, 0.693) |
| M | dirichlet:0.1 | 0.747 (0.793, 0.720, 0.729) | 0.150 (0.189, 0.158, 0.103) | 0.733 (0.783, 0.678, 0.739) |

| arm (dirichlet:0.5) | sign_flip:scale=10 | ipm:epsilon=0.1 | alie |
|---|---|---|---|
| semantic (spectral table) | 0.904 (0.933, 0.858, 0.922) | 0.904 (0.924, 0.853, 0.936) | 0.899 (0.922, 0.850, 0.925) |
| P | 0.906 (0.933, 0.853, 0.932) | 0.896 (0.918, 0.844, 0.925) | 0.895 (0.922, 0.843, 0.920) |
| M | 0.905 (0.937, 0.849, 0.928) | 0.898 (0.922, 0.844, 0.927) | 0.895 (0.919, 0.847, 0.920) |

Seed 0 only (dirichlet:0.5, backdoor): ``tau=0.1,tau_u=0.02`` ASR 0.014 at accuracy 0.908; ``stat=mean,soft=True,
tau=0.3,tau_u=0.02`` (each column damped by min(1, mean pixel / 0.3)) ASR 0.002 at accuracy 0.848.
P2 (P with τ = 0.2, dirichlet:0.5, backdoor): ASR 0.002 (0.000, 0.004, 0.002) at accuracy 0.916 (0.930, 0.916,
0.902); its clean cells were not run.

Each honest peer's final ASR under P (dirichlet:0.1; peers 0-6): seed 0 0.000, 0.336, 0.127, 0.238, 0.235, 0.028,
0.003; seed 1 0.006, 0.000, 0.003, 0.000, 0.136, 0.821, 0.781; seed 2 0.006, 1.000, 0.022, 0.000, 0.000, 0.000,
0.000. The peers with the highest ASR are those whose own data leaves the outer trigger pixels active (bold in
the activity table: seed 1 peers 5 and 6, 0.82 and 0.78; seed 2 peer 1, 1.00; seed 0 peers 1 and 4, 0.34 and
0.24); on seed 0 peers 2 and 3, which mask both, still reach 0.13 and 0.24, so under this skew the two inner
trigger pixels carry part of the backdoor too. On dirichlet:0.5 seed 2, peer 1 is such a receiver (per-peer ASR
not recorded for that cell).

The trigger where clean data is active (``backdoor:position=centre``, the 2×2 patch on rows/cols 3-4, pixels
non-zero in 80-86 % of the images): the plain backdoor is *not learned* even by the undefended guard (semantic ASR
0.031 (0.028, 0.062, 0.003), P 0.048 (0.022, 0.040, 0.082)): a bright patch on the strokes is what half the
digits already look like, so this cell cannot show the mask's limit. With a value no clean image has there
(``backdoor:position=centre,value=-1``) it is learned, and the mask does nothing against it, as it cannot by
construction (those columns are active for every receiver): semantic ASR 1.000 (1.000, 1.000, 1.000) at accuracy
0.937 (0.938, 0.944, 0.928), P ASR 0.999 (0.998, 1.000, 1.000) at accuracy 0.929 (0.931, 0.937, 0.918).

Result: negative; the guard is unchanged and no stage was built: no variant meets ASR ≤ 10 % on dirichlet:0.1
(P 0.14-0.25, M 0.10-0.19 per seed). The receiver-private mask P meets the ASR target on dirichlet:0.5
on two seeds of three (P: 0.017, 0.005; 0.120 on seed 2) at no clean cost there (−0.1 points on the mean, within 0.3
on every seed) and, on the means, within a point under sign_flip:scale=10, IPM and ALIE (+0.2, −0.8, −0.4; IPM seed
2 −1.1); adding the dormant hidden units (A) brings seed 2 to 0.092 but costs up to 1.7 clean points (seed 1). It
fails on three counts: (1) it protects a receiver only when that receiver's own data leaves the trigger pixels
dormant, which under label skew some honest peers' data does not (the activity table), so ASR stays 0.14-0.25 per
seed on dirichlet:0.1 and 0.120 on dirichlet:0.5 seed 2, where peer 1 masks neither outer pixel; (2) under
dirichlet:0.1 it costs 3.8 clean points (0.752 → 0.714; −3.8, −4.7, −2.8 per seed): a receiver with few classes
masks 15-21 pixels, some of which other honest peers' classes use, and never learns those columns from the others
(each receiver's mask is its own, so the receivers' aggregates differ too); (3) it needs τ above the trigger pixels'
clean activity (strict dormancy, τ = 0, masks the outer trigger pixels for 1 and 4 of 21 receivers: most shards hold
a few digits touching the corner), and any trigger on pixels that clean data uses (the centre with value −1: ASR
1.0) passes it untouched. It is a defence against blank-pixel triggers only, on inputs whose blank pixels are
exactly zero (a centred or normalised input, e.g. mean-subtracted images or token embeddings, has no dormant inputs
at all); an attacker that knows of it moves the trigger.

M, a shared mask (the lower median of every peer's published activity vector, Byzantine peers publishing ones),
fixes the dirichlet:0.5 case: ASR 0.003-0.004 on every seed at −0.4 clean points (−0.5, −0.1, −0.6); there every
receiver masks the same pixels, the outer trigger pixels among them (most peers' data leaves them blank). It does
not fix label skew: on dirichlet:0.1 ASR stays 0.10-0.19 (per peer: seed 0 0.068, 0.117, 0.364, 0.373, 0.003,
0.383, 0.015; seed 1 0.006, 0.003, 0.086, 0.000, 0.096, 0.873, 0.040; seed 2 0.000, 0.716, 0.000, 0.000, 0.003,
0.000, 0.000; on seeds 1 and 2 every receiver masks both outer pixels, on seed 0 only (7, 7), so these peers learn
the trigger through the inner ones, (6, 6) and (7, 6), which half the digits use) and the clean cost is −0.5 on the
mean but −2.1 on seed 0. It also changes the trust model, so it would not be the same stage: each peer must publish
a statistic of its data (64 numbers), for which the protocol has no field, and a Byzantine minority can lie about
it; publishing zeros (``lie=zeros``, to close columns that honest peers use) moved nothing on dirichlet:0.5 (Mz,
backdoor: ASR 0.002 (0.003, 0.003, 0.002) at accuracy 0.925 (0.930, 0.928, 0.918)): the lower median then closes a
pixel that two of the seven honest peers have rare, and on dirichlet:0.5 those are border pixels only (16-18
masked, none off the border; on dirichlet:0.1 19-20, one off the border on seeds 1 and 2: ``--activity`` prints the
shared masks). Its attack columns (dirichlet:0.5, the table above) are within a point of the default's on every
seed (means +0.1, −0.6, −0.4).

Not measured: fashion-mnist; an adaptive trigger chosen against the mask beyond the centre cells (for M too: the
centre columns stay open in every variant, by construction); P2's clean cells; the attack columns on
dirichlet:0.1.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import statistics
from collections.abc import Iterator
from typing import Any

import torch

import p2p_guard.bench.cell as bench_cell
import p2p_guard.guard.semantic as semantic
from p2p_guard.api import run_bench_cell
from p2p_guard.bench.cell import CellSpec
from p2p_guard.guard.centre import robust_centre
from p2p_guard.guard.linalg import cosines_to, row_norms, scalar_median
from p2p_guard.plugin_spec import parse_value, split_params

N, F = 10, 3
PARTITION = "dirichlet:0.5"
ATTACKS = ("sign_flip:scale=10", "ipm:epsilon=0.1", "alie", "adaptive")
FLOOR_ATTACK = "backdoor:fraction=0.001"
"""One "attacker" that poisons ⌊0.001 · 32⌋ = 0 examples of each batch: an honest peer whose run still measures
the trigger's ASR, the floor of the backdoor target (triggered clean inputs that land on the target anyway)."""
Params = tuple[tuple[str, Any], ...]


def parse_params(text: str) -> Params:
    """``k=v,...`` → sorted pairs, values read as the guard spec parser reads them (``p2p_guard.plugin_spec``)."""
    if not text:
        return ()
    return tuple(sorted((key, parse_value(raw)) for key, raw in split_params(text, spec=text, what="arm").items()))


def parse_arm(arm: str) -> tuple[str, str, Params, str | None, dict[str, Any]]:
    """``[LABEL=]GUARD[:k=v,...][+PROTO[:k=v,...]]`` → (label, guard, params, prototype, prototype params)."""
    head = arm.split(":", 1)[0].split("+", 1)[0]
    label, spec = arm.split("=", 1) if "=" in head else (arm, arm)
    spec, _, proto = spec.partition("+")
    name, _, rest = spec.partition(":")
    proto_name, _, proto_rest = proto.partition(":")
    return label, name, parse_params(rest), proto_name or None, dict(parse_params(proto_rest))


def foolsgold_weights(rows: torch.Tensor, centre: torch.Tensor, kappa: float) -> torch.Tensor:
    """FoolsGold's weights (with pardoning and the logit) on the rows' deviations from ``centre``; (m,) float64."""
    m = len(rows)
    if m < 2:
        return torch.ones(m, dtype=torch.float64)
    res = (rows - centre).to(torch.float64)
    unit = res / torch.clamp(torch.linalg.vector_norm(res, dim=1), min=1e-300)[:, None]
    cs = unit @ unit.T
    cs.fill_diagonal_(-math.inf)
    v = cs.max(dim=1).values
    pardon = (v[:, None] < v[None, :]) & (v[None, :] > 0)
    cs = torch.where(pardon, cs * v[:, None] / torch.where(v[None, :] > 0, v[None, :], 1.0), cs)
    alpha = torch.clamp(1.0 - cs.max(dim=1).values, 0.0, 1.0)
    if alpha.max() <= 0:
        return torch.zeros(m, dtype=torch.float64)
    alpha = alpha / alpha.max()
    alpha = torch.where(alpha >= 1.0, 0.99, alpha)
    return torch.clamp(kappa * (torch.log(torch.clamp(alpha, min=1e-300) / (1.0 - alpha)) + 0.5), 0.0, 1.0)


def hdbscan_outliers(rows: torch.Tensor) -> list[int]:
    """Rows outside the largest HDBSCAN cluster of the cosine distances (FLAME's clustering step)."""
    from sklearn.cluster import HDBSCAN  # noqa: PLC0415 (scikit-learn: only this prototype needs it here)

    r = rows.to(torch.float64)
    unit = r / torch.clamp(torch.linalg.vector_norm(r, dim=1), min=1e-300)[:, None]
    distances = torch.clamp(1.0 - unit @ unit.T, min=0.0).numpy()
    labels = HDBSCAN(metric="precomputed", min_cluster_size=len(rows) // 2 + 1, min_samples=1,
                     allow_single_cluster=True, copy=True).fit(distances).labels_
    found = [int(v) for v in labels if v >= 0]
    largest = max(set(found), key=found.count) if found else None
    return [i for i, v in enumerate(labels) if v != largest]


def spectral_scores(residuals: torch.Tensor, generator: torch.Generator | None = None, iters: int = 1,
                    b: int = 0) -> torch.Tensor:
    """DnC's outlier scores: ``(⟨r_i − r̄, v⟩)²`` with v the top right singular vector of the centred rows.

    With ``b > 0``, each of ``iters`` iterations takes a random subset of ``b`` coordinates (DnC's subsampling)
    and the score of a row is its largest over the iterations, each divided by that iteration's median (so a row
    flagged by any iteration is flagged, as DnC intersects the good sets). (m,) float64.
    """
    r = residuals.to(torch.float64)
    out = torch.zeros(len(r), dtype=torch.float64)
    for _ in range(max(iters, 1) if b > 0 else 1):
        sub = r if b <= 0 or b >= r.shape[1] else r[:, torch.randperm(r.shape[1], generator=generator)[:b]]
        centred = sub - sub.mean(dim=0)
        v = torch.linalg.svd(centred, full_matrices=False)[2][0]
        score = (centred @ v) ** 2
        out = torch.maximum(out, score / torch.clamp(score.median(), min=1e-300))
    return out


def spectral_cut(scores: list[float], budget: int, cut: str, k: float) -> int:
    """How many of the highest ``scores`` (sorted descending) to remove, at most ``budget``.

    ``count``: ``budget``; ``gap``: up to the largest ratio between consecutive scores among the first
    ``budget + 1`` (none if that ratio is below ``k``); ``mad``: those above median + k · 1.4826 · MAD.
    """
    if budget <= 0 or not scores:
        return 0
    if cut == "count":
        return min(budget, len(scores))
    if cut == "gap":
        ratios = [scores[j] / max(scores[j + 1], 1e-300) for j in range(min(budget, len(scores) - 1))]
        if not ratios:
            return 0
        j = max(range(len(ratios)), key=ratios.__getitem__)
        return j + 1 if ratios[j] >= k else 0
    if cut == "mad":
        med = statistics.median(scores)
        mad = statistics.median(abs(v - med) for v in scores)
        return min(budget, sum(v > med + k * 1.4826 * mad for v in scores))
    raise ValueError(f"unknown cut {cut!r}")


pool_peers: list[Any] = [None]
"""``(peers, byzantine flags)`` of the running cell, for ``dormant:pool=median`` (set by the prototype)."""


def dormant_keep(local: Any, params: dict[str, Any]) -> torch.Tensor:
    """The ``dormant`` prototype's per-coordinate factor in [0, 1] for receiver ``local`` (a ``LocalModel``).

    Only for the MLP ``p → h → c`` of the image tasks (flat layout W1 (h, p), b1 (h,), W2 (c, h), b2 (c,)).
    Activity on the receiver's own training images X (its private shard, nothing else):
    a_q = mean_x 1[x_q > 0] (``stat=frac``) or mean_x x_q (``stat=mean``) per input pixel q;
    u_k = mean_x 1[(W1 x + b1)_k > 0] per hidden unit k at the receiver's θ_i.
    ``soft=False``: factor 0 where a_q ≤ ``tau`` (column q of W1) or u_k ≤ ``tau_u`` (row k of W1, b1[k],
    column k of W2), else 1; ``soft=True``: factor min(1, a_q / tau) on the columns of W1 (units as above).
    ``pool=median``: a_q is the lower median over every peer's published a_q instead (a Byzantine peer publishes
    1 everywhere, to keep every column open, or with ``lie=zeros`` 0 everywhere, to close the honest ones).
    ``units=False`` leaves the hidden units alone. (d,) float32.
    """
    shapes = [tuple(q.shape) for q in local.model.parameters()]
    if len(shapes) != 4 or len(shapes[0]) != 2:
        raise ValueError(f"dormant: an MLP p → h → c is needed, got parameter shapes {shapes}")
    (h, p), (c, _) = shapes[0], shapes[2]
    theta = local.theta.to(torch.float32)

    def activity(peer: Any) -> torch.Tensor:
        xs = peer.task._train_images(peer.shard.train).to(torch.float32)  # that peer's private shard
        return (xs > 0).to(torch.float32).mean(dim=0) if params.get("stat", "frac") == "frac" else xs.mean(dim=0)

    x = local.task._train_images(local.shard.train).to(torch.float32)
    a = activity(local)
    if params.get("pool", "own") == "median":  # every peer publishes its a; Byzantine peers publish ``lie``
        peers, byzantine = pool_peers[0]
        lie = torch.full_like(a, 0.0 if params.get("lie", "ones") == "zeros" else 1.0)
        a = torch.stack([lie if bad else activity(q) for q, bad in zip(peers, byzantine, strict=True)]).median(0).values
    tau = float(params.get("tau", 0.0))
    soft = bool(params.get("soft", False))
    col = torch.clamp(a / max(tau, 1e-12), max=1.0) if soft else (a > tau).to(torch.float32)
    w1 = theta[: h * p].reshape(h, p)
    b1 = theta[h * p : h * p + h]
    unit = torch.ones(h)
    if params.get("units", True):
        u = ((x @ w1.T + b1) > 0).to(torch.float32).mean(dim=0)
        unit = (u > float(params.get("tau_u", 0.0))).to(torch.float32)
    keep = torch.ones(len(theta))
    keep[: h * p] = (unit[:, None] * col[None, :]).reshape(-1)
    keep[h * p : h * p + h] = unit
    keep[h * p + h : h * p + h + c * h] = unit[None, :].expand(c, h).reshape(-1)
    return keep


@contextlib.contextmanager
def prototype(name: str | None, params: dict[str, Any]) -> Iterator[None]:
    """Wrap ``SemanticGuard._aggregate`` with a prototype defence while the block runs."""
    original = semantic.SemanticGuard._aggregate
    original_judge = bench_cell._judge
    if name is None:
        yield
        return
    receiver: list[Any] = [None]  # the LocalModel whose guard call runs (``dormant`` reads its own data)

    def judge(*args: Any) -> Any:
        receiver[0] = args[6][args[8]]  # _judge(guard, rows, round_, spec, run_id, names, peers, timer, j)
        n, f = args[3].n, args[3].f
        pool_peers[0] = (args[6], [i >= n - f for i in range(n)])  # the cell's attackers are the last f
        return original_judge(*args)

    # (receiver, sender) → (round, Σ residual before this round, Σ residual with it)
    history: dict[tuple[str, str], tuple[int, torch.Tensor, torch.Tensor]] = {}
    streaks: dict[tuple[str, str], tuple[int, int, int]] = {}  # (receiver, sender) → (round, before, after)

    def dnc(clipped: torch.Tensor, centre: torch.Tensor, rejected: dict[int, tuple[str, str]], f: int,
            ctx: Any) -> None:
        accepted = [i for i in range(len(clipped)) if i not in rejected]
        if len(accepted) < 3:
            return
        rows = clipped.to(torch.float64)
        if params.get("unit", True):  # unit residuals from the robust centre
            res = rows - centre.to(torch.float64)
            res = res / torch.clamp(torch.linalg.vector_norm(res, dim=1), min=1e-300)[:, None]
        else:  # DnC as published: the rows themselves (centred on the accepted rows' mean below)
            res = rows
        if params.get("hist", False):  # cross-round: Σ over rounds of each sender's residual, per receiver
            me = ctx.senders[ctx.own_index] if ctx.own_index is not None else ""
            summed = []
            for i, sender in enumerate(ctx.senders):
                last = history.get((me, sender))
                if last is None or ctx.round == 0 or last[0] > ctx.round:
                    prev = torch.zeros_like(res[i])  # a new cell (or a new history)
                else:
                    prev = last[1] if last[0] == ctx.round else last[2]  # a second call in a round replaces it
                history[(me, sender)] = (ctx.round, prev, prev + res[i])
                summed.append(prev + res[i])
            res = torch.stack(summed)
        score = spectral_scores(res[accepted], ctx.generator, int(params.get("iters", 1)), int(params.get("b", 0)))
        budget = math.ceil(params.get("c", 1.0) * f) - (len(clipped) - len(accepted))
        own = params.get("own", "skip")
        ranked = sorted((j for j in range(len(accepted)) if own != "skip" or accepted[j] != ctx.own_index),
                        key=lambda j: -float(score[j]))
        drop = spectral_cut([float(score[j]) for j in ranked], budget, params.get("cut", "count"),
                            float(params.get("k", 2.0)))
        if params.get("streak", 0) > 0:  # reject only a sender in the top for `streak` consecutive rounds
            me = ctx.senders[ctx.own_index] if ctx.own_index is not None else ""
            top = {accepted[j] for j in ranked[:drop]}
            for i, sender in enumerate(ctx.senders):
                seen = streaks.get((me, sender))
                if seen is None or ctx.round == 0 or seen[0] > ctx.round:
                    before = 0
                else:
                    before = seen[1] if seen[0] == ctx.round else seen[2]
                streaks[(me, sender)] = (ctx.round, before, before + 1 if i in top else 0)
            ranked = [j for j in ranked if streaks[(me, ctx.senders[accepted[j]])][2] >= params["streak"]]
            drop = len(ranked)
        for j in ranked[:drop]:
            if own == "remove" or accepted[j] != ctx.own_index:  # "remove": a diagnostic, never a defence
                rejected[accepted[j]] = ("spectral", f"DnC score {float(score[j]):.3g} x median")

    def aggregate(self: Any, clipped: torch.Tensor, centre: torch.Tensor, cosines: torch.Tensor,
                  rejected: dict[int, tuple[str, str]], f: int, ctx: Any) -> torch.Tensor:
        if name == "dnc":
            dnc(clipped, centre, rejected, f, ctx)
            return original(self, clipped, centre, cosines, rejected, f, ctx)
        if name == "dormant":
            out = original(self, clipped, centre, cosines, rejected, f, ctx)
            keep = dormant_keep(receiver[0], params).to(out.dtype)
            fill = torch.zeros_like(out)
            if params.get("fill", "own") == "own" and ctx.own_index is not None:
                fill = clipped[ctx.own_index]
            return keep * out + (1.0 - keep) * fill
        if name == "hdbscan":
            for i in hdbscan_outliers(clipped):
                if i != ctx.own_index:
                    rejected.setdefault(i, ("cluster", "outside the largest HDBSCAN cluster"))
            return original(self, clipped, centre, cosines, rejected, f, ctx)
        accepted = [i for i in range(len(clipped)) if i not in rejected]
        kept = clipped[accepted]
        if name == "sign_mask":
            out = original(self, clipped, centre, cosines, rejected, f, ctx)
            agree = torch.sign(kept).mean(dim=0).abs()
            return torch.where(agree >= params.get("agree", 0.4), out, torch.zeros_like(out))
        if name != "foolsgold":
            raise ValueError(f"unknown prototype {name!r}")
        w = foolsgold_weights(kept, centre, params.get("kappa", 1.0))
        if ctx.own_index in accepted:
            w[accepted.index(ctx.own_index)] = 1.0
        w = (w / w.sum()).to(kept.dtype)
        if not (self.clip_remaining and len(rejected) < f):
            return (w[:, None] * kept).sum(dim=0)
        diffs = kept - centre
        dists = row_norms(diffs)
        radius = scalar_median(dists)
        scale = torch.where(dists > radius, radius / torch.clamp(dists, min=1e-300), 1.0).to(kept.dtype)
        return centre + ((w * scale)[:, None] * diffs).sum(dim=0)

    semantic.SemanticGuard._aggregate = aggregate  # type: ignore[method-assign]
    bench_cell._judge = judge
    try:
        yield
    finally:
        semantic.SemanticGuard._aggregate = original  # type: ignore[method-assign]
        bench_cell._judge = original_judge


def final(guard: str, params: Params, attack: str | None, seed: int, f: int = F,
          partition: str = PARTITION) -> dict[str, Any]:
    """The ``final`` record (accuracy, loss, asr) of one cell, with its honest false-positive rate ``fp_rate``.

    ``f`` attackers when ``attack`` is set; ``fp_rate`` = honest rows rejected / honest rows judged by honest peers.
    """
    spec = CellSpec(task="digits", guard=guard, attack=attack, n=N, f=f if attack else 0,
                    partition=partition, seed=seed, rounds=12, guard_params=params, reputation=False)
    result = run_bench_cell(spec)
    return {**result["final"], "fp_rate": result["verdicts"]["fp_rate"]}


def cell(values: list[float]) -> str:
    """``mean (v_0, v_1, ...)`` with three decimals."""
    return f"{sum(values) / len(values):.3f} ({', '.join(f'{v:.3f}' for v in values)})"


def table(arms: list[str], seeds: list[int], attacks: tuple[str, ...] = ATTACKS, partition: str = PARTITION,
          backdoor: bool = True, backdoor_spec: str = "backdoor") -> None:
    """Print the table of the arms (clean, ``backdoor_spec`` unless ``backdoor`` is false, then ``attacks``)."""
    head = ["guard", "clean acc", "clean honest FP", "backdoor ASR", "backdoor acc", *attacks]
    print("| " + " | ".join(head) + " |")  # noqa: T201
    print("|" + "---|" * len(head))  # noqa: T201
    for arm in arms:
        label, guard, params, proto, proto_params = parse_arm(arm)
        with prototype(proto, proto_params):
            clean = [final(guard, params, None, s, partition=partition) for s in seeds]
            bd = [final(guard, params, backdoor_spec, s, partition=partition) for s in seeds] if backdoor else []
            rest = [[final(guard, params, a, s, partition=partition)["accuracy"] for s in seeds] for a in attacks]
        row = [label, cell([c["accuracy"] for c in clean]), cell([c["fp_rate"] for c in clean]),
               cell([b["asr"] for b in bd]) if bd else "-", cell([b["accuracy"] for b in bd]) if bd else "-",
               *(cell(r) for r in rest)]
        print("| " + " | ".join(row) + " |", flush=True)  # noqa: T201


def floor(arms: list[str], seeds: list[int]) -> None:
    """Print each arm's backdoor ASR with no attacker (:data:`FLOOR_ATTACK` at 1 of 10) and its accuracy."""
    print("| guard | ASR floor | accuracy |")  # noqa: T201
    print("|---|---|---|")  # noqa: T201
    for arm in arms:
        label, guard, params, proto, proto_params = parse_arm(arm)
        with prototype(proto, proto_params):
            runs = [final(guard, params, FLOOR_ATTACK, s, f=1) for s in seeds]
        print(f"| {label} | {cell([r['asr'] for r in runs])} | {cell([r['accuracy'] for r in runs])} |",  # noqa: T201
              flush=True)


def probe(seeds: list[int]) -> None:
    """Print what receiver peer00 of the semantic guard saw, round by round, under backdoor at 3 of 10."""
    original = semantic.SemanticGuard.judge
    seen: list[tuple[int, list[str], torch.Tensor]] = []

    def judge(self: Any, updates: torch.Tensor, ctx: Any) -> Any:
        if ctx.senders[ctx.own_index] == "peer00":
            seen.append((ctx.round, list(ctx.senders), updates.clone()))
        return original(self, updates, ctx)

    print("| seed | round | norm h / b | cos to centre h / b | residual cos h-h / b-b | max h-h "  # noqa: T201
          "| history cos h-h max / b-b min, mean |")
    print("|---|---|---|---|---|---|---|")  # noqa: T201
    semantic.SemanticGuard.judge = judge  # type: ignore[method-assign]
    try:
        for seed in seeds:
            seen.clear()
            final("semantic", (), "backdoor", seed)
            history: torch.Tensor | None = None  # Σ_r unit residual per row, as guard/collusion.py accumulates
            for round_, senders, rows in seen:
                bad = [int(s[4:]) >= N - F for s in senders]
                f_hat = (len(rows) - 1) // 2
                centre = robust_centre(rows, f_hat)
                norms, cos = row_norms(rows), cosines_to(rows, centre)
                res = (rows - centre).to(torch.float64)
                unit = res / torch.linalg.vector_norm(res, dim=1)[:, None]
                pair = unit @ unit.T
                hh = [float(pair[i, j]) for i in range(len(rows)) for j in range(i) if not bad[i] and not bad[j]]
                bb = [float(pair[i, j]) for i in range(len(rows)) for j in range(i) if bad[i] and bad[j]]
                history = unit if history is None else history + unit
                hunit = history / torch.linalg.vector_norm(history, dim=1)[:, None]
                hpair = hunit @ hunit.T
                hh_hist = [float(hpair[i, j]) for i in range(len(rows)) for j in range(i) if not bad[i] and not bad[j]]
                bb_hist = [float(hpair[i, j]) for i in range(len(rows)) for j in range(i) if bad[i] and bad[j]]

                def med(x: torch.Tensor, b: bool, bad: list[bool] = bad) -> float:
                    return statistics.median(float(v) for v, q in zip(x, bad, strict=True) if q == b)

                print(f"| {seed} | {round_} | {med(norms, False):.3f} / {med(norms, True):.3f} | "  # noqa: T201
                      f"{med(cos, False):.2f} / {med(cos, True):.2f} | {statistics.mean(hh):.2f} / "
                      f"{statistics.mean(bb):.2f} | {max(hh):.2f} | {max(hh_hist):.2f} / {min(bb_hist):.2f}, "
                      f"{statistics.mean(bb_hist):.2f} |", flush=True)
    finally:
        semantic.SemanticGuard.judge = original  # type: ignore[method-assign]


def activity(seeds: list[int], partition: str, tau: float = 0.1) -> None:
    """Print each honest peer's activity of the trigger's outer pixels and its count of dormant pixels.

    a_q = the fraction of the peer's own training images with pixel q > 0, for (6, 7) and (7, 7), how many
    of the 64 pixels have a_q ≤ ``tau`` (``dormant``'s mask; it does not depend on training), and how many of
    the trigger's four pixels have a_q = 0 exactly (what strict dormancy, τ = 0, would mask); then, per seed,
    the pixels that ``pool=median`` masks (the same for every receiver).
    """
    from p2p_guard.tasks import load_task  # noqa: PLC0415
    from p2p_guard.training.local import LocalModel  # noqa: PLC0415

    task = load_task("digits")
    print(f"| seed | a(6,7) / a(7,7) : pixels with a <= {tau:g} : trigger pixels with a = 0, honest peers "  # noqa: T201
          f"0-{N - F - 1} ({partition}) |")
    print("|---|---|")  # noqa: T201
    for seed in seeds:
        out = []
        for i in range(N - F):
            x = task._train_images(task.shard(N, i, partition, seed).train)
            a = (x > 0).to(torch.float32).mean(dim=0)
            zero = sum(int(a[q] == 0) for q in (54, 55, 62, 63))
            out.append(f"{a[55]:.2f}/{a[63]:.2f}:{int((a <= tau).sum())}:{zero}")
        print(f"| {seed} | {' '.join(out)} |")  # noqa: T201
    for seed in seeds:  # the shared mask of ``pool=median``, as every honest receiver computes it
        peers = [LocalModel(task, seed=seed, num_shards=N, shard_index=i, partition=partition) for i in range(N)]
        pool_peers[0] = (peers, [i >= N - F for i in range(N)])
        for lie in ("ones", "zeros"):
            keep = dormant_keep(peers[0], {"tau": tau, "units": False, "pool": "median", "lie": lie})
            masked = [q for q in range(64) if float(keep[q]) == 0.0]  # row 0 of W1: one entry per pixel
            inner = [divmod(q, 8) for q in masked if 0 < q // 8 < 7 and 0 < q % 8 < 7]
            print(f"seed {seed}, pool=median, Byzantine peers publish {lie}: {len(masked)} pixels masked, "  # noqa: T201
                  f"trigger pixels {[divmod(q, 8) for q in (54, 55, 62, 63) if q in masked]}, off the border {inner}")


def main() -> None:
    """Run the cells and print the table (or the probe)."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--arm", action="append", default=None, help="[LABEL=]GUARD[:k=v,...][+PROTO[:k=v]]")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    p.add_argument("--probe", action="store_true", help="print what the semantic guard saw instead")
    p.add_argument("--floor", action="store_true", help="print the backdoor's ASR with no attacker instead")
    p.add_argument("--activity", action="store_true", help="print the dormant mask's pixel activity instead")
    p.add_argument("--attacks", nargs="*", default=None, help=f"the other attacks (default: {' '.join(ATTACKS)})")
    p.add_argument("--partition", default=PARTITION, help=f"the cells' data partition (default: {PARTITION})")
    p.add_argument("--no-backdoor", action="store_true", help="table mode: skip the backdoor cells")
    p.add_argument("--backdoor", default="backdoor", help="table mode: the backdoor attack's spec "
                   "(e.g. backdoor:position=centre)")
    args = p.parse_args()
    if args.activity:
        activity(args.seeds, args.partition)
    elif args.probe:
        probe(args.seeds)
    elif args.floor:
        floor(args.arm or ["mean", "semantic"], args.seeds)
    else:
        table(args.arm or ["semantic", "median", "mean"], args.seeds,
              ATTACKS if args.attacks is None else tuple(args.attacks), args.partition, not args.no_backdoor,
              args.backdoor)


if __name__ == "__main__":
    main()
