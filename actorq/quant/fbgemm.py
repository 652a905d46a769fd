"""fbgemm's dynamic int8 Linear as arithmetic, without torch: what every int8 runner shares.

torch's `quantized::linear_dynamic` (fbgemm, the x86 engines) quantizes a layer's input per
tensor to uint8 with ChooseQuantizationParams (`activation_qparams`), multiplies the codes
by the weight's per-channel int8 codes exactly in integers, then requantizes to float32.
The compiled forward (actorq.quant.fused_mlp, numba) and the numpy one
(actorq.quant.numpy_mlp) both run `activation_qparams` from here and are pinned bit for bit
to torch's `Int8Linear` (tests/unit/test_fused_mlp.py, tests/unit/test_numpy_mlp.py).
"""

from __future__ import annotations

import platform
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from actorq.quant.tensors import TensorArrays

REDUCE_RANGE_ENGINES = frozenset({"fbgemm", "x86"})
"""Engines whose int8 GEMM can saturate 16-bit sums without VNNI; they need 7-bit inputs."""
FBGEMM_ENGINES = frozenset({"fbgemm", "x86"})
"""torch's quantized engines whose int8 Linear is fbgemm's, the arithmetic copied here."""
_X86_MACHINES = frozenset({"x86_64", "amd64", "i386", "i686"})

_SMALL_SCALE = np.float32(6.1e-5)  # SMALL_SCALE_THRESHOLD of QuantUtils.h
EXACT_LIMIT = 1 << 24
"""float32 holds every integer below this exactly."""


def quantized_engine() -> str:
    """The quantized engine torch's int8 Linear runs under in this process: torch's own
    setting once torch is loaded; before that, the default torch picks here ("x86" on an
    x86-64 CPU, checked against torch in tests/unit/test_numpy_mlp.py), without loading it."""
    torch = sys.modules.get("torch")
    if torch is not None:
        return str(torch.backends.quantized.engine)
    return "x86" if platform.machine().lower() in _X86_MACHINES else "qnnpack"


def activation_qparams(lo, hi, reduce_range):
    """(float32 scale, zero point) of torch's ChooseQuantizationParams for uint8."""
    qmin, qmax = 0, 127 if reduce_range else 255
    lo = min(lo, np.float32(0.0))
    hi = max(hi, np.float32(0.0))
    scale = (np.float64(hi) - np.float64(lo)) / (qmax - qmin)
    if np.float32(scale) == 0.0 or np.isinf(np.float32(1.0) / np.float32(scale)):
        scale = 0.1
    if scale < _SMALL_SCALE:
        org_scale = np.float32(scale)
        scale = np.float64(_SMALL_SCALE)
        if lo == 0.0:
            hi = _SMALL_SCALE * np.float32(qmax - qmin)
        elif hi == 0.0:
            lo = -_SMALL_SCALE * np.float32(qmax - qmin)
        else:
            amplifier = _SMALL_SCALE / org_scale
            lo = lo * amplifier
            hi = hi * amplifier
    from_min = qmin - lo / scale
    from_max = qmax - hi / scale
    from_min_error = abs(qmin) - abs(lo / scale)
    from_max_error = abs(qmax) - abs(hi / scale)
    initial = from_min if from_min_error < from_max_error else from_max
    if initial < qmin:
        zero_point = qmin
    elif initial > qmax:
        zero_point = qmax
    else:
        zero_point = int(np.rint(initial))
    return np.float32(scale), zero_point


def widest_integer_sum(codes: np.ndarray, reduce_range: bool) -> int:
    """The largest |integer sum| an int8 layer of these codes [out, in] can reach: in
    products of the largest activation code (127 with reduce_range, else 255) and weight code."""
    qmax = 127 if reduce_range else 255
    return codes.shape[1] * qmax * int(np.abs(codes.astype(np.int32)).max(initial=0))


def exact_in_float32(
    layers: Sequence[tuple[TensorArrays, TensorArrays]], reduce_range: bool
) -> bool:
    """Whether every int8 layer's integer sums stay below 2**24 (exact in float32)."""
    return all(widest_integer_sum(w.values, reduce_range) < EXACT_LIMIT for w, _ in layers)
