"""The grid's runs read back from their folders, and each arm (actors x precision x
replay ratio) summarised over its seeds with actorq.study.stats (IQM, stratified
bootstrap CIs)."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from actorq.scale.grid import GridConfig, ScaleRun
from actorq.scale.results import RunFigures, last_line, load_figures
from actorq.study.runner import is_done
from actorq.study.stats import Interval, bootstrap_ci, difference_ci, iqm


@dataclass
class RunRow:
    """One planned run: ok (finished), failed or interrupted (its log's last line), or
    not run yet."""

    run: ScaleRun
    status: str
    folder: Path
    figures: RunFigures | None = None
    error: str = ""


def collect(out: Path, config: GridConfig) -> list[RunRow]:
    rows = []
    for run in config.plan():
        folder = run.folder(out)
        log = folder.parent / f"{run.name}.log"
        if is_done(folder):
            rows.append(RunRow(run, "ok", folder, load_figures(folder, config.target_return)))
        elif log.exists():
            # A summary that is not "done" was written by an interrupted run.
            status = "interrupted" if (folder / "summary.json").exists() else "failed"
            rows.append(RunRow(run, status, folder, error=last_line(log)))
        else:
            rows.append(RunRow(run, "not run", folder))
    return rows


def _median(values: Sequence[float | None]) -> float | None:
    finite = [v for v in values if v is not None]
    return statistics.median(finite) if finite else None


@dataclass
class ArmRow:
    actors: int
    precision: str
    samples_per_insert: float
    planned: int
    runs: int  # finished
    failed: int
    reached: int
    times: dict[int, float] = field(default_factory=dict)  # seed -> seconds to target
    time_to_target: Interval | None = None  # IQM over the runs that reached it
    env_steps_per_s: float | None = None
    updates_per_s: float | None = None
    best_return: float | None = None  # median over seeds
    best_return_max: float | None = None
    cpu_seconds: float | None = None  # all services, median
    joules: float | None = None
    energy_method: str | None = None


def summarize(rows: list[RunRow]) -> list[ArmRow]:
    """One row per arm in plan order, also for arms with no finished run."""
    by_arm: dict[tuple, list[RunRow]] = {}
    for row in sorted(rows, key=lambda r: r.run.arm):
        by_arm.setdefault(row.run.arm, []).append(row)
    return [_arm(arm, members) for arm, members in by_arm.items()]


def _arm(arm: tuple[int, str, float], members: list[RunRow]) -> ArmRow:
    ok = [r for r in members if r.figures is not None]
    figs = [r.figures for r in ok if r.figures is not None]
    times = {
        r.run.seed: r.figures.seconds_to_target
        for r in ok
        if r.figures is not None and r.figures.seconds_to_target is not None
    }
    best = [f.best_return for f in figs if f.best_return is not None]
    methods = {f.energy_method for f in figs if f.energy_method}
    return ArmRow(
        *arm,
        planned=len(members),
        runs=len(ok),
        failed=sum(r.status == "failed" for r in members),
        reached=len(times),
        times=times,
        time_to_target=bootstrap_ci(list(times.values())) if times else None,
        env_steps_per_s=_median([f.env_steps_per_s for f in figs]),
        updates_per_s=_median([f.updates_per_s for f in figs]),
        best_return=_median(best),
        best_return_max=max(best) if best else None,
        cpu_seconds=_median([f.cpu_total for f in figs]),
        joules=_median([f.joules for f in figs]),
        energy_method="/".join(sorted(methods)) or None,
    )


@dataclass
class TimeRatio:
    """An arm's time to target over fp32's at the same actors and ratio, on the seeds
    where both reached it: IQM(arm) / IQM(fp32) with its 95% CI."""

    actors: int
    samples_per_insert: float
    precision: str
    seeds: list[int]
    fp32: float | None = None
    other: float | None = None
    ratio: Interval | None = None


def time_ratios(arms: list[ArmRow]) -> list[TimeRatio]:
    fp32 = {(a.actors, a.samples_per_insert): a for a in arms if a.precision == "fp32"}
    out = []
    for a in arms:
        base = fp32.get((a.actors, a.samples_per_insert))
        if a.precision == "fp32" or base is None:
            continue
        seeds = sorted(set(a.times) & set(base.times))
        ratio = TimeRatio(a.actors, a.samples_per_insert, a.precision, seeds)
        if seeds:
            x, y = [a.times[s] for s in seeds], [base.times[s] for s in seeds]
            ratio.fp32, ratio.other = iqm(np.asarray(y)), iqm(np.asarray(x))
            pct = difference_ci(x, y)  # (IQM x - IQM y) / IQM y in %, x and y resampled
            ratio.ratio = Interval(*(1 + v / 100 for v in (pct.point, pct.low, pct.high)))
        out.append(ratio)
    return out
