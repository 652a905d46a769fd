"""int8 Linear layers for actor inference, built straight from a blob's int8 codes.

`make_int8_linear` is the project's one doorway into `torch.ao` quantized kernels
(deprecated upstream, so their warnings are silenced here and nowhere else). Inputs stay
float32: each call quantizes the activations per tensor on the fly (dynamic
quantization), runs an int8 GEMM against the pre-packed weights and returns float32.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

import torch
from torch import nn

if TYPE_CHECKING:
    from actorq.quant.tensors import TensorArrays

from actorq.quant.fbgemm import REDUCE_RANGE_ENGINES

# Passing the packed weights (a ScriptObject) to an op makes torch probe the object for
# `__torch_function__`; the failed lookup throws and catches a C++ exception, ~30 us per
# call, which is more than a whole 512x512 int8 GEMM at batch 1. Turning off subclass
# torch-function dispatch skips the probe; the inputs are plain tensors, so nothing else
# changes. (The same context is what Tensor.__torch_function__ uses internally.)
_SKIP_TORCH_FUNCTION = torch._C.DisableTorchFunctionSubclass


@contextlib.contextmanager
def quiet_deprecation() -> Iterator[None]:
    """torch marks quantized tensor creation as deprecated: silenced around the project's
    int8 kernels (here and in actorq.quant.conv) and nowhere else."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*deprecat")
        yield


def _direct_overload(packet: torch._ops.OpOverloadPacket) -> Callable[..., torch.Tensor]:
    """The op's C++ entry point, skipping OpOverload.__call__'s ~5 us scan for fake script
    objects (a torch.export concern); the public overload if torch moves it."""
    overload = packet.default
    return getattr(overload, "_op", overload)


class Int8Linear(nn.Module):
    """y = x @ (scales * q).T + bias [then ReLU], x float32, q pre-packed int8; the op is
    called directly (torch.ao's module costs more than the GEMM at small batches)."""

    def __init__(
        self, packed: torch.ScriptObject, in_features: int, out_features: int, relu: bool
    ) -> None:
        super().__init__()
        self.in_features = in_features
        self.out_features = out_features
        self.relu = relu
        self.engine = torch.backends.quantized.engine
        # Packed weights are laid out for the engine current at build time.
        self.reduce_range = self.engine in REDUCE_RANGE_ENGINES
        self._packed = packed
        ops = torch.ops.quantized
        self._op = _direct_overload(ops.linear_relu_dynamic if relu else ops.linear_dynamic)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with _SKIP_TORCH_FUNCTION():
            return self._op(x, self._packed, self.reduce_range)

    def unpack(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """(int8 codes, float64 per-channel scales, bias) held by the packed weights."""
        qweight, bias = torch.ops.quantized.linear_unpack(self._packed)
        return qweight.int_repr(), qweight.q_per_channel_scales(), bias

    def extra_repr(self) -> str:
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, "
            f"relu={self.relu}, engine={self.engine}, reduce_range={self.reduce_range}"
        )


def make_int8_linear(
    q_weight: torch.Tensor,
    scales: torch.Tensor,
    bias: torch.Tensor | None,
    *,
    relu: bool = False,
) -> Int8Linear:
    """Int8 Linear, W = scales[:, None] * q_weight (int8 [out, in]); `relu` fuses a ReLU."""
    _check_int8_args(q_weight, scales, bias)
    out_features, in_features = q_weight.shape
    with quiet_deprecation():
        from torch.ao.nn.quantized.dynamic import Linear as DynamicQuantizedLinear

        qweight = torch._make_per_channel_quantized_tensor(
            q_weight.contiguous(),
            scales.to(torch.float64),
            torch.zeros(out_features, dtype=torch.int64),
            0,
        )
        reference = DynamicQuantizedLinear(
            in_features, out_features, bias_=bias is not None, dtype=torch.qint8
        )
        reference.set_weight_bias(qweight, None if bias is None else bias.to(torch.float32))
    packed = reference._packed_params._packed_params
    return Int8Linear(packed, in_features, out_features, relu)


def _check_int8_args(
    q_weight: torch.Tensor, scales: torch.Tensor, bias: torch.Tensor | None
) -> None:
    if q_weight.dtype != torch.int8 or q_weight.dim() != 2:
        raise ValueError(
            f"q_weight must be a 2-D int8 tensor, got {q_weight.dtype} {tuple(q_weight.shape)}"
        )
    out_features = q_weight.shape[0]
    if scales.shape != (out_features,):
        raise ValueError(f"need {out_features} scales, got shape {tuple(scales.shape)}")
    if not bool(torch.isfinite(scales).all() and (scales > 0).all()):
        raise ValueError("scales must be finite and > 0")
    if bias is not None and bias.shape != (out_features,):
        raise ValueError(f"bias must have shape ({out_features},), got {tuple(bias.shape)}")


class DequantizedLinear(nn.Module):
    """y = x @ W.T + b [then ReLU] in fp32, W dequantized from int8/int4 codes; one addmm
    (+ in-place ReLU), cheaper to call than nn.Linear + nn.ReLU at small batches."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor, relu: bool) -> None:
        super().__init__()
        self.register_buffer("weight_t", weight.t().contiguous())
        self.register_buffer("bias", bias)
        self.relu = relu

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.addmm(self.bias, x, self.weight_t)
        return y.relu_() if self.relu else y


def int8_layer(weight: TensorArrays, bias: TensorArrays, relu: bool) -> nn.Module:
    """The int8 kernel for one decoded int8/int4 weight (codes + scales) and fp32 bias."""
    if weight.scales is None:
        raise ValueError("int8_layer needs a quantized weight (codes and scales)")
    return make_int8_linear(
        torch.from_numpy(weight.values),
        torch.from_numpy(weight.scales),
        torch.from_numpy(bias.to_float32()),
        relu=relu,
    )


def dequantized_layer(weight: TensorArrays, bias: TensorArrays, relu: bool) -> DequantizedLinear:
    """An fp32 layer over a decoded weight's dequantized values (or its float ones)."""
    return DequantizedLinear(
        torch.from_numpy(weight.to_float32()), torch.from_numpy(bias.to_float32()), relu
    )
