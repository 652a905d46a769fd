"""Continuous actions through the replay wire format (v2) and the storage."""

from __future__ import annotations

import numpy as np
import pytest

from actorq.replay import ReplayDecodeError, ReplayStorage, TransitionBatch, decode_batch
from actorq.replay.batch import encode_batch


def continuous_batch(n: int = 5, obs_dim: int = 3, act_dim: int = 2, steps=None):
    rng = np.random.default_rng(0)
    return TransitionBatch(
        obs=rng.normal(size=(n, obs_dim)).astype(np.float32),
        action=rng.uniform(-1, 1, size=(n, act_dim)).astype(np.float32),
        reward=rng.normal(size=n).astype(np.float32),
        next_obs=rng.normal(size=(n, obs_dim)).astype(np.float32),
        done=np.array([False, True, False, False, False][:n]),
        actor_id="actor-1",
        policy_version=3,
        precision="int8",
        steps=steps,
    )


@pytest.mark.parametrize("steps", [None, np.array([1, 2, 3, 3, 3], np.uint8)])
def test_continuous_round_trip(steps) -> None:
    batch = continuous_batch(steps=steps)
    fields = encode_batch(batch)
    assert fields["v"] == b"2" and fields["act_dim"] == b"2"
    assert len(fields["action"]) == 5 * 2 * 4
    assert ("steps" in fields) == (steps is not None)
    got = decode_batch({k.encode(): v for k, v in fields.items()})
    assert got.continuous and got.act_dim == 2
    np.testing.assert_array_equal(got.action, batch.action)
    if steps is None:
        assert got.steps is None
    else:
        np.testing.assert_array_equal(got.steps, steps)


def test_discrete_batches_keep_format_1_byte_for_byte() -> None:
    batch = TransitionBatch(
        obs=np.zeros((2, 3), np.float32),
        action=np.array([0, 1], np.int64),
        reward=np.zeros(2, np.float32),
        next_obs=np.zeros((2, 3), np.float32),
        done=np.zeros(2, bool),
        actor_id="a",
        policy_version=1,
    )
    fields = encode_batch(batch)
    assert fields["v"] == b"1" and "act_dim" not in fields and "steps" not in fields
    assert len(fields["action"]) == 16


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        (lambda f: f.pop("act_dim"), "missing_field"),
        (lambda f: f.update(act_dim=b"0"), "bad_header"),
        (lambda f: f.update(act_dim=b"3"), "bad_length"),
        (lambda f: f.update(steps=b"\x01"), "bad_length"),
        (lambda f: f.update(steps=b"\x01\x00\x01\x01\x01"), "invalid_batch"),
        (lambda f: f.update(action=np.full(10, np.nan, "<f4").tobytes()), "invalid_batch"),
    ],
)
def test_malformed_continuous_entries_rejected(change, reason: str) -> None:
    fields = encode_batch(continuous_batch())
    change(fields)
    with pytest.raises(ReplayDecodeError) as err:
        decode_batch(fields)
    assert err.value.reason == reason


def test_discrete_batches_carry_steps_through_redis_fields_and_storage() -> None:
    """n-step DQN: int64 actions with per-transition lengths survive encode/decode and the
    learner's storage; a batch without them reads as one-step; bad lengths are refused."""
    batch = TransitionBatch(
        obs=np.arange(6, dtype=np.float32).reshape(3, 2),
        action=np.array([0, 1, 1], np.int64),
        reward=np.array([1.0, 2.0, 3.0], np.float32),
        next_obs=np.ones((3, 2), np.float32),
        done=np.array([False, False, True]),
        actor_id="a",
        policy_version=4,
        steps=np.array([3, 3, 1], np.uint8),
    )
    fields = encode_batch(batch)
    back = decode_batch(fields)
    np.testing.assert_array_equal(back.steps, [3, 3, 1])
    np.testing.assert_array_equal(back.action, [0, 1, 1])
    storage = ReplayStorage(8, obs_dim=2)
    storage.add(back)
    storage.add(decode_batch({k: v for k, v in fields.items() if k != "steps"}))
    np.testing.assert_array_equal(storage.get(np.arange(6))["steps"], [3, 3, 1, 1, 1, 1])
    with pytest.raises(ReplayDecodeError, match="steps"):
        decode_batch({**fields, "steps": b"\x03\x03"})
    with pytest.raises(ValueError, match="steps must be >= 1"):
        TransitionBatch(**{**batch.__dict__, "steps": np.array([3, 0, 1], np.uint8)})


def test_continuous_storage_keeps_actions_and_steps() -> None:
    storage = ReplayStorage(8, obs_dim=3, act_dim=2)
    first = continuous_batch()
    second = continuous_batch(steps=np.array([2, 2, 2, 1, 1], np.uint8))
    storage.add(first)
    idx = storage.add(second)
    rows = storage.get(idx)
    assert rows["action"].dtype == np.float32 and rows["action"].shape == (5, 2)
    np.testing.assert_array_equal(rows["action"], second.action)
    np.testing.assert_array_equal(rows["steps"], second.steps)
    np.testing.assert_array_equal(storage.get(np.arange(3))["steps"], [1, 1, 1])


def test_storage_refuses_the_other_action_kind() -> None:
    storage = ReplayStorage(8, obs_dim=3, act_dim=2)
    with pytest.raises(ValueError, match=r"batch act_dim 4 != storage act_dim 2"):
        storage.add(continuous_batch(act_dim=4))
    discrete = ReplayStorage(8, obs_dim=3)
    assert "steps" in discrete.get(np.arange(0))  # n-step DQN keeps lengths too
    with pytest.raises(ValueError, match=r"batch act_dim 2 != storage act_dim 0"):
        discrete.add(continuous_batch())
