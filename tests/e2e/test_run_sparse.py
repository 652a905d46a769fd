"""RLx2 end to end: `actorq run --algo td3 --sparsity 0.9` learns Pendulum-v1 through the
real services with int8 actors, its checkpoint holds exact 90%-sparse weights and masks,
and `actorq ptq` evaluates it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from actorq.ptq import load_policy, run_study
from actorq.testing.returns import last_eval_mean, random_pendulum_return

pytestmark = pytest.mark.e2e

MARGIN = 400.0  # as tests/e2e/test_run_continuous.py: random about -1200, solved about -200


@pytest.mark.timeout(480)
def test_sparse_td3_learns_pendulum(tmp_path: Path) -> None:
    baseline = random_pendulum_return()
    run_dir = tmp_path / "pendulum-td3-sparse"
    args = [
        *("--env", "Pendulum-v1", "--algo", "td3", "--sparsity", "0.9"),
        *("--actors", "1", "--envs-per-actor", "4", "--eval-envs", "10"),
        *("--max-env-steps", "16000", "--max-seconds", "300", "--seed", "0"),
        *("--target-return", str(baseline + MARGIN + 100), "--run-dir", str(run_dir)),
    ]
    proc = subprocess.run(
        [sys.executable, "-m", "actorq", "run", *args],
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        env=dict(os.environ),
        timeout=420,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "note: --sparsity 0.9 on a 64x64 network" in proc.stderr  # default width
    summary = json.loads((run_dir / "summary.json").read_text())
    assert last_eval_mean(run_dir) >= baseline + MARGIN, (baseline, summary)
    # ER over each network: exactly 90% of all its Linear weights are masked.
    assert summary["sparsity"]["actor"] == pytest.approx(0.9, abs=1e-4)
    assert summary["sparsity"]["critic"] == pytest.approx(0.9, abs=1e-4)
    assert summary["topology_updates"] >= 1
    assert 0.05 < summary["train_flops"] / summary["dense_train_flops"] < 0.2
    assert summary["inference_flops"] < 0.2 * summary["dense_inference_flops"]

    state = torch.load(run_dir / "checkpoints" / "checkpoint.pt", weights_only=True)
    actor = state["dqn"]["actor"]
    masks = state["rlx2"]["sparse"]["networks"]["actor"]["masks"]
    for name, mask in zip(["layers.0", "layers.2", "layers.4"], masks, strict=True):
        assert torch.count_nonzero(actor[f"{name}.weight"][~mask]) == 0  # pruned: exactly 0.0
    # `actorq ptq` works on the sparse checkpoint: its int8 policy still beats random.
    rows = {r.bits: r for r in run_study(load_policy(run_dir), (8,), episodes=10)}
    assert rows[8].mean >= baseline + MARGIN
