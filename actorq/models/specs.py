"""The shapes of the policy networks, without torch: `MLPSpec` and `CNNSpec`.

A spec travels inside every policy blob (as `actorq.v1.ModelSpec`), so an actor rebuilds
the network from a blob alone. Decoding a blob needs only these shapes and numpy, so an
actor that acts through numpy (actorq.quant.numpy_mlp) never imports torch; the networks
themselves are in actorq.models.mlp and actorq.models.cnn.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np

OUTPUT_ACTIVATIONS = ("none", "tanh")
INPUT_SHIFT = "input_norm.shift"
INPUT_SCALE = "input_norm.scale"


@dataclass(frozen=True)
class MLPSpec:
    """Shape of an MLP: obs_dim -> hidden[0] -> ... -> hidden[-1] -> num_outputs.

    `output_activation` is "none" for Q-networks and critics, "tanh" for deterministic
    actors whose outputs are actions in [-1, 1].

    `input_norm`: the network expects normalised observations; the policy then carries two
    fp32 vectors, `input_norm.shift` and `input_norm.scale` [obs_dim], and its first layer
    takes (obs - shift) * scale. Kept apart from the weights (never folded into layer 0)
    so that quantization sees well-scaled weights and activations: folding 1/std into
    the weights lets a few tiny-std features dominate each row's int8 scale, and raw
    observations on mixed scales lose their small features to the per-tensor int8
    activation scale.
    """

    obs_dim: int
    num_outputs: int
    hidden: tuple[int, ...] = (256, 256)
    activation: str = "relu"
    output_activation: str = "none"
    input_norm: bool = False

    def __post_init__(self) -> None:
        if self.obs_dim < 1 or self.num_outputs < 1:
            raise ValueError(
                f"MLPSpec needs obs_dim >= 1 and num_outputs >= 1, got "
                f"obs_dim={self.obs_dim}, num_outputs={self.num_outputs}"
            )
        if any(h < 1 for h in self.hidden):
            raise ValueError(f"hidden widths must be >= 1, got {self.hidden}")
        if self.activation != "relu":
            raise ValueError(f"unsupported activation {self.activation!r}; expected 'relu'")
        if self.output_activation not in OUTPUT_ACTIVATIONS:
            raise ValueError(
                f"unsupported output_activation {self.output_activation!r}; "
                f"expected one of {OUTPUT_ACTIVATIONS}"
            )

    @property
    def widths(self) -> tuple[int, ...]:
        """All layer widths from input to output."""
        return (self.obs_dim, *self.hidden, self.num_outputs)

    def weight_shapes(self) -> dict[str, tuple[int, ...]]:
        """Expected parameter shapes, keyed by state-dict name, in layer order."""
        shapes: dict[str, tuple[int, ...]] = {}
        if self.input_norm:
            shapes[INPUT_SHIFT] = (self.obs_dim,)
            shapes[INPUT_SCALE] = (self.obs_dim,)
        for name, (fan_in, fan_out) in zip(
            linear_layer_names(len(self.widths) - 1),
            zip(self.widths, self.widths[1:], strict=False),
            strict=True,
        ):
            shapes[f"{name}.weight"] = (fan_out, fan_in)
            shapes[f"{name}.bias"] = (fan_out,)
        return shapes

    def fp32_bytes(self) -> int:
        """Bytes of all parameters as fp32."""
        total = 0
        for shape in self.weight_shapes().values():
            n = 1
            for d in shape:
                n *= d
            total += 4 * n
        return total


def linear_layer_names(num_layers: int) -> list[str]:
    """State-dict prefixes of the Linear layers inside `QNetwork.layers`."""
    # Linear layers sit at even indices of the Sequential (ReLU at odd ones).
    return [f"layers.{2 * i}" for i in range(num_layers)]


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
