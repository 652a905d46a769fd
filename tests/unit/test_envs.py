"""Env factory: id checks, space checks, seeding and SAME_STEP final-observation handling."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.vector import AutoresetMode

from actorq.envs import EnvError, EnvInfo, describe_env, make_vector_env, next_obs_for_replay


def test_describe_cartpole() -> None:
    assert describe_env("CartPole-v1") == EnvInfo("CartPole-v1", obs_dim=4, num_actions=2)


def test_unknown_id_names_it_and_suggests_close_matches() -> None:
    with pytest.raises(EnvError) as err:
        describe_env("CartPol-v1")
    message = str(err.value)
    assert "'CartPol-v1'" in message and "'CartPole-v1'" in message
    assert "\n" not in message
    assert isinstance(err.value, ValueError)


def test_unknown_id_without_close_match_names_it_and_lists_the_families() -> None:
    with pytest.raises(EnvError) as err:
        describe_env("zzzz-qqq-v9")
    message = str(err.value)
    assert message.startswith("unknown env id 'zzzz-qqq-v9'; expected one of:")
    assert "did you mean" not in message
    for family in ("classic control", "MuJoCo v5", "dmc:<domain>-<task>"):
        assert family in message


def test_continuous_actions_rejected_for_dqn() -> None:
    with pytest.raises(EnvError, match=r"DQN needs a Discrete action space.*'Pendulum-v1' has Box"):
        describe_env("Pendulum-v1")


def test_discrete_actions_rejected_for_continuous_algorithms() -> None:
    with pytest.raises(EnvError, match=r"1-D Box action space; 'CartPole-v1' has Discrete"):
        describe_env("CartPole-v1", continuous=True)


def test_non_flat_observations_rejected() -> None:
    # Blackjack has Discrete actions but a Tuple observation space.
    with pytest.raises(EnvError, match=r"flat Box observation space; 'Blackjack-v1' has Tuple"):
        describe_env("Blackjack-v1")


def test_vector_env_uses_same_step_autoreset() -> None:
    envs = make_vector_env("CartPole-v1", 3, seed=0, native=False)
    try:
        assert envs.num_envs == 3
        assert envs.metadata["autoreset_mode"] == AutoresetMode.SAME_STEP
    finally:
        envs.close()


def test_sub_env_i_is_seeded_with_seed_plus_i() -> None:
    envs = make_vector_env("CartPole-v1", 2, seed=5, native=False)
    obs, _ = envs.reset()
    envs.close()
    for i in range(2):
        single = gym.make("CartPole-v1")
        single.reset(seed=5 + i)
        expected, _ = single.reset()  # the factory's seeded reset came first
        single.close()
        np.testing.assert_array_equal(obs[i], expected)


def test_num_envs_must_be_positive() -> None:
    with pytest.raises(EnvError, match="num_envs must be >= 1"):
        make_vector_env("CartPole-v1", 0, seed=0)


def test_final_obs_substituted_for_ended_episodes() -> None:
    envs = make_vector_env("CartPole-v1", 4, seed=0, native=False)
    envs.reset()
    ended = np.zeros(4, bool)
    # Always pushing right topples the pole within a few dozen steps.
    for _ in range(200):
        next_obs, _, term, trunc, infos = envs.step(np.ones(4, np.int64))
        ended = term | trunc
        if ended.any():
            break
    envs.close()
    assert ended.any()
    stored = next_obs_for_replay(next_obs, infos, term, trunc)
    for i in range(4):
        if ended[i]:
            np.testing.assert_array_equal(stored[i], infos["final_obs"][i])
            assert not np.array_equal(stored[i], next_obs[i])
            # The stored s' is past a termination bound; the returned obs is a fresh reset.
            assert abs(stored[i][0]) > 2.4 or abs(stored[i][2]) > 0.2094
            assert np.all(np.abs(next_obs[i]) <= 0.05)
        else:
            np.testing.assert_array_equal(stored[i], next_obs[i])


def test_next_obs_unchanged_when_nothing_ended() -> None:
    obs = np.arange(8, dtype=np.float32).reshape(2, 4)
    no = np.zeros(2, bool)
    assert next_obs_for_replay(obs, {}, no, no) is obs


def test_next_obs_without_final_obs_is_an_error() -> None:
    obs = np.zeros((2, 4), np.float32)
    with pytest.raises(ValueError, match="SAME_STEP"):
        next_obs_for_replay(obs, {}, np.array([True, False]), np.zeros(2, bool))
