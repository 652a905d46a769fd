"""The behaviour-vs-learner gap with real parts: int8 actors record their own policy's
choice, Redis carries it, the learner measures it (and weights n-step rows by it)."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import redis

from actorq.actor.loop import Actor, env_epsilons
from actorq.actor.policy_follower import PolicyFollower
from actorq.algos.td3 import TD3Config
from actorq.config import ActorSettings, LearnerSettings
from actorq.envs import make_vector_env
from actorq.learner.loop import Learner
from actorq.learner.publisher import WeightsPublisher
from actorq.models import MLPSpec
from actorq.quant import parse_precision
from actorq.quantizer.store import PolicyStore
from actorq.redis_keys import RedisKeys
from actorq.replay import decode_batch
from actorq.sparse.config import SparseTrainingConfig
from tests.integration.test_learner_actor import _actor, _learner, train_alongside

PENDULUM = MLPSpec(obs_dim=3, num_outputs=1, hidden=(32, 32), output_activation="tanh")


def test_learner_reports_the_gap_of_int8_dqn_actors(
    redis_url: str, redis_client: redis.Redis, redis_keys: RedisKeys, quantizer: str, tmp_path: Path
) -> None:
    stop = threading.Event()
    learner = _learner(
        redis_url,
        redis_keys,
        redis_client,
        quantizer,
        tmp_path,
        stop,
        120,
        gap_every=1,
        gap_min_seconds=0.0,  # every batch, however fast the learner
    )
    actor, follower = _actor(redis_url, redis_keys, redis_client, quantizer, steps=2000)
    train_alongside(learner, actor, follower)

    batches = [decode_batch(f) for _, f in redis_client.xrange(redis_keys.replay_stream)]
    assert {b.precision for b in batches} == {"int8"}
    logp = np.concatenate([b.behaviour_logp for b in batches])
    greedy = np.concatenate([b.action == b.behaviour for b in batches])
    # every log-prob is epsilon-greedy's for one of this actor's env epsilons
    eps = env_epsilons(actor.s)
    allowed_greedy, allowed_other = np.log(1 - eps + eps / 2), np.log(eps / 2)
    assert np.isclose(logp[greedy][:, None], allowed_greedy, atol=1e-5).any(axis=1).all()
    assert np.isclose(logp[~greedy][:, None], allowed_other, atol=1e-5).any(axis=1).all()

    status = learner.behaviour_status()
    assert status["behaviour_rows_measured"] == 120 * 32  # every sampled row, none old
    assert status["behaviour_rows_unmeasured"] == 0
    assert 0.0 <= status["behaviour_gap"] <= 1.0
    assert 0.0 < status["behaviour_rho_mean"] <= 1.0


def services(redis_url: str, keys: RedisKeys, address: str) -> dict[str, str]:
    """The settings every service of a test shares: where Redis and the quantizer are."""
    return {"redis_url": redis_url, "redis_prefix": keys.prefix, "quantizer_addr": address}


def pendulum_actor(redis_url: str, keys: RedisKeys, client: redis.Redis, address: str):
    where = services(redis_url, keys, address)
    exploration = {"random_steps": 200, "noise_sigma": 0.2}
    settings = ActorSettings(
        **where, envs_per_actor=2, max_env_steps=1600, push_every=32, **exploration
    )
    follower = PolicyFollower(address, settings.instance_id, expected_spec=PENDULUM).start()
    env = make_vector_env("Pendulum-v1", 2, seed=0)
    return Actor(settings, env, follower, client, keys, threading.Event()), follower


def test_td3_learner_weights_learner_side_n_step_rows_of_int8_actors(
    redis_url: str, redis_client: redis.Redis, redis_keys: RedisKeys, quantizer: str, tmp_path: Path
) -> None:
    run = {
        "publish_every": 10,
        "publish_min_seconds": 0.0,
        "max_updates": 150,
        "samples_per_insert": 4.0,
    }
    settings = LearnerSettings(
        **services(redis_url, redis_keys, quantizer),
        env_id="Pendulum-v1",
        algo="td3",
        hidden=PENDULUM.hidden,
        **run,
        gap_every=1,
        gap_min_seconds=0.0,
        noise_sigma=0.2,  # the actors' sigma
    )
    store = PolicyStore(redis_client, redis_keys)
    publisher = WeightsPublisher(
        quantizer, PENDULUM, parse_precision("int8"), store.latest_version(), store.latest_version
    )
    config = TD3Config(batch_size=32, learning_starts=200, is_correction=True, rho_bar=1.0)
    rlx2 = SparseTrainingConfig(delayed_nstep=3, delayed_nstep_after=0)
    stop = threading.Event()
    learner = Learner(
        settings, config, PENDULUM, redis_client, redis_keys, publisher, stop, rlx2=rlx2
    )
    actor, follower = pendulum_actor(redis_url, redis_keys, redis_client, quantizer)
    train_alongside(learner, actor, follower)

    status = learner.behaviour_status()
    assert status["behaviour_rows_measured"] == 150 * 32
    assert 0.0 < status["behaviour_gap"] < 0.5  # lag and int8: small, never exactly zero
    weight = status["behaviour_is_weight_mean"]
    assert 0.0 < weight <= 1.0  # truncated at rho_bar = 1
    assert 0.0 <= status["behaviour_is_truncated_fraction"] <= 1.0
    assert status["behaviour_is_unknown_steps"] == 0  # Gaussian actors send every log-prob


def test_dqn_actors_cut_n_step_windows_at_exploratory_actions(
    redis_url: str, redis_client: redis.Redis, redis_keys: RedisKeys, quantizer: str, tmp_path: Path
) -> None:
    """ACTORQ_NSTEP_CUT: windows end before a non-greedy action, so short transitions
    appear that did not end an episode (without the cut they only come at episode ends)."""
    stop = threading.Event()
    learner = _learner(redis_url, redis_keys, redis_client, quantizer, tmp_path, stop, 1)
    learner.start()
    actor, follower = _actor(
        redis_url, redis_keys, redis_client, quantizer, 800, n_step=3, gamma=0.9, nstep_cut=True
    )
    actor.run()
    follower.stop()
    learner.finish()
    batches = [decode_batch(f) for _, f in redis_client.xrange(redis_keys.replay_stream)]
    steps = np.concatenate([b.steps for b in batches])
    done = np.concatenate([b.done for b in batches])
    assert actor.nstep.cuts > 0
    assert ((steps < 3) & ~done).sum() >= actor.nstep.cuts  # each cut ends >= 1 window early
    assert (steps == 3).any()  # greedy stretches still make full windows
