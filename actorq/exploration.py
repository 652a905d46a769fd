"""Exploration for actors: Ape-X per-actor epsilons, batched epsilon-greedy, schedules."""

from __future__ import annotations

import math
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
    One uniform draw u per row decides both: the row explores when u < epsilon, and then
    takes action floor(u * A / epsilon) (u / epsilon is uniform on [0, 1) given u < epsilon).
    A second draw of the random actions (`rng.integers`) cost more than the rest of the
    exploration together (~9 us per call); the actor's fast path
    (actorq.actor.columns.EpsilonGreedy) makes the same draws and the same arithmetic.
    """
    q = np.asarray(q_values)
    if q.ndim != 2:
        raise ValueError(f"q_values must be [batch, num_actions], got shape {q.shape}")
    batch, num_actions = q.shape
    eps = np.broadcast_to(np.asarray(epsilon, dtype=np.float64), (batch,))
    if np.any((eps < 0) | (eps > 1)):
        raise ValueError(f"epsilon must be in [0, 1], got {epsilon}")
    actions = q.argmax(axis=1).astype(np.int64)
    u = rng.random(batch)
    explore = u < eps
    if explore.any():
        scaled = u[explore] * (num_actions / eps[explore])
        actions[explore] = np.minimum(scaled, num_actions - 1).astype(np.int64)
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


# --- behaviour log-probabilities (recorded per transition for off-policy corrections) ---
def epsilon_greedy_logp(
    action: np.ndarray, greedy: np.ndarray, epsilon: float | np.ndarray, num_actions: int
) -> np.ndarray:
    """log mu(a|s) of epsilon-greedy: log(1 - eps + eps / A) for the greedy action, log(eps
    / A) for any other. float32 [B]; -inf only for a non-greedy action at eps 0 (impossible)."""
    eps = np.asarray(epsilon, np.float64)
    prob = eps / num_actions + (1.0 - eps) * (np.asarray(action) == np.asarray(greedy))
    with np.errstate(divide="ignore"):
        return np.log(prob).astype(np.float32)


def epsilon_from_logp(logp: np.ndarray, is_greedy: np.ndarray, num_actions: int) -> np.ndarray:
    """The epsilon an epsilon-greedy actor used, recovered from the recorded log-prob of the
    taken action and whether it was its greedy one (inverts `epsilon_greedy_logp`)."""
    prob = np.exp(np.asarray(logp, np.float64))
    if num_actions < 2:
        return np.zeros_like(prob)
    eps = np.where(is_greedy, (1.0 - prob) * num_actions / (num_actions - 1), prob * num_actions)
    return np.clip(eps, 0.0, 1.0)


def clipped_gaussian_logp(action: np.ndarray, mean: np.ndarray, sigma: float) -> np.ndarray:
    """log-prob of `action` [B, A] under clip(mean + N(0, sigma^2), -1, 1), summed over A.

    `gaussian_action_noise` clips, so an action at +-1 carries the whole tail mass beyond
    it: those dimensions count log P(x >= 1) (or <= -1), the others the Gaussian density.
    The same formula for the behaviour's and the learner's mean keeps their ratio exact.
    numpy on the actors' per-step path (torch's ops on a few values cost ~10x more)."""
    if sigma <= 0:
        raise ValueError(f"sigma must be > 0 for a log-prob, got {sigma}")
    a = np.asarray(action, np.float64)
    m = np.asarray(mean, np.float64)
    z = (a - m) / sigma
    logp = -0.5 * z * z - math.log(sigma * math.sqrt(2.0 * math.pi))
    upper, lower = a >= 1.0, a <= -1.0
    if upper.any() or lower.any():  # rarer: only where the noise was clipped
        logp[upper] = _log_ndtr((m[upper] - 1.0) / sigma)
        logp[lower] = _log_ndtr((-1.0 - m[lower]) / sigma)
    return logp.sum(axis=-1).astype(np.float32)


def _log_ndtr(x: np.ndarray) -> np.ndarray:
    """log Phi(x), stable far in the left tail (where Phi underflows)."""
    out = np.empty_like(x)
    for i, v in enumerate(x.flat):
        if v > -20.0:
            out.flat[i] = math.log(0.5 * math.erfc(-v / math.sqrt(2.0)))
        else:  # asymptotic series: Phi(x) ~ phi(x) / -x * (1 - 1/x^2 + 3/x^4)
            out.flat[i] = (-0.5 * v * v - math.log(-v * math.sqrt(2.0 * math.pi))
                           + math.log1p(-1.0 / v**2 + 3.0 / v**4))  # fmt: skip
    return out


def uniform_logp(batch: int, act_dim: int) -> np.ndarray:
    """log-density of the uniform warm-up on [-1, 1]^A: -A log 2 for every row."""
    return np.full(batch, -act_dim * math.log(2.0), np.float32)
