"""The one environment factory: gymnasium ids -> checked specs and vector envs.

Vector envs use gymnasium's SAME_STEP autoreset: the step that ends an episode already
returns the next episode's first observation, and `infos["final_obs"]` holds the true last
observation. `next_obs_for_replay` puts that last observation back so stored transitions
are (s, a, r, s') of the same episode.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.vector import AutoresetMode, SyncVectorEnv, VectorEnv


class EnvError(ValueError):
    """An env id that does not exist, cannot be built, or does not fit the algorithm."""


@dataclass(frozen=True)
class EnvInfo:
    """What a learner and an actor need to know about an env before building a network."""

    env_id: str
    obs_dim: int
    num_actions: int


def describe_env(env_id: str) -> EnvInfo:
    """Build `env_id` once to read its spaces; raise EnvError if DQN cannot use it."""
    env = _make_single(env_id)
    try:
        return _info_from_spaces(env_id, env.observation_space, env.action_space)
    finally:
        env.close()


def make_vector_env(env_id: str, num_envs: int, seed: int, native: bool = True) -> VectorEnv:
    """A seeded vector env of `num_envs` copies.

    Where gymnasium ships a natively vectorized version (e.g. CartPoleVectorEnv: numpy over
    all envs at once, ~5x faster than a Python loop at 32 envs) and `native` is set, that
    one is used; it autoresets NEXT_STEP (see actorq.actor.stepper). Otherwise a
    SyncVectorEnv with SAME_STEP autoreset whose sub-env i is seeded with seed + i (and its
    action space too), so the first `reset()` without a seed continues from these seeds.
    """
    if num_envs < 1:
        raise EnvError(f"num_envs must be >= 1, got {num_envs}")
    describe_env(env_id)  # fail early with a clear message rather than deep in gymnasium
    if native and gym.spec(env_id).vector_entry_point is not None:
        vec = gym.make_vec(env_id, num_envs=num_envs, vectorization_mode="vector_entry_point")
        vec.reset(seed=seed)
        vec.action_space.seed(seed)
        return vec
    envs = SyncVectorEnv(
        [lambda: gym.make(env_id) for _ in range(num_envs)],
        autoreset_mode=AutoresetMode.SAME_STEP,
    )
    envs.reset(seed=seed)
    for i, sub_env in enumerate(envs.envs):
        sub_env.action_space.seed(seed + i)
    envs.action_space.seed(seed)
    return envs


def next_obs_for_replay(
    obs: np.ndarray,
    infos: dict[str, Any],
    terminated: np.ndarray,
    truncated: np.ndarray,
) -> np.ndarray:
    """The s' to store for each env: `final_obs` where an episode ended, else `obs`.

    `obs` is what a SAME_STEP vector env returned from `step`; for envs whose episode just
    ended it is already the next episode's reset observation, which must not be stored.
    """
    ended = np.logical_or(terminated, truncated)
    if not ended.any():
        return obs
    if "final_obs" not in infos:
        raise ValueError(
            "an episode ended but infos has no 'final_obs'; "
            "was the vector env built with AutoresetMode.SAME_STEP?"
        )
    next_obs = np.array(obs, copy=True)
    for i in np.flatnonzero(ended):
        next_obs[i] = infos["final_obs"][i]
    return next_obs


def _make_single(env_id: str) -> gym.Env:
    if env_id not in gym.registry:
        raise EnvError(_unknown_id_message(env_id))
    try:
        return gym.make(env_id)
    except gym.error.Error as exc:  # missing optional dependency, bad kwargs, ...
        raise EnvError(f"cannot build {env_id!r}: {exc}") from exc


def _unknown_id_message(env_id: str) -> str:
    close = difflib.get_close_matches(env_id, list(gym.registry), n=3, cutoff=0.6)
    hint = f"; did you mean {', '.join(repr(c) for c in close)}?" if close else ""
    return f"unknown gymnasium env id {env_id!r}{hint}"


def _info_from_spaces(env_id: str, obs_space: spaces.Space, act_space: spaces.Space) -> EnvInfo:
    if not isinstance(act_space, spaces.Discrete) or int(act_space.start) != 0:
        raise EnvError(
            f"DQN needs a Discrete action space starting at 0; {env_id!r} has {act_space}"
        )
    if not isinstance(obs_space, spaces.Box) or len(obs_space.shape) != 1:
        raise EnvError(f"DQN needs a flat Box observation space; {env_id!r} has {obs_space}")
    return EnvInfo(env_id=env_id, obs_dim=int(obs_space.shape[0]), num_actions=int(act_space.n))
