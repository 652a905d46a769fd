"""Observation normalisation through the real broadcast path: a TD3 learner with obs_norm
trains on Pendulum transitions from a real actor (real Redis, real quantizer gRPC server),
publishes int8 policies that carry the statistics, and the actor's int8 module acts like
the learner on raw observations."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest
import redis

from actorq.actor.loop import Actor
from actorq.actor.policy_follower import PolicyFollower
from actorq.algos import TD3Config
from actorq.algos.factory import policy_spec
from actorq.config import ActorSettings, ConfigError, LearnerSettings
from actorq.envs import make_vector_env
from actorq.learner.loop import Learner
from actorq.learner.publisher import WeightsPublisher
from actorq.quant import parse_precision
from actorq.quant.policy_module import InputNorm
from actorq.quantizer.store import PolicyStore
from actorq.redis_keys import RedisKeys
from actorq.testing.waiting import wait_for

ENV = "Pendulum-v1"
HIDDEN = (32, 32)


def _settings(redis_url: str, keys: RedisKeys, address: str, ckpt: Path) -> LearnerSettings:
    return LearnerSettings(
        redis_url=redis_url,
        redis_prefix=keys.prefix,
        env_id=ENV,
        algo="td3",
        hidden=HIDDEN,
        quantizer_addr=address,
        checkpoint_dir=str(ckpt),
        publish_every=20,
        publish_min_seconds=0.0,
        max_updates=100,
        samples_per_insert=64.0,
    )


def test_int8_actor_applies_the_learners_normalisation(
    redis_url: str, redis_client: redis.Redis, redis_keys: RedisKeys, quantizer: str, tmp_path: Path
) -> None:
    config = TD3Config(obs_norm=True, batch_size=32, learning_starts=256)
    spec = policy_spec(ENV, "td3", HIDDEN, config)
    assert spec.input_norm
    store = PolicyStore(redis_client, redis_keys)
    publisher = WeightsPublisher(quantizer, spec, parse_precision("int8"), 0, store.latest_version)
    stop = threading.Event()
    settings = _settings(redis_url, redis_keys, quantizer, tmp_path)
    learner = Learner(settings, config, spec, redis_client, redis_keys, publisher, stop)
    learner.restore()
    learner.start()

    actor_settings = ActorSettings(
        redis_url=redis_url,
        redis_prefix=redis_keys.prefix,
        quantizer_addr=quantizer,
        env_id=ENV,
        envs_per_actor=4,
        max_env_steps=2000,
        push_every=64,
    )
    follower = PolicyFollower(quantizer, actor_settings.instance_id).start()
    env = make_vector_env(ENV, 4, seed=0)
    actor = Actor(actor_settings, env, follower, redis_client, redis_keys, threading.Event())
    actor_thread = threading.Thread(target=actor.run)
    actor_thread.start()
    learner.train()  # returns at max_updates
    actor_thread.join(timeout=120)
    learner.finish()  # publishes the final weights (statistics frozen from here)

    final = learner.publisher.version
    wait_for(lambda: follower.current is not None and follower.current.version == final)
    loaded = follower.current
    follower.stop()
    assert loaded is not None and loaded.version == final and loaded.precision == "int8"
    assert loaded.module is None  # the actor acts in numpy: no torch module was built
    assert loaded.numpy_forward is not None
    norm = loaded.torch_module().layers[0]
    assert isinstance(norm, InputNorm)
    rms = learner.algo.obs_rms
    assert rms is not None and rms.count > 0  # it normalised what it trained on
    np.testing.assert_array_equal(norm.shift.numpy(), rms.mean.astype(np.float32))
    obs = np.stack(
        [np.cos(np.linspace(-3, 3, 64)), np.sin(np.linspace(-3, 3, 64)), np.linspace(-8, 8, 64)],
        axis=1,
    ).astype(np.float32)
    acted = loaded.numpy_forward(obs)  # what the actor runs
    np.testing.assert_allclose(acted, learner.algo.actions(obs), atol=0.05)  # int8 vs fp32


def test_learner_refuses_a_publisher_spec_its_algorithm_does_not_fill(
    redis_url: str, redis_client: redis.Redis, redis_keys: RedisKeys, quantizer: str, tmp_path: Path
) -> None:
    config = TD3Config(obs_norm=True)
    without_norm = policy_spec(ENV, "td3", HIDDEN)  # what an older launcher would declare
    store = PolicyStore(redis_client, redis_keys)
    publisher = WeightsPublisher(
        quantizer, without_norm, parse_precision("int8"), 0, store.latest_version
    )
    settings = _settings(redis_url, redis_keys, quantizer, tmp_path)
    with pytest.raises(ConfigError, match="publisher declares"):
        Learner(
            settings, config, without_norm, redis_client, redis_keys, publisher, threading.Event()
        )
    publisher.close()
