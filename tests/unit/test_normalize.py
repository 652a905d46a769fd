"""Observation normalisation: running statistics, and the broadcast policy that carries
them (MLPSpec.input_norm) so actors feed raw observations."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from actorq.algos import SACConfig, SACLearner, TD3Config, TD3Learner
from actorq.models.mlp import INPUT_SHIFT
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


def _trained_on_mixed_scales(kind: str):
    learner = (
        TD3Learner(3, 2, (16,), TD3Config(obs_norm=True))
        if kind == "td3"
        else SACLearner(3, 2, (16,), SACConfig(obs_norm=True))
    )
    rng = np.random.default_rng(1)
    scale = np.array([100.0, 1.0, 0.01], np.float32)  # features on very different scales
    batch = {
        "obs": (rng.normal(size=(64, 3)) * scale + 50).astype(np.float32),
        "action": rng.uniform(-1, 1, (64, 2)).astype(np.float32),
        "reward": rng.normal(size=64).astype(np.float32),
        "next_obs": (rng.normal(size=(64, 3)) * scale + 50).astype(np.float32),
        "done": np.zeros(64, bool),
    }
    learner.update(batch)
    assert learner.obs_rms is not None and learner.obs_rms.count == 64
    return learner, batch["obs"]


@pytest.mark.parametrize("kind", ["td3", "sac"])
def test_broadcast_policy_takes_raw_observations(kind: str) -> None:
    learner, obs = _trained_on_mixed_scales(kind)
    assert learner.policy_spec.input_norm
    weights = learner.policy_weights()
    assert set(weights) == set(learner.policy_spec.weight_shapes())
    np.testing.assert_array_equal(weights[INPUT_SHIFT], learner.obs_rms.mean.astype(np.float32))
    raw = obs[:8]
    fp32 = quantized_policy_from_weights(weights, learner.policy_spec, "fp32")
    with torch.inference_mode():
        got = fp32(torch.from_numpy(raw)).numpy()
    # (x - mean) * (1 / std) in float32 vs the learner's (x - mean) / std: a few ulps.
    np.testing.assert_allclose(got, learner.actions(raw), atol=1e-5)


@pytest.mark.parametrize("precision", ["int8", "int4"])
def test_quantized_actors_see_normalised_inputs(precision: str) -> None:
    """With features at scales 100 / 1 / 0.01, int8 activations of raw observations (or
    1/std folded into the weights) would lose the small features; normalised first,
    the quantized policy stays close to fp32."""
    learner, obs = _trained_on_mixed_scales("td3")
    spec, weights = learner.policy_spec, learner.policy_weights()
    x = torch.from_numpy(obs)
    with torch.inference_mode():
        reference = quantized_policy_from_weights(weights, spec, "fp32")(x).numpy()
        quantized = quantized_policy_from_weights(weights, spec, precision)(x).numpy()
    bound = 0.02 if precision == "int8" else 0.2  # actions in [-1, 1]
    assert np.abs(quantized - reference).max() < bound
