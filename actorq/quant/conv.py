"""int8 convolution for CNN policies on actors, and the conv side of the policy blob.

`make_int8_conv_stack` is the one doorway into fbgemm's static quantized convolution
(`quantized::conv2d_relu`): int8 weights with one symmetric scale per output channel
(the blob's codes, pre-packed once); activations stay quint8 from the observation to the
last conv, each with scale act_max[i] / 127 (the learner's running range estimates,
CNNSpec `act_max`), and are dequantized once before the head.
7-bit activations, as torch's reduce_range: without VNNI fbgemm sums pairs of uint8 x int8
products in int16, which saturates with 8-bit activations (errors of 30-77 output steps on
5-7% of outputs). `quantized::conv2d_dynamic` is not used: it clips outputs at a range tied
to the input's and clamps negatives; unfold + int8 Linear was 2-5x slower than fp32 conv.

A conv weight [out, in, k, k] travels as a Linear weight with a 4-D shape: codes of the
row-major [out, in * k * k] matrix per output channel (docs/BLOB_FORMAT.md).
"""

from __future__ import annotations

import contextlib
import math
import os

import torch
from torch import nn

from actorq.quant.int8 import _SKIP_TORCH_FUNCTION, quiet_deprecation

MIN_ACT_MAX = 1e-3
"""Floor of a layer's activation range (an untrained layer's estimate may be 0)."""

CONV_ENGINE_ENV = "ACTORQ_INT8_CONV_ENGINE"
DEFAULT_CONV_ENGINE = "x86"
"""torch's quantized engine the int8 convs are packed under (`ACTORQ_INT8_CONV_ENGINE`
overrides it). A packed conv keeps its engine's kernel whatever the global engine is
later, so the convs and the int8 Linear head (always packed under the global engine,
fbgemm/x86) can each use the faster kernel; BENCHMARKS.md 15c compares them."""


class Int8ConvStack(nn.Module):
    """ReLU(conv) x N in int8: float or uint8 obs [B, C, H, W] -> float32 [B, C', H', W']."""

    def __init__(self, packed: list, scales: list[float], input_scale: float, engine: str) -> None:
        super().__init__()
        self._packed = packed
        self.in_scale, self.out_scales = scales[0], scales[1:]
        self.input_scale = input_scale
        self.engine = engine
        overload = torch.ops.quantized.conv2d_relu.new  # the packed-weights overload
        self._op = getattr(overload, "_op", overload)  # see actorq.quant.int8._direct_overload

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        with quiet_deprecation():
            real = obs.float() * self.input_scale if self.input_scale != 1.0 else obs.float()
            x = torch.quantize_per_tensor(real, self.in_scale, 0, torch.quint8)
            with _SKIP_TORCH_FUNCTION():
                for packed, scale in zip(self._packed, self.out_scales, strict=True):
                    x = self._op(x, packed, scale, 0)
            return x.dequantize()

    def extra_repr(self) -> str:
        return f"convs={len(self._packed)}, input_scale={self.input_scale}, engine={self.engine}"


def make_int8_conv_stack(
    layers: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor | None, int]],
    act_max: torch.Tensor,
    input_scale: float,
    engine: str | None = None,
) -> Int8ConvStack:
    """Conv + ReLU layers from per-output-channel int8 codes. `layers`: (q_weight [out, in,
    k, k], scales [out], bias or None, stride) per conv; `act_max` [1 + len(layers)]: the
    scaled input's range, then each layer's output range."""
    if act_max.shape != (1 + len(layers),):
        raise ValueError(f"need {1 + len(layers)} act_max values, got shape {tuple(act_max.shape)}")
    if not (input_scale > 0 and math.isfinite(input_scale)):
        raise ValueError(f"input_scale must be finite and > 0, got {input_scale}")
    engine = engine or conv_engine()
    with _quantized_engine(engine):
        packed = [_pack(*layer) for layer in layers]
    scales = [max(float(m), MIN_ACT_MAX) / 127.0 for m in act_max]
    return Int8ConvStack(packed, scales, input_scale, engine)


def conv_engine() -> str:
    """The engine named by ACTORQ_INT8_CONV_ENGINE, else DEFAULT_CONV_ENGINE."""
    engine = os.environ.get(CONV_ENGINE_ENV, "").strip() or DEFAULT_CONV_ENGINE
    supported = [e for e in torch.backends.quantized.supported_engines if e != "none"]
    if engine not in supported:
        raise ValueError(f"{CONV_ENGINE_ENV}={engine!r}: this torch supports {supported}")
    return engine


@contextlib.contextmanager
def _quantized_engine(engine: str):
    """Pack under `engine`, then give the process its own engine back."""
    previous = torch.backends.quantized.engine
    torch.backends.quantized.engine = engine
    try:
        yield
    finally:
        torch.backends.quantized.engine = previous


def _pack(q_weight: torch.Tensor, scales: torch.Tensor, bias: torch.Tensor | None, stride: int):
    if (
        q_weight.dtype != torch.int8
        or q_weight.dim() != 4
        or q_weight.shape[2] != q_weight.shape[3]
    ):
        raise ValueError(
            f"q_weight must be int8 [out, in, k, k], got {q_weight.dtype} {tuple(q_weight.shape)}"
        )
    out = q_weight.shape[0]
    if scales.shape != (out,) or not bool(torch.isfinite(scales).all() and (scales > 0).all()):
        raise ValueError(f"need {out} finite scales > 0, got shape {tuple(scales.shape)}")
    if bias is not None and bias.shape != (out,):
        raise ValueError(f"bias must have shape ({out},), got {tuple(bias.shape)}")
    if stride < 1:
        raise ValueError(f"stride must be >= 1, got {stride}")
    with quiet_deprecation():
        qweight = torch._make_per_channel_quantized_tensor(
            q_weight.contiguous(), scales.to(torch.float64), torch.zeros(out, dtype=torch.int64), 0
        )
        return torch.ops.quantized.conv2d_prepack(
            qweight, None if bias is None else bias.float(), [stride, stride], [0, 0], [1, 1], 1
        )
