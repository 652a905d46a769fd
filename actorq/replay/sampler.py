"""Samplers: which rows of the storage go into the next training batch.

`Sampler` is the seam: `UniformSampler` here, `actorq.replay.prioritized.PrioritizedSampler`
on a K-ary sum tree. The storage never knows which one is in use.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np

from actorq.replay.storage import ReplayStorage


@dataclass(frozen=True)
class SampleResult:
    """Row indices to read, and the importance weight of each (1.0 for uniform).

    `generations` (prioritized sampling only) says which insert of each row was sampled;
    pass it back to `update_priorities` so an update never lands on a newer row.
    """

    indices: np.ndarray  # int64 [batch_size]
    weights: np.ndarray  # float32 [batch_size]
    generations: np.ndarray | None = None  # int64 [batch_size]


@runtime_checkable
class Sampler(Protocol):
    """Chooses rows to train on and learns from what the learner reports back.

    The learner's loop::

        result = sampler.sample(storage, batch_size, rng)
        rows = storage.get(result.indices)
        td_errors = learner.step(rows, result.weights)
        sampler.update_priorities(result.indices, abs(td_errors), result.generations)

    and the ingest path calls `on_insert(storage.add(batch))` for every new batch.
    """

    def sample(
        self, storage: ReplayStorage, batch_size: int, rng: np.random.Generator
    ) -> SampleResult: ...

    def update_priorities(
        self,
        indices: np.ndarray,
        priorities: np.ndarray,
        generations: np.ndarray | None = None,
    ) -> None: ...

    def on_insert(self, indices: np.ndarray) -> None: ...


class UniformSampler:
    """Every stored row equally likely, drawn with replacement; weights are all 1.0."""

    def sample(
        self, storage: ReplayStorage, batch_size: int, rng: np.random.Generator
    ) -> SampleResult:
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        size = len(storage)
        if size == 0:
            raise ValueError("cannot sample from an empty storage")
        indices = storage.slots(rng.integers(0, size, size=batch_size, dtype=np.int64))
        return SampleResult(indices=indices, weights=np.ones(batch_size, np.float32))

    def update_priorities(
        self,
        indices: np.ndarray,
        priorities: np.ndarray,
        generations: np.ndarray | None = None,
    ) -> None:
        """Uniform sampling ignores priorities."""

    def on_insert(self, indices: np.ndarray) -> None:
        """Uniform sampling keeps no per-row state."""
