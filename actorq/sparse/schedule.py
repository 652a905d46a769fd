"""When the topology changes and by how much (RigL's schedule, as RLx2 uses it)."""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class TopologySchedule:
    """Every `interval` optimizer steps before `stop`, drop (and regrow) a fraction of the
    active weights: `drop_fraction` at step 0, cosine-annealed to zero at `stop`."""

    interval: int = 10_000
    stop: int = 1_000_000
    drop_fraction: float = 0.5

    def __post_init__(self) -> None:
        if self.interval < 1:
            raise ValueError(f"topology interval must be >= 1, got {self.interval}")
        if self.stop < 0:
            raise ValueError(f"topology stop must be >= 0, got {self.stop}")
        if not 0.0 <= self.drop_fraction <= 1.0:
            raise ValueError(f"drop fraction must be in [0, 1], got {self.drop_fraction}")

    def due(self, step: int) -> bool:
        """Whether optimizer step number `step` (1-based) is followed by a topology update."""
        return step > 0 and step % self.interval == 0 and step < self.stop

    def fraction(self, step: int) -> float:
        """Share of each layer's active weights dropped at `step`."""
        if step >= self.stop:
            return 0.0
        return self.drop_fraction / 2.0 * (1.0 + math.cos(math.pi * step / self.stop))
