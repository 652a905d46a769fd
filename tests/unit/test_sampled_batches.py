"""The learner draws uniform batches several at a time (actorq.learner.update_step
SampledBatches): each update still gets its own batch of rows that belong to its sample,
the rate limiter still counts one batch per update, prioritized replay keeps its draw per
update."""

from __future__ import annotations

import numpy as np

from actorq import metrics
from actorq.algos import load_algorithm_config, make_algorithm
from actorq.learner import update_step
from actorq.learner.behaviour import BehaviourMonitor
from actorq.learner.counters import LearnerCounters
from actorq.learner.update_step import (
    DRAW_BLOCK_BYTES,
    MAX_BATCHES_PER_DRAW,
    METRICS_EVERY,
    UPDATE_COLUMNS,
    SampledBatches,
    UpdateStep,
    batches_per_draw,
)
from actorq.replay import ReplayStorage, TransitionBatch, UniformSampler
from actorq.replay.prioritized import PrioritizedSampler

OBS, BATCH = 4, 16


class CountingStorage(ReplayStorage):
    """Counts gathers of the update's columns; obs[:, 0] of each row is its slot, so rows
    can be checked; `whole` counts gathers of every column (the behaviour gap's),
    `versions` those of the policy versions alone (the sample lag's)."""

    gathers = whole = versions = 0

    def get(self, indices, columns=None):  # type: ignore[no-untyped-def]
        if columns is None:
            self.whole += 1
        elif tuple(columns) == ("policy_version",):
            self.versions += 1
        else:
            self.gathers += 1
        return super().get(indices, columns)


def _storage(rows: int = 200) -> CountingStorage:
    storage = CountingStorage(rows, OBS)
    obs = np.zeros((rows, OBS), np.float32)
    obs[:, 0] = np.arange(rows)
    storage.add(
        TransitionBatch(
            obs=obs, action=np.arange(rows) % 2, reward=np.zeros(rows, np.float32),
            next_obs=obs, done=np.zeros(rows, np.bool_), actor_id="a", policy_version=1,
        )
    )  # fmt: skip
    return storage


def test_each_batch_holds_the_rows_of_its_own_sample_and_one_gather_serves_several() -> None:
    storage = _storage()
    draws = SampledBatches(
        UniformSampler(), storage, BATCH, 4, np.random.default_rng(0), UPDATE_COLUMNS
    )
    seen = []
    for _ in range(8):
        sample, rows = draws.next()
        assert sample.indices.shape == (BATCH,) and rows["obs"].shape == (BATCH, OBS)
        np.testing.assert_array_equal(rows["obs"][:, 0], sample.indices)
        assert set(rows) == set(UPDATE_COLUMNS)  # the bookkeeping columns are not gathered
        seen.append(sample.indices)
    assert storage.gathers == 2  # 8 batches, 4 per draw
    assert len({tuple(s) for s in seen}) == 8  # no batch handed out twice


def test_updates_count_one_batch_each_and_gather_once_per_draw(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(update_step, "MAX_BATCHES_PER_DRAW", 8)  # 17 updates: 3 draws
    storage = _storage()
    config = load_algorithm_config("dqn", {}, batch_size=BATCH)
    algo = make_algorithm("dqn", OBS, 2, (8, 8), config, seed=0)
    counters = LearnerCounters()
    gap = BehaviourMonitor(algo, continuous=False, sigma=0.0, every=50)
    step = UpdateStep(
        algo, storage, UniformSampler(), BATCH, counters, np.random.default_rng(1), behaviour=gap
    )
    assert step.draws is not None and step.draws.count == 8
    per_draw = step.draws.count
    for _ in range(2 * per_draw + 1):
        step(newest_version=1)
    assert counters.updates == 2 * per_draw + 1
    assert counters.sampled == counters.updates * BATCH  # what the rate limiter counts
    assert storage.gathers == 3
    # Whole rows only where the gap is measured (batch 1, every 50th); the sample lag
    # (batch 10, every METRICS_EVERY-th) reads the policy versions alone.
    assert storage.whole == 1 and storage.versions == 1
    assert sum(gap.rows.values()) == BATCH  # the gap read whole rows of one batch


def test_batches_a_draw_are_bounded_in_count_and_bytes() -> None:
    # CartPole's rows are small: the most batches a draw.
    assert batches_per_draw(ReplayStorage(1000, 4), 128) == MAX_BATCHES_PER_DRAW
    # Atari's stacked frames: 2 x 4 x 84 x 84 bytes a row, so a 32-row batch is ~1.8 MB.
    atari = ReplayStorage(10, 4 * 84 * 84, obs_shape=(4, 84, 84))
    row = atari.row_nbytes(UPDATE_COLUMNS)
    assert row == 2 * 4 * 84 * 84 + 8 + 4 + 1 + 1  # obs, next_obs, action, reward, done, steps
    per_draw = batches_per_draw(atari, 32)
    assert per_draw == DRAW_BLOCK_BYTES // (32 * row) == 2
    # A batch over the block's bytes on its own is still drawn, one at a time.
    assert batches_per_draw(atari, 4096) == 1


def test_prioritized_replay_draws_per_update() -> None:
    config = load_algorithm_config("dqn", {}, batch_size=BATCH)
    algo = make_algorithm("dqn", OBS, 2, (8, 8), config, seed=0)
    storage = _storage()
    sampler = PrioritizedSampler(200)
    sampler.on_insert(np.arange(200))
    counters = LearnerCounters()
    step = UpdateStep(algo, storage, sampler, BATCH, counters, np.random.default_rng(1))
    assert step.draws is None
    for _ in range(3):
        step(newest_version=1)
    assert storage.whole == 3


def _step(counters: LearnerCounters) -> UpdateStep:
    config = load_algorithm_config("dqn", {}, batch_size=BATCH)
    algo = make_algorithm("dqn", OBS, 2, (8, 8), config, seed=0)
    return UpdateStep(algo, _storage(), UniformSampler(), BATCH, counters, np.random.default_rng(1))


def test_a_call_runs_up_to_most_updates_and_says_how_many_passed_a_multiple(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(update_step, "HOST_CALL_SECONDS", 60.0)  # first updates are slow
    counters = LearnerCounters()
    step = _step(counters)
    assert step(newest_version=1, most=8) == 8 and step.last_call == 8
    assert counters.updates == 8 and counters.sampled == 8 * BATCH
    assert step.passed(5) and not step.passed(9)  # updates 1..8 pass 5, not 9
    assert step(newest_version=1, most=3) == 3 and counters.updates == 11
    assert step.passed(9) and step.passed(11) and not step.passed(4)  # 9..11
    assert step(newest_version=1) == 1 and counters.updates == 12  # one by default


def test_a_call_ends_early_once_its_time_is_up(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(update_step, "HOST_CALL_SECONDS", 0.0)
    counters = LearnerCounters()
    step = _step(counters)
    assert step(newest_version=1, most=8) == 1  # a slow update ends its call at once
    assert counters.updates == 1 and step.last_call == 1


def test_loss_gauges_are_written_with_the_counters_every_metrics_flush(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(update_step, "HOST_CALL_SECONDS", 60.0)
    counters = LearnerCounters()
    step = _step(counters)
    metrics.LEARNER_LOSS.set(-1.0)
    step(newest_version=1, most=METRICS_EVERY - 1)
    assert metrics.LEARNER_LOSS._value.get() == -1.0  # not yet flushed
    step(newest_version=1)
    assert counters.last_loss >= 0 and metrics.LEARNER_LOSS._value.get() == counters.last_loss
