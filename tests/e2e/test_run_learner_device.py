"""`actorq run` says where its learner trained: summary.json's learner_device,
learner_update_path, learner_dtype and learner_device_timings (auto's start-up
measurement), and the learner's actorq_learner_info gauge."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e

INFO = "actorq_learner_info{"


def _start(run_dir: Path, *flags: str, env: dict[str, str] | None = None) -> subprocess.Popen:
    args = ["--env", "CartPole-v1", "--actors", "1", "--envs-per-actor", "4", "--eval-envs", "2"]
    args += ["--target-return", "none", "--max-seconds", "25", "--run-dir", str(run_dir)]
    return subprocess.Popen(
        [sys.executable, "-m", "actorq", "run", *args, *flags],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, stdin=subprocess.DEVNULL,
        env={**os.environ, **(env or {})},
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
    # --learner-device auto: CartPole's 64x64 DQN is the CPU's. Two torch threads, as
    # compose's learner has: numpy-flat still wins and runs on one (it ran torch's step).
    proc = _start(run_dir, env={"ACTORQ_TORCH_THREADS": "2"})
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
    assert summary["learner_denormals"] == "flushed"  # ACTORQ_FLUSH_DENORMALS's default
    assert summary["learner_torch_threads"] == 1  # numpy-flat runs on one of the two
    # auto measured both of DQN's CPU paths at start-up (ms per update)
    timings = summary["learner_device_timings"]
    assert set(timings) == {"cpu/numpy-flat", "cpu/torch-eager"}, timings
    assert all(ms > 0 for ms in timings.values()), timings
    assert "learner on cpu, update path numpy-flat, float32" in output
    log = (run_dir / "logs" / "learner.log").read_text()
    # the start-up line, with the timings
    assert "update path numpy-flat, dtype float32, torch threads 1, measured cpu/" in log
    assert "learner device cpu (auto: fastest of " in log  # and why
    assert " ms, denormals flushed, control port" in log


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


@pytest.mark.parametrize("replay", ["uniform", "prioritized"])
def test_device_replay_trains_k_updates_a_call_and_is_reported(tmp_path: Path, replay: str) -> None:
    """ACTORQ_DEVICE_REPLAY_K on the CPU (the ring on the update's device, here the CPU;
    the captured step run eagerly): the run trains, loses nothing, and says so; with
    prioritized replay the priorities live in the ring."""
    run_dir = tmp_path / "ring"
    env = {**os.environ, "ACTORQ_DEVICE_REPLAY_K": "4", "ACTORQ_UPDATE_PATH": "torch-eager"}
    args = ["--env", "CartPole-v1", "--actors", "1", "--envs-per-actor", "4", "--eval-envs", "2"]
    args += ["--target-return", "none", "--max-seconds", "40", "--run-dir", str(run_dir)]
    args += ["--replay", replay]
    result = subprocess.run(
        [sys.executable, "-m", "actorq", "run", *args],
        capture_output=True, text=True, timeout=240, env=env, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    summary = json.loads((run_dir / "summary.json").read_text())
    kind = "prioritized " if replay == "prioritized" else ""
    assert summary["learner_device_replay"] == f"k=4, 100000 {kind}rows on cpu", summary
    assert summary["learner_update_path"] == "torch-eager"
    assert summary["learner_updates"] >= 400, summary["learner_updates"]
    assert summary["final_records"]["transitions_not_ingested"] == 0, summary["final_records"]
    # It learns: a random policy's 100-episode mean is ~22 +- 1.2; the best mean of the run
    # (metrics.jsonl), not the final one: without settling DQN on CartPole learns, then
    # forgets, on every path alike (seeds 1-3, 40 s, 2 cores: ring / torch-eager / numpy-flat
    # best 265-350 / 202-348 / 253-340, final 43-116 / 60-109 / 33-73; one CI run's loss
    # reached 9e9 after a best of 181, not seen again).
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    best = max(r.get("train_mean_return") or 0.0 for r in rows)
    assert best > 40, best
    log = (run_dir / "logs" / "learner.log").read_text()
    assert f"device replay k=4, 100000 {kind}rows on cpu" in log


def test_device_replay_on_the_numpy_path_exits_2_naming_why(redis_url: str) -> None:
    env = {
        **os.environ, "ACTORQ_REDIS_URL": redis_url, "ACTORQ_DEVICE_REPLAY_K": "4",
        "ACTORQ_UPDATE_PATH": "numpy-flat",
    }  # fmt: skip
    result = subprocess.run(
        [sys.executable, "-m", "services.learner"],
        capture_output=True, text=True, timeout=120, env=env, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert result.returncode == 2, result.stderr[-2000:]
    assert "device_replay_k (ACTORQ_DEVICE_REPLAY_K) 4 needs a captured update path" in (
        result.stderr
    )
    assert "not numpy-flat" in result.stderr and "Traceback" not in result.stderr
