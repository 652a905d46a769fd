"""A throughput run with the new defaults: `--target-return none --max-seconds 45`, no
env-step limit, no automatic settle, and a run folder that stays under the stated bound
while 4 actors push transitions at a low samples-per-insert (the embedded Redis rewrites
its append-only file instead of keeping every XADD; docs/ingest-and-run-defaults.md)."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e

# CartPole-sized transitions, default stream cap (docs/ingest-and-run-defaults.md: 116.6
# MiB peak seen at ~71k transitions/s on a quiet 2-core machine)
RUN_FOLDER_BOUND = 192 * 2**20
REWRITE_FLOOR = 32 * 2**20  # actorq.redis_server.AOF_REWRITE_MIN_MB


def _bytes(path: Path) -> int:
    total = 0
    for f in path.rglob("*"):
        with contextlib.suppress(FileNotFoundError):  # a rewrite's temp file, renamed
            total += f.stat().st_size if f.is_file() else 0
    return total


@pytest.mark.timeout(240)
def test_throughput_run_folder_stays_bounded(tmp_path: Path) -> None:
    run_dir = tmp_path / "throughput"
    args = ["--actors", "4", "--envs-per-actor", "8", "--samples-per-insert", "0.125"]
    args += ["--target-return", "none", "--max-seconds", "45", "--run-dir", str(run_dir)]
    output = tmp_path / "output.txt"  # a file, not a pipe: nothing blocks while we sample
    with output.open("w") as sink:
        proc = subprocess.Popen(
            [sys.executable, "-m", "actorq", "run", *args],
            stdout=sink,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
        peak = peak_redis = 0
        while proc.poll() is None:
            time.sleep(0.25)
            if run_dir.exists():
                peak = max(peak, _bytes(run_dir))
                peak_redis = max(peak_redis, _bytes(run_dir / "redis"))
    out = output.read_text()
    assert proc.returncode == 0, out[-3000:]
    assert "the run ends when 45 s of wall clock pass (no env-step limit)" in out, out[:2000]

    summary = json.loads((run_dir / "summary.json").read_text())
    config = json.loads((run_dir / "config.json").read_text())
    assert summary["stop_reason"] == "time budget 45s spent", summary["stop_reason"]
    assert config["max_env_steps"] == 0 and config["settle_at"] is None
    print(f"peak {peak} redis {peak_redis} inserted {summary['transitions_inserted']}")
    assert peak < RUN_FOLDER_BOUND, (peak, summary["transitions_inserted"])
    assert _bytes(run_dir) < RUN_FOLDER_BOUND
    log = "\n".join(p.read_text() for p in (run_dir / "redis").glob("redis-*.log"))
    # Past the floor the file must have been rewritten, not kept growing.
    rewritten = "Background append only file rewriting started" in log
    assert rewritten or peak_redis < REWRITE_FLOOR + 16 * 2**20, (peak_redis, log[-1500:])
    print(
        f"transitions {summary['transitions_inserted']:,}, env steps {summary['env_steps']:,}, "
        f"peak run folder {peak / 2**20:.1f} MiB (redis {peak_redis / 2**20:.1f} MiB), "
        f"AOF rewritten: {rewritten}"
    )
