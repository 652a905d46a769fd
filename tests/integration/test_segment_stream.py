"""Trajectory segments through a real Redis: writer, reader, back pressure, bad entries."""

from __future__ import annotations

import numpy as np
import redis

from actorq.onpolicy.segments import encode_segment
from actorq.onpolicy.stream import SegmentReader, SegmentWriter
from actorq.redis_keys import RedisKeys
from tests.unit.test_onpolicy_segments import segment


def test_segments_round_trip_in_order_with_backlog(
    redis_client: redis.Redis, redis_keys: RedisKeys
) -> None:
    reader = SegmentReader(redis_client, redis_keys)
    reader.start_from_now()  # nothing written yet: starts at the beginning
    writer = SegmentWriter(redis_client, redis_keys, codec="zstd")
    sent = [segment(obs_shape=(4, 10, 10), dtype=np.uint8, seed=i) for i in range(3)]
    for i, seg in enumerate(sent):
        seg.policy_version = i + 1
        writer.write_fields(encode_segment(seg, writer.codec), seg.steps)
    assert writer.backlog() == 3
    assert int(redis_client.get(redis_keys.inserted_counter)) == sum(s.steps for s in sent)
    got = reader.read(count=10, block_ms=100)
    reader.report()
    assert [s.policy_version for s in got] == [1, 2, 3]
    np.testing.assert_array_equal(got[2].obs, sent[2].obs)
    assert writer.backlog() == 0
    entries = [encode_segment(seg, "zstd") for seg in sent]
    assert reader.bytes_read == sum(len(k) + len(v) for e in entries for k, v in e.items())
    assert reader.transitions_read == sum(s.steps for s in sent)


def test_malformed_entries_are_skipped_and_counted(
    redis_client: redis.Redis, redis_keys: RedisKeys
) -> None:
    reader = SegmentReader(redis_client, redis_keys)
    reader.start_from_now()
    redis_client.xadd(redis_keys.trajectory_stream, {b"format": b"seg1", b"shape": b"x"})
    good = segment()
    SegmentWriter(redis_client, redis_keys).write_fields(encode_segment(good), good.steps)
    got = reader.read(count=10, block_ms=100)
    assert len(got) == 1 and reader.rejected == 1 and reader.consumed == 2


def test_a_restarted_learner_skips_stale_segments(
    redis_client: redis.Redis, redis_keys: RedisKeys
) -> None:
    old = segment()
    writer = SegmentWriter(redis_client, redis_keys)
    writer.write_fields(encode_segment(old), old.steps)
    reader = SegmentReader(redis_client, redis_keys)
    reader.start_from_now()
    assert writer.backlog() == 0  # the skipped segment no longer holds actors back
    assert reader.read(count=10, block_ms=50) == []
