"""CNN policies: the actor's module built from decoded arrays (ModelSpec kind "cnn" <->
CNNSpec is in actorq.quant.spec; conv weights per output channel in actorq.quant.tensors).

Actor module per precision (all built straight from the blob's tensors):
- INT8 / INT4: the convs are one `Int8ConvStack` (fbgemm static int8 conv + ReLU,
  per-output-channel codes from the blob, activation scales from the blob's `act_max`;
  int4 codes in [-7, 7] run in the same kernels) and every Linear of the head an
  `Int8Linear`. The observation is not kept in fp32 here, unlike the MLP's first layer:
  uint8 pixels are exact quint8 codes.
- FP16 / FP32: fp32 convs and Linears over the (widened) weights.
Input: uint8 (or float) [B, C, H, W]; the module multiplies by the spec's input_scale.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from actorq.models.cnn import ACT_MAX, CNNSpec
from actorq.quant.arrays import PolicyArrays
from actorq.quant.conv import make_int8_conv_stack
from actorq.quant.int8 import DequantizedLinear, make_int8_linear
from actorq.v1 import policy_pb2


class ScaleInput(nn.Module):
    def __init__(self, scale: float) -> None:
        super().__init__()
        self.scale = scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.float() * self.scale if self.scale != 1.0 else x.float()


class FloatConv(nn.Module):
    def __init__(self, weight: torch.Tensor, bias: torch.Tensor, stride: int) -> None:
        super().__init__()
        self.register_buffer("weight", weight)
        self.register_buffer("bias", bias)
        self.stride = stride

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.conv2d(x, self.weight, self.bias, self.stride).relu_()


class Flatten(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.flatten(1)


def cnn_layers(arrays: PolicyArrays, spec: CNNSpec) -> list[nn.Module]:
    """The actor's layers for a decoded cnn policy, at the blob's precision."""
    tensors = arrays.tensors
    quantized = arrays.precision in (policy_pb2.PRECISION_INT8, policy_pb2.PRECISION_INT4)

    def float32(name: str) -> torch.Tensor:
        return torch.from_numpy(arrays.float32(name))

    convs = [
        (f"convs.{2 * i}.weight", float32(f"convs.{2 * i}.bias"), stride)
        for i, (_out, _k, stride) in enumerate(spec.convs)
    ]
    layers: list[nn.Module] = []
    if quantized:
        codes = [(*_codes(tensors[w].values, tensors[w].scales), b, s) for w, b, s in convs]
        layers.append(make_int8_conv_stack(codes, float32(ACT_MAX), spec.input_scale))
    else:
        layers.append(ScaleInput(spec.input_scale))
        layers += [FloatConv(float32(w), b, s) for w, b, s in convs]
    layers.append(Flatten())
    count = len(spec.hidden) + 1
    for j in range(count):
        w, bias, relu = f"head.{2 * j}.weight", float32(f"head.{2 * j}.bias"), j < count - 1
        if quantized:
            q, scales = _codes(tensors[w].values, tensors[w].scales)
            layers.append(make_int8_linear(q, scales, bias, relu=relu))
        else:
            layers.append(DequantizedLinear(float32(w), bias, relu))
    return layers


def _codes(values: np.ndarray, scales: np.ndarray | None) -> tuple[torch.Tensor, torch.Tensor]:
    if scales is None:
        raise ValueError("an int8/int4 cnn layer needs codes and scales")
    return torch.from_numpy(values), torch.from_numpy(scales)
