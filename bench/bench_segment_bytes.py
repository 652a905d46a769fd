"""Bytes per transition of trajectory segments through Redis, raw vs zstd (BENCHMARKS.md 15).

Random-policy segments (T steps x M envs, the actor's format, actorq.onpolicy.segments)
from the real envs; for each codec: stream bytes per transition (every field and value
of the Redis entry), encode and decode time per segment.

    .venv/bin/python bench/bench_segment_bytes.py --envs minatar:breakout,ale:Pong,CartPole-v1
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from actorq.envs import make_vector_env
from actorq.onpolicy.segments import TrajectorySegment, decode_segment, encode_segment


def random_segment(env_id: str, T: int, M: int, seed: int) -> TrajectorySegment:
    env = make_vector_env(env_id, M, seed, native=False)
    obs, _ = env.reset(seed=seed)
    frames = []
    for _ in range(T):
        frames.append(obs)
        obs, *_ = env.step(env.action_space.sample())
    env.close()
    zeros = np.zeros((T, M), np.float32)
    return TrajectorySegment(
        obs=np.stack(frames), action=np.zeros((T, M), np.int32), reward=zeros,
        terminated=zeros.astype(np.uint8), truncated=zeros.astype(np.uint8),
        behaviour_logp=zeros, last_obs=np.asarray(obs), trunc_index=np.zeros(0, np.int32),
        trunc_obs=np.zeros((0, *obs.shape[1:]), obs.dtype), actor_id="bench",
        policy_version=1, precision="int8",
    )  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--envs", default="minatar:breakout,ale:Pong,CartPole-v1")
    parser.add_argument("--unroll", type=int, default=64)
    parser.add_argument("--envs-per-actor", type=int, default=8)
    args = parser.parse_args()
    print(
        "| env | obs | codec | bytes/transition | vs raw obs | encode ms/segment"
        " | decode ms/segment |"
    )
    print("|---|---|---|---|---|---|---|")
    for env_id in args.envs.split(","):
        seg = random_segment(env_id, args.unroll, args.envs_per_actor, seed=0)
        raw_obs = seg.obs[0, 0].nbytes
        for codec in ("none", "zstd"):
            if codec == "zstd" and seg.obs.dtype != np.uint8:
                continue  # actors compress pixel observations only
            decode_segment(encode_segment(seg, codec))  # warm-up (imports, allocations)
            started = time.perf_counter()
            fields = encode_segment(seg, codec)
            encode_ms = (time.perf_counter() - started) * 1e3
            started = time.perf_counter()
            decode_segment(fields)
            decode_ms = (time.perf_counter() - started) * 1e3
            per = sum(len(k) + len(v) for k, v in fields.items()) / seg.steps
            print(
                f"| {env_id} | {seg.obs.dtype} {list(seg.obs.shape[2:])} | {codec} | {per:,.1f} | "
                f"{per / raw_obs:.3f} | {encode_ms:.2f} | {decode_ms:.2f} |"
            )


if __name__ == "__main__":
    main()
