"""A K-ary sum tree over fp64 priorities, with batched set, prefix-sum search and sampling.

Layout (the cache-friendly part of seed 003): every node lives in ONE contiguous, 64-byte
aligned array, level by level from the root down. The K children of a node are adjacent
and start on a multiple of K, so with K=8 fp64 (or K=16 fp32) one child group is exactly
one 64-byte cache line: a descent touches one line per level, and a K-ary tree has
log_K(capacity) levels instead of log_2(capacity).

Logically the tree has K**height leaves (capacity padded up to a power of K). Only the
part that can ever be non-zero is stored: level ``l`` keeps ceil(capacity / K**(height-l))
nodes rounded up to a whole child group, so K=64 at capacity 2**20 needs ~2**20 leaves, not
2**24. The root is padded to one child group so every level starts cache-line aligned.

Exactness: an update never adds a delta to a parent. After the leaves of a batch are
written, every touched parent is recomputed as the sum of its K children, level by level.
So every internal node is always the same deterministic fp64 function of the current
leaves, whatever the history: there is no accumulated rounding error after millions of
updates (a delta scheme drifts; ``+x`` then ``-x`` does not return to the old value).
`rebuild` recomputes every internal node the same way; it is for bulk loads and checks,
never needed to undo drift. fp64 makes the remaining error of one sum ~1e-16 relative.

K=2 in this same implementation is the "binary tree" baseline of the benchmark.

The kernels are numba-compiled (``nogil=True``: sampling releases the GIL, so an ingest
thread keeps running) and cached on disk; the first call in a fresh environment compiles
them (see BENCHMARKS.md for the time).
"""

from __future__ import annotations

import math

import numba
import numpy as np

DEFAULT_BRANCHING = 16
"""Chosen by measurement (BENCHMARKS.md section 6): fastest batched sample at 2**20."""

_ALIGN_BYTES = 64
_OK, _BAD_INDEX, _BAD_VALUE = 0, 1, 2


class SumTree:
    """Fixed-capacity K-ary sum tree: leaves hold non-negative priorities, parents their sums.

    Not thread-safe by itself: `actorq.replay.prioritized.PrioritizedSampler` serialises
    access and stages concurrent writes (lazy writing).
    """

    def __init__(
        self, capacity: int, branching: int = DEFAULT_BRANCHING, dtype: type = np.float64
    ) -> None:
        if isinstance(capacity, bool) or not isinstance(capacity, int | np.integer):
            raise ValueError(f"capacity must be an int >= 1, got {capacity!r}")
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {capacity}")
        if isinstance(branching, bool) or not isinstance(branching, int | np.integer):
            raise ValueError(f"branching must be an int >= 2, got {branching!r}")
        if branching < 2:
            raise ValueError(f"branching must be >= 2, got {branching}")
        if np.dtype(dtype) not in (np.dtype(np.float64), np.dtype(np.float32)):
            raise ValueError(f"dtype must be float64 or float32, got {np.dtype(dtype)}")
        self._capacity = int(capacity)
        self._k = int(branching)
        self._height = _height(self._capacity, self._k)
        self._nodes, self._offsets = _level_layout(self._capacity, self._k, self._height)
        # Two arrays of the same layout in one aligned allocation: node sums (the tree
        # proper) and, per child group, the running sums the descent compares against.
        size = _round_up(int(self._offsets[-1]), _ALIGN_BYTES // np.dtype(dtype).itemsize)
        buffer = _aligned_zeros(2 * size, np.dtype(dtype))
        self._sums, self._prefix = buffer[:size], buffer[size:]
        leaf_start = int(self._offsets[self._height])
        self._leaves = self._sums[leaf_start : leaf_start + self._capacity]

    @property
    def capacity(self) -> int:
        return self._capacity

    @property
    def branching(self) -> int:
        return self._k

    @property
    def height(self) -> int:
        """Levels below the root; the leaves are level `height`."""
        return self._height

    @property
    def dtype(self) -> np.dtype:
        return self._sums.dtype

    @property
    def total(self) -> float:
        """Sum of all leaves (the root)."""
        return float(self._sums[0])

    @property
    def nbytes(self) -> int:
        return int(self._sums.nbytes + self._prefix.nbytes)

    def set(self, indices: np.ndarray, values: np.ndarray) -> None:
        """Write `values` at leaf `indices` and refresh their ancestors.

        Duplicate indices in one call: the last occurrence wins. Nothing is written if any
        index or value is bad.
        """
        idx = _as_index_array(indices)
        vals = np.ascontiguousarray(values, dtype=self._sums.dtype)
        if vals.ndim != 1 or vals.shape[0] != idx.shape[0]:
            raise ValueError(
                f"values must be a 1-D array as long as indices ({idx.shape[0]}), "
                f"got shape {np.shape(values)}"
            )
        code, pos = _set_kernel(*self._kernel_args(), self._nodes, self._k, self._height, idx, vals)
        if code != _OK:
            self._raise_bad_input(code, pos, idx, vals)

    def get(self, indices: np.ndarray) -> np.ndarray:
        """The leaf values at `indices` (a fresh array of the tree's dtype)."""
        idx = _as_index_array(indices)
        self._check_range(idx)
        return self._leaves[idx]

    def find_prefixsum(self, targets: np.ndarray) -> np.ndarray:
        """For each target, the smallest leaf i with cumsum(leaves[:i+1]) > target (int64).

        Never returns a zero-priority leaf or a leaf >= capacity: a target at or past the
        total (or one that rounding pushes past a node's sum) lands on the last non-zero
        leaf. Targets must be finite and >= 0, and the tree must have a non-zero total.
        """
        t = np.ascontiguousarray(targets, dtype=np.float64)
        if t.ndim != 1:
            raise ValueError(f"targets must be 1-D, got shape {t.shape}")
        bad = np.flatnonzero(~(np.isfinite(t) & (t >= 0)))
        if bad.size:
            raise ValueError(
                f"targets must be finite and >= 0, got {float(t[bad[0]])!r} at position {bad[0]}"
            )
        self._require_nonzero_total()
        out = np.empty(t.shape[0], np.int64)
        _descend_many(*self._kernel_args(), self._k, self._height, t, out)
        return out

    def sample(self, batch_size: int, rng: np.random.Generator) -> np.ndarray:
        """Stratified sampling: split [0, total) into `batch_size` equal segments and draw one
        uniform target in each, so a batch covers the whole distribution (sorted indices)."""
        indices, _ = self.sample_with_values(batch_size, rng)
        return indices

    def sample_with_values(
        self, batch_size: int, rng: np.random.Generator
    ) -> tuple[np.ndarray, np.ndarray]:
        """Like `sample`, and also the leaf value of each sampled index (one kernel call)."""
        if isinstance(batch_size, bool) or not isinstance(batch_size, int | np.integer):
            raise ValueError(f"batch_size must be an int >= 1, got {batch_size!r}")
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self._require_nonzero_total()
        uniforms = rng.random(int(batch_size))
        out = np.empty(int(batch_size), np.int64)
        values = np.empty(int(batch_size), np.float64)
        _sample_kernel(*self._kernel_args(), self._k, self._height, uniforms, out, values)
        return out, values

    def rebuild(self) -> None:
        """Recompute every internal node from the leaves (the same sums `set` keeps)."""
        _rebuild_kernel(*self._kernel_args(), self._nodes, self._k, self._height)

    def leaves(self) -> np.ndarray:
        """A read-only view of the `capacity` leaves."""
        view = self._leaves.view()
        view.flags.writeable = False
        return view

    def level(self, level: int) -> np.ndarray:
        """A read-only view of the non-padding nodes of one level (0 = root), for checks."""
        if not 0 <= level <= self._height:
            raise ValueError(f"level must be in [0, {self._height}], got {level}")
        start = int(self._offsets[level])
        view = self._sums[start : start + int(self._nodes[level])].view()
        view.flags.writeable = False
        return view

    def _kernel_args(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        return self._sums, self._prefix, self._offsets

    def _check_range(self, idx: np.ndarray) -> None:
        if idx.size and (idx.min() < 0 or idx.max() >= self._capacity):
            bad = idx[(idx < 0) | (idx >= self._capacity)][0]
            raise IndexError(f"index {bad} out of range for capacity {self._capacity}")

    def _require_nonzero_total(self) -> None:
        if not self._sums[0] > 0:
            raise ValueError("cannot search or sample: every priority is zero")

    def _raise_bad_input(self, code: int, pos: int, idx: np.ndarray, vals: np.ndarray) -> None:
        if code == _BAD_INDEX:
            raise IndexError(
                f"index {idx[pos]} at position {pos} out of range for capacity {self._capacity}"
            )
        raise ValueError(
            f"priority values must be finite and >= 0, got {float(vals[pos])!r} at position {pos}"
        )


def _as_index_array(indices: object) -> np.ndarray:
    idx = np.asarray(indices)
    if idx.ndim != 1:
        raise ValueError(f"indices must be 1-D, got shape {idx.shape}")
    if idx.size and idx.dtype.kind not in "iu":
        raise ValueError(f"indices must be integers, got dtype {idx.dtype}")
    return np.ascontiguousarray(idx, dtype=np.int64)


def _height(capacity: int, k: int) -> int:
    """Smallest h >= 1 with k**h >= capacity (integer arithmetic, no log rounding)."""
    height, span = 1, k
    while span < capacity:
        height += 1
        span *= k
    return height


def _level_layout(capacity: int, k: int, height: int) -> tuple[np.ndarray, np.ndarray]:
    """Per level: how many nodes can be non-zero, and where each level starts.

    Levels are stored back to back, each padded to a whole number of K-node child groups,
    so every child group starts at a multiple of K (one cache line when K*itemsize == 64).
    Returns (nodes[height+1], offsets[height+2]); offsets[-1] is the array size.
    """
    nodes = np.empty(height + 1, np.int64)
    offsets = np.zeros(height + 2, np.int64)
    for level in range(height + 1):
        span = k ** (height - level)  # leaves under one node of this level
        nodes[level] = -(-capacity // span)
        stored = math.ceil(nodes[level] / k) * k
        offsets[level + 1] = offsets[level] + stored
    return nodes, offsets


def _round_up(n: int, multiple: int) -> int:
    return -(-n // multiple) * multiple


def _aligned_zeros(size: int, dtype: np.dtype) -> np.ndarray:
    """A zeroed 1-D array whose first element sits on a 64-byte boundary."""
    raw = np.zeros(size * dtype.itemsize + _ALIGN_BYTES, np.uint8)
    shift = (-raw.ctypes.data) % _ALIGN_BYTES
    return raw[shift : shift + size * dtype.itemsize].view(dtype)


@numba.njit(nogil=True, cache=True)
def _set_kernel(sums, prefix, offsets, nodes, k, height, idx, vals):  # pragma: no cover
    """Validate all, write leaves in order (last wins), then refresh touched ancestors.

    Returns (code, position of the first bad entry); nothing is written unless code is OK.
    """
    n = idx.shape[0]
    capacity = nodes[height]
    for j in range(n):
        if idx[j] < 0 or idx[j] >= capacity:
            return _BAD_INDEX, j
        v = vals[j]
        if not (v >= 0 and v < np.inf):  # also rejects NaN
            return _BAD_VALUE, j
    if n == 0:
        return _OK, 0
    leaf_base = offsets[height]
    for j in range(n):
        sums[leaf_base + idx[j]] = vals[j]
    touched = idx.copy()
    if not _is_sorted(touched):
        touched.sort()
    count = n
    for level in range(height - 1, -1, -1):
        count = _refresh_parents(
            sums, prefix, offsets[level], offsets[level + 1], k, touched, count
        )
    return _OK, 0


@numba.njit(nogil=True, cache=True)
def _is_sorted(a):  # pragma: no cover - compiled
    for j in range(1, a.shape[0]):  # noqa: SIM110 - numba compiles a plain loop
        if a[j] < a[j - 1]:
            return False
    return True


@numba.njit(nogil=True, cache=True)
def _refresh_group(sums, prefix, parent_base, child_base, k, parent):  # pragma: no cover
    """Recompute one child group's running sums and its parent's sum from the K children.

    The parent gets the group's last running sum, so parent == fl-sum of its children in
    order, exactly, whatever happened before.
    """
    first = child_base + parent * k
    acc = sums[first]
    prefix[first] = acc
    for c in range(1, k):
        acc += sums[first + c]
        prefix[first + c] = acc
    sums[parent_base + parent] = acc


@numba.njit(nogil=True, cache=True)
def _refresh_parents(sums, prefix, parent_base, child_base, k, touched, count):  # pragma: no cover
    """Refresh each distinct parent of the sorted child indices touched[:count]; leave the
    distinct parent indices in touched[:result] for the next level up."""
    out = 0
    previous = -1
    for j in range(count):
        parent = touched[j] // k
        if parent == previous:
            continue
        previous = parent
        _refresh_group(sums, prefix, parent_base, child_base, k, parent)
        touched[out] = parent
        out += 1
    return out


_LOCKSTEP = 16
"""Descents advanced together, one level at a time: their loads are independent, so the
CPU overlaps their cache misses instead of waiting on one root-to-leaf chain at a time
(measured ~2.5x faster than one descent after another at 2**20)."""


@numba.njit(nogil=True, cache=True)
def _descend_many(sums, prefix, offsets, k, height, targets, out):  # pragma: no cover
    """For each target, the leaf whose prefix-sum interval holds it.

    At each level the child is the number of running sums <= target: a branch-free count
    over one contiguous child group. A zero child never raises the running sum, so it is
    never chosen. If the target is at or past the node's sum (by rounding, or a target >=
    total) the last non-zero child is taken and the descent stays on the right edge.
    """
    n = targets.shape[0]
    node = np.empty(_LOCKSTEP, np.int64)
    left = np.empty(_LOCKSTEP, np.float64)
    for start in range(0, n, _LOCKSTEP):
        m = min(_LOCKSTEP, n - start)
        for g in range(m):
            node[g] = 0
            left[g] = targets[start + g]
        for level in range(1, height + 1):
            base = offsets[level]
            for g in range(m):
                first = base + node[g] * k
                target = left[g]
                below = 0
                for c in range(k):
                    below += prefix[first + c] <= target
                if below == k:
                    below = _last_nonzero(sums, first, k)
                    left[g] = np.inf
                elif below > 0:
                    left[g] = target - prefix[first + below - 1]
                node[g] = node[g] * k + below
        for g in range(m):
            out[start + g] = node[g]


@numba.njit(nogil=True, cache=True)
def _last_nonzero(sums, first, k):  # pragma: no cover - compiled
    for c in range(k - 1, -1, -1):
        if sums[first + c] > 0:
            return c
    return 0


@numba.njit(nogil=True, cache=True)
def _sample_kernel(sums, prefix, offsets, k, height, uniforms, out, values):  # pragma: no cover
    """One target per equal segment of [0, total): (j + u_j) * total / B, kept < total."""
    n = uniforms.shape[0]
    total = sums[0]
    segment = total / n
    below_total = np.nextafter(total, 0.0)
    targets = np.empty(n, np.float64)
    for j in range(n):
        targets[j] = min((j + uniforms[j]) * segment, below_total)
    _descend_many(sums, prefix, offsets, k, height, targets, out)
    leaf_base = offsets[height]
    for j in range(n):
        values[j] = sums[leaf_base + out[j]]


@numba.njit(nogil=True, cache=True)
def _rebuild_kernel(sums, prefix, offsets, nodes, k, height):  # pragma: no cover - compiled
    for level in range(height - 1, -1, -1):
        for parent in range(nodes[level]):
            _refresh_group(sums, prefix, offsets[level], offsets[level + 1], k, parent)
