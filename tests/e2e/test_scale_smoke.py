"""`actorq scale --smoke` end to end: four short real runs (1 and 2 actors x fp32 and
int8 on CartPole) through `actorq run`, the report folder, and a second invocation that
resumes (runs nothing). About four minutes on 2 cores."""

from __future__ import annotations

import csv
import subprocess
import sys
import time
from pathlib import Path

import pytest

from actorq.study.runner import machine

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(480)]

COLUMNS = ["actors", "precision", "samples_per_insert", "seed", "env_steps_per_s",
           "updates_per_s", "seconds_to_target", "best_return", "cpu_model", "cores"]  # fmt: skip
PNG = b"\x89PNG\r\n\x1a\n"


def _smoke(out: Path) -> tuple[subprocess.CompletedProcess, float]:
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "actorq", "scale", "--smoke", "--out", str(out)],
        capture_output=True, text=True, timeout=450, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    return done, time.monotonic() - started


def test_scale_smoke_reports_and_resumes(tmp_path: Path) -> None:
    out = tmp_path / "scale"
    first, _ = _smoke(out)
    assert first.returncode == 0, (first.stdout + first.stderr)[-3000:]
    assert first.stdout.count("running ...") == 4, first.stdout
    assert "FAILED" not in first.stdout, first.stdout

    with (out / "runs.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 4 and set(COLUMNS) <= set(rows[0])
    cells = {(r["actors"], r["precision"]) for r in rows}
    assert cells == {("1", "fp32"), ("1", "int8"), ("2", "fp32"), ("2", "int8")}
    for row in rows:
        assert row["status"] == "ok" and row["seed"] == "1", row
        assert float(row["env_steps_per_s"]) > 0 and float(row["updates_per_s"]) > 0, row
        assert float(row["best_return"]) > 0, row
        if row["seconds_to_target"]:  # empty when the run never reached 475
            assert 0 < float(row["seconds_to_target"]) <= float(row["wall_seconds"]), row
        assert float(row["cpu_total_s"]) > 0 and float(row["energy_joules"]) > 0, row

    report = (out / "report.md").read_text()
    assert machine()["cpu_model"] in report and "cores" in report, report[:1500]
    assert "actorq scale --out" in report and "| 2 | int8 | 16 |" in report
    for png in ("return_vs_wall.png", "time_to_target.png"):
        data = (out / png).read_bytes()
        assert data.startswith(PNG) and len(data) > 1000

    again, seconds = _smoke(out)
    assert again.returncode == 0, again.stderr[-2000:]
    assert again.stdout.count(": done already\n") == 4 and "running ..." not in again.stdout
    assert "nothing to run: all 4 runs done already" in again.stdout
    assert seconds < 60, f"resuming a finished grid took {seconds:.0f} s"
