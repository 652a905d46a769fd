"""One `actorq.v1.Tensor` at a time: numpy <-> wire encoding and the reader's checks.

Data is row-major and little-endian. int8 and int4 tensors carry one float32 scale and
one zero point per output channel (axis 0); float tensors carry neither. int4 data holds
two codes per byte (actorq.quant.lowbit.pack_int4).
"""

from __future__ import annotations

import math
from typing import cast

import numpy as np

from actorq.quant.codec import (
    dequantize_fp16,
    dequantize_int8,
    quantize_fp16,
    quantize_int8_per_channel,
    relative_error,
)
from actorq.quant.errors import BlobError
from actorq.quant.lowbit import (
    dequantize_per_channel,
    pack_int4,
    quantize_per_channel,
    unpack_int4,
)
from actorq.v1 import policy_pb2

WIRE_DTYPES: dict[int, np.dtype] = {
    policy_pb2.DTYPE_FLOAT32: np.dtype("<f4"),
    policy_pb2.DTYPE_FLOAT16: np.dtype("<f2"),
    policy_pb2.DTYPE_INT8: np.dtype("i1"),
    policy_pb2.DTYPE_INT4: np.dtype("i1"),  # codes as unpacked by tensor_values
}
"""numpy dtype of the values of each wire DType (int4: after unpacking)."""

QUANTIZED_DTYPES = (policy_pb2.DTYPE_INT8, policy_pb2.DTYPE_INT4)

WEIGHT_DTYPE: dict[int, int] = {
    policy_pb2.PRECISION_FP32: policy_pb2.DTYPE_FLOAT32,
    policy_pb2.PRECISION_FP16: policy_pb2.DTYPE_FLOAT16,
    policy_pb2.PRECISION_INT8: policy_pb2.DTYPE_INT8,
    policy_pb2.PRECISION_INT4: policy_pb2.DTYPE_INT4,
}
"""Wire DType of 2-D weight matrices at each Precision (biases are always FLOAT32)."""


def encode_float32(name: str, value: np.ndarray) -> policy_pb2.Tensor:
    """A FLOAT32 tensor holding `value` exactly."""
    return _tensor(name, value.astype("<f4", copy=False), policy_pb2.DTYPE_FLOAT32)


def encode_weight(name: str, w: np.ndarray, precision: int) -> tuple[policy_pb2.Tensor, float]:
    """Encode a 2-D weight at `precision`; also return its relative Frobenius error."""
    if precision == policy_pb2.PRECISION_FP32:
        return encode_float32(name, w), 0.0
    if precision == policy_pb2.PRECISION_FP16:
        h = quantize_fp16(w)
        tensor = _tensor(name, h.astype("<f2", copy=False), policy_pb2.DTYPE_FLOAT16)
        return tensor, relative_error(w, dequantize_fp16(h))
    if precision == policy_pb2.PRECISION_INT8:
        q, scales = quantize_int8_per_channel(w)
        tensor = _tensor(name, q, policy_pb2.DTYPE_INT8)
        tensor.scales.extend(scales.tolist())
        tensor.zero_points.extend([0] * len(scales))
        tensor.axis = 0
        return tensor, relative_error(w, dequantize_int8(q, scales))
    if precision == policy_pb2.PRECISION_INT4:
        q, scales = quantize_per_channel(w, bits=4)
        tensor = policy_pb2.Tensor(
            name=name, shape=list(q.shape), dtype=policy_pb2.DTYPE_INT4, data=pack_int4(q)
        )
        tensor.scales.extend(scales.tolist())
        tensor.zero_points.extend([0] * len(scales))
        tensor.axis = 0
        return tensor, relative_error(w, dequantize_per_channel(q, scales))
    raise ValueError(f"cannot encode weights at precision value {precision!r}")


def _tensor(name: str, value: np.ndarray, dtype: int) -> policy_pb2.Tensor:
    return policy_pb2.Tensor(
        name=name,
        shape=list(value.shape),
        dtype=cast(policy_pb2.DType, dtype),
        data=np.ascontiguousarray(value).tobytes(),
    )


def check_tensor(tensor: policy_pb2.Tensor, shape: tuple[int, ...], dtype: int) -> None:
    """Raise BlobError unless `tensor` is a well-formed `dtype` tensor of `shape`."""
    name = tensor.name
    if tensor.dtype not in WIRE_DTYPES:
        raise BlobError(f"tensor {name!r} has unknown dtype value {tensor.dtype}")
    if tensor.dtype != dtype:
        raise BlobError(
            f"tensor {name!r} has dtype {policy_pb2.DType.Name(tensor.dtype)}, "
            f"expected {policy_pb2.DType.Name(dtype)}"
        )
    if tuple(tensor.shape) != shape:
        raise BlobError(f"tensor {name!r} has shape {tuple(tensor.shape)}, spec says {shape}")
    expected_len = _data_bytes(shape, dtype)
    if len(tensor.data) != expected_len:
        raise BlobError(
            f"tensor {name!r} has {len(tensor.data)} data bytes, shape {shape} as "
            f"{policy_pb2.DType.Name(dtype)} needs {expected_len}"
        )
    if dtype in QUANTIZED_DTYPES:
        _check_channels(tensor, shape[0])
        if dtype == policy_pb2.DTYPE_INT4 and np.abs(tensor_values(tensor)).max(initial=0) > 7:
            raise BlobError(f"tensor {name!r} has an int4 code of -8; codes lie in [-7, 7]")
    else:
        _check_float(tensor)


def _data_bytes(shape: tuple[int, ...], dtype: int) -> int:
    if dtype == policy_pb2.DTYPE_INT4:
        return (math.prod(shape) + 1) // 2
    return math.prod(shape) * WIRE_DTYPES[dtype].itemsize


def _check_channels(tensor: policy_pb2.Tensor, channels: int) -> None:
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


def _check_float(tensor: policy_pb2.Tensor) -> None:
    name = tensor.name
    if tensor.scales or tensor.zero_points:
        raise BlobError(f"float tensor {name!r} must not carry scales or zero points")
    if not np.isfinite(tensor_values(tensor)).all():
        raise BlobError(f"tensor {name!r} has NaN or Inf values")


def tensor_values(tensor: policy_pb2.Tensor) -> np.ndarray:
    """The stored values (int8/int4 codes or floats) as a writable native-endian array."""
    if tensor.dtype == policy_pb2.DTYPE_INT4:
        shape = tuple(tensor.shape)
        return unpack_int4(tensor.data, math.prod(shape)).reshape(shape)
    wire = WIRE_DTYPES[tensor.dtype]
    raw = np.frombuffer(tensor.data, dtype=wire).reshape(tuple(tensor.shape))
    return raw.astype(wire.newbyteorder("="))


def tensor_scales(tensor: policy_pb2.Tensor) -> np.ndarray:
    """Per-channel float32 scales of an int8 or int4 tensor."""
    return np.asarray(tensor.scales, dtype=np.float32)


def tensor_to_float32(tensor: policy_pb2.Tensor) -> np.ndarray:
    """Float32 values of a checked tensor (dequantized when it is int8 or int4)."""
    values = tensor_values(tensor)
    if tensor.dtype in QUANTIZED_DTYPES:
        zero_points = np.asarray(tensor.zero_points, dtype=np.int32) if tensor.zero_points else None
        return dequantize_int8(values, tensor_scales(tensor), zero_points)
    return values.astype(np.float32)
