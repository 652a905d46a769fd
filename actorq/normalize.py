"""Running observation statistics for learners whose inputs need normalising (MuJoCo,
DeepMind Control: observations on very different scales).

The learner keeps the statistics and normalises sampled observations; replay stores raw
observations. Actors need no statistics: `fold_into_first_layer` rewrites the first
Linear layer of the broadcast policy so that it takes raw observations,

    W (x - mean) / std + b  =  (W / std) x + (b - W (mean / std)),

and the blob (and its int8/int4 quantization) is just another MLP.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

MIN_STD = 1e-4


class RunningMeanStd:
    """Mean and variance over every row ever passed to `update` (Chan et al.'s merge)."""

    def __init__(self, dim: int) -> None:
        self.mean = np.zeros(dim, np.float64)
        self.var = np.ones(dim, np.float64)
        self.count = 0.0

    def update(self, x: np.ndarray) -> None:
        x = np.asarray(x, np.float64).reshape(-1, self.mean.shape[0])
        n = x.shape[0]
        if n == 0:
            return
        batch_mean, batch_var = x.mean(axis=0), x.var(axis=0)
        total = self.count + n
        delta = batch_mean - self.mean
        self.mean = self.mean + delta * n / total
        m2 = self.var * self.count + batch_var * n + delta**2 * self.count * n / total
        self.var = m2 / total
        self.count = total

    @property
    def std(self) -> np.ndarray:
        return np.maximum(np.sqrt(self.var), MIN_STD)

    def normalize(self, x: torch.Tensor) -> torch.Tensor:
        mean = torch.as_tensor(self.mean, dtype=x.dtype, device=x.device)
        std = torch.as_tensor(self.std, dtype=x.dtype, device=x.device)
        return (x - mean) / std

    def state_dict(self) -> dict[str, Any]:
        return {
            "mean": torch.from_numpy(self.mean.copy()),
            "var": torch.from_numpy(self.var.copy()),
            "count": float(self.count),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.mean = state["mean"].numpy().astype(np.float64)
        self.var = state["var"].numpy().astype(np.float64)
        self.count = float(state["count"])


def fold_into_first_layer(
    weights: dict[str, np.ndarray], first: str, rms: RunningMeanStd
) -> dict[str, np.ndarray]:
    """Copy of `weights` whose layer `first` (a state-dict prefix) expects raw observations."""
    w = weights[f"{first}.weight"].astype(np.float64)
    b = weights[f"{first}.bias"].astype(np.float64)
    std = rms.std
    out = dict(weights)
    out[f"{first}.weight"] = np.ascontiguousarray((w / std[None, :]).astype(np.float32))
    out[f"{first}.bias"] = (b - w @ (rms.mean / std)).astype(np.float32)
    return out
