"""The actor loop on the EnvPool backend (`ACTORQ_ENV_BACKEND=envpool`): real EnvPool envs,
a real int8 policy, a real Redis. What it stores must be real transitions: none spans
EnvPool's reset step (NEXT_STEP autoreset), and episodes count only real steps."""

from __future__ import annotations

import threading

import numpy as np
import pytest
import redis

from actorq.actor.episodes import parse_episodes
from actorq.actor.fixed_policy import StaticFollower, make_policy
from actorq.actor.loop import Actor
from actorq.config import ActorSettings
from actorq.envs import make_vector_env
from actorq.redis_keys import RedisKeys
from actorq.replay.batch import decode_batch


def _act(redis_url: str, client: redis.Redis, keys: RedisKeys, env_id: str, **overrides):
    settings = ActorSettings(
        redis_url=redis_url, redis_prefix=keys.prefix, env_id=env_id, env_backend="envpool",
        seed=3, **overrides,
    )  # fmt: skip
    env = make_vector_env(env_id, settings.envs_per_actor, settings.seed, backend="envpool")
    policy = make_policy(env_id, (16, 16), "int8", seed=5)
    actor = Actor(settings, env, StaticFollower(policy), client, keys, threading.Event())
    actor.run()
    env.close()
    batches = [decode_batch(fields) for _, fields in client.xrange(keys.replay_stream)]
    episodes = [e for _, f in client.xrange(keys.episodes_stream) for e in parse_episodes(f)]
    stored = sum(len(b) for b in batches)
    assert stored == actor.inserted == actor.env_steps == int(client.get(keys.inserted_counter))
    column = {c: np.concatenate([getattr(b, c) for b in batches]) for c in ("obs", "next_obs")}
    return actor, batches, column, episodes


@pytest.mark.parametrize("fast", [True, False], ids=["fast-path", "plain-path"])
def test_cartpole_transitions_never_span_an_envpool_reset(
    redis_url: str, redis_client: redis.Redis, redis_keys: RedisKeys, fast: bool
) -> None:
    actor, batches, column, episodes = _act(
        redis_url, redis_client, redis_keys, "CartPole-v1",
        envs_per_actor=8, max_env_steps=3000, fast_step=fast,
    )  # fmt: skip
    assert actor.env_steps >= 3000 and column["obs"].dtype == np.float32
    # one physics step changes the pole angle by < 0.1 rad; a terminal -> reset pair would
    # jump from beyond 0.2094 rad back to within 0.05
    assert np.abs(column["next_obs"][:, 2] - column["obs"][:, 2]).max() < 0.1
    done = np.concatenate([b.done for b in batches])
    ended = column["next_obs"][done]
    assert done.any() and np.all((np.abs(ended[:, 2]) > 0.2094) | (np.abs(ended[:, 0]) > 2.4))
    # CartPole pays 1 on every real step; EnvPool's reset steps pay 0 and must not be stored
    assert np.all(np.concatenate([b.reward for b in batches]) == 1.0)
    assert len(episodes) == int(done.sum()) > 50
    assert min(e.episode_return for e in episodes) >= 8  # the shortest CartPole episode


def test_halfcheetah_truncates_at_1000_steps_and_keeps_float32_unit_actions(
    redis_url: str, redis_client: redis.Redis, redis_keys: RedisKeys
) -> None:
    _actor, batches, column, episodes = _act(
        redis_url, redis_client, redis_keys, "HalfCheetah-v5",
        envs_per_actor=2, max_env_steps=2100, random_steps=500,
    )  # fmt: skip
    actions = np.concatenate([b.action for b in batches])
    assert column["obs"].shape[1:] == (17,) and column["obs"].dtype == np.float32
    assert actions.dtype == np.float32 and np.abs(actions).max() <= 1.0
    assert not np.concatenate([b.done for b in batches]).any()  # truncation is not done
    assert [e.length for e in episodes] == [1000, 1000]  # one time limit per env


def test_pong_frames_stack_across_steps_as_uint8(
    redis_url: str, redis_client: redis.Redis, redis_keys: RedisKeys
) -> None:
    _actor, _batches, column, _ = _act(
        redis_url, redis_client, redis_keys, "ale:Pong", envs_per_actor=4, max_env_steps=400
    )
    obs, next_obs = column["obs"], column["next_obs"]
    assert obs.shape[1:] == (4, 84, 84) and obs.dtype == next_obs.dtype == np.uint8
    # s' is s with the oldest frame dropped and a new one appended, on every transition
    assert np.array_equal(next_obs[:, :3], obs[:, 1:])
    assert not np.array_equal(next_obs[:, 3], obs[:, 3])
