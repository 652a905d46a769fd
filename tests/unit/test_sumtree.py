"""SumTree against a plain numpy reference: sums, prefix search, sampling, layout, errors."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from actorq.replay.sumtree import DEFAULT_BRANCHING, SumTree

BRANCHINGS = (2, 4, 8, 16, 64)
# scipy.stats.chi2.ppf(0.999, 61): a fixed critical value, so scipy is not needed.
CHI2_999_DF61 = 100.888


def reference_levels(leaves: np.ndarray, k: int, height: int) -> list[np.ndarray]:
    """Every level of an unpadded K-ary tree built with numpy, root first."""
    levels = [np.asarray(leaves, np.float64)]
    for _ in range(height):
        child = levels[0]
        child = np.concatenate([child, np.zeros(-len(child) % k)])
        levels.insert(0, child.reshape(-1, k).sum(axis=1))
    return levels


def reference_find(leaves: np.ndarray, target: float) -> int:
    """Smallest i with cumsum(leaves[:i+1]) > target; the last non-zero leaf past the end."""
    cumsum = np.cumsum(leaves)
    if target >= cumsum[-1]:
        return int(np.flatnonzero(leaves)[-1])
    return int(np.searchsorted(cumsum, target, side="right"))


def assert_matches(tree: SumTree, leaves: np.ndarray) -> None:
    np.testing.assert_array_equal(tree.leaves(), leaves)
    for level, expected in enumerate(reference_levels(leaves, tree.branching, tree.height)):
        np.testing.assert_array_equal(tree.level(level), expected[: len(tree.level(level))])
    assert tree.total == leaves.sum()


# Dyadic priorities (multiples of 1/8 below 2**10): every sum is exact in fp64, so the tree
# and numpy's reference must agree bit for bit, whatever order either adds in.
dyadic = st.integers(min_value=0, max_value=8 * 1024).map(lambda n: n / 8)
operation = st.one_of(
    st.tuples(st.just("set"), st.lists(st.tuples(st.integers(0, 10**6), dyadic), max_size=40)),
    st.tuples(st.just("insert"), st.integers(1, 300), st.integers(0, 10**6), dyadic),
    st.tuples(st.just("find"), st.lists(st.floats(0, 1.2), min_size=1, max_size=20)),
    st.tuples(st.just("sample"), st.integers(1, 64), st.integers(0, 2**32 - 1)),
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    k=st.sampled_from(BRANCHINGS),
    capacity=st.integers(1, 300),
    ops=st.lists(operation, min_size=1, max_size=25),
)
def test_random_operation_sequences_match_numpy(k: int, capacity: int, ops: list) -> None:
    tree = SumTree(capacity, k)
    leaves = np.zeros(capacity)
    for op in ops:
        if op[0] == "set":  # random rows, duplicates allowed: the last occurrence wins
            idx = np.array([i % capacity for i, _ in op[1]], np.int64)
            vals = np.array([v for _, v in op[1]])
            tree.set(idx, vals)
            for i, v in zip(idx, vals, strict=True):
                leaves[i] = v
        elif op[0] == "insert":  # a ring-buffer style contiguous block, wrapping around
            _, count, start, value = op
            idx = (start + np.arange(count)) % capacity
            tree.set(idx, np.full(count, value))
            leaves[idx] = value
        elif leaves.sum() > 0:
            check_search(tree, leaves, op)
        assert_matches(tree, leaves)


def check_search(tree: SumTree, leaves: np.ndarray, op: tuple) -> None:
    if op[0] == "find":
        # random targets, plus every exact boundary (a cumsum value), where < and <= differ
        targets = np.concatenate([np.array(op[1]) * leaves.sum(), [0.0], np.cumsum(leaves)])
        found = tree.find_prefixsum(targets)
        assert found.tolist() == [reference_find(leaves, t) for t in targets]
    else:
        _, batch, seed = op
        indices = tree.sample(batch, np.random.default_rng(seed))
        assert indices.shape == (batch,) and indices.dtype == np.int64
        assert np.all(leaves[indices] > 0), "sampled a zero-priority leaf"
        assert np.all(np.diff(indices) >= 0), "stratified targets are increasing"


@pytest.mark.parametrize("k", BRANCHINGS)
def test_sums_stay_exact_over_a_million_updates(k: int) -> None:
    """Parents are recomputed from their children, never nudged by deltas: after 1M
    random updates every internal node equals a fresh rebuild bit for bit."""
    rng = np.random.default_rng(k)
    capacity = 5000
    tree = SumTree(capacity, k)
    for _ in range(1_000_000 // 250):
        tree.set(rng.integers(0, capacity, 250), rng.random(250) * 10.0 ** rng.integers(-6, 7))
    before = [tree.level(level).copy() for level in range(tree.height + 1)]
    tree.rebuild()
    for level, nodes in enumerate(before):
        np.testing.assert_array_equal(tree.level(level), nodes)
    assert tree.total == pytest.approx(math.fsum(tree.leaves()), rel=1e-13, abs=0)


def test_delta_updates_would_drift_but_this_tree_does_not() -> None:
    """The failure a delta scheme has: +1e16 then -1e16 loses the small leaves' sum."""
    tree = SumTree(8, 2)
    tree.set(np.arange(8), np.full(8, 0.1))
    tree.set(np.array([0]), np.array([1e16]))
    tree.set(np.array([0]), np.array([0.1]))
    assert tree.total == pytest.approx(0.8, rel=1e-15)


@pytest.mark.parametrize("k", (2, 4, 16))
def test_sampled_frequencies_match_priorities(k: int) -> None:
    """Chi-square goodness of fit at a fixed seed: 62 non-zero leaves, df = 61, p = 0.001.

    Stratified sampling has less variance than independent draws, so the test is
    conservative; priorities ignored would give a statistic in the thousands."""
    rng = np.random.default_rng(1234)
    priorities = rng.uniform(0.5, 5.0, 64)
    priorities[[3, 40]] = 0.0  # never sampled
    tree = SumTree(64, k)
    tree.set(np.arange(64), priorities)
    counts = np.zeros(64)
    for _ in range(400):
        np.add.at(counts, tree.sample(256, rng), 1)
    assert counts[3] == counts[40] == 0
    nonzero = priorities > 0
    expected = counts.sum() * priorities[nonzero] / priorities.sum()
    statistic = float(((counts[nonzero] - expected) ** 2 / expected).sum())
    assert statistic < CHI2_999_DF61


def test_stratified_sample_puts_one_target_in_each_segment() -> None:
    tree = SumTree(4, 2)
    tree.set(np.arange(4), np.ones(4))
    # segments [0,1), [1,2), [2,3), [3,4): one draw in each lands on each leaf once
    assert tree.sample(4, np.random.default_rng(0)).tolist() == [0, 1, 2, 3]


def test_find_never_returns_zero_or_padding_leaves() -> None:
    tree = SumTree(10, 4)  # 16 logical leaves, 6 of them padding
    tree.set(np.arange(10), np.array([0, 1, 0, 0, 2, 0, 0, 0, 3, 0.0]))
    found = tree.find_prefixsum(np.array([0.0, 0.999, 1.0, 2.999, 3.0, 5.999, 6.0, 1e9]))
    assert found.tolist() == [1, 1, 4, 4, 8, 8, 8, 8]


@pytest.mark.parametrize("k", (2, 8, 16, 64))
def test_layout_is_one_aligned_array_of_child_group_blocks(k: int) -> None:
    capacity = 2**12 + 3
    tree = SumTree(capacity, k)
    assert tree._tree.ctypes.data % 64 == 0  # one allocation, cache-line aligned
    assert all(int(offset) % (2 * k) == 0 for offset in tree._offsets)  # whole blocks
    assert k ** (tree.height - 1) < capacity <= k**tree.height
    tree.set(np.arange(capacity), np.ones(capacity))
    block = tree._offsets[tree.height]  # the first leaf block: K sums, then K running sums
    np.testing.assert_array_equal(
        tree._tree[block : block + 2 * k], [1.0] * k + list(range(1, k + 1))
    )
    # only the part that can be non-zero is stored: ~2 * capacity * K/(K-1) values
    assert tree.nbytes <= 8 * 2 * (capacity * k / (k - 1) + 2 * k * (tree.height + 1))


def test_branching_must_be_a_power_of_two() -> None:
    with pytest.raises(ValueError, match="branching must be a power of two >= 2, got 12"):
        SumTree(100, 12)


def test_default_branching_and_float32() -> None:
    tree = SumTree(100, dtype=np.float32)
    assert tree.branching == DEFAULT_BRANCHING and tree.dtype == np.float32
    tree.set(np.arange(100), np.ones(100))
    assert tree.total == 100.0
    assert tree.get(np.array([5, 99])).dtype == np.float32


def test_capacity_one() -> None:
    tree = SumTree(1, 2)
    tree.set(np.array([0]), np.array([2.5]))
    assert tree.total == 2.5
    assert tree.sample(3, np.random.default_rng(0)).tolist() == [0, 0, 0]


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -1.0, -0.0001])
def test_bad_values_are_refused_and_nothing_is_written(bad: float) -> None:
    tree = SumTree(8, 2)
    tree.set(np.arange(8), np.ones(8))
    with pytest.raises(ValueError, match=f"finite and >= 0, got {bad!r}.*position 2"):
        tree.set(np.array([0, 1, 2]), np.array([5.0, 5.0, bad]))
    assert tree.total == 8.0 and tree.get(np.array([0]))[0] == 1.0


@pytest.mark.parametrize("bad_index", [8, -1, 10**9])
def test_out_of_range_indices_raise_index_error(bad_index: int) -> None:
    tree = SumTree(8, 4)
    with pytest.raises(IndexError, match=f"index {bad_index} .*capacity 8"):
        tree.set(np.array([1, bad_index]), np.array([1.0, 1.0]))
    with pytest.raises(IndexError, match=f"index {bad_index}"):
        tree.get(np.array([bad_index]))
    assert tree.total == 0.0


def test_other_bad_input() -> None:
    with pytest.raises(ValueError, match="capacity must be >= 1, got 0"):
        SumTree(0)
    with pytest.raises(ValueError, match="branching must be a power of two >= 2, got 1"):
        SumTree(10, 1)
    with pytest.raises(ValueError, match="dtype must be float64 or float32"):
        SumTree(10, dtype=np.int32)
    tree = SumTree(8, 2)
    with pytest.raises(ValueError, match="every priority is zero"):
        tree.sample(4, np.random.default_rng(0))
    tree.set(np.array([0]), np.array([1.0]))
    with pytest.raises(ValueError, match="as long as indices"):
        tree.set(np.array([0, 1]), np.array([1.0]))
    with pytest.raises(ValueError, match="indices must be integers"):
        tree.set(np.array([0.5]), np.array([1.0]))
    with pytest.raises(ValueError, match=r"targets must be finite and >= 0, got -1.0"):
        tree.find_prefixsum(np.array([-1.0]))
    with pytest.raises(ValueError, match="batch_size must be >= 1, got 0"):
        tree.sample(0, np.random.default_rng(0))
