"""`actorq scale --launcher compose` end to end on a real Docker engine: a one-cell grid
(2 actor containers, int8, one seed) as `docker compose up -d --scale actor=2` of the
local-image stack, measured for a short budget through the Prometheus container and the
Redis episodes stream, then `down -v`. Asserts the runs.csv row, the compose variables the
cell ran with, and that nothing with the cell's compose project label is left.

The `local_images` fixture (tests/conftest.py) starts an engine when none answers and
builds `make image`'s images (cached). The cell itself takes about two minutes on 2 cores.
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.compose, pytest.mark.timeout(1500)]

ARGS = [
    *("--launcher", "compose", "--actors", "2", "--precisions", "int8", "--seeds", "1"),
    *("--samples-per-insert", "16", "--max-seconds", "90"),
]


def test_compose_cell_reports_and_leaves_nothing(local_images: str, tmp_path: Path) -> None:
    out = tmp_path / "scale-compose"
    env = {**os.environ, "ACTORQ_EVAL_ENVS": "10", "ACTORQ_ENVS_PER_ACTOR": "4"}
    done = subprocess.run(
        [sys.executable, "-m", "actorq", "scale", "--out", str(out), *ARGS],
        capture_output=True, text=True, timeout=900, stdin=subprocess.DEVNULL, env=env,
    )  # fmt: skip
    print(done.stdout + done.stderr[-2000:])
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    assert "FAILED" not in done.stdout

    with (out / "runs.csv").open() as f:
        (row,) = list(csv.DictReader(f))
    print({k: row[k] for k in list(row)[:22]})
    assert (row["actors"], row["precision"], row["seed"]) == ("2", "int8", "1")
    assert row["status"] == "ok" and row["launcher"] == "compose", row
    assert float(row["env_steps_per_s"]) > 0 and float(row["updates_per_s"]) > 0, row
    assert int(row["env_steps"]) > 0 and int(row["learner_updates"]) > 0, row
    assert float(row["cpu_actors_s"]) > 0 and float(row["cpu_learner_s"]) > 0, row
    assert row["stop_reason"] in ("time budget 90s spent", "target return 475 reached"), row
    assert float(row["best_return"]) > 0, row  # evaluator episodes came through Redis

    folder = Path(row["folder"])
    compose = json.loads((folder / "compose.json").read_text())
    assert compose["variables"]["ACTORQ_PRECISION"] == "int8"
    assert compose["variables"]["ACTORQ_SEED"] == "1"
    assert compose["variables"]["ACTORQ_NUM_ACTORS"] == "2"
    summary = json.loads((folder / "summary.json").read_text())
    assert summary["launcher"] == "compose" and summary["transitions_inserted"] > 0
    with (folder / "episodes.csv").open() as f:
        instances = {e["instance"] for e in csv.DictReader(f)}
    assert {"actor-0", "actor-1", "evaluator"} <= instances  # both replicas claimed an index
    logs = (folder / "compose-logs.txt").read_text()
    assert "actor-0 up: env" in logs and "actor-1 up: env" in logs

    label = f"label=com.docker.compose.project={compose['project']}"
    for kind in (["ps", "-aq"], ["network", "ls", "-q"], ["volume", "ls", "-q"]):
        left = subprocess.run([local_images, *kind, "--filter", label], capture_output=True,
                              text=True, check=True).stdout.split()  # fmt: skip
        assert left == [], (kind, left)
    report = (out / "report.md").read_text()
    assert "**Launcher:** compose" in report and "--scale actor=2" in report
