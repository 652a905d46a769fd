"""Prioritized experience replay (Schaul et al. 2016) on a K-ary sum tree, with lazy writing.

Priorities. A row's stored priority is ``(|td| + eps) ** alpha``; it is sampled with
probability ``P(i) = p_i / sum_j p_j``. New rows get the running maximum stored priority
(so each is seen at least once soon), or, Ape-X style, a priority the actor computed from
its own |TD error|. The running maximum never decreases, even when the row that set it is
overwritten (as in the reference implementations).

Importance weights. ``w_i = (N * P(i)) ** -beta``, normalised by the largest weight **in the
batch**, so the largest is exactly 1. N and the total cancel out of that ratio:
``w_i = (p_i / p_min_batch) ** -beta``. (Normalising over the buffer's minimum priority
would need a min-tree beside the sum tree; the batch maximum is what Ape-X and TorchRL's
default do.) beta is annealed linearly from `beta` to `beta_final` over `beta_steps` calls
of `sample`, then stays at `beta_final`.

Lazy writing (seed 003). Writers never touch the tree. `on_insert` (the ingest thread) and
`update_priorities` (the training thread, or several threads) validate and transform their
batch in their own thread, then append it as one entry to a staging deque: O(1) per batch,
no tree lock. Staged entries are applied to the tree, in batches, at two well-defined points
only: at the start of every `sample` and in `flush`, under the one lock that owns the tree.

Consistency rule:

1. A sample sees every write staged before it began (it applies the whole queue first).
2. Writes apply in staging order, so for one row the last staged write wins.
3. A priority update never clobbers a newer row. Every insert of a row bumps that row's
   generation; `sample` returns the generation of each sampled row (`SampleResult
   .generations`), and an update for a row whose generation has changed since (the row
   was overwritten by a newer transition) is dropped when it is applied and counted in
   `dropped_updates`. Pass ``generations=result.generations`` to `update_priorities`; if
   you do not, the generation recorded when this sampler last sampled the row is used,
   which is the same thing for one training thread. An update for a row never sampled is
   checked against nothing and applies.
"""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass

import numpy as np

from actorq.replay.sampler import SampleResult
from actorq.replay.storage import ReplayStorage
from actorq.replay.sumtree import DEFAULT_BRANCHING, SumTree

_NO_GENERATION = -1


@dataclass(frozen=True)
class _StagedInsert:
    indices: np.ndarray  # int64
    stored: np.ndarray | None  # float64 stored priorities, or None for "the running max"


@dataclass(frozen=True)
class _StagedUpdate:
    indices: np.ndarray  # int64
    stored: np.ndarray  # float64 stored priorities
    generations: np.ndarray  # int64, _NO_GENERATION where unchecked


class PrioritizedSampler:
    """A `Sampler` that draws rows in proportion to priority and stages writes (lazy writing).

    Thread-safety: any number of threads may call `on_insert`, `update_priorities` and
    `sample` at once. See the module docstring for what a sample sees.
    """

    def __init__(
        self,
        capacity: int,
        alpha: float = 0.6,
        beta: float = 0.4,
        beta_final: float = 1.0,
        beta_steps: int = 100_000,
        eps: float = 1e-6,
        branching: int = DEFAULT_BRANCHING,
    ) -> None:
        _check_range("alpha", alpha, 0.0, None)
        _check_range("beta", beta, 0.0, 1.0)
        _check_range("beta_final", beta_final, 0.0, 1.0)
        _check_range("eps", eps, 0.0, None, open_low=True)
        if isinstance(beta_steps, bool) or not isinstance(beta_steps, int) or beta_steps < 1:
            raise ValueError(f"beta_steps must be an int >= 1, got {beta_steps!r}")
        self.alpha, self.beta, self.beta_final = float(alpha), float(beta), float(beta_final)
        self.beta_steps, self.eps = beta_steps, float(eps)
        self._tree = SumTree(capacity, branching)
        self._capacity = self._tree.capacity
        self._generation = np.zeros(self._capacity, np.int64)  # inserts applied per row
        self._sampled_generation = np.full(self._capacity, _NO_GENERATION, np.int64)
        self._max_priority = 1.0
        self._staged: deque[_StagedInsert | _StagedUpdate] = deque()
        self._tree_lock = threading.Lock()
        self._samples = 0
        self.dropped_updates = 0

    @property
    def capacity(self) -> int:
        return self._capacity

    @property
    def branching(self) -> int:
        return self._tree.branching

    @property
    def max_priority(self) -> float:
        """The largest stored priority ever applied (1.0 before any); new rows get it."""
        return self._max_priority

    @property
    def current_beta(self) -> float:
        """The beta the next `sample` uses."""
        progress = min(1.0, self._samples / self.beta_steps)
        return self.beta + (self.beta_final - self.beta) * progress

    @property
    def staged(self) -> int:
        """Staged batches not yet applied."""
        return len(self._staged)

    def stored_priority(self, priorities: np.ndarray) -> np.ndarray:
        """|TD error| -> stored priority ``(|td| + eps) ** alpha`` (float64)."""
        return (np.asarray(priorities, np.float64) + self.eps) ** self.alpha

    # --- writers: validate, transform, stage; never touch the tree ---

    def on_insert(self, indices: np.ndarray, priorities: np.ndarray | None = None) -> None:
        """Rows were (over)written in the storage: give them the running max priority, or
        `priorities` (|TD errors| computed by the actor, Ape-X style) when given."""
        idx = self._checked_indices(indices)
        stored = None
        if priorities is not None:
            stored = self.stored_priority(self._checked_priorities(priorities, idx))
        self._staged.append(_StagedInsert(idx, stored))

    def restore(self, indices: np.ndarray, stored_priorities: np.ndarray) -> None:
        """Insert rows with already-stored priorities (as `priorities` returns them), e.g. a
        replay rebuilt after a restart. Staged like `on_insert`."""
        idx = self._checked_indices(indices)
        stored = self._checked_priorities(stored_priorities, idx).astype(np.float64)
        self._staged.append(_StagedInsert(idx, stored))

    def update_priorities(
        self,
        indices: np.ndarray,
        priorities: np.ndarray,
        generations: np.ndarray | None = None,
    ) -> None:
        """New |TD errors| for sampled rows; dropped for rows overwritten since they were
        sampled (see the consistency rule in the module docstring)."""
        idx = self._checked_indices(indices)
        stored = self.stored_priority(self._checked_priorities(priorities, idx))
        if generations is None:
            expected = self._sampled_generation[idx]
        else:
            expected = np.array(generations, dtype=np.int64, copy=True)
            if expected.shape != idx.shape:
                raise ValueError(
                    f"generations must have shape {idx.shape} like indices, got {expected.shape}"
                )
        self._staged.append(_StagedUpdate(idx, stored, expected))

    # --- the reader: apply staged writes, then sample ---

    def flush(self) -> int:
        """Apply every staged write to the tree in staging order; return the rows written."""
        with self._tree_lock:
            return self._apply_staged()

    def sample(
        self, storage: ReplayStorage | None, batch_size: int, rng: np.random.Generator
    ) -> SampleResult:
        """Apply staged writes, then draw `batch_size` rows by stratified sampling.

        `storage` is unused (the tree knows which rows hold data) and may be None.
        """
        del storage
        with self._tree_lock:
            self._apply_staged()
            if not self._tree.total > 0:
                raise ValueError("cannot sample: no row has been inserted (staged or applied)")
            indices, stored = self._tree.sample_with_values(batch_size, rng)
            generations = self._generation[indices]
            self._sampled_generation[indices] = generations
            beta = self.current_beta
            self._samples += 1
        weights = (stored / stored.min()) ** -beta
        return SampleResult(
            indices=indices, weights=weights.astype(np.float32), generations=generations
        )

    def priorities(self, indices: np.ndarray) -> np.ndarray:
        """Stored priorities of `indices` after applying staged writes (0.0 = never inserted)."""
        idx = self._checked_indices(indices)
        with self._tree_lock:
            self._apply_staged()
            return self._tree.get(idx)

    @property
    def total(self) -> float:
        """Sum of stored priorities of applied writes."""
        return self._tree.total

    def _apply_staged(self) -> int:
        written = 0
        for _ in range(len(self._staged)):  # what was staged when we began; later is next
            entry = self._staged.popleft()
            if isinstance(entry, _StagedInsert):
                written += self._apply_insert(entry)
            else:
                written += self._apply_update(entry)
        return written

    def _apply_insert(self, entry: _StagedInsert) -> int:
        stored = entry.stored
        if stored is None:
            stored = np.full(entry.indices.shape[0], self._max_priority)
        elif stored.size:
            self._max_priority = max(self._max_priority, float(stored.max()))
        self._tree.set(entry.indices, stored)
        self._generation[entry.indices] += 1
        return int(entry.indices.shape[0])

    def _apply_update(self, entry: _StagedUpdate) -> int:
        expected = entry.generations
        current = self._generation[entry.indices]
        fresh = (expected == _NO_GENERATION) | (expected == current)
        if fresh.all():
            indices, stored = entry.indices, entry.stored
        else:
            self.dropped_updates += int(fresh.size - fresh.sum())
            indices, stored = entry.indices[fresh], entry.stored[fresh]
        if stored.size:
            self._max_priority = max(self._max_priority, float(stored.max()))
        self._tree.set(indices, stored)
        return int(indices.shape[0])

    def _checked_indices(self, indices: np.ndarray) -> np.ndarray:
        idx = np.array(indices, copy=True)  # the caller may reuse its buffer after staging
        if idx.ndim != 1 or (idx.size and idx.dtype.kind not in "iu"):
            raise ValueError(f"indices must be a 1-D integer array, got {idx.dtype} {idx.shape}")
        idx = idx.astype(np.int64, copy=False)
        if idx.size and (idx.min() < 0 or idx.max() >= self._capacity):
            bad = idx[(idx < 0) | (idx >= self._capacity)][0]
            raise IndexError(f"index {bad} out of range for capacity {self._capacity}")
        return idx

    def _checked_priorities(self, priorities: np.ndarray, idx: np.ndarray) -> np.ndarray:
        p = np.asarray(priorities, dtype=np.float64)
        if p.shape != idx.shape:
            raise ValueError(f"priorities must have shape {idx.shape} like indices, got {p.shape}")
        bad = np.flatnonzero(~(np.isfinite(p) & (p >= 0)))
        if bad.size:
            raise ValueError(
                f"priorities must be finite and >= 0 (|TD error|), got {float(p[bad[0]])!r} "
                f"at position {bad[0]}"
            )
        return p


def _check_range(
    name: str, value: float, low: float, high: float | None, open_low: bool = False
) -> None:
    ok = isinstance(value, int | float) and not isinstance(value, bool) and np.isfinite(value)
    ok = ok and (value > low if open_low else value >= low) and (high is None or value <= high)
    if not ok:
        bound = f"> {low}" if open_low else f">= {low}"
        bound += f" and <= {high}" if high is not None else ""
        raise ValueError(f"{name} must be a number {bound}, got {value!r}")
