"""Pixel environments behind the env factory: MinAtar and the Arcade Learning Environment.

- `minatar:<game>` (breakout, asterix, freeway, seaquest, space_invaders): MinAtar's
  10x10 grids as uint8 [C, 10, 10] (channels first, values 0/1), the game's minimal
  action set, MinAtar's own sticky actions (p = 0.1), a 10,000-step time limit.
- `ale:<Game>[,option...]` (e.g. ale:Pong, ale:Breakout,episodic_life): the standard
  DQN preprocessing done in C++ by ale-py's `AtariVectorEnv` (no OpenCV): frame skip 4
  with max-pooling of the last two frames, 84x84 grayscale, a stack of the last 4
  frames as uint8 [4, 84, 84], sticky actions (repeat_action_probability 0.25, Machado
  et al. 2018), up to 30 no-ops at reset, reward clipping off (the learner sees game
  scores; clip there if wanted). Options: `episodic_life` (a life loss ends the episode
  for the learner), `sticky=<p>`.
  Vector envs are one `AtariVectorEnv` stepping all copies in C++ threads (what envpool
  does); a single env (`make_env`) is the same thing with one copy.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.wrappers import TimeLimit

from actorq.extras import require

MINATAR_PREFIX = "minatar:"
ALE_PREFIX = "ale:"
MINATAR_GAMES = ("asterix", "breakout", "freeway", "seaquest", "space_invaders")
MINATAR_MAX_STEPS = 10_000


def is_pixel_id(env_id: str) -> bool:
    return env_id.startswith((MINATAR_PREFIX, ALE_PREFIX))


class MinAtarEnv(gym.Env):
    """One MinAtar game as a gymnasium env with uint8 [C, 10, 10] observations."""

    metadata: dict[str, Any] = {"render_modes": []}

    def __init__(self, game: str) -> None:
        # imported only when a MinAtar env is asked for
        minatar = require("minatar", "atari", f"MinAtar env {game!r}")
        self.game = minatar.Environment(game)
        self.actions = list(self.game.minimal_action_set())
        h, w, c = self.game.state_shape()
        self.observation_space = spaces.Box(0, 1, (c, h, w), np.uint8)
        self.action_space = spaces.Discrete(len(self.actions))

    def _obs(self) -> np.ndarray:
        return np.ascontiguousarray(self.game.state().transpose(2, 0, 1), dtype=np.uint8)

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        if seed is not None:
            self.game.seed(seed)
            self.action_space.seed(seed)
        self.game.reset()
        return self._obs(), {}

    def step(self, action):
        reward, done = self.game.act(self.actions[int(action)])
        return self._obs(), float(reward), bool(done), False, {}


def make_minatar_env(game: str, error: type[Exception]) -> gym.Env:
    if game not in MINATAR_GAMES:
        raise error(f"unknown MinAtar game {game!r}; expected one of {', '.join(MINATAR_GAMES)}")
    return TimeLimit(MinAtarEnv(game), MINATAR_MAX_STEPS)


def _ale_options(spec: str, error: type[Exception]) -> tuple[str, dict[str, Any]]:
    game, *options = spec.split(",")
    kwargs: dict[str, Any] = {"repeat_action_probability": 0.25, "episodic_life": False}
    for option in options:
        if option == "episodic_life":
            kwargs["episodic_life"] = True
        elif option.startswith("sticky="):
            try:
                kwargs["repeat_action_probability"] = float(option[len("sticky=") :])
            except ValueError:
                raise error(f"ale option {option!r}: expected sticky=<probability>") from None
        else:
            raise error(f"unknown ale option {option!r}; expected episodic_life or sticky=<p>")
    return _rom_name(game), kwargs


def _rom_name(game: str) -> str:
    """ALE ROM id of a game name: Pong -> pong, SpaceInvaders -> space_invaders."""
    out = "".join("_" + c.lower() if c.isupper() else c for c in game).lstrip("_")
    return out.lower()


def make_ale_vector_env(spec: str, num_envs: int, seed: int, error: type[Exception]) -> VectorEnv:
    """All copies stepped by ale-py's C++ vector env, SAME_STEP autoreset, preprocessed."""
    require("ale_py", "atari", f"ALE env {spec!r}")
    from ale_py import roms
    from ale_py.vector_env import AtariVectorEnv

    rom, kwargs = _ale_options(spec, error)
    if rom not in roms.get_all_rom_ids():
        raise error(f"unknown ALE game {spec.split(',')[0]!r} (ROM id {rom!r})")
    env = AtariVectorEnv(
        rom,
        num_envs,
        num_threads=1,  # actors scale by processes, one core each
        autoreset_mode=AutoresetMode.SAME_STEP,
        reward_clipping=False,
        **kwargs,
    )
    env.reset(seed=seed)
    env.action_space.seed(seed)
    return env


class AleSingleEnv(gym.Env):
    """One preprocessed ALE game as a plain gymnasium env (a vector env of one)."""

    metadata: dict[str, Any] = {"render_modes": []}

    def __init__(self, spec: str, error: type[Exception]) -> None:
        self.vec = make_ale_vector_env(spec, 1, 0, error)
        self.observation_space = self.vec.single_observation_space
        self.action_space = self.vec.single_action_space

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        obs, _info = self.vec.reset(seed=seed)
        return obs[0], {}

    def step(self, action):
        obs, reward, terminated, truncated, _info = self.vec.step(np.array([action]))
        return obs[0], float(reward[0]), bool(terminated[0]), bool(truncated[0]), {}

    def close(self) -> None:
        self.vec.close()
