"""Pixel env ids through the one factory: minatar:<game> and ale:<Game>[,options]."""

from __future__ import annotations

import numpy as np
import pytest

from actorq.envs import EnvError, describe_env, make_env, make_vector_env


@pytest.mark.parametrize("game,actions", [("breakout", 3), ("space_invaders", 4)])
def test_minatar_ids(game: str, actions: int) -> None:
    info = describe_env(f"minatar:{game}")
    assert info.pixels and info.obs_shape[1:] == (10, 10)
    assert info.num_actions == actions
    env = make_env(f"minatar:{game}")
    obs, _ = env.reset(seed=3)
    assert obs.dtype == np.uint8 and obs.shape == info.obs_shape
    assert set(np.unique(obs)) <= {0, 1} and obs.sum() > 0
    first = obs.copy()
    env.reset(seed=3)
    np.testing.assert_array_equal(env.reset(seed=3)[0], first)  # seeded resets repeat


def test_minatar_vector_env_autoresets_same_step() -> None:
    env = make_vector_env("minatar:breakout", 3, seed=0)
    obs, _ = env.reset(seed=0)
    assert obs.shape == (3, 4, 10, 10) and obs.dtype == np.uint8
    ended = False
    for _ in range(400):
        obs, _r, term, trunc, info = env.step(env.action_space.sample())
        if (term | trunc).any():
            ended = True
            assert "final_obs" in info
            break
    assert ended, "a random breakout policy loses within 400 steps"


def test_ale_pong_preprocessing() -> None:
    info = describe_env("ale:Pong")
    assert info.obs_shape == (4, 84, 84) and info.num_actions == 6
    env = make_vector_env("ale:Pong", 2, seed=1)
    obs, _ = env.reset(seed=1)
    assert obs.shape == (2, 4, 84, 84) and obs.dtype == np.uint8
    for _ in range(5):
        obs, *_ = env.step(np.zeros(2, dtype=np.int64))
    assert obs.std() > 0  # real frames, not a blank screen
    env.close()


def test_bad_pixel_ids_name_the_problem() -> None:
    with pytest.raises(EnvError, match="unknown MinAtar game 'pong'"):
        describe_env("minatar:pong")
    with pytest.raises(EnvError, match="unknown ALE game 'NotAGame'"):
        describe_env("ale:NotAGame")
    with pytest.raises(EnvError, match="unknown ale option 'turbo'"):
        describe_env("ale:Pong,turbo")
    with pytest.raises(EnvError, match="continuous"):
        describe_env("minatar:breakout", continuous=True)
