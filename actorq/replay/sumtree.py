"""A K-ary sum tree over fp64 priorities, with batched set, prefix-sum search and sampling.

Layout (the cache-friendly part of seed 003). Every node lives in ONE contiguous, 64-byte
aligned array, level by level from the root down. The K children of a node form a child
group stored as one block of 2K values: the K children's sums, then their K running sums
(inclusive prefix sums within the group). With K=8 fp64 each half is exactly one 64-byte
cache line, and the two lines are adjacent:

* a descent reads one line per level (the running sums) and picks the child by counting
  how many running sums are <= the target: branch-free, no dependency chain across the
  K children, and a K-ary tree has log_K(capacity) levels instead of log_2(capacity);
* an update rewrites one block per touched parent (two adjacent lines).

Logically the tree has K**height leaves (capacity padded up to a power of K). Only the
part that can ever be non-zero is stored: level ``l`` keeps ceil(capacity / K**(height-l))
nodes rounded up to a whole child group, so K=64 at capacity 2**20 stores ~2**20 leaves,
not 2**24. K must be a power of two so node arithmetic is shifts and masks.

Exactness. An update never adds a delta to a parent. After the leaves of a batch are
written, every touched parent is recomputed as the sum of its K children (in order),
level by level, and its child group's running sums with it. So every internal node is
always the same deterministic fp64 function of the current leaves whatever the history:
no rounding error accumulates over millions of updates (a delta scheme drifts: ``+x`` then
``-x`` need not restore the old sum). `rebuild` recomputes everything the same way; it is
for bulk loads and checks, never needed to undo drift. fp64 keeps one sum's own rounding
~1e-16 relative.

K=2 in this same implementation is the "binary tree" baseline of the benchmark.

The kernels are numba-compiled with ``nogil=True`` (sampling releases the GIL, so an
ingest thread keeps running) and cached on disk next to this file; the first call in a
fresh environment compiles them (BENCHMARKS.md gives the time).
"""

from __future__ import annotations

import numba
import numpy as np

DEFAULT_BRANCHING = 8
"""Chosen by measurement (BENCHMARKS.md, "K-ary sum tree"): one 64-byte line of fp64 per
half-block; sampling as fast as K=16 and updates faster."""

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
        _check_int("capacity", capacity, "an int >= 1")
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {capacity}")
        _check_int("branching", branching, "a power of two >= 2")
        if branching < 2 or branching & (branching - 1):
            raise ValueError(f"branching must be a power of two >= 2, got {branching}")
        if np.dtype(dtype) not in (np.dtype(np.float64), np.dtype(np.float32)):
            raise ValueError(f"dtype must be float64 or float32, got {np.dtype(dtype)}")
        self._capacity = int(capacity)
        self._k = int(branching)
        self._shift = self._k.bit_length() - 1
        self._height = _height(self._capacity, self._k)
        self._nodes, self._offsets = _level_layout(self._capacity, self._k, self._height)
        self._tree = _aligned_zeros(int(self._offsets[-1]), np.dtype(dtype))

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
        return self._tree.dtype

    @property
    def total(self) -> float:
        """Sum of all leaves (the root)."""
        return float(self._tree[0])

    @property
    def nbytes(self) -> int:
        return int(self._tree.nbytes)

    def set(self, indices: np.ndarray, values: np.ndarray) -> None:
        """Write `values` at leaf `indices` and refresh their ancestors.

        Duplicate indices in one call: the last occurrence wins. Nothing is written if any
        index or value is bad (IndexError / ValueError naming the first bad one).
        """
        idx = _as_index_array(indices)
        vals = np.ascontiguousarray(values, dtype=self._tree.dtype)
        if vals.ndim != 1 or vals.shape[0] != idx.shape[0]:
            raise ValueError(
                f"values must be a 1-D array as long as indices ({idx.shape[0]}), "
                f"got shape {np.shape(values)}"
            )
        # numpy sorts 256 ints ~4x faster than numba's sort; the kernel still writes the
        # leaves in the caller's order (last wins) and uses the sorted copy for parents.
        touched = np.sort(idx)
        code, pos = _set_kernel(*self._kernel_args(), self._nodes, idx, vals, touched)
        if code != _OK:
            self._raise_bad_input(code, pos, idx, vals)

    def get(self, indices: np.ndarray) -> np.ndarray:
        """The leaf values at `indices` (a fresh array of the tree's dtype)."""
        idx = _as_index_array(indices)
        self._check_range(idx)
        return self._tree[self._slots(self._height, idx)]

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
        _descend_many(*self._kernel_args(), t, out)
        return out

    def sample(self, batch_size: int, rng: np.random.Generator) -> np.ndarray:
        """Stratified sampling: split [0, total) into `batch_size` equal segments and draw one
        uniform target in each, so a batch covers the whole distribution (sorted indices)."""
        indices, _ = self.sample_with_values(batch_size, rng)
        return indices

    def sample_with_values(
        self, batch_size: int, rng: np.random.Generator
    ) -> tuple[np.ndarray, np.ndarray]:
        """Like `sample`, and also each sampled leaf's value (float64), in one kernel call."""
        _check_int("batch_size", batch_size, "an int >= 1")
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self._require_nonzero_total()
        uniforms = rng.random(int(batch_size))
        out = np.empty(int(batch_size), np.int64)
        values = np.empty(int(batch_size), np.float64)
        _sample_kernel(*self._kernel_args(), uniforms, out, values)
        return out, values

    def rebuild(self) -> None:
        """Recompute every internal node from the leaves (the same sums `set` keeps)."""
        _rebuild_kernel(*self._kernel_args(), self._nodes)

    def leaves(self) -> np.ndarray:
        """A copy of the `capacity` leaf values."""
        return self.level(self._height)

    def level(self, level: int) -> np.ndarray:
        """A copy of the non-padding node sums of one level (0 = root), for checks."""
        if not 0 <= level <= self._height:
            raise ValueError(f"level must be in [0, {self._height}], got {level}")
        return self._tree[self._slots(level, np.arange(int(self._nodes[level])))]

    def _slots(self, level: int, nodes: np.ndarray) -> np.ndarray:
        """Array positions of the sums of `nodes` on `level` (see the block layout)."""
        group, lane = nodes >> self._shift, nodes & (self._k - 1)
        return int(self._offsets[level]) + (group << (self._shift + 1)) + lane

    def _kernel_args(self) -> tuple[np.ndarray, np.ndarray, int, int, int]:
        return self._tree, self._offsets, self._k, self._shift, self._height

    def _check_range(self, idx: np.ndarray) -> None:
        if idx.size and (idx.min() < 0 or idx.max() >= self._capacity):
            bad = idx[(idx < 0) | (idx >= self._capacity)][0]
            raise IndexError(f"index {bad} out of range for capacity {self._capacity}")

    def _require_nonzero_total(self) -> None:
        if not self._tree[0] > 0:
            raise ValueError("cannot search or sample: every priority is zero")

    def _raise_bad_input(self, code: int, pos: int, idx: np.ndarray, vals: np.ndarray) -> None:
        if code == _BAD_INDEX:
            raise IndexError(
                f"index {idx[pos]} at position {pos} out of range for capacity {self._capacity}"
            )
        raise ValueError(
            f"priority values must be finite and >= 0, got {float(vals[pos])!r} at position {pos}"
        )


def _check_int(name: str, value: object, expected: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise ValueError(f"{name} must be {expected}, got {value!r}")


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
    """Per level: how many nodes can be non-zero, and where the level's blocks start.

    A level is a run of 2K-value blocks (K sums, then K running sums), one per child group;
    the root level is one block. Returns (nodes[height+1], offsets[height+2]); offsets[-1]
    is the array size. Every offset is a multiple of 2K.
    """
    nodes = np.empty(height + 1, np.int64)
    offsets = np.zeros(height + 2, np.int64)
    for level in range(height + 1):
        span = k ** (height - level)  # leaves under one node of this level
        nodes[level] = -(-capacity // span)
        groups = -(-int(nodes[level]) // k)
        offsets[level + 1] = offsets[level] + groups * 2 * k
    return nodes, offsets


def _aligned_zeros(size: int, dtype: np.dtype) -> np.ndarray:
    """A zeroed 1-D array whose first element sits on a 64-byte boundary."""
    raw = np.zeros(size * dtype.itemsize + _ALIGN_BYTES, np.uint8)
    shift = (-raw.ctypes.data) % _ALIGN_BYTES
    return raw[shift : shift + size * dtype.itemsize].view(dtype)


# --- compiled kernels. Block of parent p's children on level l+1:
#     tree[offsets[l+1] + p*2K : +K] are their sums, [+K : +2K] their running sums;
#     the sum of node i on level l sits at offsets[l] + (i >> s)*2K + (i & (K-1)).


@numba.njit(nogil=True, cache=True)
def _slot(base, node, k, shift):  # pragma: no cover - compiled
    return base + ((node >> shift) << (shift + 1)) + (node & (k - 1))


@numba.njit(nogil=True, cache=True)
def _set_kernel(tree, offsets, k, shift, height, nodes, idx, vals, touched):  # pragma: no cover
    """Validate all, write leaves in order (last wins), then refresh touched ancestors.

    `touched` is a sorted copy of `idx` the kernel may overwrite. Returns (code, position
    of the first bad entry); nothing is written unless code is OK.
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
        tree[_slot(leaf_base, idx[j], k, shift)] = vals[j]
    count = touched.shape[0]  # may list more rows than idx: refreshing extra parents is harmless
    for level in range(height - 1, -1, -1):
        count = _refresh_parents(tree, offsets[level], offsets[level + 1], k, shift, touched, count)
    return _OK, 0


@numba.njit(nogil=True, cache=True)
def _refresh_group(tree, parent_base, child_base, k, shift, parent):  # pragma: no cover
    """Recompute one child group's running sums, and its parent's sum, from the K children.

    The parent gets the last running sum, so parent == the in-order fp sum of its
    children, exactly, whatever happened before.
    """
    first = child_base + (parent << (shift + 1))
    acc = tree[first]
    tree[first + k] = acc
    for c in range(1, k):
        acc += tree[first + c]
        tree[first + k + c] = acc
    tree[_slot(parent_base, parent, k, shift)] = acc


@numba.njit(nogil=True, cache=True)
def _refresh_parents(tree, parent_base, child_base, k, shift, touched, count):  # pragma: no cover
    """Refresh each distinct parent of the sorted child indices touched[:count]; leave the
    distinct parent indices in touched[:result] for the next level up."""
    out = 0
    previous = -1
    for j in range(count):
        parent = touched[j] >> shift
        if parent == previous:
            continue
        previous = parent
        _refresh_group(tree, parent_base, child_base, k, shift, parent)
        touched[out] = parent
        out += 1
    return out


_LOCKSTEP = 16
"""Descents advanced together, one level at a time: their loads are independent, so the
CPU overlaps their cache misses instead of waiting on one root-to-leaf chain at a time
(~2.5x faster than one descent after another at 2**20, measured while choosing it)."""


@numba.njit(nogil=True, cache=True)
def _descend_many(tree, offsets, k, shift, height, targets, out):  # pragma: no cover
    """For each target, the leaf whose prefix-sum interval holds it.

    At each level the child is the number of running sums <= target: a branch-free count
    over one contiguous half-block. A zero child never raises the running sum, so it is
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
                first = base + (node[g] << (shift + 1))
                running = first + k
                target = left[g]
                below = 0
                for c in range(k):
                    below += tree[running + c] <= target
                if below == k:
                    below = _last_nonzero(tree, first, k)
                    left[g] = np.inf
                elif below > 0:
                    left[g] = target - tree[running + below - 1]
                node[g] = (node[g] << shift) + below
        for g in range(m):
            out[start + g] = node[g]


@numba.njit(nogil=True, cache=True)
def _last_nonzero(tree, first, k):  # pragma: no cover - compiled
    for c in range(k - 1, -1, -1):
        if tree[first + c] > 0:
            return c
    return 0


@numba.njit(nogil=True, cache=True)
def _sample_kernel(tree, offsets, k, shift, height, uniforms, out, values):  # pragma: no cover
    """One target per equal segment of [0, total): (j + u_j) * total / B, kept < total."""
    n = uniforms.shape[0]
    total = tree[0]
    segment = total / n
    below_total = np.nextafter(total, 0.0)
    targets = np.empty(n, np.float64)
    for j in range(n):
        targets[j] = min((j + uniforms[j]) * segment, below_total)
    _descend_many(tree, offsets, k, shift, height, targets, out)
    leaf_base = offsets[height]
    for j in range(n):
        values[j] = tree[_slot(leaf_base, out[j], k, shift)]


@numba.njit(nogil=True, cache=True)
def _rebuild_kernel(tree, offsets, k, shift, height, nodes):  # pragma: no cover - compiled
    for level in range(height - 1, -1, -1):
        for parent in range(nodes[level]):
            _refresh_group(tree, offsets[level], offsets[level + 1], k, shift, parent)
