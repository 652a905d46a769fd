"""One numba call for an int8 MLP policy's forward, equal to the torch/fbgemm module's.

At an actor's batch sizes (8..128 rows of a 64x64 net) the torch forward is mostly
per-op call overhead. `FusedMLP` runs the same arithmetic in one compiled call:
- input norm and the first layer in fp32, as `InputNorm` and `DequantizedLinear` do (a
  different sum order than torch's sgemm, so an ulp or so apart);
- every int8 layer as fbgemm's `quantized::linear_dynamic` computes it: activations
  quantized per tensor to uint8 by torch's ChooseQuantizationParams and fbgemm's
  Quantize (ties to even), exact integer products with the per-channel codes, then
  float(sum - zero_point * column_sum) * (activation_scale * weight_scale[j]) + bias[j]
  as fbgemm's requantizeForFloatAvx2 does.
The integer sums run as float32 multiply-adds: every partial sum is an integer below
2**24 (checked when building, `_exact_in_float32`), so any order gives the exact sum and
the loops vectorise without fast-math. An int8 layer here equals `Int8Linear` bit for bit
(tests/unit/test_fused_mlp.py).

numba is optional: `actorq.actor.fast_act` imports this module only when it is installed.
The kernels take layers as flat arrays (one signature whatever the sizes), cached on disk.
"""

from __future__ import annotations

import numba
import numpy as np

from actorq.models.specs import INPUT_SCALE, INPUT_SHIFT, MLPSpec
from actorq.quant import fbgemm
from actorq.quant.arrays import PolicyArrays
from actorq.quant.fbgemm import FBGEMM_ENGINES, REDUCE_RANGE_ENGINES, exact_in_float32

# The fused forward pays off where torch's per-op overhead dominates: small nets. Measured
# in one process (BENCHMARKS.md 23j): 0.2-0.6x torch's time at 64 wide (batch 16-128), but
# 1.0-3.5x at 128 x 128 and batch 128, and 1.4-30x from 256 wide up (fp32 BLAS against
# fbgemm's int8 GEMM, and scipy's OpenBLAS threads fighting on a busy machine). So only
# int8 layers of at most this many weights are fused; larger nets keep the torch module.
FUSE_MAX_LAYER_WEIGHTS = 64 * 128


def _host_has_avx512() -> bool:
    """Whether numba compiles for a CPU with AVX-512 (the host's, as LLVM sees it)."""
    import llvmlite.binding as llvm

    return bool(llvm.get_host_cpu_features().get("avx512f", False))


# How the int8 quantizer finds (min, max), measured at 128 x 64 (BENCHMARKS.md 23l): per
# column, 1.6 us on the 16-core Xeon with AVX-512 against 4.3 us for four running pairs;
# on the AVX2-only AMD EPYC (Zen 3) per column took 9.4-15 us against 3.0-3.5.
MIN_MAX_BY_COLUMN = _host_has_avx512()


class FusedMLP:
    """An int8 MLP policy (optional input norm, fp32 first layer, int8 layers) as two flat
    arrays: numba unboxes each argument of a call (~0.15 us an array), so the weights
    travel as one float32 vector and the shapes and flags as one int64 vector."""

    def __init__(self, arrays: PolicyArrays, reduce_range: bool) -> None:
        spec = arrays.spec
        (first_w, first_b), *int8_layers = arrays.linear_layers()
        weight_t = first_w.to_float32().T  # [in, out], as DequantizedLinear holds it
        dim, width = weight_t.shape
        shift, scale = np.zeros(dim, np.float32), np.ones(dim, np.float32)
        if spec.input_norm:
            shift, scale = arrays.float32(INPUT_SHIFT), arrays.float32(INPUT_SCALE)
        relus = [True] * (len(int8_layers) - 1) + [False]  # hidden layers only
        flags = (spec.input_norm, True, reduce_range, MIN_MAX_BY_COLUMN)
        shapes = [(w.values.shape[1], w.values.shape[0]) for w, _ in int8_layers]
        per_layer = [v for shape, relu in zip(shapes, relus, strict=True) for v in (*shape, relu)]
        self.layout = np.array([*flags, dim, width, len(int8_layers), *per_layer], np.int64)
        # The int8 codes as float32 [in, out]: the kernel sums their products exactly.
        codes_t = [w.values.T.astype(np.float32).ravel() for w, _ in int8_layers]
        vectors = (shift, scale, weight_t.ravel(), first_b.to_float32(), *codes_t,
                   *(w.scales for w, _ in int8_layers),
                   *(b.to_float32() for _, b in int8_layers))  # fmt: skip
        self.params = np.concatenate([np.ascontiguousarray(v, np.float32) for v in vectors])
        self.num_outputs = shapes[-1][1]

    def __call__(self, obs: np.ndarray) -> np.ndarray:
        """float32 obs [B, obs_dim] -> float32 outputs [B, num_outputs]."""
        return mlp_forward(np.ascontiguousarray(obs, np.float32), self.params, self.layout)


def fuse_mlp(
    arrays: PolicyArrays,
    max_layer_weights: int | None = FUSE_MAX_LAYER_WEIGHTS,
    engine: str | None = None,
) -> FusedMLP | None:
    """A `FusedMLP` equal to `build_policy_module(arrays)`, or None (keep the torch module)
    where that module is not [InputNorm], an fp32 first layer and int8 layers, where an
    int8 layer exceeds `max_layer_weights`, or where `engine` is not fbgemm's."""
    engine = engine or fbgemm.quantized_engine()
    spec = arrays.spec
    if not isinstance(spec, MLPSpec) or spec.output_activation != "none":
        return None
    layers = arrays.linear_layers()
    # A float weight (fp32/fp16 policy, or the guard's fallback layer) is an nn.Linear.
    if len(layers) < 2 or any(w.scales is None for w, _ in layers):
        return None
    reduce_range = engine in REDUCE_RANGE_ENGINES
    if engine not in FBGEMM_ENGINES or not exact_in_float32(layers[1:], reduce_range):
        return None
    widest = max(w.values.size for w, _ in layers[1:])
    if max_layer_weights is not None and widest > max_layer_weights:
        return None
    return FusedMLP(arrays, reduce_range)


# --- kernels ---
@numba.njit(cache=True, nogil=True)
def mlp_forward(obs, params, layout):
    """The whole forward. layout = (has_norm, first_relu, reduce_range, by_column, obs_dim,
    width, layers, then (in, out, relu) per int8 layer); params = shift, scale, first weight
    [obs_dim, width], its bias, every int8 layer's codes [in, out], scales, biases."""
    has_norm, relu, reduce_range = layout[0] != 0, layout[1] != 0, layout[2] != 0
    by_column = layout[3] != 0
    dim, width, layers = layout[4], layout[5], layout[6]
    shift, scale = params[:dim], params[dim : 2 * dim]
    at = 2 * dim
    w_t = params[at : at + dim * width].reshape((dim, width))
    b = params[at + dim * width : at + dim * width + width]
    at += dim * width + width
    x = (obs - shift) * scale if has_norm else obs
    x = np.dot(x, w_t)
    lo, hi = _bias_relu(x, b, relu, by_column)
    codes_at = at
    vec_at = codes_at
    for layer in range(layers):
        vec_at += layout[7 + 3 * layer] * layout[8 + 3 * layer]
    scales_at, outputs = vec_at, 0
    for layer in range(layers):
        outputs += layout[8 + 3 * layer]
    bias_at = scales_at + outputs
    for layer in range(layers):
        k, n, layer_relu = layout[7 + 3 * layer], layout[8 + 3 * layer], layout[9 + 3 * layer]
        w = params[codes_at : codes_at + k * n].reshape((k, n))
        x, lo, hi = _int8_layer(x, lo, hi, w, params[scales_at : scales_at + n],
                                params[bias_at : bias_at + n], layer_relu != 0,
                                reduce_range, by_column)  # fmt: skip
        codes_at += k * n
        scales_at += n
        bias_at += n
    return x


@numba.njit(cache=True, nogil=True)
def _bias_relu(y, b, relu, by_column):
    """y + b [then ReLU], in place; (min, max) of the result for the next layer's
    quantizer, in a pass of its own (`_min_max`)."""
    m, n = y.shape
    for i in range(m):
        for j in range(n):
            v = y[i, j] + b[j]
            y[i, j] = max(v, np.float32(0.0)) if relu else v
    return _min_max(y, by_column)


@numba.njit(cache=True, nogil=True)
def int8_linear(x, codes_t, w_scales, bias, relu, reduce_range):
    """fbgemm's dynamic int8 Linear: x float32 [m, k], codes_t float32 int8 codes [k, n]."""
    lo, hi = min_max(x)
    return _int8_layer(x, lo, hi, codes_t, w_scales, bias, relu, reduce_range, False)[0]


@numba.njit(cache=True, nogil=True)
def _int8_layer(x, lo, hi, codes_t, w_scales, bias, relu, reduce_range, by_column):
    """`int8_linear` given x's (min, max); returns (y, min(y), max(y))."""
    n = codes_t.shape[1]
    a_scale, zero_point = activation_qparams(lo, hi, reduce_range)
    # Exact: integer products, integer partial sums below 2**24 (see the module docstring).
    acc = np.dot(quantize(x, a_scale, zero_point), codes_t)
    out_scale = np.empty(n, np.float32)
    for j in range(n):  # fbgemm multiplies the two scales first, in float32
        out_scale[j] = a_scale * w_scales[j]
    if zero_point != 0:
        col_sum = np.zeros(n, np.float32)  # exact: integers below 2**24
        for p in range(codes_t.shape[0]):
            col_sum += codes_t[p]
        acc -= np.float32(zero_point) * col_sum
    m = acc.shape[0]
    for i in range(m):
        for j in range(n):
            v = np.float32(np.float64(acc[i, j]) * out_scale[j] + bias[j])  # one rounding
            acc[i, j] = max(v, np.float32(0.0)) if relu else v
    lo, hi = _min_max(acc, by_column)
    return acc, lo, hi


@numba.njit(cache=True, nogil=True)
def _min_max(x, by_column):
    """(min, max) of x for the quantizer: `min_max_by_column` or `min_max`, whichever is
    faster on this CPU (MIN_MAX_BY_COLUMN; both exact, so they agree)."""
    return min_max_by_column(x) if by_column else min_max(x)


@numba.njit(cache=True, nogil=True)
def min_max(x):
    """(min, max) of x [m, k] != empty, NaN ignored (a NaN compares false), with four
    independent running pairs over the flat array (one pair would be a chain of dependent
    compares). Order does not matter: min and max are exact."""
    flat = x.ravel()
    size = flat.size
    lo0 = lo1 = lo2 = lo3 = np.float32(np.inf)
    hi0 = hi1 = hi2 = hi3 = np.float32(-np.inf)
    full = size - size % 4
    for p in range(0, full, 4):
        v0, v1, v2, v3 = flat[p], flat[p + 1], flat[p + 2], flat[p + 3]
        lo0, hi0 = (v0 if v0 < lo0 else lo0), (v0 if v0 > hi0 else hi0)
        lo1, hi1 = (v1 if v1 < lo1 else lo1), (v1 if v1 > hi1 else hi1)
        lo2, hi2 = (v2 if v2 < lo2 else lo2), (v2 if v2 > hi2 else hi2)
        lo3, hi3 = (v3 if v3 < lo3 else lo3), (v3 if v3 > hi3 else hi3)
    for p in range(full, size):
        v = flat[p]
        lo0, hi0 = (v if v < lo0 else lo0), (v if v > hi0 else hi0)
    return min(min(lo0, lo1), min(lo2, lo3)), max(max(hi0, hi1), max(hi2, hi3))


@numba.njit(cache=True, nogil=True)
def min_max_by_column(x):
    """`min_max` with per-column running extremes: the row loop is elementwise over
    columns, so it vectorises (16 lanes with AVX-512)."""
    m, k = x.shape
    lo, hi = np.full(k, np.inf, np.float32), np.full(k, -np.inf, np.float32)
    for i in range(m):
        for j in range(k):
            v = x[i, j]
            lo[j] = v if v < lo[j] else lo[j]
            hi[j] = v if v > hi[j] else hi[j]
    a, b = lo[0], hi[0]
    for j in range(1, k):
        a = lo[j] if lo[j] < a else a
        b = hi[j] if hi[j] > b else b
    return a, b


# torch's ChooseQuantizationParams, compiled from the one plain function (actorq.quant.fbgemm).
activation_qparams = numba.njit(cache=True, nogil=True)(fbgemm.activation_qparams)

_ROUNDER = np.float32(1.5 * 2**23)  # t + this - this rounds t in [0, 2**22) to even


@numba.njit(cache=True, nogil=True)
def quantize(x, scale, zero_point):
    """uint8 codes (as float32) of fbgemm's QuantizeAvx2: fma(x, 1 / scale, zero_point),
    clamped to [0, 255] (integers, so clamping first rounds the same), nearest even."""
    inv = np.float32(1.0) / scale
    q = np.empty_like(x)
    flat_x, flat_q = x.ravel(), q.ravel()
    for p in range(flat_x.size):
        if zero_point == 0:
            t = flat_x[p] * inv
        else:  # the exact product plus zero point, rounded once as an fma does
            t = np.float32(np.float64(flat_x[p]) * np.float64(inv) + zero_point)
        t = min(max(t, np.float32(0.0)), np.float32(255.0))
        flat_q[p] = (t + _ROUNDER) - _ROUNDER
    return q


def warm_up() -> None:
    """Load (or compile) the kernels: one signature serves every net (flat arrays)."""
    layout = np.array([1, 1, 1, MIN_MAX_BY_COLUMN, 2, 3, 1, 3, 2, 0], np.int64)
    params = np.ones(2 * 2 + 2 * 3 + 3 + 3 * 2 + 2 + 2, np.float32)
    mlp_forward(np.zeros((1, 2), np.float32), params, layout)
