"""PrioritizedSampler: priorities, IS weights, beta annealing, lazy writing and its rule."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from actorq.replay.prioritized import PrioritizedSampler
from actorq.replay.sampler import Sampler, SampleResult
from tests.unit.test_replay_sampler import filled_storage


def rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


def test_is_a_sampler_and_samples_from_a_storage() -> None:
    sampler = PrioritizedSampler(100)
    assert isinstance(sampler, Sampler)
    storage = filled_storage(10)
    sampler.on_insert(np.arange(10))
    result = sampler.sample(storage, 32, rng())
    assert isinstance(result, SampleResult)
    assert result.indices.dtype == np.int64 and result.weights.dtype == np.float32
    assert result.indices.min() >= 0 and result.indices.max() < 10
    np.testing.assert_array_equal(result.weights, np.ones(32, np.float32))  # all at max


def test_update_stores_td_plus_eps_to_the_alpha() -> None:
    sampler = PrioritizedSampler(8, alpha=0.5, eps=0.25)
    sampler.on_insert(np.arange(4))
    sampler.update_priorities(np.array([0, 1, 2]), np.array([0.0, 0.75, 3.75]))
    np.testing.assert_allclose(sampler.priorities(np.arange(5)), [0.5, 1.0, 2.0, 1.0, 0.0])


def test_new_rows_get_the_running_max_and_actor_priorities_are_honoured() -> None:
    sampler = PrioritizedSampler(8, alpha=1.0, eps=1e-12)
    sampler.on_insert(np.array([0]))
    assert sampler.priorities(np.array([0]))[0] == 1.0  # max starts at 1
    sampler.update_priorities(np.array([0]), np.array([7.0]))
    sampler.on_insert(np.array([1, 2]))
    np.testing.assert_allclose(sampler.priorities(np.array([1, 2])), [7.0, 7.0])
    sampler.on_insert(np.array([3]), priorities=np.array([9.0]))  # Ape-X: actor's |td|
    assert sampler.priorities(np.array([3]))[0] == pytest.approx(9.0)
    assert sampler.max_priority == pytest.approx(9.0)
    sampler.update_priorities(np.array([3]), np.array([0.5]))
    assert sampler.max_priority == pytest.approx(9.0)  # the running max never decreases


def test_importance_weights_by_hand() -> None:
    """alpha=1: P(i) = p_i / 10; w_i = (N P(i))^-beta / max_batch w = (p_i / p_min)^-beta."""
    sampler = PrioritizedSampler(4, alpha=1.0, beta=0.5, beta_steps=10**9, eps=1e-12)
    sampler.on_insert(np.arange(4), priorities=np.array([1.0, 2.0, 3.0, 4.0]))
    result = sampler.sample(None, 10, rng())  # stratified: leaf 0, 1x2, 2x3, 3x4
    np.testing.assert_array_equal(result.indices, [0, 1, 1, 2, 2, 2, 3, 3, 3, 3])
    n, total = 4, 10.0
    raw = {i: (n * p / total) ** -0.5 for i, p in enumerate([1.0, 2.0, 3.0, 4.0])}
    expected = [raw[i] / max(raw.values()) for i in result.indices]
    np.testing.assert_allclose(result.weights, expected, rtol=1e-6)
    assert result.weights[0] == 1.0  # the rarest row has the largest weight
    assert result.weights[-1] == pytest.approx(0.5)  # (4/1)^-0.5


def test_beta_is_annealed_linearly_over_sample_calls() -> None:
    sampler = PrioritizedSampler(4, beta=0.4, beta_final=1.0, beta_steps=3)
    sampler.on_insert(np.arange(4), priorities=np.array([1.0, 2.0, 3.0, 4.0]))
    betas = []
    for _ in range(5):
        betas.append(sampler.current_beta)
        sampler.sample(None, 4, rng())
    np.testing.assert_allclose(betas, [0.4, 0.6, 0.8, 1.0, 1.0])


def test_sampled_frequencies_follow_stored_priorities() -> None:
    """Chi-square through the sampler, alpha = 0.6: frequencies follow (|td|+eps)^alpha."""
    generator = rng(7)
    td = generator.uniform(0.0, 3.0, 32)
    sampler = PrioritizedSampler(32, alpha=0.6, eps=0.01)
    sampler.on_insert(np.arange(32), priorities=td)
    counts = np.zeros(32)
    for _ in range(300):
        np.add.at(counts, sampler.sample(None, 256, generator).indices, 1)
    probability = (td + 0.01) ** 0.6 / ((td + 0.01) ** 0.6).sum()
    expected = counts.sum() * probability
    statistic = float(((counts - expected) ** 2 / expected).sum())
    assert statistic < 61.098  # scipy.stats.chi2.ppf(0.999, 31)


def test_writes_are_staged_until_sample_or_flush() -> None:
    sampler = PrioritizedSampler(16)
    sampler.on_insert(np.arange(8))
    sampler.update_priorities(np.array([1, 2]), np.array([3.0, 4.0]))
    assert sampler.total == 0.0 and sampler.staged == 2  # nothing applied yet
    assert sampler.flush() == 10  # 8 inserted + 2 updated rows
    assert sampler.staged == 0 and sampler.total > 0
    assert sampler.flush() == 0
    sampler.on_insert(np.arange(8, 16))
    result = sampler.sample(None, 256, rng())
    assert result.indices.max() >= 8  # the sample saw the write staged before it


def test_last_staged_write_wins() -> None:
    sampler = PrioritizedSampler(8, alpha=1.0, eps=1e-12)
    sampler.on_insert(np.array([0, 1]), priorities=np.array([1.0, 1.0]))
    sampler.update_priorities(np.array([0, 0]), np.array([2.0, 3.0]))  # dup: last wins
    sampler.update_priorities(np.array([1]), np.array([5.0]))
    sampler.on_insert(np.array([1]), priorities=np.array([6.0]))
    np.testing.assert_allclose(sampler.priorities(np.array([0, 1])), [3.0, 6.0])


def test_update_for_a_row_overwritten_since_it_was_sampled_is_dropped() -> None:
    sampler = PrioritizedSampler(4, alpha=1.0, eps=1e-12)
    sampler.on_insert(np.arange(4), priorities=np.ones(4))
    result = sampler.sample(None, 4, rng())  # every row once, generation 1
    sampler.on_insert(np.array([2]), priorities=np.array([8.0]))  # row 2 overwritten
    sampler.update_priorities(result.indices, np.full(4, 0.5), result.generations)
    np.testing.assert_allclose(sampler.priorities(np.arange(4)), [0.5, 0.5, 8.0, 0.5])
    assert sampler.dropped_updates == 1


def test_without_generations_the_last_sample_of_the_row_is_the_reference() -> None:
    sampler = PrioritizedSampler(4, alpha=1.0, eps=1e-12)
    sampler.on_insert(np.arange(4), priorities=np.ones(4))
    result = sampler.sample(None, 4, rng())
    sampler.on_insert(np.array([3]), priorities=np.array([8.0]))
    sampler.update_priorities(result.indices, np.full(4, 0.5))  # the Sampler protocol call
    np.testing.assert_allclose(sampler.priorities(np.arange(4)), [0.5, 0.5, 0.5, 8.0])
    assert sampler.dropped_updates == 1
    sampler.update_priorities(np.array([3]), np.array([2.0]))  # sampled at gen 1, now 2
    assert sampler.priorities(np.array([3]))[0] == pytest.approx(8.0)
    fresh = PrioritizedSampler(4, alpha=1.0, eps=1e-12)  # never sampled: applies
    fresh.on_insert(np.array([0]))
    fresh.update_priorities(np.array([0]), np.array([2.0]))
    assert fresh.priorities(np.array([0]))[0] == pytest.approx(2.0)


def test_restore_inserts_stored_priorities_as_given() -> None:
    source = PrioritizedSampler(8, alpha=0.6)
    source.on_insert(np.arange(8), priorities=np.linspace(0, 3, 8))
    stored = source.priorities(np.arange(8))
    copy = PrioritizedSampler(8, alpha=0.6)
    copy.restore(np.arange(8), stored)
    np.testing.assert_array_equal(copy.priorities(np.arange(8)), stored)


def test_concurrent_writers_lose_nothing_and_last_write_wins() -> None:
    """4 threads stage inserts and updates (some deliberately stale) while a 5th samples.

    Each writer owns the rows with row % 4 == its id, so per row the staging order is
    that thread's program order and the expected final priorities are computable."""
    capacity, writers, rounds = 4096, 4, 300
    sampler = PrioritizedSampler(capacity, alpha=1.0, eps=1e-12, branching=8)
    expected = np.zeros(capacity)
    stale_per_writer = [0] * writers
    stop = threading.Event()
    errors: list[BaseException] = []

    def write(writer: int) -> None:
        generator = rng(100 + writer)
        own = np.arange(writer, capacity, writers)
        inserts = np.zeros(capacity, np.int64)
        for _ in range(rounds):
            rows = generator.choice(own, 64)  # duplicates inside a batch on purpose
            values = generator.uniform(1, 100, 64)
            stale = False
            if generator.random() < 0.4:
                sampler.on_insert(rows, priorities=values)
                inserts[np.unique(rows)] += 1
            else:
                stale = generator.random() < 0.2
                generations = inserts[rows] - (1 if stale else 0)
                sampler.update_priorities(rows, values, generations)
            for row, value in zip(rows, values, strict=True):
                if stale and inserts[row] > 0:
                    stale_per_writer[writer] += 1  # must be dropped
                else:  # (generation -1 on a never-inserted row means "unchecked")
                    expected[row] = value + 1e-12

    def sample() -> None:
        generator = rng(99)
        while not stop.is_set():
            if sampler.total > 0 or sampler.staged:
                try:
                    result = sampler.sample(None, 256, generator)
                except ValueError:
                    continue  # nothing applied yet
                assert np.all(sampler._tree.get(result.indices) > 0)

    def guarded(fn, *args) -> None:
        try:
            fn(*args)
        except BaseException as exc:  # surfaced in the main thread
            errors.append(exc)

    reader = threading.Thread(target=guarded, args=(sample,))
    threads = [threading.Thread(target=guarded, args=(write, w)) for w in range(writers)]
    reader.start()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    stop.set()
    reader.join()
    assert not errors, errors
    sampler.flush()
    np.testing.assert_allclose(sampler.priorities(np.arange(capacity)), expected, rtol=1e-12)
    assert sampler.dropped_updates == sum(stale_per_writer)
    levels = [sampler._tree.level(i).copy() for i in range(sampler._tree.height + 1)]
    sampler._tree.rebuild()
    for i, nodes in enumerate(levels):
        np.testing.assert_array_equal(sampler._tree.level(i), nodes)


def test_bad_input() -> None:
    with pytest.raises(ValueError, match=r"alpha must be a number >= 0.0, got -1"):
        PrioritizedSampler(8, alpha=-1)
    with pytest.raises(ValueError, match=r"beta must be a number >= 0.0 and <= 1.0, got 1.5"):
        PrioritizedSampler(8, beta=1.5)
    with pytest.raises(ValueError, match=r"eps must be a number > 0.0, got 0"):
        PrioritizedSampler(8, eps=0)
    with pytest.raises(ValueError, match="beta_steps must be an int >= 1, got 0"):
        PrioritizedSampler(8, beta_steps=0)
    sampler = PrioritizedSampler(8)
    with pytest.raises(ValueError, match="cannot sample: no row has been inserted"):
        sampler.sample(None, 4, rng())
    with pytest.raises(IndexError, match="index 8 out of range for capacity 8"):
        sampler.on_insert(np.array([1, 8]))
    with pytest.raises(
        ValueError, match=r"finite and >= 0 \(\|TD error\|\), got nan at position 1"
    ):
        sampler.update_priorities(np.array([0, 1]), np.array([1.0, np.nan]))
    with pytest.raises(ValueError, match=r"got -2.0 at position 0"):
        sampler.update_priorities(np.array([0]), np.array([-2.0]))
    with pytest.raises(ValueError, match="priorities must have shape"):
        sampler.on_insert(np.array([0, 1]), priorities=np.array([1.0]))
    with pytest.raises(ValueError, match="1-D integer array"):
        sampler.on_insert(np.array([0.5]))
    assert sampler.staged == 0  # refused writes are never staged


def test_empty_batches_are_accepted_and_change_nothing() -> None:
    sampler = PrioritizedSampler(8)
    empty = np.array([], np.int64)
    sampler.on_insert(empty)
    sampler.update_priorities(empty, np.array([]))
    assert sampler.flush() == 0 and sampler.total == 0.0
