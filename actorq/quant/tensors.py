"""One `actorq.v1.Tensor` at a time: arrays <-> wire encoding, and one decoder per dtype.

Row-major, little-endian. int8, sparse int8 and int4 tensors carry one float32 scale and
zero point per output channel (axis 0); a conv weight keeps its 4-D shape, its codes those
of the [out, in * k * k] matrix. Every wire form decodes, once and fully checked, to the
same `TensorArrays`; a new wire form adds an entry to `_DECODERS` and nothing downstream.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import cast

import numpy as np

from actorq.quant.codec import (
    INT8_QMAX,
    dequantize_fp16,
    dequantize_int8,
    quantize_fp16,
    quantize_int8_per_channel,
    relative_error,
)
from actorq.quant.errors import BlobError
from actorq.quant.lowbit import INT4_QMAX, pack_int4, quantize_per_channel, unpack_int4
from actorq.quant.sparse import decode_sparse_int8, encode_sparse_int8
from actorq.v1 import policy_pb2

FLOAT32, FLOAT16 = policy_pb2.DTYPE_FLOAT32, policy_pb2.DTYPE_FLOAT16
INT8, INT4, SPARSE_INT8 = policy_pb2.DTYPE_INT8, policy_pb2.DTYPE_INT4, policy_pb2.DTYPE_SPARSE_INT8

WEIGHT_DTYPES: dict[int, tuple[int, ...]] = {
    policy_pb2.PRECISION_FP32: (FLOAT32,),
    policy_pb2.PRECISION_FP16: (FLOAT16,),
    policy_pb2.PRECISION_INT8: (INT8, SPARSE_INT8),
    policy_pb2.PRECISION_INT4: (INT4,),
}
"""Wire DTypes a weight (2-D, or 4-D conv) may have at each Precision (biases and other
vectors are always FLOAT32). Sparse int8 is read for 2-D weights only."""

FALLBACK_DTYPES = (FLOAT16, FLOAT32)
"""Float forms a weight (2-D, or 4-D conv) may also take in an FP16/INT8/INT4 policy: the
quantizer's guard stores a layer that quantizes badly at fp16 or fp32
(encode_policy(fallback_layers=...))."""


def allowed_weight_dtypes(precision: int) -> tuple[int, ...]:
    """Wire DTypes a weight (2-D or conv) may have in a policy at `precision`."""
    if precision == policy_pb2.PRECISION_FP32:
        return WEIGHT_DTYPES[precision]
    own = WEIGHT_DTYPES[precision]
    return own + tuple(d for d in FALLBACK_DTYPES if d not in own)


@dataclass(frozen=True, eq=False)  # arrays: compare values with np.array_equal
class TensorArrays:
    """A decoded tensor: `values` float32, float16 or int8 codes (int4 unpacked), shaped as
    the tensor; `scales` (float32, per output channel) set exactly when values are codes."""

    values: np.ndarray
    scales: np.ndarray | None = None

    def to_float32(self) -> np.ndarray:
        if self.scales is None:
            return self.values.astype(np.float32)
        rows = self.values.reshape(self.values.shape[0], -1)  # conv [out, in, k, k] too
        return dequantize_int8(rows, self.scales).reshape(self.values.shape)


def quantize_weight(w: np.ndarray, precision: int) -> tuple[TensorArrays, float]:
    """An fp32 weight at `precision`, and its relative Frobenius error: 2-D [out, in], or
    a conv weight [out, in, k, k], quantized per output channel as [out, in * k * k]."""
    if np.ndim(w) > 2:
        rows, error = quantize_weight(np.reshape(w, (np.shape(w)[0], -1)), precision)
        scales = rows.scales
        return TensorArrays(rows.values.reshape(np.shape(w)), scales), error
    if precision == policy_pb2.PRECISION_FP32:
        return TensorArrays(np.asarray(w, dtype=np.float32)), 0.0
    if precision == policy_pb2.PRECISION_FP16:
        h = quantize_fp16(w)
        return TensorArrays(h), relative_error(w, dequantize_fp16(h))
    if precision in (policy_pb2.PRECISION_INT8, policy_pb2.PRECISION_INT4):
        if precision == policy_pb2.PRECISION_INT8:
            q, scales = quantize_int8_per_channel(w)
        else:
            q, scales = quantize_per_channel(w, bits=4)
        arrays = TensorArrays(q, scales)
        return arrays, relative_error(w, arrays.to_float32())
    raise ValueError(f"cannot encode weights at precision value {precision!r}")


def encode_float32(name: str, value: np.ndarray) -> policy_pb2.Tensor:
    """A FLOAT32 tensor holding `value` exactly."""
    return _tensor(name, value.astype("<f4", copy=False), FLOAT32)


def weight_tensor(name: str, arrays: TensorArrays, precision: int) -> policy_pb2.Tensor:
    """The canonical wire form of a weight, a function of its values alone (delta readers
    rebuild the writer's bytes): 2-D INT8 weights go sparse exactly when that is smaller."""
    if precision == policy_pb2.PRECISION_FP32:
        return encode_float32(name, arrays.values)
    if precision == policy_pb2.PRECISION_FP16 or arrays.values.dtype == np.float16:
        return _tensor(name, arrays.values.astype("<f2", copy=False), FLOAT16)
    if arrays.values.dtype == np.float32:  # a float fallback layer in a quantized policy
        return encode_float32(name, arrays.values)
    if arrays.scales is None:
        raise ValueError(f"quantized weight {name!r} needs scales")
    if precision == policy_pb2.PRECISION_INT4:
        tensor = policy_pb2.Tensor(
            name=name, shape=list(arrays.values.shape), dtype=INT4, data=pack_int4(arrays.values)
        )
        _add_channels(tensor, arrays.scales)
        return tensor
    if arrays.values.ndim == 2:
        sparse = encode_sparse_int8(name, arrays.values, arrays.scales)
        positions = getattr(sparse, sparse.WhichOneof("positions") or "bitmap")
        if len(sparse.data) + len(positions) < arrays.values.size:  # codes + positions < dense
            return sparse
    dense = _tensor(name, arrays.values.astype(np.int8, copy=False), INT8)
    _add_channels(dense, arrays.scales)
    return dense


def _add_channels(tensor: policy_pb2.Tensor, scales: np.ndarray) -> None:
    tensor.scales.extend(scales.tolist())
    tensor.zero_points.extend([0] * len(scales))
    tensor.axis = 0


def _tensor(name: str, value: np.ndarray, dtype: int) -> policy_pb2.Tensor:
    return policy_pb2.Tensor(
        name=name,
        shape=list(value.shape),
        dtype=cast(policy_pb2.DType, dtype),
        data=np.ascontiguousarray(value).tobytes(),
    )


# --- reading ---------------------------------------------------------------------------


def decode_tensor(
    tensor: policy_pb2.Tensor, shape: tuple[int, ...], allowed: tuple[int, ...]
) -> TensorArrays:
    """Check `tensor` against the shape and dtypes its spec implies and decode it once;
    BlobError naming the tensor and the broken rule otherwise."""
    name = tensor.name
    if tensor.dtype not in _DECODERS:
        raise BlobError(f"tensor {name!r} has unknown dtype value {tensor.dtype}")
    if tensor.dtype not in allowed:
        expected = " or ".join(policy_pb2.DType.Name(d) for d in allowed)
        raise BlobError(
            f"tensor {name!r} has dtype {policy_pb2.DType.Name(tensor.dtype)}, expected {expected}"
        )
    if tuple(tensor.shape) != shape:
        raise BlobError(f"tensor {name!r} has shape {tuple(tensor.shape)}, spec says {shape}")
    if tensor.dtype != SPARSE_INT8 and tensor.WhichOneof("positions") is not None:
        raise BlobError(f"dense tensor {name!r} must not carry positions (bitmap or gaps)")
    return _DECODERS[tensor.dtype](tensor, shape)


def _check_length(tensor: policy_pb2.Tensor, shape: tuple[int, ...], expected: int) -> None:
    if len(tensor.data) != expected:
        raise BlobError(
            f"tensor {tensor.name!r} has {len(tensor.data)} data bytes, shape {shape} as "
            f"{policy_pb2.DType.Name(tensor.dtype)} needs {expected}"
        )


def _decode_float(tensor: policy_pb2.Tensor, shape: tuple[int, ...]) -> TensorArrays:
    wire = np.dtype("<f4") if tensor.dtype == FLOAT32 else np.dtype("<f2")
    _check_length(tensor, shape, math.prod(shape) * wire.itemsize)
    if tensor.scales or tensor.zero_points:
        raise BlobError(f"float tensor {tensor.name!r} must not carry scales or zero points")
    values = np.frombuffer(tensor.data, dtype=wire).reshape(shape).astype(wire.newbyteorder("="))
    if not np.isfinite(values).all():
        raise BlobError(f"tensor {tensor.name!r} has NaN or Inf values")
    return TensorArrays(values)


def _decode_int8(tensor: policy_pb2.Tensor, shape: tuple[int, ...]) -> TensorArrays:
    _check_length(tensor, shape, math.prod(shape))
    scales = _channel_scales(tensor, shape[0])
    codes = np.frombuffer(tensor.data, dtype=np.int8).reshape(shape).copy()
    if codes.size and codes.min() < -INT8_QMAX:
        raise BlobError(
            f"tensor {tensor.name!r} has an int8 code of -128; codes lie in [-127, 127]"
        )
    return TensorArrays(codes, scales)


def _decode_int4(tensor: policy_pb2.Tensor, shape: tuple[int, ...]) -> TensorArrays:
    _check_length(tensor, shape, (math.prod(shape) + 1) // 2)
    scales = _channel_scales(tensor, shape[0])
    codes = unpack_int4(tensor.data, math.prod(shape)).reshape(shape)
    if codes.size and codes.min() < -INT4_QMAX:
        raise BlobError(f"tensor {tensor.name!r} has an int4 code of -8; codes lie in [-7, 7]")
    return TensorArrays(codes, scales)


def _decode_sparse_int8(tensor: policy_pb2.Tensor, shape: tuple[int, ...]) -> TensorArrays:
    if len(shape) != 2:
        raise BlobError(f"sparse tensor {tensor.name!r} must be 2-D, spec says {shape}")
    scales = _channel_scales(tensor, shape[0])
    return TensorArrays(decode_sparse_int8(tensor, shape), scales)


def _channel_scales(tensor: policy_pb2.Tensor, channels: int) -> np.ndarray:
    name = tensor.name
    if tensor.axis != 0:
        raise BlobError(f"tensor {name!r} has scales along axis {tensor.axis}; only 0 is read")
    if len(tensor.scales) != channels:
        raise BlobError(
            f"tensor {name!r} has {len(tensor.scales)} scales for {channels} output channels"
        )
    scales = np.asarray(tensor.scales, dtype=np.float32)
    if not (np.isfinite(scales) & (scales > 0)).all():
        raise BlobError(f"tensor {name!r} has a scale that is not finite and > 0")
    if len(tensor.zero_points) not in (0, channels):
        raise BlobError(
            f"tensor {name!r} has {len(tensor.zero_points)} zero points for {channels} channels"
        )
    if any(tensor.zero_points):
        raise BlobError(
            f"tensor {name!r} has non-zero zero points; only symmetric int8/int4 is read"
        )
    return scales


_DECODERS: dict[int, Callable[[policy_pb2.Tensor, tuple[int, ...]], TensorArrays]] = {
    FLOAT32: _decode_float,
    FLOAT16: _decode_float,
    INT8: _decode_int8,
    INT4: _decode_int4,
    SPARSE_INT8: _decode_sparse_int8,
}
"""One decoder per wire DType: checks the data and returns dense arrays."""
