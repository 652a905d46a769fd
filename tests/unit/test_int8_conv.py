"""int8 convolution (fbgemm) against fp32 convolution, and CNN policies through the blob."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from actorq.algos.base import fp32_weights
from actorq.models.cnn import CNNNetwork, CNNSpec, cnn_spec_for
from actorq.quant import BlobError
from actorq.quant.arrays import policy_arrays
from actorq.quant.blob import decode_blob, decode_policy, encode_policy, policy_to_weights
from actorq.quant.codec import quantize_int8_per_channel
from actorq.quant.conv import CONV_ENGINE_ENV, DEFAULT_CONV_ENGINE, make_int8_conv_stack
from actorq.quant.delta import apply_delta, make_delta
from actorq.quant.policy_module import build_policy_module, quantized_policy_from_weights
from actorq.v1 import policy_pb2


@pytest.mark.parametrize("engine", ["x86", "onednn"])
@pytest.mark.parametrize("in_c,out_c,k,stride,hw", [(4, 32, 8, 4, 84), (4, 16, 3, 1, 10)])
def test_int8_conv_within_the_quantization_error_bound(in_c, out_c, k, stride, hw, engine) -> None:
    gen = torch.Generator().manual_seed(0)
    w = torch.randn(out_c, in_c, k, k, generator=gen) * 0.1
    b = torch.randn(out_c, generator=gen) * 0.01
    pixels = torch.randint(0, 256, (8, in_c, hw, hw), generator=gen, dtype=torch.uint8)
    input_scale = 1 / 255
    x = pixels.float() * input_scale
    q, scales = quantize_int8_per_channel(w.reshape(out_c, -1).numpy())
    codes = torch.from_numpy(q).reshape(w.shape)
    w_hat = codes.float() * torch.from_numpy(scales)[:, None, None, None]
    exact = F.conv2d(x, w_hat, b, stride).relu()  # int8 weights, exact arithmetic
    ref = F.conv2d(x, w, b, stride).relu()  # fp32 weights
    act_max = float(exact.max()) * 0.5  # outputs above 2 x act_max saturate (0..255 codes)
    process_engine = torch.backends.quantized.engine
    stack = make_int8_conv_stack(
        [(codes, torch.from_numpy(scales), b, stride)],
        torch.tensor([1.0, act_max]),
        input_scale,
        engine=engine,
    )
    assert stack.engine == engine
    assert torch.backends.quantized.engine == process_engine  # packing leaves it as it was
    with torch.inference_mode():
        y = stack(pixels)
        np.testing.assert_allclose(stack(pixels.float()).numpy(), y.numpy())
    # Inputs rounded to 1/127 steps (7-bit, actorq.quant.conv) move each output by
    # <= in_step / 2 times the weights' L1 norm; the output is rounded to act_max / 127
    # steps and saturates at 255 codes; int8 weights add <= scale_c / 2 times sum |x|.
    in_step, out_step = 1 / 127, act_max / 127
    w_l1 = w_hat.abs().sum(dim=(1, 2, 3))[None, :, None, None]
    bound = in_step / 2 * w_l1 + out_step / 2 + 1e-5
    top = 255 * out_step
    assert ((y - exact.clamp(max=top)).abs() <= bound).all()
    sum_x = F.conv2d(x.abs(), torch.ones(1, in_c, k, k), None, stride)
    weight_bound = torch.from_numpy(scales)[None, :, None, None] / 2 * sum_x
    assert ((y - ref.clamp(max=top)).abs() <= bound + weight_bound).all()
    inside = ref < top * 0.95
    assert float((y - ref)[inside].norm() / ref[inside].norm()) < 0.02


def test_conv_engine_comes_from_the_environment(monkeypatch) -> None:
    codes = torch.ones(2, 1, 3, 3, dtype=torch.int8)
    layer = [(codes, torch.ones(2), None, 1)]
    monkeypatch.setenv(CONV_ENGINE_ENV, "onednn")
    assert make_int8_conv_stack(layer, torch.ones(2), 1.0).engine == "onednn"
    monkeypatch.setenv(CONV_ENGINE_ENV, "avx9000")
    with pytest.raises(ValueError, match="ACTORQ_INT8_CONV_ENGINE='avx9000'"):
        make_int8_conv_stack(layer, torch.ones(2), 1.0)
    monkeypatch.delenv(CONV_ENGINE_ENV)
    assert make_int8_conv_stack(layer, torch.ones(2), 1.0).engine == DEFAULT_CONV_ENGINE


def test_int8_conv_rejects_bad_arguments() -> None:
    codes = torch.zeros(2, 1, 3, 3, dtype=torch.int8)
    one = torch.ones(2)
    with pytest.raises(ValueError, match="int8"):
        make_int8_conv_stack([(codes.float(), torch.ones(2), None, 1)], one, 1.0)
    with pytest.raises(ValueError, match="scales"):
        make_int8_conv_stack([(codes, torch.tensor([1.0, 0.0]), None, 1)], one, 1.0)
    with pytest.raises(ValueError, match="stride"):
        make_int8_conv_stack([(codes, torch.ones(2), None, 0)], one, 1.0)
    with pytest.raises(ValueError, match="act_max"):
        make_int8_conv_stack([(codes, torch.ones(2), None, 1)], torch.ones(3), 1.0)


def test_learner_network_tracks_activation_ranges() -> None:
    spec = cnn_spec_for((4, 10, 10), 3)
    net = CNNNetwork(spec)
    x = torch.randint(0, 2, (16, 4, 10, 10), dtype=torch.uint8)
    net.eval()
    net(x)
    assert float(net.act_max.abs().sum()) == 0.0  # eval forwards (actors' path) do not observe
    net.train()
    net(x)
    first = float(net.act_max[1])
    assert float(net.act_max[0]) == 1.0  # the input's range
    with torch.no_grad():
        assert first == pytest.approx(float(net.convs[1](net.convs[0](x.float())).max()))
    net(x * 0)
    bias_out = float(net.convs[0].bias.detach().relu().max())
    assert float(net.act_max[1]) == pytest.approx(0.99 * first + 0.01 * bias_out)


@pytest.mark.parametrize("shape,high", [((4, 10, 10), 2), ((4, 84, 84), 256)])
@pytest.mark.parametrize("precision,tolerance", [("fp32", 1e-5), ("fp16", 2e-3), ("int8", 0.05)])
def test_cnn_policy_through_the_blob(shape, high, precision, tolerance) -> None:
    spec = cnn_spec_for(shape, 6)
    with torch.random.fork_rng():
        torch.manual_seed(1)
        net = CNNNetwork(spec)
    x = torch.randint(0, high, (5, *shape), dtype=torch.uint8)
    net(x)  # a training-mode forward: the activation ranges int8 actors need
    net.eval()
    weights = fp32_weights(net)
    module = quantized_policy_from_weights(weights, spec, precision, version=3)
    with torch.inference_mode():
        ref, out = net(x), module(x)
    assert module.version == 3 and module.spec == spec
    assert float((out - ref).norm() / ref.norm()) < tolerance


def test_cnn_blob_is_per_channel_int8_with_4d_shapes() -> None:
    spec = cnn_spec_for((4, 84, 84), 6)
    weights = fp32_weights(CNNNetwork(spec))
    encoded = encode_policy(weights, spec, policy_pb2.PRECISION_INT8, 1, 1)
    policy = decode_policy(encoded.envelope, expected_spec=spec)
    conv = next(t for t in policy.tensors if t.name == "convs.0.weight")
    assert tuple(conv.shape) == (32, 4, 8, 8) and conv.dtype == policy_pb2.DTYPE_INT8
    assert len(conv.scales) == 32
    assert encoded.blob_bytes < 0.3 * spec.fp32_bytes()
    back = policy_to_weights(policy)
    assert back["convs.0.weight"].shape == (32, 4, 8, 8)
    np.testing.assert_allclose(back["convs.0.weight"], weights["convs.0.weight"], atol=0.01)


def test_cnn_spec_errors_are_named() -> None:
    with pytest.raises(ValueError, match="too small"):
        CNNSpec((4, 5, 5), 3, ((16, 8, 4),))
    spec = cnn_spec_for((4, 10, 10), 3)
    weights = fp32_weights(CNNNetwork(spec))
    encoded = encode_policy(weights, spec, policy_pb2.PRECISION_INT8, 1, 1)
    other = cnn_spec_for((4, 10, 10), 4)
    with pytest.raises(BlobError, match="expects"):
        decode_policy(encoded.envelope, expected_spec=other)


def test_cnn_versions_travel_as_deltas_and_build_the_same_module() -> None:
    """Main's delta broadcasts on a CNN policy: per-output-channel conv codes diff and
    rebuild like a Linear's; the module from the delta equals the one from the blob."""
    spec = cnn_spec_for((4, 10, 10), 3)
    net = CNNNetwork(spec)
    x = torch.randint(0, 2, (8, 4, 10, 10), dtype=torch.uint8)
    net(x)  # activation ranges
    first = fp32_weights(net)
    second = {k: v + (0.01 * (k == "convs.0.weight")) for k, v in first.items()}
    v1 = encode_policy(first, spec, policy_pb2.PRECISION_INT8, 1, 1)
    v2 = encode_policy(second, spec, policy_pb2.PRECISION_INT8, 2, 2)
    delta = make_delta(v1.arrays, v2)
    assert delta is not None
    rebuilt = apply_delta(decode_blob(v1.envelope, expected_spec=spec), delta)
    full = decode_blob(v2.envelope, expected_spec=spec)
    assert rebuilt.sha256 == full.sha256 == v2.sha256
    assert rebuilt.tensors["convs.0.weight"].values.shape == (16, 4, 3, 3)
    net.eval()
    with torch.inference_mode():
        out_delta, out_full = build_policy_module(rebuilt)(x), build_policy_module(full)(x)
    torch.testing.assert_close(out_delta, out_full, rtol=0, atol=0)


def test_sparse_int8_conv_weight_is_refused() -> None:
    spec = cnn_spec_for((4, 10, 10), 3)
    weights = fp32_weights(CNNNetwork(spec))
    encoded = encode_policy(weights, spec, policy_pb2.PRECISION_INT8, 1, 1)
    policy = decode_policy(encoded.envelope, expected_spec=spec)
    conv = next(t for t in policy.tensors if t.name == "convs.0.weight")
    conv.dtype = policy_pb2.DTYPE_SPARSE_INT8
    with pytest.raises(BlobError, match="must be 2-D"):
        policy_arrays(policy)
