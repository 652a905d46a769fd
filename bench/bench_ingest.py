"""Learner ingest on its own: Redis XREAD + unpack + replay insert, transitions/s.

    .venv/bin/python bench/bench_ingest.py [--transitions 1000000] [--rounds 3]
        [--counts 512,4096] [--old-python /work/main/.venv/bin/python]

CartPole-sized transitions (obs 4 float32, int64 action, behaviour + log-prob) packed the
way actors pack them (the actor's pending buffer -> `TransitionBatch` -> `encode_batch`
via `RedisReplayWriter.queue`, `--push-every` transitions per stream entry, observations
from a real CartPole-v1 vector env) are pushed once to the Redis at --redis-url. Then,
interleaved per round, each arm reads the whole stream into a fresh `ReplayStorage` on
this one thread:

- plain-<count>: the per-entry path (`RedisReplayReader(bulk=False)`), the code before
  the bulk path, at XREAD COUNT <count>;
- bulk-<count>: the bulk path (raw XREAD, column-wise decode, one ring copy per column);
- main-plain-512 (with --old-python): the main checkout's reader in its own interpreter
  (its own learner default, COUNT 512) on the same stream.

Per arm: transitions/s of the real `poll` loop, the same work split into stages
(XREAD incl. reply parsing, unpack, insert) in ns per transition and us per poll, and the
Redis server's CPU seconds per million transitions (INFO cpu used_cpu_sys+used_cpu_user
deltas over the timed loop; on a shared Redis other clients' work counts in too, so
`--embedded` runs a private redis-server for clean CPU figures).
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Callable

import numpy as np
import redis

from actorq.actor.columns import PendingTransitions
from actorq.redis_keys import RedisKeys
from actorq.redis_server import EmbeddedRedis
from actorq.replay import (
    RedisReplayReader,
    RedisReplayWriter,
    ReplayStorage,
    decode_batch,
)
from actorq.replay.bulk import decode_run, layout_of
from actorq.replay.redis_io import _raw_stream_entries, _stream_entries

ENVS = 8  # envs per actor: one pending part per vector step, as the actor records them

_OLD_ARM = r"""
import json, sys, time
import redis
from actorq.redis_keys import RedisKeys
from actorq.replay import RedisReplayReader, ReplayStorage
url, prefix, total, capacity = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
client = redis.Redis.from_url(url)
reader = RedisReplayReader(client, RedisKeys(prefix), ReplayStorage(capacity, obs_dim=4))
cpu = lambda: sum(float(client.info("cpu")[k]) for k in ("used_cpu_sys", "used_cpu_user"))
cpu0, t0, own0 = cpu(), time.perf_counter(), time.process_time()
while reader.added < total:
    reader.poll(block_ms=0)
seconds, redis_cpu = time.perf_counter() - t0, cpu() - cpu0
own = time.process_time() - own0
print(json.dumps({"seconds": seconds, "cpu": own, "added": reader.added, "redis_cpu": redis_cpu}))
"""


def actor_batches(count: int, push_every: int, seed: int) -> list:
    """`count` batches as an actor builds them from a real CartPole-v1 vector env."""
    import gymnasium

    env = gymnasium.make_vec("CartPole-v1", num_envs=ENVS, vectorization_mode="sync")
    rng = np.random.default_rng(seed)
    obs, _ = env.reset(seed=seed)
    batches, pending = [], PendingTransitions()  # the actor's plain-path buffer
    while len(batches) < count:
        greedy = rng.integers(0, 2, ENVS)
        taken = np.where(rng.random(ENVS) < 0.1, rng.integers(0, 2, ENVS), greedy)
        logp = np.log(np.where(taken == greedy, 0.95, 0.05)).astype(np.float32)
        next_obs, reward, terminated, _truncated, _ = env.step(taken)
        pending.add(obs, taken, reward, next_obs, terminated, None, greedy, logp)
        obs = next_obs
        if pending.count >= push_every:
            batches.append(pending.batch("actor-0", len(batches) // 4, "int8"))
            pending.clear()
    env.close()
    return batches


def push(client: redis.Redis, keys: RedisKeys, batches: list, total: int) -> tuple[int, int]:
    """Push batches (cycled) until `total` transitions; returns (transitions, entries)."""
    writer = RedisReplayWriter(client, keys, maxlen_entries=10_000_000)
    pushed = entries = 0
    while pushed < total:
        pipe = client.pipeline(transaction=True)
        for batch in batches[:64]:
            writer.queue(pipe, batch)
            pushed, entries = pushed + len(batch), entries + 1
            if pushed >= total:
                break
        pipe.execute()
        batches = batches[64:] + batches[:64]
    return pushed, entries


def redis_cpu(client: redis.Redis) -> float:
    info = client.info("cpu")
    return float(info["used_cpu_sys"]) + float(info["used_cpu_user"])


def timed_poll(client, keys, total, capacity, bulk, count) -> dict:
    """The real reader's poll loop until every transition is in storage."""
    reader = RedisReplayReader(client, keys, ReplayStorage(capacity, 4), bulk=bulk)
    cpu0, t0, own0 = redis_cpu(client), time.perf_counter(), time.process_time()
    polls = 0
    while reader.added < total:
        reader.poll(block_ms=0, count=count)
        polls += 1
    seconds, own = time.perf_counter() - t0, time.process_time() - own0
    assert reader.rejected == 0 and len(reader.storage) == min(total, capacity)
    return {"seconds": seconds, "cpu": own, "redis_cpu": redis_cpu(client) - cpu0, "polls": polls}


def staged(client, keys, total, capacity, bulk, count) -> dict[str, float]:
    """The same work, stage by stage (seconds per stage over the whole stream)."""
    storage = ReplayStorage(capacity, 4)
    reader = RedisReplayReader(client, keys, storage, bulk=bulk)
    stream, last, added = keys.replay_stream, "0-0", 0
    t = {"xread": 0.0, "unpack": 0.0, "insert": 0.0}

    def clock(stage: str, fn: Callable, *args):  # type: ignore[no-untyped-def]
        started = time.perf_counter()
        out = fn(*args)
        t[stage] += time.perf_counter() - started
        return out

    while added < total:
        if bulk:
            reply = clock("xread", reader._raw.xread, {stream: last}, count)
            entries = _raw_stream_entries(reply, stream)
            lists = [fields for _, fields in entries]
            cols, rows = clock("unpack", decode_run, lists, layout_of(lists[0]), 4, 0)
            clock("insert", storage.add_rows, cols, rows)
        else:
            reply = clock("xread", client.xread, {stream: last}, count)
            entries = _stream_entries(reply, stream)
            batches = clock("unpack", lambda e: [decode_batch(f) for _, f in e], entries)
            clock("insert", lambda bs: [storage.add(b) for b in bs], batches)
            rows = sum(len(b) for b in batches)
        last, added = entries[-1][0].decode(), added + rows
    return t


def old_arm(python: str, url: str, keys: RedisKeys, total: int, capacity: int) -> dict:
    out = subprocess.run(
        [python, "-c", _OLD_ARM, url, keys.prefix, str(total), str(capacity)],
        check=True, capture_output=True, text=True, cwd="/tmp",
    )  # fmt: skip
    return json.loads(out.stdout.strip().splitlines()[-1])


def run(args: argparse.Namespace, url: str) -> dict:
    client = redis.Redis.from_url(url)
    keys = RedisKeys(f"bench-ingest-{uuid.uuid4().hex[:8]}")
    try:
        batches = actor_batches(256, args.push_every, seed=0)
        total, entries = push(client, keys, batches, args.transitions)
        arms = [(f"{'bulk' if b else 'plain'}-{c}", b, c) for c in args.counts for b in (0, 1)]
        results: dict[str, list[dict]] = {name: [] for name, _, _ in arms}
        if args.old_python:
            results["main-plain-512"] = []
        for _ in range(args.rounds):
            for name, bulk, count in arms:
                row = timed_poll(client, keys, total, args.capacity, bool(bulk), count)
                row |= staged(client, keys, total, args.capacity, bool(bulk), count)
                results[name].append(row)
            if args.old_python:
                results["main-plain-512"].append(
                    old_arm(args.old_python, url, keys, total, args.capacity)
                )
        return {"transitions": total, "entries": entries, "results": results}
    finally:
        client.delete(keys.replay_stream, keys.inserted_counter)
        client.close()


def report(out: dict) -> None:
    total = out["transitions"]
    print(f"\n{total:,} transitions in {out['entries']:,} entries "
          f"({total / out['entries']:.1f} per entry)")  # fmt: skip
    heads = ("xread", "unpack", "insert", "us/poll")
    print(f"{'arm':>16} {'transitions/s':>14} {'x plain-512':>11} {'per cpu-s':>11} "
          + " ".join(f"{h:>7}" for h in heads) + f" {'redis cpu s/M':>13}")  # fmt: skip
    rates = {k: [total / r["seconds"] for r in v] for k, v in out["results"].items()}
    base = statistics.median(rates.get("plain-512") or next(iter(rates.values())))
    for name, rows in out["results"].items():
        rate = statistics.median(rates[name])
        stages = [statistics.median(r.get(s, float("nan")) for r in rows) * 1e9 / total
                  for s in ("xread", "unpack", "insert")]  # fmt: skip
        polls = statistics.median(r.get("polls", float("nan")) for r in rows)
        per_poll = statistics.median(r["seconds"] for r in rows) / polls * 1e6
        cpu = statistics.median(r["redis_cpu"] for r in rows) / total * 1e6
        per_cpu = total / statistics.median(r["cpu"] for r in rows)
        print(f"{name:>16} {rate:>14,.0f} {rate / base:>10.2f}x {per_cpu:>11,.0f} "
              + " ".join(f"{s:>7.0f}" for s in stages)
              + f" {per_poll:>8.0f} {cpu:>13.2f}")  # fmt: skip
    print("per cpu-s: transitions per CPU second of the reading process (wall rates suffer "
          "on a loaded machine); stages in ns per transition; wall rates per round: "
          + ", ".join(f"{k} {[round(r) for r in v]}" for k, v in rates.items()))  # fmt: skip


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--redis-url", default="redis://127.0.0.1:6379/0")
    p.add_argument("--embedded", action="store_true", help="use a private redis-server")
    p.add_argument("--transitions", type=int, default=1_000_000)
    p.add_argument("--push-every", type=int, default=32, help="transitions per entry")
    p.add_argument("--capacity", type=int, default=1_000_000, help="replay mirror rows")
    p.add_argument("--counts", default="512,4096", help="XREAD COUNT values to compare")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--old-python", default="", help="interpreter of the main checkout")
    p.add_argument("--json", default="", help="write the raw results here")
    args = p.parse_args()
    args.counts = [int(c) for c in args.counts.split(",")]
    import hiredis

    cpu = platform.processor() or platform.machine()
    print(f"python {platform.python_version()}, redis-py {redis.__version__}, "
          f"hiredis {hiredis.__version__}, {cpu}")  # fmt: skip
    if args.embedded:
        with EmbeddedRedis() as server:
            out = run(args, server.url)
    else:
        out = run(args, args.redis_url)
    report(out)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    sys.exit(main())
