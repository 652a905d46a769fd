"""Continuous-control families behind the env factory: ids, spaces, a few seeded steps."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from actorq.envs import EnvError, EnvInfo, describe_env, make_env, make_vector_env

CONTINUOUS = {
    "Pendulum-v1": (3, 1),
    "MountainCarContinuous-v0": (2, 1),
    "HalfCheetah-v5": (17, 6),
    "Hopper-v5": (11, 3),
    "Walker2d-v5": (17, 6),
    "dmc:cartpole-swingup": (5, 1),
    "dmc:walker-stand": (24, 6),
    "dmc:reacher-easy": (6, 2),
}


@pytest.mark.parametrize(("env_id", "dims"), CONTINUOUS.items())
def test_continuous_env_spaces_and_steps(env_id: str, dims: tuple[int, int]) -> None:
    obs_dim, act_dim = dims
    assert describe_env(env_id, continuous=True) == EnvInfo(env_id, obs_dim, 0, act_dim)
    envs = make_vector_env(env_id, 2, seed=0)
    try:
        space = envs.single_action_space
        assert space.shape == (act_dim,)
        assert np.all(space.low == -1.0) and np.all(space.high == 1.0)
        obs, _ = envs.reset(seed=1)
        assert obs.shape == (2, obs_dim)
        for _ in range(3):
            obs, reward, *_ = envs.step(envs.action_space.sample())
            assert obs.shape == (2, obs_dim) and np.isfinite(obs).all()
            assert reward.shape == (2,) and np.isfinite(reward).all()
    finally:
        envs.close()


def test_describe_with_none_accepts_both_kinds() -> None:
    assert describe_env("CartPole-v1", continuous=None).num_actions == 2
    assert describe_env("Pendulum-v1", continuous=None).continuous


@pytest.mark.parametrize(("action", "torque"), [(1.0, 2.0), (-1.0, -2.0), (0.5, 1.0)])
def test_unit_actions_are_rescaled_to_the_env_bounds(action: float, torque: float) -> None:
    env = make_env("Pendulum-v1")  # Pendulum's own torque bounds are [-2, 2]
    env.reset(seed=0)
    env.step(np.array([action], np.float32))
    assert float(np.squeeze(env.unwrapped.last_u)) == pytest.approx(torque)


def test_dmc_observations_are_flat_float32_and_seeded() -> None:
    first, second = make_env("dmc:cartpole-swingup"), make_env("dmc:cartpole-swingup")
    a, _ = first.reset(seed=7)
    b, _ = second.reset(seed=7)
    c, _ = second.reset(seed=8)
    assert a.dtype == np.float32 and a.ndim == 1
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)


def test_dmc_time_limit_is_truncation_not_termination() -> None:
    env = make_env("dmc:reacher-easy")
    env.reset(seed=0)
    steps, terminated, truncated = 0, False, False
    while not (terminated or truncated):
        _, _, terminated, truncated, _ = env.step(np.zeros(2, np.float32))
        steps += 1
    assert (steps, terminated, truncated) == (1000, False, True)


@pytest.mark.parametrize("bad", ["dmc:walker", "dmc:walker-fly", "dmc:nosuch-task"])
def test_unknown_dmc_task_names_it(bad: str) -> None:
    with pytest.raises(EnvError, match=rf"unknown DeepMind Control Suite task '{bad}'"):
        describe_env(bad, continuous=True)


def test_mujoco_warnings_go_to_the_log_once(capfd, caplog) -> None:
    """gymnasium's half_cheetah.xml trips a MuJoCo 3.17 deprecation warning that MuJoCo
    would print for every env built; it is logged once per process instead."""
    with caplog.at_level("WARNING", logger="actorq.envs"):
        for _ in range(3):
            make_env("HalfCheetah-v5").close()
    printed = capfd.readouterr()
    assert "settotalmass" not in printed.out + printed.err
    logged = [r.getMessage() for r in caplog.records if "settotalmass" in r.getMessage()]
    assert len(logged) <= 1  # 0 when an earlier test in this process already logged it


def test_dmc_imports_without_an_opengl_probe() -> None:
    """A fresh process (dm_control not yet imported) with no DISPLAY: no glfw warning."""
    env = {k: v for k, v in os.environ.items() if k not in ("MUJOCO_GL", "DISPLAY")}
    code = "from actorq.envs import make_env; make_env('dmc:cartpole-swingup').close()"
    proc = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    assert "DISPLAY" not in proc.stdout + proc.stderr
