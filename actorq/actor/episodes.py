"""Per-env episode bookkeeping and the episodes stream in Redis.

An actor writes every episode it finished since its last push as one stream entry of
columns: `instance`, `kind`, `count` (n, decimal text) and five little-endian arrays of
n values each (`return` float64, `length` int64, `version` int64, `env_steps` int64,
`time` float64; raw bytes, as the replay batches, nothing pickled). An entry without
`count` is the one-episode text form (`Episode.fields`, and every entry written before
this format), so both read alike through `parse_episodes`. The evaluator and the
on-policy actors write columns too (`EpisodeTracker.flush`).

An actor at M = 128 with a weak policy finishes ~12 episodes per vector step: one XADD
each, with an `Episode` object and its field dict, was the largest part of its push and of
its recording (docs/actor-throughput.md); now they are a few array operations per step and
one XADD per push. The stream's cap stays about `episodes_maxlen` *episodes*: an entry of
n episodes is written with MAXLEN ~ max(1, episodes_maxlen // n) entries.
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


def parse_episode(fields: dict[bytes, bytes]) -> Episode:
    """The one episode of a one-episode entry; ValueError when it holds another count."""
    episodes = parse_episodes(fields)
    if len(episodes) != 1:
        raise ValueError(f"expected an entry with one episode, got {len(episodes)}")
    return episodes[0]


class EpisodeTracker:
    """Running returns of M envs; finished episodes wait as columns until written."""

    def __init__(self, num_envs: int, instance: str, kind: str) -> None:
        self.returns = np.zeros(num_envs, dtype=np.float64)
        self.lengths = np.zeros(num_envs, dtype=np.int64)
        self.instance, self.kind = instance, kind
        self.recent: deque[float] = deque(maxlen=100)
        # Per step with endings: (returns, lengths, version, env_steps, unix time).
        self._finished: list[tuple[np.ndarray, np.ndarray, int, int, float]] = []
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
        caller): kept until written. `actorq.actor.act_kernels` calls it directly."""
        self._finished.append((returns, lengths, int(version), int(env_steps), time.time()))
        self.recent.extend(returns.tolist())
        self.pending_count += len(returns)
        self.count += len(returns)

    @property
    def pending(self) -> list[Episode]:
        """The finished episodes not yet written, in the order they ended."""
        return [
            Episode(self.instance, self.kind, float(r), int(n), version, env_steps, unix_time)
            for returns, lengths, version, env_steps, unix_time in self._finished
            for r, n in zip(returns.tolist(), lengths.tolist(), strict=True)
        ]

    def clear_pending(self) -> None:
        """Forget the pending episodes (once Redis acknowledged their entry)."""
        self._finished.clear()
        self.pending_count = 0

    @property
    def mean_return(self) -> float:
        return float(np.mean(self.recent)) if self.recent else float("nan")

    def fields(self) -> dict[str, str | bytes]:
        """The pending episodes as one entry of columns (see the module docstring)."""
        chunks = self._finished
        counts = [len(c[0]) for c in chunks]
        values = (
            np.concatenate([c[0] for c in chunks]),
            np.concatenate([c[1] for c in chunks]),
            *(np.repeat([c[i] for c in chunks], counts) for i in (2, 3, 4)),
        )
        columns = {
            name: np.asarray(v, dtype).tobytes()
            for (name, dtype), v in zip(_COLUMNS.items(), values, strict=True)
        }
        return {"instance": self.instance, "kind": self.kind, "count": str(sum(counts)), **columns}

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
