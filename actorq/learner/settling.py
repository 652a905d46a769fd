"""Settling, the learner's side (actorq.learner.settle): entering the settled phase
once the evaluator reports the target, rolling back to the solved version, and the
publish gate. A mixin of `actorq.learner.loop.Learner`, which owns the state it uses."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import torch

from actorq import metrics
from actorq.config import ConfigError
from actorq.learner.publish_gate import PublishGate
from actorq.learner.settle import SolvedWatch, credit_per_update
from actorq.replay import TerminalShareSampler

if TYPE_CHECKING:
    import redis

    from actorq.config import LearnerSettings
    from actorq.learner.publisher import WeightsPublisher
    from actorq.redis_keys import RedisKeys
    from actorq.replay import Sampler

log = logging.getLogger("actorq.learner.loop")  # the loop's log, as before the move

# Recent published weights kept for settling's rollback: every version of a 64x64 policy
# (18 KB each) for hundreds of versions, only the last few of a 1024-wide one.
ROLLBACK_KEEP_BYTES = 32 * 2**20


def scale_learning_rates(algorithm: object, scale: float) -> None:
    """Multiply the learning rate of every optimizer `algorithm` owns by `scale` (DQN has
    one; the actor-critic algorithms have one per network, SAC one more for its alpha)."""
    optimizers = [v for v in vars(algorithm).values() if isinstance(v, torch.optim.Optimizer)]
    if not optimizers:
        raise ConfigError(f"{type(algorithm).__name__} has no optimizer whose rate to scale")
    for optimizer in optimizers:
        for group in optimizer.param_groups:
            group["lr"] *= scale


class SettleSteps:
    """The settle steps of `Learner` (its attributes: s, cfg, client, keys, dqn, sampler,
    publisher, counters, settle, settled_at)."""

    # Set by Learner.__init__; declared here for type checkers only.
    s: LearnerSettings
    cfg: Any  # the algorithm's config
    client: redis.Redis
    keys: RedisKeys
    dqn: Any  # the algorithm
    sampler: Sampler
    publisher: WeightsPublisher | None
    counters: Any  # actorq.learner.counters.LearnerCounters
    settle: SolvedWatch | None
    settled_at: int | None
    _credit: int

    def _publish_gate(self) -> PublishGate | None:
        s = self.s
        if s.settle_at is None or s.settle_validation_episodes == 0:
            return None
        bar = s.settle_at if s.settle_validation_bar is None else s.settle_validation_bar
        return PublishGate(s.env_id, s.settle_validation_episodes, bar, s.seed + 77_777)

    def _solved_watch(self) -> SolvedWatch | None:
        s = self.s  # LearnerSettings checks both ratios and refuses parallel learners
        if s.settle_at is None:
            return None
        return SolvedWatch(self.client, self.keys, s.settle_at, s.settle_episodes)

    def _enter_settled(self, why: str, resumed_at: int | None = None) -> None:
        """From now on train at the settled replay ratio (actorq.learner.settle)."""
        if self.settled_at is not None or self.settle is None:
            return
        base = self.s.samples_per_insert
        # A run already at a low ratio (e.g. 1) keeps it: settling never raises the ratio.
        low = min(self.s.settle_samples_per_insert, base)
        self.settled_at = self.counters.updates if resumed_at is None else resumed_at
        self.settle.solved = True  # stop watching
        # Extra transitions credited per update on top of the batch actually sampled.
        self._credit = round(self.cfg.batch_size * (credit_per_update(base, low) - 1.0))
        metrics.LEARNER_REPLAY_RATIO.set(low)
        # A resumed learner's weights and optimizer state are already the settled ones.
        if resumed_at is None and self.s.settle_rollback:
            self._roll_back_to_solved_version()
        if self.s.settle_lr_scale != 1.0 and resumed_at is None:
            scale_learning_rates(self.dqn, self.s.settle_lr_scale)
        if isinstance(self.sampler, TerminalShareSampler):
            self.sampler.share = self.s.settle_terminal_share
        log.info(
            "settled at update %d (%s): replay ratio %g -> %g samples per insert, "
            "learning rate x %g, terminal rows %g of each batch",
            self.settled_at,
            why,
            base,
            low,
            self.s.settle_lr_scale,
            getattr(self.sampler, "share", 0.0),
        )

    def _roll_back_to_solved_version(self) -> None:
        """Load the weights of the version the evaluator found solved (SolvedWatch)."""
        assert self.settle is not None and self.publisher is not None
        version = self.settle.solved_version()
        weights = None if version is None else self.publisher.weights_of(version)
        load = getattr(self.dqn, "load_policy_weights", None)
        if weights is None or load is None:
            log.warning(
                "settling on the current weights: version %s is not held (or %s cannot "
                "load policy weights)", version, self.s.algo,
            )  # fmt: skip
            return
        load(weights)
        log.info("settling on version %d, the one the evaluator measured", version)
