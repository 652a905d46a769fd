"""Where the learner loop's time goes: UpdateStep counts the time in the algorithm's update
calls apart from the time spent sampling, on the host path and on a device feed, so the
learner's GetStatus shares (wait, sample, update) add up to at most its wall time."""

from __future__ import annotations

import time

import numpy as np
import pytest

from actorq.algos import load_algorithm_config, make_algorithm
from actorq.algos.capture import apply_update_path
from actorq.learner.counters import LearnerCounters
from actorq.learner.device_feed import DeviceFeed
from actorq.learner.update_step import UpdateStep
from actorq.replay import ReplayStorage, TransitionBatch, UniformSampler

OBS, ACTIONS, BATCH = 4, 2, 32
SAMPLE_DELAY = 0.004  # seconds a slow sampler adds to every draw


class SlowSampler(UniformSampler):
    """A uniform sampler whose every draw (one batch, or several at once) takes
    SAMPLE_DELAY longer: sampling time that must not be counted as update time."""

    draws = 0

    def sample(self, storage, batch_size, rng):  # type: ignore[no-untyped-def]
        self.draws += 1
        time.sleep(SAMPLE_DELAY)
        return super().sample(storage, batch_size, rng)

    def sample_batches(self, storage, batch_size, count, rng):  # type: ignore[no-untyped-def]
        self.draws += 1
        time.sleep(SAMPLE_DELAY)
        return super().sample_batches(storage, batch_size, count, rng)


def _storage() -> ReplayStorage:
    rng = np.random.default_rng(0)
    storage = ReplayStorage(400, OBS)
    storage.add(
        TransitionBatch(
            obs=rng.standard_normal((300, OBS), dtype=np.float32),
            action=rng.integers(0, ACTIONS, 300),
            reward=rng.standard_normal(300).astype(np.float32),
            next_obs=rng.standard_normal((300, OBS), dtype=np.float32),
            done=rng.random(300) < 0.1,
            actor_id="a",
            policy_version=1,
        )
    )
    return storage


def _step(path: str, counters: LearnerCounters) -> tuple[UpdateStep, object]:
    config = load_algorithm_config("dqn", {}, batch_size=BATCH)
    algo = make_algorithm("dqn", OBS, ACTIONS, (16, 16), config, seed=3)
    apply_update_path(algo, path)
    rng = np.random.default_rng(1)
    return UpdateStep(algo, _storage(), SlowSampler(), BATCH, counters, rng), algo


@pytest.mark.parametrize("path", ["torch-eager", "numpy-flat"])
def test_update_time_is_counted_apart_from_sampling(path: str) -> None:
    counters = LearnerCounters()
    step, _algo = _step(path, counters)
    calls = 20
    started = time.perf_counter()
    for _ in range(calls):
        step(newest_version=1)
    wall = time.perf_counter() - started
    draws = step.sampler.draws  # type: ignore[attr-defined]
    assert step.draws is not None
    assert counters.updates == calls and draws >= calls // step.draws.count
    assert counters.sample_seconds >= draws * SAMPLE_DELAY  # the slow draws are sampling
    assert 0 < counters.update_seconds < wall - draws * SAMPLE_DELAY  # ... not updating
    shares = counters.wait_fraction() + counters.sample_fraction() + counters.update_fraction()
    assert 0 < counters.update_fraction() < 1 and shares <= 1


def test_a_device_feed_counts_its_calls_as_update_time() -> None:
    counters = LearnerCounters()
    step, algo = _step("torch-eager", counters)
    step.use_feed(DeviceFeed(algo, step.storage, BATCH, k=4))
    started = time.perf_counter()
    for _ in range(5):
        step(newest_version=1)
    wall = time.perf_counter() - started
    assert counters.updates == 20
    # the slow host sampler still runs for the sample lag (2 of the 5 calls pass a
    # multiple of 10 updates); that is not update time
    assert 0 < counters.update_seconds < wall - 2 * SAMPLE_DELAY
