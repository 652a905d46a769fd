"""What the off-policy learner loop counts: updates, rows sampled, time waited, sampling
and updating, the rate limiter's credit for settled updates."""

from __future__ import annotations

import time
from dataclasses import dataclass, field


@dataclass
class LearnerCounters:
    updates: int = 0
    sampled: int = 0
    wait_seconds: float = 0.0
    started: float = field(default_factory=time.perf_counter)
    last_loss: float = float("nan")
    checkpoints: int = 0
    sample_seconds: float = 0.0  # time spent choosing and copying replay rows
    # Time in the algorithm's update calls (on a GPU: until they return, launches mostly).
    # With wait and sample it leaves what the loop spends elsewhere (bookkeeping, the GIL).
    update_seconds: float = 0.0
    # Transitions counted by the rate limiter beyond those sampled: settled updates count
    # base/settled batches each (actorq.learner.settle), so actors may insert more per update.
    credited: int = 0

    def wait_fraction(self) -> float:
        """Share of wall time the learner waited for replay data (rate limiter or empty)."""
        return self._share_of_wall(self.wait_seconds)

    def sample_fraction(self) -> float:
        """Share of wall time spent sampling rows and copying them out of the mirror."""
        return self._share_of_wall(self.sample_seconds)

    def update_fraction(self) -> float:
        """Share of wall time spent in the algorithm's update calls."""
        return self._share_of_wall(self.update_seconds)

    def update_ms(self) -> float:
        """Mean milliseconds per update in the update calls (0 before the first)."""
        return 1e3 * self.update_seconds / self.updates if self.updates else 0.0

    def _share_of_wall(self, seconds: float) -> float:
        elapsed = time.perf_counter() - self.started
        return seconds / elapsed if elapsed > 0 else 0.0
