"""`actorq run --algo dqn --env minatar:breakout`: the CNN Q-network through the real
services (embedded Redis, quantizer, learner, int8 actors, evaluator). A short run cannot
show learning reliably on 2 shared cores, so it asserts that it trained: updates, policy
versions published as int8 CNN blobs, blobs loaded by actors, pixel replay ingested."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.e2e.test_run_ppo import run_summary

pytestmark = pytest.mark.e2e
ARGS = [
    *("--algo", "dqn", "--env", "minatar:breakout", "--precision", "int8"),
    *("--actors", "1", "--eval-envs", "4", "--max-seconds", "60", "--target-return", "none"),
]


def test_dqn_cnn_run_on_minatar_trains_and_writes_its_run_folder(tmp_path: Path) -> None:
    run_dir = tmp_path / "breakout-dqn"
    summary = run_summary(run_dir, ARGS, timeout=300)
    assert summary["algo"] == "dqn" and summary["env"] == "minatar:breakout"
    assert summary["learner_updates"] > 0 and summary["policy_versions"] >= 2
    assert summary["transitions_inserted"] > 1000  # past the learner's warm-up
    assert summary["final_records"]["agree"] is True
    # int8 CNN blobs (~1/4 of fp32) were loaded by the actor, none rejected
    assert summary["blob_bytes"] < 0.3 * summary["fp32_equivalent_bytes"]
    assert summary["actor_breakdown"]["policy_loads"] >= 1
    assert summary["policy_rejections"] == 0 and summary["eval_episodes"] > 0
    meta = json.loads((run_dir / "checkpoints" / "checkpoint.json").read_text())
    assert meta["algo"] == "dqn" and meta["updates"] == summary["learner_updates"]
    learner_log = (run_dir / "logs" / "learner.log").read_text()
    assert "uint8 pixel observations" in learner_log and " 0 entries rejected" in learner_log
