"""What a DQN update takes and reports, shared by the torch update (dqn.py) and the numpy
one (dqn_flat.py) without either importing the other's module."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import torch

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


class DQNLearnerParts(Protocol):
    """What the numpy update reads of a `DQNLearner` (actorq.algos.dqn)."""

    online: Any
    target: Any
    optimizer: torch.optim.Optimizer
    device: torch.device
    config: Any

    def _apply_lr_schedule(self) -> None: ...
