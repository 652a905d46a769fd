"""Replay through a real Redis: writer -> stream -> reader -> storage, and EmbeddedRedis."""

from __future__ import annotations

import logging
import os
import shutil

import numpy as np
import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from actorq.redis_keys import RedisKeys
from actorq.redis_server import EmbeddedRedis, RedisUnavailable, check_redis, find_free_port
from actorq.replay.batch import TransitionBatch, encode_batch
from actorq.replay.redis_io import RedisReplayReader, RedisReplayWriter, read_inserted
from actorq.replay.sampler import UniformSampler
from actorq.replay.storage import ReplayStorage

OBS_DIM = 3


def numbered_batch(start: int, n: int, actor: str = "actor-0", version: int = 0) -> TransitionBatch:
    """Transition k carries the number start+k as its action, so order can be checked."""
    ids = np.arange(start, start + n)
    return TransitionBatch(
        obs=np.repeat(ids[:, None], OBS_DIM, axis=1).astype(np.float32),
        action=ids.astype(np.int64),
        reward=np.ones(n, np.float32),
        next_obs=np.repeat(ids[:, None] + 1, OBS_DIM, axis=1).astype(np.float32),
        done=ids % 10 == 9,
        actor_id=actor,
        policy_version=version,
        precision="int8",
    )


def stored_actions(storage: ReplayStorage) -> list[int]:
    return storage.get(np.arange(len(storage)))["action"].tolist()


def drain(reader: RedisReplayReader) -> int:
    total = 0
    while added := reader.poll(block_ms=0, count=7):
        total += added
    return total


class Recorder:
    """A sampler that only records which indices the reader reported as inserted."""

    def __init__(self) -> None:
        self.inserted: list[np.ndarray] = []

    def sample(self, storage, batch_size, rng):  # type: ignore[no-untyped-def]
        raise AssertionError("the reader must never sample")

    def update_priorities(self, indices: np.ndarray, priorities: np.ndarray) -> None:
        raise AssertionError("the reader must never update priorities")

    def on_insert(self, indices: np.ndarray) -> None:
        self.inserted.append(indices)


def test_round_trip_matches_inserted_counter(
    redis_client: redis.Redis, redis_keys: RedisKeys
) -> None:
    writer = RedisReplayWriter(redis_client, redis_keys, maxlen_entries=10_000)
    assert writer.write(numbered_batch(0, 5)) == 5
    assert writer.write_many([numbered_batch(5, 8), numbered_batch(13, 2, version=4)]) == 10
    assert writer.write_many([]) == 0
    assert read_inserted(redis_client, redis_keys) == 15
    assert redis_client.xlen(redis_keys.replay_stream) == 3

    storage = ReplayStorage(capacity=100, obs_dim=OBS_DIM)
    recorder = Recorder()
    reader = RedisReplayReader(redis_client, redis_keys, storage, sampler=recorder)
    assert reader.poll(block_ms=0) == 15
    assert reader.poll(block_ms=10) == 0
    assert len(storage) == storage.total_added == read_inserted(redis_client, redis_keys)
    assert stored_actions(storage) == list(range(15))
    assert storage.get(np.array([14]))["policy_version"].tolist() == [4]
    np.testing.assert_array_equal(np.concatenate(recorder.inserted), np.arange(15))
    assert reader.rejected == 0 and reader.added == 15

    writer.write(numbered_batch(15, 3))
    assert reader.poll(block_ms=50) == 3
    assert stored_actions(storage) == list(range(18))


def test_poll_pages_by_count(redis_client: redis.Redis, redis_keys: RedisKeys) -> None:
    writer = RedisReplayWriter(redis_client, redis_keys, maxlen_entries=10_000)
    writer.write_many(numbered_batch(2 * i, 2) for i in range(20))
    reader = RedisReplayReader(
        redis_client, redis_keys, ReplayStorage(capacity=100, obs_dim=OBS_DIM)
    )
    assert reader.poll(block_ms=0, count=7) == 14
    assert drain(reader) == 26
    assert stored_actions(reader.storage) == list(range(40))


def test_malformed_entries_skipped_and_counted(
    redis_client: redis.Redis, redis_keys: RedisKeys, caplog: pytest.LogCaptureFixture
) -> None:
    writer = RedisReplayWriter(redis_client, redis_keys, maxlen_entries=10_000)
    stream = redis_keys.replay_stream
    good = encode_batch(numbered_batch(0, 1))
    writer.write(numbered_batch(0, 4))
    redis_client.xadd(stream, {**good, "obs": good["obs"][:-2]})  # truncated bytes
    redis_client.xadd(stream, {**good, "obs": good["obs"][:-1]})  # same reason again
    redis_client.xadd(stream, {"junk": b"\x80\x04pickle?"})  # missing fields
    redis_client.xadd(stream, {**good, "n": b"2"})  # wrong n
    writer.write(numbered_batch(4, 4))
    wide = numbered_batch(0, 1)
    wide_fields = encode_batch(
        TransitionBatch(
            obs=np.zeros((1, OBS_DIM + 1), np.float32),
            action=wide.action,
            reward=wide.reward,
            next_obs=np.zeros((1, OBS_DIM + 1), np.float32),
            done=wide.done,
            actor_id="other-env",
            policy_version=0,
        )
    )
    redis_client.xadd(stream, wide_fields)  # valid, but for another obs_dim
    writer.write(numbered_batch(8, 2))

    storage = ReplayStorage(capacity=100, obs_dim=OBS_DIM)
    reader = RedisReplayReader(redis_client, redis_keys, storage)
    with caplog.at_level(logging.WARNING, logger="actorq.replay.redis_io"):
        assert drain(reader) == 10
    assert stored_actions(storage) == list(range(10))
    assert reader.rejected == 5
    assert reader.rejected_by_reason == {
        "bad_length": 3,
        "missing_field": 1,
        "obs_dim_mismatch": 1,
    }
    assert len(caplog.records) == 3  # once per reason
    assert reader.last_id == redis_client.xrevrange(stream, count=1)[0][0].decode()


def test_rebuild_after_restart_recovers_everything(
    redis_client: redis.Redis, redis_keys: RedisKeys
) -> None:
    writer = RedisReplayWriter(redis_client, redis_keys, maxlen_entries=100_000)
    for i in range(300):
        writer.write(numbered_batch(3 * i, 3, actor=f"actor-{i % 4}", version=i // 100))
    first = RedisReplayReader(
        redis_client, redis_keys, ReplayStorage(capacity=10_000, obs_dim=OBS_DIM)
    )
    first.poll(block_ms=0, count=50)  # the learner got part way, then "crashed"

    storage = ReplayStorage(capacity=10_000, obs_dim=OBS_DIM)
    reader = RedisReplayReader(redis_client, redis_keys, storage)
    assert reader.rebuild(page_size=64) == 900 == read_inserted(redis_client, redis_keys)
    assert stored_actions(storage) == list(range(900))
    assert reader.poll(block_ms=0) == 0  # continues after the last rebuilt entry
    writer.write(numbered_batch(900, 5))
    assert reader.poll(block_ms=0) == 5
    assert stored_actions(storage) == list(range(905))


def test_rebuild_of_empty_or_exactly_one_page(
    redis_client: redis.Redis, redis_keys: RedisKeys
) -> None:
    reader = RedisReplayReader(
        redis_client, redis_keys, ReplayStorage(capacity=100, obs_dim=OBS_DIM)
    )
    assert reader.rebuild() == 0 and reader.last_id == "0-0"
    RedisReplayWriter(redis_client, redis_keys, 100).write_many(
        numbered_batch(i, 1) for i in range(8)
    )
    assert reader.rebuild(page_size=8) == 8
    assert stored_actions(reader.storage) == list(range(8))


def test_maxlen_trims_approximately(redis_client: redis.Redis, redis_keys: RedisKeys) -> None:
    writer = RedisReplayWriter(redis_client, redis_keys, maxlen_entries=50)
    for start in range(0, 1000, 10):
        writer.write_many(numbered_batch(start + k, 1) for k in range(10))
    length = redis_client.xlen(redis_keys.replay_stream)
    assert 50 <= length < 1000  # '~' trims whole stream nodes (100 entries by default)
    assert read_inserted(redis_client, redis_keys) == 1000  # the counter counts all writes
    reader = RedisReplayReader(
        redis_client, redis_keys, ReplayStorage(capacity=2000, obs_dim=OBS_DIM)
    )
    assert reader.rebuild() == length
    assert stored_actions(reader.storage) == list(range(1000 - length, 1000))


def test_reader_works_over_resp3(redis_url: str, redis_keys: RedisKeys) -> None:
    client = redis.Redis.from_url(redis_url, protocol=3)
    try:
        RedisReplayWriter(client, redis_keys, 100).write(numbered_batch(0, 4))
        reader = RedisReplayReader(client, redis_keys, ReplayStorage(10, OBS_DIM))
        assert reader.poll(block_ms=0) == 4
    finally:
        client.close()


def test_reader_rejects_bad_client_and_args(redis_url: str, redis_keys: RedisKeys) -> None:
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    try:
        with pytest.raises(ValueError, match="decode_responses"):
            RedisReplayReader(client, redis_keys, ReplayStorage(10, OBS_DIM))
    finally:
        client.close()
    client = redis.Redis.from_url(redis_url, socket_timeout=0.5)
    try:
        reader = RedisReplayReader(client, redis_keys, ReplayStorage(10, OBS_DIM))
        with pytest.raises(ValueError, match="socket_timeout"):
            reader.poll(block_ms=1000)
    finally:
        client.close()
    with pytest.raises(ValueError, match="maxlen_entries"):
        RedisReplayWriter(client, redis_keys, maxlen_entries=0)


def test_sampling_from_mirrored_replay(redis_client: redis.Redis, redis_keys: RedisKeys) -> None:
    RedisReplayWriter(redis_client, redis_keys, 1000).write(numbered_batch(0, 20))
    storage = ReplayStorage(capacity=100, obs_dim=OBS_DIM)
    RedisReplayReader(redis_client, redis_keys, storage).poll(block_ms=0)
    result = UniformSampler().sample(storage, 256, np.random.default_rng(0))
    rows = storage.get(result.indices)
    np.testing.assert_array_equal(rows["obs"][:, 0], rows["action"])


def test_connection_errors_propagate(redis_keys: RedisKeys) -> None:
    client = redis.Redis(
        port=find_free_port(), socket_connect_timeout=0.2, retry=Retry(NoBackoff(), 0)
    )
    try:
        with pytest.raises(redis.ConnectionError):
            RedisReplayWriter(client, redis_keys, 10).write(numbered_batch(0, 1))
    finally:
        client.close()


# --- EmbeddedRedis ------------------------------------------------------------------------


def pid_exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_embedded_redis_start_stop_leaves_no_process() -> None:
    with EmbeddedRedis() as server:
        pid = server.pid
        assert pid is not None and pid_exists(pid)
        assert server.url.startswith("redis://127.0.0.1:") and server.url.endswith("/0")
        check_redis(server.url, timeout=1.0)
        client = redis.Redis.from_url(server.url)
        try:
            assert client.config_get("save") == {"save": ""}
            assert client.config_get("appendonly") == {"appendonly": "no"}
        finally:
            client.close()
        url = server.url
    assert not pid_exists(pid)
    with pytest.raises(RedisUnavailable, match=url):
        check_redis(url, timeout=0.5)
    server.stop()  # idempotent


def test_embedded_redis_appendonly_survives_restart(tmp_path: os.PathLike[str]) -> None:
    with EmbeddedRedis(data_dir=tmp_path, appendonly=True) as server:
        client = redis.Redis.from_url(server.url)
        client.set("k", b"v")
        client.close()
    with EmbeddedRedis(data_dir=tmp_path, appendonly=True) as server:
        client = redis.Redis.from_url(server.url)
        assert client.get("k") == b"v"
        client.close()


def test_embedded_redis_reports_startup_failure(tmp_path: os.PathLike[str]) -> None:
    with EmbeddedRedis() as first:
        clash = EmbeddedRedis(port=first.port, data_dir=tmp_path, start_timeout=5)
        with pytest.raises(RedisUnavailable, match=str(first.port)):
            clash.start()
        assert clash.pid is None
        check_redis(first.url)  # the first server is untouched


@pytest.mark.skipif(shutil.which("redis-server") is None, reason="no redis-server on PATH")
def test_embedded_redis_with_system_binary() -> None:
    exe = shutil.which("redis-server")
    with EmbeddedRedis(executable=exe) as server:
        check_redis(server.url)
        pid = server.pid
    assert pid is not None and not pid_exists(pid)


def test_check_redis_names_the_url() -> None:
    url = f"redis://127.0.0.1:{find_free_port()}/0"
    with pytest.raises(RedisUnavailable, match=url):
        check_redis(url, timeout=0.2)
