"""The run's final counts, read after the learner and quantizer have stopped.

`summary.json` used to copy the last progress poll, taken before shutdown: the learner's
final updates, its final publish and checkpoint came after it (one CartPole run reported
version 30 and 1,479 updates while Redis and the checkpoint held 35 and 1,692). The
learner's `finish()` publishes, reports its counters to Redis and checkpoints before it
exits, so once it and the quantizer are stopped, Redis and `checkpoint.json` hold the
final figures; this module reads them and says whether they agree.
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import asdict, dataclass
from pathlib import Path

import redis

from actorq.redis_keys import RedisKeys


@dataclass(frozen=True)
class FinalRecords:
    """Versions and counts as the stopped services left them (None: not available)."""

    redis_policy_version: int | None  # `latest`, moved by the quantizer's last store
    redis_learner_updates: int | None  # the learner's last progress report (in `finish`)
    transitions_inserted: int | None  # acknowledged by Redis, all actors and lives
    checkpoint_version: int | None
    checkpoint_updates: int | None
    # read by the learners' replay mirrors, all ranks, as each reported when it stopped
    transitions_ingested: int | None = None

    @property
    def transitions_not_ingested(self) -> int | None:
        """Acknowledged by Redis but never read by a learner: trimmed from the stream
        (its length cap) before the learner got to them, or pushed after it stopped.
        Only meaningful without learner restarts (a restarted mirror re-reads the stream)."""
        if self.transitions_inserted is None or self.transitions_ingested is None:
            return None
        return self.transitions_inserted - self.transitions_ingested

    @property
    def policy_version(self) -> int | None:
        return _first(self.redis_policy_version, self.checkpoint_version)

    @property
    def learner_updates(self) -> int | None:
        return _first(self.checkpoint_updates, self.redis_learner_updates)

    @property
    def agree(self) -> bool:
        """Redis and the checkpoint name the same final version and update count."""
        return (
            self.redis_policy_version is not None
            and self.redis_policy_version == self.checkpoint_version
            and self.redis_learner_updates == self.checkpoint_updates
        )

    def as_dict(self) -> dict[str, int | bool | None]:
        return {
            **asdict(self),
            "transitions_not_ingested": self.transitions_not_ingested,
            "agree": self.agree,
        }


def _first(*values: int | None) -> int | None:
    return next((v for v in values if v is not None), None)


def _int(value: bytes | str | None) -> int | None:
    try:
        return None if value is None else int(value)
    except ValueError:
        return None


def read_checkpoint_meta(checkpoint_dir: Path) -> dict:
    """checkpoint.json (version, updates, ...), {} when there is none or it is unreadable."""
    try:
        return json.loads((checkpoint_dir / "checkpoint.json").read_text())
    except (OSError, ValueError):
        return {}


def read_final_records(
    client: redis.Redis | None, keys: RedisKeys, checkpoint_dir: Path, learners: int = 1
) -> FinalRecords:
    """Call only after the learner and quantizer have exited (or from their final status)."""
    latest = updates = inserted = ingested = None
    if client is not None:
        with contextlib.suppress(redis.RedisError):
            latest, updates, inserted = (
                _int(v)
                for v in client.mget(
                    keys.policy_latest, keys.learner_updates, keys.inserted_counter
                )
            )
            per_rank = client.hvals(keys.learner_ingested)
            # A rank that did not report (killed at stop) leaves the total unknown.
            ingested = sum(int(v) for v in per_rank) if len(per_rank) >= learners else None
    meta = read_checkpoint_meta(checkpoint_dir)
    return FinalRecords(
        redis_policy_version=latest,
        redis_learner_updates=updates,
        transitions_inserted=inserted,
        checkpoint_version=_int(meta.get("version")),
        checkpoint_updates=_int(meta.get("updates")),
        transitions_ingested=ingested,
    )


def redis_cpu_seconds(client: redis.Redis | None) -> float | None:
    """User + system CPU seconds of the Redis server (INFO cpu), None when unavailable."""
    if client is None:
        return None
    try:
        info = client.info("cpu")
    except redis.RedisError:
        return None
    return float(info.get("used_cpu_user", 0.0)) + float(info.get("used_cpu_sys", 0.0))
