"""n-step transitions built on the actor, so replay and learner stay one-step simple.

For each env the last n (s, a, r) wait here; once n are collected the oldest leaves as
(s_t, a_t, sum_k gamma^k r_{t+k}, s_{t+n}, done=False, steps=n). When an episode ends,
every waiting step leaves with the rewards up to the end, s' = the last observation,
done = terminated and steps = how many rewards it summed; the learner then discounts
the bootstrap by gamma ** steps (and not at all after a termination).
"""

from __future__ import annotations

from collections import deque

import numpy as np


class NStepAccumulator:
    def __init__(self, num_envs: int, n: int, gamma: float) -> None:
        if n < 1 or n > 255:
            raise ValueError(f"n_step must be in [1, 255], got {n}")
        if not 0.0 <= gamma <= 1.0:
            raise ValueError(f"gamma must be in [0, 1], got {gamma}")
        self.n, self.gamma = n, gamma
        self.windows: list[deque] = [deque() for _ in range(num_envs)]

    def add(
        self,
        obs: np.ndarray,
        action: np.ndarray,
        reward: np.ndarray,
        next_obs: np.ndarray,
        terminated: np.ndarray,
        ended: np.ndarray,
        valid: np.ndarray,
    ) -> tuple[np.ndarray, ...] | None:
        """One vector step; returns (obs, action, reward, next_obs, done, steps) arrays of
        the transitions it completes, or None when none is complete yet."""
        out: list[tuple] = []
        for i in np.flatnonzero(valid):
            window = self.windows[i]
            window.append((obs[i], action[i], float(reward[i])))
            if ended[i]:
                while window:
                    out.append(self._emit(window, next_obs[i], bool(terminated[i])))
                    window.popleft()
            elif len(window) == self.n:
                out.append(self._emit(window, next_obs[i], False))
                window.popleft()
        if not out:
            return None
        columns = list(zip(*out, strict=True))
        return (
            np.stack(columns[0]),
            np.stack(columns[1]),
            np.asarray(columns[2], np.float32),
            np.stack(columns[3]),
            np.asarray(columns[4], bool),
            np.asarray(columns[5], np.uint8),
        )

    def _emit(self, window: deque, next_obs: np.ndarray, done: bool) -> tuple:
        first_obs, first_action, _ = window[0]
        total = sum(self.gamma**k * r for k, (_, _, r) in enumerate(window))
        return (first_obs, first_action, total, next_obs, done, len(window))
