"""Inference modules built from blobs: int8 exactness, closeness to fp32, no fp32 weights."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

from actorq.models.mlp import MLPSpec, QNetwork
from actorq.quant import (
    BlobError,
    Int8Linear,
    build_policy_module,
    decode_policy,
    dequantize_int8,
    encode_policy,
    make_int8_linear,
    quantize_int8_per_channel,
    quantized_policy_from_weights,
    weights_from_module,
)
from actorq.quant.int8 import DequantizedLinear
from actorq.quant.tensors import decode_tensor
from actorq.v1 import policy_pb2

FP32, FP16, INT8 = policy_pb2.PRECISION_FP32, policy_pb2.PRECISION_FP16, policy_pb2.PRECISION_INT8
BIG = MLPSpec(obs_dim=64, num_outputs=16, hidden=(512, 512, 512))


def int8_layer(
    out_features: int = 32, in_features: int = 48, relu: bool = False, seed: int = 0
) -> tuple[Int8Linear, np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    w = rng.normal(size=(out_features, in_features)).astype(np.float32)
    b = rng.normal(size=out_features).astype(np.float32)
    q, scales = quantize_int8_per_channel(w)
    layer = make_int8_linear(
        torch.from_numpy(q), torch.from_numpy(scales), torch.from_numpy(b), relu=relu
    )
    return layer, q, scales, b


def exactly_quantizable_input(layer: Int8Linear, rows: int, seed: int = 0) -> np.ndarray:
    """Non-negative inputs on the grid the dynamic quantizer picks, so it adds no error.

    The quantizer maps [0, max] onto its code range (0..127 with reduce_range, else
    0..255); with max = levels / 64 its step is exactly 1/64.
    """
    levels = 127 if layer.reduce_range else 255
    codes = np.random.default_rng(seed).integers(0, levels + 1, size=(rows, layer.in_features))
    codes[0, 0] = levels
    return (codes / 64).astype(np.float32)


def test_int8_linear_holds_the_blob_codes_and_scales() -> None:
    layer, q, scales, b = int8_layer()
    codes, packed_scales, bias = layer.unpack()
    np.testing.assert_array_equal(codes.numpy(), q)
    np.testing.assert_array_equal(packed_scales.numpy(), scales.astype(np.float64))
    assert bias is not None
    np.testing.assert_array_equal(bias.numpy(), b)


@pytest.mark.parametrize("relu", [False, True])
def test_int8_linear_is_exact_when_inputs_need_no_rounding(relu: bool) -> None:
    layer, q, scales, b = int8_layer(relu=relu)
    x = exactly_quantizable_input(layer, rows=5)
    expected = x.astype(np.float64) @ dequantize_int8(q, scales).astype(np.float64).T + b
    if relu:
        expected = np.maximum(expected, 0.0)
    got = layer(torch.from_numpy(x)).numpy()
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


def test_int8_linear_without_bias() -> None:
    _, q, scales, _ = int8_layer()
    layer = make_int8_linear(torch.from_numpy(q), torch.from_numpy(scales), None)
    x = exactly_quantizable_input(layer, rows=3)
    expected = x.astype(np.float64) @ dequantize_int8(q, scales).astype(np.float64).T
    np.testing.assert_allclose(layer(torch.from_numpy(x)).numpy(), expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    ("q", "scales", "bias", "pattern"),
    [
        (torch.zeros(4, 3), torch.ones(4), None, "int8"),
        (torch.zeros(4, 3, dtype=torch.int8), torch.ones(3), None, "4 scales"),
        (torch.zeros(4, 3, dtype=torch.int8), torch.zeros(4), None, "finite and > 0"),
        (torch.zeros(4, 3, dtype=torch.int8), torch.ones(4), torch.ones(3), "bias"),
    ],
)
def test_make_int8_linear_rejects_bad_arguments(
    q: torch.Tensor, scales: torch.Tensor, bias: torch.Tensor | None, pattern: str
) -> None:
    with pytest.raises(ValueError, match=pattern):
        make_int8_linear(q, scales, bias)


def test_building_and_running_int8_emits_no_warning() -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        layer, *_ = int8_layer()
        layer(torch.randn(2, layer.in_features))
    assert [str(w.message) for w in caught] == []


def test_int8_module_comes_from_the_blob_alone() -> None:
    torch.manual_seed(0)
    spec = MLPSpec(obs_dim=8, num_outputs=4, hidden=(32, 32))
    envelope = encode_policy(weights_from_module(QNetwork(spec)), spec, INT8, 5, 77).envelope
    module = build_policy_module(decode_policy(envelope, spec))
    assert (module.version, module.learner_step, module.precision) == (5, 77, INT8)
    assert module.spec == spec and not module.training
    # The first layer runs fp32 activations over its dequantized int8 codes; the rest int8.
    assert list(module.parameters()) == []
    assert [type(m) for m in module.layers] == [DequantizedLinear, Int8Linear, Int8Linear]
    assert [m.relu for m in module.layers] == [True, True, False]
    codes = next(t for t in decode_policy(envelope, spec).tensors if t.name == "layers.0.weight")
    np.testing.assert_array_equal(
        module.layers[0].weight_t.T.numpy(),
        decode_tensor(codes, tuple(codes.shape), (codes.dtype,)).to_float32(),
    )
    out = module(torch.randn(10, 8))
    assert out.shape == (10, 4) and out.dtype == torch.float32 and not out.requires_grad


def test_int8_module_tracks_fp32_qnetwork() -> None:
    torch.manual_seed(0)
    net = QNetwork(BIG).eval()
    module = quantized_policy_from_weights(weights_from_module(net), BIG, "int8")
    obs = torch.randn(1024, BIG.obs_dim)
    with torch.no_grad():
        reference, got = net(obs), module(obs)
    agreement = (reference.argmax(dim=1) == got.argmax(dim=1)).float().mean().item()
    assert agreement >= 0.9  # random-init Q-values are close together; trained ones less so
    relative = ((got - reference).norm() / reference.norm()).item()
    assert relative < 0.06
    assert (got - reference).abs().max().item() < 0.08 * reference.abs().max().item()


def test_int8_module_single_rows_match_batched_rows_closely() -> None:
    torch.manual_seed(1)
    net = QNetwork(BIG).eval()
    module = quantized_policy_from_weights(weights_from_module(net), BIG, INT8)
    obs = torch.randn(32, BIG.obs_dim)
    batched = module(obs)
    singles = torch.cat([module(obs[i : i + 1]) for i in range(len(obs))])
    # Activations are quantized per call, so rows differ slightly, but only slightly.
    scale = net(obs).abs().max().item()
    assert (batched - singles).abs().max().item() < 0.08 * scale


def test_fp32_module_equals_qnetwork() -> None:
    torch.manual_seed(2)
    spec = MLPSpec(obs_dim=8, num_outputs=4, hidden=(32, 16))
    net = QNetwork(spec).eval()
    module = quantized_policy_from_weights(weights_from_module(net), spec, FP32)
    assert all(not p.requires_grad for p in module.parameters())
    obs = torch.randn(64, 8)
    with torch.no_grad():
        torch.testing.assert_close(module(obs), net(obs), rtol=1e-6, atol=1e-7)


def test_fp16_module_is_close_to_qnetwork() -> None:
    torch.manual_seed(3)
    net = QNetwork(BIG).eval()
    module = quantized_policy_from_weights(weights_from_module(net), BIG, "fp16")
    assert module.precision == FP16
    assert all(p.dtype == torch.float32 for p in module.parameters())
    obs = torch.randn(128, BIG.obs_dim)
    with torch.no_grad():
        reference, got = net(obs), module(obs)
    assert ((got - reference).norm() / reference.norm()).item() < 2e-3


def test_build_refuses_an_inconsistent_policy() -> None:
    torch.manual_seed(4)
    spec = MLPSpec(obs_dim=8, num_outputs=4, hidden=(16,))
    envelope = encode_policy(weights_from_module(QNetwork(spec)), spec, INT8, 1, 1).envelope
    policy = decode_policy(envelope)
    del policy.tensors[0].scales[-1]
    with pytest.raises(BlobError, match="scales"):
        build_policy_module(policy)
