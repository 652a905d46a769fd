"""What an actor derives from its settings: its envs' epsilons and its rate limiter."""

from __future__ import annotations

import numpy as np

from actorq.config import ActorSettings
from actorq.exploration import apex_epsilon
from actorq.replay import SampleToInsertRatio


def env_epsilons(settings: ActorSettings) -> np.ndarray:
    """Ape-X exploration spread over every env of every actor, not just over actors.

    Env j of actor i is explorer number i * M + j of N * M, so a pool of 2 actors x 8 envs
    covers the same range of epsilons (base .. base ** (1 + alpha)) as 16 actors would.
    """
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
    """Actors' side of the samples-per-insert ratio (the learner enforces the other side).

    Actors may run `insert_error_buffer` transitions ahead of what the learner's sampling
    implies; the buffer must exceed the learner's warm-up size or actors would stall it.
    """
    spi = settings.samples_per_insert
    if spi <= 0:
        return None
    return SampleToInsertRatio(spi, 1, settings.insert_error_buffer * spi)
