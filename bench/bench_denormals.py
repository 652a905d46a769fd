"""The learner's update with subnormal floats kept or flushed (actorq.denormals), as it
trains: ms per update in blocks, and the share of Adam's first moment that is subnormal.

Each arm is a fresh process (the flags are per thread): DQN 64x64 on the path `auto`
picks on the CPU (numpy-flat), one torch thread as the service, batches of 128 drawn
eight at a time from a replay of CartPole transitions a random policy played (as the
learner service draws them). Arms alternate round by round.

    .venv/bin/python bench/bench_denormals.py --updates 70000 --rounds 2

The last line is `flushed/kept ms per update, last block: median <ratio> of <n> round(s)`.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from arms import cpu_label


def arm_worker(flush: bool, updates: int, block: int) -> dict:
    """ms per update of each block of `block` updates, and the subnormal share at its end."""
    import numpy as np
    import torch

    from actorq.algos import load_algorithm_config, make_algorithm
    from actorq.denormals import flush_denormals, subnormal_mask
    from actorq.learner.update_path import setup_learner
    from actorq.learner.update_step import UPDATE_COLUMNS, SampledBatches
    from actorq.replay import UniformSampler

    torch.set_num_threads(1)  # the service's learner default (ACTORQ_TORCH_THREADS)
    flushed = flush_denormals(flush)
    cfg = load_algorithm_config("dqn", {})
    algo = make_algorithm("dqn", 4, 2, (64, 64), cfg, device="cpu", seed=0)
    path = setup_learner(algo, "cpu", "auto").update_path
    storage = _random_play()
    rng = np.random.default_rng(0)
    draws = SampledBatches(UniformSampler(), storage, cfg.batch_size, 8, rng, UPDATE_COLUMNS)
    blocks = []
    for _ in range(updates // block):
        started = time.perf_counter()
        for _ in range(block):
            sample, batch = draws.next()
            algo.update(batch, sample.weights)
        ms = (time.perf_counter() - started) / block * 1e3
        m = torch.cat([s["exp_avg"].flatten() for s in algo.optimizer.state.values()]).numpy()
        blocks.append({"ms": ms, "subnormal": float(subnormal_mask(m).mean())})
    return {"flushed": flushed, "path": path, "blocks": blocks}


def _random_play(steps: int = 50_000):  # -> ReplayStorage
    """`steps` CartPole transitions of a uniform random policy, 8 envs at a time."""
    import gymnasium as gym
    import numpy as np

    from actorq.replay import ReplayStorage
    from actorq.replay.batch import TransitionBatch

    storage = ReplayStorage(100_000, 4)
    envs = gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1")] * 8)
    obs, _ = envs.reset(seed=0)
    rng = np.random.default_rng(0)
    resetting = np.zeros(8, bool)
    for _ in range(steps // 8):
        action = rng.integers(0, 2, 8)
        next_obs, reward, terminated, truncated, _ = envs.step(action)
        # Autoreset (gymnasium 1.x): the step after an episode's end only resets that env;
        # its row is no transition and is skipped, as actors do.
        k = ~resetting
        storage.add(TransitionBatch(
            obs=obs[k].astype(np.float32), action=action[k].astype(np.int64),
            reward=reward[k].astype(np.float32), next_obs=next_obs[k].astype(np.float32),
            done=terminated[k].astype(bool), actor_id="random", policy_version=0,
        ))  # fmt: skip
        obs, resetting = next_obs, terminated | truncated
    envs.close()
    return storage


def _arm(flush: bool, args: argparse.Namespace) -> dict:
    cmd = [sys.executable, __file__, "--worker", "1" if flush else "0"]
    cmd += ["--updates", str(args.updates), "--block", str(args.block)]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True, timeout=3600)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--updates", type=int, default=70_000, help="updates per arm")
    p.add_argument("--block", type=int, default=5_000, help="updates per timed block")
    p.add_argument("--rounds", type=int, default=2, help="interleaved rounds")
    p.add_argument("--worker", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.updates < args.block or args.block < 1 or args.rounds < 1:
        p.error("expected --updates >= --block >= 1 and --rounds >= 1")
    if args.worker is not None:
        print(json.dumps(arm_worker(args.worker == "1", args.updates, args.block)))
        return
    print(f"# subnormals kept vs flushed; {cpu_label()}; python {platform.python_version()}")
    print(f"# DQN 64x64, batch 128, {args.updates:,} updates per arm, blocks of {args.block:,}")
    print("| round | arm | path | ms per update, first / middle / last block | "
          "Adam m subnormal, last block |")  # fmt: skip
    print("|---:|---|---|---|---:|")
    ratios = []
    for r in range(args.rounds):
        last = {}
        for flush in (False, True):
            got = _arm(flush, args)
            blocks = got["blocks"]
            ms = [blocks[0]["ms"], blocks[len(blocks) // 2]["ms"], blocks[-1]["ms"]]
            arm = "flushed" if got["flushed"] else "kept"
            last[arm] = ms[-1]
            times = " / ".join(f"{x:.3f}" for x in ms)
            share = blocks[-1]["subnormal"]
            print(f"| {r + 1} | {arm} | {got['path']} | {times} | {share:.0%} |")
        if "kept" in last and "flushed" in last:
            ratios.append(last["flushed"] / last["kept"])
    if ratios:
        print(f"flushed/kept ms per update, last block: median "
              f"{statistics.median(ratios):.2f} of {len(ratios)} round(s)")  # fmt: skip
    else:
        print("flushed/kept: not measured (this CPU cannot flush subnormals)")


if __name__ == "__main__":
    main()
