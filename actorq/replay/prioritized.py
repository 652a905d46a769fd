"""Prioritized experience replay (Schaul et al. 2016) on a K-ary sum tree, with lazy writing.

Priorities. A row's stored priority is ``(|td| + eps) ** alpha``; it is sampled with
probability ``P(i) = p_i / sum_j p_j``. New rows get the running maximum stored priority
(so each is seen at least once soon), or, Ape-X style, a priority the actor computed from
its own |TD error|. The running maximum never decreases, even when the row that set it is
overwritten (as in the reference implementations).

Importance weights. ``w_i = (N * P(i)) ** -beta``, normalised by the largest weight **in the
batch**, so the largest is exactly 1. N and the total cancel out of that ratio:
``w_i = (p_i / p_min_batch) ** -beta``. (Normalising over the buffer's minimum priority
would need a min-tree beside the sum tree, as OpenAI baselines and TorchRL keep; Dopamine
normalises by the batch maximum too.) beta is annealed linearly from `beta` to
`beta_final` over `beta_steps` calls of `sample`, then stays at `beta_final`.

Lazy writing (seed 003). Writers never touch the tree. `on_insert` (the ingest thread) and
`update_priorities` (the training thread, or several threads) validate and transform their
batch in their own thread, then append it as one entry to a staging deque: O(1) per batch,
no tree lock. Staged entries are applied to the tree, in batches, at two well-defined points
only: at the start of every `sample` and in `flush`, under the one lock that owns the tree.

Consistency rule:

1. A sample sees every write staged before it began (it applies the whole queue first).
2. Writes apply in staging order, so for one row the last staged write wins.
3. A priority update never clobbers a newer row. Every insert batch that holds a row
   bumps that row's generation by one; `sample` returns the generation of each sampled
   row (`SampleResult.generations`), and an update for a row whose generation has
   changed since (the row was overwritten by a newer transition) is dropped when it is
   applied and counted in `dropped_updates`. Pass ``generations=result.generations``
   to `update_priorities`; if you do not, the generation recorded when this sampler last
   sampled the row is used, which is the same thing for one training thread. An update
   for a row never sampled is checked against nothing and applies.
"""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass

import numba
import numpy as np

from actorq.replay.sampler import SampleResult
from actorq.replay.storage import ReplayStorage
from actorq.replay.sumtree import DEFAULT_BRANCHING, SumTree, _set_kernel

_NO_GENERATION = -1
_OK, _BAD_INDEX, _BAD_VALUE = 0, 1, 2


@dataclass(frozen=True)
class _StagedInsert:
    indices: np.ndarray  # int64, the caller's order
    stored: np.ndarray | None  # float64 stored priorities, or None for "the running max"
    touched: np.ndarray  # indices sorted (done by the writer, so the apply step need not)


@dataclass(frozen=True)
class _StagedUpdate:
    indices: np.ndarray
    stored: np.ndarray
    generations: np.ndarray  # int64, _NO_GENERATION where unchecked
    touched: np.ndarray


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
        self._generation = np.zeros(self._capacity, np.int64)  # insert batches per row
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

    @property
    def total(self) -> float:
        """Sum of the stored priorities applied so far."""
        return self._tree.total

    def stored_priority(self, priorities: np.ndarray) -> np.ndarray:
        """|TD error| -> stored priority ``(|td| + eps) ** alpha`` (float64)."""
        return (np.asarray(priorities, np.float64) + self.eps) ** self.alpha

    # --- writers: validate, transform, stage; never touch the tree ---

    def on_insert(self, indices: np.ndarray, priorities: np.ndarray | None = None) -> None:
        """Rows were (over)written in the storage: give them the running max priority, or
        `priorities` (|TD errors| computed by the actor, Ape-X style) when given."""
        idx = self._copied_indices(indices)
        stored = None if priorities is None else self._stored(idx, priorities, transform=True)
        if stored is None:
            self._check_index_range(idx)
        self._staged.append(_StagedInsert(idx, stored, np.sort(idx)))

    def restore(self, indices: np.ndarray, stored_priorities: np.ndarray) -> None:
        """Insert rows with already-stored priorities (as `priorities` returns them), e.g. a
        replay rebuilt after a restart. Staged like `on_insert`."""
        idx = self._copied_indices(indices)
        stored = self._stored(idx, stored_priorities, transform=False)
        self._staged.append(_StagedInsert(idx, stored, np.sort(idx)))

    def update_priorities(
        self,
        indices: np.ndarray,
        priorities: np.ndarray,
        generations: np.ndarray | None = None,
    ) -> None:
        """New |TD errors| for sampled rows; dropped for rows overwritten since they were
        sampled (see the consistency rule in the module docstring)."""
        idx = self._copied_indices(indices)
        stored = self._stored(idx, priorities, transform=True)
        if generations is None:
            expected = self._sampled_generation[idx]
        else:
            expected = np.array(generations, dtype=np.int64, copy=True)
            if expected.shape != idx.shape:
                raise ValueError(
                    f"generations must have shape {idx.shape} like indices, got {expected.shape}"
                )
        self._staged.append(_StagedUpdate(idx, stored, expected, np.sort(idx)))

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
            weights = np.empty(indices.shape[0], np.float32)
            generations = np.empty(indices.shape[0], np.int64)
            _after_sample(
                self._generation, self._sampled_generation, indices, stored,
                self.current_beta, weights, generations,
            )  # fmt: skip
            self._samples += 1
        return SampleResult(indices=indices, weights=weights, generations=generations)

    def priorities(self, indices: np.ndarray) -> np.ndarray:
        """Stored priorities of `indices` after applying staged writes (0.0 = never inserted)."""
        idx = self._copied_indices(indices)
        with self._tree_lock:
            self._apply_staged()
            return self._tree.get(idx)

    def _apply_staged(self) -> int:
        written = 0
        args = (*self._tree._kernel_args(), self._tree._nodes, self._generation)
        for _ in range(len(self._staged)):  # what was staged when we began; later is next
            entry = self._staged.popleft()
            if isinstance(entry, _StagedInsert):
                use_max = entry.stored is None
                stored = _EMPTY if entry.stored is None else entry.stored
                top = _apply_insert(
                    *args, entry.indices, stored, use_max, self._max_priority, entry.touched
                )
                written += entry.indices.shape[0]
            else:
                dropped, top = _apply_update(
                    *args, entry.indices, entry.stored, entry.generations, entry.touched
                )
                self.dropped_updates += dropped
                written += entry.indices.shape[0] - dropped
            self._max_priority = max(self._max_priority, top)
        return written

    def _copied_indices(self, indices: np.ndarray) -> np.ndarray:
        """An int64 copy: the caller may reuse its buffer as soon as the call returns."""
        idx = np.asarray(indices)
        if idx.ndim != 1 or (idx.size and idx.dtype.kind not in "iu"):
            raise ValueError(f"indices must be a 1-D integer array, got {idx.dtype} {idx.shape}")
        return np.array(idx, dtype=np.int64, copy=True)

    def _check_index_range(self, idx: np.ndarray) -> None:
        if idx.size and (idx.min() < 0 or idx.max() >= self._capacity):
            bad = idx[(idx < 0) | (idx >= self._capacity)][0]
            raise IndexError(f"index {bad} out of range for capacity {self._capacity}")

    def _stored(self, idx: np.ndarray, priorities: np.ndarray, transform: bool) -> np.ndarray:
        """Validate indices and priorities together and return the stored priorities."""
        p = np.ascontiguousarray(priorities, dtype=np.float64)
        if p.shape != idx.shape:
            raise ValueError(f"priorities must have shape {idx.shape} like indices, got {p.shape}")
        stored = np.empty(p.shape[0], np.float64)
        eps, alpha = (self.eps, self.alpha) if transform else (0.0, 1.0)
        code, pos = _prepare(idx, p, self._capacity, eps, alpha, stored)
        if code == _BAD_INDEX:
            raise IndexError(f"index {idx[pos]} out of range for capacity {self._capacity}")
        if code == _BAD_VALUE:
            what = "(|TD error|)" if transform else "(stored priorities)"
            raise ValueError(
                f"priorities must be finite and >= 0 {what}, got {float(p[pos])!r} "
                f"at position {pos}"
            )
        return stored


_EMPTY = np.empty(0, np.float64)


def _check_range(
    name: str, value: float, low: float, high: float | None, open_low: bool = False
) -> None:
    ok = isinstance(value, int | float) and not isinstance(value, bool) and np.isfinite(value)
    ok = ok and (value > low if open_low else value >= low) and (high is None or value <= high)
    if not ok:
        bound = f"> {low}" if open_low else f">= {low}"
        bound += f" and <= {high}" if high is not None else ""
        raise ValueError(f"{name} must be a number {bound}, got {value!r}")


# --- compiled helpers: one call per staged batch instead of a dozen numpy calls ---


@numba.njit(nogil=True, cache=True)
def _prepare(idx, priorities, capacity, eps, alpha, stored):  # pragma: no cover - compiled
    """Check indices and priorities; stored = (p + eps) ** alpha. Returns (code, position)."""
    for j in range(idx.shape[0]):
        if idx[j] < 0 or idx[j] >= capacity:
            return _BAD_INDEX, j
        p = priorities[j]
        if not (p >= 0 and p < np.inf):
            return _BAD_VALUE, j
        stored[j] = p if alpha == 1.0 and eps == 0.0 else (p + eps) ** alpha
    return _OK, 0


@numba.njit(nogil=True, cache=True)
def _apply_insert(
    tree, offsets, k, shift, height, nodes, generation, idx, stored, use_max, max_priority, touched
):  # pragma: no cover - compiled
    """Write an insert batch and bump each distinct row's generation once. Returns the
    largest stored priority it brought (0.0 if none)."""
    n = idx.shape[0]
    top = 0.0
    if use_max:
        values = np.full(n, max_priority)
    else:
        values = stored
        for j in range(n):
            top = max(top, stored[j])
    _set_kernel(tree, offsets, k, shift, height, nodes, idx, values, touched.copy())
    previous = -1
    for j in range(n):
        if touched[j] != previous:
            generation[touched[j]] += 1
            previous = touched[j]
    return top


@numba.njit(nogil=True, cache=True)
def _apply_update(
    tree, offsets, k, shift, height, nodes, generation, idx, stored, expected, touched
):  # pragma: no cover - compiled
    """Write the updates whose row generation still matches; return (dropped, top)."""
    n = idx.shape[0]
    keep_idx = np.empty(n, np.int64)
    keep_val = np.empty(n, np.float64)
    kept = 0
    top = 0.0
    for j in range(n):
        if expected[j] == _NO_GENERATION or expected[j] == generation[idx[j]]:
            keep_idx[kept] = idx[j]
            keep_val[kept] = stored[j]
            top = max(top, stored[j])
            kept += 1
    # Refreshing parents of dropped rows too is harmless: parents are recomputed, not nudged.
    _set_kernel(tree, offsets, k, shift, height, nodes, keep_idx[:kept], keep_val[:kept], touched)
    return n - kept, top


@numba.njit(nogil=True, cache=True)
def _after_sample(
    generation, sampled_generation, indices, stored, beta, weights, generations
):  # pragma: no cover
    """Record sampled generations; w_i = (p_i / p_min) ** -beta, the batch max being 1."""
    lowest = np.inf
    for j in range(indices.shape[0]):
        lowest = min(lowest, stored[j])
        generations[j] = generation[indices[j]]
        sampled_generation[indices[j]] = generations[j]
    for j in range(indices.shape[0]):
        weights[j] = (lowest / stored[j]) ** beta
