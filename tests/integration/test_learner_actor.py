"""Actor -> Redis -> learner -> quantizer -> actor, in one process with real parts: a real
Redis, a real quantizer gRPC server on an ephemeral port, real CartPole envs."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import numpy as np
import pytest
import redis

from actorq.actor.episodes import parse_episodes
from actorq.actor.evaluator import Evaluator
from actorq.actor.loop import Actor, env_epsilons
from actorq.actor.policy_follower import PolicyFollower
from actorq.algos.dqn import DQNConfig
from actorq.config import ActorSettings, ConfigError, LearnerSettings
from actorq.envs import make_vector_env
from actorq.launch.final import read_final_records
from actorq.learner.loop import Learner
from actorq.learner.publisher import WeightsPublisher
from actorq.models import MLPSpec
from actorq.quant import parse_precision
from actorq.quantizer.store import PolicyStore
from actorq.redis_keys import RedisKeys
from actorq.replay import PrioritizedSampler, TransitionBatch, decode_batch
from actorq.replay.redis_io import RedisReplayWriter

SPEC = MLPSpec(obs_dim=4, num_outputs=2, hidden=(32, 32))


def _learner(
    redis_url: str,
    keys: RedisKeys,
    client: redis.Redis,
    address: str,
    ckpt: Path,
    stop: threading.Event,
    max_updates: int,
    replay: str = "uniform",
    dqn: DQNConfig | None = None,
    **overrides,
) -> Learner:
    """A learner on a real Redis and quantizer; `overrides` are further LearnerSettings."""
    settings = LearnerSettings(
        redis_url=redis_url,
        redis_prefix=keys.prefix,
        hidden=SPEC.hidden,
        quantizer_addr=address,
        checkpoint_dir=str(ckpt),
        checkpoint_every=1000,
        max_updates=max_updates,
        replay=replay,
        # publish_min_seconds 0: every 10 updates, however fast the learner
        **{"samples_per_insert": 4.0, "publish_every": 10, "publish_min_seconds": 0.0} | overrides,
    )
    store = PolicyStore(client, keys)
    publisher = WeightsPublisher(
        address, SPEC, parse_precision("int8"), store.latest_version(), store.latest_version
    )
    dqn = dqn or DQNConfig(batch_size=32, learning_starts=200)
    return Learner(settings, dqn, SPEC, client, keys, publisher, stop)


def _actor(
    redis_url: str,
    keys: RedisKeys,
    client: redis.Redis,
    address: str,
    steps: int,
    evaluator: bool = False,
    **settings_overrides,
):
    settings = ActorSettings(
        redis_url=redis_url,
        redis_prefix=keys.prefix,
        quantizer_addr=address,
        envs_per_actor=4,
        max_env_steps=steps,
        push_every=64,
        evaluator=evaluator,
        **settings_overrides,
    )
    follower = PolicyFollower(address, settings.instance_id, expected_spec=SPEC).start()
    env = make_vector_env("CartPole-v1", 4, seed=0)
    kind = Evaluator if evaluator else Actor
    return kind(settings, env, follower, client, keys, threading.Event()), follower


def train_alongside(
    learner: Learner, actor: Actor, follower: PolicyFollower, timeout: float = 60
) -> None:
    """Restore and start `learner`, run `actor` on a thread while the learner trains to
    its max_updates, then finish both."""
    learner.restore()
    learner.start()
    actor_thread = threading.Thread(target=actor.run)
    actor_thread.start()
    learner.train()  # returns at max_updates
    actor_thread.join(timeout=timeout)
    learner.finish()
    follower.stop()


def test_transitions_flow_and_versions_advance_then_resume(
    redis_url: str, redis_client: redis.Redis, redis_keys: RedisKeys, quantizer: str, tmp_path: Path
) -> None:
    stop = threading.Event()
    learner = _learner(
        redis_url, redis_keys, redis_client, quantizer, tmp_path, stop, max_updates=150
    )
    actor, follower = _actor(redis_url, redis_keys, redis_client, quantizer, steps=3000)
    train_alongside(learner, actor, follower)

    # every acknowledged transition is in Redis, stamped, and was ingested by the learner
    assert actor.env_steps >= 3000 and actor.inserted == actor.env_steps
    assert int(redis_client.get(redis_keys.inserted_counter)) == actor.inserted
    entries = redis_client.xrange(redis_keys.replay_stream)
    batches = [decode_batch(fields) for _, fields in entries]
    assert sum(len(b) for b in batches) == actor.inserted
    assert int(redis_client.hget(redis_keys.learner_ingested, "0")) == actor.inserted
    assert {b.actor_id for b in batches} == {"actor-0"}
    assert {b.precision for b in batches} == {"int8"}
    versions = [b.policy_version for b in batches]
    assert versions == sorted(versions) and versions[0] >= 1
    assert learner.counters.updates == 150
    published = learner.publisher.version
    # start + final at least; in between the publisher keeps only the newest snapshot, so
    # how many of the 15 periodic ones get through depends on the machine's load
    assert published >= 2 and learner.publisher.failures == 0

    # a new learner on the same checkpoint folder and Redis resumes everything
    stop2 = threading.Event()
    resumed = _learner(
        redis_url, redis_keys, redis_client, quantizer, tmp_path, stop2, max_updates=160
    )
    resumed.restore()
    assert resumed.counters.updates == 150
    assert resumed.publisher.version == published
    assert len(resumed.storage) == actor.inserted  # replay mirror rebuilt from the stream
    resumed.start()
    assert resumed.publisher.version == published + 1  # versions are never reused
    resumed.train()
    resumed.finish()
    assert resumed.counters.updates == 160


@pytest.mark.parametrize(("min_seconds", "submitted"), [(0.0, 150), (60.0, 1)])
def test_publications_wait_for_the_wall_clock_floor(
    redis_url: str,
    redis_client: redis.Redis,
    redis_keys: RedisKeys,
    quantizer: str,
    tmp_path: Path,
    min_seconds: float,
    submitted: int,
) -> None:
    """publish_every 1: without a floor every update submits a snapshot; with a 60 s
    floor only the first of 150 updates does (the final one is published at finish)."""
    learner = _learner(
        redis_url, redis_keys, redis_client, quantizer, tmp_path, threading.Event(), 150,
        publish_every=1, publish_min_seconds=min_seconds,
    )  # fmt: skip
    steps: list[int] = []
    submit = learner.publisher.submit
    learner.publisher.submit = lambda snap: (steps.append(snap.learner_step), submit(snap))[1]
    actor, follower = _actor(redis_url, redis_keys, redis_client, quantizer, steps=2000)
    train_alongside(learner, actor, follower)
    assert learner.counters.updates == 150
    assert len(steps) == submitted and steps[0] == 1
    assert learner.publisher.version >= 2 and learner.publisher.failures == 0


def test_prioritized_learner_scores_rows_by_td_error_and_rebuilds_at_max_priority(
    redis_url: str, redis_client: redis.Redis, redis_keys: RedisKeys, quantizer: str, tmp_path: Path
) -> None:
    stop = threading.Event()
    learner = _learner(
        redis_url, redis_keys, redis_client, quantizer, tmp_path, stop, 100, "prioritized"
    )
    assert isinstance(learner.sampler, PrioritizedSampler)
    actor, follower = _actor(redis_url, redis_keys, redis_client, quantizer, steps=2000)
    train_alongside(learner, actor, follower)
    assert learner.counters.updates == 100
    rows = np.arange(len(learner.storage))
    priorities = learner.sampler.priorities(rows)
    # sampled rows got (|td| + eps) ** alpha; the rest still hold the running max
    assert np.all(priorities > 0)
    assert len(np.unique(priorities)) > 100
    assert learner.sampler.max_priority > 0

    # documented fallback: after a restart every rebuilt row enters at the max priority
    resumed = _learner(
        redis_url,
        redis_keys,
        redis_client,
        quantizer,
        tmp_path,
        threading.Event(),
        100,
        "prioritized",
    )
    resumed.restore()
    rebuilt = resumed.sampler.priorities(np.arange(len(resumed.storage)))
    assert len(resumed.storage) == actor.inserted
    np.testing.assert_array_equal(rebuilt, np.full(len(rebuilt), resumed.sampler.max_priority))
    resumed.close()  # a learner that will not run: its reporter and publisher threads end
    assert {"progress", "publisher"}.isdisjoint(t.name for t in threading.enumerate())


def test_learner_on_a_captured_path_sets_priorities_one_update_late(
    redis_url: str, redis_client: redis.Redis, redis_keys: RedisKeys, quantizer: str, tmp_path: Path
) -> None:
    """The learner loop on a captured update path (actorq.algos.capture): no host sync per
    update, priorities from the previous update, losses read back every 16 updates."""
    from actorq.algos.capture import captured_runner, current_update_path, install_runner

    stop = threading.Event()
    learner = _learner(
        redis_url, redis_keys, redis_client, quantizer, tmp_path, stop, 100, "prioritized"
    )
    install_runner(learner.algo, "torch-eager", readback_every=16)  # the step, submitted
    assert current_update_path(learner.algo) == "torch-eager"
    actor, follower = _actor(redis_url, redis_keys, redis_client, quantizer, steps=2000)
    train_alongside(learner, actor, follower)
    assert learner.counters.updates == learner.algo.num_updates == 100
    assert np.isfinite(learner.counters.last_loss)  # read back from the ring
    runner = captured_runner(learner.algo)
    assert runner is not None and runner.pending == 100 % 16
    priorities = learner.sampler.priorities(np.arange(len(learner.storage)))
    assert len(np.unique(priorities)) > 100  # 99 updates' |TD errors| landed


def test_evaluator_writes_episodes_but_no_replay(
    redis_url: str, redis_client: redis.Redis, redis_keys: RedisKeys, quantizer: str, tmp_path: Path
) -> None:
    stop = threading.Event()
    learner = _learner(
        redis_url, redis_keys, redis_client, quantizer, tmp_path, stop, max_updates=1
    )
    learner.start()  # publishes version 1
    evaluator, follower = _actor(redis_url, redis_keys, redis_client, quantizer, 0, evaluator=True)
    check_one_eval_round(evaluator, follower, learner, redis_client, redis_keys)


def check_one_eval_round(
    evaluator: Evaluator,
    follower: PolicyFollower,
    learner: Learner,
    client: redis.Redis,
    keys: RedisKeys,
    timeout: float = 30,
) -> None:
    """Run `evaluator` until its first round is done, then stop everything; the round's
    episodes (one per env) are in Redis and no replay was written."""
    thread = threading.Thread(target=evaluator.run)
    thread.start()
    deadline = time.monotonic() + timeout
    while evaluator.rounds < 1 and time.monotonic() < deadline:
        time.sleep(0.05)
    evaluator.stop.set()
    thread.join(timeout=30)
    follower.stop()
    learner.finish()
    assert evaluator.rounds >= 1
    episodes = [e for _, f in client.xrange(keys.episodes_stream) for e in parse_episodes(f)]
    assert len(episodes) >= evaluator.env.num_envs  # one per env per round
    assert {e.kind for e in episodes} == {"eval"}
    assert client.xlen(keys.replay_stream) == 0


def test_dqn_actors_write_n_step_transitions_the_learner_discounts(
    redis_url: str, redis_client: redis.Redis, redis_keys: RedisKeys, quantizer: str, tmp_path: Path
) -> None:
    """ACTORQ_N_STEP=3 on a discrete actor: CartPole transitions carry 3 rewards (1 + 0.9 +
    0.81), fewer when an episode ended first, and the learner's mirror keeps the lengths."""
    stop = threading.Event()
    learner = _learner(redis_url, redis_keys, redis_client, quantizer, tmp_path, stop, 1)
    learner.start()
    actor, follower = _actor(
        redis_url, redis_keys, redis_client, quantizer, 600, n_step=3, gamma=0.9
    )
    actor.run()
    follower.stop()
    batches = [decode_batch(f) for _, f in redis_client.xrange(redis_keys.replay_stream)]
    steps = np.concatenate([b.steps for b in batches])
    reward = np.concatenate([b.reward for b in batches])
    done = np.concatenate([b.done for b in batches])
    assert len(steps) == actor.inserted and set(np.unique(steps)) <= {1, 2, 3}
    assert (steps == 3).mean() > 0.8  # most transitions are full windows
    for k in (1, 2, 3):  # every transition sums its own k rewards of 1, discounted
        np.testing.assert_allclose(reward[steps == k], sum(0.9**i for i in range(k)), rtol=1e-6)
    assert done.any() and (steps[done] <= 3).all()  # episodes end inside a window too
    learner.reader.poll(block_ms=0)
    rows = learner.storage.get(np.arange(len(learner.storage)))
    assert (rows["steps"] == 3).sum() == (steps[: len(rows["steps"])] == 3).sum()
    learner.finish()


def test_epsilons_spread_over_all_envs_of_all_actors() -> None:
    eps = np.concatenate(
        [
            env_epsilons(ActorSettings(actor_index=i, num_actors=2, envs_per_actor=4))
            for i in range(2)
        ]
    )
    assert eps[0] == pytest.approx(0.4) and eps[-1] == pytest.approx(0.4**8)
    assert np.all(np.diff(eps) < 0)  # strictly decreasing across the pool


def test_learner_refuses_warm_up_larger_than_its_replay(
    redis_url: str, redis_client: redis.Redis, redis_keys: RedisKeys, quantizer: str, tmp_path: Path
) -> None:
    settings = LearnerSettings(
        redis_url=redis_url, redis_prefix=redis_keys.prefix, replay_capacity=1000
    )
    store = PolicyStore(redis_client, redis_keys)
    publisher = WeightsPublisher(quantizer, SPEC, parse_precision("int8"), 0, store.latest_version)
    with pytest.raises(ConfigError, match="ACTORQ_DQN_LEARNING_STARTS=2000"):
        Learner(
            settings,
            DQNConfig(learning_starts=2000),
            SPEC,
            redis_client,
            redis_keys,
            publisher,
            threading.Event(),
        )
    publisher.close()


def test_final_records_count_transitions_trimmed_before_the_learner_read_them(
    redis_url: str, redis_client: redis.Redis, redis_keys: RedisKeys, quantizer: str, tmp_path: Path
) -> None:
    """Actors far ahead of a stream capped at a few entries: the learner can only read
    what is left, and the run's final records say how many it never saw."""
    writer = RedisReplayWriter(redis_client, redis_keys, maxlen_entries=5)
    rng = np.random.default_rng(0)
    for _ in range(400):  # approximate trimming keeps up to a macro node (~100 entries)
        writer.write(
            TransitionBatch(
                obs=rng.normal(size=(8, 4)).astype(np.float32),
                action=rng.integers(0, 2, 8),
                reward=np.ones(8, np.float32),
                next_obs=rng.normal(size=(8, 4)).astype(np.float32),
                done=np.zeros(8, bool),
                actor_id="actor-0",
                policy_version=1,
                precision="int8",
            )
        )
    stop = threading.Event()
    learner = _learner(redis_url, redis_keys, redis_client, quantizer, tmp_path, stop, 0)
    learner.restore()
    learner.start()
    learner.finish()

    records = read_final_records(redis_client, redis_keys, tmp_path)
    left = 8 * redis_client.xlen(redis_keys.replay_stream)  # every entry holds 8
    assert records.transitions_inserted == 3200
    assert records.transitions_ingested == learner.reader.added == len(learner.storage) == left
    assert records.transitions_not_ingested == 3200 - left > 0
    # With two learners and one report (a rank killed at stop), the total is not known.
    two = read_final_records(redis_client, redis_keys, tmp_path, learners=2)
    assert two.transitions_ingested is None and two.transitions_not_ingested is None


def test_a_low_replay_ratio_with_a_small_insert_buffer_does_not_stall(
    redis_url: str, redis_client: redis.Redis, redis_keys: RedisKeys, quantizer: str, tmp_path: Path
) -> None:
    """0.125 samples per insert and actors allowed 300 transitions ahead (what `actorq run`
    gives continuous control: learning_starts + 1000): the learner may take only a few
    updates before it needs more data, fewer than the 10 between its periodic reports of
    the sampled count. It reports when it goes idle, so the actors see that count and go on
    (before, both waited forever: TD3 on HalfCheetah at 0.125 stopped at 4,096 env steps)."""
    stop = threading.Event()
    learner = _learner(
        redis_url, redis_keys, redis_client, quantizer, tmp_path, stop, max_updates=60,
        samples_per_insert=0.125, replay_capacity=1000,
    )  # fmt: skip
    actor, follower = _actor(
        redis_url, redis_keys, redis_client, quantizer, steps=20_000,
        samples_per_insert=0.125, insert_error_buffer=300.0,
    )  # fmt: skip
    learner.restore()
    learner.start()
    actor_thread = threading.Thread(target=actor.run)
    actor_thread.start()
    trainer = threading.Thread(target=learner.train)
    trainer.start()
    trainer.join(timeout=60)
    stalled = trainer.is_alive()
    stop.set()
    actor.stop.set()
    trainer.join(timeout=10)
    actor_thread.join(timeout=30)
    learner.finish()
    follower.stop()
    assert not stalled, f"stalled at {learner.counters.updates} updates, {actor.inserted} inserted"
    assert learner.counters.updates == 60
    assert actor.inserted > 300 + 8 * 60 * 32 // 2  # well past the first buffer's worth
