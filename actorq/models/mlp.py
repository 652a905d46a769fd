"""The MLP used as Q-network: Linear layers with ReLU between them.

The same `MLPSpec` travels inside every policy blob (as `actorq.v1.ModelSpec`), so an
actor can rebuild the network from a blob alone, without any fp32 weights.
"""

from __future__ import annotations

import itertools

import torch
import torch.nn.functional as F
from torch import nn

from actorq.models.fake_quant import fake_quantize
from actorq.models.specs import (  # noqa: F401  (re-exported: the spec's old home)
    INPUT_SCALE,
    INPUT_SHIFT,
    OUTPUT_ACTIVATIONS,
    MLPSpec,
    linear_layer_names,
)


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
