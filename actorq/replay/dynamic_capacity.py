"""RLx2's dynamic-capacity replay: forget the oldest data once the policy has moved on.

Every `check_every` inserted transitions, the policy distance of the oldest 8 batches of
stored data is measured: 0.5 * mean over rows and action dimensions of (pi(s) - a)^2, pi
the current deterministic policy and a the stored action, both in [-1, 1]. While it
passes `threshold` and the buffer holds more than `min_rows`, the oldest `drop_fraction`
of the stored rows is dropped (RLx2's `shrink`); new data then refills the buffer, so
its size settles where the oldest data is about `threshold` away from the policy.

One difference from the reference: RLx2's actors stored the noise-free action next to
the executed one; actorq's actors store only the executed (noisy) action. With
`noise_baseline`, the same distance over the newest 8 batches (mostly exploration
noise, since those rows come from nearly the current policy) is subtracted first.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from actorq.replay.storage import ReplayStorage

PROBE_BATCHES = 8  # RLx2 measures the distance on 8 x batch_size rows


class DynamicCapacity:
    def __init__(
        self,
        threshold: float,
        check_every: int,
        min_rows: int,
        drop_fraction: float,
        probe_rows: int,
        noise_baseline: bool = True,
    ) -> None:
        self.threshold, self.check_every, self.min_rows = threshold, check_every, min_rows
        self.drop_fraction, self.probe_rows = drop_fraction, probe_rows
        self.noise_baseline = noise_baseline
        self.next_check = check_every  # in storage.total_added
        self.last_distance = float("nan")
        self.dropped_total = 0
        self.checks = 0

    def maybe_adjust(
        self, storage: ReplayStorage, actions: Callable[[np.ndarray], np.ndarray]
    ) -> int:
        """Check when due; returns the rows dropped (0 when not due or not needed)."""
        inserted = storage.total_added
        if inserted < self.next_check:
            return 0
        self.next_check = (inserted // self.check_every + 1) * self.check_every
        self.checks += 1
        self.last_distance = self.distance(storage, actions)
        size = len(storage)
        if self.last_distance <= self.threshold or size <= self.min_rows:
            return 0
        dropped = storage.drop_oldest(min(int(self.drop_fraction * size), size - self.min_rows))
        self.dropped_total += dropped
        return dropped

    def distance(
        self, storage: ReplayStorage, actions: Callable[[np.ndarray], np.ndarray]
    ) -> float:
        size = len(storage)
        probe = min(self.probe_rows, size)
        if probe == 0:
            return float("nan")
        oldest = _policy_distance(storage, storage.age_slots(np.arange(probe)), actions)
        if not self.noise_baseline:
            return oldest
        newest = _policy_distance(
            storage, storage.age_slots(np.arange(size - probe, size)), actions
        )
        return max(0.0, oldest - newest)

    def state_dict(self, storage: ReplayStorage) -> dict[str, Any]:
        return {
            "live_rows": len(storage),
            "until_check": self.next_check - storage.total_added,
            "last_distance": self.last_distance,
            "dropped_total": self.dropped_total,
            "checks": self.checks,
        }

    def load_state_dict(self, state: dict[str, Any], storage: ReplayStorage) -> None:
        """Restore after the storage was rebuilt: it keeps at most the saved live rows."""
        extra = len(storage) - int(state["live_rows"])
        if extra > 0:
            storage.drop_oldest(extra)
        self.next_check = storage.total_added + max(1, int(state["until_check"]))
        self.last_distance = float(state["last_distance"])
        self.dropped_total = int(state["dropped_total"])
        self.checks = int(state["checks"])


def _policy_distance(
    storage: ReplayStorage, slots: np.ndarray, actions: Callable[[np.ndarray], np.ndarray]
) -> float:
    rows = storage.get(slots)
    diff = np.asarray(actions(rows["obs"]), np.float64) - rows["action"]
    value = 0.5 * float(np.mean(diff**2))
    return value if math.isfinite(value) else float("nan")
