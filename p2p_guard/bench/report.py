"""The benchmark's Markdown report: every table generated from the cell results, nothing typed by hand."""

from __future__ import annotations

import datetime as dt
import importlib.metadata
import os
import platform
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from p2p_guard.bench.plots import attack_slug

__all__ = ["machine_info", "render", "write_report"]

_GIT_TIMEOUT_S = 10.0


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _memory_gib() -> float | None:
    try:
        import psutil

        return psutil.virtual_memory().total / 2**30
    except (ImportError, OSError):
        return None


def _git(*args: str) -> str | None:
    root = Path(__file__).resolve().parents[2]
    try:
        out = subprocess.run(
            ["git", "-C", str(root), *args],  # noqa: S607 - git from PATH
            capture_output=True,
            text=True,
            timeout=_GIT_TIMEOUT_S,
            check=True,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip()


def machine_info() -> dict[str, str]:
    """The machine and versions a run used: CPU, cores, memory, OS, Python, torch, numpy, p2p_guard commit."""
    import numpy
    import torch

    commit = _git("rev-parse", "HEAD") or "unknown (not a git checkout)"
    dirty = _git("status", "--porcelain", "--untracked-files=no")
    if dirty:
        commit += " with uncommitted changes"
    memory = _memory_gib()
    try:
        version = importlib.metadata.version("p2p_guard")
    except importlib.metadata.PackageNotFoundError:
        version = "unknown"
    return {
        "cpu": _cpu_model(),
        "cores": str(os.cpu_count()),
        "memory": f"{memory:.0f} GiB" if memory else "unknown",
        "os": platform.platform(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "numpy": numpy.__version__,
        "p2p_guard": f"{version}, commit {commit}",
    }


def _pct(stat: Any, *, std: bool = True) -> str:
    if stat is None:
        return "–"
    if std and stat.count > 1:
        return f"{100 * stat.mean:.1f} ± {100 * stat.std:.1f}"
    return f"{100 * stat.mean:.1f}"


def _rate(value: float | None, digits: int = 1) -> str:
    return "–" if value is None else f"{100 * value:.{digits}f}%"


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return lines + [""]


def _seeds(count: int) -> str:
    return "seed 0" if count == 1 else f"seeds 0–{count - 1}"


def _duration(seconds: float) -> str:
    minutes, secs = divmod(int(round(seconds)), 60)
    return f"{minutes} min {secs:02d} s" if minutes else f"{secs} s"


def _what_a_swarm_gets(cfg: Any, summary: dict[str, Any], guard: str = "semantic") -> list[str]:
    """The plain-words summary: the default guard's worst case, where another rule beats it, its backdoor ASR.

    Every figure is read from ``summary``; the sentences only say which is larger.
    """
    if guard not in summary["worst_case"] or summary["worst_case"][guard] is None:
        return []
    wc = summary["worst_case"][guard]
    clean = summary["headline"][guard].get("none")
    others = {g: v for g, v in summary["worst_case"].items() if g != guard and v is not None}
    out = ["## What a user's swarm gets", ""]
    line = (f"- With the defaults a peer runs (the `{guard}` guard, f unknown), {cfg.f} Byzantine of {cfg.n} on "
            f"`{cfg.partition}`: final accuracy {_pct(wc[1])} % under its worst attack (`{wc[0]}`)")
    if clean is not None:
        line += f", against {_pct(clean)} % with no attacker ({100 * (wc[1].mean - clean.mean):+.1f} points)"
    if others:
        best = max(others, key=lambda g: others[g][1].mean)
        verb = "above" if wc[1].mean > others[best][1].mean else "**not above**"
        line += (f"; {verb} the best other rule's worst case, `{best}` {_pct(others[best][1])} % "
                 f"(`{others[best][0]}`)")
    out.append(line + ".")
    lost = []
    total = 0
    for partition in cfg.sweep_partitions:
        for fr in cfg.sweep_fractions:
            mine = summary["sweep"].get(guard, {}).get(partition, {}).get(fr)
            if not round(fr * cfg.n) or mine is None:
                continue
            total += 1
            rivals = {g: by[partition][fr] for g, by in summary["sweep"].items()
                      if g != guard and by.get(partition, {}).get(fr) is not None}
            if rivals:
                best = max(rivals, key=lambda g: rivals[g][1].mean)
                if rivals[best][1].mean >= mine[1].mean:
                    lost.append(f"`{partition}` at {round(100 * fr)} % (`{guard}` {100 * mine[1].mean:.1f}, "
                                f"`{best}` {100 * rivals[best][1].mean:.1f})")
    if total:
        out.append(f"- Sweep (each rule's worst swept attack, f unknown, {_seeds(cfg.sweep_seeds)}; a tie counts "
                   f"against `{guard}`): `{guard}` has the best worst case in "
                   f"{total - len(lost)} of {total} (partition, fraction) settings"
                   + (f"; not in {'; '.join(lost)}." if lost else "."))
    for attack, by_guard in summary["asr"].items():
        stat = by_guard.get(guard)
        if stat is not None:
            out.append(f"- `{attack}` at {cfg.f} of {cfg.n}: attack success rate {_pct(stat)} % against `{guard}` "
                       "on the honest peer it fooled most"
                       + (" (not defended)." if stat.mean > 0.1 else "."))
    rate = summary["fp"].get(guard, {}).get("fp_rate")
    if rate is not None:
        out.append(f"- Honest updates rejected by honest `{guard}` receivers: {_rate(rate, 2)} of verdicts "
                   "(headline cells, clean included).")
    return out + [""]


def render(cfg: Any, summary: dict[str, Any], meta: dict[str, Any], plots_rel: str) -> str:
    """The Markdown text of the report.

    Args:
        cfg: the run's :class:`~p2p_guard.bench.robustness.BenchConfig`.
        summary: :func:`~p2p_guard.bench.robustness.summarise` of its results.
        meta: ``command``, ``wall_s``, ``jobs``, ``machine`` (:func:`machine_info`), ``numel``, ``model``,
            ``finished`` (ISO time), ``cells_file``.
        plots_rel: the plots' directory relative to the report.
    """
    guards = list(cfg.guards)
    f, n = cfg.f, cfg.n
    machine = meta["machine"]
    out = [
        f"# Robustness benchmark ({cfg.mode})",
        "",
        "Generated by `p2p-guard bench robustness`; every figure below comes from the run it describes. Do "
        "not edit this file: rerun the command.",
        "",
        "## Run",
        "",
        f"- Command: `{meta['command']}`",
        f"- Finished {meta['finished']}; wall time {_duration(meta['wall_s'])} with {meta['jobs']} worker "
        f"process(es); {summary['cells']} cells, {_duration(summary['cell_seconds'])} of cell time "
        f"({_duration(summary['cell_cpu_seconds'])} of CPU time)"
        + (
            f"; {meta['reused_cells']} cells were reused from an earlier run's cell file (`--resume`), so "
            "the wall time covers only the rest."
            if meta.get("reused_cells")
            else "."
        ),
        f"- Machine: {machine['cpu']}, {machine['cores']} cores, {machine['memory']} RAM; {machine['os']}.",
        f"- Versions: Python {machine['python']}, torch {machine['torch']}, numpy {machine['numpy']}, "
        f"p2p_guard {machine['p2p_guard']}.",
        f"- Task `{cfg.task}` (options {dict(cfg.task_options) or 'default'}): {meta['model']}, "
        f"d = {meta['numel']:,} parameters.",
        f"- Swarm: n = {n} peers, f = {f} Byzantine (the last {f} peer indices), partition "
        f"`{cfg.partition}`; "
        f"every arm runs {cfg.rounds} outer rounds of H = {cfg.inner_steps} inner AdamW steps (the task's "
        f"defaults), outer Nesterov lr 0.7, momentum 0.9; {_seeds(cfg.seeds)}.",
        "- No rule is told f (no oracle): `semantic` takes f̂ = ⌊(n − 1)/2⌋, rules that need an f get the "
        "default f̂ a user's peer gets (`guard.base.default_f`); the expert-override table, where present, "
        "gives them the true f. Parameters are the registry defaults, the same for every attack. Each honest "
        "receiver has a private held-out `loss_at` (the `semantic` guard's loss stage).",
        "- Peers run in one process with the networked peer's own code (`LocalModel.train_round` / `apply`, "
        "`attacks.apply.attacked_update`, `guard.apply.judge_rows`, generators from `round_generator` with "
        "the swarm's salts); see `p2p_guard/bench/cell.py`. "
        + (
            "Every cell ran the guard for every receiver in every round, as a swarm's peers do."
            if summary.get("every_receiver")
            else "Every cell kept one shared θ: the guard gave every receiver the same bits (checked every round)."
            if summary["shared_theta"]
            else "Some cells ran the guard once per receiver: its result depended on the receiver."
        )
        + (
            " After the outer step every peer mixed its θ and outer momentum with 8 sampled others by the swarm's "
            "clipped gossip (`bench/mixing.py`, the peer's defaults; skipped while every model is equal, when it "
            "would move nothing)."
            if summary.get("mixing")
            else " No mixing step: each peer stepped its own model only (the cell before 2026-12-07; a swarm's "
            "peers also mix their θ with 8 sampled others after each step, which pulls models that a "
            "receiver-dependent guard parts back together; `bench/mixing.py`)."
        ),
        "- Attacks: " + ", ".join(f"`{a}`" for a in cfg.attacks) + ". Wire attacks (forged or malformed "
        "envelopes and payloads) are out of scope here: they meet the integrity stage, which only a "
        "networked swarm (`p2p-guard simulate`) exercises.",
        (
            "- Every peer ran the swarm's reputation, as a networked peer does by default: its own verdicts and "
            "every other peer's ballots folded after each round, and the senders it excludes dropped before its "
            "guard from the next round on (`bench/standing.py`, `guard/reputation.py`); an excluded row counts as "
            "rejected (reason `excluded`). Reports before 2026-12-07's change ran the guard alone "
            "(`CellSpec.reputation=False`)."
            if summary.get("reputation")
            else "- The swarm's reputation (votes across rounds, exclusion of persistently rejected senders; "
            "`swarm/standing.py`) is not run here: every figure is the guard's alone, round by round. A networked "
            "swarm runs it by default (`--no-reputation` turns it off, as the bench-vs-swarm test does)."
        ),
    ]
    if cfg.skipped_attacks:
        out.append(
            "- Not run (the registry does not accept the spec): "
            + "; ".join(f"`{spec}` ({why})" for spec, why in cfg.skipped_attacks)
            + "."
        )
    if summary.get("failed"):
        out.append(f"- **{len(summary['failed'])} cells failed** and are left out of every table: "
                   + "; ".join(f"`{c['arm']}` / `{c['attack']}` (f = {c['f']}, `{c['partition']}`, seed "
                               f"{c['seed']}): {c['error']}" for c in summary["failed"]) + ".")  # fmt: skip
    if summary.get("skipped_steps"):
        out.append(
            f"- {summary['skipped_steps']} (honest peer, round) outer steps were skipped because the "
            "aggregate was not finite (overflow); the model stayed unchanged those rounds."
        )
    out.append("")
    out += _what_a_swarm_gets(cfg, summary)

    clean = summary["clean_mean"]
    out += [
        f"## Final test accuracy (%), n = {n}, f = {f}, `{cfg.partition}`",
        "",
        f"Mean ± standard deviation over {_seeds(cfg.seeds)}, after {cfg.rounds} outer rounds. `none`: no "
        f"attacker (all {n} peers honest). C = `mean` with no attacker = {_pct(clean)}.",
        "",
    ]
    rows = [[f"`{a}`", *(_pct(summary["headline"][g][a]) for g in guards)] for a in summary["columns"]]
    rows.append(
        [
            "**worst case**",
            *(f"**{_pct(wc[1])}**" if (wc := summary["worst_case"][g]) else "–" for g in guards),
        ]
    )
    rows.append(
        ["worst attack", *(f"`{wc[0]}`" if (wc := summary["worst_case"][g]) else "–" for g in guards)]
    )
    out += _table(["attack", *(f"`{g}`" for g in guards)], rows)

    out += ["## Worst case over attacks", ""]
    rows = []
    for g in sorted(
        guards, key=lambda g: -(summary["worst_case"][g][1].mean if summary["worst_case"][g] else -1)
    ):
        wc = summary["worst_case"][g]
        drop = f"{100 * (wc[1].mean - clean.mean):+.1f}" if wc and clean else "–"
        rows.append(
            [
                f"`{g}`",
                _pct(wc[1]) if wc else "–",
                f"`{wc[0]}`" if wc else "–",
                _pct(summary["headline"][g]["none"]),
                drop,
            ]
        )
    out += _table(["aggregator", "worst case (%)", "worst attack", "clean (%)", "worst − C (points)"], rows)

    if summary.get("expert"):
        out += [
            "## True f given (expert override)",
            "",
            f"The tables above tell no rule the number of attackers (f unknown: `semantic` takes f̂ = ⌊(n − 1)/2⌋, "
            f"rules that need f get the user's default f̂). Here the rules that accept an f are told the true "
            f"f = {f} (`--assumed-byzantine {f}`), a configuration no user of an open swarm can have. Final "
            f"accuracy (%) after {cfg.rounds} outer rounds, "
            f"{_seeds(cfg.seeds if cfg.expert_seeds is None else cfg.expert_seeds)} (mean if more).",
            "",
        ]
        arms = list(summary["expert"])
        rows = [
            [f"`{a}`", *(_pct(summary["expert"][arm]["headline"][a]) for arm in arms)] for a in summary["columns"]
        ]
        rows.append(
            ["**worst case**", *(f"**{_pct(wc[1])}**" if (wc := summary["expert"][arm]["worst"]) else "–"
                                 for arm in arms)]
        )  # fmt: skip
        out += _table(["attack", *(f"`{arm}`" for arm in arms)], rows)

    out += [
        "## Verdicts on honest peers",
        "",
        "Every verdict of an honest receiver about another peer, over all headline cells (clean included); a "
        "rejection is a positive. False-positive rate = honest senders rejected / honest senders judged; "
        "detection rate = Byzantine senders rejected / Byzantine senders judged. Rules that only aggregate "
        "accept every finite row.",
        "",
    ]
    rows = [
        [
            f"`{g}`",
            _rate(fp["fp_rate"], 2),
            _rate(fp["detection_rate"]),
            str(fp["fp"]),
            str(fp["tn"]),
            str(fp["tp"]),
            str(fp["fn"]),
        ]
        for g, fp in summary["fp"].items()
    ]
    out += _table(["aggregator", "false-positive rate", "detection rate", "FP", "TN", "TP", "FN"], rows)

    out += ["## Backdoor attack success rate", ""]
    if summary["asr"]:
        out += [
            "Share of triggered test images (true class ≠ target) classified as the target, after the last "
            f"round, on the honest peer the backdoor fooled most; mean ± std over {_seeds(cfg.seeds)}, f = {f}.",
            "",
        ]
        rows = [[f"`{a}`", *(_pct(by[g]) for g in guards)] for a, by in summary["asr"].items()]
        out += _table(["attack", *(f"`{g}`" for g in guards)], rows)
    else:
        out += [
            "No `backdoor` attack is in the registry (`attacks.ATTACK_NAMES`) at this commit, so no success "
            "rate was measured.",
            "",
        ]

    out += [
        "## Ablation: the semantic guard with one stage switched off",
        "",
        f"Worst case over the same attacks (n = {n}, f = {f}, `{cfg.partition}`), mean over "
        f"{_seeds(cfg.ablation_seeds)} for every row; a stage is a "
        "`SemanticGuard` flag set to False.",
        "",
    ]
    rows = []
    for arm, ab in summary["ablation"].items():
        wc = ab["worst"]
        rows.append(
            [
                f"`{arm}`" if arm != "semantic" else "`semantic` (all stages)",
                _pct(wc[1]) if wc else "–",
                f"`{wc[0]}`" if wc else "–",
                _pct(ab["clean"]),
                _rate(ab["fp_rate"], 2),
            ]
        )
    out += _table(["variant", "worst case (%)", "worst attack", "clean (%)", "false-positive rate"], rows)
    arms = list(summary["ablation"])
    rows = [
        [f"`{a}`", *(_pct(summary["ablation"][arm]["per_attack"][a], std=False) for arm in arms)]
        for a in summary["columns"]
    ]
    out += ["Per attack (mean over seeds):", ""]
    out += _table(["attack", *(f"`{arm}`" for arm in arms)], rows)

    out += [
        "## Sweep: Byzantine fraction × partition",
        "",
        "Worst-case final accuracy (%) over "
        + ("every attack" if cfg.sweep_worst >= len(cfg.attacks)
           else f"each aggregator's {cfg.sweep_worst} worst headline attack(s)") + ", "
        f"mean over {_seeds(cfg.sweep_seeds)}, n = {n}; 0% is the clean run.",
        "",
    ]
    fractions = list(cfg.sweep_fractions)
    for partition in cfg.sweep_partitions:
        out += [f"`{partition}`:", ""]
        rows = []
        for g in guards:
            cells = []
            for fr in fractions:
                wc = summary["sweep"][g][partition].get(fr)
                cells.append(f"{100 * wc[1].mean:.1f} (`{wc[0]}`)" if wc else "–")
            rows.append([f"`{g}`", *cells])
        out += _table(
            ["aggregator", *(f"{round(100 * fr)}% (f = {round(fr * n)})" for fr in fractions)], rows
        )
    if summary.get("fraction_table"):
        out += [
            "Per attacker fraction, f unknown to every rule: worst case over the swept attacks, clean accuracy, "
            "backdoor attack success rate, honest false-positive rate (over the fraction's cells).",
            "",
        ]
        for partition in cfg.sweep_partitions:
            for fr in fractions:
                k = round(fr * n)
                if k == 0:
                    continue
                out += [f"`{partition}`, {round(100 * fr)}% attackers (f = {k} of {n}):", ""]
                rows = []
                for g in guards:
                    cell = summary["fraction_table"][g][partition][fr]
                    wc = cell["worst"]
                    asr = "; ".join(f"{_pct(v, std=False)}" for v in cell["asr"].values()) or "–"
                    rows.append([f"`{g}`", _pct(wc[1], std=False) if wc else "–", f"`{wc[0]}`" if wc else "–",
                                 _pct(cell["clean"], std=False), asr, _rate(cell["fp_rate"], 2)])  # fmt: skip
                out += _table(["aggregator", "worst case (%)", "worst attack", "clean (%)", "backdoor ASR (%)",
                               "honest FP"], rows)  # fmt: skip
    out += [
        "Attacks swept per aggregator: "
        + "; ".join(
            f"`{g}`: " + ", ".join(f"`{a}`" for a in attacks)
            for g, attacks in summary["sweep_attacks"].items()
        )
        + ".",
        "",
    ]

    out += [f"## Targets, as measured on this run (`{cfg.task}`)", ""]
    out += [
        f"- {'met' if t.passed else '**not met**'}: {t.name}: {t.detail}" for t in summary["targets"]
    ] or ["- –"]
    out.append("")
    if cfg.mode == "acceptance":
        out += ["## Acceptance of the guard issue (f unknown to every rule)", ""]
        out += [f"- {'pass' if c.passed else '**FAIL**'}: {c.name}: {c.detail}" for c in summary["acceptance"]]
        out.append("")
    if cfg.mode == "quick":
        out += ["## Assertions of `--quick`", ""]
        out += [f"- {'pass' if c.passed else '**FAIL**'}: {c.name}: {c.detail}" for c in summary["checks"]]
        out.append("")

    out += [
        "## Plots",
        "",
        f"![each aggregator under its worst attack]({plots_rel}/worst-case.png)",
        "",
        f"![sweep]({plots_rel}/sweep.png)",
        "",
        "Per attack: "
        + ", ".join(f"[`{a}`]({plots_rel}/attack-{attack_slug(a)}.png)" for a in summary["columns"]),
        "",
    ]
    if meta.get("cells_file"):
        out += [
            f"Raw per-round results of every cell: `{meta['cells_file']}` (JSON lines, not committed).",
            "",
        ]
    return "\n".join(out)


def write_report(cfg: Any, summary: dict[str, Any], meta: dict[str, Any], path: Path) -> Path:
    """Write the report to ``path`` and its plots to the directory beside it named after it (no suffix).

    Returns:
        The plots' directory.
    """
    from p2p_guard.bench.plots import write_plots

    plots_dir = path.with_suffix("")
    write_plots(cfg, summary, plots_dir)
    meta = {"finished": dt.datetime.now().astimezone().isoformat(timespec="seconds"), **meta}
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(render(cfg, summary, meta, plots_dir.name))
    tmp.replace(path)
    return plots_dir


def command_line(argv: Sequence[str] | None = None) -> str:
    """The command as typed (``p2p-guard`` plus the arguments)."""
    args = sys.argv[1:] if argv is None else list(argv)
    return " ".join(["p2p-guard", *args])
