"""ReplayStorage: a ring buffer that keeps the newest `capacity` transitions."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from actorq.replay.batch import TransitionBatch
from actorq.replay.storage import COLUMNS, ReplayStorage


def numbered_batch(start: int, n: int, obs_dim: int = 2, version: int = 0) -> TransitionBatch:
    """A batch whose transition k carries the number start+k in every column."""
    ids = np.arange(start, start + n)
    return TransitionBatch(
        obs=np.repeat(ids[:, None], obs_dim, axis=1).astype(np.float32),
        action=ids.astype(np.int64),
        reward=ids.astype(np.float32),
        next_obs=np.repeat(ids[:, None] + 0.5, obs_dim, axis=1).astype(np.float32),
        done=ids % 2 == 1,
        actor_id="a",
        policy_version=version,
    )


def test_add_and_get() -> None:
    storage = ReplayStorage(capacity=10, obs_dim=2)
    idx = storage.add(numbered_batch(0, 4, version=3))
    np.testing.assert_array_equal(idx, [0, 1, 2, 3])
    assert len(storage) == 4 and storage.total_added == 4
    rows = storage.get(np.array([3, 0]))
    assert set(rows) == set(COLUMNS)
    np.testing.assert_array_equal(rows["action"], [3, 0])
    np.testing.assert_array_equal(rows["obs"], [[3, 3], [0, 0]])
    np.testing.assert_array_equal(rows["next_obs"], [[3.5, 3.5], [0.5, 0.5]])
    np.testing.assert_array_equal(rows["done"], [True, False])
    np.testing.assert_array_equal(rows["policy_version"], [3, 3])
    assert rows["obs"].dtype == np.float32 and rows["action"].dtype == np.int64


def test_wraparound_keeps_newest() -> None:
    storage = ReplayStorage(capacity=5, obs_dim=2)
    storage.add(numbered_batch(0, 4, version=1))
    idx = storage.add(numbered_batch(4, 3, version=2))  # rows 4, 0, 1
    np.testing.assert_array_equal(idx, [4, 0, 1])
    assert len(storage) == 5 and storage.total_added == 7
    rows = storage.get(np.arange(5))
    np.testing.assert_array_equal(rows["action"], [5, 6, 2, 3, 4])
    np.testing.assert_array_equal(rows["policy_version"], [2, 2, 1, 1, 2])


def test_batch_larger_than_capacity_keeps_its_tail() -> None:
    storage = ReplayStorage(capacity=4, obs_dim=2)
    storage.add(numbered_batch(0, 3))
    idx = storage.add(numbered_batch(3, 10))  # transitions 3..12, only 9..12 fit
    assert len(idx) == 4 and storage.total_added == 13
    rows = storage.get(idx)
    np.testing.assert_array_equal(rows["action"], [9, 10, 11, 12])
    np.testing.assert_array_equal(np.sort(storage.get(np.arange(4))["action"]), [9, 10, 11, 12])


def test_many_wraps_match_a_reference() -> None:
    storage = ReplayStorage(capacity=7, obs_dim=1)
    rng = np.random.default_rng(1)
    total = 0
    for _ in range(50):
        n = int(rng.integers(1, 12))
        idx = storage.add(numbered_batch(total, n, obs_dim=1))
        total += n
        kept = np.arange(total - len(idx), total)
        np.testing.assert_array_equal(storage.get(idx)["action"], kept)
    assert sorted(storage.get(np.arange(7))["action"]) == list(range(total - 7, total))


def test_rejects_bad_input() -> None:
    with pytest.raises(ValueError, match="capacity"):
        ReplayStorage(capacity=0, obs_dim=2)
    with pytest.raises(ValueError, match="obs_dim"):
        ReplayStorage(capacity=4, obs_dim=0)
    storage = ReplayStorage(capacity=4, obs_dim=2)
    with pytest.raises(ValueError, match="obs_dim"):
        storage.add(numbered_batch(0, 2, obs_dim=3))
    storage.add(numbered_batch(0, 2))
    with pytest.raises(IndexError):
        storage.get(np.array([2]))
    with pytest.raises(IndexError):
        storage.get(np.array([-1]))


def test_get_returns_copies() -> None:
    storage = ReplayStorage(capacity=4, obs_dim=2)
    storage.add(numbered_batch(0, 2))
    storage.get(np.array([0]))["obs"][:] = 99
    assert storage.get(np.array([0]))["obs"][0, 0] == 0


def test_one_writer_one_reader_threads() -> None:
    """Rows read while another thread writes are always whole transitions."""
    storage = ReplayStorage(capacity=64, obs_dim=3)
    storage.add(numbered_batch(0, 64, obs_dim=3))
    stop = threading.Event()

    def write() -> None:
        start = 64
        while not stop.is_set():
            storage.add(numbered_batch(start, 17, obs_dim=3))
            start += 17

    writer = threading.Thread(target=write)
    writer.start()
    try:
        rng = np.random.default_rng(0)
        for _ in range(300):
            rows = storage.get(rng.integers(0, 64, 32))
            np.testing.assert_array_equal(rows["obs"][:, 0], rows["action"])
            np.testing.assert_array_equal(rows["obs"][:, 2], rows["reward"])
    finally:
        stop.set()
        writer.join()


def test_terminal_slots_are_the_live_done_rows() -> None:
    storage = ReplayStorage(capacity=10, obs_dim=2)
    storage.add(numbered_batch(0, 6))  # done on odd inserts: slots 1, 3, 5
    np.testing.assert_array_equal(storage.terminal_slots(), [1, 3, 5])
    storage.add(numbered_batch(6, 6))  # inserts 10, 11 overwrite slots 0, 1
    np.testing.assert_array_equal(storage.terminal_slots(), [1, 3, 5, 7, 9])
    assert storage.get(np.array([1]))["action"][0] == 11  # slot 1: insert 11, done
    storage.drop_oldest(3)  # inserts 2, 3, 4 go: slot 3 is no longer live
    np.testing.assert_array_equal(storage.terminal_slots(), [1, 5, 7, 9])
