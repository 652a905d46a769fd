"""UniformSampler through the Sampler seam."""

from __future__ import annotations

import numpy as np
import pytest

from actorq.replay.batch import TransitionBatch
from actorq.replay.sampler import Sampler, SampleResult, TerminalShareSampler, UniformSampler
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


def storage_with_terminals(done: np.ndarray, capacity: int = 100) -> ReplayStorage:
    """Rows whose action is their insert number; `done` marks the episode-ending ones."""
    size = done.size
    storage = ReplayStorage(capacity=capacity, obs_dim=1)
    storage.add(
        TransitionBatch(
            obs=np.zeros((size, 1), np.float32),
            action=np.arange(size, dtype=np.int64),
            reward=np.zeros(size, np.float32),
            next_obs=np.zeros((size, 1), np.float32),
            done=done,
            actor_id="a",
            policy_version=0,
        )
    )
    return storage


def test_terminal_share_fills_its_part_of_each_batch_with_terminal_rows() -> None:
    done = np.zeros(1000, np.bool_)
    done[[7, 500, 999]] = True  # 0.3% of the rows, as in replay after a solved policy
    storage = storage_with_terminals(done, capacity=1000)
    sampler = TerminalShareSampler(0.1)
    rng = np.random.default_rng(0)
    counts = []
    for _ in range(200):
        result = sampler.sample(storage, 64, rng)
        rows = storage.get(result.indices)
        counts.append(int(rows["done"].sum()))
        assert result.indices.shape == (64,) and np.all(result.weights == 1.0)
    # ceil(0.1 * 64) = 7 terminal rows every batch, plus what the uniform part finds.
    assert min(counts) >= 7
    assert np.mean(counts) < 7 + 64 * 0.003 * 3
    seen = np.unique(storage.get(np.arange(1000))["action"][storage.terminal_slots()])
    np.testing.assert_array_equal(seen, [7, 500, 999])


def test_terminal_share_zero_or_no_terminals_samples_like_uniform() -> None:
    storage = storage_with_terminals(np.zeros(50, np.bool_))
    for share in (0.0, 0.5):
        got = TerminalShareSampler(share).sample(storage, 32, np.random.default_rng(3))
        want = UniformSampler().sample(storage, 32, np.random.default_rng(3))
        np.testing.assert_array_equal(got.indices, want.indices)


def test_terminal_share_follows_overwritten_rows() -> None:
    storage = storage_with_terminals(np.arange(10) == 2, capacity=10)  # row 2 ends an episode
    sampler = TerminalShareSampler(0.5)
    rng = np.random.default_rng(1)
    assert set(storage.get(sampler.sample(storage, 8, rng).indices[:4])["action"]) == {2}
    # Ten new rows overwrite the ring; the new terminal is insert 15 (slot 5).
    fresh = storage_with_terminals(np.arange(10) == 5, capacity=10).get(np.arange(10))
    storage.add(
        TransitionBatch(
            obs=fresh["obs"], action=fresh["action"] + 10, reward=fresh["reward"],
            next_obs=fresh["next_obs"], done=fresh["done"], actor_id="a", policy_version=1,
        )
    )  # fmt: skip
    assert set(storage.get(sampler.sample(storage, 8, rng).indices[:4])["action"]) == {15}


@pytest.mark.parametrize("share", [-0.1, 1.0, 1.5])
def test_terminal_share_outside_unit_interval_is_refused(share: float) -> None:
    with pytest.raises(ValueError, match="terminal share must be in"):
        TerminalShareSampler(share)


def test_batches_drawn_at_once_each_get_their_terminal_share() -> None:
    done = np.zeros(1000, np.bool_)
    done[[7, 500, 999]] = True
    storage = storage_with_terminals(done, capacity=1000)
    result = TerminalShareSampler(0.1).sample_batches(storage, 64, 8, np.random.default_rng(0))
    assert result.indices.shape == (8 * 64,) and np.all(result.weights == 1.0)
    per_batch = storage.get(result.indices)["done"].reshape(8, 64)
    assert per_batch[:, :7].all()  # ceil(0.1 * 64) = 7 terminal rows leading every batch
    assert per_batch.sum(axis=1).min() >= 7


def test_batches_drawn_at_once_are_uniform_over_live_rows() -> None:
    storage = filled_storage(150, capacity=100)  # 50 rows overwritten: slots by age
    result = UniformSampler().sample_batches(storage, 100, 40, np.random.default_rng(1))
    actions = storage.get(result.indices)["action"]  # the insert number of each row
    assert actions.min() >= 50 and actions.max() <= 149
    counts = np.bincount(actions - 50, minlength=100)
    assert counts.min() > 0 and counts.max() < 3 * counts.mean()  # 4,000 draws, 100 rows
    with pytest.raises(ValueError, match="count must be >= 1, got 0"):
        UniformSampler().sample_batches(storage, 10, 0, np.random.default_rng(1))
