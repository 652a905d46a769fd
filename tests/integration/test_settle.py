"""Settling once solved (actorq.learner.settling) against a real Redis, a real quantizer and
real CartPole actors: the learner watches the evaluator's returns in the episodes stream,
then trains at the settled replay ratio, and a restarted learner stays settled."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest
import redis

from actorq import metrics
from actorq.actor.episodes import Episode
from actorq.algos.dqn import DQNConfig
from actorq.config import ConfigError, LearnerSettings, load_settings
from actorq.learner.loop import Learner
from actorq.learner.settle import SolvedWatch, credit_per_update
from actorq.redis_keys import RedisKeys
from actorq.replay import TerminalShareSampler
from actorq.testing.waiting import wait_for
from tests.integration.test_learner_actor import _actor, _learner

BATCH = 32
# Every greedy CartPole episode lasts 8+ steps, so any policy certifies at a mean of 5: the
# tests below choose whether certification can pass by the threshold.
CERTIFIABLE = 5.0


def _episode(
    client: redis.Redis, keys: RedisKeys, kind: str, episode_return: float, version: int = 1
) -> None:
    fields = Episode("test", kind, episode_return, 10, version, 10, time.time()).fields()
    client.xadd(keys.episodes_stream, fields)


def test_watch_names_a_candidate_once_the_mean_reaches_and_skips_rejected_versions(
    redis_client: redis.Redis, redis_keys: RedisKeys
) -> None:
    watch = SolvedWatch(redis_client, redis_keys, threshold=100.0, episodes=4, poll_seconds=0)
    assert watch.poll() is None and watch.mean() is None  # empty stream
    for r in (500.0, 500.0, 500.0, 500.0):
        _episode(redis_client, redis_keys, "train", r)  # actors' returns never count
    redis_client.xadd(redis_keys.episodes_stream, {"kind": "eval"})  # malformed: skipped
    for r in (10.0, 20.0, 30.0, 40.0, 150.0):
        _episode(redis_client, redis_keys, "eval", r)
    assert watch.poll() is None
    assert watch.mean() == pytest.approx((20 + 30 + 40 + 150) / 4)  # the last 4 only
    _episode(redis_client, redis_keys, "eval", 200.0)  # 30, 40, 150, 200: mean 105
    assert watch.poll() == 1  # a candidate, not yet a settled run
    watch.reject(1)
    for r in (300.0, 300.0):
        _episode(redis_client, redis_keys, "eval", r)  # version 1 again: already rejected
    assert watch.poll() is None and watch.held_versions() == []
    _episode(redis_client, redis_keys, "eval", 300.0, version=2)
    assert watch.poll() == 2 and watch.held_versions() == [2]
    watch.solved = True  # settled: the watch stops reading
    _episode(redis_client, redis_keys, "eval", 300.0, version=3)
    assert watch.poll() is None


def test_watch_and_credit_refuse_bad_values(
    redis_client: redis.Redis, redis_keys: RedisKeys
) -> None:
    with pytest.raises(ValueError, match="threshold"):
        SolvedWatch(redis_client, redis_keys, float("nan"))
    with pytest.raises(ValueError, match="episodes"):
        SolvedWatch(redis_client, redis_keys, 1.0, episodes=0)
    with pytest.raises(ValueError, match="ratios must be > 0"):
        credit_per_update(16.0, 0.0)
    assert credit_per_update(16.0, 4.0) == 4.0
    with pytest.raises(ValueError, match="lowers"):
        credit_per_update(1.0, 4.0)


@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({"ACTORQ_SETTLE_AT": "soon"}, "ACTORQ_SETTLE_AT"),
        ({"ACTORQ_SETTLE_AT": "nan"}, "settle_at"),
        ({"ACTORQ_SETTLE_EPISODES": "0"}, "settle_episodes"),
        ({"ACTORQ_SETTLE_CERTIFY_EPISODES": "0"}, "settle_certify_episodes"),
        ({"ACTORQ_SETTLE_SAMPLES_PER_INSERT": "0"}, "settle_samples_per_insert"),
        ({"ACTORQ_SETTLE_LR_SCALE": "2"}, "settle_lr_scale"),
        ({"ACTORQ_SETTLE_LR_SCALE": "-0.1"}, "settle_lr_scale"),
        ({"ACTORQ_SETTLE_AT": "475", "ACTORQ_WORLD_SIZE": "2"}, "one learner"),
        ({"ACTORQ_SETTLE_TERMINAL_SHARE": "1"}, "settle_terminal_share"),
        (
            {"ACTORQ_SETTLE_TERMINAL_SHARE": "0.1", "ACTORQ_REPLAY": "prioritized"},
            "works with uniform replay",
        ),
    ],
)
def test_settings_name_the_bad_value(env: dict[str, str], named: str) -> None:
    with pytest.raises(ConfigError, match=named):
        load_settings(LearnerSettings, env)


def _settling_learner(
    redis_url: str,
    keys: RedisKeys,
    client: redis.Redis,
    address: str,
    ckpt: Path,
    max_updates: int,
    settle_at: float = CERTIFIABLE,
    lr_scale: float = 0.5,
) -> Learner:
    return _learner(
        redis_url,
        keys,
        client,
        address,
        ckpt,
        threading.Event(),
        max_updates,
        dqn=DQNConfig(batch_size=BATCH, learning_starts=200, lr=1e-3),
        settle_at=settle_at,
        settle_episodes=4,
        settle_certify_episodes=20,
        settle_samples_per_insert=1.0,
        settle_lr_scale=lr_scale,
        settle_terminal_share=0.25,
    )


@contextmanager
def _training_with_an_actor(
    learner: Learner,
    redis_url: str,
    keys: RedisKeys,
    client: redis.Redis,
    quantizer: str,
    steps: int,
) -> Iterator[None]:
    """Restore and start `learner`, then train it on a CartPole actor's data; on leaving
    the block, wait for both to finish and shut them down."""
    learner.restore()
    learner.start()
    actor, follower = _actor(redis_url, keys, client, quantizer, steps=steps)
    actor_thread = threading.Thread(target=actor.run)
    actor_thread.start()
    trainer = threading.Thread(target=learner.train)
    trainer.start()
    try:
        yield
    finally:
        trainer.join(timeout=120)
        actor_thread.join(timeout=60)
        learner.finish()
        follower.stop()


def test_learner_settles_when_the_evaluator_solves_and_stays_settled_after_a_restart(
    redis_url: str, redis_client: redis.Redis, redis_keys: RedisKeys, quantizer: str, tmp_path: Path
) -> None:
    learner = _settling_learner(redis_url, redis_keys, redis_client, quantizer, tmp_path, 200)
    assert learner.settling is not None
    learner.settling.watch.poll_seconds = 0.0  # read the stream after every update
    for r in (1.0, 2.0, 3.0, 4.0):
        _episode(redis_client, redis_keys, "eval", r)  # mean 2.5: not solved
    with _training_with_an_actor(learner, redis_url, redis_keys, redis_client, quantizer, 8000):
        wait_for(lambda: learner.counters.updates >= 40, timeout=60)
        assert learner.settling.settled_at is None  # training, but the evaluator has not solved
        assert isinstance(learner.sampler, TerminalShareSampler)
        assert learner.sampler.share == 0.0
        assert metrics.LEARNER_REPLAY_RATIO._value.get() == 4.0
        for r in (10.0, 10.0, 10.0):  # 4, 10, 10, 10: mean 8.5 >= 5
            _episode(redis_client, redis_keys, "eval", r, learner.version)

    assert learner.counters.updates == 200
    settled_at = learner.settling.settled_at
    assert settled_at is not None and 40 <= settled_at < 200
    assert metrics.LEARNER_REPLAY_RATIO._value.get() == 1.0
    assert learner.algo.optimizer.param_groups[0]["lr"] == pytest.approx(5e-4)
    assert learner.sampler.share == 0.25  # a quarter of each settled batch: terminal rows
    # Each settled update counts 4/1 batches toward the limiter: 1 sampled + 3 credited.
    assert learner.counters.credited == 3 * BATCH * (200 - settled_at)
    reported = int(redis_client.get(redis_keys.learner_sampled))
    assert reported == BATCH * 200 + learner.counters.credited

    resumed = _settling_learner(redis_url, redis_keys, redis_client, quantizer, tmp_path, 210)
    resumed.restore()
    assert resumed.settling.settled_at == settled_at
    assert resumed.counters.credited == learner.counters.credited
    assert resumed.settling is not None and resumed.settling.watch.solved  # no longer watching
    assert isinstance(resumed.sampler, TerminalShareSampler) and resumed.sampler.share == 0.25
    # the optimizer's saved state carries the lowered rate; it is not lowered twice
    assert resumed.algo.optimizer.param_groups[0]["lr"] == pytest.approx(5e-4)
    resumed.close()


@pytest.mark.parametrize(("bar", "publishes"), [(1e9, False), (-1e9, True)])
def test_gate_holds_back_versions_that_fail_validation_once_settled(
    redis_url: str,
    redis_client: redis.Redis,
    redis_keys: RedisKeys,
    quantizer: str,
    tmp_path: Path,
    bar: float,
    publishes: bool,
) -> None:
    for r in (100.0, 100.0, 100.0, 100.0):
        _episode(redis_client, redis_keys, "eval", r)  # solved before the first update
    learner = _learner(
        redis_url, redis_keys, redis_client, quantizer, tmp_path, threading.Event(), 120,
        dqn=DQNConfig(batch_size=BATCH, learning_starts=200, lr=1e-3),
        settle_at=CERTIFIABLE, settle_episodes=4, settle_certify_episodes=10,
        settle_validation_episodes=2, settle_validation_bar=bar,
    )  # fmt: skip
    assert learner.settling is not None and learner.settling.gate is not None
    learner.settling.watch.poll_seconds = 0.0
    gated_before = metrics.LEARNER_GATED_VERSIONS._value.get()
    learner.restore()
    learner.start()
    first = learner.version
    actor, follower = _actor(redis_url, redis_keys, redis_client, quantizer, steps=4000)
    actor_thread = threading.Thread(target=actor.run)
    actor_thread.start()
    learner.train()
    actor_thread.join(timeout=60)
    learner.finish()
    follower.stop()

    assert learner.settling.settled_at is not None and learner.settling.settled_at <= 10
    checks = learner.settling.gate.checks
    assert checks >= 10  # publish_every 10 over 120 updates, every one validated
    assert learner.settling.gate.env_steps > 0
    gated = metrics.LEARNER_GATED_VERSIONS._value.get() - gated_before
    if publishes:
        # The publisher keeps only the newest submission while one is in flight, so
        # fewer versions than checks; the start and final publications add 2.
        assert gated == 0 and learner.version > first + 2
        assert learner.settling.champion is not None
    else:
        # Nothing after settling reached the bar: only the final publication (of the
        # online weights, as no champion exists) moved the version.
        assert gated == checks and learner.version <= first + 1
        assert learner.settling.champion is None


def test_solved_version_is_the_newest_in_the_window_that_reached_the_threshold(
    redis_client: redis.Redis, redis_keys: RedisKeys
) -> None:
    watch = SolvedWatch(redis_client, redis_keys, threshold=100.0, episodes=6, poll_seconds=0)
    assert watch.solved_version() is None
    for version, r in ((3, 10.0), (4, 150.0), (4, 130.0), (5, 200.0), (5, 20.0), (6, 90.0)):
        _episode(redis_client, redis_keys, "eval", r, version)
    # The mean of the six is 100; 4 averages 140 and 5 averages 110 (both >= 100); 6 is
    # newer but averages 90
    assert watch.poll() == 5
    assert watch.solved_version() == 5
    for r in (10.0, 10.0, 10.0, 10.0, 10.0):
        _episode(redis_client, redis_keys, "eval", r, 7)
    later = SolvedWatch(redis_client, redis_keys, threshold=1e3, episodes=6, poll_seconds=0)
    later.poll()  # reads all: its window is version 6 (90) and version 7 (10 x 5)
    assert later.solved_version() == 7  # none reached it: the newest in the window


def test_settling_rolls_back_to_the_version_the_evaluator_measured(
    redis_url: str, redis_client: redis.Redis, redis_keys: RedisKeys, quantizer: str, tmp_path: Path
) -> None:
    learner = _learner(
        redis_url, redis_keys, redis_client, quantizer, tmp_path, threading.Event(), 300,
        dqn=DQNConfig(batch_size=BATCH, learning_starts=200, lr=1e-3),
        settle_at=CERTIFIABLE, settle_episodes=4, settle_certify_episodes=10,
        settle_samples_per_insert=1.0, settle_lr_scale=0.0,
    )  # fmt: skip
    assert learner.settling is not None and learner.publisher is not None
    assert learner.publisher.keep_weights_bytes > 0
    learner.settling.watch.poll_seconds = 0.0
    publisher = learner.publisher
    with _training_with_an_actor(learner, redis_url, redis_keys, redis_client, quantizer, 12000):
        wait_for(lambda: publisher.version >= 4, timeout=60)
        measured = publisher.version - 2  # published, and older than the weights now
        held = publisher.weights_of(measured)
        assert held is not None
        for r in (100.0, 100.0, 100.0, 100.0):
            _episode(redis_client, redis_keys, "eval", r, measured)

    assert learner.settling.settled_at is not None and learner.counters.updates == 300
    # Frozen (rate 0) on exactly the measured version's weights, not the newer ones.
    now = learner.algo.policy_weights()
    assert now.keys() == held.keys()
    assert all(np.array_equal(now[k], held[k]) for k in held)


def test_a_candidate_that_fails_certification_is_rejected_and_learning_goes_on(
    redis_url: str, redis_client: redis.Redis, redis_keys: RedisKeys, quantizer: str, tmp_path: Path
) -> None:
    learner = _settling_learner(
        redis_url, redis_keys, redis_client, quantizer, tmp_path, 150, settle_at=400.0
    )
    assert learner.settling is not None and learner.settling.certifier is not None
    learner.settling.watch.poll_seconds = 0.0
    rejected_before = metrics.LEARNER_SETTLE_REJECTED._value.get()
    with _training_with_an_actor(learner, redis_url, redis_keys, redis_client, quantizer, 8000):
        wait_for(lambda: learner.publisher.version >= 3, timeout=60)
        lucky = learner.publisher.version - 1  # held, but an untrained net: ~10 per episode
        for _ in range(4):
            _episode(redis_client, redis_keys, "eval", 500.0, lucky)  # one lucky round

    assert learner.settling.settled_at is None and learner.counters.updates == 150
    assert learner.settling.certifier.checks == 1 and learner.settling.certifier.last_mean < 400.0
    assert learner.settling.watch.rejected_through == lucky
    assert metrics.LEARNER_SETTLE_REJECTED._value.get() == rejected_before + 1
    assert learner.algo.optimizer.param_groups[0]["lr"] == pytest.approx(1e-3)  # not frozen


def test_a_restarted_learner_never_settles_on_weights_nobody_measured(
    redis_url: str, redis_client: redis.Redis, redis_keys: RedisKeys, quantizer: str, tmp_path: Path
) -> None:
    """The evaluator's stream still holds rounds of versions the learner published before
    it was killed; those weights are gone, so they must not settle the run (before the
    fix the restarted learner froze its current weights on the old rounds' mean)."""
    first = _settling_learner(redis_url, redis_keys, redis_client, quantizer, tmp_path, 60)
    with _training_with_an_actor(first, redis_url, redis_keys, redis_client, quantizer, 4000):
        wait_for(lambda: first.publisher.version >= 3, timeout=60)
    measured = first.publisher.version - 1
    for _ in range(4):  # the evaluator's round of a pre-restart version, read after it
        _episode(redis_client, redis_keys, "eval", 100.0, measured)

    resumed = _settling_learner(redis_url, redis_keys, redis_client, quantizer, tmp_path, 160)
    assert resumed.settling is not None
    resumed.settling.watch.poll_seconds = 0.0
    with _training_with_an_actor(resumed, redis_url, redis_keys, redis_client, quantizer, 6000):
        pass
    assert resumed.counters.updates == 160
    assert resumed.settling.settled_at is None  # not held: rejected, learning went on
    assert resumed.settling.watch.rejected_through == measured
    assert resumed.algo.optimizer.param_groups[0]["lr"] == pytest.approx(1e-3)


def test_candidates_in_the_window_survive_a_restart_and_settle_on_their_own_weights(
    redis_url: str, redis_client: redis.Redis, redis_keys: RedisKeys, quantizer: str, tmp_path: Path
) -> None:
    first = _settling_learner(redis_url, redis_keys, redis_client, quantizer, tmp_path, 80)
    assert first.settling is not None
    first.settling.watch.poll_seconds = 0.0
    with _training_with_an_actor(first, redis_url, redis_keys, redis_client, quantizer, 4000):
        wait_for(lambda: first.publisher.version >= 3, timeout=60)
        candidate = first.publisher.version - 1
        measured = first.publisher.weights_of(candidate)
        for _ in range(4):
            _episode(redis_client, redis_keys, "eval", 1.0, candidate)  # not yet solved
        wait_for(lambda: first.settling.watch.held_versions() == [candidate], timeout=30)
    assert first.settling.settled_at is None and measured is not None
    for _ in range(4):  # the candidate's next round, read after the restart
        _episode(redis_client, redis_keys, "eval", 20.0, candidate)

    resumed = _settling_learner(
        redis_url, redis_keys, redis_client, quantizer, tmp_path, 180, lr_scale=0.0
    )
    assert resumed.settling is not None
    resumed.settling.watch.poll_seconds = 0.0
    with _training_with_an_actor(resumed, redis_url, redis_keys, redis_client, quantizer, 6000):
        pass
    assert resumed.settling.settled_at is not None
    assert resumed.settling.certifier is not None and resumed.settling.certifier.checks == 1
    now = resumed.algo.policy_weights()  # frozen on the candidate the first learner held
    assert now.keys() == measured.keys()
    assert all(np.array_equal(now[k], measured[k]) for k in measured)
