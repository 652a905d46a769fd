"""Symmetric per-channel quantization at any width from 2 to 8 bits, and int4 packing.

int8's rule (actorq.quant.codec.quantize_symmetric_per_channel, the one implementation)
with qmax = 2**(bits-1) - 1: int4 codes lie in [-7, 7], 2-bit codes in [-1, 1]. The
broadcast stores int4 codes two per byte (`pack_int4`); the other widths serve the
post-training quantization study and quantization-aware training (actorq.models.fake_quant).
"""

from __future__ import annotations

import numpy as np

from actorq.models.qbits import qmax_for_bits
from actorq.quant.codec import dequantize_int8, quantize_symmetric_per_channel

INT4_QMAX = 7


def quantize_per_channel(w: np.ndarray, bits: int) -> tuple[np.ndarray, np.ndarray]:
    """`(q, scales)`: int8 codes in [-qmax, qmax], one symmetric scale per row."""
    return quantize_symmetric_per_channel(w, qmax_for_bits(bits), "quantize_per_channel")


def dequantize_per_channel(q: np.ndarray, scales: np.ndarray) -> np.ndarray:
    """float32 values scales[c] * q[c, j] (int8's dequantizer: the codes are int8)."""
    return dequantize_int8(q, scales)


def fake_quantize_array(w: np.ndarray, bits: int) -> np.ndarray:
    """What a `bits`-bit per-channel broadcast would give back, in float32."""
    return dequantize_per_channel(*quantize_per_channel(w, bits))


def pack_int4(q: np.ndarray) -> bytes:
    """Pack codes in [-8, 7] two per byte, row-major: element 2k in the low nibble of
    byte k, element 2k+1 in its high nibble (two's complement nibbles); an odd count
    leaves the last high nibble 0. Output length: ceil(q.size / 2)."""
    flat = np.asarray(q).ravel()
    if flat.size and (flat.min() < -8 or flat.max() > 7):
        raise ValueError(f"int4 codes must lie in [-8, 7], got {flat.min()}..{flat.max()}")
    nibbles = (flat.astype(np.int16) & 0x0F).astype(np.uint8)
    if nibbles.size % 2:
        nibbles = np.append(nibbles, np.uint8(0))
    return (nibbles[0::2] | (nibbles[1::2] << 4)).astype(np.uint8).tobytes()


def unpack_int4(data: bytes, count: int) -> np.ndarray:
    """Inverse of `pack_int4`: `count` int8 codes in [-8, 7]."""
    expected = (count + 1) // 2
    if count < 0 or len(data) != expected:
        raise ValueError(f"{count} int4 codes need {expected} bytes, got {len(data)}")
    raw = np.frombuffer(data, dtype=np.uint8)
    nibbles = np.empty(raw.size * 2, dtype=np.int8)
    nibbles[0::2] = (raw & 0x0F).astype(np.int8)
    nibbles[1::2] = (raw >> 4).astype(np.int8)
    nibbles[nibbles > 7] -= 16  # sign-extend the 4-bit two's complement
    return nibbles[:count].copy()
