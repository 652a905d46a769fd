"""The learner's replay sampler, chosen by its settings."""

from __future__ import annotations

from actorq.config import LearnerSettings
from actorq.extras import require
from actorq.replay import Sampler, TerminalShareSampler, UniformSampler


def make_sampler(settings: LearnerSettings) -> Sampler:
    """The learner's sampler, by `settings.replay`. Priorities are not persisted: after a
    restart, rebuilt rows enter at the running max priority like new rows."""
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
