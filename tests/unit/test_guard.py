"""actorq.guard: divergence measures, and per-layer fallbacks that bring a hard case (int4
with an outlier input channel) under the threshold through the actors' own decode path."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from actorq.config import ConfigError
from actorq.guard import GuardConfig, PolicyGuard, divergence, fp32_outputs, greedy_regret
from actorq.models import MLPSpec, QNetwork
from actorq.quant import build_policy_module, decode_policy, encode_policy, weights_from_module
from actorq.quant.precision import parse_precision
from actorq.v1 import policy_pb2


def _weights(spec: MLPSpec, seed: int = 0) -> dict[str, np.ndarray]:
    torch.manual_seed(seed)
    return weights_from_module(QNetwork(spec))


def _guard(spec, weights, precision: str, config: GuardConfig, probe=None):
    p = parse_precision(precision)
    encoded = encode_policy(weights, spec, p, 1, 10)

    def encode(fallbacks):
        return encode_policy(weights, spec, p, 1, 10, fallback_layers=fallbacks)

    rng = np.random.default_rng(1)
    obs = probe if probe is not None else rng.standard_normal((256, spec.obs_dim), np.float32)
    return PolicyGuard(config, lambda n: obs[:n]).check(weights, spec, encoded, encode)


def test_divergence_measures() -> None:
    ref = np.array([[1.0, 0.0], [0.0, 1.0], [2.0, 1.0], [0.0, 3.0]])
    cand = np.array([[1.0, 0.0], [1.5, 1.0], [2.0, 1.0], [0.0, 3.0]])
    d = divergence(ref, cand, continuous=False, discrete_measure="disagreement")
    assert d.measure == "disagreement" and d.value == 0.25 and d.agreement == 0.75
    # The flipped row (reference [0, 1]) loses 1; mean best value (1 + 1 + 2 + 3) / 4.
    regret = (1 / 4) / ((1 - 0.9) * 7 / 4)
    assert d.regret == pytest.approx((1 / 4) / ((1 - 0.99) * 7 / 4))
    r = divergence(ref, cand, continuous=False, gamma=0.9)
    assert r.measure == "regret" and r.value == pytest.approx(regret)
    assert r.disagreement == 0.25 and r.regret is None and "disagreement" in r.fields("")
    assert d.q_error == pytest.approx(np.abs(cand - ref).mean() / np.abs(ref).mean())
    a = divergence(np.zeros((2, 3)), np.full((2, 3), 0.1), continuous=True, sigma=0.1)
    assert a.measure == "action_diff" and a.value == pytest.approx(0.05)
    assert a.kl == pytest.approx(3 * 0.01 / 0.02)


def test_int8_on_a_plain_net_needs_no_fallback() -> None:
    spec = MLPSpec(obs_dim=4, num_outputs=2, hidden=(64, 64))
    result = _guard(spec, _weights(spec), "int8", GuardConfig(max_disagreement=0.05))
    assert result.probe_source == "replay" and result.probe_size == 256
    assert result.before.value <= 0.05 and result.fallback_layers == {}
    assert result.encoded.precision == policy_pb2.PRECISION_INT8


def test_outlier_channel_int4_falls_back_per_layer_until_under_threshold() -> None:
    spec = MLPSpec(obs_dim=8, num_outputs=1, hidden=(64, 64), output_activation="tanh")
    weights = _weights(spec, seed=3)
    # One input channel of the middle layer 100x larger: every row's int4 scale is set by
    # it, so the other weights of the layer round to 0.
    name = [n for n, v in weights.items() if v.ndim == 2][1]
    weights[name][:, 0] *= 100.0
    config = GuardConfig(max_action_diff=0.01)
    result = _guard(spec, weights, "int4", config)
    assert result.before.value > 0.01, result.before  # the hard case is really hard
    assert result.after.value <= 0.01 and result.within
    assert name in result.fallback_layers and result.fallback_layers[name] == "fp16"
    assert len(result.fallback_layers) < 3  # per layer, not the whole policy
    # What actors receive: still an int4 policy, the offending layer in float, and it
    # acts within the threshold through decode_policy + build_policy_module.
    policy = decode_policy(result.encoded.envelope, expected_spec=spec)
    assert policy.precision == policy_pb2.PRECISION_INT4
    dtypes = {t.name: t.dtype for t in policy.tensors}
    assert dtypes[name] == policy_pb2.DTYPE_FLOAT16
    obs = torch.from_numpy(np.random.default_rng(1).standard_normal((256, 8), np.float32))
    fp32 = encode_policy(weights, spec, policy_pb2.PRECISION_FP32, 1, 10)
    with torch.inference_mode():
        ref = build_policy_module(decode_policy(fp32.envelope)).forward(obs).numpy()
        got = build_policy_module(policy).forward(obs).numpy()
    assert divergence(ref, got, continuous=True).value <= 0.01
    meta = result.meta()
    assert f"{name}=fp16" in meta["guard_fallback_layers"]
    assert float(meta["guard_before_action_diff"]) > float(meta["guard_action_diff"])


def test_regret_weighs_each_greedy_flip_by_what_it_costs_under_fp32() -> None:
    ref = np.array([[10.0, 10.001], [8.0, 10.0], [10.0, 6.0], [10.0, 10.0]])
    near_tie_flip = np.array([[1.001, 1.0], [0.0, 2.0], [5.0, 1.0], [3.0, 3.0]])
    value = (1 - 0.99) * 10.00025
    assert greedy_regret(ref, near_tie_flip, 0.99) == pytest.approx(0.001 / 4 / value)
    costly_flip = np.array([[1.0, 1.001], [2.0, 0.0], [5.0, 1.0], [3.0, 3.0]])
    assert greedy_regret(ref, costly_flip, 0.99) == pytest.approx(2.0 / 4 / value)
    assert greedy_regret(ref, costly_flip, 0.9) == pytest.approx(2.0 / 4 / (value * 10))
    assert greedy_regret(ref, ref, 0.99) == 0.0
    assert greedy_regret(np.zeros((3, 2)), np.eye(3, 2), 0.99) == 0.0  # no value to lose
    three = np.array([[0.0, 1.0, 4.0]])  # the second-best of three loses 3
    assert greedy_regret(three, np.array([[0.0, 9.0, 1.0]]), 0.5) == pytest.approx(3 / 2)


def test_near_tied_q_values_fall_back_under_disagreement_but_not_under_regret() -> None:
    """A Q-net whose two actions are nearly tied everywhere (CartPole's common case): int4
    flips many greedy actions, but between actions worth the same."""
    spec = MLPSpec(obs_dim=4, num_outputs=2, hidden=(64, 64))
    weights = _weights(spec, seed=5)
    last = [n for n, v in weights.items() if v.ndim == 2][-1]
    bias = last.replace("weight", "bias")
    weights[last][1] = weights[last][0] + 1e-3 * weights[last][1]  # q1 = q0 + a tiny term
    weights[bias][:] = 10.0  # values the size of a trained CartPole Q (return ~ 1 / (1 - gamma))
    flips = _guard(spec, weights, "int4", GuardConfig(discrete_measure="disagreement"))
    assert flips.before.value > 0.05 and flips.fallback_layers  # many near-tie flips
    regret = _guard(spec, weights, "int4", GuardConfig())
    assert regret.before.measure == "regret" and regret.before.disagreement > 0.05
    assert regret.before.value < 0.05 and regret.fallback_layers == {}
    assert regret.encoded.precision == policy_pb2.PRECISION_INT4


def _check(guard: PolicyGuard, weights, spec: MLPSpec, precision: str, version: int):
    p = parse_precision(precision)

    def encode(fallbacks):
        return encode_policy(weights, spec, p, version, 10, fallback_layers=fallbacks)

    return guard.check(weights, spec, encode({}), encode)


def test_the_limit_grows_to_what_one_version_of_learning_changes() -> None:
    """int4 of a tanh policy strays past 0.002; when the learner moved the policy further
    than that since the previous version, that lag is the limit instead."""
    spec = MLPSpec(obs_dim=8, num_outputs=2, hidden=(64, 64), output_activation="tanh")
    previous, current = _weights(spec, seed=6), _weights(spec, seed=6)
    rng = np.random.default_rng(0)
    for value in current.values():
        value += 0.05 * rng.standard_normal(value.shape).astype(np.float32)
    obs = rng.standard_normal((256, 8), np.float32)
    for lag_scale in (1.0, 0.0):
        config = GuardConfig(max_action_diff=0.002, lag_scale=lag_scale)
        guard = PolicyGuard(config, lambda n: obs[:n])
        first = _check(guard, previous, spec, "int4", 1)
        assert first.lag is None and first.threshold == 0.002
        result = _check(guard, current, spec, "int4", 2)
        assert result.before.value > 0.002 and result.within  # past the fixed threshold
        if lag_scale:
            assert result.lag.value > result.before.value  # one version moved it further
            assert result.threshold == result.lag.value and result.fallback_layers == {}
            assert float(result.meta()["guard_lag_action_diff"]) == pytest.approx(result.lag.value)
        else:
            assert result.lag is None and result.threshold == 0.002 and result.fallback_layers


def test_mlp_and_cnn_policies_are_covered() -> None:
    from actorq.models.cnn import cnn_spec_for

    guard = PolicyGuard(GuardConfig())
    assert guard.covers(MLPSpec(obs_dim=4, num_outputs=2, hidden=(8,)))
    assert guard.covers(cnn_spec_for((4, 10, 10), 3))  # tests/unit/test_guard_cnn.py


def test_bad_guard_settings_are_config_errors() -> None:
    with pytest.raises(ConfigError, match="max_disagreement"):
        GuardConfig(max_disagreement=2.0)
    with pytest.raises(ConfigError, match="fallback"):
        GuardConfig(fallback="int8")
    with pytest.raises(ConfigError, match=r"discrete_measure.*'argmax'"):
        GuardConfig(discrete_measure="argmax")
    with pytest.raises(ConfigError, match="lag_scale"):
        GuardConfig(lag_scale=-1.0)
    with pytest.raises(ConfigError, match="gamma"):
        GuardConfig(gamma=1.0)


def test_fp32_reference_equals_the_fp32_blob_path() -> None:
    spec = MLPSpec(obs_dim=5, num_outputs=2, hidden=(32, 16), output_activation="tanh",
                   input_norm=True)  # fmt: skip
    weights = _weights(spec, seed=4)
    weights["input_norm.shift"] = np.linspace(-1, 1, 5).astype(np.float32)
    weights["input_norm.scale"] = np.linspace(0.5, 2, 5).astype(np.float32)
    obs = torch.from_numpy(np.random.default_rng(2).standard_normal((64, 5), np.float32))
    blob = encode_policy(weights, spec, policy_pb2.PRECISION_FP32, 1, 1)
    with torch.inference_mode():
        expected = build_policy_module(decode_policy(blob.envelope)).forward(obs).numpy()
    np.testing.assert_allclose(fp32_outputs(weights, spec, obs), expected, rtol=1e-5, atol=1e-6)
