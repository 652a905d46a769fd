"""`actorq scale` on a MinAtar game: minatar:breakout (CNN Q-network, int8 conv actors,
uint8 pixel replay) at 1 and 2 actors, one seed, a short budget and a low target, through
real `actorq run`s. On 2 shared cores 2 actors need not step faster than 1 (the learner
and evaluator share the cores), so the test asserts that each row is the cell it names:
its actor count in the run's summary and services, and episodes from every actor. About
two minutes on 2 cores."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(420)]

PNG = b"\x89PNG\r\n\x1a\n"
ARGS = [
    *("--env", "minatar:breakout", "--target-return", "0.5", "--actors", "1,2"),
    *("--precisions", "int8", "--seeds", "1", "--max-seconds", "60"),
    *("--", "--envs-per-actor", "4", "--eval-envs", "10"),
]


def test_scale_grid_on_minatar_breakout(tmp_path: Path) -> None:
    out = tmp_path / "scale-minatar"
    done = subprocess.run(
        [sys.executable, "-m", "actorq", "scale", "--out", str(out), *ARGS],
        capture_output=True, text=True, timeout=400, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    assert done.stdout.count("running ...") == 2 and "FAILED" not in done.stdout, done.stdout
    print(done.stdout)

    with (out / "runs.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert [(r["actors"], r["precision"], r["seed"]) for r in rows] == [
        ("1", "int8", "1"), ("2", "int8", "1"),
    ]  # fmt: skip
    for row in rows:
        print({k: row[k] for k in list(row)[:22]})
        assert row["status"] == "ok" and row["launcher"] == "processes", row
        assert row["target_return"] == "0.5", row
        assert float(row["env_steps_per_s"]) > 0 and float(row["updates_per_s"]) > 0, row
        assert int(row["learner_updates"]) > 0 and float(row["cpu_actors_s"]) > 0, row
        if row["seconds_to_target"]:  # empty when the evaluator's mean never reached 0.5
            assert 0 < float(row["seconds_to_target"]) <= float(row["wall_seconds"]), row
        folder = Path(row["folder"])
        actors = int(row["actors"])
        summary = json.loads((folder / "summary.json").read_text())
        assert summary["env"] == "minatar:breakout" and summary["actors"] == actors
        assert summary["precision"] == "int8" and summary["seed"] == 1
        services = json.loads((folder / "services.json").read_text())
        assert sorted(s for s in services if s.startswith("actor-")) == [
            f"actor-{i}" for i in range(actors)
        ]
        with (folder / "episodes.csv").open() as f:
            instances = {e["instance"] for e in csv.DictReader(f) if e["kind"] == "train"}
        assert instances == {f"actor-{i}" for i in range(actors)}  # every actor stepped
        learner_log = (folder / "logs" / "learner.log").read_text()
        assert "uint8 pixel observations" in learner_log  # the CNN / pixel replay path

    report = (out / "report.md").read_text()
    assert "DQN on minatar:breakout" in report and "| 2 | int8 | 16 |" in report
    for png in ("return_vs_wall.png", "time_to_target.png"):
        data = (out / png).read_bytes()
        assert data.startswith(PNG) and len(data) > 1000
