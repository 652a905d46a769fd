"""`make pong`'s plumbing on a machine without a GPU: bench/pong.sh (no wheels: the
interpreter's own packages) runs `actorq run --env ale:Pong` with EnvPool for its tiny
budget, stops within it and writes one report with the machine, the command and what the
run reached (18 is out of reach in 36 s; the report says so and gives the best mean)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.timeout(240)
def test_make_pong_runs_pong_through_the_services_and_reports(tmp_path: Path) -> None:
    out = tmp_path / "pong"
    env = {**os.environ, "PYTHON": sys.executable, "GPU_WHEELS": str(tmp_path / "no-wheels")}
    env.pop("OUT", None)
    result = subprocess.run(
        ["bench/pong.sh", "--tiny", "--out", str(out), "--", "--eval-envs", "2"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=200,
        stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert result.returncode == 0, (result.stdout + result.stderr)[-4000:]
    record = json.loads((out / "pong-int8.json").read_text())
    assert record["precision"] == "int8" and record["target"] == 18.0
    assert "--env ale:Pong" in record["command"] and "--target-return 18" in record["command"]
    assert "--eval-envs 2" in record["command"]  # what follows `--` reaches actorq run
    assert record["env_backend"] == "envpool" and record["exit_code"] == 0
    # stopped on its budget, start-up and shutdown inside the tiny plan's 36 s (+ slack)
    assert record["stop_reason"].startswith("time budget")
    assert record["wall_seconds"] <= 36 + 20
    assert record["env_steps"] > 0 and record["env_steps_per_s"] > 0
    assert record["updates_per_s"] > 0  # the learner trained with DQN's Atari settings
    assert record["settings"]["ACTORQ_DQN_N_STEP"] == "3"
    assert record["seconds_to_target"] is None  # a random Pong policy scores about -21
    assert record["best_return"] is None or -21 <= record["best_return"] < 18
    assert record["machine"]["cores"] >= 1 and record["machine"]["gpu"] == "none"
    text = (out / "pong-int8.md").read_text()
    assert text.startswith("# Pong, int8 actors, ")
    assert "**not reached in" in text
    assert "speed-up: not measured (no fp32 arm in this folder)" in text
    assert (out / "run-int8" / "summary.json").exists()
    assert "ale:Pong" in (out / "run-int8.log").read_text()  # the run's own output kept
