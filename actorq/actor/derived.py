"""What an actor derives from its settings: its envs' epsilons, its continuous
exploration and its rate limiter (and the wait it imposes)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import redis

from actorq import metrics
from actorq.config import ActorSettings
from actorq.exploration import (
    OUNoise,
    apex_epsilon,
    clipped_gaussian_logp,
    gaussian_action_noise,
    uniform_logp,
)
from actorq.redis_keys import RedisKeys
from actorq.replay import SampleToInsertRatio


def env_epsilons(settings: ActorSettings) -> np.ndarray:
    """Ape-X epsilons over every env of every actor: env j of actor i is explorer
    i * M + j of N * M, so 2 actors x 8 envs cover the range 16 actors would."""
    m = settings.envs_per_actor
    total = settings.num_actors * m
    first = settings.actor_index * m
    return np.array(
        [
            apex_epsilon(first + j, total, settings.epsilon_base, settings.epsilon_alpha)
            for j in range(m)
        ]
    )


def actor_limiter(settings: ActorSettings) -> SampleToInsertRatio | None:
    """Actors' side of the samples-per-insert ratio: they may run `insert_error_buffer`
    transitions ahead (more than the learner's warm-up, or actors would stall it)."""
    spi = settings.samples_per_insert
    if spi <= 0:
        return None
    return SampleToInsertRatio(spi, 1, settings.insert_error_buffer * spi)


def wait_for_learner(
    limiter: SampleToInsertRatio | None,
    counters: list,
    client: redis.Redis,
    keys: RedisKeys,
    stop: threading.Event,
    instance: str,
) -> None:
    """Wait while all actors together run too far ahead of the learner's sampling;
    `counters` (inserted, sampled) as read with the push, then polled while waiting."""
    if limiter is None:
        return
    started = time.perf_counter()
    while not stop.is_set():
        inserted, sampled = counters
        if limiter.can_insert(int(inserted or 0), int(sampled or 0), 1):
            break
        # The learner reports its sampled count every few updates; polling faster than
        # that only burns CPU the learner needs on a small machine.
        stop.wait(0.02)
        counters = client.mget(keys.inserted_counter, keys.learner_sampled)
    waited = time.perf_counter() - started
    if waited > 0.001:
        metrics.ACTOR_RATE_LIMITED_SECONDS.labels(instance).inc(waited)


class ContinuousExploration:
    """Continuous exploration around the policy's tanh actions: uniform for the first
    `random_steps`, then OU or Gaussian noise. Returns (taken, the policy's own action
    before any noise, log mu(taken) where the noise's density is known)."""

    def __init__(
        self, settings: ActorSettings, ou: OUNoise | None, env_steps: Callable[[], int]
    ) -> None:
        self.random_steps, self.sigma = settings.random_steps, settings.noise_sigma
        self.ou, self.env_steps = ou, env_steps

    def __call__(
        self, out: np.ndarray, rng: np.random.Generator
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        mean = np.asarray(out, np.float32)
        if self.env_steps() < self.random_steps:  # uniform warm-up fills replay broadly
            uniform = rng.uniform(-1.0, 1.0, out.shape).astype(np.float32)
            return uniform, mean, uniform_logp(*out.shape)
        if self.ou is not None:  # OU's state makes the density unknown here: no log-prob
            return self.ou(out), mean, None
        noisy = gaussian_action_noise(out, self.sigma, rng)
        logp = clipped_gaussian_logp(noisy, mean, self.sigma) if self.sigma > 0 else None
        return noisy, mean, logp


def ou_noise(settings: ActorSettings, env: Any) -> OUNoise | None:
    """The actor's Ornstein-Uhlenbeck noise when ACTORQ_NOISE is ou (continuous actions)."""
    if settings.noise != "ou":
        return None
    act_dim = int(env.single_action_space.shape[0])
    seed = settings.seed + 7919 * settings.actor_index + 1
    return OUNoise(env.num_envs, act_dim, settings.noise_sigma, seed=seed)
