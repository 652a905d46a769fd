"""The report's two pictures (matplotlib, Agg backend).

- return_vs_wall.png, as in Ape-X's figures: the evaluator's 100-episode mean return
  against wall-clock seconds, one curve per actor count, one panel per precision (a row
  of panels per replay ratio); the curve is the median over seeds and the shaded band
  their min-max. A run that ended (at the target or its budget) holds its last value.
- time_to_target.png: seconds to the target against actors, IQM over the seeds that
  reached it with its 95% bootstrap CI as error bars; each seed a faint dot.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from actorq.extras import require
from actorq.scale.arms import ArmRow, RunRow
from actorq.scale.grid import GridConfig
from actorq.scale.results import EvalPoint

GRID_POINTS = 200


def _pyplot():
    matplotlib = require("matplotlib", "plots", "plots")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def on_grid(curve: list[EvalPoint], times: np.ndarray) -> np.ndarray:
    """The running mean at each time (its last value before it), NaN before the first."""
    if not curve:
        return np.full(times.shape, np.nan)
    walls = np.array([p.wall for p in curve])
    means = np.array([p.mean for p in curve])
    idx = np.searchsorted(walls, times, side="right") - 1
    return np.where(idx >= 0, means[np.clip(idx, 0, None)], np.nan)


def median_band(curves: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(mask, median, min, max) over seeds (rows) where at least one seed has a value."""
    mask = np.isfinite(curves).any(axis=0)
    cols = [c[np.isfinite(c)] for c in curves[:, mask].T]
    med = np.array([np.median(c) for c in cols])
    low = np.array([c.min() for c in cols])
    high = np.array([c.max() for c in cols])
    return mask, med, low, high


def plot_return_vs_wall(path: Path, rows: list[RunRow], config: GridConfig) -> None:
    plt = _pyplot()
    precisions, ratios = list(config.precisions), list(config.samples_per_insert)
    fig, axes = plt.subplots(
        len(ratios), len(precisions), figsize=(4.5 * len(precisions), 3.4 * len(ratios)),
        dpi=110, squeeze=False, sharex=True, sharey=True,
    )  # fmt: skip
    done = [r for r in rows if r.figures is not None and r.figures.curve]
    end = max((r.figures.curve[-1].wall for r in done if r.figures), default=1.0)
    times = np.linspace(0.0, end, GRID_POINTS)
    for i, spi in enumerate(ratios):
        for j, precision in enumerate(precisions):
            ax = axes[i][j]
            for k, actors in enumerate(config.actors):
                arm = (actors, precision, spi)
                curves = [
                    on_grid(r.figures.curve, times) for r in done if r.run.arm == arm and r.figures
                ]
                if not curves:
                    continue
                mask, med, low, high = median_band(np.vstack(curves))
                label = f"{actors} actor{'s' if actors > 1 else ''} (n={len(curves)})"
                ax.plot(times[mask], med, color=f"C{k}", label=label)
                ax.fill_between(times[mask], low, high, color=f"C{k}", alpha=0.2, linewidth=0)
            ax.axhline(config.target_return, color="gray", linestyle="--", linewidth=0.8)
            ax.set_title(f"{precision}, samples/insert {spi:g}", fontsize=9)
            ax.grid(alpha=0.3)
            if i == len(ratios) - 1:
                ax.set_xlabel("wall-clock seconds")
            if j == 0:
                ax.set_ylabel("evaluator return (mean of 100)")
            if ax.get_legend_handles_labels()[0]:
                ax.legend(fontsize=7, loc="lower right")
    fig.suptitle(
        f"{config.env} {config.algo}: median over seeds, band min-max; dashed: target "
        f"{config.target_return:g}",
        fontsize=9,
    )
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def plot_time_to_target(path: Path, arms: list[ArmRow], config: GridConfig) -> None:
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6.5, 4), dpi=110)
    markers = "osD^v<>"
    lines = 0
    for c, spi in enumerate(config.samples_per_insert):
        for m, precision in enumerate(config.precisions):
            mine = [a for a in arms if (a.precision, a.samples_per_insert) == (precision, spi)]
            hit = [a for a in mine if a.time_to_target is not None]
            color, marker = f"C{c * len(config.precisions) + m}", markers[m % len(markers)]
            for a in mine:
                ax.plot([a.actors] * len(a.times), list(a.times.values()), marker,
                        color=color, alpha=0.25, markersize=4)  # fmt: skip
            if not hit:
                continue
            xs = [a.actors for a in hit]
            ys = [a.time_to_target.point for a in hit if a.time_to_target]
            err = [
                [a.time_to_target.point - a.time_to_target.low for a in hit if a.time_to_target],
                [a.time_to_target.high - a.time_to_target.point for a in hit if a.time_to_target],
            ]
            ax.errorbar(xs, ys, yerr=err, fmt=f"-{marker}", color=color, capsize=4,
                        label=f"{precision}, samples/insert {spi:g}")  # fmt: skip
            lines += 1
    if not lines:
        ax.text(0.5, 0.5, f"no run reached the target {config.target_return:g}",
                ha="center", va="center", transform=ax.transAxes)  # fmt: skip
    else:
        ax.legend(fontsize=8)
        ax.set_ylim(0, ax.get_ylim()[1] * 1.1)
    missed = [
        f"{a.actors} {a.precision} spi {a.samples_per_insert:g}" for a in arms if not a.reached
    ]
    if missed:
        fig.text(0.01, 0.01, "not reached: " + "; ".join(missed), fontsize=7, color="gray")
    ax.set_xticks(list(config.actors))
    ax.set_xlim(min(config.actors) - 0.5, max(config.actors) + 0.5)
    ax.set_xlabel("actors")
    ax.set_ylabel(f"seconds to return {config.target_return:g} (IQM, 95% CI)")
    ax.set_title(f"{config.env} {config.algo}: time to target against actors", fontsize=9)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
