"""Malformed replay entries (hypothesis): the decoder refuses them with a reason, and the
learner's reader skips and counts them while every good entry around them still lands."""

from __future__ import annotations

import uuid

import numpy as np
import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from actorq.redis_keys import RedisKeys
from actorq.replay.batch import ReplayDecodeError, TransitionBatch, decode_batch, encode_batch
from actorq.replay.redis_io import RedisReplayReader, RedisReplayWriter
from actorq.replay.storage import ReplayStorage

OBS_DIM = 3
FIELDS = ("v", "n", "obs_dim", "actor", "version", "precision", "obs", "action", "reward")
FIELDS += ("next_obs", "done")


def _good(start: int, n: int = 4) -> TransitionBatch:
    ids = np.arange(start, start + n)
    return TransitionBatch(
        obs=np.zeros((n, OBS_DIM), np.float32),
        action=ids.astype(np.int64),
        reward=np.ones(n, np.float32),
        next_obs=np.ones((n, OBS_DIM), np.float32),
        done=np.zeros(n, bool),
        actor_id="actor-0",
        policy_version=1,
        precision="int8",
    )


values = st.one_of(
    st.binary(max_size=64),
    st.sampled_from([b"", b"0", b"-1", b"99999999999999999999", b"1e3", b"\xff\xfe", b" 4"]),
    st.builds(lambda x: np.array([x], "<f4").tobytes(), st.sampled_from([np.nan, np.inf])),
)


@st.composite
def malformed_entries(draw: st.DrawFn) -> dict[bytes, bytes]:
    fields = {k.encode(): v for k, v in encode_batch(_good(0)).items()}
    for _ in range(draw(st.integers(1, 3))):
        name = draw(st.sampled_from(FIELDS)).encode()
        how = draw(st.sampled_from(["drop", "replace", "truncate", "extend"]))
        if how == "drop":
            fields.pop(name, None)
        elif how == "replace":
            fields[name] = draw(values)
        elif how == "truncate":
            fields[name] = fields.get(name, b"")[: draw(st.integers(0, 8))]
        else:
            fields[name] = fields.get(name, b"") + draw(st.binary(min_size=1, max_size=16))
    if draw(st.booleans()):
        fields[draw(st.binary(min_size=1, max_size=8))] = draw(values)  # unknown field
    return fields


def _refused(entry: dict[bytes, bytes]) -> bool:
    try:
        return decode_batch(entry).obs_dim != OBS_DIM
    except ReplayDecodeError:
        return True


@settings(max_examples=200, deadline=None)
@given(entry=malformed_entries())
def test_decoder_refuses_with_a_reason_or_returns_a_valid_batch(entry) -> None:
    try:
        batch = decode_batch(entry)
    except ReplayDecodeError as exc:
        assert exc.reason and str(exc)
        return
    assert len(batch) >= 1 and batch.obs.shape[1] >= 1  # mutations can leave it valid
    assert np.isfinite(batch.obs).all() and np.isfinite(batch.reward).all()


@pytest.fixture(scope="module")
def client(redis_url: str):
    c = redis.Redis.from_url(redis_url)
    yield c
    c.close()


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(bad=st.lists(malformed_entries(), min_size=1, max_size=6), seed=st.integers(0, 99))
def test_reader_skips_and_counts_malformed_entries_between_good_ones(
    client: redis.Redis, bad: list[dict[bytes, bytes]], seed: int
) -> None:
    keys = RedisKeys(f"test-{uuid.uuid4().hex}")
    try:
        writer = RedisReplayWriter(client, keys, maxlen_entries=10_000)
        rng = np.random.default_rng(seed)
        good_ids: list[int] = []
        written_bad: list[dict[bytes, bytes]] = []
        for i, entry in enumerate(bad):
            writer.write(_good(4 * i))
            good_ids += list(range(4 * i, 4 * i + 4))
            if rng.random() < 0.5 or i == len(bad) - 1:
                client.xadd(keys.replay_stream, entry)
                written_bad.append(entry)
        reader = RedisReplayReader(client, keys, ReplayStorage(10_000, obs_dim=OBS_DIM))
        while reader.poll(block_ms=0, count=3):
            pass
        reader.poll(block_ms=0)  # nothing raised: ingestion went on past every bad entry
        stored = reader.storage.get(np.arange(len(reader.storage)))["action"]
        assert set(good_ids) <= {int(a) for a in stored}
        assert reader.rejected == sum(_refused(entry) for entry in written_bad)
        assert reader.rejected == sum(reader.rejected_by_reason.values())
    finally:
        client.delete(keys.replay_stream, keys.inserted_counter)
