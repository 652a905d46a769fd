"""Array codecs: symmetric per-channel int8 and fp16, plus the error metric they share.

Pure numpy, no torch: the quantizer service and any non-Python reader use the same math.
int8 is symmetric per output channel (axis 0), with qmax = 127:

    scale[c] = max_j |w[c, j]| / qmax       (as float32, rounded up; 1.0 for a zero row)
    q[c, j]  = clip(round_half_even(w[c, j] / scale[c]), -qmax, qmax)
    w'[c, j] = scale[c] * q[c, j]

-128 is never produced, so the code range is symmetric and negation cannot overflow.
The low-bit widths (actorq.quant.lowbit) are the same rule with a smaller qmax:
`quantize_symmetric_per_channel` is the one implementation of it.
"""

from __future__ import annotations

import numpy as np

INT8_QMAX = 127
"""Largest int8 code used; codes lie in [-INT8_QMAX, INT8_QMAX]."""

ZERO_ROW_SCALE = np.float32(1.0)
"""Scale stored for rows whose values are all zero (their codes are all 0 anyway)."""


def _require_2d_finite(w: np.ndarray, what: str) -> None:
    if w.ndim != 2:
        raise ValueError(f"{what} expects a 2-D array, got shape {w.shape}")
    if not np.isfinite(w).all():
        raise ValueError(f"{what} got NaN or Inf values")


def quantize_int8_per_channel(w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """`(q, scales)` of a 2-D matrix: int8 codes in [-127, 127], one finite float32 scale
    > 0 per row, |w - q * scale| <= scale / 2."""
    return quantize_symmetric_per_channel(w, INT8_QMAX, "quantize_int8_per_channel")


def quantize_symmetric_per_channel(
    w: np.ndarray, qmax: int, caller: str
) -> tuple[np.ndarray, np.ndarray]:
    """The rule of the module docstring with codes in [-qmax, qmax], for every bit width
    (int8 here, 2..7 bits in actorq.quant.lowbit); `caller` names the public function in
    errors. Codes are int8."""
    w = np.asarray(w)
    _require_2d_finite(w, caller)
    w64 = w.astype(np.float64, copy=False)
    max_abs = np.abs(w64).max(axis=1) if w.shape[1] else np.zeros(w.shape[0])
    scales = (max_abs / qmax).astype(np.float32)
    # float32 rounding may leave scale * qmax below max|w| (badly so for subnormal scales),
    # which would clip the largest code; round such scales up by one ulp instead.
    low = scales.astype(np.float64) * qmax < max_abs
    scales[low] = np.nextafter(scales[low], np.float32(np.inf))
    # All-zero rows (or ones whose scale underflows float32) get a harmless scale of 1.
    scales[~(scales > 0)] = ZERO_ROW_SCALE
    # Divide by the float32 scale actually stored, in float64, so rounding is exact.
    q = np.rint(w64 / scales.astype(np.float64)[:, None])
    np.clip(q, -qmax, qmax, out=q)
    return q.astype(np.int8), scales


def dequantize_int8(
    q: np.ndarray, scales: np.ndarray, zero_points: np.ndarray | None = None
) -> np.ndarray:
    """Float32 values of per-row int8 codes: scales[c] * (q[c, j] - zero_points[c])."""
    q = np.asarray(q)
    scales = np.asarray(scales, dtype=np.float32)
    if q.ndim != 2 or scales.shape != (q.shape[0],):
        raise ValueError(
            f"dequantize_int8 needs 2-D codes and one scale per row, got codes {q.shape} "
            f"and scales {scales.shape}"
        )
    codes = q.astype(np.float32)
    if zero_points is not None:
        codes -= np.asarray(zero_points, dtype=np.float32)[:, None]
    return codes * scales[:, None]


def quantize_fp16(w: np.ndarray) -> np.ndarray:
    """Round float values to float16, refusing values that would overflow to Inf."""
    w = np.asarray(w)
    if not np.isfinite(w).all():
        raise ValueError("quantize_fp16 got NaN or Inf values")
    with np.errstate(over="ignore"):
        h = w.astype(np.float16)
    if not np.isfinite(h).all():
        worst = float(np.abs(w).max())
        raise ValueError(
            f"value {worst:g} is outside the float16 range (max {np.finfo(np.float16).max})"
        )
    return h


def dequantize_fp16(h: np.ndarray) -> np.ndarray:
    """Float32 copy of float16 values (exact: every float16 is a float32)."""
    return np.asarray(h, dtype=np.float16).astype(np.float32)


def relative_error(w: np.ndarray, w_hat: np.ndarray) -> float:
    """||w - w_hat||_F / ||w||_F in float64; 0.0 when both are all zero."""
    w64 = np.asarray(w, dtype=np.float64)
    diff = float(np.linalg.norm(w64 - np.asarray(w_hat, dtype=np.float64)))
    norm = float(np.linalg.norm(w64))
    if norm == 0.0:
        return 0.0 if diff == 0.0 else float("inf")
    return diff / norm
