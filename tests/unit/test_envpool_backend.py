"""The EnvPool backend (actorq.envs.envpool_backend) on real EnvPool envs: the spaces and
dtypes actors expect, the NEXT_STEP autoreset contract EnvPool really follows, seeding,
action rescaling, Atari preprocessing options, and the errors for what it cannot build."""

from __future__ import annotations

import sys

import numpy as np
import pytest
from gymnasium import spaces
from gymnasium.vector import AutoresetMode

from actorq.actor.stepper import VectorStepper
from actorq.algos.factory import ON_POLICY_ALGORITHMS
from actorq.config import ActorSettings, ConfigError, RunSettings
from actorq.config_parse import ON_POLICY
from actorq.envs import EnvError, check_backend, make_vector_env

CARTPOLE_THETA, CARTPOLE_X = 0.2094, 2.4  # CartPole-v1 terminates beyond these (12 deg)


def _terminal(obs: np.ndarray) -> np.ndarray:
    return (np.abs(obs[:, 2]) > CARTPOLE_THETA) | (np.abs(obs[:, 0]) > CARTPOLE_X)


def _envpool(env_id: str, n: int = 4, seed: int = 0):
    return make_vector_env(env_id, n, seed, backend="envpool")


@pytest.mark.parametrize(
    ("env_id", "obs_shape", "obs_dtype", "action_space"),
    [
        ("CartPole-v1", (4,), np.float32, spaces.Discrete(2)),
        ("HalfCheetah-v5", (17,), np.float32, spaces.Box(-1.0, 1.0, (6,), np.float32)),
        ("ale:Pong", (4, 84, 84), np.uint8, spaces.Discrete(6)),
    ],
)
def test_spaces_and_dtypes_match_the_gymnasium_backend(
    env_id, obs_shape, obs_dtype, action_space
) -> None:
    env, reference = _envpool(env_id), make_vector_env(env_id, 4, 0)
    try:
        assert env.num_envs == 4
        assert env.single_observation_space.shape == obs_shape
        assert env.single_observation_space.dtype == obs_dtype
        # gymnasium's MuJoCo spaces are float64 (the actor casts), so compare what the
        # actor sees: the shape and the dtype it stores
        assert env.single_observation_space.shape == reference.single_observation_space.shape
        assert VectorStepper(env).obs_dtype == VectorStepper(reference).obs_dtype == obs_dtype
        assert env.single_action_space == action_space == reference.single_action_space
        assert env.observation_space.shape == (4, *obs_shape)
        assert env.action_space.shape == reference.action_space.shape
        assert env.metadata["autoreset_mode"] == AutoresetMode.NEXT_STEP
        obs, _ = env.reset(seed=1)
        assert obs.shape == (4, *obs_shape) and obs.dtype == obs_dtype
        obs, reward, terminated, truncated, _ = env.step(env.action_space.sample())
        assert obs.shape == (4, *obs_shape) and obs.dtype == obs_dtype
        assert reward.shape == terminated.shape == truncated.shape == (4,)
        assert terminated.dtype == truncated.dtype == np.bool_
    finally:
        env.close()
        reference.close()


def _step_until_an_end(env, actions: np.ndarray, limit: int = 200):
    """Step with `actions` until some row ends; (obs at the end, the rows that ended)."""
    for _ in range(limit):
        obs, _, terminated, truncated, _ = env.step(actions)
        ended = terminated | truncated
        if ended.any():
            return obs, ended
    raise AssertionError(f"no episode ended in {limit} steps")


def test_the_step_after_an_end_resets_with_reward_zero_and_ignores_the_action() -> None:
    """NEXT_STEP: the ending step returns the true last observation; the next step
    returns that env's reset observation, reward 0, not ended, whatever the action."""
    first, second = _envpool("CartPole-v1", seed=5), _envpool("CartPole-v1", seed=5)
    try:
        for env in (first, second):
            env.reset()
        push_right = np.ones(4, np.int64)
        last_obs, ended = _step_until_an_end(first, push_right)
        assert np.array_equal(_step_until_an_end(second, push_right)[0], last_obs)
        # true terminal states, not reset ones
        assert np.all(_terminal(last_obs[ended]))
        obs_a, reward, terminated, truncated, _ = first.step(np.zeros(4, np.int64))
        obs_b = second.step(np.ones(4, np.int64))[0]
        assert np.all(reward[ended] == 0) and not (terminated | truncated)[ended].any()
        assert np.all(np.abs(obs_a[ended]) <= 0.05)  # CartPole's reset draws from +-0.05
        assert np.array_equal(obs_a[ended], obs_b[ended])  # the action was ignored
        assert not np.array_equal(obs_a[~ended], obs_b[~ended])  # but not on other rows
    finally:
        first.close()
        second.close()


def test_the_stepper_keeps_no_transition_across_an_envpool_reset() -> None:
    """Through VectorStepper every valid CartPole transition is one physics step (a small
    change of angle), every invalid row follows an end, and ended rows hold terminal
    states: what replay would get from the envpool backend."""
    stepper = VectorStepper(_envpool("CartPole-v1", n=8, seed=3))
    rng = np.random.default_rng(0)
    obs = stepper.reset()
    ended_before, ends, skipped = np.zeros(8, bool), 0, 0
    for _ in range(600):
        step = stepper.step(rng.integers(0, 2, 8))
        assert np.array_equal(~step.valid, ended_before)
        valid = step.valid
        assert np.all(np.abs(step.next_obs[valid, 2] - obs[valid, 2]) < 0.1)
        done = step.ended
        assert np.all(_terminal(step.next_obs[done]))
        ends, skipped = ends + int(done.sum()), skipped + int((~valid).sum())
        ended_before, obs = done, step.obs
    stepper.env.close()
    assert ends > 100 and skipped >= ends - 8  # every end but the last few was skipped once


@pytest.mark.parametrize("env_id", ["CartPole-v1", "ale:Pong"])
def test_a_step_leaves_the_previous_observations_as_they_were(env_id: str) -> None:
    """The actor keeps step t's observations while it steps t + 1 (they are the next
    transition's s): EnvPool must not hand out one buffer it overwrites in place."""
    env = _envpool(env_id, n=2)
    try:
        first, _ = env.reset()
        kept = first.copy()
        second = env.step(env.action_space.sample())[0]
        env.step(env.action_space.sample())
        assert np.array_equal(first, kept) and not np.shares_memory(first, second)
    finally:
        env.close()


def test_reset_with_a_seed_replays_the_same_episode_and_another_seed_does_not() -> None:
    env = _envpool("HalfCheetah-v5", n=2, seed=0)
    actions = np.random.default_rng(1).uniform(-1, 1, (20, 2, 6)).astype(np.float32)

    def rollout(seed: int) -> np.ndarray:
        first, _ = env.reset(seed=seed)
        return np.stack([first] + [env.step(a)[0] for a in actions])

    try:
        assert np.array_equal(rollout(7), rollout(7))
        assert not np.allclose(rollout(7), rollout(8))
    finally:
        env.close()


def test_unit_box_actions_are_mapped_onto_the_envs_own_bounds() -> None:
    """Pendulum's torque is in [-2, 2]: the adapter's action 1.0 is EnvPool's 2.0."""
    import envpool

    from actorq.envs.envpool_backend import _quiet_casts

    env = _envpool("Pendulum-v1", n=2, seed=4)
    with _quiet_casts():  # EnvPool's own float64 -> float32 space warnings
        raw = envpool.make_gymnasium("Pendulum-v1", num_envs=2, seed=4)
        raw.reset()
    try:
        env.reset()
        for unit in (1.0, -0.5, 0.25):
            ours = env.step(np.full((2, 1), unit, np.float32))[0]
            theirs = raw.step(np.full((2, 1), 2.0 * unit, np.float32))[0]
            np.testing.assert_allclose(ours, theirs, rtol=1e-6)
    finally:
        env.close()
        raw.close()


def test_ale_ids_get_the_pixel_preprocessing_and_their_options() -> None:
    plain, custom = _envpool("ale:Pong", n=1), _envpool("ale:Pong,sticky=0.1", n=1)
    try:
        config = plain._pool.config
        assert config["reward_clip"] is False and config["episodic_life"] is False
        assert config["repeat_action_probability"] == 0.25 and config["noop_max"] == 30
        assert (config["stack_num"], config["frame_skip"], config["gray_scale"]) == (4, 4, True)
        assert config["max_episode_steps"] * config["frame_skip"] == 108_000
        assert custom._pool.config["repeat_action_probability"] == pytest.approx(0.1)
    finally:
        plain.close()
        custom.close()


@pytest.mark.parametrize(
    ("env_id", "message"),
    [
        ("dmc:cartpole-swingup", "not one the envpool backend covers"),
        ("minatar:breakout", "not one the envpool backend covers"),
        ("Blackjack-v1", "not one the envpool backend covers"),  # toy text: not covered
        ("ale:NoSuchGame", "has no EnvPool task 'NoSuchGame-v5'"),
        ("ale:Pong,fast", "unknown ale option 'fast'"),
        # a lost life is terminated there without a reset: the stepper would drop a step
        ("ale:Pong,episodic_life", "episodic_life is not supported with --env-backend envpool"),
    ],
)
def test_what_envpool_does_not_cover_is_an_env_error(env_id: str, message: str) -> None:
    with pytest.raises(EnvError, match=message):
        check_backend(env_id, "envpool")
    check_backend(env_id, "gymnasium")  # the default backend takes every id as is


def test_an_unknown_backend_and_a_missing_envpool_are_env_errors(monkeypatch) -> None:
    with pytest.raises(EnvError, match="expected one of gymnasium, envpool, got 'gym'"):
        check_backend("CartPole-v1", "gym")
    for name in [m for m in sys.modules if m.split(".")[0] == "envpool"]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "envpool", None)  # as on an install without the extra
    with pytest.raises(EnvError, match=r"pip install 'actorq\[envpool\]'"):
        check_backend("CartPole-v1", "envpool")


def test_on_policy_settings_refuse_envpool() -> None:
    assert set(ON_POLICY) == set(ON_POLICY_ALGORITHMS)
    with pytest.raises(ConfigError, match="need SAME_STEP autoreset"):
        ActorSettings(env_backend="envpool", unroll_length=64)
    with pytest.raises(ConfigError, match="need SAME_STEP autoreset"):
        RunSettings(algo="ppo", env_backend="envpool")
    with pytest.raises(ConfigError, match="expected one of gymnasium, envpool"):
        ActorSettings(env_backend="gym")
    assert ActorSettings(env_backend="envpool").env_backend == "envpool"
