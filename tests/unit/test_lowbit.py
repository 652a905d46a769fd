"""Low-bit codecs: int4 packing round trips, per-channel error bounds at 2..8 bits, int4
blobs through the actor's inference module."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from actorq.models.mlp import MLPSpec, QNetwork
from actorq.quant import (
    BlobError,
    decode_policy,
    encode_policy,
    policy_to_weights,
    quantize_int8_per_channel,
    quantized_policy_from_weights,
    weights_from_module,
)
from actorq.quant.lowbit import (
    dequantize_per_channel,
    fake_quantize_array,
    pack_int4,
    qmax_for_bits,
    quantize_per_channel,
    unpack_int4,
)
from actorq.v1 import policy_pb2

codes = hnp.arrays(np.int8, st.integers(0, 257), elements=st.integers(-8, 7))
matrices = hnp.arrays(
    np.float32,
    hnp.array_shapes(min_dims=2, max_dims=2, min_side=1, max_side=20),
    elements=st.floats(-1e6, 1e6, allow_nan=False, width=32),
)


@settings(max_examples=300, deadline=None)
@given(codes)
def test_int4_pack_unpack_round_trip(q: np.ndarray) -> None:
    packed = pack_int4(q)
    assert len(packed) == (q.size + 1) // 2
    np.testing.assert_array_equal(unpack_int4(packed, q.size), q)


def test_int4_nibble_layout_is_low_nibble_first() -> None:
    # 1 -> 0x1 (low), -1 -> 0xF (high); 7 -> 0x7 (low), -8 -> 0x8 (high); 3 then pad 0.
    assert pack_int4(np.array([1, -1, 7, -8, 3], np.int8)) == bytes([0xF1, 0x87, 0x03])


def test_pack_refuses_codes_outside_int4() -> None:
    with pytest.raises(ValueError, match=r"\[-8, 7\], got -9\.\.7"):
        pack_int4(np.array([-9, 7], np.int8))


def test_unpack_refuses_wrong_length() -> None:
    with pytest.raises(ValueError, match="5 int4 codes need 3 bytes, got 2"):
        unpack_int4(b"\x00\x00", 5)


@pytest.mark.parametrize(("bits", "qmax"), [(2, 1), (3, 3), (4, 7), (6, 31), (8, 127)])
def test_qmax(bits: int, qmax: int) -> None:
    assert qmax_for_bits(bits) == qmax


@pytest.mark.parametrize("bits", [1, 9, 32, 4.0])
def test_bad_bits_named(bits: object) -> None:
    with pytest.raises(ValueError, match=r"bits must be an int in \[2, 8\]"):
        qmax_for_bits(bits)  # type: ignore[arg-type]


@settings(max_examples=200, deadline=None)
@given(matrices, st.integers(2, 8))
def test_per_channel_error_within_half_scale(w: np.ndarray, bits: int) -> None:
    q, scales = quantize_per_channel(w, bits)
    qmax = qmax_for_bits(bits)
    assert q.dtype == np.int8 and np.abs(q.astype(int)).max() <= qmax
    assert (scales > 0).all() and np.isfinite(scales).all()
    err = np.abs(w.astype(np.float64) - dequantize_per_channel(q, scales))
    bound = scales.astype(np.float64)[:, None] / 2
    assert (err <= bound * (1 + 1e-6) + np.abs(w) * 2.0**-23 + 1e-45).all()
    np.testing.assert_array_equal(fake_quantize_array(w, bits), dequantize_per_channel(q, scales))


@settings(max_examples=100, deadline=None)
@given(matrices)
def test_eight_bits_is_the_int8_codec(w: np.ndarray) -> None:
    """One rule for every width (codec.quantize_symmetric_per_channel): at 8 bits the
    low-bit quantizer gives the int8 codec's codes and scales exactly."""
    q, scales = quantize_per_channel(w, 8)
    q8, scales8 = quantize_int8_per_channel(w)
    np.testing.assert_array_equal(q, q8)
    np.testing.assert_array_equal(scales, scales8)


def test_fewer_bits_mean_larger_error() -> None:
    w = np.random.default_rng(0).normal(size=(64, 64)).astype(np.float32)
    errors = [
        np.linalg.norm(w - fake_quantize_array(w, b)) / np.linalg.norm(w) for b in (8, 6, 4, 2)
    ]
    assert errors == sorted(errors)
    assert errors[0] < 0.01 < errors[2] < 0.2 < errors[3]


SPEC = MLPSpec(obs_dim=5, num_outputs=3, hidden=(33, 16))  # odd sizes exercise the padding


def _weights() -> dict[str, np.ndarray]:
    torch.manual_seed(1)
    return weights_from_module(QNetwork(SPEC))


def test_int4_blob_is_about_an_eighth_of_fp32_weights() -> None:
    weights = _weights()
    int4 = encode_policy(weights, SPEC, policy_pb2.PRECISION_INT4, 1, 1)
    int8 = encode_policy(weights, SPEC, policy_pb2.PRECISION_INT8, 1, 1)
    assert int4.blob_bytes < int8.blob_bytes
    policy = decode_policy(int4.envelope)
    for t in policy.tensors:
        if t.dtype == policy_pb2.DTYPE_INT4:
            assert len(t.data) == (int(np.prod(t.shape)) + 1) // 2


def test_int4_module_matches_dequantized_weights() -> None:
    weights = _weights()
    module = quantized_policy_from_weights(weights, SPEC, "int4")
    policy = decode_policy(encode_policy(weights, SPEC, policy_pb2.PRECISION_INT4, 1, 1).envelope)
    reference = QNetwork(SPEC)
    reference.load_state_dict(
        {k: torch.from_numpy(v) for k, v in policy_to_weights(policy).items()}
    )
    obs = torch.randn(64, SPEC.obs_dim)
    with torch.inference_mode():
        got, want = module(obs), reference(obs)
    # The int8 kernels also round activations; the error stays small next to the outputs.
    assert (got - want).abs().max() <= 0.05 * want.abs().max()


def test_int4_reader_refuses_minus_eight() -> None:
    weights = _weights()
    envelope = encode_policy(weights, SPEC, policy_pb2.PRECISION_INT4, 1, 1).envelope
    outer = policy_pb2.PolicyEnvelope.FromString(envelope)
    policy = policy_pb2.Policy.FromString(outer.payload)
    t = policy.tensors[0]
    t.data = bytes([0x88]) + t.data[1:]
    payload = policy.SerializeToString()
    bad = policy_pb2.PolicyEnvelope(payload=payload, sha256=hashlib.sha256(payload).digest())
    with pytest.raises(BlobError, match="int4 code of -8"):
        decode_policy(bad.SerializeToString())


@pytest.mark.parametrize("bits", [2, 4, 6, 8])
def test_torch_fake_quantize_matches_the_codec(bits: int) -> None:
    from actorq.models.fake_quant import fake_quantize

    w = np.random.default_rng(bits).normal(size=(17, 9)).astype(np.float32)
    got = fake_quantize(torch.from_numpy(w), bits).numpy()
    np.testing.assert_allclose(got, fake_quantize_array(w, bits), rtol=1e-6, atol=1e-7)


def test_fake_quantize_passes_gradients_straight_through() -> None:
    from actorq.models.fake_quant import fake_quantize

    w = torch.randn(4, 3, requires_grad=True)
    upstream = torch.randn(4, 3)
    (fake_quantize(w, 4) * upstream).sum().backward()
    assert w.grad is not None
    torch.testing.assert_close(w.grad, upstream)
