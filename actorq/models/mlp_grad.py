"""Hand-written forward and backward passes of a ReLU MLP (`QNetwork`), no autograd.

For the small networks of RL (DQN's 64x64 Q-network: a few MFLOP per update) a training
step is dominated by per-op framework work: autograd graph nodes, views and transposes,
allocations. Running the same layers as a handful of explicit matrix products removes
most of it. The ops are the ones autograd would run (addmm forward; mm for weight and
input gradients; a column sum for biases; the ReLU mask), so gradients agree with
`loss.backward()` to the last bits or within float rounding of the summation order
(tests/unit/test_fast_update.py checks both on fixed inputs).

Only plain fp32 ReLU MLPs take this path: quantization-aware training (fake-quantized
weights) keeps autograd.
"""

from __future__ import annotations

import torch
from torch import nn

from actorq.models.mlp import QNetwork


def linear_layers(net: QNetwork) -> list[nn.Linear]:
    """The Linear layers of `net`, input to output."""
    return [m for m in net.layers if isinstance(m, nn.Linear)]


def supports_manual_grad(net: QNetwork) -> bool:
    """Whether `forward_keep`/`backward_into` reproduce `net`'s forward exactly."""
    return net.weight_bits is None and net.spec.output_activation == "none"


def forward(layers: list[nn.Linear], x: torch.Tensor) -> torch.Tensor:
    """The network's output for `x`: the ops of `QNetwork.forward` without module calls."""
    last = len(layers) - 1
    for i, layer in enumerate(layers):
        x = torch.addmm(layer.bias, x, layer.weight.t())
        if i != last:
            x = x.relu_()
    return x


def forward_keep(layers: list[nn.Linear], x: torch.Tensor) -> list[torch.Tensor]:
    """The network's forward pass keeping every activation: [x, h1, ..., hL, out]."""
    acts = [x]
    last = len(layers) - 1
    for i, layer in enumerate(layers):
        h = torch.addmm(layer.bias, acts[-1], layer.weight.t())
        acts.append(h if i == last else h.relu_())
    return acts


def backward_into(
    layers: list[nn.Linear], acts: list[torch.Tensor], grad_out: torch.Tensor
) -> None:
    """Write d(loss)/d(parameter) into each parameter's `.grad`, given d(loss)/d(output).

    `acts` is what `forward_keep` returned for the same parameters. Gradients replace
    whatever `.grad` held (like `zero_grad(set_to_none=True)` followed by backward).
    """
    grad = grad_out
    for i in range(len(layers) - 1, -1, -1):
        layer = layers[i]
        layer.weight.grad = grad.t().mm(acts[i])
        layer.bias.grad = grad.sum(0)
        if i > 0:
            # ReLU's backward: no gradient where its output was not positive.
            grad = grad.mm(layer.weight).masked_fill_(acts[i] <= 0, 0.0)
