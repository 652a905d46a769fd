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

import torch
from torch import nn

from actorq.models.specs import (  # noqa: F401  (re-exported: the spec's old home)
    ACT_MAX,
    ACT_MAX_MOMENTUM,
    MINATAR_CONVS,
    MINATAR_HIDDEN,
    NATURE_CONVS,
    NATURE_HIDDEN,
    CNNSpec,
    ConvLayer,
    cnn_spec_for,
)


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
