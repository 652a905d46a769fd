"""Figures of one study run and of each arm, read back from the run folders.

Everything comes from what `actorq run` writes: `summary.json` (final counts, CPU and
energy per service, runtime breakdown, guard) and `metrics.jsonl` (one row per progress
poll: wall time, CPU seconds of all services, env steps, the evaluator's mean return of
its last 100 episodes). "Time to the fp32 run's final return" is the first poll at which
an arm's evaluator mean reaches the final mean of the fp32 run with the same seed, counted
only once the mean covers as many episodes as the fp32 run's final one did (up to 100),
so a lucky first round cannot count as reaching it.
"""

from __future__ import annotations

import json
import math
import statistics
from dataclasses import dataclass, field
from pathlib import Path

EVAL_WINDOW = 100  # the evaluator's running mean is over its last 100 episodes


@dataclass
class CurvePoint:
    wall: float
    cpu: float
    env_steps: int
    eval_mean: float | None
    eval_episodes: int


@dataclass
class RunResult:
    setting: str
    precision: str
    seed: int
    folder: Path
    summary: dict
    curve: list[CurvePoint] = field(default_factory=list)

    @property
    def final_return(self) -> float | None:
        return self.summary.get("final_mean_return")

    @property
    def cpu_seconds(self) -> float:
        return float(sum(self.summary.get("cpu_seconds", {}).values()))

    @property
    def actor_cpu_seconds(self) -> float:
        cpu = self.summary.get("cpu_seconds", {})
        return float(sum(v for k, v in cpu.items() if k.startswith("actor-")))

    @property
    def joules(self) -> float:
        return float(self.summary.get("energy", {}).get("joules", 0.0))

    @property
    def grams(self) -> float:
        return float(self.summary.get("energy", {}).get("grams_co2", 0.0))

    def reach(self, target: float, min_episodes: int) -> CurvePoint | None:
        """First poll whose evaluator mean >= target over >= min_episodes episodes."""
        for point in self.curve:
            if (
                point.eval_mean is not None
                and point.eval_episodes >= min_episodes
                and point.eval_mean >= target
            ):
                return point
        return None


def load_run(folder: Path, setting: str, precision: str, seed: int) -> RunResult:
    summary = json.loads((folder / "summary.json").read_text())
    curve = []
    metrics = folder / "metrics.jsonl"
    if metrics.exists():
        for line in metrics.read_text().splitlines():
            try:
                row = json.loads(line)
            except ValueError:
                continue  # a line cut by an interrupted write
            curve.append(
                CurvePoint(
                    wall=float(row["wall_seconds"]),
                    cpu=float(row.get("cpu_seconds") or 0.0),
                    env_steps=int(row["env_steps"]),
                    eval_mean=row.get("eval_mean_return"),
                    eval_episodes=int(row.get("eval_episodes") or 0),
                )
            )
    return RunResult(setting, precision, seed, folder, summary, curve)


@dataclass
class Reached:
    """An arm's run against its seed's fp32 run."""

    run: RunResult
    target: float | None
    wall: float | None = None  # seconds to the target (None: not reached)
    cpu: float | None = None  # CPU seconds of all services to the target
    joules: float | None = None  # energy to the target (run energy x CPU share)


def against_fp32(
    run: RunResult, fp32: RunResult | None, fixed_target: float | None = None
) -> Reached:
    """When `run` reached its seed's fp32 final return, or `fixed_target` where the setting
    names one (a solve bar: where fp32 may end before learning, its final return would
    time the arms to whatever it ended at)."""
    if fixed_target is not None:
        target, need = fixed_target, EVAL_WINDOW
    elif fp32 is None or fp32.final_return is None:
        return Reached(run, None)
    else:
        target = fp32.final_return
        need = min(EVAL_WINDOW, int(fp32.summary.get("eval_episodes") or EVAL_WINDOW))
    point = run.reach(target, max(need, 1))
    if point is None:
        return Reached(run, target)
    share = point.cpu / run.cpu_seconds if run.cpu_seconds else 0.0
    return Reached(run, target, point.wall, point.cpu, run.joules * share)


@dataclass
class ArmSummary:
    """One (setting, precision) over its seeds: medians, and ratios to fp32 per seed."""

    setting: str
    precision: str
    seeds: int
    final_return_mean: float | None
    final_return_sd: float | None
    env_steps: float
    updates: float
    cpu_seconds: float
    joules: float
    grams: float
    reached: int  # seeds whose run reached the target
    wall_to_target: float | None
    cpu_to_target: float | None
    speedup: float | None  # fp32 time to target / this arm's, median over seeds
    # Seeds where this arm reached the target and fp32 never did: fp32's whole run time /
    # this arm's time to the target, a lower bound on the speed-up (median over them).
    speedup_at_least: float | None
    cpu_ratio: float | None  # fp32 CPU-s to target / this arm's
    energy_ratio: float | None  # fp32 joules / this arm's, whole run (same wall budget)
    energy_ratio_to_target: float | None
    # As speedup_at_least, for energy: fp32's whole-run joules / this arm's to the target.
    energy_ratio_at_least: float | None
    env_steps_per_second: float | None = None  # whole run, start-up included
    actor_cpu_per_kstep: float | None = None  # actor processes' CPU-s per 1000 env steps
    joules_per_kstep: float | None = None  # all services
    breakdown: dict = field(default_factory=dict)  # mean seconds per step by phase
    background: dict = field(default_factory=dict)
    step_seconds: float | None = None
    coverage: float | None = None
    guard_fallback_versions: float = 0.0
    guard_max_divergence_before: float | None = None
    guard_max_divergence: float | None = None
    energy_method: str = "estimate"
    blob_bytes: float | None = None


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def _ratios(pairs: list[tuple[float | None, float | None]]) -> float | None:
    return _median([a / b for a, b in pairs if a and b])


def summarize_arm(
    setting: str,
    precision: str,
    runs: list[RunResult],
    fp32: dict[int, RunResult],
    fixed_target: float | None = None,
) -> ArmSummary:
    reached = [against_fp32(r, fp32.get(r.seed), fixed_target) for r in runs]
    base = {seed: against_fp32(run, run, fixed_target) for seed, run in fp32.items()}
    missed = {seed for seed, x in base.items() if x.target is not None and x.wall is None}
    returns = [r.final_return for r in runs if r.final_return is not None]
    ok = [x for x in reached if x.wall is not None]
    return ArmSummary(
        setting=setting,
        precision=precision,
        seeds=len(runs),
        final_return_mean=statistics.fmean(returns) if returns else None,
        final_return_sd=statistics.stdev(returns) if len(returns) > 1 else None,
        env_steps=statistics.median(r.summary["env_steps"] for r in runs),
        updates=statistics.median(r.summary["learner_updates"] for r in runs),
        cpu_seconds=statistics.median(r.cpu_seconds for r in runs),
        joules=statistics.median(r.joules for r in runs),
        grams=statistics.median(r.grams for r in runs),
        reached=len(ok),
        wall_to_target=_median([x.wall for x in ok if x.wall is not None]),
        cpu_to_target=_median([x.cpu for x in ok if x.cpu is not None]),
        speedup=_ratios([(base[x.run.seed].wall, x.wall) for x in ok if x.run.seed in base]),
        speedup_at_least=_ratios(
            [(fp32[x.run.seed].summary["wall_seconds"], x.wall) for x in ok if x.run.seed in missed]
        ),
        cpu_ratio=_ratios([(base[x.run.seed].cpu, x.cpu) for x in ok if x.run.seed in base]),
        energy_ratio=_ratios([(fp32[r.seed].joules, r.joules) for r in runs if r.seed in fp32]),
        energy_ratio_to_target=_ratios(
            [(base[x.run.seed].joules, x.joules) for x in ok if x.run.seed in base]
        ),
        energy_ratio_at_least=_ratios(
            [(fp32[x.run.seed].joules, x.joules) for x in ok if x.run.seed in missed]
        ),
        **_throughput(runs),
        **_breakdown(runs),
        **_guard(runs),
        energy_method=runs[0].summary.get("energy", {}).get("method", "estimate"),
        blob_bytes=statistics.median(r.summary.get("blob_bytes", 0) for r in runs),
    )


def _throughput(runs: list[RunResult]) -> dict:
    """Per-env-step costs: comparable across arms even where nothing was learned yet."""
    ok = [r for r in runs if r.summary["env_steps"] > 0 and r.summary["wall_seconds"] > 0]
    if not ok:
        return {}
    return {
        "env_steps_per_second": statistics.median(
            r.summary["env_steps"] / r.summary["wall_seconds"] for r in ok
        ),
        "actor_cpu_per_kstep": statistics.median(
            1000 * r.actor_cpu_seconds / r.summary["env_steps"] for r in ok
        ),
        "joules_per_kstep": statistics.median(1000 * r.joules / r.summary["env_steps"] for r in ok),
    }


def _breakdown(runs: list[RunResult]) -> dict:
    parts = [r.summary.get("actor_breakdown") or {} for r in runs]
    parts = [p for p in parts if p]
    if not parts:
        return {}

    def mean_of(key: str) -> dict[str, float]:
        names = parts[0][key]
        return {n: statistics.fmean(p[key].get(n, 0.0) for p in parts) for n in names}

    return {
        "breakdown": mean_of("phases"),
        "background": mean_of("background"),
        "step_seconds": statistics.fmean(p["step_seconds"] for p in parts),
        "coverage": statistics.fmean(p["coverage"] for p in parts),
    }


def _guard(runs: list[RunResult]) -> dict:
    guards = [r.summary.get("guard") or {} for r in runs]
    guards = [g for g in guards if g]
    if not guards:
        return {}
    return {
        "guard_fallback_versions": sum(g.get("guard_fallback_versions", 0.0) for g in guards),
        "guard_max_divergence_before": max(
            g.get("guard_max_divergence_before", 0.0) for g in guards
        ),
        "guard_max_divergence": max(g.get("guard_max_divergence", 0.0) for g in guards),
    }


def fmt(value: float | None, digits: int = 1, suffix: str = "") -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{value:,.{digits}f}{suffix}"
