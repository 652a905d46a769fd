"""The figures of one finished `actorq run` folder that `actorq scale` reports.

- Steady rates come from metrics.jsonl (one row per progress poll): env steps and learner
  updates per second from the first poll at which the learner had updated (warm-up and
  service start-up excluded) to the last poll. A run with fewer than two such polls falls
  back to its whole-run figures from summary.json.
- Time to target comes from episodes.csv, on the run's own clock (`wall_seconds`): the
  first evaluator episode at which the mean of the last 100 evaluator episodes reaches
  the target, with a full window of 100, as `actorq run` decides "solved".
- Best return is the best such 100-episode mean (the mean of all evaluator episodes when
  the run had fewer than 100).
- CPU seconds per role and energy are summary.json's (`cpu_seconds`, `energy`).
"""

from __future__ import annotations

import csv
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

EVAL_WINDOW = 100  # the evaluator's mean is over its last 100 episodes
ROLES = ("learner", "actors", "quantizer", "evaluator", "redis", "launcher", "other")


@dataclass(frozen=True)
class EvalPoint:
    """The evaluator after one of its episodes: when, and its running mean."""

    wall: float
    env_steps: int
    mean: float  # over the last min(episodes, 100) evaluator episodes
    episodes: int  # evaluator episodes so far


@dataclass
class RunFigures:
    wall_seconds: float
    env_steps: int
    learner_updates: int
    stop_reason: str
    final_return: float | None
    env_steps_per_s: float | None
    updates_per_s: float | None
    seconds_to_target: float | None  # None: never reached
    env_steps_to_target: int | None
    best_return: float | None
    cpu_seconds: dict[str, float] = field(default_factory=dict)  # per role (ROLES)
    joules: float | None = None
    energy_method: str | None = None
    grams_co2: float | None = None
    curve: list[EvalPoint] = field(default_factory=list)

    @property
    def cpu_total(self) -> float:
        return round(sum(self.cpu_seconds.values()), 3)


def eval_curve(episodes_csv: Path) -> list[EvalPoint]:
    """The evaluator's running 100-episode mean after each of its episodes."""
    if not episodes_csv.exists():
        return []
    points: list[EvalPoint] = []
    window: list[float] = []
    total = 0.0
    with episodes_csv.open(newline="") as f:
        for row in csv.DictReader(f):
            if row.get("kind") != "eval":
                continue
            try:
                value = float(row["return"])
                wall, steps = float(row["wall_seconds"]), int(float(row["total_env_steps"]))
            except (KeyError, TypeError, ValueError):
                continue  # a row cut by an interrupted write
            window.append(value)
            total += value
            if len(window) > EVAL_WINDOW:
                total -= window.pop(0)
            points.append(EvalPoint(wall, steps, total / len(window), len(points) + 1))
    return points


def reach(curve: list[EvalPoint], target: float) -> EvalPoint | None:
    """The first point whose full 100-episode mean is >= target."""
    for point in curve:
        if point.episodes >= EVAL_WINDOW and point.mean >= target:
            return point
    return None


def best_return(curve: list[EvalPoint]) -> float | None:
    if not curve:
        return None
    need = min(EVAL_WINDOW, curve[-1].episodes)
    return max(p.mean for p in curve if p.episodes >= need)


def read_metrics(path: Path) -> list[dict]:
    rows = []
    if path.exists():
        for line in path.read_text().splitlines():
            try:
                rows.append(json.loads(line))
            except ValueError:
                continue  # a line cut by an interrupted write
    return rows


def steady_rates(rows: list[dict]) -> tuple[float, float] | None:
    """(env steps/s, updates/s) from the first poll with learner updates to the last."""
    learning = [r for r in rows if (r.get("learner_updates") or 0) > 0]
    if len(learning) < 2:
        return None
    first, last = learning[0], learning[-1]
    seconds = float(last["wall_seconds"]) - float(first["wall_seconds"])
    if seconds <= 0:
        return None
    steps = int(last["env_steps"]) - int(first["env_steps"])
    updates = int(last["learner_updates"]) - int(first["learner_updates"])
    return steps / seconds, updates / seconds


def cpu_by_role(cpu_seconds: dict[str, float | None]) -> dict[str, float]:
    """Per-service CPU seconds summed by role: actor-0, actor-1 -> actors; learner-1 ->
    learner; a service no role names -> other."""
    roles = dict.fromkeys(ROLES, 0.0)
    for name, seconds in cpu_seconds.items():
        role = re.sub(r"-\d+$", "", name)
        role = "actors" if role == "actor" else role
        roles[role if role in roles else "other"] += float(seconds or 0.0)
    return {k: round(v, 3) for k, v in roles.items()}


def load_figures(folder: Path, target: float) -> RunFigures:
    """Figures of a finished run folder (summary.json present)."""
    summary = json.loads((folder / "summary.json").read_text())
    wall, steps = float(summary["wall_seconds"]), int(summary["env_steps"])
    updates = int(summary["learner_updates"])
    rates = steady_rates(read_metrics(folder / "metrics.jsonl"))
    if rates is None and wall > 0:
        rates = (steps / wall, updates / wall)
    curve = eval_curve(folder / "episodes.csv")
    reached = reach(curve, target)
    energy = summary.get("energy") or {}
    return RunFigures(
        wall_seconds=wall,
        env_steps=steps,
        learner_updates=updates,
        stop_reason=str(summary.get("stop_reason", "")),
        final_return=summary.get("final_mean_return"),
        env_steps_per_s=None if rates is None else rates[0],
        updates_per_s=None if rates is None else rates[1],
        seconds_to_target=None if reached is None else reached.wall,
        env_steps_to_target=None if reached is None else reached.env_steps,
        best_return=best_return(curve),
        cpu_seconds=cpu_by_role(summary.get("cpu_seconds") or {}),
        joules=energy.get("joules"),
        energy_method=energy.get("method"),
        grams_co2=energy.get("grams_co2"),
        curve=curve,
    )


def last_line(log: Path) -> str:
    """The last non-blank line of a run's log: why a failed run failed, in one line."""
    try:
        lines = [s.strip() for s in log.read_text(errors="replace").splitlines() if s.strip()]
    except OSError:
        return f"no log at {log}"
    return lines[-1] if lines else "(empty log)"
