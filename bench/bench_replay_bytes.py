"""Bytes per transition of pixel replay batches through Redis, raw vs zstd (BENCHMARKS.md 15m).

Random-policy transitions from the real envs, cut into batches as a DQN actor pushes them
(`auto_push_every` rows, in step then env order; next_obs n steps ahead as the n-step
accumulator writes it), encoded with `encode_batch` (format "3") for each codec. Per
transition: stream bytes (every field and value of the Redis entry), encode and decode ms
per batch, and the bound a frames-once format would approach: the zstd size of only the
newest frame of each next_obs (the one frame a frame-stacked transition adds).

    .venv/bin/python bench/bench_replay_bytes.py --envs ale:Pong,minatar:breakout --n-step 1,3
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from arms import cpu_label

from actorq.actor.columns import auto_push_every
from actorq.envs import make_vector_env
from actorq.obs_codec import compress
from actorq.replay.batch import TransitionBatch, decode_batch, encode_batch


def random_frames(env_id: str, steps: int, num_envs: int, seed: int) -> np.ndarray:
    """Observations [steps + 1, M, ...] of a random policy (autoreset rows included)."""
    env = make_vector_env(env_id, num_envs, seed, native=False)
    obs, _ = env.reset(seed=seed)
    env.action_space.seed(seed)
    frames = [obs]
    for _ in range(steps):
        obs, *_ = env.step(env.action_space.sample())
        frames.append(obs)
    env.close()
    return np.stack(frames)


def actor_batches(frames: np.ndarray, n_step: int, rows: int) -> list[TransitionBatch]:
    """Batches of `rows` transitions (whole vector steps), obs at t, next_obs at t + n."""
    num_envs = frames.shape[1]
    per_batch = max(1, -(-rows // num_envs))  # vector steps per push
    usable = frames.shape[0] - n_step
    batches = []
    for start in range(0, usable - per_batch + 1, per_batch):
        obs = frames[start : start + per_batch].reshape(-1, *frames.shape[2:])
        nxt = frames[start + n_step : start + n_step + per_batch].reshape(obs.shape)
        n = len(obs)
        batches.append(TransitionBatch(
            obs=obs, action=np.zeros(n, np.int64), reward=np.zeros(n, np.float32),
            next_obs=nxt, done=np.zeros(n, bool), actor_id="bench", policy_version=1,
            precision="int8",
        ))  # fmt: skip
    return batches


def measure(batches: list[TransitionBatch], codec: str) -> dict[str, float]:
    """Bytes per transition and median encode / decode ms per batch."""
    decode_batch(encode_batch(batches[0], codec))  # warm-up (imports, allocations)
    size, rows, encode_ms, decode_ms = 0, 0, [], []
    for batch in batches:
        started = time.perf_counter()
        fields = encode_batch(batch, codec)
        encode_ms.append((time.perf_counter() - started) * 1e3)
        started = time.perf_counter()
        back = decode_batch(fields)
        decode_ms.append((time.perf_counter() - started) * 1e3)
        if not (
            np.array_equal(back.obs, batch.obs) and np.array_equal(back.next_obs, batch.next_obs)
        ):
            raise SystemExit(f"{codec}: a batch did not decode to the frames it encoded")
        size += sum(len(k) + len(v) for k, v in fields.items())
        rows += len(batch)
    return {
        "bytes": size / rows,
        "encode_ms": statistics.median(encode_ms),
        "decode_ms": statistics.median(decode_ms),
    }


def frame_stacked(frames: np.ndarray) -> bool:
    """Whether each observation is the previous one shifted by one frame (a frame stack,
    newest last), so a transition adds one frame; MinAtar's channels are object layers."""
    return bool(np.array_equal(frames[1:, :, :-1], frames[:-1, :, 1:]))


def newest_frame_bytes(batches: list[TransitionBatch]) -> float:
    """zstd bytes per transition of only each next_obs's newest frame, batch by batch."""
    size = sum(len(compress(np.ascontiguousarray(b.next_obs[:, -1]).tobytes(), "zstd"))
               for b in batches)  # fmt: skip
    return size / sum(len(b) for b in batches)


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--envs", default="ale:Pong,minatar:breakout", help="pixel env ids")
    p.add_argument("--envs-per-actor", default="8", help="comma-separated M values")
    p.add_argument("--n-step", default="1,3", help="comma-separated n values")
    p.add_argument("--steps", type=int, default=400, help="vector steps per env and M")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    try:
        args.envs_per_actor = [int(v) for v in args.envs_per_actor.split(",")]
        args.n_step = [int(v) for v in args.n_step.split(",")]
    except ValueError:
        p.error("--envs-per-actor and --n-step take comma-separated integers")
    if min(args.envs_per_actor) < 1 or min(args.n_step) < 1 or args.steps < 2:
        p.error("--envs-per-actor and --n-step must be >= 1, --steps >= 2")
    return args


def report(env_id: str, m: int, n_steps: list[int], steps: int, seed: int) -> None:
    """The table rows of one env at M envs per actor: each n-step, each codec."""
    frames = random_frames(env_id, steps + max(n_steps), m, seed)
    if frames.dtype != np.uint8:
        raise SystemExit(f"{env_id}: float observations ({frames.dtype}); pixel envs only")
    shape, row_bytes = list(frames.shape[2:]), frames[0, 0].nbytes
    rows = auto_push_every(m, 2 * row_bytes)
    stacked = frame_stacked(frames)
    for n in n_steps:
        batches = actor_batches(frames[: steps + n], n, rows)
        if not batches:
            raise SystemExit(
                f"--steps {steps} is less than one batch of {env_id} "
                f"at M={m} ({rows} rows = {-(-rows // m)} vector steps)"
            )
        bound = f"{newest_frame_bytes(batches):,.0f}" if stacked else "n/a (not stacked)"
        raw = None
        for codec in ("none", "zstd"):
            got = measure(batches, codec)
            raw = raw or got["bytes"]
            print(f"| {env_id} | uint8 {shape} | {m} | {n} | {len(batches[0])} | {codec} "
                  f"| {got['bytes']:,.0f} | {got['bytes'] / raw:.4f} "
                  f"| {got['encode_ms']:.2f} | {got['decode_ms']:.2f} | {bound} |")  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    args = parse(argv)
    print(f"# pixel replay batches through Redis; {cpu_label()}")
    print("| env | obs | M | n-step | rows/batch | codec | bytes/transition | vs raw "
          "| encode ms/batch | decode ms/batch | newest frame only, zstd |")  # fmt: skip
    print("|---|---|---:|---:|---:|---|---:|---:|---:|---:|---:|")
    for env_id in args.envs.split(","):
        for m in args.envs_per_actor:
            report(env_id, m, args.n_step, args.steps, args.seed)


if __name__ == "__main__":
    main()
