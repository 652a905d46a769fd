"""Continuous control end to end: `actorq run --algo ddpg|td3|sac|d4pg` on Pendulum-v1
through the real services, int8 actors; each must beat a random policy by a clear margin."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from actorq.envs import make_env

pytestmark = pytest.mark.e2e

MARGIN = 400.0  # Pendulum returns: random about -1200, solved about -200


def random_policy_return(episodes: int = 10) -> float:
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


@pytest.mark.timeout(480)  # a budget above the run's own --max-seconds safety net
@pytest.mark.parametrize("algo", ["td3", "sac", "d4pg", "ddpg"])
def test_continuous_algorithm_beats_random_on_pendulum(algo: str, tmp_path: Path) -> None:
    baseline = random_policy_return()
    run_dir = tmp_path / f"pendulum-{algo}"
    env = dict(os.environ)
    # Pendulum's rewards lie in [-16.3, 0]: put D4PG's value atoms on that scale.
    env.update(ACTORQ_D4PG_V_MIN="-1200", ACTORQ_D4PG_V_MAX="0")
    args = [
        *("--env", "Pendulum-v1", "--algo", algo, "--actors", "1", "--envs-per-actor", "4"),
        *("--eval-envs", "10", "--max-env-steps", "16000", "--max-seconds", "300"),
        *("--target-return", str(baseline + MARGIN + 100), "--seed", "0"),
        *("--run-dir", str(run_dir)),
    ]
    proc = subprocess.run(
        [sys.executable, "-m", "actorq", "run", *args],
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        env=env,
        timeout=420,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["algo"] == algo and summary["precision"] == "int8"
    assert summary["final_mean_return"] >= baseline + MARGIN, (baseline, summary)
    # The broadcast policy is the actor network alone: obs 3 -> 64 -> 64 -> 1 action.
    assert summary["fp32_equivalent_bytes"] == 4 * (3 * 64 + 64 + 64 * 64 + 64 + 64 + 1)
    meta = json.loads((run_dir / "checkpoints" / "checkpoint.json").read_text())
    assert meta["algo"] == algo
