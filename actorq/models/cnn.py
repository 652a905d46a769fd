"""CNN policies for pixel observations: the MinAtar-sized CNN and the Nature (DQN) CNN.

A `CNNSpec` travels inside the policy blob (ModelSpec kind "cnn"), like `MLPSpec`, so an
actor rebuilds the network from the blob alone. Observations are uint8 [C, H, W]; the
network multiplies them by `input_scale` (1/255 for Atari frames), runs the conv layers
(each followed by ReLU, no padding), flattens and runs the Linear head.

State-dict names: `convs.{2i}.weight|bias` ([out, in, k, k]), `head.{2j}.weight|bias`,
and `act_max` [1 + number of convs]: a running estimate (EMA of batch maxima, updated by
every training-mode forward on the learner) of the scaled input's range and of each
conv's post-ReLU output range. It travels
in the blob as fp32 and gives int8 actors their activation scales (static quantization:
actorq.quant.conv), the way BatchNorm's running statistics travel with a checkpoint.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

ConvLayer = tuple[int, int, int]  # (out_channels, kernel, stride)

MINATAR_CONVS: tuple[ConvLayer, ...] = ((16, 3, 1),)
"""Young & Tian 2019 (MinAtar): one 3x3 conv of 16 channels, then 128 units."""
MINATAR_HIDDEN = (128,)
NATURE_CONVS: tuple[ConvLayer, ...] = ((32, 8, 4), (64, 4, 2), (64, 3, 1))
"""Mnih et al. 2015: 32 8x8/4, 64 4x4/2, 64 3x3/1, then 512 units."""
NATURE_HIDDEN = (512,)
ACT_MAX = "act_max"
ACT_MAX_MOMENTUM = 0.01
"""EMA weight of each new batch maximum (torch's MovingAverageMinMaxObserver default)."""


@dataclass(frozen=True)
class CNNSpec:
    obs_shape: tuple[int, int, int]
    num_outputs: int
    convs: tuple[ConvLayer, ...] = MINATAR_CONVS
    hidden: tuple[int, ...] = MINATAR_HIDDEN
    input_scale: float = 1.0
    activation: str = "relu"
    output_activation: str = "none"
    input_norm: bool = False  # MLPSpec's field; pixels are scaled, never normalised

    def __post_init__(self) -> None:
        if len(self.obs_shape) != 3 or min(self.obs_shape) < 1:
            raise ValueError(f"CNNSpec obs_shape must be [C, H, W] >= 1, got {self.obs_shape}")
        if self.num_outputs < 1 or not self.convs or any(h < 1 for h in self.hidden):
            raise ValueError(
                f"CNNSpec needs num_outputs >= 1, >= 1 conv and hidden widths >= 1, got "
                f"{self.num_outputs}, {self.convs}, {self.hidden}"
            )
        if any(min(layer) < 1 for layer in self.convs):
            raise ValueError(f"conv layers must be (out, kernel, stride) >= 1, got {self.convs}")
        if not (self.input_scale > 0 and math.isfinite(self.input_scale)):
            raise ValueError(f"input_scale must be finite and > 0, got {self.input_scale}")
        # The blob stores it as float32: round here so a decoded spec equals this one.
        object.__setattr__(self, "input_scale", float(np.float32(self.input_scale)))
        if self.activation != "relu" or self.output_activation != "none" or self.input_norm:
            raise ValueError("CNNSpec supports relu, no output activation, no input_norm")
        self.conv_output_shape()  # raises when the image is too small for the convs

    @property
    def obs_dim(self) -> int:
        return math.prod(self.obs_shape)

    def conv_output_shape(self) -> tuple[int, int, int]:
        c, h, w = self.obs_shape
        for out, k, s in self.convs:
            h, w, c = (h - k) // s + 1, (w - k) // s + 1, out
            if h < 1 or w < 1:
                raise ValueError(f"obs {self.obs_shape} is too small for conv layers {self.convs}")
        return c, h, w

    def weight_shapes(self) -> dict[str, tuple[int, ...]]:
        shapes: dict[str, tuple[int, ...]] = {}
        channels = self.obs_shape[0]
        for i, (out, k, _s) in enumerate(self.convs):
            shapes[f"convs.{2 * i}.weight"] = (out, channels, k, k)
            shapes[f"convs.{2 * i}.bias"] = (out,)
            channels = out
        widths = (math.prod(self.conv_output_shape()), *self.hidden, self.num_outputs)
        for j, (fan_in, fan_out) in enumerate(itertools.pairwise(widths)):
            shapes[f"head.{2 * j}.weight"] = (fan_out, fan_in)
            shapes[f"head.{2 * j}.bias"] = (fan_out,)
        shapes[ACT_MAX] = (1 + len(self.convs),)
        return shapes

    def fp32_bytes(self) -> int:
        return 4 * sum(math.prod(s) for s in self.weight_shapes().values())


def cnn_spec_for(obs_shape: tuple[int, ...], num_outputs: int) -> CNNSpec:
    """The zoo's CNN for an observation shape: MinAtar-sized for small grids, Nature-CNN
    (inputs / 255) for 84x84 Atari frames."""
    shape = (int(obs_shape[0]), int(obs_shape[1]), int(obs_shape[2]))
    if min(shape[1:]) >= 36:
        return CNNSpec(shape, num_outputs, NATURE_CONVS, NATURE_HIDDEN, input_scale=1 / 255)
    return CNNSpec(shape, num_outputs, MINATAR_CONVS, MINATAR_HIDDEN, input_scale=1.0)


class CNNNetwork(nn.Module):
    """fp32 CNN: uint8 or float obs [B, C, H, W] -> [B, num_outputs]."""

    def __init__(self, spec: CNNSpec) -> None:
        super().__init__()
        self.spec = spec
        convs: list[nn.Module] = []
        channels = spec.obs_shape[0]
        for out, k, s in spec.convs:
            convs += [nn.Conv2d(channels, out, k, s), nn.ReLU()]
            channels = out
        self.convs = nn.Sequential(*convs)
        widths = (math.prod(spec.conv_output_shape()), *spec.hidden, spec.num_outputs)
        head: list[nn.Module] = []
        for j, (fan_in, fan_out) in enumerate(itertools.pairwise(widths)):
            head.append(nn.Linear(fan_in, fan_out))
            if j < len(widths) - 2:
                head.append(nn.ReLU())
        self.head = nn.Sequential(*head)
        self.register_buffer(ACT_MAX, torch.zeros(1 + len(spec.convs)))

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        x = obs.float() * self.spec.input_scale
        if not self.training:
            return self.head(self.convs(x).flatten(1))
        self._observe(0, x)
        for i, layer in enumerate(self.convs):
            x = layer(x)
            if i % 2 == 1:  # after each ReLU
                self._observe(1 + i // 2, x)
        return self.head(x.flatten(1))

    @torch.no_grad()
    def _observe(self, index: int, activations: torch.Tensor) -> None:
        batch_max = activations.detach().max()
        current = self.act_max[index]
        if current <= 0:
            self.act_max[index] = batch_max
        else:
            self.act_max[index] = torch.lerp(current, batch_max, ACT_MAX_MOMENTUM)


def build_network(spec) -> nn.Module:
    """The fp32 network of a spec: `CNNNetwork` for a CNNSpec, `QNetwork` for an MLPSpec."""
    if isinstance(spec, CNNSpec):
        return CNNNetwork(spec)
    from actorq.models.mlp import QNetwork

    return QNetwork(spec)
