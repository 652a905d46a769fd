"""`actorq run` says where its learner trained: summary.json's learner_device,
learner_update_path, learner_dtype and learner_device_timings (auto's start-up
measurement), and the learner's actorq_learner_info gauge."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e

INFO = "actorq_learner_info{"


def _start(run_dir: Path, *flags: str) -> subprocess.Popen:
    args = ["--env", "CartPole-v1", "--actors", "1", "--envs-per-actor", "4", "--eval-envs", "2"]
    args += ["--target-return", "none", "--max-seconds", "25", "--run-dir", str(run_dir)]
    return subprocess.Popen(
        [sys.executable, "-m", "actorq", "run", *args, *flags],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, stdin=subprocess.DEVNULL,
    )  # fmt: skip


def _learner_info_line(run_dir: Path, proc: subprocess.Popen, timeout: float = 90) -> str:
    """The learner's actorq_learner_info sample, scraped from its /metrics while it runs."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            url = json.loads((run_dir / "config.json").read_text())["services"]["learner"]
            page = urllib.request.urlopen(url["metrics"], timeout=2).read().decode()
        except (OSError, ValueError, KeyError):
            time.sleep(0.5)
            continue
        lines = [ln for ln in page.splitlines() if ln.startswith(INFO)]
        if lines:
            return lines[0]
        time.sleep(0.5)
    raise AssertionError(f"no {INFO}...}} on the learner's /metrics page")


def _finish(proc: subprocess.Popen) -> str:
    output, _ = proc.communicate(timeout=180)
    assert proc.returncode == 0, output[-3000:]
    return output


def test_summary_and_metric_name_device_path_dtype(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    proc = _start(run_dir)  # --learner-device auto: CartPole's 64x64 DQN is the CPU's
    try:
        line = _learner_info_line(run_dir, proc)
    finally:
        output = _finish(proc)
    assert 'device="cpu"' in line and 'update_path="numpy-flat"' in line, line
    assert 'dtype="float32"' in line and line.rstrip().endswith(" 1.0"), line
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["learner_device"] == "cpu"
    assert summary["learner_update_path"] == "numpy-flat"
    assert summary["learner_dtype"] == "float32"
    # auto measured both of DQN's CPU paths at start-up (ms per update)
    timings = summary["learner_device_timings"]
    assert set(timings) == {"cpu/numpy-flat", "cpu/torch-eager"}, timings
    assert all(ms > 0 for ms in timings.values()), timings
    assert "learner on cpu, update path numpy-flat, float32" in output
    log = (run_dir / "logs" / "learner.log").read_text()
    # the start-up line, with the timings
    assert "device cpu, update path numpy-flat, dtype float32, measured cpu/" in log
    assert "learner device cpu (auto: fastest of " in log  # and why


@pytest.mark.gpu
def test_cuda_learner_reports_cuda(tmp_path: Path) -> None:
    run_dir = tmp_path / "cuda"
    proc = _start(run_dir, "--learner-device", "cuda", "--hidden", "256,256")
    try:
        line = _learner_info_line(run_dir, proc, timeout=180)
    finally:
        _finish(proc)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["learner_device"] == "cuda" and 'device="cuda"' in line
    assert summary["learner_update_path"] in ("cuda-graph", "compiled", "torch-eager")
    assert summary["learner_updates"] > 0
