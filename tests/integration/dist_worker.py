"""One rank of a data-parallel learner group, for test_distributed.py (run as a script).

Each rank starts from a different seed (so the initial sync is what makes them equal),
trains on its own deterministic batches with gradients averaged over the group, and
writes its final weights to a .npz file: plain arrays, nothing pickled.
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np

from actorq.algos import load_algorithm_config, make_algorithm
from actorq.algos.dqn import DQNConfig, DQNLearner
from actorq.learner.distributed import (
    DistConfig,
    GradientAverager,
    broadcast_tensors,
    init_group,
    leave_group,
    tensors_in,
)
from actorq.models import MLPSpec
from actorq.testing.batches import random_update_batches

SPEC = MLPSpec(4, 2, (16, 16))
CONFIG = DQNConfig(batch_size=8, target_update_every=3, learning_starts=0)


# Continuous algorithms: a 3-d observation, 1-d action, 16x16 nets, batch 8. TD3 without
# target-policy smoothing noise, so one learner on the joint batch is the exact reference.
CONTINUOUS = {"obs": 3, "act": 1, "hidden": (16, 16), "batch": 8}
OVERRIDES = {"td3": {"policy_noise": 0.0}}


def make_learner(algo: str, seed: int):
    """The rank's learner: DQN as before, the others through make_algorithm (CPU)."""
    if algo == "dqn":
        return DQNLearner(SPEC, CONFIG, seed=seed)
    c = CONTINUOUS
    config = load_algorithm_config(algo, {}, batch_size=c["batch"], **OVERRIDES.get(algo, {}))
    return make_algorithm(algo, c["obs"], c["act"], c["hidden"], config, seed=seed)


def algo_batch(algo: str, rank: int, step: int) -> dict[str, np.ndarray]:
    """Rank `rank`'s deterministic batch of update `step`."""
    if algo == "dqn":
        return rank_batch(rank, step)
    c = CONTINUOUS
    return random_update_batches(algo, c["obs"], c["act"], c["batch"], 1, 1000 * step + rank)[0]


def rank_batch(rank: int, step: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(1000 * step + rank)
    b = CONFIG.batch_size
    return {
        "obs": rng.normal(size=(b, 4)).astype(np.float32),
        "action": rng.integers(0, 2, size=b),
        "reward": rng.normal(size=b).astype(np.float32),
        "next_obs": rng.normal(size=(b, 4)).astype(np.float32),
        "done": rng.random(b) < 0.2,
    }


def group_threads() -> list[str]:
    """Names of this process's threads that the process group started (gloo's loops, the
    rendezvous store); after leave_group() there must be none."""
    names = []
    for tid in os.listdir("/proc/self/task"):
        with open(f"/proc/self/task/{tid}/comm") as f:
            names.append(f.read().strip())
    return sorted(n for n in names if n.startswith(("gloo", "pt_gloo", "pt_tcpstore")))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rank", type=int, required=True)
    parser.add_argument("--world-size", type=int, required=True)
    parser.add_argument("--addr", required=True)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--out", required=True)
    parser.add_argument("--algo", default="dqn")
    args = parser.parse_args()
    cfg = DistConfig(world_size=args.world_size, rank=args.rank, address=args.addr, timeout_s=30)
    learner = make_learner(args.algo, seed=100 + args.rank)
    init_group(cfg, "cpu")
    learner.prime_optimizer()
    broadcast_tensors(list(tensors_in(learner.state_dict())))
    learner.grad_sync = GradientAverager(args.world_size)
    for step in range(args.steps):
        learner.update(algo_batch(args.algo, args.rank, step))
    learner.state_dict()  # what a checkpoint does: imports torch._dynamo on first use
    leave_group()
    left = group_threads()
    if left:
        sys.exit(f"rank {args.rank}: threads still running after leave_group(): {left}")
    checksum = np.array([learner.weights_checksum()])
    np.savez(args.out, __checksum__=checksum, **learner.policy_weights())


if __name__ == "__main__":
    main()
