"""Inference modules rebuilt from a decoded policy blob, at the blob's own precision.

- INT8: every Linear is an `Int8Linear` made from the blob's int8 codes and scales; no
  fp32 weight matrix ever exists on the actor.
- INT4: the 4-bit codes (in [-7, 7], so valid int8 codes) and their scales go into the
  same `Int8Linear` kernels: results equal the int4 weights exactly up to the int8
  activation rounding, and no fp32 weight matrix exists. Packing two per byte saves
  broadcast bytes only; there is no 4-bit kernel on this CPU.
- FP16: weights are widened to fp32 `nn.Linear`. fp16 halves the broadcast, but CPU
  inference runs in fp32 (fbgemm's fp16 Linear measured no faster on this CPU).
- FP32: plain `nn.Linear`, numerically the learner's QNetwork.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import torch
from torch import nn

from actorq.models.mlp import MLPSpec, linear_layer_names
from actorq.quant.blob import decode_policy, encode_policy, validate_policy
from actorq.quant.int8 import make_int8_linear
from actorq.quant.precision import parse_precision, precision_name
from actorq.quant.tensors import tensor_scales, tensor_to_float32, tensor_values
from actorq.v1 import policy_pb2


class PolicyModule(nn.Module):
    """obs float32 [B, obs_dim] -> float32 [B, num_outputs], in eval mode, no grads.

    Carries the blob's version, learner step and precision so an actor can stamp its
    transitions. Call it batched (one forward for all envs) under torch.inference_mode().
    int8 quantizes activations per call (per tensor), so a row's output depends very
    slightly on the other rows of its batch.
    """

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


def build_policy_module(policy: policy_pb2.Policy) -> PolicyModule:
    """Inference module for a policy (re-checked with `validate_policy`, BlobError if bad)."""
    spec = validate_policy(policy)
    tensors = {tensor.name: tensor for tensor in policy.tensors}
    names = linear_layer_names(len(spec.widths) - 1)
    layers: list[nn.Module] = []
    for i, name in enumerate(names):
        hidden = i < len(names) - 1
        weight, bias = tensors[f"{name}.weight"], tensors[f"{name}.bias"]
        if policy.precision in (policy_pb2.PRECISION_INT8, policy_pb2.PRECISION_INT4):
            layers.append(_int8_layer(weight, bias, relu=hidden))
        else:
            layers.append(_float_layer(weight, bias))
            if hidden:
                layers.append(nn.ReLU(inplace=True))  # Linear output is fresh: safe
    if spec.output_activation == "tanh":
        layers.append(nn.Tanh())
    return PolicyModule(layers, spec, policy.precision, policy.version, policy.learner_step)


def _int8_layer(weight: policy_pb2.Tensor, bias: policy_pb2.Tensor, relu: bool) -> nn.Module:
    return make_int8_linear(
        torch.from_numpy(tensor_values(weight)),
        torch.from_numpy(tensor_scales(weight)),
        torch.from_numpy(tensor_to_float32(bias)),
        relu=relu,
    )


def _float_layer(weight: policy_pb2.Tensor, bias: policy_pb2.Tensor) -> nn.Linear:
    w = torch.from_numpy(tensor_to_float32(weight))
    out_features, in_features = w.shape
    layer = nn.Linear(in_features, out_features, device="meta")  # skip random init
    layer.weight = nn.Parameter(w, requires_grad=False)
    layer.bias = nn.Parameter(torch.from_numpy(tensor_to_float32(bias)), requires_grad=False)
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
    return build_policy_module(decode_policy(encoded.envelope, expected_spec=spec))
