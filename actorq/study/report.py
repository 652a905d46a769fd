"""The study's report folder: report.md, runs.csv, arms.csv and PNG plots per setting.

Regenerated from the run folders alone (`actorq study --report-only --out DIR`).
"""

from __future__ import annotations

import csv
import dataclasses
from pathlib import Path

from actorq.breakdown import LOOP_PHASES, POLICY_PHASES
from actorq.extras import require
from actorq.study.analysis import (
    ArmSummary,
    Reached,
    RunResult,
    against_fp32,
    fmt,
    load_run,
    summarize_arm,
)
from actorq.study.runner import PlannedRun, is_done
from actorq.study.stats import table

US = 1e6


def collect(out: Path, runs: list[PlannedRun]) -> dict[str, dict[str, list[RunResult]]]:
    """setting -> precision -> finished runs."""
    results: dict[str, dict[str, list[RunResult]]] = {}
    for run in runs:
        folder = run.folder(out)
        if not is_done(folder):
            continue
        result = load_run(folder, run.setting.name, run.precision, run.seed)
        results.setdefault(run.setting.name, {}).setdefault(run.precision, []).append(result)
    return results


def write_report(out: Path, runs: list[PlannedRun], state: dict) -> Path:
    results = collect(out, runs)
    settings = {r.setting.name: r.setting for r in runs}
    arms: list[ArmSummary] = []
    run_rows: list[list] = []
    lines = _header(state, runs, results)
    for name, by_precision in results.items():
        fp32 = {r.seed: r for r in by_precision.get("fp32", [])}
        target = settings[name].target_return
        setting_arms = [
            summarize_arm(name, p, by_precision[p], fp32, target)
            for p in dict.fromkeys(r.precision for r in runs)
            if p in by_precision
        ]
        arms.extend(setting_arms)
        run_rows += [
            _run_row(r, against_fp32(r, fp32.get(r.seed), target))
            for precision_runs in by_precision.values()
            for r in precision_runs
        ]
        description = settings[name].describe(state.get("seconds_override"))
        lines += _setting_section(description, settings[name].note, setting_arms)
        lines += _interval_section(by_precision, fp32, target)
        _plot_returns(out / f"return_vs_time_{name}.png", name, by_precision, fp32, target)
        _plot_breakdown(out / f"breakdown_{name}.png", name, setting_arms)
        _plot_ratios(out / f"ratios_{name}.png", name, setting_arms)
        lines += [
            f"![returns](return_vs_time_{name}.png) ![breakdown](breakdown_{name}.png) "
            f"![ratios](ratios_{name}.png)",
            "",
        ]
    _write_runs_csv(out / "runs.csv", run_rows)
    _write_arms_csv(out / "arms.csv", arms)
    path = out / "report.md"
    path.write_text("\n".join(lines) + "\n")
    return path


def _header(state: dict, runs: list[PlannedRun], results: dict) -> list[str]:
    start, end = state.get("machine_at_start", {}), state.get("machine_at_end", {})
    done = sum(len(v) for by_p in results.values() for v in by_p.values())
    return [
        "# actorq study: fp32 vs fp16 vs int8 vs int4 actors, end to end",
        "",
        f"Machine: {start.get('cpu_model')} ({', '.join(start.get('cpu_flags', []))}), "
        f"{start.get('cores')} cores, Python {start.get('python')}; started "
        f"{start.get('date_utc')} UTC, load average at start "
        f"{_load(start)} and at end {_load(end)}. The machine is shared: other jobs ran "
        "during these runs, so single-run differences of tens of percent can be noise.",
        "",
        f"Runs finished: {done} of {len(runs)} planned. Every run is `actorq run` with the "
        "same wall-clock budget per arm, same seeds, interleaved. Energy is "
        "an **estimate** (CPU seconds x watts per core, `actorq/energy.py`) unless the "
        "table says rapl. Ratios are fp32 / arm (above 1: the arm is better), medians "
        "over seeds. 'to target': until the evaluator's mean return (last 100 episodes) "
        "reaches the final mean return of the fp32 run with the same seed, or the fixed "
        "return a setting names ('timed to return'). '> N x': fp32 never reached it, and N "
        "is fp32's whole run time over the arm's time to it, a lower bound.",
        "",
    ]


def _load(m: dict) -> str:
    load = m.get("load_average")
    return "/".join(f"{x:.2f}" for x in load) if load else "-"


def _setting_section(description: str, note: str, arms: list[ArmSummary]) -> list[str]:
    lines = [f"## {description}", "", note, ""]
    lines += [
        "| precision | seeds | final return | env steps | updates | reached | s to target "
        "| speedup | CPU-s to target | CPU ratio | energy J (run) | energy ratio | "
        "energy ratio to target | g CO2e | guard fallbacks | max divergence before/after |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for a in arms:
        sd = f" ± {a.final_return_sd:.1f}" if a.final_return_sd is not None else ""
        lines.append(
            f"| {a.precision} | {a.seeds} | {fmt(a.final_return_mean)}{sd} | "
            f"{fmt(a.env_steps, 0)} | {fmt(a.updates, 0)} | {a.reached}/{a.seeds} | "
            f"{fmt(a.wall_to_target)} | {_at_least(a.speedup, a.speedup_at_least)} | "
            f"{fmt(a.cpu_to_target)} | "
            f"{fmt(a.cpu_ratio, 2, 'x')} | {fmt(a.joules, 0)} ({a.energy_method}) | "
            f"{fmt(a.energy_ratio, 2, 'x')} | "
            f"{_at_least(a.energy_ratio_to_target, a.energy_ratio_at_least)} | "
            f"{fmt(a.grams, 4)} | {fmt(a.guard_fallback_versions, 0)} | "
            f"{fmt(a.guard_max_divergence_before, 3)}/{fmt(a.guard_max_divergence, 3)} |"
        )
    lines += [
        "",
        "Throughput and cost per env step (whole run, start-up included; medians):",
        "",
        "| precision | env steps/s | actor CPU-s per 1k steps | J per 1k steps (all services) |"
        " blob bytes |",
        "|---|---|---|---|---|",
    ]
    for a in arms:
        lines.append(
            f"| {a.precision} | {fmt(a.env_steps_per_second)} | {fmt(a.actor_cpu_per_kstep, 3)} "
            f"| {fmt(a.joules_per_kstep, 2)} | {fmt(a.blob_bytes, 0)} |"
        )
    lines += ["", "Actor step breakdown (microseconds per env-loop step, mean over seeds):", ""]
    lines += [
        "| precision | " + " | ".join(LOOP_PHASES) + " | sum | measured step | coverage | "
        "background: " + ", ".join(POLICY_PHASES) + " |",
        "|---" * (len(LOOP_PHASES) + 5) + "|",
    ]
    for a in arms:
        if not a.breakdown:
            continue
        parts = " | ".join(fmt(a.breakdown.get(p, 0.0) * US, 0) for p in LOOP_PHASES)
        background = ", ".join(fmt(a.background.get(p, 0.0) * US, 1) for p in POLICY_PHASES)
        lines.append(
            f"| {a.precision} | {parts} | {fmt(sum(a.breakdown.values()) * US, 0)} | "
            f"{fmt((a.step_seconds or 0) * US, 0)} | {fmt((a.coverage or 0) * 100, 1)}% | "
            f"{background} |"
        )
    return [*lines, ""]


def _interval_section(
    by_precision: dict[str, list[RunResult]], fp32: dict[int, RunResult], target: float | None
) -> list[str]:
    """Final return and seconds to target as IQMs with 95% stratified bootstrap CIs, the CI
    of each arm's difference from fp32 and P(arm better than fp32) (actorq.study.stats)."""
    if "fp32" not in by_precision:
        return []
    finals = {
        p: [r.final_return for r in rs if r.final_return is not None]
        for p, rs in by_precision.items()
    }
    # A run that never reached the target counts as its whole run: a lower bound.
    walls = {
        p: [against_fp32(r, fp32.get(r.seed), target).wall or r.summary["wall_seconds"] for r in rs]
        for p, rs in by_precision.items()
    }
    return [
        "Final return, IQM with 95% stratified bootstrap CIs (Agarwal et al. 2021):",
        "",
        *table(finals, "fp32"),
        "",
        "Seconds to target, IQM (a run that never reached it counts as its whole run):",
        "",
        *table(walls, "fp32", higher_is_better=False),
        "",
    ]


def _at_least(ratio: float | None, lower_bound: float | None) -> str:
    """A ratio to fp32 (seeds where both reached the target), then the lower bound from
    seeds where only this arm did."""
    bound = f"> {lower_bound:.2f}x" if lower_bound is not None else ""
    if ratio is None:
        return bound or "-"
    return fmt(ratio, 2, "x") + (f"; {bound}" if bound else "")


def _pyplot():
    matplotlib = require("matplotlib", "plots", "plots")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _plot_returns(
    path: Path, name: str, by_precision: dict, fp32: dict, fixed_target: float | None
) -> None:
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4), dpi=110)
    for i, (precision, runs) in enumerate(by_precision.items()):
        for j, run in enumerate(runs):
            points = [(p.wall, p.eval_mean) for p in run.curve if p.eval_mean is not None]
            if points:
                xs, ys = zip(*points, strict=True)
                ax.plot(xs, ys, color=f"C{i}", alpha=0.8, label=precision if j == 0 else None)
            reached = against_fp32(run, fp32.get(run.seed), fixed_target)
            if reached.wall is not None and reached.target is not None:
                ax.plot([reached.wall], [reached.target], "o", color=f"C{i}")
    lines = [fixed_target] if fixed_target is not None else [r.final_return for r in fp32.values()]
    for level in lines:
        if level is not None:
            ax.axhline(level, color="gray", linestyle="--", linewidth=0.8)
    ax.set_xlabel("wall time (s)")
    ax.set_ylabel("evaluator mean return (last 100)")
    reached_what = "target" if fixed_target is not None else "fp32 final return"
    ax.set_title(f"{name}: dots = {reached_what} reached")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def _plot_breakdown(path: Path, name: str, arms: list[ArmSummary]) -> None:
    plt = _pyplot()
    arms = [a for a in arms if a.breakdown]
    fig, ax = plt.subplots(figsize=(7, 4), dpi=110)
    xs = range(len(arms))
    bottom = [0.0] * len(arms)
    for i, phase in enumerate(LOOP_PHASES):
        heights = [a.breakdown.get(phase, 0.0) * US for a in arms]
        ax.bar(xs, heights, bottom=bottom, color=f"C{i}", label=phase)
        bottom = [b + h for b, h in zip(bottom, heights, strict=True)]
    background = [sum(a.background.values()) * US for a in arms]
    ax.bar(xs, background, bottom=bottom, color="white", edgecolor="gray", hatch="//",
           label="policy pull+verify+build (background thread)")  # fmt: skip
    ax.plot(xs, [(a.step_seconds or 0) * US for a in arms], "k_", markersize=30,
            label="measured step")  # fmt: skip
    ax.set_xticks(list(xs), [a.precision for a in arms])
    ax.set_ylabel("microseconds per actor step")
    ax.set_title(f"{name}: actor step breakdown")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def _plot_ratios(path: Path, name: str, arms: list[ArmSummary]) -> None:
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 3.5), dpi=110)
    width = 0.27
    for k, (attr, label) in enumerate(
        (("speedup", "time to target"), ("cpu_ratio", "CPU-s to target"),
         ("energy_ratio", "energy, whole run"))
    ):  # fmt: skip
        values = [getattr(a, attr) or 0.0 for a in arms]
        ax.bar([i + (k - 1) * width for i in range(len(arms))], values, width, label=label)
    ax.axhline(1.0, color="gray", linewidth=0.8)
    ax.set_xticks(range(len(arms)), [a.precision for a in arms])
    ax.set_ylabel("fp32 / arm (0: not reached)")
    ax.set_title(f"{name}: ratios to fp32")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def _run_row(r: RunResult, reached: Reached) -> list:
    s, b = r.summary, r.summary.get("actor_breakdown") or {}
    phases = b.get("phases", {})
    return [r.setting, r.precision, r.seed, s["wall_seconds"], s["env_steps"],
            s["learner_updates"], s["policy_versions"], s["final_mean_return"],
            round(r.cpu_seconds, 2), r.joules, r.grams, s.get("energy", {}).get("method"),
            round(b.get("step_seconds", 0) * US, 1), round(phases.get("inference", 0) * US, 1),
            round(phases.get("env_step", 0) * US, 1), b.get("coverage"),
            (s.get("guard") or {}).get("guard_fallback_versions"),
            reached.target, reached.wall, reached.cpu, r.folder]  # fmt: skip


def _write_runs_csv(path: Path, rows: list[list]) -> None:
    with path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(
            ["setting", "precision", "seed", "wall_seconds", "env_steps", "learner_updates",
             "policy_versions", "final_mean_return", "cpu_seconds", "joules", "grams_co2",
             "energy_method", "step_us", "inference_us", "env_step_us", "coverage",
             "guard_fallback_versions", "target", "wall_to_target", "cpu_to_target", "folder"]
        )  # fmt: skip
        writer.writerows(rows)


def _write_arms_csv(path: Path, arms: list[ArmSummary]) -> None:
    skip = {"breakdown", "background"}
    fields = [f.name for f in dataclasses.fields(ArmSummary) if f.name not in skip]
    with path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(fields + [f"{p}_us" for p in LOOP_PHASES])
        for a in arms:
            row = [getattr(a, name) for name in fields]
            writer.writerow(row + [round(a.breakdown.get(p, 0.0) * US, 1) for p in LOOP_PHASES])
