"""The one environment factory: env ids -> checked specs and vector envs.

Three families share one id space:
- gymnasium ids (classic control such as CartPole-v1, Pendulum-v1,
  MountainCarContinuous-v0; MuJoCo v5 such as HalfCheetah-v5, Hopper-v5, Walker2d-v5);
- `dmc:<domain>-<task>` for the DeepMind Control Suite (e.g. dmc:cartpole-swingup),
  wrapped as gymnasium envs by `actorq.envs.dmc.DMCEnv`.
Every continuous env is presented with a Box action space in [-1, 1] (gymnasium's
RescaleAction maps it onto the env's own bounds), so a tanh actor needs no env knowledge.

Vector envs use gymnasium's SAME_STEP autoreset: the step that ends an episode already
returns the next episode's first observation, and `infos["final_obs"]` holds the true last
observation. `next_obs_for_replay` puts that last observation back so stored transitions
are (s, a, r, s') of the same episode.
"""

from __future__ import annotations

import difflib
import logging
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.vector import AutoresetMode, SyncVectorEnv, VectorEnv
from gymnasium.wrappers import RescaleAction

from actorq.envs.pixel import (
    ALE_PREFIX,
    MINATAR_PREFIX,
    AleSingleEnv,
    is_pixel_id,
    make_ale_vector_env,
    make_minatar_env,
)
from actorq.extras import MissingExtraError, require

log = logging.getLogger(__name__)


class EnvError(ValueError):
    """An env id that does not exist, cannot be built, or does not fit the algorithm."""


DMC_PREFIX = "dmc:"
FAMILIES = (
    "gymnasium classic control (e.g. CartPole-v1, Pendulum-v1, MountainCarContinuous-v0)",
    "gymnasium MuJoCo v5 (e.g. HalfCheetah-v5, Hopper-v5, Walker2d-v5)",
    "DeepMind Control Suite as dmc:<domain>-<task> (e.g. dmc:cartpole-swingup)",
    "MinAtar as minatar:<game> (e.g. minatar:breakout; uint8 [C, 10, 10] pixels)",
    "Atari as ale:<Game>[,episodic_life][,sticky=<p>] (e.g. ale:Pong; uint8 [4, 84, 84])",
)


@dataclass(frozen=True)
class EnvInfo:
    """What a learner and an actor need to know about an env before building a network.

    Discrete envs: `num_actions` actions, `act_dim` 0. Continuous envs: `act_dim` action
    dimensions in [-1, 1], `num_actions` 0.
    """

    env_id: str
    obs_dim: int
    num_actions: int
    act_dim: int = 0
    obs_shape: tuple[int, ...] = ()
    """Pixel envs (minatar:, ale:): the uint8 [C, H, W] observation; () for flat ones."""

    @property
    def pixels(self) -> bool:
        return len(self.obs_shape) == 3

    @property
    def continuous(self) -> bool:
        return self.act_dim > 0


def describe_env(env_id: str, continuous: bool | None = False) -> EnvInfo:
    """Build `env_id` once to read its spaces; EnvError if the algorithm cannot use it.

    `continuous` says what the algorithm needs: False (DQN) a Discrete action space,
    True (DDPG, TD3, SAC, D4PG) a 1-D Box action space, None either of the two.
    """
    env = make_env(env_id)
    try:
        if continuous is None:
            continuous = isinstance(env.action_space, spaces.Box)
        return _info_from_spaces(env_id, env.observation_space, env.action_space, continuous)
    finally:
        env.close()


def make_vector_env(
    env_id: str, num_envs: int, seed: int, native: bool = True, backend: str = "gymnasium"
) -> VectorEnv:
    """A seeded vector env of `num_envs` copies.

    `backend` "envpool" builds it with EnvPool (actorq.envs.envpool_backend: NEXT_STEP
    autoreset, the families it covers only); the rest describes "gymnasium", the default.

    Where gymnasium ships a natively vectorized version (e.g. CartPoleVectorEnv: numpy over
    all envs at once, ~5x faster than a Python loop at 32 envs) and `native` is set, that
    one is used; it autoresets NEXT_STEP (see actorq.actor.stepper). Otherwise a
    SyncVectorEnv with SAME_STEP autoreset whose sub-env i is seeded with seed + i (and its
    action space too), so the first `reset()` without a seed continues from these seeds.
    """
    if num_envs < 1:
        raise EnvError(f"num_envs must be >= 1, got {num_envs}")
    # Fail early with a clear message rather than deep in gymnasium.
    info = describe_env(env_id, continuous=None)
    check_backend(env_id, backend)
    if backend == "envpool":
        return _envpool_vector_env(env_id, num_envs, seed, info)
    if env_id.startswith(ALE_PREFIX):  # C++ batched stepping and preprocessing (ale-py)
        return make_ale_vector_env(env_id[len(ALE_PREFIX) :], num_envs, seed, EnvError)
    if native and not info.continuous and _has_native_vector(env_id):
        vec = gym.make_vec(env_id, num_envs=num_envs, vectorization_mode="vector_entry_point")
        vec.reset(seed=seed)
        vec.action_space.seed(seed)
        return vec
    envs = SyncVectorEnv(
        [lambda: make_env(env_id) for _ in range(num_envs)],
        autoreset_mode=AutoresetMode.SAME_STEP,
    )
    envs.reset(seed=seed)
    for i, sub_env in enumerate(envs.envs):
        sub_env.action_space.seed(seed + i)
    envs.action_space.seed(seed)
    return envs


def check_backend(env_id: str, backend: str) -> None:
    """EnvError unless `backend` is known, installed and covers `env_id`; builds no env."""
    from actorq.envs.envpool_backend import BACKENDS, envpool_task

    if backend not in BACKENDS:
        raise EnvError(f"env backend: expected one of {', '.join(BACKENDS)}, got {backend!r}")
    if backend == "envpool":
        try:
            envpool_task(env_id, EnvError)
        except MissingExtraError as exc:
            raise EnvError(str(exc)) from None


def _envpool_vector_env(env_id: str, num_envs: int, seed: int, info: EnvInfo) -> VectorEnv:
    from actorq.envs.envpool_backend import EnvPoolVectorEnv

    env = EnvPoolVectorEnv(env_id, num_envs, seed, EnvError)
    # The learner builds its network from describe_env (gymnasium's spaces): an EnvPool
    # task with other shapes would fail later and far from here.
    got = _info_from_spaces(
        env_id, env.single_observation_space, env.single_action_space, info.continuous
    )
    if got != info:
        env.close()
        raise EnvError(f"envpool's {env_id!r} has other spaces than gymnasium's: {got} != {info}")
    return env


def _has_native_vector(env_id: str) -> bool:
    if env_id.startswith(DMC_PREFIX) or is_pixel_id(env_id):
        return False
    return gym.spec(env_id).vector_entry_point is not None


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


def make_env(env_id: str) -> gym.Env:
    """One env of any family; continuous action spaces are rescaled to [-1, 1]."""
    if env_id.startswith(DMC_PREFIX):
        from actorq.envs.dmc import make_dmc_env  # imports dm_control only when asked for

        return make_dmc_env(env_id[len(DMC_PREFIX) :], EnvError)
    if env_id.startswith(MINATAR_PREFIX):
        return make_minatar_env(env_id[len(MINATAR_PREFIX) :], EnvError)
    if env_id.startswith(ALE_PREFIX):
        return AleSingleEnv(env_id[len(ALE_PREFIX) :], EnvError)
    if env_id not in gym.registry:
        raise EnvError(_unknown_id_message(env_id))
    if "mujoco" in str(gym.registry[env_id].entry_point):
        _log_mujoco_warnings_once(env_id)
    try:
        env = gym.make(env_id)
    except (gym.error.Error, ImportError) as exc:  # missing optional dependency, bad kwargs
        raise EnvError(f"cannot build {env_id!r}: {exc}") from exc
    return _unit_box_actions(env)


_MUJOCO_WARNED: set[str] = set()


def _log_mujoco_warnings_once(env_id: str) -> None:
    """Route MuJoCo's C warnings to the log, each text once per process: gymnasium's
    half_cheetah.xml uses an attribute MuJoCo 3.17 deprecates, and MuJoCo would print that
    warning to stdout for every env an actor builds. Installed on every call on purpose:
    importing dm_control installs its own handler over ours."""
    try:
        mujoco = require("mujoco", "mujoco", f"env {env_id}")
    except MissingExtraError as exc:
        raise EnvError(str(exc)) from None

    def warn(text: str) -> None:
        if text not in _MUJOCO_WARNED:
            _MUJOCO_WARNED.add(text)
            log.warning("mujoco: %s", text)

    mujoco.set_mju_user_warning(warn)


def _unit_box_actions(env: gym.Env) -> gym.Env:
    space = env.action_space
    if not isinstance(space, spaces.Box):
        return env
    if np.all(space.low == -1.0) and np.all(space.high == 1.0):
        return env
    low, high = np.full(space.shape, -1.0, np.float32), np.full(space.shape, 1.0, np.float32)
    return RescaleAction(env, low, high)


def _unknown_id_message(env_id: str) -> str:
    close = difflib.get_close_matches(env_id, list(gym.registry), n=3, cutoff=0.6)
    hint = f"; did you mean {', '.join(repr(c) for c in close)}?" if close else ""
    return f"unknown env id {env_id!r}{hint}; expected one of: {'; '.join(FAMILIES)}"


def is_pixel_space(space: spaces.Space) -> bool:
    """uint8 [C, H, W] observations (minatar:, ale:): kept uint8 from env to replay."""
    return isinstance(space, spaces.Box) and len(space.shape) == 3 and space.dtype == np.uint8


def _info_from_spaces(
    env_id: str, obs_space: spaces.Space, act_space: spaces.Space, continuous: bool
) -> EnvInfo:
    who = "continuous-control algorithms need" if continuous else "DQN needs"
    if is_pixel_space(obs_space) and not continuous and isinstance(act_space, spaces.Discrete):
        shape = tuple(int(d) for d in obs_space.shape)
        return EnvInfo(env_id, int(np.prod(shape)), int(act_space.n), obs_shape=shape)
    if not isinstance(obs_space, spaces.Box) or len(obs_space.shape) != 1:
        raise EnvError(f"{who} a flat Box observation space; {env_id!r} has {obs_space}")
    obs_dim = int(obs_space.shape[0])
    if continuous:
        if not isinstance(act_space, spaces.Box) or len(act_space.shape) != 1:
            raise EnvError(
                f"{who} a 1-D Box action space; {env_id!r} has {act_space} (use --algo dqn)"
            )
        return EnvInfo(env_id, obs_dim, num_actions=0, act_dim=int(act_space.shape[0]))
    if not isinstance(act_space, spaces.Discrete) or int(act_space.start) != 0:
        hint = " (use a continuous algorithm: ddpg, td3, sac, d4pg)"
        raise EnvError(
            f"{who} a Discrete action space starting at 0; {env_id!r} has {act_space}"
            + (hint if isinstance(act_space, spaces.Box) else "")
        )
    return EnvInfo(env_id, obs_dim, num_actions=int(act_space.n))
