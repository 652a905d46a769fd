"""actorq.guard on CNN policies (pixel envs): the fp32 reference forward, int8 divergence
on uint8 frames through the actors' own decode path, per-layer fallbacks of conv and
Linear weights, mixed int8/float conv stacks, and the synthetic pixel probe."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from actorq.guard import GuardConfig, PolicyGuard, divergence, fp32_outputs, synthetic_probe
from actorq.models.cnn import CNNNetwork, CNNSpec, cnn_spec_for
from actorq.quant import build_policy_module, decode_policy, encode_policy, weights_from_module
from actorq.quant.cnn_blob import FloatConv
from actorq.quant.conv import Int8ConvStack
from actorq.quant.precision import parse_precision
from actorq.v1 import policy_pb2

MINATAR = cnn_spec_for((4, 10, 10), 6)  # one 3x3 conv of 16 channels, 128 units
FP16, FP32 = policy_pb2.PRECISION_FP16, policy_pb2.PRECISION_FP32


def _frames(spec: CNNSpec, n: int = 256, seed: int = 1) -> np.ndarray:
    """MinAtar-like uint8 frames: sparse 0/1 channels (x 255 for /255-scaled specs)."""
    on = np.random.default_rng(seed).random((n, *spec.obs_shape)) < 0.1
    return (on * round(1 / spec.input_scale)).astype(np.uint8)


def _calibrated(spec: CNNSpec, weights: dict, frames: np.ndarray) -> dict[str, np.ndarray]:
    """`weights` with act_max set by one training-mode forward, as the learner sets it."""
    net = CNNNetwork(spec)
    net.load_state_dict({k: torch.from_numpy(v) for k, v in weights.items()})
    net.act_max.zero_()  # the first batch maximum is taken as is
    net.train()
    net(torch.from_numpy(frames))
    return {**weights, "act_max": net.act_max.numpy().copy()}


def _weights(spec: CNNSpec, frames: np.ndarray, seed: int = 0) -> dict[str, np.ndarray]:
    torch.manual_seed(seed)
    return _calibrated(spec, weights_from_module(CNNNetwork(spec)), frames)


def _check(spec, weights, precision: str, config: GuardConfig, frames: np.ndarray):
    p = parse_precision(precision)

    def encode(fallbacks=None):
        return encode_policy(weights, spec, p, 1, 10, fallback_layers=fallbacks)

    guard = PolicyGuard(config, lambda n: frames[:n])
    return guard.check(weights, spec, encode(), encode)


def _actor_outputs(encoded, spec: CNNSpec, frames: np.ndarray) -> np.ndarray:
    module = build_policy_module(decode_policy(encoded.envelope, expected_spec=spec))
    with torch.inference_mode():
        return module(torch.from_numpy(frames)).numpy()


@pytest.mark.parametrize("spec", [MINATAR, cnn_spec_for((4, 84, 84), 4)], ids=["minatar", "nature"])
def test_fp32_reference_equals_the_fp32_blob_path_and_the_learner_network(spec) -> None:
    frames = _frames(spec, n=16)
    weights = _weights(spec, frames, seed=4)
    blob = encode_policy(weights, spec, FP32, 1, 1)
    reference = fp32_outputs(weights, spec, torch.from_numpy(frames))
    np.testing.assert_allclose(reference, _actor_outputs(blob, spec, frames), rtol=1e-5, atol=1e-5)
    net = CNNNetwork(spec)
    net.load_state_dict({k: torch.from_numpy(v) for k, v in weights.items()})
    with torch.inference_mode():
        learner = net.eval()(torch.from_numpy(frames)).numpy()
    np.testing.assert_allclose(reference, learner, rtol=1e-5, atol=1e-5)


def test_int8_cnn_divergence_is_small_but_nonzero_on_uint8_frames() -> None:
    frames = _frames(MINATAR)
    weights = _weights(MINATAR, frames)
    result = _check(MINATAR, weights, "int8", GuardConfig(max_disagreement=0.05), frames)
    assert result.probe_source == "replay" and result.probe_size == 256
    before = result.before
    # int8 moves the Q-values a little (static int8 convs + int8 head) but no greedy
    # action that matters: measured q_error 0.0086, regret 0, disagreement 0.
    assert 0 < before.q_error < 0.03, before
    assert before.value <= 0.05 and before.disagreement <= 0.05, before
    assert result.fallback_layers == {} and result.within
    assert result.encoded.precision == policy_pb2.PRECISION_INT8


def _outlier_channel(weights: dict, frames: np.ndarray, channel: int = 3) -> dict:
    """The same fp32 function with one conv output channel 100x larger and the head's
    inputs from it 100x smaller (ReLU commutes with positive scaling). The channel then
    sets the per-tensor activation range of the int8 conv output and of the first head
    Linear's input, so every other channel's activations round to a few codes."""
    w = {k: v.copy() for k, v in weights.items()}
    w["convs.0.weight"][channel] *= 100.0
    w["convs.0.bias"][channel] *= 100.0
    head = w["head.0.weight"].reshape(w["head.0.weight"].shape[0], 16, 8, 8)  # a view
    head[:, channel] /= 100.0
    return _calibrated(MINATAR, w, frames)


def test_outlier_conv_channel_falls_back_per_layer_until_within_the_limit() -> None:
    frames = _frames(MINATAR)
    plain = _weights(MINATAR, frames)
    weights = _outlier_channel(plain, frames)
    probe = torch.from_numpy(frames)
    same = fp32_outputs(weights, MINATAR, probe)
    np.testing.assert_allclose(same, fp32_outputs(plain, MINATAR, probe), rtol=1e-4, atol=1e-5)

    result = _check(MINATAR, weights, "int8", GuardConfig(max_disagreement=0.01), frames)
    # Measured: regret 6.46 (disagreement 0.20) before; 0.0 after, conv + first Linear
    # in fp16, the output Linear still int8.
    assert result.before.value > 0.5 and result.before.disagreement > 0.1, result.before
    assert result.after.value <= 0.01 and result.within, result.after
    assert result.fallback_layers == {"convs.0.weight": "fp16", "head.0.weight": "fp16"}
    # What actors receive: still an int8 policy, the named layers as FLOAT16 tensors, a
    # float conv and an int8 output Linear, acting within the limit.
    policy = decode_policy(result.encoded.envelope, expected_spec=MINATAR)
    assert policy.precision == policy_pb2.PRECISION_INT8
    dtypes = {t.name: t.dtype for t in policy.tensors}
    assert dtypes["convs.0.weight"] == dtypes["head.0.weight"] == policy_pb2.DTYPE_FLOAT16
    assert dtypes["head.2.weight"] == policy_pb2.DTYPE_INT8
    acted = _actor_outputs(result.encoded, MINATAR, frames)
    assert divergence(same, acted, continuous=False).value <= 0.01


def test_int4_cnn_is_over_a_tight_limit_and_within_it_after_fallback() -> None:
    frames = _frames(MINATAR)
    weights = _weights(MINATAR, frames)
    config = GuardConfig(max_disagreement=0.05)
    result = _check(MINATAR, weights, "int4", config, frames)
    # Measured: regret 0.097 before, 0.0 after; int4 needs its layers in fp16 here.
    assert result.before.value > 0.05 and result.after.value <= 0.05, result
    assert result.fallback_layers and set(result.fallback_layers) <= set(
        n for n, s in MINATAR.weight_shapes().items() if len(s) >= 2
    )
    assert result.encoded.precision == policy_pb2.PRECISION_INT4


def test_a_float_conv_between_int8_convs_splits_the_int8_stack() -> None:
    spec = CNNSpec((4, 20, 20), 5, convs=((8, 3, 2), (16, 3, 1), (16, 3, 1)), hidden=(32,),
                   input_scale=1 / 255)  # fmt: skip
    frames = _frames(spec, n=64)
    weights = _weights(spec, frames, seed=2)
    fallbacks = {"convs.2.weight": FP16}
    encoded = encode_policy(weights, spec, policy_pb2.PRECISION_INT8, 1, 1,
                            fallback_layers=fallbacks)  # fmt: skip
    module = build_policy_module(decode_policy(encoded.envelope, expected_spec=spec))
    kinds = [type(layer).__name__ for layer in module.layers]
    assert kinds[:3] == ["Int8ConvStack", "FloatConv", "Int8ConvStack"], kinds
    stacks = [m for m in module.layers if isinstance(m, Int8ConvStack)]
    assert stacks[0].input_scale == spec.input_scale and stacks[1].input_scale == 1.0
    assert any(isinstance(m, FloatConv) for m in module.layers)
    reference = fp32_outputs(weights, spec, torch.from_numpy(frames))
    d = divergence(reference, _actor_outputs(encoded, spec, frames), continuous=False)
    assert d.q_error < 0.05, d


def test_conv_weights_are_accepted_as_fallback_layers_and_vectors_are_not() -> None:
    frames = _frames(MINATAR, n=8)
    weights = _weights(MINATAR, frames)
    int8 = policy_pb2.PRECISION_INT8
    all_float = {n: FP32 for n, s in MINATAR.weight_shapes().items() if len(s) >= 2}
    encoded = encode_policy(weights, MINATAR, int8, 1, 1, fallback_layers=all_float)
    reference = fp32_outputs(weights, MINATAR, torch.from_numpy(frames))
    np.testing.assert_allclose(_actor_outputs(encoded, MINATAR, frames), reference,
                               rtol=1e-5, atol=1e-5)  # fmt: skip
    with pytest.raises(ValueError, match="act_max"):
        encode_policy(weights, MINATAR, int8, 1, 1, fallback_layers={"act_max": FP32})


def test_synthetic_pixel_probe_spans_the_scaled_range_of_each_pixel_family() -> None:
    guard = PolicyGuard(GuardConfig(probe_size=32), lambda n: None)
    probe, source = guard.probe_batch(MINATAR)
    assert source == "synthetic" and probe.dtype == torch.uint8
    assert tuple(probe.shape) == (32, 4, 10, 10) and set(probe.unique().tolist()) == {0, 1}
    atari = synthetic_probe(cnn_spec_for((4, 84, 84), 4), 8)
    assert atari.dtype == np.uint8 and atari.max() > 200
    np.testing.assert_array_equal(synthetic_probe(MINATAR, 8), synthetic_probe(MINATAR, 8))


def test_pixel_probe_prefers_replay_then_segments_and_ignores_other_shapes() -> None:
    frames = _frames(MINATAR, n=16)
    wrong = np.zeros((16, 4, 8, 8), np.uint8)
    config = GuardConfig(probe_size=16)
    from_segments = PolicyGuard(config, lambda n: wrong[:n], lambda n: frames[:n])
    probe, source = from_segments.probe_batch(MINATAR)
    assert source == "segments" and np.array_equal(probe.numpy(), frames)
    both = PolicyGuard(config, lambda n: frames[:n], lambda n: wrong[:n])
    assert both.probe_batch(MINATAR)[1] == "replay"
    # MLP probes never read segments (they stay replay or synthetic, as before).
    from actorq.models import MLPSpec

    flat = np.zeros((16, 4), np.float32)
    mlp = PolicyGuard(config, lambda n: None, lambda n: flat[:n])
    assert mlp.probe_batch(MLPSpec(obs_dim=4, num_outputs=2, hidden=(8,)))[1] == "synthetic"


def test_specs_other_than_mlp_and_cnn_stay_unguarded(caplog) -> None:
    class OtherSpec:  # e.g. a future recurrent policy
        pass

    guard = PolicyGuard(GuardConfig())
    assert guard.covers(MINATAR)
    with caplog.at_level("WARNING", logger="actorq.guard"):
        assert not guard.covers(OtherSpec()) and not guard.covers(OtherSpec())
    messages = [r.getMessage() for r in caplog.records]
    assert messages == ["guard: OtherSpec policies are not measured; broadcasting them unguarded"]


def test_a_cnn_version_with_a_float_conv_travels_as_a_delta_to_one_with_the_same_layout() -> None:
    from actorq.quant.delta import apply_delta, make_delta

    frames = _frames(MINATAR, n=8)
    int8, fallbacks = policy_pb2.PRECISION_INT8, {"convs.0.weight": FP16}
    old, new = (_weights(MINATAR, frames, seed=s) for s in (0, 1))
    base = encode_policy(old, MINATAR, int8, 1, 1, fallback_layers=fallbacks)
    target = encode_policy(new, MINATAR, int8, 2, 2, fallback_layers=fallbacks)
    delta = make_delta(base.arrays, target)
    assert delta is not None
    rebuilt = apply_delta(base.arrays, delta, expected_sha256=target.sha256)
    assert rebuilt.tensors["convs.0.weight"].values.dtype == np.float16
    plain = encode_policy(new, MINATAR, int8, 2, 2)  # the conv back to int8: goes full
    assert make_delta(base.arrays, plain) is None
