"""Observation normalisation: running statistics, and the broadcast policy with the
normalisation folded into its first layer."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from actorq.algos import SACConfig, SACLearner, TD3Config, TD3Learner
from actorq.normalize import RunningMeanStd
from actorq.quant import quantized_policy_from_weights


def test_running_stats_match_numpy_over_all_rows() -> None:
    rng = np.random.default_rng(0)
    data = rng.normal(loc=[5.0, -3.0], scale=[10.0, 0.1], size=(1000, 2))
    rms = RunningMeanStd(2)
    for chunk in np.array_split(data, 7):
        rms.update(chunk)
    np.testing.assert_allclose(rms.mean, data.mean(axis=0), rtol=1e-10)
    np.testing.assert_allclose(rms.var, data.var(axis=0), rtol=1e-10)
    restored = RunningMeanStd(2)
    restored.load_state_dict(copy.deepcopy(rms.state_dict()))
    np.testing.assert_array_equal(restored.mean, rms.mean)


@pytest.mark.parametrize("kind", ["td3", "sac"])
def test_folded_policy_takes_raw_observations(kind: str) -> None:
    learner = (
        TD3Learner(3, 2, (16,), TD3Config(obs_norm=True))
        if kind == "td3"
        else SACLearner(3, 2, (16,), SACConfig(obs_norm=True))
    )
    rng = np.random.default_rng(1)
    scale = np.array([100.0, 1.0, 0.01], np.float32)
    batch = {
        "obs": (rng.normal(size=(64, 3)) * scale + 50).astype(np.float32),
        "action": rng.uniform(-1, 1, (64, 2)).astype(np.float32),
        "reward": rng.normal(size=64).astype(np.float32),
        "next_obs": (rng.normal(size=(64, 3)) * scale + 50).astype(np.float32),
        "done": np.zeros(64, bool),
    }
    learner.update(batch)
    assert learner.obs_rms is not None and learner.obs_rms.count == 64
    raw = batch["obs"][:8]
    fp32 = quantized_policy_from_weights(learner.policy_weights(), learner.policy_spec, "fp32")
    with torch.inference_mode():
        got = fp32(torch.from_numpy(raw)).numpy()
    # float32 folding with inputs ~100 loses a few ulps of the pre-activation sums.
    np.testing.assert_allclose(got, learner.actions(raw), atol=5e-4)
