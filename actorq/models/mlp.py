"""The MLP used as Q-network: Linear layers with ReLU between them.

The same `MLPSpec` travels inside every policy blob (as `actorq.v1.ModelSpec`), so an
actor can rebuild the network from a blob alone, without any fp32 weights.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from actorq.models.fake_quant import fake_quantize

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


class QNetwork(nn.Module):
    """fp32 MLP mapping observations to one value per output (Q-values for DQN).

    With `weight_bits` set, every forward uses fake-quantized weights (per output channel,
    straight-through gradients): quantization-aware training of the broadcast policy.
    """

    def __init__(self, spec: MLPSpec, weight_bits: int | None = None) -> None:
        super().__init__()
        self.spec = spec
        self.weight_bits = weight_bits
        modules: list[nn.Module] = []
        widths = spec.widths
        for i, (fan_in, fan_out) in enumerate(itertools.pairwise(widths)):
            modules.append(nn.Linear(fan_in, fan_out))
            if i < len(widths) - 2:
                modules.append(nn.ReLU())
        self.layers = nn.Sequential(*modules)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        out = self.layers(obs) if self.weight_bits is None else self._fake_quantized(obs)
        return torch.tanh(out) if self.spec.output_activation == "tanh" else out

    def _fake_quantized(self, obs: torch.Tensor) -> torch.Tensor:

        x = obs
        for layer in self.layers:
            if isinstance(layer, nn.Linear):
                x = F.linear(x, fake_quantize(layer.weight, self.weight_bits), layer.bias)
            else:
                x = layer(x)
        return x
