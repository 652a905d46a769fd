"""The actor loop alone, with its policy built in process: no quantizer, no gRPC.

The policy goes through the real encode -> decode -> build path (actorq.quant), so the
module the loop runs is the one a follower would build from a blob; only the gRPC fetch is
left out. Transitions go to a real Redis. Used by bench_throughput.py and for profiling:

    .venv/bin/python bench/actor_inproc.py --env CartPole-v1 --hidden 64,64 --m 32
"""

from __future__ import annotations

import argparse
import os
import threading
import time
import uuid
from dataclasses import dataclass

import numpy as np
import redis
import torch

from actorq.actor.fixed_policy import StaticFollower, make_policy
from actorq.actor.loop import Actor
from actorq.actor.policy_follower import LoadedPolicy
from actorq.breakdown import actor_breakdown
from actorq.config import ActorSettings, parse_int_tuple
from actorq.envs import make_vector_env
from actorq.redis_keys import RedisKeys

# The local Redis; the GPU check points it at an embedded one (that machine runs none).
REDIS_URL = os.environ.get("ACTORQ_BENCH_REDIS_URL", "redis://127.0.0.1:6379/0")


@dataclass
class ActorRun:
    env_steps_per_s: float
    vector_steps: int
    phases_us: dict[str, float]  # microseconds per vector step by loop phase
    us_per_step: float


def run_actor(
    env_id: str,
    policy: LoadedPolicy,
    m: int,
    seconds: float,
    episodes: bool = True,
    **overrides,
) -> ActorRun:
    """One actor for about `seconds` of env loop at M = `m`, pushing to the real Redis.

    `episodes=False` is a diagnostic: finished episodes are not written to the episodes
    stream, to show what that stream costs the loop."""
    client = redis.Redis.from_url(REDIS_URL)
    keys = RedisKeys(f"bench-tp-{uuid.uuid4().hex[:8]}")
    settings = ActorSettings(
        redis_url=REDIS_URL, redis_prefix=keys.prefix, env_id=env_id, envs_per_actor=m,
        quantizer_addr="unused:0", **overrides,
    )  # fmt: skip
    env = make_vector_env(env_id, m, settings.seed, backend=settings.env_backend)
    stop = threading.Event()
    actor = Actor(settings, env, StaticFollower(policy), client, keys, stop)
    if not episodes:
        actor.episodes.commands = lambda *args: []  # type: ignore[method-assign]
    timer = threading.Timer(seconds, stop.set)
    timer.start()
    started = time.perf_counter()
    try:
        actor.run()
    finally:
        timer.cancel()
        elapsed = time.perf_counter() - started
        env.close()
        _drop_keys(client, keys.prefix)
    parts = actor_breakdown([actor.breakdown_counters()])
    phases = {p: s * 1e6 for p, s in parts.get("phases", {}).items()}
    return ActorRun(
        actor.env_steps / elapsed, actor.loop_steps, phases, parts.get("step_seconds", 0) * 1e6
    )


def _drop_keys(client: redis.Redis, prefix: str) -> None:
    names = list(client.scan_iter(match=f"{prefix}*", count=1000))
    if names:
        client.delete(*names)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="CartPole-v1")
    parser.add_argument("--hidden", default="64,64")
    parser.add_argument("--precision", default="int8")
    parser.add_argument("--m", type=int, default=32)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--env-backend", default="gymnasium", help="gymnasium or envpool")
    args = parser.parse_args()
    torch.set_num_threads(1)
    policy = make_policy(args.env, parse_int_tuple(args.hidden), args.precision)
    run = run_actor(args.env, policy, args.m, args.seconds, env_backend=args.env_backend)
    print(f"{run.env_steps_per_s:,.0f} env steps/s, {run.us_per_step:.1f} us/vector step")
    print({k: round(v, 1) for k, v in run.phases_us.items()})
    np.set_printoptions(precision=1)


if __name__ == "__main__":
    main()
