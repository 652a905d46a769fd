"""The evaluator: the actor's env worker run greedily, one episode per env for each new
policy version; its mean return is what `actorq run` compares with the target."""

from __future__ import annotations

import logging
import time

import numpy as np
import redis

from actorq import metrics
from actorq.actor.loop import _EnvWorker
from actorq.actor.policy_follower import LoadedPolicy

log = logging.getLogger("actorq.actor.loop")  # the name its log lines always had


class Evaluator(_EnvWorker):
    """Greedy rounds: each new policy version gets one episode per env."""

    kind = "eval"

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.rounds = 0
        self.evaluated_version = 0

    def run(self) -> None:
        last_start = 0.0
        while not self.stop.is_set():
            policy = self.follower.current
            pause = last_start + self.s.eval_min_interval - time.monotonic()
            if policy is None or policy.version == self.evaluated_version or pause > 0:
                self.stop.wait(max(min(pause, 0.05), 0.01))
                continue
            last_start = time.monotonic()
            self._round(policy)
            self._flush()

    def _round(self, policy: LoadedPolicy) -> None:
        obs = self.stepper.reset(seed=self.s.seed + 100_003 * (self.rounds + 1))
        active = np.ones(self.env.num_envs, dtype=bool)
        self.episodes.returns[:] = 0.0
        self.episodes.lengths[:] = 0
        while active.any() and not self.stop.is_set():
            step = self.stepper.step(self.greedy(self.q_values(policy, obs)))
            obs = step.obs
            steps = int(active.sum())
            self._count_steps(steps)
            ended = step.ended & active
            rewards = np.where(active, step.rewards, 0.0)
            self.episodes.step(rewards, ended, policy.version, self.env_steps)
            active &= ~ended
        self.rounds += 1
        self.evaluated_version = policy.version
        metrics.ACTOR_EPISODES.labels(self.instance).inc(self.env.num_envs)
        metrics.ACTOR_EPISODE_RETURN.labels(self.instance).set(self.episodes.mean_return)

    def _flush(self) -> None:
        try:
            self.episodes.flush(self.client, self.keys, self.s.episodes_maxlen)
        except (redis.ConnectionError, redis.TimeoutError) as exc:
            metrics.ACTOR_CONNECTION_ERRORS.labels(self.instance, "redis").inc()
            log.warning(
                "redis unavailable (%s); holding %d episodes", exc, self.episodes.pending_count
            )
