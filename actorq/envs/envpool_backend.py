"""EnvPool as an alternative vector-env backend (`--env-backend envpool`, issue 30).

EnvPool steps a batch of envs in C++ threads. It covers three of actorq's families:
- gymnasium classic control (CartPole-v1, Pendulum-v1, ...) under the same ids;
- gymnasium MuJoCo (HalfCheetah-v5, Hopper-v5, ...) under the same ids;
- `ale:<Game>[,episodic_life][,sticky=<p>]` as EnvPool's `<Game>-v5`, configured to match
  actorq.envs.pixel: frame skip 4, 84x84 grayscale, 4 stacked frames as uint8 [4, 84, 84],
  up to 30 no-ops at reset, sticky actions 0.25, unclipped rewards, 27,000 steps (108,000
  frames) per episode.
Not covered (EnvError): dmc: (EnvPool's DMC tasks return dicts of observations) and
minatar:.

`EnvPoolVectorEnv` presents an EnvPool env as a gymnasium VectorEnv the actor can step:
float32 flat observations (EnvPool's MuJoCo gives float64), Box actions in [-1, 1], and
`autoreset_mode` NEXT_STEP, which is what EnvPool does: the step after an episode's end
resets that env, ignores its action and returns reward 0 (actorq.actor.stepper skips it).
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space

from actorq.config_parse import ENV_BACKENDS as BACKENDS
from actorq.envs.pixel import ALE_PREFIX, _ale_options

__all__ = ["BACKENDS", "EnvPoolVectorEnv", "envpool_task"]
# Actors scale by processes, one core each (as for ale-py's vector env): more threads per
# actor would compete with the other actors and the learner for the same cores.
NUM_THREADS = 1
ALE_MAX_EPISODE_STEPS = 27_000  # ale-py's 108,000 frames at frame skip 4
COVERED = (
    "gymnasium classic control and MuJoCo ids EnvPool registers (e.g. CartPole-v1, HalfCheetah-v5)",
    "ale:<Game>[,episodic_life][,sticky=<p>] (e.g. ale:Pong)",
)


def _envpool(what: str) -> Any:
    from actorq.extras import require

    return require("envpool", "envpool", what)


def envpool_task(env_id: str, error: type[Exception]) -> tuple[str, dict[str, Any]]:
    """EnvPool's task id and make() options for an actorq env id; `error` if not covered."""
    envpool = _envpool(f"--env-backend envpool ({env_id})")
    if env_id.startswith(ALE_PREFIX):
        return _ale_task(env_id[len(ALE_PREFIX) :], envpool, error)
    family = str(gym.registry[env_id].entry_point) if env_id in gym.registry else ""
    if ("classic_control" in family or "mujoco" in family) and _registered(envpool, env_id):
        return env_id, {}
    raise error(
        f"env {env_id!r} is not one the envpool backend covers; it covers "
        f"{'; '.join(COVERED)} (use --env-backend gymnasium)"
    )


def _registered(envpool: Any, task_id: str) -> bool:
    return task_id in envpool.list_all_envs()


def _ale_task(spec: str, envpool: Any, error: type[Exception]) -> tuple[str, dict[str, Any]]:
    _rom, options = _ale_options(spec, error)  # the same options and errors as ale-py's
    if options.get("episodic_life"):
        # EnvPool marks a lost life terminated but goes on without a reset; the NEXT_STEP
        # stepper would drop the next (real) step as a reset row, and its reward with it.
        raise error(
            f"env {ALE_PREFIX}{spec!r}: episodic_life is not supported with --env-backend "
            "envpool (a lost life does not reset there); use --env-backend gymnasium"
        )
    task_id = f"{spec.split(',')[0]}-v5"
    if not _registered(envpool, task_id):
        raise error(f"ALE game {spec.split(',')[0]!r} has no EnvPool task {task_id!r}")
    return task_id, {
        "stack_num": 4,
        "frame_skip": 4,
        "img_height": 84,
        "img_width": 84,
        "gray_scale": True,
        "noop_max": 30,
        "reward_clip": False,
        "max_episode_steps": ALE_MAX_EPISODE_STEPS,
        **options,  # episodic_life, repeat_action_probability
    }


class EnvPoolVectorEnv(VectorEnv):
    """An EnvPool env of `num_envs` copies behind gymnasium's VectorEnv API."""

    def __init__(self, env_id: str, num_envs: int, seed: int, error: type[Exception]) -> None:
        self.env_id, self.num_envs, self._error = env_id, num_envs, error
        self._task, self._options = envpool_task(env_id, error)
        self._pool = self._make(seed)
        self._unused_seed: int | None = seed  # the pool's seed until it is first reset
        self.single_observation_space = _obs_space(self._pool.observation_space)
        self.single_action_space, self._act_low, self._act_high = _action_space(
            self._pool.action_space
        )
        self.observation_space = batch_space(self.single_observation_space, num_envs)
        self.action_space = batch_space(self.single_action_space, num_envs)
        self.action_space.seed(seed)
        self._obs_dtype = self.single_observation_space.dtype
        self.metadata = {"autoreset_mode": AutoresetMode.NEXT_STEP}

    def _make(self, seed: int) -> Any:
        envpool = _envpool(f"--env-backend envpool ({self.env_id})")
        with _quiet_casts():
            # EnvPool seeds env i with seed + i when the pool is built; reset() cannot reseed.
            pool = envpool.make_gymnasium(
                self._task,
                num_envs=self.num_envs,
                seed=seed,
                num_threads=NUM_THREADS,
                **self._options,
            )
            _ = pool.observation_space, pool.action_space  # built (and cached) on first use
        return pool

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        # EnvPool ignores reset(seed=): a seed needs a pool built with it, unless the pool
        # was just built with that seed and not stepped yet (the actor's first reset).
        if seed is not None and seed != self._unused_seed:
            self._pool.close()
            self._pool = self._make(seed)
            self.action_space.seed(seed)
        self._unused_seed = None
        obs, _info = self._pool.reset()
        return np.asarray(obs, self._obs_dtype), {}

    def step(
        self, actions: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        obs, rewards, terminated, truncated, _info = self._pool.step(self._actions(actions))
        # EnvPool's info holds per-env extras (Atari RAM, MuJoCo reward terms): not needed.
        return np.asarray(obs, self._obs_dtype), rewards, terminated, truncated, {}

    def _actions(self, actions: np.ndarray) -> np.ndarray:
        if self._act_low is None:
            return np.asarray(actions, np.int32)
        unit = np.clip(np.asarray(actions, np.float64), -1.0, 1.0)
        return self._act_low + (unit + 1.0) * 0.5 * (self._act_high - self._act_low)

    def close(self, **kwargs: Any) -> None:
        self._pool.close()


@contextlib.contextmanager
def _quiet_casts() -> Iterator[None]:
    """EnvPool builds float32 Boxes from float64 bounds, and gymnasium warns about the cast
    each time (an error under pytest); _obs_space casts to float32 anyway."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", r".*precision lowered by casting", UserWarning)
        yield


def _obs_space(space: spaces.Box) -> spaces.Box:
    """uint8 pixels stay uint8; flat observations are presented as float32, as gymnasium's
    envs give them and as actors and replay store them."""
    if space.dtype == np.uint8:
        return space
    low, high = space.low.astype(np.float32), space.high.astype(np.float32)
    return spaces.Box(low, high, space.shape, np.float32)


def _action_space(space: spaces.Space) -> tuple[spaces.Space, np.ndarray | None, Any]:
    """Discrete as is; a Box becomes [-1, 1] (as actorq.envs.make_env rescales gymnasium's),
    with the env's own bounds kept to map actions back onto them."""
    if isinstance(space, spaces.Discrete):
        return spaces.Discrete(int(space.n)), None, None
    unit = spaces.Box(-1.0, 1.0, space.shape, np.float32)
    return unit, space.low.astype(np.float64), space.high.astype(np.float64)
