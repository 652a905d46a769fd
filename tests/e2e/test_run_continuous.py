"""Continuous control end to end: `actorq run --algo ddpg|td3|sac|d4pg` on Pendulum-v1
through the real services, int8 actors; each must beat a random policy by a clear margin."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from actorq.testing.returns import last_eval_mean, random_pendulum_return

pytestmark = pytest.mark.e2e

MARGIN = 400.0  # Pendulum returns: random about -1200, solved about -200


@pytest.mark.timeout(480)  # a budget above the run's own --max-seconds safety net
@pytest.mark.parametrize("algo", ["td3", "sac", "d4pg", "ddpg"])
def test_continuous_algorithm_beats_random_on_pendulum(algo: str, tmp_path: Path) -> None:
    baseline = random_pendulum_return()
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
    assert last_eval_mean(run_dir) >= baseline + MARGIN, (baseline, summary)
    # The broadcast policy is the actor network alone: obs 3 -> 64 -> 64 -> 1 action.
    assert summary["fp32_equivalent_bytes"] == 4 * (3 * 64 + 64 + 64 * 64 + 64 + 64 + 1)
    meta = json.loads((run_dir / "checkpoints" / "checkpoint.json").read_text())
    assert meta["algo"] == algo
