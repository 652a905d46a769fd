"""Per-env episode bookkeeping and the episodes stream in Redis."""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass
from itertools import chain

import numpy as np
import redis

from actorq.redis_keys import RedisKeys


@dataclass(frozen=True)
class Episode:
    instance: str
    kind: str  # "train" (actor) or "eval" (evaluator)
    episode_return: float
    length: int
    policy_version: int
    env_steps: int  # this process's env steps when the episode ended
    unix_time: float

    def fields(self) -> dict[str, str]:
        return {
            "instance": self.instance,
            "kind": self.kind,
            "return": repr(self.episode_return),
            "length": str(self.length),
            "version": str(self.policy_version),
            "env_steps": str(self.env_steps),
            "time": repr(self.unix_time),
        }


def parse_episode(fields: dict[bytes, bytes]) -> Episode:
    """Inverse of `Episode.fields`; ValueError/KeyError on a malformed entry."""
    get = {k.decode(): v.decode() for k, v in fields.items()}
    return Episode(
        instance=get["instance"],
        kind=get["kind"],
        episode_return=float(get["return"]),
        length=int(get["length"]),
        policy_version=int(get["version"]),
        env_steps=int(get["env_steps"]),
        unix_time=float(get["time"]),
    )


class EpisodeTracker:
    """Running returns of M envs; finished episodes wait in `pending` until written."""

    def __init__(self, num_envs: int, instance: str, kind: str) -> None:
        self.returns = np.zeros(num_envs, dtype=np.float64)
        self.lengths = np.zeros(num_envs, dtype=np.int64)
        self.instance, self.kind = instance, kind
        self.recent: deque[float] = deque(maxlen=100)
        self.pending: list[Episode] = []
        self.count = 0

    def step(self, rewards: np.ndarray, ended: np.ndarray, version: int, env_steps: int) -> None:
        self.returns += rewards
        self.lengths += 1
        for i in np.flatnonzero(ended):
            self._finish(int(i), version, env_steps)

    def _finish(self, i: int, version: int, env_steps: int) -> None:
        episode = Episode(
            self.instance,
            self.kind,
            float(self.returns[i]),
            int(self.lengths[i]),
            version,
            env_steps,
            time.time(),
        )
        self.recent.append(episode.episode_return)
        self.pending.append(episode)
        self.count += 1
        self.returns[i] = 0.0
        self.lengths[i] = 0

    @property
    def mean_return(self) -> float:
        return float(np.mean(self.recent)) if self.recent else float("nan")

    def flush(self, client: redis.Redis, keys: RedisKeys, maxlen: int) -> None:
        """Write pending episodes in one pipeline; they stay pending if Redis fails."""
        if not self.pending:
            return
        pipe = client.pipeline(transaction=False)
        self.queue(pipe, keys, maxlen)
        pipe.execute()
        self.pending.clear()

    def commands(self, keys: RedisKeys, maxlen: int) -> list[tuple]:
        """The XADDs `queue` adds, as argument tuples (actorq.actor.push sends them)."""
        stream, cap = keys.episodes_stream, str(maxlen)
        return [
            ("XADD", stream, "MAXLEN", "~", cap, "*", *chain.from_iterable(e.fields().items()))
            for e in self.pending
        ]

    def queue(self, pipe: redis.client.Pipeline, keys: RedisKeys, maxlen: int) -> None:
        """Add the pending episodes to `pipe`; the caller clears `pending` once it ran."""
        for episode in self.pending:
            pipe.xadd(keys.episodes_stream, episode.fields(), maxlen=maxlen, approximate=True)
