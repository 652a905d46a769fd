"""Settling, the learner's side (actorq.learner.settle): certifying the candidate the
evaluator names, entering the settled phase on the certified version's weights, keeping
the candidates' weights across a restart, and the publish gate. A mixin of
`actorq.learner.loop.Learner`, which owns the state it uses."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import numpy as np
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
    certifier: PublishGate | None
    spec: Any
    _credit: int

    def _publish_gate(self) -> PublishGate | None:
        s = self.s
        if s.settle_at is None or s.settle_validation_episodes == 0:
            return None
        bar = s.settle_at if s.settle_validation_bar is None else s.settle_validation_bar
        return PublishGate(s.env_id, s.settle_validation_episodes, bar, s.seed + 77_777)

    def _certifier(self, precision: int) -> PublishGate | None:
        """Plays each candidate's weights for settle_certify_episodes greedy episodes on
        the learner's own envs, at the actors' precision, against settle_at."""
        s = self.s
        if s.settle_at is None:
            return None
        episodes = s.settle_certify_episodes
        return PublishGate(s.env_id, episodes, s.settle_at, s.seed + 55_555, precision=precision)

    def _solved_watch(self) -> SolvedWatch | None:
        s = self.s  # LearnerSettings checks both ratios and refuses parallel learners
        if s.settle_at is None:
            return None
        return SolvedWatch(self.client, self.keys, s.settle_at, s.settle_episodes)

    def _try_settle(self, candidate: int) -> None:
        """Certify `candidate` and settle on its weights, or reject it and learn on."""
        assert self.settle is not None and self.certifier is not None
        weights = self._candidate_weights(candidate)
        if weights is None:
            self._reject(candidate, "its weights are not held (published before a restart?)")
            return
        if not self.certifier.passes(weights, self.spec):
            mean = self.certifier.last_mean
            self._reject(candidate, f"{self.certifier.episodes}-episode mean {mean:.1f}")
            return
        if self.s.settle_rollback:
            self.dqn.load_policy_weights(weights)
        self._enter_settled(
            f"version {candidate} certified: {self.certifier.episodes}-episode mean "
            f"{self.certifier.last_mean:.1f} >= {self.settle.threshold:g}"
        )

    def _candidate_weights(self, candidate: int) -> dict[str, np.ndarray] | None:
        """The weights settling would freeze: the candidate's own (rollback), else the
        ones in hand, which are what the evaluator measured only without rollback."""
        if not self.s.settle_rollback:
            return self.dqn.policy_weights()
        if getattr(self.dqn, "load_policy_weights", None) is None or self.publisher is None:
            return None
        return self.publisher.weights_of(candidate)

    def _reject(self, candidate: int, why: str) -> None:
        assert self.settle is not None
        self.settle.reject(candidate)
        metrics.LEARNER_SETTLE_REJECTED.inc()
        log.info(
            "not settling on version %d (%s; certification needs a mean >= %g): "
            "learning goes on", candidate, why, self.settle.threshold,
        )  # fmt: skip

    def _enter_settled(self, why: str, resumed_at: int | None = None) -> None:
        """From now on train at the settled replay ratio (actorq.learner.settle), on the
        weights in hand: `_try_settle` has loaded the certified version's."""
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

    # --- across a restart -------------------------------------------------------------
    def settle_state(self) -> dict[str, Any]:
        """Checkpoint fields: the settled update, the rejected versions, and the weights
        of the candidates still in the evaluator's window, so a restarted learner can
        certify them instead of finding them gone."""
        watch = self.settle
        if watch is None or self.settled_at is not None or self.publisher is None:
            return {"settled_at": self.settled_at}
        held = {}
        for version in watch.held_versions():
            weights = self.publisher.weights_of(version)
            if weights is not None:
                held[str(version)] = {k: torch.from_numpy(v) for k, v in weights.items()}
        return {
            "settled_at": None,
            "settle_rejected_through": watch.rejected_through,
            "settle_held": held,
        }

    def restore_settle_state(self, state: dict[str, Any]) -> None:
        """The other side of `settle_state`."""
        if state.get("settled_at") is not None:
            self._enter_settled("resumed settled", resumed_at=int(state["settled_at"]))
            return
        if self.settle is None or self.publisher is None:
            return
        self.settle.reject(int(state.get("settle_rejected_through", 0)))
        for version, tensors in state.get("settle_held", {}).items():
            weights = {k: t.numpy() for k, t in tensors.items()}
            self.publisher.hold(int(version), weights)
