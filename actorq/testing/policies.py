"""Random MLP policies as an actor holds them, and torch's outputs for them: the fixtures of
the forward tests (tests/unit/test_fused_mlp.py, tests/unit/test_numpy_mlp.py)."""

from __future__ import annotations

import numpy as np
import torch

from actorq.actor.policy_follower import LoadedPolicy
from actorq.models.mlp import INPUT_SCALE, INPUT_SHIFT, MLPSpec, QNetwork
from actorq.quant import build_policy_module, decode_blob, encode_policy, parse_precision


def torch_outputs(module: torch.nn.Module, x: np.ndarray) -> np.ndarray:
    """The module's forward of float32 `x`, in inference mode."""
    with torch.inference_mode():
        return module.forward(torch.from_numpy(x)).numpy()


def random_weights(spec: MLPSpec, seed: int) -> dict[str, np.ndarray]:
    """A freshly initialised QNetwork's weights, plus random input-norm vectors if the spec
    has them."""
    torch.manual_seed(seed)
    weights = {k: v.numpy().copy() for k, v in QNetwork(spec).state_dict().items()}
    if spec.input_norm:
        rng = np.random.default_rng(seed)
        weights[INPUT_SHIFT] = rng.normal(size=spec.obs_dim).astype(np.float32)
        weights[INPUT_SCALE] = rng.uniform(0.1, 3, size=spec.obs_dim).astype(np.float32)
    return weights


def random_policy(spec: MLPSpec, seed: int, precision: str = "int8", **encode) -> LoadedPolicy:
    """The actor's view of a version of `random_weights`: the decoded arrays and the module
    built from them (`encode`: more of `encode_policy`'s arguments, e.g. fallback_layers)."""
    weights = random_weights(spec, seed)
    encoded = encode_policy(weights, spec, parse_precision(precision), 1, 0, **encode)
    arrays = decode_blob(encoded.envelope)
    return LoadedPolicy(1, precision, build_policy_module(arrays), 0, arrays)
