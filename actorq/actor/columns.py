"""What an actor keeps of each vector step, and its epsilon-greedy exploration.

- `PendingTransitions` (continuous, n-step, the plain path): each step's valid rows as a
  dict of parts, concatenated at each push.
- `StepColumns` (the fast path, discrete 1-step): valid rows copied into preallocated
  flat columns, so a push encodes views of them; rows keep the parts' order, so a batch
  is the same bytes.
- `StepRecorder`: the one recording of a step, into either store and the episode tracker.
- `EpsilonGreedy`: the epsilon-greedy of every discrete actor, with the draws and
  arithmetic of `actorq.exploration.epsilon_greedy` and log-probs from per-env tables.
actorq.actor.fast_act runs the last two as numba kernels (tests/unit/test_fused_mlp.py,
tests/integration/test_actor_fast_path.py compare them).
"""

from __future__ import annotations

import numpy as np

from actorq.replay import TransitionBatch

_PENDING_COLUMNS = ("obs", "action", "reward", "next_obs", "done", "steps", "behaviour",
                    "behaviour_logp")  # fmt: skip


class PendingTransitions:
    """Transitions collected since the last push, kept until Redis acknowledges them."""

    def __init__(self) -> None:
        self.parts: list[dict[str, np.ndarray]] = []
        self.count = 0

    def add(self, *columns: np.ndarray | None) -> None:
        """Columns in `_PENDING_COLUMNS` order; optional ones (steps on) may be None."""
        part = {k: v for k, v in zip(_PENDING_COLUMNS, columns, strict=False) if v is not None}
        self.parts.append(part)
        self.count += len(part["action"])

    def add_step(self, obs, action, reward, next_obs, done, valid, behaviour, logp, n_valid):
        """`StepColumns.add_step` for these parts: one vector step's `valid` rows (`logp`
        may be None: OU noise has no known density)."""
        v = valid
        logp = None if logp is None else logp[v]
        self.add(obs[v], np.asarray(action)[v], reward[v], next_obs[v], done[v], None,
                 behaviour[v], logp)  # fmt: skip

    def batch(self, actor_id: str, version: int, precision: str) -> TransitionBatch:
        # An optional column goes out only when every part has it (all rows or none).
        names = [k for k in _PENDING_COLUMNS if all(k in part for part in self.parts)]
        c = {k: np.concatenate([part[k] for part in self.parts]) for k in names}
        continuous = c["action"].ndim == 2
        action_dtype = np.float32 if continuous else np.int64
        return TransitionBatch(
            obs=_obs_column(c["obs"]),
            action=c["action"].astype(action_dtype, copy=False),
            reward=c["reward"].astype(np.float32, copy=False),
            next_obs=_obs_column(c["next_obs"]),
            done=c["done"].astype(bool, copy=False),
            actor_id=actor_id,
            policy_version=version,
            precision=precision,
            steps=c["steps"].astype(np.uint8) if "steps" in c else None,
            behaviour=c["behaviour"].astype(action_dtype) if "behaviour" in c else None,
            behaviour_logp=c.get("behaviour_logp"),
        )

    def clear(self) -> None:
        self.parts.clear()
        self.count = 0


def _obs_column(obs: np.ndarray) -> np.ndarray:
    """uint8 pixels as they are (replay format "3"), anything else as float32."""
    return obs if obs.dtype == np.uint8 else obs.astype(np.float32, copy=False)


class EpsilonGreedy:
    """Per-env epsilon-greedy over Q-values [M, A]: (taken, greedy, log mu(taken))."""

    def __init__(self, epsilon: np.ndarray, num_actions: int) -> None:
        eps = np.asarray(epsilon, dtype=np.float64)
        if eps.ndim != 1 or np.any((eps < 0) | (eps > 1)):
            raise ValueError(f"epsilon must be one value in [0, 1] per env, got {epsilon}")
        if num_actions < 1:
            raise ValueError(f"num_actions must be >= 1, got {num_actions}")
        self.epsilon, self.num_actions = eps, num_actions
        # A / epsilon per env, as epsilon_greedy computes it for an exploring row (0 where
        # epsilon is 0: such a row never explores, and 0 keeps the product finite).
        with np.errstate(divide="ignore"):
            self.action_scale = np.where(eps > 0, num_actions / eps, 0.0)
        # The same float64 arithmetic as exploration.epsilon_greedy_logp, done once.
        with np.errstate(divide="ignore"):
            self.logp_greedy = np.log(eps / num_actions + (1.0 - eps) * 1.0).astype(np.float32)
            self.logp_other = np.log(eps / num_actions + (1.0 - eps) * 0.0).astype(np.float32)

    def __call__(
        self, q_values: np.ndarray, rng: np.random.Generator
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(taken, greedy, log mu(taken)); when no env explores, taken is greedy and the
        log-probs are the greedy table itself (callers copy them, never write to them)."""
        greedy = q_values.argmax(axis=1)
        u = rng.random(len(greedy))
        explore = u < self.epsilon
        if not np.count_nonzero(explore):  # ~0.3 us; ndarray.any() ~1.7
            return greedy, greedy, self.logp_greedy
        scaled = np.minimum(u * self.action_scale, self.num_actions - 1).astype(np.int64)
        taken = np.where(explore, scaled, greedy)
        logp = np.where(taken == greedy, self.logp_greedy, self.logp_other)
        return taken, greedy, logp


class StepColumns:
    """Transitions since the last push, in preallocated flat columns (valid rows only, in
    step then env order); grows when full (a long Redis outage keeps everything, as the
    plain path does)."""

    def __init__(
        self, num_envs: int, obs_shape: tuple[int, ...], obs_dtype, steps: int = 64
    ) -> None:
        self.num_envs, self.obs_shape, self.obs_dtype = num_envs, tuple(obs_shape), obs_dtype
        self.t = 0  # vector steps held
        self.count = 0  # rows held: the transitions the next push sends
        self._allocate(max(int(steps), 1) * num_envs)

    def _allocate(self, rows: int) -> None:
        self.obs = np.empty((rows, *self.obs_shape), self.obs_dtype)
        self.next_obs = np.empty_like(self.obs)
        self.action = np.empty(rows, np.int64)
        self.reward = np.empty(rows, np.float32)
        self.done = np.empty(rows, bool)
        self.behaviour = np.empty(rows, np.int64)
        self.logp = np.empty(rows, np.float32)
        self.capacity = rows

    def _grow(self) -> None:
        old = {k: getattr(self, k)[: self.count] for k in _COLUMNS}
        self._allocate(self.capacity * 2)
        for name, values in old.items():
            getattr(self, name)[: self.count] = values

    def next_row(self) -> int:
        """The row the next vector step's first transition goes to, with room for M."""
        if self.count + self.num_envs > self.capacity:
            self._grow()
        return self.count

    def commit(self, n_valid: int) -> None:
        """Count the step written from `next_row()` on and its `n_valid` transitions."""
        self.t += 1
        self.count += n_valid

    def add_step(
        self, obs, action, reward, next_obs, done, valid, behaviour, logp, n_valid: int
    ) -> None:
        """One vector step's M rows, of which the `valid` ones are kept; `n_valid` =
        count of `valid` (the caller has it)."""
        at = self.next_row()
        rows = slice(at, at + n_valid)
        keep = slice(None) if n_valid == self.num_envs else valid
        self.obs[rows] = obs[keep]
        self.next_obs[rows] = next_obs[keep]
        self.action[rows] = action[keep]
        self.reward[rows] = reward[keep]  # float64 rewards round to float32 as astype does
        self.done[rows] = done[keep]
        self.behaviour[rows] = behaviour[keep]
        self.logp[rows] = logp[keep]
        self.commit(n_valid)

    def batch(self, actor_id: str, version: int, precision: str) -> TransitionBatch:
        """The held transitions as views of the columns: valid until the next `add`
        (the push encodes them at once, and the encoding copies)."""
        n = self.count
        return TransitionBatch(
            obs=self.obs[:n], action=self.action[:n], reward=self.reward[:n],
            next_obs=self.next_obs[:n], done=self.done[:n], actor_id=actor_id,
            policy_version=version, precision=precision, steps=None,
            behaviour=self.behaviour[:n], behaviour_logp=self.logp[:n],
        )  # fmt: skip

    def clear(self) -> None:
        self.t = 0
        self.count = 0


_COLUMNS = ("obs", "next_obs", "action", "reward", "done", "behaviour", "logp")


def auto_push_every(num_envs: int, transition_bytes: int) -> int:
    """Transitions per push when ACTORQ_PUSH_EVERY is 0 (auto): 64 vector steps' worth,
    at most 1 MiB per batch, never below 32. A push is one Redis round trip; 64 steps'
    worth measured 1.2-1.5x the env steps/s of 16 steps' worth (docs/actor-throughput.md).
    """
    by_bytes = (1 << 20) // max(int(transition_bytes), 1)
    return max(32, min(64 * num_envs, by_bytes))


class StepRecorder:
    """One vector step's valid rows into the pending store and its rewards into the
    episode tracker; returns the number of real transitions (FusedRecorder must match)."""

    def __init__(self, pending: StepColumns | PendingTransitions, episodes) -> None:
        self.pending, self.episodes = pending, episodes  # an actorq.actor.episodes tracker

    def __call__(self, obs, taken, behaviour, logp, step, version: int, env_steps: int) -> int:
        """`step` is the stepper's VectorStep; `env_steps` the actor's count before it;
        `behaviour` the policy's own action (greedy, or the tanh mean), `logp` log mu(taken)
        or None."""
        v = step.valid
        steps = int(np.count_nonzero(v))
        self._add(obs, taken, behaviour, logp, step, steps)
        rewards = step.rewards if steps == len(v) else np.where(v, step.rewards, 0.0)
        self.episodes.step(rewards, step.ended, version, env_steps + steps, v)
        return steps

    def _add(self, obs, taken, behaviour, logp, step, n_valid: int) -> None:
        self.pending.add_step(obs, taken, step.rewards, step.next_obs, step.terminated,
                              step.valid, behaviour, logp, n_valid)  # fmt: skip
