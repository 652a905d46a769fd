"""Random batches shaped like a learner's input, for timing and comparing update paths
(bench_learner, the GPU check, the gpu-marked tests, test_captured_update, and the
learner's start-up measurement, actorq.learner.device_probe): fixed seeds, so two learners
fed the same list see the same data."""

from __future__ import annotations

import numpy as np


def _observations(
    rng: np.random.Generator, rows: tuple[int, ...], obs: int | tuple[int, ...]
) -> np.ndarray:
    """Gaussian float32 [*rows, obs] for a flat `obs`; uint8 pixels [*rows, C, H, W] for a
    shape, as pixel replay and pixel segments keep them."""
    if isinstance(obs, tuple):
        return rng.integers(0, 256, (*rows, *obs), dtype="uint8")
    return rng.standard_normal((*rows, int(obs)), dtype=np.float32)


def random_update_batches(
    algo: str,
    obs: int | tuple[int, ...],
    out: int,
    batch: int,
    n: int = 8,
    seed: int = 0,
    *,
    done_rate: float = 0.05,
    nstep_every: int = 0,
) -> list[dict[str, np.ndarray]]:
    """`n` replay batches of `batch` transitions: Gaussian observations (uint8 pixels when
    `obs` is a [C, H, W] shape) and rewards, episode ends at `done_rate`, integer actions
    below `out` for DQN, else actions uniform in [-1, 1]^out. With `nstep_every` = k > 0,
    every k-th batch (the first included) also carries n-step lengths `steps` in {1, 2, 3},
    as the replay's n-step rows do."""
    rng = np.random.default_rng(seed)
    made = []
    for i in range(n):
        b = {
            "obs": _observations(rng, (batch,), obs),
            "next_obs": _observations(rng, (batch,), obs),
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


def random_segment_batches(
    obs: int | tuple[int, ...],
    actions: int,
    steps: int,
    envs: int,
    n: int = 2,
    seed: int = 0,
    *,
    done_rate: float = 0.02,
) -> list[dict[str, np.ndarray]]:
    """`n` time-major on-policy batches [steps, envs] as `stack_segments` makes them (the
    input of OnPolicyLearner.update): behaviour log-probs of a uniform policy over
    `actions`, terminations at `done_rate`, no truncated steps."""
    rng = np.random.default_rng(seed)
    rows = (steps, envs)
    made = []
    for _ in range(n):
        made.append(
            {
                "obs": _observations(rng, rows, obs),
                "action": rng.integers(0, actions, rows),
                "reward": rng.standard_normal(rows).astype(np.float32),
                "terminated": (rng.random(rows) < done_rate).astype(np.float32),
                "truncated": np.zeros(rows, np.float32),
                "behaviour_logp": np.full(rows, -np.log(actions), np.float32),
                "last_obs": _observations(rng, (envs,), obs),
            }
        )
    return made
