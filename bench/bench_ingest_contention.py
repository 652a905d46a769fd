"""Updates while ingesting: does ingest take the update's GIL? ACTORQ_INGEST thread vs process.

    .venv/bin/python bench/bench_ingest_contention.py [--transitions 2000000] [--rounds 3]

A backlog of CartPole-sized transitions (32 per stream entry, as actors push them) is
written to Redis once. Then, interleaved per round, each arm runs the learner's own parts
on it: a replay mirror, ingest as a thread of this process (`ReplayIngest`) or as its own
process writing into shared memory (`ProcessIngest`), and on this thread DQN 64x64 updates
(batch 128, numpy-flat, uniform sampling from the mirror, no rate limit) for as long as
ingest takes to drain the backlog. Per arm: updates/s while ingesting, transitions/s
ingested, and the same updates/s with nothing ingesting ("alone", the same process, the
same mirror once full). Ratios within a round are what to compare: on 2 cores the process
arm can give ingest and updates a core each, the thread arm shares one GIL between them.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import threading
import time
import uuid

import numpy as np
import redis
import torch

from actorq.algos import load_algorithm_config, make_algorithm
from actorq.learner.ingest import ReplayIngest
from actorq.learner.ingest_process import ProcessIngest, make_shared_replay
from actorq.learner.update_path import setup_learner
from actorq.redis_keys import RedisKeys
from actorq.replay import RedisReplayReader, RedisReplayWriter, ReplayStorage, TransitionBatch
from actorq.replay.sampler import UniformSampler

OBS, ACTIONS, PER_ENTRY, BATCH = 4, 2, 32, 128


def _fill(client: redis.Redis, keys: RedisKeys, transitions: int) -> None:
    writer = RedisReplayWriter(client, keys, maxlen_entries=transitions // PER_ENTRY + 10)
    rng = np.random.default_rng(0)
    batches = []
    for i in range(transitions // PER_ENTRY):
        obs = rng.standard_normal((PER_ENTRY, OBS), dtype=np.float32)
        batches.append(TransitionBatch(
            obs=obs, action=rng.integers(0, ACTIONS, PER_ENTRY),
            reward=np.ones(PER_ENTRY, np.float32), next_obs=obs + 0.01,
            done=rng.random(PER_ENTRY) < 0.02, actor_id="a",
            policy_version=i // 100, precision="int8",
        ))  # fmt: skip
        if len(batches) == 256:
            writer.write_many(batches)
            batches = []
    writer.write_many(batches)


def _arm(mode: str, client: redis.Redis, keys: RedisKeys, transitions: int) -> dict[str, float]:
    capacity = transitions  # the whole backlog fits: the arms store the same rows
    stop = threading.Event()
    if mode == "process":
        shared = make_shared_replay(capacity, OBS, 0, (), links=False)
        storage = shared.storage
        reader = RedisReplayReader(client, keys, storage)
        ingest: ReplayIngest | ProcessIngest = ProcessIngest(reader, shared, stop)
    else:
        storage = ReplayStorage(capacity, OBS)
        reader = RedisReplayReader(client, keys, storage)
        ingest = ReplayIngest(reader, storage, stop)
    config = load_algorithm_config("dqn", {})
    algo = make_algorithm("dqn", OBS, ACTIONS, (64, 64), config, device="cpu", seed=0)
    setup_learner(algo, "cpu", "auto")
    sampler, rng = UniformSampler(), np.random.default_rng(0)

    def update() -> None:
        algo.update(storage.get(sampler.sample(storage, BATCH, rng).indices))

    reader.poll(block_ms=0, count=64)  # enough rows to sample from before timing
    ingest.start()
    started, updates = time.perf_counter(), 0
    while storage.total_added < transitions:
        ingest.sync()
        update()
        updates += 1
    busy = time.perf_counter() - started
    ingest.finish()
    alone_start, alone = time.perf_counter(), 0
    while time.perf_counter() - alone_start < min(busy, 5.0):
        update()
        alone += 1
    alone_s = time.perf_counter() - alone_start
    return {
        "updates_per_s": updates / busy,
        "ingest_per_s": transitions / busy,
        "alone_per_s": alone / alone_s,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--transitions", type=int, default=2_000_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--redis-url", default=os.environ.get("ACTORQ_REDIS_URL", "redis://127.0.0.1:6379/0")
    )
    args = parser.parse_args()
    torch.set_num_threads(1)  # the learner service's default (ACTORQ_TORCH_THREADS)
    keys = RedisKeys(f"bench-contention-{uuid.uuid4().hex[:8]}")
    os.environ["ACTORQ_REDIS_URL"], os.environ["ACTORQ_REDIS_PREFIX"] = args.redis_url, keys.prefix
    client = redis.Redis.from_url(args.redis_url)
    with open("/proc/cpuinfo") as f:
        info = f.read()
    flags = [f for f in ("avx2", "avx512f", "avx512_vnni") if f in info]
    names = [line.split(":")[1].strip() for line in info.splitlines() if "model name" in line]
    cpu = names[0] if names else platform.processor()
    print(f"# updates while ingesting; {cpu} ({' '.join(flags)}); load {os.getloadavg()[0]:.2f}; "
          f"{args.transitions:,} transitions, DQN 64x64 b{BATCH} numpy-flat")  # fmt: skip
    try:
        _fill(client, keys, args.transitions)
        results: dict[str, list[dict[str, float]]] = {"thread": [], "process": []}
        for _ in range(args.rounds):
            for mode in results:
                results[mode].append(_arm(mode, client, keys, args.transitions))
        print(
            "| ingest | updates/s while ingesting | alone | while/alone | transitions/s ingested |"
        )
        print("|---|---:|---:|---:|---:|")
        for mode, rows in results.items():
            med = {k: statistics.median(r[k] for r in rows) for k in rows[0]}
            ratio = med["updates_per_s"] / med["alone_per_s"]
            print(f"| {mode} | {med['updates_per_s']:,.0f} | {med['alone_per_s']:,.0f} | "
                  f"{ratio:.2f} | {med['ingest_per_s']:,.0f} |")  # fmt: skip
        load = os.getloadavg()[0]
        print(f"# medians of {args.rounds} interleaved rounds; load {load:.2f} at the end")
    finally:
        stale = list(client.scan_iter(match=f"{keys.prefix}:*"))
        if stale:
            client.delete(*stale)


if __name__ == "__main__":
    main()
