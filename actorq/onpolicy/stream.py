"""Trajectory segments through Redis: actors XADD, the learner XREADs in order.

The learner reads the stream from where it left off; it does not replay old segments
after a restart (on-policy data is stale by then). Two counters make the actors' back
pressure: `trajectory_written` (INCR with each XADD, in one MULTI/EXEC) and
`trajectory_consumed` (set by the learner); actors wait while written - consumed exceeds
their allowed backlog.
"""

from __future__ import annotations

import logging

import redis

from actorq.obs_codec import check_codec
from actorq.onpolicy.segments import (
    SegmentDecodeError,
    TrajectorySegment,
    decode_segment,
)
from actorq.redis_keys import RedisKeys

log = logging.getLogger(__name__)


class SegmentWriter:
    def __init__(self, client: redis.Redis, keys: RedisKeys, codec: str = "none",
                 maxlen: int = 10_000) -> None:  # fmt: skip
        check_codec(codec)
        self.client, self.keys, self.codec, self.maxlen = client, keys, codec, maxlen

    def write_fields(self, fields: dict[bytes, bytes], steps: int) -> None:
        pipe = self.client.pipeline(transaction=True)
        pipe.xadd(self.keys.trajectory_stream, fields, maxlen=self.maxlen, approximate=True)  # type: ignore[arg-type]
        pipe.incr(self.keys.trajectory_written)
        pipe.incrby(self.keys.inserted_counter, steps)
        pipe.execute()

    def backlog(self) -> int:
        """Segments written but not yet read by the learner."""
        written, consumed = self.client.mget(
            self.keys.trajectory_written, self.keys.trajectory_consumed
        )
        return int(written or 0) - int(consumed or 0)


class SegmentReader:
    """Reads new segments in stream order; malformed entries are skipped and counted."""

    def __init__(self, client: redis.Redis, keys: RedisKeys, start_id: str = "$") -> None:
        self.client, self.keys = client, keys
        self.last_id = start_id
        self.rejected = 0
        self.consumed = 0
        self.bytes_read = 0  # stream entry bytes (fields and values) of decoded segments
        self.transitions_read = 0
        self._logged: set[str] = set()

    def start_from_now(self) -> None:
        """Skip segments written before this learner started (they are stale)."""
        info = (
            self.client.xinfo_stream(self.keys.trajectory_stream)
            if self.client.exists(self.keys.trajectory_stream)
            else None
        )
        self.last_id = info["last-generated-id"].decode() if info else "0-0"
        self.consumed = int(self.client.get(self.keys.trajectory_written) or 0)
        self.report()

    def read(self, count: int, block_ms: int) -> list[TrajectorySegment]:
        reply = self.client.xread(
            {self.keys.trajectory_stream: self.last_id}, count=count, block=block_ms
        )
        segments = []
        for _stream, entries in reply or []:
            for entry_id, fields in entries:
                self.last_id = entry_id.decode() if isinstance(entry_id, bytes) else entry_id
                self.consumed += 1
                try:
                    segment = decode_segment(fields)
                    segments.append(segment)
                    self.bytes_read += sum(len(k) + len(v) for k, v in fields.items())
                    self.transitions_read += segment.steps
                except SegmentDecodeError as err:
                    self.rejected += 1
                    if str(err)[:40] not in self._logged:
                        self._logged.add(str(err)[:40])
                        log.warning("skipping malformed trajectory segment: %s", err)
        return segments

    def report(self) -> None:
        """Tell actors how far the learner has read (their back pressure)."""
        self.client.set(self.keys.trajectory_consumed, self.consumed)
