"""PNG plots of a robustness run (matplotlib, imported only here, with the file-only ``Agg`` backend)."""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Any

__all__ = ["attack_slug", "write_plots"]

logger = logging.getLogger(__name__)

_DPI = 110


def attack_slug(attack: str) -> str:
    """A file-name-safe form of an attack spec (``sign_flip:scale=10`` → ``sign_flip-scale-10``)."""
    return re.sub(r"[^A-Za-z0-9_.]+", "-", attack).strip("-")


def _axes_accuracy(ax: Any, curves: dict[str, list[float]], labels: dict[str, str], title: str) -> None:
    for name, curve in curves.items():
        if curve:
            rounds = range(1, len(curve) + 1)
            ax.plot(rounds, [100 * v for v in curve], marker=".", linewidth=1.4, label=labels.get(name, name))
    ax.set_xlabel("outer round")
    ax.set_ylabel("test accuracy (%)")
    ax.set_ylim(0, 100)
    ax.grid(True, alpha=0.3)
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=7, loc="lower right")


def write_plots(cfg: Any, summary: dict[str, Any], directory: Path) -> list[Path]:
    """Write the run's plots into ``directory`` (created; old ``*.png`` there are removed first).

    Plots:
        - ``worst-case.png``: accuracy per round of each aggregator under its own worst attack;
        - ``attack-<spec>.png``: accuracy per round of every aggregator under one attack (and ``none``);
        - ``sweep.png``: worst-case final accuracy against the Byzantine fraction, one panel per partition.

    Args:
        cfg: the run's :class:`~p2p_guard.bench.robustness.BenchConfig`.
        summary: what :func:`~p2p_guard.bench.robustness.summarise` returned.
        directory: where to write.

    Returns:
        The files written.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    directory.mkdir(parents=True, exist_ok=True)
    for old in directory.glob("*.png"):
        old.unlink()
    written = []

    labels = {}
    for guard, wc in summary["worst_case"].items():
        labels[guard] = f"{guard} ({wc[0]})" if wc else guard
    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    _axes_accuracy(
        ax,
        summary["curves"],
        labels,
        f"{cfg.task}, n={cfg.n}, f={cfg.f}, {cfg.partition}: each aggregator under its worst attack "
        f"(mean of {cfg.seeds} seeds)",
    )
    path = directory / "worst-case.png"
    fig.tight_layout()
    fig.savefig(path, dpi=_DPI)
    plt.close(fig)
    written.append(path)

    for attack, curves in summary["per_attack_curves"].items():
        fig, ax = plt.subplots(figsize=(7.5, 4.5))
        _axes_accuracy(
            ax,
            curves,
            {},
            f"{cfg.task}, n={cfg.n}, f={cfg.f if attack != 'none' else 0}, {cfg.partition}: attack {attack}",
        )
        path = directory / f"attack-{attack_slug(attack)}.png"
        fig.tight_layout()
        fig.savefig(path, dpi=_DPI)
        plt.close(fig)
        written.append(path)

    partitions = list(cfg.sweep_partitions)
    if partitions:
        fig, axes = plt.subplots(
            1, len(partitions), figsize=(4.2 * len(partitions), 4.2), sharey=True, squeeze=False
        )
        for ax, partition in zip(axes[0], partitions, strict=True):
            for guard, by_partition in summary["sweep"].items():
                points = [(fr, wc[1].mean) for fr, wc in by_partition.get(partition, {}).items() if wc]
                if points:
                    ax.plot(
                        [100 * fr for fr, _ in points],
                        [100 * v for _, v in points],
                        marker="o",
                        linewidth=1.4,
                        label=guard,
                    )
            ax.set_title(f"{partition}", fontsize=10)
            ax.set_xlabel("Byzantine peers (%)")
            ax.grid(True, alpha=0.3)
            ax.set_ylim(0, 100)
        axes[0][0].set_ylabel(f"worst-case final accuracy (%) over {cfg.sweep_worst} attack(s)")
        axes[0][-1].legend(fontsize=7, loc="lower left")
        fig.suptitle(f"{cfg.task}, n={cfg.n}: each aggregator's worst attacks across fractions", fontsize=10)
        fig.tight_layout()
        path = directory / "sweep.png"
        fig.savefig(path, dpi=_DPI)
        plt.close(fig)
        written.append(path)
    logger.info("wrote %d plots to %s", len(written), directory)
    return written
