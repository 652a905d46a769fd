"""Samplers: which rows of the storage go into the next training batch.

`Sampler` is the seam: `UniformSampler` and `TerminalShareSampler` here,
`actorq.replay.prioritized.PrioritizedSampler` on a K-ary sum tree. The storage never
knows which one is in use.
"""

from __future__ import annotations

import math
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

    def sample_batches(
        self, storage: ReplayStorage, batch_size: int, count: int, rng: np.random.Generator
    ) -> SampleResult:
        """`count` batches in one draw, batch j at rows [j * batch_size, (j + 1) *
        batch_size): distributed as `count` calls of `sample`, for a fraction of their
        per-call cost (one RNG call, one gather; the learner draws DQN's 128-row batches
        eight at a time)."""
        if count < 1:
            raise ValueError(f"count must be >= 1, got {count}")
        return UniformSampler.sample(self, storage, batch_size * count, rng)

    def update_priorities(
        self,
        indices: np.ndarray,
        priorities: np.ndarray,
        generations: np.ndarray | None = None,
    ) -> None:
        """Uniform sampling ignores priorities."""

    def on_insert(self, indices: np.ndarray) -> None:
        """Uniform sampling keeps no per-row state."""


class TerminalShareSampler(UniformSampler):
    """Uniform, except that `share` of each batch is drawn from the rows that ended an
    episode (`done`), whenever replay holds any.

    Why: once a DQN policy solves CartPole it stops failing, so failure transitions
    become a vanishing share of what the learner samples (none in 100k rows of a solved
    policy's play); without them the Q-values of good and bad actions drift together
    and the greedy policy collapses (earlier BENCHMARKS 12k/12p). Keeping a fixed share of
    terminal rows in every batch keeps the learner reminded of what failing costs.
    `share` 0 samples exactly like `UniformSampler`; the learner raises it on settling.
    Weights stay 1.0: the bias towards terminal rows is deliberate, not corrected.
    """

    def __init__(self, share: float = 0.0) -> None:
        self.share = share
        self._terminals = np.zeros(0, np.int64)
        self._terminals_at = (-1, -1)  # (total_added, oldest_seq) when _terminals was read

    @property
    def share(self) -> float:
        return self._share

    @share.setter
    def share(self, value: float) -> None:
        if not 0.0 <= value < 1.0:
            raise ValueError(f"terminal share must be in [0, 1), got {value}")
        self._share = float(value)

    def sample(
        self, storage: ReplayStorage, batch_size: int, rng: np.random.Generator
    ) -> SampleResult:
        return self.sample_batches(storage, batch_size, 1, rng)

    def sample_batches(
        self, storage: ReplayStorage, batch_size: int, count: int, rng: np.random.Generator
    ) -> SampleResult:
        """As `UniformSampler.sample_batches`, with the terminal share in every batch."""
        result = super().sample_batches(storage, batch_size, count, rng)
        share = math.ceil(self._share * batch_size)
        terminals = self._terminal_slots(storage) if share else np.zeros(0, np.int64)
        if terminals.size:  # the first `share` rows of each batch (a view: set in place)
            picks = rng.integers(0, terminals.size, size=(count, share))
            result.indices.reshape(count, batch_size)[:, :share] = terminals[picks]
        return result

    def _terminal_slots(self, storage: ReplayStorage) -> np.ndarray:
        # Re-read only when rows came or went since: between inserts batches share it.
        state = (storage.total_added, storage.oldest_seq)
        if state != self._terminals_at:
            self._terminals_at = state
            self._terminals = storage.terminal_slots()
        return self._terminals
