"""What `actorq run` watches: Control.GetStatus of every service + the episodes stream."""

from __future__ import annotations

import contextlib
import math
import time
from collections import deque
from dataclasses import asdict, dataclass, field

import grpc
import redis

from actorq.actor.episodes import Episode, parse_episodes
from actorq.breakdown import actor_breakdown, publish_breakdown
from actorq.launch.processes import ServiceProcess
from actorq.redis_keys import RedisKeys
from actorq.rpc import make_channel
from actorq.v1 import control_pb2, control_pb2_grpc


@dataclass
class ProgressSample:
    """One row of metrics.jsonl."""

    wall_seconds: float
    env_steps: int  # actors only; the evaluator's steps are not training data
    eval_env_steps: int
    learner_updates: int
    updates_per_second: float
    policy_version: int
    eval_mean_return: float  # evaluator, last 100 episodes
    train_mean_return: float  # actors, last 100 episodes
    eval_episodes: int
    train_episodes: int
    loss: float
    replay_size: int
    learner_wait_fraction: float
    learner_sample_fraction: float
    learner_update_fraction: float
    learner_update_ms: float  # mean per update in its update calls, since the start
    blob_bytes: int
    dense_fp32_bytes: int
    delta_bytes_median: float
    delta_bytes_p10: float
    delta_bytes_p90: float
    broadcast_bytes_total: int
    bytes_saved_total: int
    policy_rejections: int
    # On-policy learners' importance-ratio and lag figures (onpolicy_*) and off-policy
    # learners' behaviour gap (behaviour_*, actorq.learner.behaviour), flattened in rows.
    extra: dict[str, float] = field(default_factory=dict)
    # Runtime breakdown (actorq.breakdown): seconds per actor step and per published version.
    actor_breakdown: dict = field(default_factory=dict)
    publish_breakdown: dict = field(default_factory=dict)
    # The quantizer's guard (actorq.guard): divergence of the newest version, fallbacks.
    guard: dict = field(default_factory=dict)
    # CPU seconds of all services so far (set by the launcher, which owns the processes).
    cpu_seconds: float = 0.0

    def row(self) -> dict[str, float | int | None]:
        values = asdict(self)
        values.update(values.pop("extra"))
        return {
            k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in values.items()
        }


class _StatusClient:
    def __init__(self, proc: ServiceProcess) -> None:
        self.proc = proc
        self.channel = make_channel(proc.address)
        self.stub = control_pb2_grpc.ControlStub(self.channel)
        self.last: control_pb2.ServiceStatus | None = None
        self._carried: dict[str, float] = {}  # totals of earlier lives of a restarted service
        self._seen: dict[str, float] = {}

    def refresh(self) -> control_pb2.ServiceStatus | None:
        # Keep the last known figures while a service is busy or restarting.
        with contextlib.suppress(grpc.RpcError):
            self.last = self.stub.GetStatus(control_pb2.GetStatusRequest(), timeout=1.0)
        return self.last

    def counters(self) -> dict[str, float]:
        return dict(self.last.counters) if self.last else {}

    def counter(self, name: str, default: float = 0.0) -> float:
        return self.last.counters.get(name, default) if self.last else default

    def total(self, name: str) -> float:
        """A counter summed over restarts: a restarted actor counts its env steps from 0."""
        value = self.counter(name)
        if value < self._seen.get(name, 0.0):
            self._carried[name] = self._carried.get(name, 0.0) + self._seen[name]
        self._seen[name] = value
        return self._carried.get(name, 0.0) + value


class RunMonitor:
    """Polls services and reads new episodes; keeps the full episode history."""

    def __init__(
        self,
        client: redis.Redis,
        keys: RedisKeys,
        learner: ServiceProcess,
        quantizer: ServiceProcess,
        actors: list[ServiceProcess],
        evaluator: ServiceProcess,
        started: float | None = None,
    ) -> None:
        self.client, self.keys = client, keys
        self.learner = _StatusClient(learner)
        self.quantizer = _StatusClient(quantizer)
        self.actors = [_StatusClient(a) for a in actors]
        self.evaluator = _StatusClient(evaluator)
        self.started = time.perf_counter() if started is None else started  # wall clock origin
        self._started_unix = time.time() - (time.perf_counter() - self.started)
        # (episode, total env steps, wall s), both at the episode's own end time
        self.episodes: list[tuple[Episode, int, float]] = []
        self._last_poll = (self._started_unix, 0)  # (unix time, total env steps) of a poll
        self.eval_recent: deque[float] = deque(maxlen=100)
        self.train_recent: deque[float] = deque(maxlen=100)
        self.episode_counts = {"eval": 0, "train": 0}
        self._last_id = "0-0"
        self.samples: list[ProgressSample] = []

    def poll(self) -> ProgressSample:
        for c in [self.learner, self.quantizer, *self.actors, self.evaluator]:
            c.refresh()
        env_steps = int(sum(a.total("env_steps") for a in self.actors))
        wall = time.perf_counter() - self.started
        self._read_episodes(env_steps, wall)
        sample = self._sample(env_steps, wall)
        self.samples.append(sample)
        return sample

    def _read_episodes(self, env_steps: int, wall: float) -> None:
        now = (time.time(), env_steps)
        previous, self._last_poll = self._last_poll, now
        try:
            reply = self.client.xread({self.keys.episodes_stream: self._last_id}, count=10000)
        except redis.RedisError:
            return
        for _stream, entries in reply or []:
            for entry_id, fields in entries:
                self._last_id = entry_id
                try:
                    episodes = parse_episodes(fields)  # one entry: one or more episodes
                except (KeyError, ValueError):
                    continue
                for episode in episodes:
                    self.episodes.append((episode, *self._stamp(episode, previous, now)))
                    kind = episode.kind
                    self.episode_counts[kind] = self.episode_counts.get(kind, 0) + 1
                    recent = self.eval_recent if kind == "eval" else self.train_recent
                    recent.append(episode.episode_return)

    def _stamp(
        self, episode: Episode, previous: tuple[float, int], now: tuple[float, int]
    ) -> tuple[int, float]:
        """(total env steps, wall seconds) when `episode` ended: its own end time, and the
        run's env steps interpolated between the two polls around it (the actors' counts
        arrive only with a poll; stamping every episode with the poll's own figures put
        thousands of episodes on a few dozen points)."""
        (t0, steps0), (t1, steps1) = previous, now
        ended = min(max(episode.unix_time, t0), t1)
        share = (ended - t0) / (t1 - t0) if t1 > t0 else 1.0
        return round(steps0 + share * (steps1 - steps0)), ended - self._started_unix

    def _sample(self, env_steps: int, wall: float) -> ProgressSample:
        lrn, qz = self.learner, self.quantizer
        return ProgressSample(
            wall_seconds=round(wall, 3),
            env_steps=env_steps,
            eval_env_steps=int(self.evaluator.total("env_steps")),
            learner_updates=int(lrn.counter("updates")),
            updates_per_second=round(lrn.counter("updates_per_second"), 1),
            policy_version=int(qz.last.policy_version) if qz.last else 0,
            eval_mean_return=_mean(self.eval_recent),
            train_mean_return=_mean(self.train_recent),
            eval_episodes=self.episode_counts["eval"],
            train_episodes=self.episode_counts["train"],
            loss=lrn.counter("loss", float("nan")),
            replay_size=int(lrn.counter("replay_size")),
            learner_wait_fraction=round(lrn.counter("wait_fraction"), 4),
            learner_sample_fraction=round(lrn.counter("sample_fraction"), 4),
            learner_update_fraction=round(lrn.counter("update_fraction"), 4),
            learner_update_ms=round(lrn.counter("update_ms"), 4),
            blob_bytes=int(qz.counter("blob_bytes")),
            dense_fp32_bytes=int(qz.counter("dense_fp32_bytes")),
            delta_bytes_median=qz.counter("delta_bytes_median"),
            delta_bytes_p10=qz.counter("delta_bytes_p10"),
            delta_bytes_p90=qz.counter("delta_bytes_p90"),
            broadcast_bytes_total=int(qz.counter("broadcast_bytes_total")),
            bytes_saved_total=int(qz.counter("bytes_saved_total")),
            policy_rejections=int(
                sum(a.total("policy_rejections") for a in [*self.actors, self.evaluator])
            ),
            extra=_onpolicy_counters(lrn),
            actor_breakdown=actor_breakdown([a.counters() for a in self.actors]),
            publish_breakdown=publish_breakdown(qz.counters()),
            guard={k: v for k, v in qz.counters().items() if k.startswith("guard_")},
        )

    def close(self) -> None:
        for c in [self.learner, self.quantizer, *self.actors, self.evaluator]:
            c.channel.close()


def _onpolicy_counters(learner: _StatusClient) -> dict[str, float]:
    if learner.last is None:
        return {}
    names = ("onpolicy_", "segment", "behaviour_")
    return {k: round(v, 5) for k, v in learner.last.counters.items() if k.startswith(names)}


def _mean(values: deque[float]) -> float:
    return sum(values) / len(values) if values else float("nan")
