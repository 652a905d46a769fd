"""DQN on minatar:breakout with real parts: a real Redis, a real quantizer gRPC server, a
real MinAtar actor running the int8 CNN blob and pushing zstd-compressed uint8
transitions (replay format "3") that the learner mirrors as uint8 and trains on."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import redis

from actorq.actor.evaluator import Evaluator
from actorq.actor.loop import Actor
from actorq.actor.policy_follower import PolicyFollower
from actorq.algos.dqn import DQNConfig
from actorq.algos.factory import policy_spec
from actorq.config import ActorSettings, LearnerSettings
from actorq.envs import make_vector_env
from actorq.learner.loop import Learner
from actorq.learner.publisher import WeightsPublisher
from actorq.quant import parse_precision
from actorq.quant.conv import Int8ConvStack
from actorq.quantizer.store import PolicyStore
from actorq.redis_keys import RedisKeys
from actorq.replay import RedisReplayReader, ReplayStorage, decode_batch
from tests.integration.test_learner_actor import check_one_eval_round, train_alongside

ENV = "minatar:breakout"
SPEC = policy_spec(ENV, "dqn", (64, 64))


def _learner(url: str, keys: RedisKeys, client: redis.Redis, address: str, ckpt: Path,
             max_updates: int) -> Learner:  # fmt: skip
    settings = LearnerSettings(
        redis_url=url, redis_prefix=keys.prefix, env_id=ENV, quantizer_addr=address,
        checkpoint_dir=str(ckpt), publish_every=10, publish_min_seconds=0.0,
        max_updates=max_updates, samples_per_insert=4.0, replay_capacity=20_000,
    )  # fmt: skip
    store = PolicyStore(client, keys)
    publisher = WeightsPublisher(
        address, SPEC, parse_precision("int8"), store.latest_version(), store.latest_version
    )
    dqn = DQNConfig(batch_size=32, learning_starts=300)
    return Learner(settings, dqn, SPEC, client, keys, publisher, threading.Event())


def _worker(url: str, keys: RedisKeys, client: redis.Redis, address: str, steps: int,
            evaluator: bool = False) -> tuple[Actor | Evaluator, PolicyFollower]:  # fmt: skip
    settings = ActorSettings(
        redis_url=url, redis_prefix=keys.prefix, env_id=ENV, quantizer_addr=address,
        envs_per_actor=4, max_env_steps=steps, push_every=64, evaluator=evaluator,
        obs_codec="zstd",
    )  # fmt: skip
    follower = PolicyFollower(address, settings.instance_id, expected_spec=SPEC).start()
    env = make_vector_env(ENV, 4, seed=0)
    kind = Evaluator if evaluator else Actor
    return kind(settings, env, follower, client, keys, threading.Event()), follower


def test_minatar_actor_feeds_pixel_replay_that_the_cnn_learner_trains_on(
    redis_url: str, redis_client: redis.Redis, redis_keys: RedisKeys, quantizer: str, tmp_path: Path
) -> None:
    args = (redis_url, redis_keys, redis_client, quantizer)
    learner = _learner(*args, tmp_path, max_updates=60)
    actor, follower = _worker(*args, steps=2000)
    train_alongside(learner, actor, follower, timeout=120)

    # the actor ran the int8 CNN blob and stamped its transitions with it
    policy = follower.current
    assert policy is not None and policy.precision == "int8"
    assert any(isinstance(m, Int8ConvStack) for m in policy.module.modules())
    assert follower.loads >= 1 and follower.rejections == 0
    # Redis holds format "3" entries: uint8 pixels, zstd-compressed
    entries = redis_client.xrange(redis_keys.replay_stream)
    assert {f[b"v"] for _, f in entries} == {b"3"}
    assert {f[b"obs_codec"] for _, f in entries} == {b"zstd"}
    batches = [decode_batch(f) for _, f in entries]
    assert sum(len(b) for b in batches) == actor.inserted >= 2000
    assert all(b.obs.dtype == np.uint8 and b.obs_shape == (4, 10, 10) for b in batches)
    assert {b.precision for b in batches} == {"int8"} and batches[0].policy_version >= 1
    obs_bytes = sum(len(f[b"obs"]) + len(f[b"next_obs"]) for _, f in entries)
    assert obs_bytes / actor.inserted < 0.1 * 800  # vs 800 raw uint8 bytes per transition
    # the learner mirrored them as uint8 [C, H, W] and trained on them
    assert learner.storage.obs_layout == (np.dtype(np.uint8), (4, 10, 10))
    assert len(learner.storage) == actor.inserted
    assert learner.reader.rejected == 0 and learner.counters.updates == 60
    assert learner.publisher.version >= 2 and learner.publisher.failures == 0

    # a restarted learner resumes from the checkpoint and rebuilds the uint8 mirror
    resumed = _learner(*args, tmp_path, max_updates=65)
    resumed.restore()
    assert resumed.counters.updates == 60 and len(resumed.storage) == actor.inserted
    rows = resumed.storage.get(np.arange(64))
    np.testing.assert_array_equal(rows["obs"], batches[0].obs)
    resumed.start()
    resumed.train()
    resumed.finish()
    assert resumed.counters.updates == 65

    # a flat-observation mirror refuses the pixel entries (same obs_dim, other layout)
    flat = RedisReplayReader(redis_client, redis_keys, ReplayStorage(1000, SPEC.obs_dim))
    assert flat.rebuild() == 0
    assert flat.rejected_by_reason["obs_shape_mismatch"] == len(entries)


def test_evaluator_plays_minatar_with_the_int8_cnn(
    redis_url: str, redis_client: redis.Redis, redis_keys: RedisKeys, quantizer: str, tmp_path: Path
) -> None:
    args = (redis_url, redis_keys, redis_client, quantizer)
    learner = _learner(*args, tmp_path, max_updates=1)
    learner.start()  # publishes version 1
    evaluator, follower = _worker(*args, steps=0, evaluator=True)
    check_one_eval_round(evaluator, follower, learner, redis_client, redis_keys, timeout=60)
    assert follower.current is not None and follower.current.precision == "int8"
