"""`actorq run --replay prioritized --learners 2`: two data-parallel learner processes
(gloo all-reduce) training from a prioritized, sharded replay through the real services."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e


def test_prioritized_replay_with_two_learners(tmp_path: Path) -> None:
    run_dir = tmp_path / "per-2-learners"
    args = ["--replay", "prioritized", "--learners", "2", "--actors", "2"]
    args += ["--max-env-steps", "30000", "--target-return", "none", "--run-dir", str(run_dir)]
    proc = subprocess.run(
        [sys.executable, "-m", "actorq", "run", *args],
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=900,
    )
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    # no target: the verdict says the run finished, never "not solved"
    assert "finished (env-step budget 30000 spent)" in proc.stdout, proc.stdout[-2000:]
    assert "solved" not in proc.stdout
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["learners"] == 2 and summary["replay"] == "prioritized"
    assert summary["learner_updates"] > 100 and summary["policy_versions"] > 2
    assert summary["restarts"] == {}
    config = json.loads((run_dir / "config.json").read_text())
    ranks = {
        name: s["env"]["ACTORQ_RANK"]
        for name, s in config["services"].items()
        if "RANK" in str(s["env"])
    }
    assert ranks == {"learner": "0", "learner-1": "1"}

    stopped = {}
    for name in ("learner", "learner-1"):
        log = (run_dir / "logs" / f"{name}.log").read_text()
        match = re.search(
            r"learner (\d) stopped after (\d+) updates.*?(\d+) transitions ingested", log
        )
        assert match, log[-2000:]
        stopped[int(match.group(1))] = (int(match.group(2)), int(match.group(3)))
    # both ranks took every step together, each on its own share of the replay
    assert stopped[0][0] == stopped[1][0] >= summary["learner_updates"]
    assert stopped[0][1] > 0 and stopped[1][1] > 0
    assert "synced with rank 0" in (run_dir / "logs" / "learner-1.log").read_text()
