"""Exploration for actors: Ape-X per-actor epsilons, batched epsilon-greedy, schedules."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


def apex_epsilon(actor_index: int, num_actors: int, base: float = 0.4, alpha: float = 7.0) -> float:
    """Ape-X fixed epsilon of actor i of N: base ** (1 + alpha * i / (N - 1)).

    Actor 0 explores most (eps = base), the last one least (eps = base ** (1 + alpha)),
    so the replay always mixes exploratory and near-greedy experience without a schedule.
    """
    if num_actors < 1:
        raise ValueError(f"num_actors must be >= 1, got {num_actors}")
    if not 0 <= actor_index < num_actors:
        raise ValueError(f"actor_index must be in [0, {num_actors}), got {actor_index}")
    if not 0.0 <= base <= 1.0:
        raise ValueError(f"base must be in [0, 1], got {base}")
    if alpha < 0:
        raise ValueError(f"alpha must be >= 0, got {alpha}")
    if num_actors == 1:
        return float(base)
    return float(base ** (1.0 + alpha * actor_index / (num_actors - 1)))


def epsilon_greedy(
    q_values: np.ndarray, epsilon: float | np.ndarray, rng: np.random.Generator
) -> np.ndarray:
    """Per row of q_values [B, A]: a uniform random action with prob. epsilon, else argmax.

    `epsilon` is one float or one value per row [B] (an actor whose envs explore differently).
    """
    q = np.asarray(q_values)
    if q.ndim != 2:
        raise ValueError(f"q_values must be [batch, num_actions], got shape {q.shape}")
    batch, num_actions = q.shape
    eps = np.broadcast_to(np.asarray(epsilon, dtype=np.float64), (batch,))
    if np.any((eps < 0) | (eps > 1)):
        raise ValueError(f"epsilon must be in [0, 1], got {epsilon}")
    actions = q.argmax(axis=1).astype(np.int64)
    explore = rng.random(batch) < eps
    actions[explore] = rng.integers(0, num_actions, size=int(explore.sum()))
    return actions


@dataclass(frozen=True)
class LinearSchedule:
    """Value moving linearly from `start` to `end` over `duration` steps, then held at `end`."""

    start: float
    end: float
    duration: int

    def __post_init__(self) -> None:
        if self.duration < 0:
            raise ValueError(f"duration must be >= 0, got {self.duration}")

    def __call__(self, step: int) -> float:
        if self.duration == 0 or step >= self.duration:
            return float(self.end)
        frac = max(step, 0) / self.duration
        return float(self.start + frac * (self.end - self.start))


def gaussian_action_noise(
    actions: np.ndarray, sigma: float | np.ndarray, rng: np.random.Generator
) -> np.ndarray:
    """Continuous exploration: a + N(0, sigma^2) per dimension, clipped to [-1, 1].

    `actions` [B, act_dim] come from a deterministic tanh policy (DDPG, TD3, D4PG, and
    SAC's mean action, whose learned std stays on the learner); `sigma` is one float or
    one value per row [B].
    """
    a = np.asarray(actions, dtype=np.float32)
    if a.ndim != 2:
        raise ValueError(f"actions must be [batch, act_dim], got shape {a.shape}")
    s = np.asarray(sigma, dtype=np.float32)
    if np.any(s < 0):
        raise ValueError(f"sigma must be >= 0, got {sigma}")
    scale = s[:, None] if s.ndim == 1 else s
    noisy = a + scale * rng.standard_normal(a.shape).astype(np.float32)
    return np.clip(noisy, -1.0, 1.0, out=noisy)


class OUNoise:
    """Ornstein-Uhlenbeck noise per env (DDPG's original exploration): temporally
    correlated, x <- x + theta * (0 - x) + sigma * N(0, 1), reset when an episode ends."""

    def __init__(
        self, num_envs: int, act_dim: int, sigma: float, theta: float = 0.15, seed: int = 0
    ) -> None:
        if sigma < 0 or not 0 < theta <= 1:
            raise ValueError(f"need sigma >= 0 and theta in (0, 1], got {sigma}, {theta}")
        self.sigma, self.theta = sigma, theta
        self.state = np.zeros((num_envs, act_dim), np.float32)
        self.rng = np.random.default_rng(seed)

    def __call__(self, actions: np.ndarray) -> np.ndarray:
        self.state += -self.theta * self.state + self.sigma * self.rng.standard_normal(
            self.state.shape
        ).astype(np.float32)
        return np.clip(np.asarray(actions, np.float32) + self.state, -1.0, 1.0)

    def reset(self, ended: np.ndarray) -> None:
        self.state[np.asarray(ended, bool)] = 0.0
