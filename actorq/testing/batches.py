"""Random replay batches shaped like a learner's input, for timing and comparing update
paths (bench_learner, the GPU check, the gpu-marked tests, test_captured_update): fixed
seeds, so two learners fed the same list see the same data."""

from __future__ import annotations

import numpy as np


def random_update_batches(
    algo: str,
    obs: int,
    out: int,
    batch: int,
    n: int = 8,
    seed: int = 0,
    *,
    done_rate: float = 0.05,
    nstep_every: int = 0,
) -> list[dict[str, np.ndarray]]:
    """`n` batches of `batch` transitions: Gaussian observations and rewards, episode ends
    at `done_rate`, integer actions below `out` for DQN, else actions uniform in [-1, 1]^out.
    With `nstep_every` = k > 0, every k-th batch (the first included) also carries n-step
    lengths `steps` in {1, 2, 3}, as the replay's n-step rows do."""
    rng = np.random.default_rng(seed)
    made = []
    for i in range(n):
        b = {
            "obs": rng.standard_normal((batch, obs), dtype=np.float32),
            "next_obs": rng.standard_normal((batch, obs), dtype=np.float32),
            "reward": rng.standard_normal(batch).astype(np.float32),
            "done": (rng.random(batch) < done_rate).astype(np.float32),
        }
        if algo == "dqn":
            b["action"] = rng.integers(0, out, batch)
        else:
            b["action"] = rng.uniform(-1, 1, (batch, out)).astype(np.float32)
        if nstep_every and i % nstep_every == 0:
            b["steps"] = rng.integers(1, 4, batch).astype(np.float32)
        made.append(b)
    return made
