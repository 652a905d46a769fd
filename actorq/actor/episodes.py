"""Per-env episode bookkeeping and the episodes stream in Redis.

An actor writes every episode it finished since its last push as one stream entry of
columns: `instance`, `kind`, `count` (n) and five little-endian arrays of n values
(`return` f64, `length` i64, `version` i64, `env_steps` i64, `time` f64). An entry without
`count` is the one-episode text form (`Episode.fields`); `parse_episodes` reads both.
One XADD per episode was the largest part of a weak M = 128 actor's push
(docs/actor-throughput.md). An entry of n episodes is written with MAXLEN ~
max(1, episodes_maxlen // n), so the stream keeps about `episodes_maxlen` episodes.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass

import numpy as np
import redis

from actorq.redis_keys import RedisKeys

_COLUMNS = {"return": "<f8", "length": "<i8", "version": "<i8", "env_steps": "<i8", "time": "<f8"}


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
        """A one-episode entry (the same form `episode_fields` writes for many)."""
        return {
            "instance": self.instance,
            "kind": self.kind,
            "return": repr(self.episode_return),
            "length": str(self.length),
            "version": str(self.policy_version),
            "env_steps": str(self.env_steps),
            "time": repr(self.unix_time),
        }


def parse_episodes(fields: dict[bytes, bytes]) -> list[Episode]:
    """Every episode of one entry (columns, or the one-episode text form);
    ValueError/KeyError on a malformed entry (missing field, a column of another size)."""
    if b"count" not in fields:
        get = {k.decode(): v.decode() for k, v in fields.items()}
        return [
            Episode(
                instance=get["instance"],
                kind=get["kind"],
                episode_return=float(get["return"]),
                length=int(get["length"]),
                policy_version=int(get["version"]),
                env_steps=int(get["env_steps"]),
                unix_time=float(get["time"]),
            )
        ]
    n = int(fields[b"count"])
    columns = []
    for name, dtype in _COLUMNS.items():
        raw = fields[name.encode()]
        if len(raw) != 8 * n:
            raise ValueError(f"episode column {name!r}: {len(raw)} bytes, expected 8 x {n}")
        columns.append(np.frombuffer(raw, dtype).tolist())
    instance, kind = fields[b"instance"].decode(), fields[b"kind"].decode()
    return [
        Episode(instance, kind, r, length, v, s, t)
        for r, length, v, s, t in zip(*columns, strict=True)
    ]


class EpisodeTracker:
    """Running returns of M envs; finished episodes wait in preallocated columns (grown by
    doubling) until written; the compiled recorder fills them (`reserve`,
    `commit_finished`)."""

    def __init__(self, num_envs: int, instance: str, kind: str) -> None:
        self.returns = np.zeros(num_envs, dtype=np.float64)
        self.lengths = np.zeros(num_envs, dtype=np.int64)
        self.instance, self.kind = instance, kind
        self.recent: deque[float] = deque(maxlen=100)  # written episodes' returns
        size = max(num_envs, 64)
        self.columns = {name: np.empty(size, dtype) for name, dtype in _COLUMNS.items()}
        self.pending_count = 0  # episodes finished and not yet written
        self.count = 0

    def step(
        self,
        rewards: np.ndarray,
        ended: np.ndarray,
        version: int,
        env_steps: int,
        valid: np.ndarray | None = None,
    ) -> None:
        """`valid` False marks a NEXT_STEP reset row: no step of any episode, so it adds
        neither reward (the caller zeroes it) nor length."""
        self.returns += rewards
        self.lengths += 1 if valid is None else valid
        if not np.count_nonzero(ended):  # ~0.3 us; ndarray.any() ~1.7
            return
        done = np.asarray(ended).nonzero()[0]
        self.finished(self.returns[done], self.lengths[done], version, env_steps)
        self.returns[done] = 0.0
        self.lengths[done] = 0

    def finished(
        self, returns: np.ndarray, lengths: np.ndarray, version: int, env_steps: int
    ) -> None:
        """Episodes that ended on one step (their running sums already reset by the
        caller): kept until written."""
        at, k = self.reserve(len(returns)), len(returns)
        self.columns["return"][at : at + k] = returns
        self.columns["length"][at : at + k] = lengths
        self.commit_finished(k, version, env_steps)

    def reserve(self, k: int) -> int:
        """Room for `k` more pending episodes; the row the next one goes to."""
        n = self.pending_count
        if n + k > len(self.columns["return"]):
            size = max(2 * len(self.columns["return"]), n + k)
            for name, column in self.columns.items():
                grown = np.empty(size, column.dtype)
                grown[:n] = column[:n]
                self.columns[name] = grown
        return n

    def commit_finished(self, k: int, version: int, env_steps: int) -> None:
        """The `k` episodes written after the pending ones (returns and lengths, by the
        caller, after `reserve`) ended on one step: stamp them and count them."""
        rows = slice(self.pending_count, self.pending_count + k)
        self.columns["version"][rows] = version
        self.columns["env_steps"][rows] = env_steps
        self.columns["time"][rows] = time.time()
        self.pending_count += k
        self.count += k

    @property
    def pending(self) -> list[Episode]:
        """The finished episodes not yet written, in the order they ended."""
        values = (self.columns[name][: self.pending_count].tolist() for name in _COLUMNS)
        return [
            Episode(self.instance, self.kind, r, n, version, env_steps, unix_time)
            for r, n, version, env_steps, unix_time in zip(*values, strict=True)
        ]

    def clear_pending(self) -> None:
        """Forget the pending episodes (once Redis acknowledged their entry, or its
        payload holds them); their returns count in `mean_return` from now on."""
        n = self.pending_count
        self.recent.extend(self.columns["return"][max(n - 100, 0) : n].tolist())
        self.pending_count = 0

    @property
    def mean_return(self) -> float:
        """Mean return of the last 100 episodes finished (written or pending)."""
        n = self.pending_count
        last = [*self.recent, *self.columns["return"][max(n - 100, 0) : n].tolist()][-100:]
        return float(np.mean(last)) if last else float("nan")

    def fields(self) -> dict[str, str | bytes]:
        """The pending episodes as one entry of columns (see the module docstring)."""
        n = self.pending_count
        columns = {name: column[:n].tobytes() for name, column in self.columns.items()}
        return {"instance": self.instance, "kind": self.kind, "count": str(n), **columns}

    def flush(self, client: redis.Redis, keys: RedisKeys, maxlen: int) -> None:
        """Write the pending episodes as one entry; they stay pending if Redis fails."""
        commands = self.commands(keys, maxlen)
        if not commands:
            return
        (_xadd, stream, _maxlen, _approx, cap, _id, *flat) = commands[0]
        fields = dict(zip(flat[::2], flat[1::2], strict=True))
        client.xadd(stream, fields, maxlen=int(cap), approximate=True)
        self.clear_pending()

    def commands(self, keys: RedisKeys, maxlen: int) -> list[tuple]:
        """The XADD of the pending episodes' entry (none when nothing is pending), as an
        argument tuple (actorq.actor.push sends it inside the actor's transaction)."""
        if not self.pending_count:
            return []
        cap = str(max(int(maxlen) // self.pending_count, 1))
        flat = [x for item in self.fields().items() for x in item]
        return [("XADD", keys.episodes_stream, "MAXLEN", "~", cap, "*", *flat)]
