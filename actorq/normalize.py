"""Running observation statistics for learners whose inputs need normalising (MuJoCo,
DeepMind Control: observations on very different scales).

The learner keeps the statistics and normalises sampled observations; replay stores raw
observations. The broadcast policy carries the statistics as two fp32 vectors
(`input_norm_tensors`: shift = mean, scale = 1 / std; see MLPSpec.input_norm) and actors
normalise before the first layer. They are not folded into layer 0's weights: that
would make the weights and the int8 activations carry the observations' mixed scales
(HalfCheetah: 13x the int8 action error; bench/bench_input_norm.py, BENCHMARKS.md 10d).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from actorq.models.mlp import INPUT_SCALE, INPUT_SHIFT

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


def input_norm_tensors(rms: RunningMeanStd) -> dict[str, np.ndarray]:
    """The policy's `input_norm.shift` / `input_norm.scale` (float32) for these statistics:
    actors compute (obs - shift) * scale, the learner's (obs - mean) / std up to rounding."""
    return {
        INPUT_SHIFT: rms.mean.astype(np.float32),
        INPUT_SCALE: (1.0 / rms.std).astype(np.float32),
    }
