"""One vector-env step as replay-ready transitions, whatever the env's autoreset mode.

gymnasium 1.x vector envs autoreset in one of two ways:
- SAME_STEP (our SyncVectorEnv): the step that ends an episode already returns the reset
  observation; the true last observation is in infos["final_obs"].
- NEXT_STEP (native vectorized envs such as CartPoleVectorEnv, far faster than a Python
  loop over envs): the ending step returns the true last observation, and the *next*
  step is a reset step whose action is ignored and whose reward is 0.
`VectorStepper` hides the difference: `valid` marks rows that are real transitions.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from gymnasium.vector import AutoresetMode, VectorEnv

from actorq.envs import is_pixel_space, next_obs_for_replay


@dataclass
class VectorStep:
    obs: np.ndarray  # observations to act on next
    next_obs: np.ndarray  # s' to store for each row
    rewards: np.ndarray
    terminated: np.ndarray
    ended: np.ndarray  # a real episode ended on this row (terminated or truncated)
    valid: np.ndarray  # False on NEXT_STEP reset rows: not a transition, not an env step


class VectorStepper:
    def __init__(self, env: VectorEnv) -> None:
        self.env = env
        mode = env.metadata.get("autoreset_mode", AutoresetMode.NEXT_STEP)
        self.next_step_mode = AutoresetMode(mode) == AutoresetMode.NEXT_STEP
        self._resetting = np.zeros(env.num_envs, dtype=bool)
        # Pixels stay uint8 (CNN policies and pixel replay take them so, at a quarter of
        # float32's bytes); flat observations become float32.
        pixels = is_pixel_space(env.single_observation_space)
        self.obs_dtype = np.uint8 if pixels else np.float32

    def reset(self, seed: int | None = None) -> np.ndarray:
        obs, _ = self.env.reset(seed=seed)
        self._resetting[:] = False
        return np.ascontiguousarray(obs, dtype=self.obs_dtype)

    def step(self, actions: np.ndarray) -> VectorStep:
        obs, rewards, terminated, truncated, infos = self.env.step(actions)
        # C order: CartPole's vector env returns its state transposed, and the forward,
        # the recorder and the replay columns each want rows; one copy here, none there.
        obs = np.ascontiguousarray(obs, dtype=self.obs_dtype)
        ended = np.logical_or(terminated, truncated)
        if self.next_step_mode:
            valid = ~self._resetting
            ended &= valid  # a reset row ends nothing
            self._resetting = ended
            return VectorStep(obs, obs, rewards, terminated, ended, valid)
        valid = np.ones(len(ended), dtype=bool)
        next_obs = next_obs_for_replay(obs, infos, terminated, truncated)
        return VectorStep(obs, next_obs, rewards, terminated, ended, valid)
