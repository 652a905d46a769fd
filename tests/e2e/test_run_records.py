"""summary.json, the final checkpoint and Redis agree on the final version and update count.

The summary is taken after the learner and quantizer stopped (actorq.launch.final); before
that fix it copied the last progress poll and lagged both by several versions."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import redis

pytestmark = pytest.mark.e2e


def _shared_replays() -> set[str]:
    return {p.name for p in Path("/dev/shm").glob("actorq-replay-*")}


@pytest.mark.parametrize("ingest", ["thread", "process"])
def test_summary_checkpoint_and_redis_agree(tmp_path: Path, redis_url: str, ingest: str) -> None:
    """Also with ingest in its own process (ACTORQ_INGEST=process): every acknowledged
    transition ingested, and no shared replay file or ingest process left behind."""
    run_dir = tmp_path / "records"
    shared_before = _shared_replays()
    args = ["--env", "CartPole-v1", "--actors", "1", "--envs-per-actor", "4"]
    args += ["--eval-envs", "2", "--target-return", "none", "--max-seconds", "20"]
    args += ["--redis-url", redis_url, "--run-dir", str(run_dir), "--seed", "3"]
    proc = subprocess.run(
        [sys.executable, "-m", "actorq", "run", *args],
        capture_output=True,
        text=True,
        timeout=240,
        stdin=subprocess.DEVNULL,
        env=os.environ | {"ACTORQ_INGEST": ingest},
    )
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    learner_log = (run_dir / "logs" / "learner.log").read_text()
    assert ("ingest process" in learner_log) == (ingest == "process")
    assert _shared_replays() == shared_before

    summary = json.loads((run_dir / "summary.json").read_text())
    checkpoint = json.loads((run_dir / "checkpoints" / "checkpoint.json").read_text())
    prefix = json.loads((run_dir / "config.json").read_text())["redis_prefix"]
    client = redis.Redis.from_url(redis_url)
    try:
        latest, updates, inserted = client.mget(
            f"{prefix}:policy:latest", f"{prefix}:learner:updates", f"{prefix}:replay:inserted"
        )
        ingested = client.hgetall(f"{prefix}:learner:ingested")
        keys = list(client.scan_iter(match=f"{prefix}:*", count=1000))
        if keys:
            client.delete(*keys)
    finally:
        client.close()

    assert summary["learner_updates"] > 0 and summary["policy_versions"] >= 1, summary
    assert summary["policy_versions"] == checkpoint["version"] == int(latest)
    assert summary["learner_updates"] == checkpoint["updates"] == int(updates)
    assert summary["transitions_inserted"] == int(inserted) > 0
    assert summary["final_records"]["agree"] is True
    # The learner read every transition Redis acknowledged (it drains after the actors stop).
    assert ingested == {b"0": inserted}, (ingested, inserted)
    assert summary["final_records"]["transitions_ingested"] == int(inserted)
    assert summary["final_records"]["transitions_not_ingested"] == 0
    # CPU read from the exited processes covers every service, the learner's shutdown too.
    assert set(summary["cpu_seconds"]) >= {"quantizer", "learner", "actor-0", "evaluator"}
    assert summary["cpu_seconds"]["learner"] > 0
    # The behaviour-vs-learner gap reaches metrics.jsonl and summary.json (learner status).
    behaviour = summary["behaviour"]
    assert behaviour["behaviour_rows_measured"] > 0 and behaviour["behaviour_rows_unmeasured"] == 0
    assert 0.0 <= behaviour["behaviour_gap"] <= 1.0
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert any(row.get("behaviour_gap") is not None for row in rows)
