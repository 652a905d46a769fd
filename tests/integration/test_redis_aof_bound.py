"""The embedded Redis's append-only file is rewritten as it grows, and a Redis killed
after rewrites still brings back every transition it acknowledged."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest
import redis

from actorq.redis_keys import RedisKeys
from actorq.redis_server import EmbeddedRedis
from actorq.replay import RedisReplayReader, RedisReplayWriter, ReplayStorage, read_inserted
from actorq.replay.batch import TransitionBatch

ROUNDS = 600


def _folder_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def _after_rewrites(client: redis.Redis, timeout: float = 30.0) -> dict:
    """INFO persistence once no AOF rewrite runs or waits (the loaded machine is slow)."""
    deadline = time.monotonic() + timeout
    while True:
        info = client.info("persistence")
        busy = info["aof_rewrite_in_progress"] or info["aof_rewrite_scheduled"]
        if not busy or time.monotonic() > deadline:
            return info
        time.sleep(0.1)


def _batch(rng: np.random.Generator, n: int = 32) -> TransitionBatch:
    return TransitionBatch(
        obs=rng.normal(size=(n, 4)).astype(np.float32),
        action=rng.integers(0, 2, n),
        reward=np.ones(n, np.float32),
        next_obs=rng.normal(size=(n, 4)).astype(np.float32),
        done=rng.random(n) < 0.05,
        actor_id="actor-0",
        policy_version=3,
        precision="int8",
    )


def test_aof_is_rewritten_and_a_killed_redis_loses_nothing(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="aof_rewrite_min_mb must be >= 1, got 0"):
        EmbeddedRedis(aof_rewrite_min_mb=0)
    rng = np.random.default_rng(0)
    batches = [_batch(rng) for _ in range(64)]
    keys = RedisKeys("aof")
    cap_entries = 2_000  # 64,000 transitions live: ~3 MB in Redis
    with EmbeddedRedis(data_dir=tmp_path, appendonly=True, aof_rewrite_min_mb=1) as server:
        client = redis.Redis.from_url(server.url)
        writer = RedisReplayWriter(client, keys, maxlen_entries=cap_entries)
        peak = 0
        for i in range(ROUNDS):  # 1,228,800 transitions written, ~120 MB of XADD commands
            writer.write_many(batches)
            time.sleep(0.01)  # <= 200k transitions/s: faster than 14 actors insert
            if i % 10 == 0:
                peak = max(peak, _folder_bytes(tmp_path))
        info = _after_rewrites(client)
        settled = _folder_bytes(tmp_path)
        inserted, length = read_inserted(client, keys), client.xlen(keys.replay_stream)
        last = client.xrevrange(keys.replay_stream, count=1)[0]
        server.restart()  # SIGKILL, then the same port and folder: the AOF is replayed
        after = redis.Redis.from_url(server.url)
        assert read_inserted(after, keys) == inserted == ROUNDS * 64 * 32
        assert after.xlen(keys.replay_stream) == length >= cap_entries
        assert after.xrevrange(keys.replay_stream, count=1)[0] == last
        reader = RedisReplayReader(after, keys, ReplayStorage(200_000, obs_dim=4))
        assert reader.rebuild() == length * 32 and reader.rejected == 0
        client.close()
        after.close()
    # At least one rewrite finished before the kill (-1: none yet).
    assert info["aof_last_rewrite_time_sec"] >= 0 and info["aof_last_bgrewrite_status"] == "ok"
    # Without rewrites the file would hold every XADD (> 120 MB); with them it stays a
    # fraction of that. How small depends on how soon the forked rewrite gets a core
    # (35.7 MB peak at 300 rounds was seen at load ~50), so the bound is loose.
    assert settled < 48 * 2**20, settled
    assert peak < 48 * 2**20, peak
