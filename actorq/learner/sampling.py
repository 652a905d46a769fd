"""The learner's replay sampler, chosen by its settings."""

from __future__ import annotations

from actorq.config import LearnerSettings
from actorq.extras import require
from actorq.replay import Sampler, TerminalShareSampler, UniformSampler


def make_sampler(settings: LearnerSettings) -> Sampler:
    """The learner's sampler, by `settings.replay`.

    Prioritized replay after a restart: rows rebuilt from the Redis stream enter at the
    running max priority (1.0 on a fresh sampler), like new rows, so each is sampled and
    re-scored soon; priorities themselves are not persisted (documented fallback).
    """
    if settings.replay == "prioritized":
        require("numba", "prioritized", "ACTORQ_REPLAY=prioritized (the sum tree's kernels)")
        from actorq.replay.prioritized import PrioritizedSampler  # numba: only when used

        return PrioritizedSampler(
            settings.replay_capacity,
            alpha=settings.per_alpha,
            beta=settings.per_beta,
            beta_steps=settings.per_beta_steps,
        )
    if settings.settle_terminal_share > 0:
        return TerminalShareSampler()  # its share is raised on settling (_enter_settled)
    return UniformSampler()
