"""The learner loop's side of a captured update path (actorq.algos.capture): updates are
queued without a host sync each, so prioritized replay gets its priorities one update
late and losses come back in batches."""

from __future__ import annotations

from typing import Any

from actorq.algos.capture import CapturedUpdate


class LaggedSubmit:
    """Queues one update per call; holds the sample whose priorities are still due."""

    def __init__(self) -> None:
        self.pending_sample: Any = None

    def __call__(
        self, runner: CapturedUpdate, sampler: Any, sample: Any, batch: Any, weights: Any
    ) -> tuple[float, float] | None:
        """Submit the update, apply the previous one's |TD errors| as priorities, and every
        `runner.slots` updates read the losses back at once and return the last."""
        runner.submit([batch], [weights])
        td, previous = runner.lagged_td(), self.pending_sample
        self.pending_sample = sample
        if td is not None and previous is not None:
            sampler.update_priorities(previous.indices, td, previous.generations)
        return losses_when_full(runner)


def losses_when_full(runner: CapturedUpdate) -> tuple[float, float] | None:
    """Once the runner's readback slots are full, read them back (one host sync) and return
    the last update's (loss, q_mean); None before."""
    if runner.pending < runner.slots:
        return None
    last = runner.drain()[-1]
    return last.loss, last.q_mean
