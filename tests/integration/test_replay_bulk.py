"""The bulk ingest path (actorq.replay.bulk) against the plain per-entry path: for the same
Redis stream both readers must store the same rows (every column, in order), count the
same rejections per reason and tell the sampler about the same final slots."""

from __future__ import annotations

import uuid

import numpy as np
import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from actorq.redis_keys import RedisKeys
from actorq.replay.batch import TransitionBatch, encode_batch
from actorq.replay.redis_io import RedisReplayReader, RedisReplayWriter
from actorq.replay.storage import COLUMNS, ReplayStorage
from tests.integration.test_replay_fuzz import malformed_entries

OBS_DIM = 3


class Recorder:
    """A sampler that records the slots the reader reports as (over)written."""

    def __init__(self) -> None:
        self.slots: list[int] = []

    def on_insert(self, indices: np.ndarray) -> None:
        self.slots += indices.tolist()


def _batch(rng: np.random.Generator, start: int, n: int, **kw: object) -> TransitionBatch:
    """Transition k carries k in its action (discrete) or first obs value (continuous)."""
    act_dim = int(kw.pop("act_dim", 0))  # type: ignore[call-overload]
    ids = np.arange(start, start + n)
    obs = rng.normal(size=(n, OBS_DIM)).astype(np.float32)
    obs[:, 0] = ids
    if act_dim:
        action = rng.uniform(-1, 1, (n, act_dim)).astype(np.float32)
    else:
        action = ids.astype(np.int64)
    fields: dict = {
        "obs": obs,
        "action": action,
        "reward": rng.normal(size=n).astype(np.float32),
        "next_obs": rng.normal(size=(n, OBS_DIM)).astype(np.float32),
        "done": rng.random(n) < 0.1,
        "actor_id": f"actor-{start % 3}",
        "policy_version": start // 7,
        "precision": "int8",
    }
    return TransitionBatch(**(fields | kw))


def _behaviour(rng: np.random.Generator, batch: TransitionBatch, logp: bool) -> dict:
    behaviour = batch.action.copy() if batch.action.dtype == np.int64 else batch.action * 0.5
    out = {"behaviour": behaviour}
    if logp:
        out["behaviour_logp"] = np.log(rng.uniform(0.1, 1.0, len(batch))).astype(np.float32)
    return out


def _readers(client: redis.Redis, keys: RedisKeys, capacity: int, act_dim: int = 0):
    made = []
    for bulk in (False, True):
        storage = ReplayStorage(capacity, OBS_DIM, act_dim)
        made.append(RedisReplayReader(client, keys, storage, Recorder(), bulk=bulk))
    return made


def _drain(reader: RedisReplayReader, count: int) -> None:
    """Poll until the stream's end (a poll of only rejected entries adds 0 but moves on)."""
    before = None
    while reader.last_id != before:
        before = reader.last_id
        reader.poll(block_ms=0, count=count)


def _assert_same(plain: RedisReplayReader, bulk: RedisReplayReader) -> None:
    assert bulk.storage.total_added == plain.storage.total_added
    assert len(bulk.storage) == len(plain.storage)
    rows = plain.storage.age_slots(np.arange(len(plain.storage)))
    a, b = plain.storage.get(rows), bulk.storage.get(rows)
    for name in COLUMNS:
        np.testing.assert_array_equal(a[name], b[name], err_msg=name)
        assert a[name].dtype == b[name].dtype, name
    assert bulk.rejected_by_reason == plain.rejected_by_reason
    assert bulk.last_id == plain.last_id and bulk.added == plain.added
    # The bulk path reports one set of slots per run, the plain path one per entry: the
    # slots written last are the same, in the same order.
    assert bulk.sampler.slots[-len(rows) :] == plain.sampler.slots[-len(rows) :]


@pytest.mark.parametrize("count", [1, 5, 4096])
def test_bulk_and_plain_store_the_same_rows_in_order(redis_client, redis_keys, count) -> None:
    """Actor-style entries (behaviour + log-prob), entries without them, n-step entries,
    varied sizes, versions and actors, a wrapping ring, and bad entries in between."""
    rng = np.random.default_rng(0)
    writer = RedisReplayWriter(redis_client, redis_keys, maxlen_entries=10_000)
    start = 0
    for i in range(60):
        n = int(rng.integers(1, 40))
        batch = _batch(rng, start, n)
        if i % 3 == 0:
            batch = _batch(rng, start, n, **_behaviour(rng, batch, logp=i % 2 == 0))
        if i % 5 == 0:
            batch.steps = rng.integers(1, 4, n).astype(np.uint8)
        writer.write(batch)
        start += n
        if i % 17 == 16:  # a bad entry: NaN reward, inside a run of the same layout
            bad = encode_batch(_batch(rng, start, 4))
            bad["reward"] = np.array([1, np.nan, 2, 3], "<f4").tobytes()
            redis_client.xadd(redis_keys.replay_stream, bad)
        if i == 30:  # an entry of another env (obs_dim 5)
            other = _batch(rng, 0, 3)
            other.obs = other.next_obs = np.zeros((3, 5), np.float32)
            redis_client.xadd(redis_keys.replay_stream, encode_batch(other))
    plain, bulk = _readers(redis_client, redis_keys, capacity=500)
    _drain(plain, count)
    _drain(bulk, count)
    assert plain.storage.total_added == start > 500  # the ring wrapped
    assert sum(plain.rejected_by_reason.values()) == 4
    _assert_same(plain, bulk)
    assert plain.bulk_rows == 0 and bulk.bulk_rows > start // 2  # the bulk path did work


def test_bulk_matches_plain_for_continuous_entries(redis_client, redis_keys) -> None:
    rng = np.random.default_rng(1)
    writer = RedisReplayWriter(redis_client, redis_keys, maxlen_entries=10_000)
    for i in range(20):
        batch = _batch(rng, 10 * i, 10, act_dim=2)
        writer.write(_batch(rng, 10 * i, 10, act_dim=2, **_behaviour(rng, batch, i % 2 == 0)))
    writer.write(_batch(rng, 0, 4))  # a discrete entry into a continuous storage: rejected
    plain, bulk = _readers(redis_client, redis_keys, capacity=1000, act_dim=2)
    _drain(plain, 4096)
    _drain(bulk, 4096)
    assert plain.storage.total_added == 200 and plain.rejected == 1
    _assert_same(plain, bulk)
    assert bulk.bulk_rows == 200


def test_bulk_rebuild_matches_plain(redis_client, redis_keys) -> None:
    rng = np.random.default_rng(2)
    writer = RedisReplayWriter(redis_client, redis_keys, maxlen_entries=10_000)
    for i in range(50):
        writer.write(_batch(rng, 32 * i, 32))
    plain, bulk = _readers(redis_client, redis_keys, capacity=4096)
    assert plain.rebuild(page_size=7) == bulk.rebuild(page_size=7) == 1600
    _assert_same(plain, bulk)
    assert bulk.bulk_rows == 1600


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(bad=st.lists(malformed_entries(), min_size=1, max_size=6), seed=st.integers(0, 99))
def test_bulk_matches_plain_around_malformed_entries(redis_client, bad, seed) -> None:
    keys = RedisKeys(f"test-{uuid.uuid4().hex}")
    rng = np.random.default_rng(seed)
    try:
        writer = RedisReplayWriter(redis_client, keys, maxlen_entries=10_000)
        for i, entry in enumerate(bad):
            writer.write(_batch(rng, 4 * i, 4))
            redis_client.xadd(keys.replay_stream, entry)
        plain, bulk = _readers(redis_client, keys, capacity=10_000)
        _drain(plain, 4096)
        _drain(bulk, 4096)
        _assert_same(plain, bulk)
    finally:
        redis_client.delete(keys.replay_stream, keys.inserted_counter)


def test_bulk_matches_plain_per_shard(redis_client, redis_keys) -> None:
    """Parallel learners split the stream by entry id: each share is the same both ways,
    including polls in which a share owns no entry at all."""
    rng = np.random.default_rng(3)
    writer = RedisReplayWriter(redis_client, redis_keys, maxlen_entries=10_000)
    for i in range(40):
        writer.write(_batch(rng, 8 * i, 8))
    stored = 0
    for index in range(3):
        made = []
        for bulk in (False, True):
            storage = ReplayStorage(1000, OBS_DIM)
            reader = RedisReplayReader(
                redis_client, redis_keys, storage, Recorder(), shard=(index, 3), bulk=bulk
            )
            _drain(reader, count=1)
            made.append(reader)
        _assert_same(*made)
        stored += made[0].storage.total_added
    assert stored == 320
