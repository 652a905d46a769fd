"""An MLP policy's forward in numpy: the actor's path where numba is not installed, and the
reason such an actor never imports torch (start-up and memory, BENCHMARKS.md 24c).

It computes what `build_policy_module` builds, layer by layer:
- input norm, then float layers (fp32/fp16 policies, an int8 policy's first layer over its
  dequantized codes, a guard's fallback layer) in float32 numpy, as `InputNorm`,
  `DequantizedLinear` and `nn.Linear` do (another BLAS, so an ulp or so apart);
- every int8 layer after the first as fbgemm's `quantized::linear_dynamic` computes it
  (actorq.quant.fbgemm): the input quantized per tensor to uint8, exact integer products
  with the per-channel codes, requantized once in float64 -> float32: bit for bit
  `Int8Linear`'s output, as the compiled forward (actorq.quant.fused_mlp) is
  (tests/unit/test_numpy_mlp.py pins all three);
- tanh on a deterministic actor's outputs.
CNN policies, nets with a layer over `NUMPY_MAX_LAYER_WEIGHTS` (torch is faster there) and
int8 layers under other engines than fbgemm's (an ARM CPU's qnnpack) keep the torch module
(`numpy_mlp` returns None).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from actorq.models.specs import INPUT_SCALE, INPUT_SHIFT, MLPSpec
from actorq.quant import fbgemm
from actorq.quant.arrays import PolicyArrays
from actorq.quant.fbgemm import FBGEMM_ENGINES, REDUCE_RANGE_ENGINES, activation_qparams
from actorq.quant.tensors import TensorArrays

Layer = Callable[[np.ndarray], np.ndarray]

# numpy pays ~1 us of call overhead per op: at 64 wide it runs an fp32 MLP in 0.4-0.8x
# torch's time and an int8 one in ~2.4x (fbgemm's kernels), but at 256 wide int8 takes
# 2.7-3.9x and fp32 up to 2x at batch 128 (BENCHMARKS.md 24c). Larger nets keep torch.
NUMPY_MAX_LAYER_WEIGHTS = 64 * 128


class NumpyMLP:
    """float32 obs [B, obs_dim] -> float32 outputs [B, num_outputs], `build_policy_module`'s
    arithmetic in numpy (see the module docstring)."""

    def __init__(self, arrays: PolicyArrays, reduce_range: bool) -> None:
        spec = arrays.spec
        self.layers: list[Layer] = []
        if spec.input_norm:
            self.layers.append(_InputNorm(arrays.float32(INPUT_SHIFT), arrays.float32(INPUT_SCALE)))
        tensors = arrays.linear_layers()
        for i, (weight, bias) in enumerate(tensors):
            relu = i < len(tensors) - 1
            if weight.scales is not None and i > 0:
                # Its input is the previous hidden layer's output, after ReLU.
                self.layers.append(_Int8Layer(weight, bias, relu, reduce_range, relu_input=True))
            else:  # float codes, or the first layer's dequantized ones (policy_module)
                self.layers.append(_FloatLayer(weight, bias, relu))
        self.tanh = spec.output_activation == "tanh"
        self.num_outputs = spec.num_outputs

    def __call__(self, obs: np.ndarray) -> np.ndarray:
        x = np.asarray(obs, np.float32)
        for layer in self.layers:
            x = layer(x)
        return np.tanh(x, out=x) if self.tanh else x


def numpy_runs(
    arrays: PolicyArrays,
    engine: str | None = None,
    max_layer_weights: int | None = NUMPY_MAX_LAYER_WEIGHTS,
) -> bool:
    """Whether `numpy_mlp` builds a forward for these arrays: an MLP policy no layer of
    which exceeds `max_layer_weights`, and int8 layers (if any) under fbgemm's engines."""
    if not isinstance(arrays.spec, MLPSpec):
        return False
    layers = arrays.linear_layers()
    widest = max(w.values.size for w, _ in layers)
    if max_layer_weights is not None and widest > max_layer_weights:
        return False
    engine = engine or fbgemm.quantized_engine()
    int8 = any(w.scales is not None for w, _ in layers[1:])
    return not int8 or engine in FBGEMM_ENGINES


def numpy_mlp(
    arrays: PolicyArrays,
    engine: str | None = None,
    max_layer_weights: int | None = NUMPY_MAX_LAYER_WEIGHTS,
) -> NumpyMLP | None:
    """A `NumpyMLP` equal to `build_policy_module(arrays)`, or None (keep the torch module)
    where `numpy_runs` says no."""
    engine = engine or fbgemm.quantized_engine()
    if not numpy_runs(arrays, engine, max_layer_weights):
        return None
    return NumpyMLP(arrays, engine in REDUCE_RANGE_ENGINES)


class _InputNorm:
    def __init__(self, shift: np.ndarray, scale: np.ndarray) -> None:
        self.shift, self.scale = shift, scale

    def __call__(self, x: np.ndarray) -> np.ndarray:
        return (x - self.shift) * self.scale


class _FloatLayer:
    """x @ W.T + b [then ReLU] in float32."""

    def __init__(self, weight: TensorArrays, bias: TensorArrays, relu: bool) -> None:
        self.weight_t = np.ascontiguousarray(weight.to_float32().T)  # [in, out]
        self.bias, self.relu = bias.to_float32(), relu

    def __call__(self, x: np.ndarray) -> np.ndarray:
        y = x @ self.weight_t
        y += self.bias
        return np.maximum(y, 0.0, out=y) if self.relu else y


class _Int8Layer:
    """fbgemm's dynamic int8 Linear over a layer's codes (see actorq.quant.fbgemm)."""

    def __init__(
        self,
        weight: TensorArrays,
        bias: TensorArrays,
        relu: bool,
        reduce_range: bool,
        relu_input: bool = False,
    ) -> None:
        codes = weight.values  # int8 [out, in]
        # Integer sums are exact in float32 below 2**24 (any order, so BLAS may reorder);
        # above, float64 holds them (int8 layers stay far below 2**53).
        exact32 = fbgemm.widest_integer_sum(codes, reduce_range) < fbgemm.EXACT_LIMIT
        self.dtype = np.float32 if exact32 else np.float64
        self.codes_t = np.ascontiguousarray(codes.T, self.dtype)  # [in, out]
        self.col_sum = self.codes_t.sum(axis=0)  # exact: integers
        assert weight.scales is not None
        self.w_scales = np.asarray(weight.scales, np.float32)
        self.bias64 = bias.to_float32().astype(np.float64)
        self.relu, self.reduce_range, self.relu_input = relu, reduce_range, relu_input

    def __call__(self, x: np.ndarray) -> np.ndarray:
        # After a ReLU (every int8 layer's input in a policy) min(x) >= 0, and the
        # quantizer takes min(min(x), 0) = 0: one reduction, zero point 0, no lower clamp.
        hi = x.max()
        lo = np.float32(0.0) if self.relu_input else x.min()
        if lo != lo or hi != hi:  # NaN: fbgemm's min/max skip it (a NaN compares false)
            lo, hi = np.nanmin(x), np.nanmax(x)
            lo = min(lo, np.float32(0.0)) if self.relu_input else lo
        a_scale, zero_point = activation_qparams(lo, hi, self.reduce_range)
        acc = _quantize(x, a_scale, zero_point, self.relu_input).astype(self.dtype) @ self.codes_t
        if zero_point != 0:
            acc -= self.dtype(zero_point) * self.col_sum
        # fbgemm multiplies the two scales in float32, then requantizes once (float64).
        y = np.multiply(acc, (a_scale * self.w_scales).astype(np.float64), dtype=np.float64)
        y += self.bias64
        out = y.astype(np.float32)
        return np.maximum(out, 0.0, out=out) if self.relu else out


def _quantize(x: np.ndarray, scale: np.float32, zero_point: int, nonnegative: bool) -> np.ndarray:
    """uint8 codes (as float32) of fbgemm's QuantizeAvx2: fma(x, 1 / scale, zero_point),
    clamped to [0, 255], rounded to nearest even."""
    inv = np.float32(1.0) / scale
    if zero_point == 0:
        t = x * inv
    else:  # the exact product plus zero point, rounded once as an fma does
        t = (x.astype(np.float64) * np.float64(inv) + zero_point).astype(np.float32)
    if zero_point != 0 or not nonnegative:  # x >= 0 with zero point 0: no lower clamp
        np.maximum(t, 0.0, out=t)
    np.minimum(t, 255.0, out=t)
    return np.rint(t, out=t)
