"""DeepMind Control Suite tasks as gymnasium envs (ids `dmc:<domain>-<task>`).

dm_control speaks dm_env (TimeStep with a dict of observations, a discount, a bounded
action spec); actors and learners speak gymnasium. `DMCEnv` converts:
- observations: the dict's arrays flattened in key order into one float32 vector;
- actions: a Box in [-1, 1] mapped linearly onto the task's own action bounds;
- episode ends: `terminated` when dm_env ends with discount 0 (a true terminal state),
  `truncated` when it ends with a non-zero discount (the suite's 1000-step time limit),
  so the learner keeps bootstrapping across time limits.
Rendering is not supported, so no OpenGL backend (MUJOCO_GL) is needed.
"""

from __future__ import annotations

import os
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from actorq.extras import require


def _suite() -> Any:
    """dm_control.suite, imported with rendering off: without this dm_control probes for
    an OpenGL backend and glfw warns about a missing DISPLAY in every actor's log."""
    os.environ.setdefault("MUJOCO_GL", "disable")
    return require("dm_control.suite", "mujoco", "the DeepMind Control Suite")


class DMCEnv(gym.Env):
    """One dm_control suite task behind the gymnasium API."""

    metadata: dict[str, Any] = {"render_modes": []}

    def __init__(self, domain: str, task: str) -> None:
        suite = _suite()
        self.domain, self.task = domain, task
        self._env = suite.load(domain, task, task_kwargs={"random": 0})
        spec = self._env.action_spec()
        self._act_low = np.asarray(spec.minimum, np.float64) * np.ones(spec.shape)
        self._act_high = np.asarray(spec.maximum, np.float64) * np.ones(spec.shape)
        self._obs_keys = list(self._env.observation_spec())
        obs_dim = sum(int(np.prod(s.shape)) for s in self._env.observation_spec().values())
        self.observation_space = spaces.Box(-np.inf, np.inf, (obs_dim,), np.float32)
        self.action_space = spaces.Box(-1.0, 1.0, spec.shape, np.float32)

    def _flatten(self, observation: dict[str, np.ndarray]) -> np.ndarray:
        parts = [np.asarray(observation[k], np.float32).ravel() for k in self._obs_keys]
        return np.concatenate(parts)

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        if seed is not None:
            # The task draws initial states from its own RandomState; reseed that one.
            self._env.task._random = np.random.RandomState(seed)
        time_step = self._env.reset()
        return self._flatten(time_step.observation), {}

    def step(self, action: np.ndarray) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        unit = np.clip(np.asarray(action, np.float64), -1.0, 1.0)
        scaled = self._act_low + (unit + 1.0) * 0.5 * (self._act_high - self._act_low)
        time_step = self._env.step(scaled)
        reward = float(time_step.reward or 0.0)
        ended = time_step.last()
        terminated = bool(ended and time_step.discount == 0.0)
        truncated = bool(ended and not terminated)
        return self._flatten(time_step.observation), reward, terminated, truncated, {}

    def close(self) -> None:
        self._env.close()


def make_dmc_env(name: str, error: type[Exception]) -> gym.Env:
    """`name` is `<domain>-<task>`; raise `error` naming it when the suite has no such task."""
    try:
        suite = _suite()
    except ImportError as exc:  # the message names the extra (actorq.extras)
        raise error(f"dmc:{name}: {exc}") from exc
    domain, sep, task = name.partition("-")
    if not sep or (domain, task) not in suite.ALL_TASKS:
        raise error(
            f"unknown DeepMind Control Suite task 'dmc:{name}'; expected dmc:<domain>-<task> "
            "with a suite task such as dmc:cartpole-swingup, dmc:walker-stand, dmc:reacher-easy"
        )
    return DMCEnv(domain, task)
