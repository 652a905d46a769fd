"""The actor's fast path (actorq.actor.columns), with and without its numba kernels
(actorq.actor.fast_act), against the plain path: the same seed gives the same
transitions, episodes and counters, through a real Redis and real envs."""

from __future__ import annotations

import threading

import numpy as np
import pytest
import redis

from actorq.actor.columns import EpsilonGreedy, PendingTransitions, StepColumns
from actorq.actor.episodes import parse_episodes
from actorq.actor.fast_act import fused_available
from actorq.actor.fixed_policy import StaticFollower, make_policy
from actorq.actor.loop import Actor
from actorq.config import ActorSettings
from actorq.envs import make_vector_env
from actorq.exploration import epsilon_greedy, epsilon_greedy_logp
from actorq.redis_keys import RedisKeys
from actorq.replay.batch import decode_batch

COLUMNS = ("obs", "action", "reward", "next_obs", "done", "behaviour", "behaviour_logp")


def _run(redis_url, client, prefix: str, fast: bool, native: bool, **overrides) -> dict:
    keys = RedisKeys(prefix)
    settings = ActorSettings(
        redis_url=redis_url, redis_prefix=prefix, env_id="CartPole-v1", envs_per_actor=6,
        num_actors=2, actor_index=1, seed=3, max_env_steps=2000, fast_step=fast, **overrides,
    )  # fmt: skip
    env = make_vector_env("CartPole-v1", 6, settings.seed, native=native)
    policy = make_policy("CartPole-v1", (16, 16), "int8", seed=5)
    actor = Actor(settings, env, StaticFollower(policy), client, keys, threading.Event())
    actor.run()
    env.close()
    assert actor.fast == fast
    if fast:  # the fused kernels ran exactly when asked for (numba is installed here)
        fused = overrides.get("fused_act", True)
        assert actor.forward.fused == fused and fused_available(True)
        assert actor.forward.kind == ("fused" if fused else "numpy")
    entries = client.xrange(keys.replay_stream)
    batches = [decode_batch(fields) for _, fields in entries]
    episodes = [e for _, f in client.xrange(keys.episodes_stream) for e in parse_episodes(f)]
    return {
        "sizes": [len(b) for b in batches],
        **{c: np.concatenate([getattr(b, c) for b in batches]) for c in COLUMNS},
        "episodes": [(e.episode_return, e.length, e.env_steps) for e in episodes],
        "env_steps": actor.env_steps,
        "inserted": int(client.get(keys.inserted_counter)),
    }


@pytest.mark.parametrize("native", [True, False], ids=["next-step-reset", "same-step-reset"])
@pytest.mark.parametrize("push_every", [0, 7])
@pytest.mark.parametrize("fused", [True, False], ids=["fused", "unfused"])
def test_fast_path_writes_what_the_plain_path_writes(
    redis_url: str, redis_client: redis.Redis, redis_keys: RedisKeys, native: bool,
    push_every: int, fused: bool,
) -> None:  # fmt: skip
    plain = _run(redis_url, redis_client, redis_keys.prefix + ":plain", False, native,
                 push_every=push_every)  # fmt: skip
    fast = _run(redis_url, redis_client, redis_keys.prefix + ":fast", True, native,
                push_every=push_every, fused_act=fused)  # fmt: skip
    assert plain["env_steps"] >= 2000 and plain["inserted"] == plain["env_steps"]
    assert plain["sizes"] == fast["sizes"]
    for column in COLUMNS:
        assert plain[column].dtype == fast[column].dtype, column
        np.testing.assert_array_equal(plain[column], fast[column], err_msg=column)
    # Exploration happened and episodes ended, so the comparison covers both.
    assert (plain["action"] != plain["behaviour"]).any() and plain["done"].any()
    assert len(plain["episodes"]) > 10 and plain["episodes"] == fast["episodes"]
    # CartPole pays 1 per step, so a length is its return: a NEXT_STEP reset row is not
    # a step of the episode after it (it was counted once, one too many per episode).
    assert all(length == ret for ret, length, _ in plain["episodes"]), plain["episodes"][:5]
    assert (plain["env_steps"], plain["inserted"]) == (fast["env_steps"], fast["inserted"])


def test_epsilon_greedy_draws_like_the_plain_functions() -> None:
    eps = np.array([0.0, 0.01, 0.3, 0.5, 1.0, 1.0])
    fast_rng, plain_rng = np.random.default_rng(11), np.random.default_rng(11)
    explore = EpsilonGreedy(eps, 3)
    q_rng = np.random.default_rng(0)
    for _ in range(300):
        q = q_rng.normal(size=(6, 3)).astype(np.float32)
        taken, greedy, logp = explore(q, fast_rng)
        plain = epsilon_greedy(q, eps, plain_rng)
        np.testing.assert_array_equal(taken, plain)
        np.testing.assert_array_equal(greedy, q.argmax(axis=1))
        np.testing.assert_array_equal(logp, epsilon_greedy_logp(plain, greedy, eps, 3))
    with pytest.raises(ValueError, match="epsilon"):
        EpsilonGreedy(np.array([0.1, 1.5]), 2)


def test_step_columns_grow_and_match_pending_parts() -> None:
    """More steps than the preallocated capacity (a Redis outage holds them all)."""
    rng = np.random.default_rng(1)
    columns, pending = StepColumns(3, (2,), np.float32, steps=2), PendingTransitions()
    for _ in range(9):
        obs, next_obs = rng.normal(size=(2, 3, 2)).astype(np.float32)
        action, behaviour = rng.integers(0, 2, size=(2, 3))
        reward, logp = rng.normal(size=3), rng.normal(size=3).astype(np.float32)
        done, valid = rng.random(3) < 0.3, rng.random(3) < 0.7
        columns.add_step(obs, action, reward, next_obs, done, valid, behaviour, logp,
                         int(valid.sum()))  # fmt: skip
        pending.add(obs[valid], action[valid], reward[valid], next_obs[valid], done[valid],
                    None, behaviour[valid], logp[valid])  # fmt: skip
    assert columns.capacity >= columns.count == pending.count > 2 * 3
    a, b = columns.batch("a", 1, "int8"), pending.batch("a", 1, "int8")
    for column in COLUMNS:
        np.testing.assert_array_equal(getattr(a, column), getattr(b, column), err_msg=column)
