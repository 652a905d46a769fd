"""Runtime breakdown: where an actor step and a broadcast spend their time (QuaRL fig. 7).

The actor's env loop is timed with one `PhaseClock`: each `mark(phase)` charges the time
since the previous mark to `phase`, so the loop phases are contiguous and add up to the
loop's time, apart from what happens between steps (the loop condition). The loop's wall
time is measured separately (`loop_seconds`), and `coverage` = phases / loop time says how
much is accounted for; the accounting test asks for 95-105%.

The policy follower fetches (pull), verifies and decodes, and builds each new version on
its own thread, so those phases are not part of a step's wall time here (unlike the
paper's actors, which pull synchronously); they are reported per load and, amortised per
step, as a separate "background" part.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Mapping

import numpy as np
from prometheus_client import Histogram

# Env-loop phases of one actor step, in loop order.
LOOP_PHASES = ("inference", "explore", "env_step", "record", "push", "rate_limit_wait")
# Policy follower phases, once per loaded version (background thread).
POLICY_PHASES = ("policy_pull", "verify_deserialize", "build")
# Quantizer phases, once per published version.
PUBLISH_PHASES = ("assemble", "quantize", "guard", "store")

STEP_SECONDS = "step_seconds"  # counter-name prefix in GetStatus: step_seconds.<phase>
POLICY_SECONDS = "policy_seconds"
PUBLISH_SECONDS = "publish_seconds"


def observe_many(child, values: list[float]) -> None:
    """`child.observe(v)` for each of `values` (a labelled Histogram child), in bulk: one
    bucket search for all and one increment per bucket hit. An actor's loop observes ~7
    durations per vector step, ~2 us each through `observe` (a Python loop over the
    bounds and two locks), which is ~15% of a CartPole step at M = 128. Falls back to
    `observe` if prometheus_client's internals differ from the ones used here."""
    if not values:
        return
    bounds = getattr(child, "_upper_bounds", None)
    buckets = getattr(child, "_buckets", None)
    total = getattr(child, "_sum", None)
    if bounds is None or buckets is None or total is None or len(bounds) != len(buckets):
        for value in values:
            child.observe(value)
        return
    # observe() counts a value in the first bucket whose bound is >= it: side="left".
    counts = np.bincount(np.searchsorted(bounds, values, side="left"), minlength=len(bounds))
    total.inc(math.fsum(values))
    for i in np.flatnonzero(counts[: len(bounds)]).tolist():
        buckets[i].inc(int(counts[i]))


class PhaseClock:
    """Charges wall time to named phases; observes each charge in a Prometheus histogram,
    at once, or (`deferred`) in bulk at each `flush` (`observe_many`)."""

    def __init__(
        self,
        phases: Iterable[str],
        histogram: Histogram,
        labels: tuple[str, ...] = (),
        deferred: bool = False,
    ) -> None:
        """`histogram` has the labels `labels` + ("phase",)."""
        self.totals = dict.fromkeys(phases, 0.0)
        self._children = {p: histogram.labels(*labels, p) for p in self.totals}
        self._last = time.perf_counter()
        self.deferred = deferred
        self._unobserved: dict[str, list[float]] = {p: [] for p in self.totals}

    def start(self) -> None:
        """Start a new interval (time before it is charged to nothing)."""
        self._last = time.perf_counter()

    def mark(self, phase: str) -> None:
        now = time.perf_counter()
        elapsed = now - self._last
        self._last = now
        self.totals[phase] += elapsed
        if self.deferred:
            self._unobserved[phase].append(elapsed)
        else:
            self._children[phase].observe(elapsed)

    def flush(self) -> None:
        """Observe the deferred charges in the histograms."""
        for phase, values in self._unobserved.items():
            if values:
                observe_many(self._children[phase], values)
                values.clear()

    @property
    def last_mark(self) -> float:
        """perf_counter() of the latest mark (or start): phases are charged up to here."""
        return self._last

    def add(self, phase: str, seconds: float) -> None:
        """Charge a duration measured elsewhere."""
        self.totals[phase] += seconds
        self._children[phase].observe(seconds)

    def counters(self, prefix: str) -> dict[str, float]:
        return {f"{prefix}.{p}": s for p, s in self.totals.items()}


def _sum_phase(statuses: Iterable[Mapping[str, float]], prefix: str, phase: str) -> float:
    return sum(s.get(f"{prefix}.{phase}", 0.0) for s in statuses)


def actor_breakdown(statuses: list[Mapping[str, float]]) -> dict[str, object]:
    """Seconds per actor step by phase, summed over actors (their GetStatus counters).

    Returns {"steps", "step_seconds" (measured), "phases": {phase: s/step}, "sum", "coverage",
    "background": {phase: s/step}} or {} before any step.
    """
    steps = sum(s.get("loop_steps", 0.0) for s in statuses)
    loop_seconds = sum(s.get("loop_seconds", 0.0) for s in statuses)
    if steps <= 0 or loop_seconds <= 0:
        return {}
    phases = {p: _sum_phase(statuses, STEP_SECONDS, p) / steps for p in LOOP_PHASES}
    background = {p: _sum_phase(statuses, POLICY_SECONDS, p) / steps for p in POLICY_PHASES}
    measured = loop_seconds / steps
    total = sum(phases.values())
    return {
        "steps": int(steps),
        "step_seconds": measured,
        "phases": phases,
        "sum": total,
        "coverage": total / measured,
        "background": background,
        "policy_loads": int(sum(s.get("policy_loads", 0.0) for s in statuses)),
    }


def publish_breakdown(status: Mapping[str, float]) -> dict[str, object]:
    """Seconds per published version by phase, and bytes served per version (fan-out)."""
    publishes = status.get("publishes", 0.0)
    if publishes <= 0:
        return {}
    return {
        "versions": int(publishes),
        "phases": {
            p: status.get(f"{PUBLISH_SECONDS}.{p}", 0.0) / publishes for p in PUBLISH_PHASES
        },
        "fanout_bytes_per_version": status.get("broadcast_bytes_total", 0.0) / publishes,
        "blob_bytes": status.get("blob_bytes", 0.0),
    }
