"""UniformSampler through the Sampler seam."""

from __future__ import annotations

import numpy as np
import pytest

from actorq.replay.batch import TransitionBatch
from actorq.replay.sampler import Sampler, SampleResult, UniformSampler
from actorq.replay.storage import ReplayStorage


def filled_storage(size: int, capacity: int = 100) -> ReplayStorage:
    storage = ReplayStorage(capacity=capacity, obs_dim=1)
    storage.add(
        TransitionBatch(
            obs=np.zeros((size, 1), np.float32),
            action=np.arange(size, dtype=np.int64),
            reward=np.zeros(size, np.float32),
            next_obs=np.zeros((size, 1), np.float32),
            done=np.zeros(size, np.bool_),
            actor_id="a",
            policy_version=0,
        )
    )
    return storage


def test_uniform_is_a_sampler() -> None:
    assert isinstance(UniformSampler(), Sampler)


def test_shapes_dtypes_and_weights() -> None:
    result = UniformSampler().sample(filled_storage(10), 256, np.random.default_rng(0))
    assert isinstance(result, SampleResult)
    assert result.indices.shape == (256,) and result.indices.dtype == np.int64
    assert result.weights.dtype == np.float32
    np.testing.assert_array_equal(result.weights, np.ones(256, np.float32))
    assert result.indices.min() >= 0 and result.indices.max() < 10


def test_only_filled_rows_are_sampled() -> None:
    result = UniformSampler().sample(filled_storage(3), 1000, np.random.default_rng(0))
    assert set(result.indices.tolist()) == {0, 1, 2}


def test_distribution_is_uniform() -> None:
    """Chi-square goodness of fit: 50 rows, 100k draws; the 99.9% critical value is 85.4."""
    rng = np.random.default_rng(123)
    result = UniformSampler().sample(filled_storage(50), 100_000, rng)
    counts = np.bincount(result.indices, minlength=50)
    expected = 100_000 / 50
    chi2 = float(((counts - expected) ** 2 / expected).sum())
    assert chi2 < 85.4


def test_same_seed_same_indices() -> None:
    storage = filled_storage(40)
    a = UniformSampler().sample(storage, 64, np.random.default_rng(5))
    b = UniformSampler().sample(storage, 64, np.random.default_rng(5))
    np.testing.assert_array_equal(a.indices, b.indices)


def test_rejects_empty_storage_and_bad_batch_size() -> None:
    sampler = UniformSampler()
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match="empty"):
        sampler.sample(ReplayStorage(capacity=4, obs_dim=1), 8, rng)
    with pytest.raises(ValueError, match="batch_size"):
        sampler.sample(filled_storage(4), 0, rng)


def test_priority_hooks_are_no_ops() -> None:
    sampler = UniformSampler()
    sampler.on_insert(np.arange(3))
    sampler.update_priorities(np.arange(3), np.ones(3, np.float32))
