"""Policy blob: encode/decode round trips, size, and every way a reader must say no."""

from __future__ import annotations

import hashlib
from collections.abc import Callable

import numpy as np
import pytest
import torch

from actorq.models.mlp import MLPSpec, QNetwork
from actorq.quant import (
    BlobError,
    WeightsError,
    decode_policy,
    encode_policy,
    policy_to_weights,
    spec_from_proto,
    spec_to_proto,
    validate_weights,
    weights_from_module,
)
from actorq.v1 import policy_pb2

SPEC = MLPSpec(obs_dim=6, num_outputs=3, hidden=(16, 8))
FP32, FP16, INT8 = policy_pb2.PRECISION_FP32, policy_pb2.PRECISION_FP16, policy_pb2.PRECISION_INT8
INT4 = policy_pb2.PRECISION_INT4
ALL_PRECISIONS = [FP32, FP16, INT8, INT4]
WEIGHT_DTYPE: dict[int, int] = {
    FP32: policy_pb2.DTYPE_FLOAT32,
    FP16: policy_pb2.DTYPE_FLOAT16,
    INT8: policy_pb2.DTYPE_INT8,
    INT4: policy_pb2.DTYPE_INT4,
}


def make_weights(spec: MLPSpec = SPEC, seed: int = 0) -> dict[str, np.ndarray]:
    torch.manual_seed(seed)
    return weights_from_module(QNetwork(spec))


def parse(envelope: bytes) -> tuple[policy_pb2.PolicyEnvelope, policy_pb2.Policy]:
    outer = policy_pb2.PolicyEnvelope.FromString(envelope)
    return outer, policy_pb2.Policy.FromString(outer.payload)


def reseal(policy: policy_pb2.Policy) -> bytes:
    """Envelope with a *valid* checksum around a (tampered) policy."""
    payload = policy.SerializeToString()
    return policy_pb2.PolicyEnvelope(
        payload=payload, sha256=hashlib.sha256(payload).digest()
    ).SerializeToString()


def tampered(mutate: Callable[[policy_pb2.Policy], None], precision: int = INT8) -> bytes:
    envelope = encode_policy(make_weights(), SPEC, precision, 1, 1).envelope
    _, policy = parse(envelope)
    mutate(policy)
    return reseal(policy)


def tensor(policy: policy_pb2.Policy, name: str) -> policy_pb2.Tensor:
    return next(t for t in policy.tensors if t.name == name)


@pytest.mark.parametrize("precision", ALL_PRECISIONS)
def test_round_trip_keeps_metadata_and_layout(precision: int) -> None:
    weights = make_weights()
    encoded = encode_policy(weights, SPEC, precision, version=7, learner_step=1234)
    assert encoded.blob_bytes == len(encoded.envelope)
    assert encoded.fp32_equivalent_bytes == SPEC.fp32_bytes()
    assert (encoded.version, encoded.learner_step, encoded.precision) == (7, 1234, precision)
    outer, _ = parse(encoded.envelope)
    assert encoded.sha256 == outer.sha256 == hashlib.sha256(outer.payload).digest()

    policy = decode_policy(encoded.envelope, expected_spec=SPEC)
    assert (policy.version, policy.learner_step, policy.precision) == (7, 1234, precision)
    assert spec_from_proto(policy.spec) == SPEC
    assert policy.fp32_equivalent_bytes == SPEC.fp32_bytes()
    assert policy.created_unix_ms > 0
    assert [t.name for t in policy.tensors] == list(SPEC.weight_shapes())
    for t in policy.tensors:
        assert tuple(t.shape) == SPEC.weight_shapes()[t.name]
        is_weight = len(t.shape) == 2
        assert t.dtype == (WEIGHT_DTYPE[precision] if is_weight else policy_pb2.DTYPE_FLOAT32)
        quantized = is_weight and precision in (INT8, INT4)
        assert len(t.scales) == (t.shape[0] if quantized else 0)
        assert list(t.zero_points) == ([0] * t.shape[0] if quantized else [])


@pytest.mark.parametrize("precision", ALL_PRECISIONS)
def test_round_trip_values_within_precision_bounds(precision: int) -> None:
    weights = make_weights()
    encoded = encode_policy(weights, SPEC, precision, 1, 1)
    policy = decode_policy(encoded.envelope)
    decoded = policy_to_weights(policy)
    worst = 0.0
    for name, original in weights.items():
        got = decoded[name]
        assert got.dtype == np.float32 and got.shape == original.shape
        if original.ndim == 1 or precision == FP32:
            np.testing.assert_array_equal(got, original)  # biases are always exact
            continue
        err = np.abs(got - original)
        if precision == FP16:
            assert (err <= np.abs(original) * 2.0**-11 + 2.0**-25).all()
        else:
            scales = np.asarray(tensor(policy, name).scales, dtype=np.float32)
            assert (err <= scales[:, None] / 2 * (1 + 1e-5)).all()
        worst = max(worst, float(np.linalg.norm(got - original) / np.linalg.norm(original)))
    assert encoded.quantization_error == pytest.approx(worst, rel=1e-4, abs=1e-12)
    ranges: dict[int, tuple[float, float]] = {
        FP32: (0, 0),
        FP16: (1e-6, 1e-3),
        INT8: (1e-4, 0.01),
        INT4: (0.01, 0.2),
    }
    expected_range = ranges[precision]
    assert expected_range[0] <= encoded.quantization_error <= expected_range[1]


def test_encoding_is_deterministic_for_fixed_timestamp() -> None:
    weights = make_weights()
    first = encode_policy(weights, SPEC, INT8, 3, 4, created_unix_ms=1000)
    second = encode_policy(weights, SPEC, INT8, 3, 4, created_unix_ms=1000)
    assert first == second


def test_int8_blob_is_about_a_quarter_of_fp32() -> None:
    spec = MLPSpec(obs_dim=64, num_outputs=16, hidden=(512, 512, 512))
    weights = make_weights(spec)
    sizes = {p: encode_policy(weights, spec, p, 1, 1).blob_bytes for p in ALL_PRECISIONS}
    assert sizes[FP32] >= spec.fp32_bytes()
    assert sizes[INT8] <= 0.26 * sizes[FP32]
    assert sizes[FP16] <= 0.51 * sizes[FP32]


def test_spec_proto_round_trip() -> None:
    proto = spec_to_proto(SPEC)
    assert (proto.kind, proto.obs_dim, proto.num_outputs) == ("mlp", 6, 3)
    assert list(proto.hidden) == [16, 8] and proto.activation == "relu"
    assert spec_from_proto(proto) == SPEC


# --- encoder refuses bad weights -----------------------------------------------------


def test_encode_refuses_nan_and_inf_naming_the_tensor() -> None:
    for bad in (np.nan, np.inf, -np.inf):
        weights = make_weights()
        weights["layers.2.weight"][3, 1] = bad
        with pytest.raises(WeightsError, match=r"layers\.2\.weight.*NaN/Inf"):
            encode_policy(weights, SPEC, INT8, 1, 1)


@pytest.mark.parametrize(
    ("change", "pattern"),
    [
        (lambda w: w.pop("layers.4.bias"), r"missing \['layers\.4\.bias'\]"),
        (lambda w: w.update(extra=np.zeros(1, np.float32)), r"unexpected \['extra'\]"),
        (lambda w: w.update({"layers.0.weight": np.zeros((6, 16), np.float32)}), "shape"),
        (lambda w: w.update({"layers.0.bias": np.zeros(16, np.float64)}), "float64"),
        (lambda w: w.update({"layers.0.bias": torch.zeros(16)}), "numpy array"),
    ],
)
def test_validate_weights_names_the_problem(change: Callable, pattern: str) -> None:
    weights = make_weights()
    change(weights)
    with pytest.raises(WeightsError, match=pattern):
        validate_weights(weights, SPEC)
    with pytest.raises(WeightsError):
        encode_policy(weights, SPEC, FP32, 1, 1)


def test_fp16_encode_refuses_values_beyond_fp16_range() -> None:
    weights = make_weights()
    weights["layers.0.weight"][0, 0] = 1e6
    with pytest.raises(WeightsError, match=r"layers\.0\.weight.*fp16"):
        encode_policy(weights, SPEC, FP16, 1, 1)
    encode_policy(weights, SPEC, INT8, 1, 1)  # int8 scales absorb any finite range


def test_encode_refuses_unknown_precision() -> None:
    with pytest.raises(ValueError, match="unknown precision"):
        encode_policy(make_weights(), SPEC, policy_pb2.PRECISION_UNSPECIFIED, 1, 1)


# --- decoder refuses bad blobs ---------------------------------------------------------


def test_flipped_payload_byte_fails_checksum() -> None:
    envelope = encode_policy(make_weights(), SPEC, INT8, 1, 1).envelope
    outer, _ = parse(envelope)
    for index in (0, len(outer.payload) // 2, len(outer.payload) - 1):
        payload = bytearray(outer.payload)
        payload[index] ^= 0x01
        corrupt = policy_pb2.PolicyEnvelope(payload=bytes(payload), sha256=outer.sha256)
        with pytest.raises(BlobError, match="checksum mismatch"):
            decode_policy(corrupt.SerializeToString())


def test_flipped_byte_anywhere_in_envelope_is_refused() -> None:
    envelope = encode_policy(make_weights(), SPEC, FP16, 1, 1).envelope
    rng = np.random.default_rng(0)
    for index in rng.choice(len(envelope), size=40, replace=False):
        corrupt = bytearray(envelope)
        corrupt[index] ^= 0x10
        with pytest.raises(BlobError):
            decode_policy(bytes(corrupt))


@pytest.mark.parametrize("keep", [0.0, 0.01, 0.5, 0.999])
def test_truncated_envelope_is_refused(keep: float) -> None:
    envelope = encode_policy(make_weights(), SPEC, INT8, 1, 1).envelope
    with pytest.raises(BlobError):
        decode_policy(envelope[: int(len(envelope) * keep)])


def test_envelope_cut_before_checksum_says_so() -> None:
    envelope = encode_policy(make_weights(), SPEC, INT8, 1, 1).envelope
    with pytest.raises(BlobError, match="0-byte sha256"):
        decode_policy(envelope[: len(envelope) - 34])  # drops the whole sha256 field


def test_garbage_is_refused() -> None:
    with pytest.raises(BlobError, match="does not parse"):
        decode_policy(b"\xff" * 64)


def test_unparsable_payload_with_valid_checksum_is_refused() -> None:
    payload = b"\x0a\xff\x01"  # field 1, length 255, but only 1 byte follows
    envelope = policy_pb2.PolicyEnvelope(payload=payload, sha256=hashlib.sha256(payload).digest())
    with pytest.raises(BlobError, match="payload does not parse"):
        decode_policy(envelope.SerializeToString())


def _set_shape(p: policy_pb2.Policy) -> None:
    del tensor(p, "layers.2.weight").shape[:]
    tensor(p, "layers.2.weight").shape.extend([8, 15])


def _drop_tensor(p: policy_pb2.Policy) -> None:
    del p.tensors[1]


def _rename_tensor(p: policy_pb2.Policy) -> None:
    p.tensors[1].name = "layers.1.bias"


def _duplicate_tensor(p: policy_pb2.Policy) -> None:
    p.tensors.append(p.tensors[0])


def _truncate_data(p: policy_pb2.Policy) -> None:
    t = tensor(p, "layers.0.weight")
    t.data = t.data[:-1]


def _drop_scale(p: policy_pb2.Policy) -> None:
    del tensor(p, "layers.0.weight").scales[-1]


def _zero_scale(p: policy_pb2.Policy) -> None:
    tensor(p, "layers.4.weight").scales[0] = 0.0


def _nonzero_zero_point(p: policy_pb2.Policy) -> None:
    tensor(p, "layers.4.weight").zero_points[0] = 3


def _axis_one(p: policy_pb2.Policy) -> None:
    tensor(p, "layers.0.weight").axis = 1


def _bias_as_int8(p: policy_pb2.Policy) -> None:
    tensor(p, "layers.0.bias").dtype = policy_pb2.DTYPE_INT8


def _unknown_dtype(p: policy_pb2.Policy) -> None:
    tensor(p, "layers.0.weight").dtype = 9  # type: ignore[assignment]


def _unknown_precision(p: policy_pb2.Policy) -> None:
    p.precision = 9  # type: ignore[assignment]


def _claims_fp16(p: policy_pb2.Policy) -> None:
    p.precision = FP16


def _bad_kind(p: policy_pb2.Policy) -> None:
    p.spec.kind = "transformer"


def _bad_spec(p: policy_pb2.Policy) -> None:
    p.spec.obs_dim = 0


def _spec_disagrees_with_tensors(p: policy_pb2.Policy) -> None:
    p.spec.hidden[0] = 17


@pytest.mark.parametrize(
    ("mutate", "pattern"),
    [
        (_set_shape, r"'layers\.2\.weight' has shape \(8, 15\), spec says \(8, 16\)"),
        (_drop_tensor, r"missing \['layers\.0\.bias'\]"),
        (_rename_tensor, r"missing \['layers\.0\.bias'\], unexpected \['layers\.1\.bias'\]"),
        (_duplicate_tensor, r"repeated \['layers\.0\.weight'\]"),
        (_truncate_data, r"'layers\.0\.weight' has 95 data bytes.*needs 96"),
        (_drop_scale, r"'layers\.0\.weight' has 15 scales for 16 output channels"),
        (_zero_scale, r"'layers\.4\.weight' has a scale that is not finite and > 0"),
        (_nonzero_zero_point, r"'layers\.4\.weight' has non-zero zero points"),
        (_axis_one, r"axis 1"),
        (_bias_as_int8, r"'layers\.0\.bias' has dtype DTYPE_INT8, expected DTYPE_FLOAT32"),
        (_unknown_dtype, r"unknown dtype value 9"),
        (_unknown_precision, r"unknown precision value 9"),
        (_claims_fp16, r"dtype DTYPE_INT8, expected DTYPE_FLOAT16"),
        (_bad_kind, r"model kind 'transformer' is not supported"),
        (_bad_spec, r"invalid model spec"),
        (_spec_disagrees_with_tensors, r"'layers\.0\.weight' has shape \(16, 6\), spec says \(17"),
    ],
)
def test_inconsistent_policy_is_refused(mutate: Callable, pattern: str) -> None:
    with pytest.raises(BlobError, match=pattern):
        decode_policy(tampered(mutate))


def test_non_finite_float_data_is_refused() -> None:
    def poison(p: policy_pb2.Policy) -> None:
        t = tensor(p, "layers.2.bias")
        values = np.frombuffer(t.data, dtype="<f4").copy()
        values[2] = np.nan
        t.data = values.tobytes()

    with pytest.raises(BlobError, match=r"'layers\.2\.bias' has NaN or Inf"):
        decode_policy(tampered(poison, precision=FP32))


def test_float_tensor_with_scales_is_refused() -> None:
    def add_scales(p: policy_pb2.Policy) -> None:
        tensor(p, "layers.0.weight").scales.append(1.0)

    with pytest.raises(BlobError, match="must not carry scales"):
        decode_policy(tampered(add_scales, precision=FP16))


def test_expected_spec_mismatch_is_refused() -> None:
    envelope = encode_policy(make_weights(), SPEC, INT8, 1, 1).envelope
    other = MLPSpec(obs_dim=6, num_outputs=3, hidden=(16, 9))
    with pytest.raises(BlobError, match="this reader expects"):
        decode_policy(envelope, expected_spec=other)
    assert decode_policy(envelope, expected_spec=SPEC).version == 1


# --- input normalisation travels as two fp32 vectors -----------------------------------

NORM_SPEC = MLPSpec(obs_dim=6, num_outputs=3, hidden=(16, 8), input_norm=True)


def _norm_weights() -> dict[str, np.ndarray]:
    weights = make_weights()
    weights["input_norm.shift"] = np.linspace(-50, 50, 6, dtype=np.float32)
    weights["input_norm.scale"] = np.full(6, 0.5, np.float32)
    return weights


@pytest.mark.parametrize("precision", ALL_PRECISIONS)
def test_input_norm_round_trips_in_fp32(precision: int) -> None:
    proto = spec_to_proto(NORM_SPEC)
    assert proto.input_norm and spec_from_proto(proto) == NORM_SPEC
    assert not spec_to_proto(SPEC).input_norm  # other blobs keep their bytes
    weights = _norm_weights()
    policy = decode_policy(encode_policy(weights, NORM_SPEC, precision, 1, 1).envelope)
    shift = tensor(policy, "input_norm.shift")
    assert shift.dtype == policy_pb2.DTYPE_FLOAT32 and not shift.scales  # never quantized
    decoded = policy_to_weights(policy)
    np.testing.assert_array_equal(decoded["input_norm.shift"], weights["input_norm.shift"])
    np.testing.assert_array_equal(decoded["input_norm.scale"], weights["input_norm.scale"])


def test_input_norm_spec_without_its_vectors_is_refused() -> None:
    with pytest.raises(WeightsError, match=r"missing \['input_norm\.shift', 'input_norm\.scale'\]"):
        encode_policy(make_weights(), NORM_SPEC, INT8, 1, 1)
    envelope = encode_policy(_norm_weights(), NORM_SPEC, INT8, 1, 1).envelope
    _, policy = parse(envelope)
    policy.spec.input_norm = False  # a reader must not silently skip the normalisation
    with pytest.raises(BlobError, match=r"unexpected \['input_norm\.scale', 'input_norm\.shift'\]"):
        decode_policy(reseal(policy))
