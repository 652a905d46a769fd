"""Checks on fp32 weight dicts before they are encoded into a policy blob."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

import numpy as np

from actorq.models.specs import MLPSpec
from actorq.quant.errors import WeightsError

if TYPE_CHECKING:  # torch only for the learner's side: actors validate without it
    from torch import nn


def validate_weights(weights: Mapping[str, np.ndarray], spec: MLPSpec) -> None:
    """WeightsError, naming the tensor, unless `weights` holds exactly the spec's names and
    shapes as finite float32 tensors."""
    expected = spec.weight_shapes()
    missing = [name for name in expected if name not in weights]
    unexpected = sorted(name for name in weights if name not in expected)
    if missing or unexpected:
        raise WeightsError(
            f"weights do not match spec {spec}: missing {missing}, unexpected {unexpected}"
        )
    for name, shape in expected.items():
        _check_tensor(name, weights[name], shape)


def _check_tensor(name: str, value: object, shape: tuple[int, ...]) -> None:
    if not isinstance(value, np.ndarray):
        raise WeightsError(f"weight {name!r} must be a numpy array, got {type(value).__name__}")
    if value.shape != shape:
        raise WeightsError(f"weight {name!r} has shape {value.shape}, spec expects {shape}")
    if value.dtype != np.float32:
        raise WeightsError(f"weight {name!r} has dtype {value.dtype}, expected float32")
    if not np.isfinite(value).all():
        bad = int(value.size - np.count_nonzero(np.isfinite(value)))
        raise WeightsError(f"weight {name!r} has {bad} NaN/Inf value(s)")


def weights_from_module(module: nn.Module) -> dict[str, np.ndarray]:
    """Float32 numpy copies of a module's state dict (e.g. a QNetwork), ready to encode."""
    return {
        name: tensor.detach().to("cpu").float().numpy().copy()
        for name, tensor in module.state_dict().items()
    }
