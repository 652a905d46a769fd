"""Returns the learning tests compare against: a random policy's on Pendulum-v1, and the
evaluator's at the end of a run."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np

from actorq.envs import make_env


def random_pendulum_return(episodes: int = 10) -> float:
    """The mean return of uniform random actions on Pendulum-v1 (about -1,200; solved is
    about -200), on fixed seeds."""
    env = make_env("Pendulum-v1")
    rng = np.random.default_rng(0)
    returns = []
    for i in range(episodes):
        env.reset(seed=1000 + i)
        total, ended = 0.0, False
        while not ended:
            _, reward, terminated, truncated, _ = env.step(rng.uniform(-1, 1, 1).astype(np.float32))
            total += float(reward)
            ended = terminated or truncated
        returns.append(total)
    env.close()
    return float(np.mean(returns))


def last_eval_mean(run_dir: Path, episodes: int = 20) -> float:
    """The mean return of the evaluator's last `episodes` episodes in a run folder: the
    policy the run ended with. summary.json's final_mean_return averages the last 100,
    which in a short run still holds rounds from before learning took off."""
    with (Path(run_dir) / "episodes.csv").open() as f:
        returns = [float(row["return"]) for row in csv.DictReader(f) if row["kind"] == "eval"]
    if len(returns) < episodes:
        raise ValueError(f"{run_dir}: {len(returns)} evaluator episodes, expected >= {episodes}")
    return float(np.mean(returns[-episodes:]))
