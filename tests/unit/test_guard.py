"""actorq.guard: divergence measures, and per-layer fallbacks that bring a hard case (int4
with an outlier input channel) under the threshold through the actors' own decode path."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from actorq.config import ConfigError
from actorq.guard import GuardConfig, PolicyGuard, divergence, fp32_outputs
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
    d = divergence(ref, cand, continuous=False)
    assert d.measure == "disagreement" and d.value == 0.25 and d.agreement == 0.75
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


def test_bad_guard_settings_are_config_errors() -> None:
    with pytest.raises(ConfigError, match="max_disagreement"):
        GuardConfig(max_disagreement=2.0)
    with pytest.raises(ConfigError, match="fallback"):
        GuardConfig(fallback="int8")


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
