"""Replay throughput: writer -> Redis -> reader ingest, and local sampling.

    .venv/bin/python bench/bench_replay.py [--redis-url URL] [--transitions N]

Uses the Redis at --redis-url when it answers, else starts an embedded redis-server.
Writes under a unique key prefix and deletes it afterwards.
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing as mp
import time
import uuid
from collections.abc import Iterator
from multiprocessing.synchronize import Event as EventType

import numpy as np
import redis

from actorq.redis_keys import RedisKeys
from actorq.redis_server import EmbeddedRedis, RedisUnavailable, check_redis
from actorq.replay import (
    RedisReplayReader,
    RedisReplayWriter,
    ReplayStorage,
    TransitionBatch,
    UniformSampler,
)

# (obs_dim, transitions per batch, batches per round trip): CartPole, MuJoCo, larger
INGEST_CASES = [(4, 64, 1), (4, 64, 8), (4, 256, 1), (17, 64, 1), (17, 256, 1), (17, 256, 8)]
INGEST_CASES += [(84, 256, 1)]


def make_batch(n: int, obs_dim: int, rng: np.random.Generator) -> TransitionBatch:
    return TransitionBatch(
        obs=rng.standard_normal((n, obs_dim), dtype=np.float32),
        action=rng.integers(0, 4, n, dtype=np.int64),
        reward=rng.standard_normal(n, dtype=np.float32),
        next_obs=rng.standard_normal((n, obs_dim), dtype=np.float32),
        done=rng.random(n) < 0.01,
        actor_id="bench",
        policy_version=1,
        precision="int8",
    )


@contextlib.contextmanager
def redis_at(url: str) -> Iterator[str]:
    try:
        check_redis(url, timeout=0.5)
        yield url
    except RedisUnavailable:
        with EmbeddedRedis() as server:
            yield server.url


def write_all(url: str, prefix: str, n: int, obs_dim: int, batch: int, per_pipeline: int) -> float:
    """Write n transitions in batches under `prefix`; return the seconds it took."""
    client = redis.Redis.from_url(url)
    rng = np.random.default_rng(0)
    batches = [make_batch(batch, obs_dim, rng) for _ in range(n // batch)]
    writer = RedisReplayWriter(client, RedisKeys(prefix), maxlen_entries=len(batches) + 1000)
    t0 = time.perf_counter()
    for i in range(0, len(batches), per_pipeline):
        writer.write_many(batches[i : i + per_pipeline])
    elapsed = time.perf_counter() - t0
    client.close()
    return elapsed


def _actor_process(args: tuple, ready: EventType, go: EventType) -> None:
    ready.set()
    go.wait()
    write_all(*args)


def read_until(client: redis.Redis, keys: RedisKeys, n: int, obs_dim: int) -> float:
    """Poll until n transitions are mirrored; return the seconds it took."""
    reader = RedisReplayReader(client, keys, ReplayStorage(n, obs_dim))
    t0 = time.perf_counter()
    while reader.added < n:
        reader.poll(block_ms=50, count=512)
    return time.perf_counter() - t0


def bench_ingest(
    url: str, total: int, obs_dim: int, batch: int, per_pipeline: int
) -> tuple[float, float, float]:
    """Transitions/s: writing alone, reading alone, and an actor process writing while
    the learner reads (end to end, until the learner holds everything)."""
    client = redis.Redis.from_url(url)
    n = total // batch * batch
    args = (url, f"bench-{uuid.uuid4().hex}", n, obs_dim, batch, per_pipeline)
    keys = RedisKeys(args[1])
    try:
        write_s = write_all(*args)
        read_s = read_until(client, keys, n, obs_dim)
        client.delete(keys.replay_stream, keys.inserted_counter)
        ctx = mp.get_context("spawn")
        ready, go = ctx.Event(), ctx.Event()
        actor = ctx.Process(target=_actor_process, args=(args, ready, go))
        actor.start()
        ready.wait()
        go.set()
        e2e_s = read_until(client, keys, n, obs_dim)
        actor.join()
    finally:
        client.delete(keys.replay_stream, keys.inserted_counter)
        client.close()
    return n / write_s, n / read_s, n / e2e_s


def bench_sample(capacity: int, obs_dim: int, batch_size: int, iters: int) -> float:
    """Sampled transitions/s for UniformSampler.sample + ReplayStorage.get."""
    rng = np.random.default_rng(0)
    storage = ReplayStorage(capacity, obs_dim)
    chunk = make_batch(10_000, obs_dim, rng)
    for _ in range(capacity // 10_000):
        storage.add(chunk)
    sampler = UniformSampler()
    t0 = time.perf_counter()
    for _ in range(iters):
        storage.get(sampler.sample(storage, batch_size, rng).indices)
    return iters * batch_size / (time.perf_counter() - t0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/0")
    parser.add_argument("--transitions", type=int, default=200_000)
    args = parser.parse_args()
    with redis_at(args.redis_url) as url:
        print(f"Redis: {url}  transitions per run: {args.transitions}\n")
        header = ("obs_dim", "batch", "per pipe", "write tr/s", "read tr/s", "e2e tr/s")
        print("{:>7} {:>6} {:>8} {:>12} {:>12} {:>12}".format(*header))
        for obs_dim, batch, per_pipeline in INGEST_CASES:
            rates = bench_ingest(url, args.transitions, obs_dim, batch, per_pipeline)
            print(f"{obs_dim:>7} {batch:>6} {per_pipeline:>8}", *(f"{r:>12,.0f}" for r in rates))
    print(f"\n{'obs_dim':>7} {'capacity':>9} {'batch':>6} {'sampled tr/s':>13} {'us/batch':>9}")
    for obs_dim in (4, 17, 84):
        rate = bench_sample(1_000_000, obs_dim, 256, 2000)
        print(f"{obs_dim:>7} {1_000_000:>9,} {256:>6} {rate:>13,.0f} {256 / rate * 1e6:>9.1f}")


if __name__ == "__main__":
    main()
