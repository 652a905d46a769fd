"""n-step transitions built on the actor, so replay and learner stay one-step simple.

For each env the last n (s, a, r) wait here; the oldest leaves as (s_t, a_t,
sum_k gamma^k r_{t+k}, s_{t+n}, done=False, steps=n). When an episode ends every waiting
step leaves with the rewards up to the end and done = terminated; the learner discounts
the bootstrap by gamma ** steps.

With `cut` (ACTORQ_DQN_IS_CORRECTION, discrete only), a non-greedy action ends every
waiting transition before it, so a return sums only rewards that followed greedy actions
(Retrace with a greedy target). Per-step extras (behaviour action and log-prob) leave
with the transition their step starts: they describe a_t.
"""

from __future__ import annotations

from collections import deque

import numpy as np

from actorq.actor.columns import PendingTransitions, StepRecorder


class NStepAccumulator:
    def __init__(self, num_envs: int, n: int, gamma: float, cut: bool = False) -> None:
        if n < 1 or n > 255:
            raise ValueError(f"n_step must be in [1, 255], got {n}")
        if not 0.0 <= gamma <= 1.0:
            raise ValueError(f"gamma must be in [0, 1], got {gamma}")
        self.n, self.gamma, self.cut = n, gamma, cut
        self.cuts = 0  # windows ended early by an exploratory action
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
        extras: tuple[np.ndarray, ...] = (),
        greedy: np.ndarray | None = None,
    ) -> tuple[np.ndarray, ...] | None:
        """One vector step; (obs, action, reward, next_obs, done, steps, *extras) of the
        transitions it completes, or None. `extras`: per-env arrays of this step; `greedy`
        (with `cut`): whether each env's action was the greedy one."""
        out: list[tuple] = []
        for i in np.flatnonzero(valid):
            window = self.windows[i]
            if self.cut and window and greedy is not None and not greedy[i]:
                self.cuts += 1
                while window:  # bootstrap where the exploratory action was taken
                    out.append(self._emit(window, obs[i], False))
                    window.popleft()
            window.append((obs[i], action[i], float(reward[i]), tuple(e[i] for e in extras)))
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
            *(np.stack(c) for c in columns[6:]),
        )

    def _emit(self, window: deque, next_obs: np.ndarray, done: bool) -> tuple:
        first_obs, first_action, _, first_extras = window[0]
        total = sum(self.gamma**k * r for k, (_, _, r, _) in enumerate(window))
        return (first_obs, first_action, total, next_obs, done, len(window), *first_extras)


class NStepRecorder(StepRecorder):
    """`StepRecorder` for n-step transitions: each step's rows wait in the accumulator, and
    the transitions it completes go to the pending parts; episodes as every step's."""

    def __init__(
        self, pending: PendingTransitions, episodes, nstep: NStepAccumulator, continuous: bool
    ) -> None:
        super().__init__(pending, episodes)
        self.parts, self.nstep, self.continuous = pending, nstep, continuous

    def _add(self, obs, taken, behaviour, logp, step, n_valid: int) -> None:
        extras = (behaviour,) if logp is None else (behaviour, logp)
        greedy = None if self.continuous else taken == behaviour  # where `cut` ends windows
        done = self.nstep.add(obs, taken, step.rewards, step.next_obs, step.terminated,
                              step.ended, step.valid, extras, greedy=greedy)  # fmt: skip
        if done is not None:
            self.parts.add(*done)
