"""Array codecs: int8 per-channel and fp16 error bounds, edge rows, precision names."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from actorq.quant import (
    PRECISION_NAMES,
    dequantize_fp16,
    dequantize_int8,
    parse_precision,
    precision_name,
    quantize_fp16,
    quantize_int8_per_channel,
    relative_error,
)
from actorq.v1 import policy_pb2

FP16_HALF_ULP = 2.0**-11  # relative rounding bound for normal float16 values
FP16_SUBNORMAL_HALF_STEP = 2.0**-25  # absolute bound below the normal range

finite_f32 = st.floats(
    min_value=-(2.0**100), max_value=2.0**100, allow_nan=False, allow_infinity=False, width=32
)
matrices = hnp.arrays(
    np.float32,
    hnp.array_shapes(min_dims=2, max_dims=2, min_side=1, max_side=24),
    elements=finite_f32,
)


def assert_int8_bounds(w: np.ndarray, q: np.ndarray, scales: np.ndarray) -> None:
    """Every property quantize_int8_per_channel promises."""
    assert q.dtype == np.int8 and q.shape == w.shape
    assert scales.dtype == np.float32 and scales.shape == (w.shape[0],)
    assert np.isfinite(scales).all() and (scales > 0).all()
    assert np.abs(q.astype(np.int32)).max() <= 127
    err = np.abs(w.astype(np.float64) - dequantize_int8(q, scales).astype(np.float64))
    bound = scales.astype(np.float64)[:, None] / 2
    # float32 rounding of the dequantized product: one ulp of |w| at most.
    assert (err <= bound * (1 + 1e-6) + np.abs(w) * 2.0**-23 + 1e-45).all()


@settings(max_examples=300, deadline=None)
@given(matrices)
def test_int8_error_within_half_scale(w: np.ndarray) -> None:
    q, scales = quantize_int8_per_channel(w)
    assert_int8_bounds(w, q, scales)


@settings(max_examples=200, deadline=None)
@given(matrices)
def test_int8_uses_full_code_range_on_each_nonzero_row(w: np.ndarray) -> None:
    q, scales = quantize_int8_per_channel(w)
    nonzero = np.abs(w).max(axis=1) / 127 > np.finfo(np.float32).tiny
    assert (np.abs(q[nonzero].astype(np.int32)).max(axis=1) == 127).all()
    np.testing.assert_allclose(
        scales[nonzero], np.abs(w[nonzero]).max(axis=1) / np.float32(127), rtol=1e-6
    )


def test_int8_zero_rows_get_safe_scale() -> None:
    w = np.zeros((3, 5), dtype=np.float32)
    w[1] = np.array([63.5, -127.0, 32.0, 0.0, 127.0]) / 128  # scale exactly 1/128
    q, scales = quantize_int8_per_channel(w)
    assert scales[0] == 1.0 and scales[2] == 1.0
    assert not q[[0, 2]].any()
    assert scales[1] == np.float32(1 / 128)
    assert q[1].tolist() == [64, -127, 32, 0, 127]  # 63.5 rounds half to even: 64
    assert_int8_bounds(w, q, scales)


def test_int8_tiny_values_never_give_zero_scale() -> None:
    w = np.array([[1e-45, -1e-45], [1e-40, 3e-41]], dtype=np.float32)
    q, scales = quantize_int8_per_channel(w)
    assert (scales > 0).all()
    assert_int8_bounds(w, q, scales)


def test_int8_subnormal_scale_rounding_never_clips() -> None:
    # max/127 = 1.4 * 2**-149 rounds *down* to 2**-149 in float32: the max code would be
    # 178 and get clipped to 127 unless the scale is rounded up.
    tick = np.float32(2.0**-149)
    w = np.array([[178 * tick, -100 * tick]], dtype=np.float32)
    q, scales = quantize_int8_per_channel(w)
    assert scales[0] * 127 >= w[0, 0]
    assert_int8_bounds(w, q, scales)


def test_int8_known_values() -> None:
    # Scales 0.5 and 1/8 are exact, so every code below is a tie or an integer.
    w = np.array([[63.5, -31.75, 0.25], [-15.875, 0.1875, 0.3125]], dtype=np.float32)
    q, scales = quantize_int8_per_channel(w)
    assert scales.tolist() == [0.5, 0.125]
    assert q.tolist() == [[127, -64, 0], [-127, 2, 2]]  # ties go to the even code


@pytest.mark.parametrize(
    "bad", [np.ones(3, np.float32), np.ones((2, 2, 2), np.float32), np.array([[np.nan, 1.0]])]
)
def test_int8_rejects_non_2d_or_non_finite(bad: np.ndarray) -> None:
    with pytest.raises(ValueError, match=r"2-D|NaN"):
        quantize_int8_per_channel(bad)


def test_dequantize_int8_applies_zero_points_and_checks_shapes() -> None:
    q = np.array([[1, 2], [3, 4]], dtype=np.int8)
    out = dequantize_int8(q, np.array([0.5, 2.0], np.float32), np.array([1, -1]))
    assert out.dtype == np.float32
    assert out.tolist() == [[0.0, 0.5], [8.0, 10.0]]
    with pytest.raises(ValueError, match="one scale per row"):
        dequantize_int8(q, np.ones(3, np.float32))


@settings(max_examples=300, deadline=None)
@given(
    hnp.arrays(
        np.float32,
        hnp.array_shapes(min_dims=1, max_dims=2, max_side=16),
        elements=st.floats(-65000, 65000, allow_nan=False, width=32),
    )
)
def test_fp16_relative_error_bound(w: np.ndarray) -> None:
    h = quantize_fp16(w)
    assert h.dtype == np.float16 and h.shape == w.shape
    back = dequantize_fp16(h)
    assert back.dtype == np.float32
    err = np.abs(w.astype(np.float64) - back)
    assert (err <= np.abs(w) * FP16_HALF_ULP + FP16_SUBNORMAL_HALF_STEP).all()


def test_fp16_refuses_overflow_and_non_finite() -> None:
    with pytest.raises(ValueError, match="float16 range"):
        quantize_fp16(np.array([1.0, 70000.0], np.float32))
    with pytest.raises(ValueError, match="NaN or Inf"):
        quantize_fp16(np.array([np.inf], np.float32))


def test_relative_error() -> None:
    zero = np.zeros((2, 2))
    assert relative_error(zero, zero) == 0.0
    assert relative_error(zero, np.ones((2, 2))) == float("inf")
    w = np.array([[3.0, 4.0]])
    assert relative_error(w, np.array([[3.0, 3.0]])) == pytest.approx(0.2)


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("fp32", policy_pb2.PRECISION_FP32),
        ("FP16", policy_pb2.PRECISION_FP16),
        (" Int8 ", policy_pb2.PRECISION_INT8),
        ("int4", policy_pb2.PRECISION_INT4),
    ],
)
def test_parse_precision(name: str, value: int) -> None:
    assert parse_precision(name) == value
    assert precision_name(value) == name.strip().lower()


@pytest.mark.parametrize("bad", ["int2", "", "float32"])
def test_parse_precision_names_bad_value_and_accepted_ones(bad: str) -> None:
    with pytest.raises(ValueError) as info:
        parse_precision(bad)
    message = str(info.value)
    assert repr(bad) in message
    assert all(name in message for name in PRECISION_NAMES)


def test_precision_name_rejects_unknown_value() -> None:
    with pytest.raises(ValueError, match="unknown precision value 0"):
        precision_name(policy_pb2.PRECISION_UNSPECIFIED)
