"""Ingest in its own process (ACTORQ_INGEST=process, actorq.learner.ingest_process) against
the ingest thread, on a real Redis stream: the same rows in the same order, every
transition Redis acknowledged counted and stored after `finish`, the sampler told of the
child's rows, nothing left in /dev/shm, a dead child reported, bad settings refused."""

from __future__ import annotations

import os
import signal
import threading
import time

import numpy as np
import pytest
import redis

from actorq.config import ConfigError, LearnerSettings
from actorq.learner.ingest_process import (
    IngestProcessError,
    ProcessIngest,
    make_shared_replay,
)
from actorq.redis_keys import RedisKeys
from actorq.replay.prioritized import PrioritizedSampler
from actorq.replay.redis_io import RedisReplayReader, RedisReplayWriter
from actorq.replay.shared import SharedReplay
from actorq.replay.storage import COLUMNS, ReplayStorage
from tests.integration.test_replay_bulk import OBS_DIM, _batch

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def child_env(redis_url: str, redis_keys: RedisKeys, monkeypatch: pytest.MonkeyPatch) -> None:
    """The child reads the learner's ACTORQ_* environment, as the service's would."""
    monkeypatch.setenv("ACTORQ_REDIS_URL", redis_url)
    monkeypatch.setenv("ACTORQ_REDIS_PREFIX", redis_keys.prefix)


def _write(client: redis.Redis, keys: RedisKeys, start: int, batches: int, n: int = 32) -> int:
    writer = RedisReplayWriter(client, keys, maxlen_entries=100_000)
    rng = np.random.default_rng(start)
    return sum(writer.write(_batch(rng, start + i * n, n)) for i in range(batches))


def _wait_for(condition, timeout: float = 30.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def _process_ingest(
    client: redis.Redis, keys: RedisKeys, capacity: int, sampler: object = None
) -> ProcessIngest:
    shared = make_shared_replay(capacity, OBS_DIM, 0, (), links=False)
    reader = RedisReplayReader(client, keys, shared.storage, sampler)  # type: ignore[arg-type]
    return ProcessIngest(reader, shared, threading.Event())


@pytest.mark.usefixtures("child_env")
def test_the_process_stores_what_the_thread_stores_and_counts_every_transition(
    redis_client: redis.Redis, redis_keys: RedisKeys
) -> None:
    capacity = 1_000  # smaller than what is written: the ring wraps in both
    before = _write(redis_client, redis_keys, 0, 20)  # read by the rebuild, in the learner
    ingest = _process_ingest(redis_client, redis_keys, capacity)
    assert ingest.reader.rebuild() == before
    ingest.start()
    assert not os.path.exists(ingest.shared.describe()["path"])  # removed once mapped
    during = _write(redis_client, redis_keys, 10_000, 30)
    _wait_for(lambda: ingest.storage.total_added == before + during)
    ingest.sync()
    after = _write(redis_client, redis_keys, 50_000, 5)  # only the drain at finish sees these
    ingest.finish()
    assert ingest.child is not None and ingest.child.returncode == 0
    assert ingest.reader.added == ingest.storage.total_added == before + during + after

    plain = ReplayStorage(capacity, OBS_DIM)
    reference = RedisReplayReader(redis_client, redis_keys, plain)
    assert reference.rebuild() == before + during + after
    rows = np.arange(capacity)
    got, want = ingest.storage.get(rows), plain.get(rows)
    for name in COLUMNS:
        np.testing.assert_array_equal(got[name], want[name], err_msg=name)


@pytest.mark.usefixtures("child_env")
def test_the_sampler_is_told_of_the_rows_the_child_wrote(
    redis_client: redis.Redis, redis_keys: RedisKeys
) -> None:
    sampler = PrioritizedSampler(capacity=512)
    ingest = _process_ingest(redis_client, redis_keys, 512, sampler)
    ingest.start()
    try:
        assert sampler.total == 0.0
        _write(redis_client, redis_keys, 0, 4)  # 128 rows
        _wait_for(lambda: ingest.storage.total_added == 128)
        ingest.sync()
        sample = sampler.sample(ingest.storage, 64, np.random.default_rng(0))
        assert sample.indices.max() < 128 and sampler.total > 0
    finally:
        ingest.finish()


@pytest.mark.usefixtures("child_env")
def test_a_dead_ingest_process_stops_the_learner_loudly(
    redis_client: redis.Redis, redis_keys: RedisKeys
) -> None:
    ingest = _process_ingest(redis_client, redis_keys, 512)
    ingest.start()
    assert ingest.child is not None
    os.kill(ingest.child.pid, signal.SIGKILL)
    ingest.child.wait()
    with pytest.raises(IngestProcessError, match="exited with status -9"):
        ingest.sync()
    ingest.finish()  # still cleans up: no error, nothing left


def test_a_child_that_cannot_reach_redis_fails_start_with_a_clear_error(
    redis_client: redis.Redis, redis_keys: RedisKeys, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ACTORQ_REDIS_URL", "redis://127.0.0.1:1")  # nothing listens there
    ingest = _process_ingest(redis_client, redis_keys, 512)
    path = ingest.shared.describe()["path"]
    with pytest.raises(IngestProcessError, match="did not start"):
        ingest.start()
    ingest.shared.close()
    assert not os.path.exists(path)


@pytest.mark.usefixtures("child_env")
def test_the_child_runs_on_the_cores_it_is_given_not_the_learners(
    redis_client: redis.Redis, redis_keys: RedisKeys, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`actorq run --pin-learner` gives the learner's ingest process the other services'
    cores through ACTORQ_INGEST_CORES; the child applies them before it reads."""
    allowed = sorted(os.sched_getaffinity(0))
    monkeypatch.setenv("ACTORQ_INGEST_CORES", str(allowed[0]))
    ingest = _process_ingest(redis_client, redis_keys, 512)
    assert ingest.cores == (allowed[0],)
    ingest.start()
    try:
        assert ingest.child is not None
        assert os.sched_getaffinity(ingest.child.pid) == {allowed[0]}
        written = _write(redis_client, redis_keys, 0, 3)
        _wait_for(lambda: ingest.storage.total_added == written)  # and it ingests there
    finally:
        ingest.finish()
    assert ingest.child.returncode == 0


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("one", r"ACTORQ_INGEST_CORES: expected a core list such as 0-3,6, got 'one'"),
        ("3-1", r"expected a core list such as 0-3,6, got '3-1'"),
        ("0,-1", r"expected a core list"),
        ("0,4096", r"ACTORQ_INGEST_CORES: names core 4096; this machine has cores 0-"),
    ],
)
def test_bad_ingest_cores_are_refused_naming_the_value(
    redis_client: redis.Redis,
    redis_keys: RedisKeys,
    monkeypatch: pytest.MonkeyPatch,
    text: str,
    why: str,
) -> None:
    monkeypatch.setenv("ACTORQ_INGEST_CORES", text)
    shared = make_shared_replay(64, OBS_DIM, 0, (), links=False)
    reader = RedisReplayReader(redis_client, redis_keys, shared.storage)
    try:
        with pytest.raises(ConfigError, match=why):
            ProcessIngest(reader, shared, threading.Event())
    finally:
        shared.close()


def test_the_ingest_setting_is_checked_and_rlx2_links_are_refused() -> None:
    with pytest.raises(ConfigError, match="ingest: expected thread or process, got 'fork'"):
        LearnerSettings(ingest="fork")
    with pytest.raises(ConfigError, match="delayed n-step"):
        make_shared_replay(1000, 3, 1, (), links=True)


def test_two_mappings_of_one_shared_storage_see_each_others_rows() -> None:
    owner = SharedReplay.create(100, OBS_DIM)
    other = SharedReplay.attach(owner.describe())
    try:
        rng = np.random.default_rng(0)
        other.storage.add(_batch(rng, 0, 10))
        assert owner.storage.total_added == 10
        np.testing.assert_array_equal(owner.storage.get(np.arange(10))["action"], np.arange(10))
    finally:
        other.close()
        owner.close()
    assert not os.path.exists(owner.describe()["path"])
