"""Few-seed statistics as the field reports them (Agarwal et al., NeurIPS 2021, `rliable`).

Scores are matrices of shape (runs, tasks): one row per seed, one column per task
(a single benchmark setting is one column). Everything here is numpy only:

- `iqm`: the interquartile mean, the 25% trimmed mean over all runs and tasks
  (`scipy.stats.trim_mean(scores, 0.25, axis=None)`, rliable's `aggregate_iqm`).
- `bootstrap_ci`: a percentile 95% CI by the stratified bootstrap: runs are resampled
  with replacement within each task, tasks are kept (rliable's `StratifiedBootstrap`).
- `difference_ci`: IQM(x) - IQM(y) as a percentage of |IQM(y)|, with the CI of that
  percentage from resampling both arms independently (rliable's
  `StratifiedIndependentBootstrap`): "int8 within 2% of fp32" becomes an interval.
- `probability_of_improvement`: P(X > Y) per task by the Mann-Whitney U statistic
  (ties count one half), averaged over tasks, with its bootstrap CI.

The bootstrap draws from `numpy.random.default_rng(seed)`, so reports are reproducible;
the intervals match rliable's to bootstrap noise (tests/unit/test_stats.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

REPS = 20_000  # bootstrap replications; rliable's default is 50,000 (same CIs to ~0.5%)
CONFIDENCE = 0.95


def as_scores(scores: Sequence[float] | Sequence[Sequence[float]] | np.ndarray) -> np.ndarray:
    """A (runs, tasks) float matrix; a flat list is one task's runs."""
    arr = np.asarray(scores, dtype=np.float64)
    if arr.ndim == 1:
        arr = arr[:, None]
    if arr.ndim != 2 or arr.shape[0] < 1 or arr.shape[1] < 1:
        raise ValueError(
            f"scores: expected a (runs, tasks) matrix or a list, got shape {arr.shape}"
        )
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"scores: expected finite numbers, got {arr.tolist()}")
    return arr


def iqm(scores: np.ndarray) -> float:
    """Interquartile mean over all runs and tasks: drop int(n/4) scores at each end."""
    flat = np.sort(np.asarray(scores, dtype=np.float64).ravel())
    cut = int(0.25 * flat.size)
    return float(flat[cut : flat.size - cut].mean())


def _resample(scores: np.ndarray, rng: np.random.Generator, reps: int) -> np.ndarray:
    """(reps, runs, tasks): each task's runs drawn with replacement, tasks kept."""
    runs, tasks = scores.shape
    idx = rng.integers(0, runs, size=(reps, runs, tasks))
    return np.take_along_axis(np.broadcast_to(scores, (reps, runs, tasks)), idx, axis=1)


def _percentile_ci(values: np.ndarray, confidence: float) -> tuple[float, float]:
    alpha = (1.0 - confidence) / 2.0
    low, high = np.percentile(values, [100 * alpha, 100 * (1 - alpha)])
    return float(low), float(high)


def _iqm_batch(samples: np.ndarray) -> np.ndarray:
    flat = np.sort(samples.reshape(samples.shape[0], -1), axis=1)
    cut = int(0.25 * flat.shape[1])
    return flat[:, cut : flat.shape[1] - cut].mean(axis=1)


@dataclass(frozen=True)
class Interval:
    """A point estimate with its 95% CI."""

    point: float
    low: float
    high: float

    def fmt(self, digits: int = 1, suffix: str = "") -> str:
        d, sign = digits, "+" if suffix else ""  # differences carry their sign
        point, low, high = (f"{v:{sign},.{d}f}{suffix}" for v in (self.point, self.low, self.high))
        return f"{point} [{low}, {high}]"


def bootstrap_ci(
    scores, *, reps: int = REPS, seed: int = 0, confidence: float = CONFIDENCE
) -> Interval:
    """IQM of `scores` with its stratified-bootstrap percentile CI."""
    arr = as_scores(scores)
    rng = np.random.default_rng(seed)
    boot = _iqm_batch(_resample(arr, rng, reps))
    return Interval(iqm(arr), *_percentile_ci(boot, confidence))


def _pct(x: np.ndarray | float, y: np.ndarray | float) -> np.ndarray:
    y_arr = np.abs(np.asarray(y, dtype=np.float64))
    with np.errstate(divide="ignore", invalid="ignore"):
        return 100.0 * (np.asarray(x) - np.asarray(y)) / np.where(y_arr == 0, np.nan, y_arr)


def difference_ci(
    x, y, *, reps: int = REPS, seed: int = 0, confidence: float = CONFIDENCE
) -> Interval:
    """(IQM(x) - IQM(y)) / |IQM(y)| in percent, arms resampled independently.

    Positive = x scored higher. Bootstrap draws where IQM(y) is 0 are dropped.
    """
    ax, ay = as_scores(x), as_scores(y)
    _same_tasks(ax, ay)
    rng = np.random.default_rng(seed)
    bx, by = _iqm_batch(_resample(ax, rng, reps)), _iqm_batch(_resample(ay, rng, reps))
    diffs = _pct(bx, by)
    diffs = diffs[np.isfinite(diffs)]
    point = float(_pct(iqm(ax), iqm(ay)))
    if diffs.size == 0:
        raise ValueError("difference_ci: the baseline's IQM is 0 in every bootstrap draw")
    return Interval(point, *_percentile_ci(diffs, confidence))


def _same_tasks(ax: np.ndarray, ay: np.ndarray) -> None:
    if ax.shape[1] != ay.shape[1]:
        raise ValueError(
            f"scores: both arms need the same tasks (columns), got {ax.shape[1]} and {ay.shape[1]}"
        )


def _poi_point(ax: np.ndarray, ay: np.ndarray) -> float:
    """P(X > Y) per task (ties 0.5) averaged over tasks: the normalised Mann-Whitney U."""
    greater = (ax[:, None, :] > ay[None, :, :]).mean(axis=(0, 1))
    ties = (ax[:, None, :] == ay[None, :, :]).mean(axis=(0, 1))
    return float(np.mean(greater + 0.5 * ties))


def _poi_batch(bx: np.ndarray, by: np.ndarray) -> np.ndarray:
    gt = (bx[:, :, None, :] > by[:, None, :, :]).mean(axis=(1, 2))
    eq = (bx[:, :, None, :] == by[:, None, :, :]).mean(axis=(1, 2))
    return (gt + 0.5 * eq).mean(axis=1)


def probability_of_improvement(
    x, y, *, reps: int = REPS, seed: int = 0, confidence: float = CONFIDENCE
) -> Interval:
    """P(a run of X beats a run of Y) with its stratified-bootstrap CI."""
    ax, ay = as_scores(x), as_scores(y)
    _same_tasks(ax, ay)
    rng = np.random.default_rng(seed)
    boot = _poi_batch(_resample(ax, rng, reps), _resample(ay, rng, reps))
    return Interval(_poi_point(ax, ay), *_percentile_ci(boot, confidence))


@dataclass(frozen=True)
class Comparison:
    """Arm x against baseline y: both IQMs, the difference in percent, P(x > y)."""

    name_x: str
    name_y: str
    n_x: int
    n_y: int
    iqm_x: Interval
    iqm_y: Interval
    diff_pct: Interval
    poi: Interval

    def line(self, digits: int = 1) -> str:
        """One report line: IQMs with CIs, the difference CI, P(improvement)."""
        return (
            f"{self.name_x} IQM {self.iqm_x.fmt(digits)} (n={self.n_x}) vs {self.name_y} IQM "
            f"{self.iqm_y.fmt(digits)} (n={self.n_y}); {self.name_x} - {self.name_y} "
            f"{self.diff_pct.fmt(1, '%')}; P({self.name_x} > {self.name_y}) {self.poi.fmt(2)}"
        )

    def row(self, digits: int = 1) -> list[str]:
        """Markdown table cells: IQM x, IQM y, difference %, P(x > y)."""
        return [
            self.iqm_x.fmt(digits),
            self.iqm_y.fmt(digits),
            self.diff_pct.fmt(1, "%"),
            self.poi.fmt(2),
        ]


ROW_HEADER = ["IQM [95% CI]", "baseline IQM [95% CI]", "difference [95% CI]", "P(improvement)"]


def compare(x, y, name_x: str = "x", name_y: str = "y", *, reps: int = REPS, seed: int = 0):
    """Every rliable figure of x against baseline y, from per-seed scores."""
    ax, ay = as_scores(x), as_scores(y)
    return Comparison(
        name_x,
        name_y,
        ax.shape[0],
        ay.shape[0],
        bootstrap_ci(ax, reps=reps, seed=seed),
        bootstrap_ci(ay, reps=reps, seed=seed + 1),
        difference_ci(ax, ay, reps=reps, seed=seed + 2),
        probability_of_improvement(ax, ay, reps=reps, seed=seed + 3),
    )


def compare_or_none(x, y, name_x: str, name_y: str, **kw) -> Comparison | None:
    """`compare` when both arms have at least one finite score, else None."""
    fx = [v for v in x if v is not None and np.isfinite(v)]
    fy = [v for v in y if v is not None and np.isfinite(v)]
    if not fx or not fy:
        return None
    return compare(fx, fy, name_x, name_y, **kw)


def table(
    arms: dict[str, list[float]],
    baseline: str,
    *,
    digits: int = 1,
    higher_is_better: bool = True,
    reps: int = REPS,
) -> list[str]:
    """Markdown lines: per arm its IQM [95% CI], the CI of (arm - baseline) in percent of
    the baseline's IQM and P(arm better than baseline), from per-seed `arms` scores.

    With `higher_is_better=False` (times) the difference keeps its sign (+ = larger) and
    P(improvement) is P(arm < baseline).
    """
    sign = 1.0 if higher_is_better else -1.0
    lines = [
        f"| arm | n | IQM [95% CI] | arm - {baseline}, % of its IQM [95% CI] "
        "| P(arm better) [95% CI] |",
        "|---|---:|---|---|---|",
    ]
    base = [v for v in arms.get(baseline, []) if np.isfinite(v)]
    for i, (name, values) in enumerate(arms.items()):
        finite = [v for v in values if np.isfinite(v)]
        if not finite:
            lines.append(f"| {name} | 0 | - | - | - |")
            continue
        cells = [bootstrap_ci(finite, reps=reps, seed=10 * i).fmt(digits), "-", "-"]
        if name != baseline and base:
            cells[1] = difference_ci(finite, base, reps=reps, seed=10 * i + 1).fmt(1, "%")
            poi = probability_of_improvement(
                [sign * v for v in finite], [sign * v for v in base], reps=reps, seed=10 * i + 2
            )
            cells[2] = poi.fmt(2)
        lines.append(f"| {name} | {len(finite)} | {' | '.join(cells)} |")
    return lines
