"""Inference modules built from a decoded policy (`PolicyArrays`), at its own precision.

However a version arrived (full blob, sparse layers, delta), it was decoded and checked
once before this point; the builder reads only arrays.
- INT8: every Linear after the first is an `Int8Linear` over the blob's codes and scales
  (sparse layers scattered back to dense: fbgemm's int8 kernels beat torch's sparse CSR,
  BENCHMARKS.md 14). The first layer is an fp32 Linear over its dequantized codes: the
  int8 kernels quantize their input per tensor to 7 bits, and doing that to the
  observation was the int8 path's largest error (BENCHMARKS.md 10d).
- INT4: the codes (in [-7, 7], valid int8 codes) go into the same `Int8Linear` kernels;
  two per byte saves broadcast bytes only, there is no 4-bit kernel.
- FP16: widened to fp32 `nn.Linear` (fbgemm's fp16 Linear was no faster on CPU).
- FP32: plain `nn.Linear`, numerically the learner's QNetwork.
CNN specs are built by actorq.quant.cnn_blob. A spec with `input_norm` puts an fp32
`InputNorm` before the first layer at every precision.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import torch
from torch import nn

from actorq.models.cnn import CNNSpec
from actorq.models.mlp import INPUT_SCALE, INPUT_SHIFT, MLPSpec, linear_layer_names
from actorq.quant.arrays import PolicyArrays, policy_arrays
from actorq.quant.blob import decode_blob, encode_policy
from actorq.quant.cnn_blob import cnn_layers
from actorq.quant.int8 import dequantized_layer, int8_layer
from actorq.quant.precision import parse_precision, precision_name
from actorq.quant.tensors import TensorArrays
from actorq.v1 import policy_pb2


class InputNorm(nn.Module):
    """x -> (x - shift) * scale, per observation feature, in fp32."""

    def __init__(self, shift: torch.Tensor, scale: torch.Tensor) -> None:
        super().__init__()
        self.register_buffer("shift", shift)
        self.register_buffer("scale", scale)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x - self.shift) * self.scale


class PolicyModule(nn.Module):
    """obs float32 [B, obs_dim] -> float32 [B, num_outputs], eval mode, carrying the blob's
    version, learner step and precision. int8 quantizes activations per call, so a row's
    output depends very slightly on the other rows of its batch."""

    def __init__(
        self,
        layers: Sequence[nn.Module],
        spec: MLPSpec,
        precision: int,
        version: int,
        learner_step: int,
    ) -> None:
        super().__init__()
        self.layers = nn.ModuleList(layers)
        # Bound forward methods: Module.__call__ costs ~4 us per layer (hook checks),
        # which is a sizeable share of a batch-1 int8 forward. No hooks are used here.
        self._forwards = tuple(layer.forward for layer in layers)
        self.spec = spec
        self.precision = precision
        self.version = version
        self.learner_step = learner_step
        self.requires_grad_(False)
        self.eval()

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        x = obs
        for forward in self._forwards:
            x = forward(x)
        return x

    def extra_repr(self) -> str:
        return f"version={self.version}, precision={precision_name(self.precision)}"


def build_policy_module(policy: PolicyArrays | policy_pb2.Policy) -> PolicyModule:
    """Inference module for decoded arrays (a Policy message is decoded first)."""
    arrays = policy if isinstance(policy, PolicyArrays) else policy_arrays(policy)
    spec, tensors = arrays.spec, arrays.tensors
    if isinstance(spec, CNNSpec):  # pixel policies: int8 convs (actorq.quant.cnn_blob)
        layers = cnn_layers(arrays, spec)
        return PolicyModule(layers, spec, arrays.precision, arrays.version, arrays.learner_step)
    names = linear_layer_names(len(spec.widths) - 1)
    layers: list[nn.Module] = []
    if spec.input_norm:
        shift, scale = (torch.from_numpy(arrays.float32(n)) for n in _NORM_NAMES)
        layers.append(InputNorm(shift, scale))
    for i, name in enumerate(names):
        hidden = i < len(names) - 1
        weight, bias = tensors[f"{name}.weight"], tensors[f"{name}.bias"]
        # Per tensor, not per policy: the guard may keep some layers in float (fallbacks).
        quantized = weight.scales is not None  # codes + scales (int8 / int4)
        if quantized and i > 0:
            layers.append(int8_layer(weight, bias, relu=hidden))
        elif quantized:  # int8 / int4 first layer: fp32 activations (see the module docstring)
            layers.append(dequantized_layer(weight, bias, relu=hidden))
        else:
            layers.append(_float_layer(weight, bias))
            if hidden:
                layers.append(nn.ReLU(inplace=True))  # Linear output is fresh: safe
    if spec.output_activation == "tanh":
        layers.append(nn.Tanh())
    return PolicyModule(layers, spec, arrays.precision, arrays.version, arrays.learner_step)


_NORM_NAMES = (INPUT_SHIFT, INPUT_SCALE)


def _float_layer(weight: TensorArrays, bias: TensorArrays) -> nn.Linear:
    w = torch.from_numpy(weight.to_float32())
    out_features, in_features = w.shape
    layer = nn.Linear(in_features, out_features, device="meta")  # skip random init
    layer.weight = nn.Parameter(w, requires_grad=False)
    layer.bias = nn.Parameter(torch.from_numpy(bias.to_float32()), requires_grad=False)
    return layer


def quantized_policy_from_weights(
    weights: Mapping[str, np.ndarray],
    spec: MLPSpec,
    precision: int | str,
    version: int = 0,
    learner_step: int = 0,
) -> PolicyModule:
    """fp32 weights -> blob -> verified decode -> module: the actor's path in one call."""
    if isinstance(precision, str):
        precision = parse_precision(precision)
    encoded = encode_policy(weights, spec, precision, version, learner_step)
    return build_policy_module(decode_blob(encoded.envelope, expected_spec=spec))
