"""What a DQN update takes and reports, shared by the torch step (dqn.py) and the
numpy-flat runner (dqn_flat.py) without either importing the other's module."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

BATCH_KEYS = ("obs", "action", "reward", "next_obs", "done")


@dataclass(frozen=True)
class DQNUpdate:
    """What one learner update reports."""

    loss: float
    """Importance-weighted mean Huber loss."""
    q_mean: float
    """Mean Q(s, a) of the batch's actions before the update."""
    td_abs: np.ndarray
    """|TD error| per transition, shape [B]; new priorities for prioritized replay."""
    grad_norm: float
    """Global gradient norm before clipping."""


def multi_step(batch: Mapping[str, np.ndarray]) -> bool:
    """Whether the batch holds any n-step transition (a steps column with a value > 1)."""
    steps = batch.get("steps")
    # maximum.reduce, not np.max: np.max's Python dispatch cost ~1 us more per update,
    # under 1% of a 64x64 numpy-flat update but paid on every one (BENCHMARKS 20l)
    return steps is not None and len(steps) > 0 and np.maximum.reduce(steps, axis=None) > 1
