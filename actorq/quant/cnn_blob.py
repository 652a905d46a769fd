"""CNN policies: the actor's module built from decoded arrays.

- INT8 / INT4: the convs are one `Int8ConvStack` (actorq.quant.conv) and every head
  Linear an `Int8Linear`; unlike the MLP's first layer the observation is not kept in
  fp32: uint8 pixels are exact quint8 codes.
- FP16 / FP32: fp32 convs and Linears.
Precision is read per tensor: the quantizer's guard may store some layers in fp16/fp32
(encode_policy(fallback_layers=...)); a float conv splits the int8 convs around it into
separate stacks. Input: uint8 (or float) [B, C, H, W], times the spec's input_scale.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from actorq.models.cnn import ACT_MAX, CNNSpec
from actorq.quant.arrays import PolicyArrays
from actorq.quant.conv import make_int8_conv_stack
from actorq.quant.int8 import dequantized_layer, int8_layer


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
    """The actor's layers for a decoded cnn policy, each layer at its tensor's precision."""
    layers = _conv_layers(arrays, spec)
    layers.append(Flatten())
    count = len(spec.hidden) + 1
    for j in range(count):
        weight, relu = arrays.tensors[f"head.{2 * j}.weight"], j < count - 1
        bias = arrays.tensors[f"head.{2 * j}.bias"]
        make = int8_layer if weight.scales is not None else dequantized_layer  # codes or floats
        layers.append(make(weight, bias, relu))
    return layers


def _conv_layers(arrays: PolicyArrays, spec: CNNSpec) -> list[nn.Module]:
    """Each run of consecutive int8 convs is one `Int8ConvStack` (activations stay quint8
    inside it); a float conv is an fp32 conv + ReLU. An all-float policy is ScaleInput
    then fp32 convs, an all-int8 one a single stack, as before fallbacks existed."""
    act_max = torch.from_numpy(arrays.float32(ACT_MAX))
    layers: list[nn.Module] = []
    run: list[tuple] = []  # (codes, scales, bias, stride) of the current int8 run
    for i, (_out, _k, stride) in enumerate(spec.convs):
        weight = arrays.tensors[f"convs.{2 * i}.weight"]
        bias = torch.from_numpy(arrays.float32(f"convs.{2 * i}.bias"))
        if weight.scales is not None:
            run.append((*_codes(weight.values, weight.scales), bias, stride))
            continue
        if run:
            layers.append(_int8_run(run, i - len(run), act_max, spec.input_scale))
            run = []
        if i == 0:
            layers.append(ScaleInput(spec.input_scale))
        layers.append(FloatConv(torch.from_numpy(weight.to_float32()), bias, stride))
    if run:
        layers.append(_int8_run(run, len(spec.convs) - len(run), act_max, spec.input_scale))
    return layers


def _int8_run(run: list[tuple], first: int, act_max: torch.Tensor, input_scale: float):
    """convs first..first + len(run) - 1 in int8: their input range is act_max[first] (the
    scaled observation's, or the float conv's output before them), then their own."""
    scale = input_scale if first == 0 else 1.0  # a later run's input is already scaled
    return make_int8_conv_stack(run, act_max[first : first + len(run) + 1], scale)


def _codes(values: np.ndarray, scales: np.ndarray | None) -> tuple[torch.Tensor, torch.Tensor]:
    if scales is None:
        raise ValueError("an int8/int4 cnn layer needs codes and scales")
    return torch.from_numpy(values), torch.from_numpy(scales)
