"""`actorq study` end to end: two short real runs (fp32, int8) through `actorq run`, the
report written from their folders, and a second invocation that resumes (runs nothing)."""

from __future__ import annotations

import csv
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e


def _study(out: Path) -> subprocess.CompletedProcess:
    args = ["--settings", "cartpole-dqn-64x2", "--precisions", "fp32,int8", "--seeds", "0"]
    args += ["--max-seconds", "10", "--out", str(out)]
    return subprocess.run(
        [sys.executable, "-m", "actorq", "study", *args],
        capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL,
    )  # fmt: skip


def test_study_runs_reports_and_resumes(tmp_path: Path) -> None:
    out = tmp_path / "study"
    first = _study(out)
    assert first.returncode == 0, (first.stdout + first.stderr)[-3000:]
    assert first.stdout.count("running ...") == 2
    report = (out / "report.md").read_text()
    assert "Runs finished: 2 of 2" in report and "| int8 | 1 |" in report
    with (out / "runs.csv").open() as f:
        rows = {r["precision"]: r for r in csv.DictReader(f)}
    assert set(rows) == {"fp32", "int8"}
    for row in rows.values():
        assert int(row["env_steps"]) > 0 and float(row["joules"]) > 0
        assert row["energy_method"] in ("estimate", "rapl")
        assert 0.95 <= float(row["coverage"]) <= 1.05  # breakdown adds up in real runs too
    assert (out / "breakdown_cartpole-dqn-64x2.png").exists()

    again = _study(out)
    assert again.returncode == 0, again.stderr[-2000:]
    assert again.stdout.count("done already") == 2 and "running ..." not in again.stdout
