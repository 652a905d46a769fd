"""A sparse TD3 learner with every RLx2 part on, through real Redis replay, a real quantizer
and real checkpoints: it trains, publishes exact zeros, and a restarted learner resumes
the same masks, schedule and replay capacity."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import redis
import torch

from actorq.algos import TD3Config
from actorq.config import LearnerSettings
from actorq.envs import make_env
from actorq.learner.loop import Learner
from actorq.learner.publisher import WeightsPublisher
from actorq.models import MLPSpec
from actorq.quant import parse_precision
from actorq.quantizer.store import PolicyStore
from actorq.redis_keys import RedisKeys
from actorq.replay.batch import TransitionBatch
from actorq.replay.redis_io import RedisReplayWriter
from actorq.sparse import SparseTrainingConfig

SPEC = MLPSpec(3, 1, (32, 32), output_activation="tanh")
RLX2 = SparseTrainingConfig(
    sparsity_actor=0.9,
    sparsity_critic=0.8,
    topology_interval=10,
    topology_stop=10_000,
    delayed_nstep=3,
    delayed_nstep_after=20,
    dynamic_buffer=True,
    buffer_distance_threshold=0.0,  # every check drops: the rule must act in a short test
    buffer_check_every=500,
    buffer_min_fraction=0.3,
    buffer_noise_baseline=False,  # random-action data: old and new rows are alike
)


def write_pendulum_episodes(client: redis.Redis, keys: RedisKeys, steps: int) -> None:
    """One-step transitions of random actions, one env, in order (what an actor sends)."""
    env = make_env("Pendulum-v1")
    rng = np.random.default_rng(0)
    obs, _ = env.reset(seed=0)
    rows = []
    for _ in range(steps):
        action = rng.uniform(-1, 1, 1).astype(np.float32)
        next_obs, reward, terminated, truncated, _ = env.step(action)
        rows.append((obs, action, reward, next_obs, terminated))
        obs = next_obs if not (terminated or truncated) else env.reset()[0]
    writer = RedisReplayWriter(client, keys, maxlen_entries=10_000)
    for start in range(0, steps, 100):
        chunk = rows[start : start + 100]
        writer.write(
            TransitionBatch(
                obs=np.stack([r[0] for r in chunk]).astype(np.float32),
                action=np.stack([r[1] for r in chunk]),
                reward=np.array([r[2] for r in chunk], np.float32),
                next_obs=np.stack([r[3] for r in chunk]).astype(np.float32),
                done=np.array([r[4] for r in chunk], bool),
                actor_id="actor-0",
                policy_version=0,
            )
        )


def sparse_learner(
    client: redis.Redis, keys: RedisKeys, quantizer: str, ckpt: Path, updates: int
) -> Learner:
    settings = LearnerSettings(
        redis_prefix=keys.prefix,
        env_id="Pendulum-v1",
        algo="td3",
        hidden=SPEC.hidden,
        quantizer_addr=quantizer,
        checkpoint_dir=str(ckpt),
        checkpoint_every=10_000,
        publish_every=25,
        publish_min_seconds=0.0,
        max_updates=updates,
        replay_capacity=2000,
        samples_per_insert=100.0,
    )
    store = PolicyStore(client, keys)
    publisher = WeightsPublisher(
        quantizer, SPEC, parse_precision("int8"), store.latest_version(), store.latest_version
    )
    config = TD3Config(batch_size=32, learning_starts=100)
    stop = threading.Event()
    return Learner(settings, config, SPEC, client, keys, publisher, stop, rlx2=RLX2)


def test_sparse_learner_trains_publishes_zeros_and_resumes_exactly(
    redis_client: redis.Redis,
    redis_keys: RedisKeys,
    quantizer: str,
    tmp_path: Path,
    one_torch_thread: None,
) -> None:
    write_pendulum_episodes(redis_client, redis_keys, 1500)
    learner = sparse_learner(redis_client, redis_keys, quantizer, tmp_path, updates=60)
    learner.restore()  # rebuilds the mirror from the stream: 1500 rows, linked
    assert learner.rlx2 is not None and len(learner.storage) == 1500
    learner.start()
    learner.train()
    learner.finish()
    rlx2 = learner.rlx2
    assert rlx2.nstep() == 3 and 1 < rlx2.last_steps_mean <= 3  # linked episodes: real n-step
    assert rlx2.sparse.topology_updates >= 6
    assert rlx2.capacity is not None and rlx2.capacity.dropped_total > 0
    live = len(learner.storage)
    assert live == 1500 - 150  # the oldest 10% dropped once (one check was due)
    weights = learner.algo.policy_weights()
    actor = rlx2.sparse.networks["actor"]
    for name, mask in zip(actor.layer_names, actor.masks, strict=True):
        assert np.all(weights[f"{name}.weight"][~mask.numpy()] == 0.0)

    resumed = sparse_learner(redis_client, redis_keys, quantizer, tmp_path, updates=70)
    resumed.restore()
    assert resumed.rlx2 is not None
    assert resumed.counters.updates == 60
    for name, net in rlx2.sparse.networks.items():
        other = resumed.rlx2.sparse.networks[name]
        assert (other.steps, other.topology_updates) == (net.steps, net.topology_updates)
        for a, b in zip(net.masks, other.masks, strict=True):
            assert torch.equal(a, b)
    assert len(resumed.storage) == live  # the rebuilt mirror keeps the dynamic capacity
    assert resumed.rlx2.sparse.train_flops == rlx2.sparse.train_flops
    assert resumed.rlx2.nstep() == 3
    resumed.close()
