"""Sparse int8 weights on the wire (`DTYPE_SPARSE_INT8`): non-zero codes plus positions.

The non-zero codes in row-major order and where they sit, as a bitmap, LEB128 varint gaps
or Golomb-Rice coded gaps (actorq.quant.rice), whichever is smallest. The scales are the
int8 layer's own, so sparse is a lossless encoding of the same int8 policy.
"""

from __future__ import annotations

import math

import numpy as np

from actorq.quant.codec import INT8_QMAX
from actorq.quant.errors import BlobError
from actorq.quant.rice import best_rice_k, decode_rice_gaps, encode_rice_gaps, rice_size
from actorq.v1 import policy_pb2

_VARINT_MAX_BYTES = 10  # a uint64 needs at most 10 LEB128 bytes


def encode_varints(values: np.ndarray) -> bytes:
    """LEB128 (protobuf varint) encoding of non-negative integers, vectorised."""
    v = np.asarray(values, dtype=np.uint64)
    if v.size == 0:
        return b""
    lengths = _varint_lengths(v)
    ends = np.cumsum(lengths)
    out = np.zeros(int(ends[-1]), dtype=np.uint8)
    starts = ends - lengths
    for k in range(int(lengths.max())):
        has = lengths > k
        byte = (v[has] >> np.uint64(7 * k)) & np.uint64(0x7F)
        more = (lengths[has] > k + 1).astype(np.uint64) << np.uint64(7)
        out[starts[has] + k] = (byte | more).astype(np.uint8)
    return out.tobytes()


def _varint_lengths(v: np.ndarray) -> np.ndarray:
    """LEB128 bytes of each uint64 in `v`."""
    lengths = np.ones(v.size, dtype=np.int64)
    for k in range(1, _VARINT_MAX_BYTES):
        lengths += v >= np.uint64(1 << (7 * k)) if 7 * k < 64 else 0
    return lengths


def varint_size(values: np.ndarray) -> int:
    """len(encode_varints(values)), without building the bytes."""
    return int(_varint_lengths(np.asarray(values, dtype=np.uint64)).sum())


def decode_varints(data: bytes, what: str) -> np.ndarray:
    """Inverse of `encode_varints` (int64 values); BlobError on a cut-off or overlong one."""
    raw = np.frombuffer(data, dtype=np.uint8)
    if raw.size == 0:
        return np.zeros(0, dtype=np.int64)
    if raw[-1] & 0x80:
        raise BlobError(f"{what}: the last varint is cut off")
    ends = np.flatnonzero(raw < 0x80)
    starts = np.concatenate(([0], ends[:-1] + 1))
    lengths = ends - starts + 1
    if lengths.max() > 9:  # 9 bytes hold 63 bits: every valid index fits
        raise BlobError(f"{what}: a varint is {int(lengths.max())} bytes long (max 9)")
    position = np.arange(raw.size) - np.repeat(starts, lengths)
    parts = (raw & 0x7F).astype(np.int64) << (7 * position)
    return np.add.reduceat(parts, starts)


def encode_bitmap(mask: np.ndarray) -> bytes:
    """The `bitmap` bytes of a boolean mask: element k is bit (k % 8) of byte k // 8."""
    return np.packbits(mask.ravel(), bitorder="little").tobytes()


def encode_sparse_int8(name: str, codes: np.ndarray, scales: np.ndarray) -> policy_pb2.Tensor:
    """The DTYPE_SPARSE_INT8 tensor of int8 `codes` [out, in], positions in the smallest form."""
    flat = codes.ravel()
    indices = np.flatnonzero(flat)
    tensor = policy_pb2.Tensor(
        name=name,
        shape=list(codes.shape),
        dtype=policy_pb2.DTYPE_SPARSE_INT8,
        data=flat[indices].astype(np.int8).tobytes(),
        scales=scales.tolist(),  # no zero points: an empty list means all 0
        axis=0,
    )
    _set_positions(tensor, flat != 0, np.diff(indices, prepend=-1) - 1)
    return tensor


def _set_positions(tensor: policy_pb2.Tensor, mask: np.ndarray, gaps: np.ndarray) -> None:
    """Store the smallest of the three forms, sizes computed before any is built. Ties go
    to the older form (bitmap, then varints), so layers that Rice coding does not shrink
    stay byte-identical to older writers' and readable by older readers."""
    k = best_rice_k(gaps)
    sizes = {
        "bitmap": math.ceil(mask.size / 8),
        "index_gaps": varint_size(gaps),
        "rice_gaps": rice_size(gaps, k),
    }
    which = min(sizes, key=sizes.__getitem__)  # the first of equal sizes wins
    if which == "bitmap":
        tensor.bitmap = encode_bitmap(mask)
    elif which == "index_gaps":
        tensor.index_gaps = encode_varints(gaps)
    else:
        tensor.rice_gaps = encode_rice_gaps(gaps, k)


def sparse_positions(tensor: policy_pb2.Tensor, shape: tuple[int, ...]) -> np.ndarray:
    """Flat indices of the stored codes, checked against the shape and the code count."""
    name, size, count = tensor.name, math.prod(shape), len(tensor.data)
    which = tensor.WhichOneof("positions")
    if which == "bitmap":
        indices = _bitmap_positions(tensor, shape, size)
    elif which == "index_gaps":
        gaps = decode_varints(tensor.index_gaps, f"tensor {name!r} index_gaps")
        indices = _gap_positions(name, gaps, size)
    elif which == "rice_gaps":
        gaps = decode_rice_gaps(tensor.rice_gaps, count, size, f"tensor {name!r} rice_gaps")
        indices = _gap_positions(name, gaps, size)
    else:
        raise BlobError(f"sparse tensor {name!r} has neither bitmap nor index_gaps nor rice_gaps")
    if indices.size != count:
        raise BlobError(
            f"tensor {name!r} has {count} codes for {indices.size} positions in its {which}"
        )
    return indices


def _bitmap_positions(tensor: policy_pb2.Tensor, shape: tuple[int, ...], size: int) -> np.ndarray:
    name = tensor.name
    if len(tensor.bitmap) != math.ceil(size / 8):
        raise BlobError(
            f"tensor {name!r} has a {len(tensor.bitmap)}-byte bitmap, shape {shape} "
            f"needs {math.ceil(size / 8)}"
        )
    bits = np.unpackbits(np.frombuffer(tensor.bitmap, np.uint8), bitorder="little")
    if bits[size:].any():
        raise BlobError(f"tensor {name!r} has bitmap bits set past its {size} elements")
    return np.flatnonzero(bits[:size].view(np.bool_))  # bool: ~10x faster than uint8


def _gap_positions(name: str, gaps: np.ndarray, size: int) -> np.ndarray:
    """Flat indices from gaps (first index, then index - previous - 1), all below `size`."""
    if gaps.size and gaps.max() >= size:  # also keeps the running sum from overflowing
        raise BlobError(f"tensor {name!r} has an index gap of {gaps.max()} in {size} elements")
    indices = np.cumsum(gaps + 1) - 1
    if indices.size and indices[-1] >= size:
        raise BlobError(f"tensor {name!r} has a position {indices[-1]} past {size} elements")
    return indices


def decode_sparse_int8(tensor: policy_pb2.Tensor, shape: tuple[int, ...]) -> np.ndarray:
    """Dense int8 codes [out, in] of a sparse tensor (scales are checked by the caller)."""
    indices = sparse_positions(tensor, shape)
    values = np.frombuffer(tensor.data, dtype=np.int8)
    if (values == 0).any():
        raise BlobError(f"sparse tensor {tensor.name!r} stores a code 0; only non-zeros are stored")
    if (values < -INT8_QMAX).any():
        raise BlobError(
            f"tensor {tensor.name!r} has an int8 code of -128; codes lie in [-127, 127]"
        )
    dense = np.zeros(math.prod(shape), dtype=np.int8)
    dense[indices] = values
    return dense.reshape(shape)
