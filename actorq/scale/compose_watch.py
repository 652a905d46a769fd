"""What the compose launcher of `actorq scale` reads from a running stack, and the run
folder it writes from that in `actorq run`'s format, so the report reads both launchers
alike.

- Counters (actor env steps, learner updates, policy version) from the Prometheus
  container's HTTP API, one instant query each per poll; Prometheus scrapes every 5 s, so
  a value is up to one scrape old.
- Episodes (actors' and the evaluator's) from the Redis episodes stream, as `actorq run`'s
  monitor reads them: each stamped with its own end time on the cell's clock and the env
  steps interpolated between the two polls around it.
- CPU seconds per role from each service's `process_cpu_seconds_total` (the Prometheus
  container's own left out) and Redis' INFO; a restarted container's counters start again
  from 0, so a cell with restarts under-counts (summary.json `restarts` says so).
"""

from __future__ import annotations

import csv
import json
import math
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

import redis

from actorq.actor.episodes import Episode, parse_episodes
from actorq.launch.final import redis_cpu_seconds
from actorq.redis_keys import RedisKeys
from actorq.testing.compose import ComposeStack

ENV_STEPS = 'sum(actorq_actor_env_steps_total{job="actor"})'  # not the evaluator's
UPDATES = "sum(actorq_learner_updates_total)"
VERSION = "max(actorq_learner_policy_version)"
CPU_BY_JOB = 'sum by (job) (process_cpu_seconds_total{job=~"actor|evaluator|learner|quantizer"})'
EVAL_WINDOW = 100
EPISODE_COLUMNS = [
    "kind",
    "instance",
    "return",
    "length",
    "policy_version",
    "total_env_steps",
    "wall_seconds",
]


class StackWatch:
    """Polls one running stack; keeps every poll's row and every episode it read."""

    def __init__(
        self,
        stack: ComposeStack,
        client: redis.Redis,
        keys: RedisKeys,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.stack, self.client, self.keys = stack, client, keys
        # The cell's clock, from just before `up -d`: unix time, as episodes are stamped.
        self.clock = clock
        self.started_unix = clock()
        self.rows: list[dict[str, Any]] = []
        self.episodes: list[tuple[Episode, int, float]] = []  # (episode, env steps, wall s)
        self.eval_recent: deque[float] = deque(maxlen=EVAL_WINDOW)
        self.best_window: float | None = None  # best mean of a full window of 100 so far
        self.counts = {"eval": 0, "train": 0}
        self._last_id = "0-0"
        self._last_poll = (self.started_unix, 0)  # (unix time, env steps)

    def poll(self) -> dict[str, Any]:
        """One row of metrics.jsonl: the stack's counters now and the episodes so far."""
        now = self.clock()
        last = self.rows[-1] if self.rows else {}
        env_steps = self._counter(ENV_STEPS, last.get("env_steps", 0))
        self._read_episodes(now, env_steps)
        row = {
            "wall_seconds": round(now - self.started_unix, 3),
            "env_steps": env_steps,
            "learner_updates": self._counter(UPDATES, last.get("learner_updates", 0)),
            "policy_version": self._counter(VERSION, last.get("policy_version", 0)),
            "eval_mean_return": self.eval_mean(),
            "eval_episodes": self.counts["eval"],
            "train_episodes": self.counts["train"],
        }
        self.rows.append(row)
        return row

    def _counter(self, expr: str, previous: int) -> int:
        """The query's value, or the previous poll's while Prometheus has none yet."""
        value = self.stack.value(expr)
        return previous if value is None else int(value)

    def seconds(self) -> float:
        """Seconds on the cell's clock."""
        return self.clock() - self.started_unix

    def _read_episodes(self, unix_now: float, env_steps: int) -> None:
        now = (unix_now, env_steps)
        previous, self._last_poll = self._last_poll, now
        try:
            reply = self.client.xread({self.keys.episodes_stream: self._last_id}, count=10000)
        except redis.RedisError:
            return  # Redis not up yet: the next poll reads from the same id
        for _stream, entries in reply or []:
            for entry_id, fields in entries:
                self._last_id = entry_id
                try:
                    episodes = parse_episodes(fields)
                except (KeyError, ValueError):
                    continue
                for episode in episodes:
                    self.episodes.append((episode, *self._stamp(episode, previous, now)))
                    self.counts[episode.kind] = self.counts.get(episode.kind, 0) + 1
                    if episode.kind == "eval":
                        self._add_eval(episode.episode_return)

    def _stamp(
        self, episode: Episode, previous: tuple[float, int], now: tuple[float, int]
    ) -> tuple[int, float]:
        (t0, steps0), (t1, steps1) = previous, now
        ended = min(max(episode.unix_time, t0), t1)
        share = (ended - t0) / (t1 - t0) if t1 > t0 else 1.0
        return round(steps0 + share * (steps1 - steps0)), ended - self.started_unix

    def _add_eval(self, value: float) -> None:
        self.eval_recent.append(value)
        if len(self.eval_recent) == EVAL_WINDOW:
            mean = sum(self.eval_recent) / EVAL_WINDOW
            self.best_window = mean if self.best_window is None else max(self.best_window, mean)

    def eval_mean(self) -> float | None:
        """Mean of the evaluator's last 100 episodes (fewer early on); None before any."""
        return sum(self.eval_recent) / len(self.eval_recent) if self.eval_recent else None

    def solved(self, target: float) -> bool:
        """Some full window of 100 evaluator episodes so far had a mean >= `target`: the
        report's time to target, whichever episode between two polls reached it."""
        return self.best_window is not None and self.best_window >= target

    def cpu_seconds(self) -> dict[str, float]:
        """CPU seconds per service role (Prometheus' last scrape) and Redis' own."""
        cpu: dict[str, float] = {}
        try:
            result = self.stack.query(CPU_BY_JOB)
        except OSError:
            result = []
        for series in result:
            cpu[series["metric"]["job"]] = round(float(series["value"][1]), 3)
        redis_cpu = redis_cpu_seconds(self.client)
        if redis_cpu is not None:
            cpu["redis"] = round(redis_cpu, 3)
        return cpu

    def transitions_inserted(self) -> int | None:
        try:
            value = self.client.get(self.keys.inserted_counter)
        except redis.RedisError:
            return None
        return None if value is None else int(value)


def write_run_folder(folder: Path, watch: StackWatch, summary: dict[str, Any]) -> None:
    """metrics.jsonl, episodes.csv, then summary.json (last: it marks the run done)."""
    with (folder / "metrics.jsonl").open("w") as f:
        for row in watch.rows:
            f.write(json.dumps(row) + "\n")
    with (folder / "episodes.csv").open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(EPISODE_COLUMNS)
        for ep, env_steps, wall in watch.episodes:
            writer.writerow(
                [
                    ep.kind,
                    ep.instance,
                    ep.episode_return,
                    ep.length,
                    ep.policy_version,
                    env_steps,
                    round(wall, 3),
                ]
            )
    clean = {
        k: (None if isinstance(v, float) and not math.isfinite(v) else v)
        for k, v in summary.items()
    }
    tmp = folder / "summary.json.tmp"
    tmp.write_text(json.dumps(clean, indent=2) + "\n")
    tmp.replace(folder / "summary.json")
