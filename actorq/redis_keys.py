"""Every Redis key actorq uses, in one place.

All keys live under one prefix (default "actorq") so several runs, or tests, can share a
Redis server without touching each other's data.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RedisKeys:
    prefix: str = "actorq"

    def __post_init__(self) -> None:
        if not self.prefix or any(c.isspace() for c in self.prefix):
            raise ValueError(
                f"redis key prefix must be non-empty without spaces, got {self.prefix!r}"
            )

    # --- replay ---------------------------------------------------------------------
    @property
    def replay_stream(self) -> str:
        """Stream of packed transition batches (XADD by actors, XREAD by the learner)."""
        return f"{self.prefix}:replay"

    @property
    def inserted_counter(self) -> str:
        """Total transitions acknowledged by Redis (INCRBY in the same pipeline as XADD)."""
        return f"{self.prefix}:replay:inserted"

    @property
    def learner_updates(self) -> str:
        """Learner's gradient-update count, read by actors for rate limiting."""
        return f"{self.prefix}:learner:updates"

    @property
    def learner_ingested(self) -> str:
        """Hash: learner rank -> transitions its replay mirror read from the stream, set
        when it stops (compared with `inserted_counter` to count transitions lost)."""
        return f"{self.prefix}:learner:ingested"

    @property
    def learner_sampled(self) -> str:
        """Transitions the learner has sampled so far (updates x batch size)."""
        return f"{self.prefix}:learner:sampled"

    @property
    def learner_info(self) -> str:
        """JSON: the device, update path and dtype the learner trains with (for summaries)."""
        return f"{self.prefix}:learner:info"

    @property
    def actor_index_counter(self) -> str:
        """INCR hands each auto-numbered actor replica its own index (see actor.identity)."""
        return f"{self.prefix}:actors:next_index"

    @property
    def episodes_stream(self) -> str:
        """One entry per finished episode (actors and evaluator), for progress and plots."""
        return f"{self.prefix}:episodes"

    # --- on-policy trajectory segments (actorq.onpolicy) ------------------------------
    @property
    def trajectory_stream(self) -> str:
        """Stream of trajectory segments (XADD by on-policy actors, XREAD by the learner)."""
        return f"{self.prefix}:trajectories"

    @property
    def trajectory_written(self) -> str:
        """Segments acknowledged by Redis (INCR in the same MULTI/EXEC as the XADD)."""
        return f"{self.prefix}:trajectories:written"

    @property
    def trajectory_consumed(self) -> str:
        """Segments the learner has read (trained on or dropped as stale)."""
        return f"{self.prefix}:trajectories:consumed"

    # --- policy blobs -----------------------------------------------------------------
    def policy_blob(self, version: int) -> str:
        """Envelope bytes of one policy version."""
        return f"{self.prefix}:policy:{version}"

    def policy_delta(self, version: int) -> str:
        """Envelope bytes of a PolicyDelta to `version` from the version in its meta's
        `delta_base` (absent when the full blob was smaller or there was no base)."""
        return f"{self.prefix}:policy:{version}:delta"

    def policy_meta(self, version: int) -> str:
        """Hash with the announcement fields of one version (precision, sizes, sha256)."""
        return f"{self.prefix}:policy:{version}:meta"

    @property
    def policy_latest(self) -> str:
        """Integer: the newest complete version. Moved only after its blob is written."""
        return f"{self.prefix}:policy:latest"

    @property
    def policy_versions(self) -> str:
        """Sorted set of stored versions (score = version), for keeping the last K."""
        return f"{self.prefix}:policy:versions"
