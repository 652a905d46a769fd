"""The report folder of `actorq scale`: runs.csv, report.md and the two PNGs, written from
the run folders and scale.json alone (so an interrupted grid still gets a report)."""

from __future__ import annotations

import csv
from pathlib import Path

from actorq.scale.arms import ArmRow, RunRow, TimeRatio, collect, summarize, time_ratios
from actorq.scale.grid import GridConfig
from actorq.scale.plots import plot_return_vs_wall, plot_time_to_target
from actorq.scale.results import ROLES
from actorq.study.analysis import fmt

RUN_COLUMNS = [
    "actors", "precision", "samples_per_insert", "seed", "status", "launcher",
    "env_steps_per_s", "updates_per_s", "seconds_to_target", "env_steps_to_target",
    "best_return", "final_return", "target_return", "wall_seconds", "env_steps",
    "learner_updates", "stop_reason", *(f"cpu_{role}_s" for role in ROLES), "cpu_total_s",
    "energy_joules", "energy_method", "grams_co2", "cpu_model", "cpu_flags", "cores",
    "git_describe", "error", "folder",
]  # fmt: skip


def _cell(value: object, digits: int = 3) -> object:
    if value is None:
        return ""
    return round(value, digits) if isinstance(value, float) else value


def run_record(row: RunRow, config: GridConfig, state: dict) -> dict:
    r, f, m = row.run, row.figures, state.get("machine", {})
    record: dict[str, object] = {
        "actors": r.actors, "precision": r.precision,
        "samples_per_insert": f"{r.samples_per_insert:g}", "seed": r.seed,
        "status": row.status, "launcher": config.launcher,
        "target_return": f"{config.target_return:g}",
        "cpu_model": m.get("cpu_model"), "cpu_flags": " ".join(m.get("cpu_flags", [])),
        "cores": m.get("cores"), "git_describe": _git_describe(r.name, state),
        "error": row.error, "folder": str(row.folder),
    }  # fmt: skip
    if f is not None:
        record.update(
            env_steps_per_s=f.env_steps_per_s, updates_per_s=f.updates_per_s,
            seconds_to_target=f.seconds_to_target, env_steps_to_target=f.env_steps_to_target,
            best_return=f.best_return, final_return=f.final_return,
            wall_seconds=f.wall_seconds, env_steps=f.env_steps,
            learner_updates=f.learner_updates, stop_reason=f.stop_reason,
            cpu_total_s=f.cpu_total, energy_joules=f.joules, energy_method=f.energy_method,
            grams_co2=f.grams_co2,
            **{f"cpu_{role}_s": f.cpu_seconds.get(role) for role in ROLES},
        )  # fmt: skip
    return {k: _cell(record.get(k)) for k in RUN_COLUMNS}


def _git_describe(name: str, state: dict) -> str:
    """The checkout's `git describe` when the run ran (else the latest session's)."""
    ran = state.get("runs", {}).get(name) or state["sessions"][-1]
    return ran["git_describe"]


def write_runs_csv(path: Path, rows: list[RunRow], config: GridConfig, state: dict) -> None:
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=RUN_COLUMNS)
        writer.writeheader()
        writer.writerows(run_record(r, config, state) for r in rows)


def write_report(out: Path, config: GridConfig, state: dict) -> Path:
    rows = collect(out, config)
    arms = summarize(rows)
    ratios = time_ratios(arms)
    write_runs_csv(out / "runs.csv", rows, config, state)
    plot_return_vs_wall(out / "return_vs_wall.png", rows, config)
    plot_time_to_target(out / "time_to_target.png", arms, config)
    lines = _header(config, state, rows)
    lines += _arm_section(arms, config)
    lines += _ratio_section(ratios, config)
    lines += _failed_section(rows)
    lines += [
        "## Figures",
        "",
        "![return against wall time](return_vs_wall.png)",
        "",
        "![time to target against actors](time_to_target.png)",
        "",
        *_reading_notes(config),
    ]
    path = out / "report.md"
    path.write_text("\n".join(lines) + "\n")
    return path


_LAUNCHED = {
    "processes": "processes: each run is one `actorq run` (embedded Redis, services as processes).",
    "compose": "compose: each run is one `docker compose up -d --scale actor=N` of the "
    "local-image stack, measured through its Prometheus container and Redis episodes "
    "stream, then `down -v`.",
}


def _load(values: list[float] | None) -> str:
    return "/".join(f"{v:.2f}" for v in values) if values else "-"


def _header(config: GridConfig, state: dict, rows: list[RunRow]) -> list[str]:
    m, sessions = state.get("machine", {}), state.get("sessions", [])
    count = {
        s: sum(r.status == s for r in rows) for s in ("ok", "failed", "interrupted", "not run")
    }
    lines = [
        f"# actorq scale: {config.algo.upper()} on {config.env}, actors x precision x replay ratio",
        "",
        f"**Launcher:** {_LAUNCHED[config.launcher]}",
        "",
        f"**Machine:** {m.get('cpu_model')}; flags {', '.join(m.get('cpu_flags', [])) or '-'}; "
        f"{m.get('cores')} cores. Every run of this report ran on it (`actorq scale` refuses "
        "to resume into a folder written on another CPU).",
        "",
        "| session | git describe | started (UTC) | load average at start | at end | ran | "
        "done already | failed |",
        "|---:|---|---|---|---|---:|---:|---:|",
    ]
    for i, s in enumerate(sessions, 1):
        lines.append(
            f"| {i} | {s.get('git_describe')} | {s.get('started_utc')} | "
            f"{_load(s.get('load_average_start'))} | {_load(s.get('load_average_end'))} | "
            f"{s.get('ran', '-')} | {s.get('done_already', '-')} | {s.get('failed', '-')} |"
        )
    budget = f"{config.max_seconds:g} s" if config.max_seconds else "no time limit"
    if config.max_env_steps is not None:
        budget += f", {config.max_env_steps:,} env steps"
    stop = "stops there" if config.stop_at_target else "runs its whole budget on"
    lines += [
        "",
        "**Command:**",
        "",
        "```",
        sessions[-1]["command"] if sessions else config.command(Path("DIR")),
        "```",
        "",
        f"Each run is like `{_example(config)}` (the first of the grid; `runs/<name>.log` "
        "holds each one's exact line). "
        f"Target: the evaluator's 100-episode mean return reaches {config.target_return:g}; "
        f"a run that reaches it {stop}. Budget per run: {budget}.",
        "",
        f"Runs: {count['ok']} finished, {count['failed']} failed, {count['interrupted']} "
        f"interrupted, {count['not run']} not run, of {len(rows)} planned.",
        "",
    ]
    return lines


def _example(config: GridConfig) -> str:
    """The first planned run's `actorq run` (or `docker compose`) line; the others differ
    in the grid's flags."""
    first = config.plan()[0]
    folder = Path("DIR") / "runs" / first.name
    if config.launcher == "compose":
        from actorq.scale.compose_runner import compose_line

        return compose_line(first, config.env, folder)
    cmd = config.run_command(first, folder)
    return " ".join(["python", *cmd[1:]])


def _arm_section(arms: list[ArmRow], config: GridConfig) -> list[str]:
    lines = [
        "## Per arm",
        "",
        "| actors | precision | samples/insert | runs | reached target | s to target, IQM "
        "[95% CI] | env steps/s (median) | updates/s (median) | best return, median (max) "
        "| CPU-s, all roles (median) | energy J (median) |",
        "|---:|---|---:|---:|---:|---|---:|---:|---|---:|---:|",
    ]
    for a in arms:
        runs = f"{a.runs}/{a.planned}" + (f" ({a.failed} failed)" if a.failed else "")
        ttt = a.time_to_target.fmt(1) if a.time_to_target is not None else "not reached"
        best = f"{fmt(a.best_return)} ({fmt(a.best_return_max)})"
        energy = fmt(a.joules, 0) + (f" ({a.energy_method})" if a.energy_method else "")
        lines.append(
            f"| {a.actors} | {a.precision} | {a.samples_per_insert:g} | {runs} | "
            f"{a.reached}/{a.runs} | {ttt} | {fmt(a.env_steps_per_s, 0)} | "
            f"{fmt(a.updates_per_s, 1)} | {best} | {fmt(a.cpu_seconds, 0)} | {energy} |"
        )
    lines.append("")
    if not any(a.reached for a in arms):
        lines += [
            f"**No run reached the target {config.target_return:g}.** The best 100-episode "
            "evaluator mean of each arm is in the 'best return' column (median over seeds, "
            "the best seed in brackets).",
            "",
        ]
    lines += [
        "Time to target is the IQM over the seeds that reached it (see 'reached target'), "
        "with a 95% stratified bootstrap CI over those seeds (`actorq/study/stats.py`); with "
        "one seed the interval is that seed's time.",
        "",
    ]
    return lines


def _ratio_section(ratios: list[TimeRatio], config: GridConfig) -> list[str]:
    if not ratios:
        return []
    lines = [
        "## Time to target against fp32",
        "",
        "IQM(precision) / IQM(fp32) of the seconds to target, same actors and replay ratio, "
        "over the seeds where both reached it; below 1: the precision got there sooner. The "
        "CI resamples both arms' seeds independently (`difference_ci`).",
        "",
        "| actors | samples/insert | precision | seeds both reached | fp32 s (IQM) | "
        "precision s (IQM) | precision / fp32 [95% CI] |",
        "|---:|---:|---|---|---:|---:|---|",
    ]
    for r in ratios:
        seeds = ",".join(map(str, r.seeds)) or "none: not both reached"
        ratio = r.ratio.fmt(2) if r.ratio is not None else "-"
        lines.append(
            f"| {r.actors} | {r.samples_per_insert:g} | {r.precision} | {seeds} | "
            f"{fmt(r.fp32)} | {fmt(r.other)} | {ratio} |"
        )
    return [*lines, ""]


def _failed_section(rows: list[RunRow]) -> list[str]:
    failed = [r for r in rows if r.status in ("failed", "interrupted")]
    if not failed:
        return []
    lines = [
        "## Failed runs",
        "",
        "Each is run again by the next `actorq scale` with this --out.",
        "",
    ]
    for r in failed:
        lines.append(f"- `{r.run.name}` ({r.status}): {r.error} (log: `runs/{r.run.name}.log`)")
    return [*lines, ""]


def _reading_notes(config: GridConfig) -> list[str]:
    compose = config.launcher == "compose"
    polls = (
        "polls of the stack's Prometheus container (counters up to one 5 s scrape old)"
        if compose
        else "progress polls"
    )
    start = "just before `docker compose up -d`" if compose else "the launcher's start"
    return [
        "## How the figures are measured",
        "",
        f"- env steps/s and updates/s: steady rates from each run's metrics.jsonl ({polls}), "
        "from the first poll with learner updates to the last (start-up and warm-up left "
        "out).",
        "- s to target: the run's own clock (episodes.csv `wall_seconds`, from "
        f"{start}) at the first evaluator episode where the mean of the last 100 evaluator "
        "episodes reaches the target.",
        "- best return: the best 100-episode evaluator mean of the run (the mean of all its "
        "evaluator episodes if it had fewer than 100).",
        "- CPU-s and energy: summary.json's CPU seconds per service (runs.csv splits them "
        "by role) and its energy, an estimate from CPU seconds unless the method says rapl.",
        "- runs.csv holds every figure per run, with the machine in every row.",
        "",
    ]
