"""Settle once solved: a lower replay ratio after a certified version reaches a target.

DQN on CartPole-v1 collapses after solving when it keeps the replay ratio that solved it
fastest (16 per inserted transition: every seed fell below 250 within 200k env steps),
while a ratio of 4 stays solved but solves ~3x later (earlier BENCHMARKS 12c/12f). So the
learner starts fast and, once a version is certified, drops to the settled ratio, rolls
back to that version's weights and scales its learning rate by `settle_lr_scale` (0 by
default: at any rate above 0 Adam still walked solved policies off, BENCHMARKS 12r).

Certification: `SolvedWatch` names a candidate when the evaluator's mean over its last
`episodes` episodes reaches `threshold` (the newest version in the window whose own
episodes average it); the learner then plays `settle_certify_episodes` fresh greedy
episodes of exactly those weights at the actors' precision (actorq.learner.greedy_check).
A candidate that fails, or whose weights are no longer held, is rejected and only newer
versions are named after it: one lucky 25-episode round, or weights in hand that were
never measured, froze poor policies before.

The lower ratio needs no message to actors: each settled update is credited to the rate
limiter as `base / settled` batches, so actors run that much further ahead.
"""

from __future__ import annotations

import logging
import math
import time
from collections import deque
from typing import TYPE_CHECKING, Any

import numpy as np
import redis
import torch

from actorq import metrics
from actorq.actor.episodes import parse_episodes
from actorq.config import ConfigError
from actorq.learner.greedy_check import GreedyCheck
from actorq.redis_keys import RedisKeys
from actorq.replay import TerminalShareSampler

if TYPE_CHECKING:
    from actorq.config import LearnerSettings
    from actorq.learner.publisher import WeightsPublisher
    from actorq.replay import Sampler

log = logging.getLogger("actorq.learner.loop")  # the learner's log, where users look

# Recent published weights kept for certification: every version of a 64x64 policy
# (18 KB each) for hundreds of versions, only the last few of a 1024-wide one.
ROLLBACK_KEEP_BYTES = 32 * 2**20


class SolvedWatch:
    """Follows the evaluator's greedy returns and names candidate versions to certify."""

    def __init__(
        self,
        client: redis.Redis,
        keys: RedisKeys,
        threshold: float,
        episodes: int = 100,
        poll_seconds: float = 0.5,
    ) -> None:
        if not math.isfinite(threshold):
            raise ValueError(f"threshold must be a finite return, got {threshold}")
        if episodes < 1:
            raise ValueError(f"episodes must be >= 1, got {episodes}")
        self.client, self.keys = client, keys
        self.threshold, self.episodes = float(threshold), int(episodes)
        self.poll_seconds = poll_seconds
        self.recent: deque[float] = deque(maxlen=self.episodes)
        self.versions: deque[int] = deque(maxlen=self.episodes)  # policy of each episode
        self.solved = False  # set once settled: the watch stops reading
        self.rejected_through = 0  # candidates at or below this version were rejected
        self._last_id: bytes | str = "0-0"
        self._next_poll = 0.0

    def mean(self) -> float | None:
        """Mean of the last `episodes` evaluator returns; None until there are that many."""
        if len(self.recent) < self.episodes:
            return None
        return sum(self.recent) / len(self.recent)

    def poll(self) -> int | None:
        """Read new evaluator episodes (at most every `poll_seconds`); the version to
        certify when the window's mean reaches the threshold with a version newer than
        every rejected one in it, else None (always None once solved)."""
        now = time.monotonic()
        if self.solved or now < self._next_poll:
            return None
        self._next_poll = now + self.poll_seconds
        try:
            reply = self.client.xread({self.keys.episodes_stream: self._last_id}, count=10_000)
        except (redis.ConnectionError, redis.TimeoutError) as exc:
            log.warning("could not read the evaluator's episodes: %s", exc)
            return None
        for _stream, entries in reply or []:
            for entry_id, fields in entries:
                self._last_id = entry_id
                candidate = self._candidate_after(fields)
                if candidate is not None:
                    return candidate
        return None

    def reject(self, version: int) -> None:
        """`version` failed certification: from now on name only newer versions."""
        self.rejected_through = max(self.rejected_through, int(version))

    def held_versions(self) -> list[int]:
        """Versions in the window that may still be named (the checkpoint keeps their
        weights, so a restarted learner can certify them)."""
        return sorted({v for v in self.versions if v > self.rejected_through})

    def _candidate_after(self, fields: dict[bytes, bytes]) -> int | None:
        """The candidate once one of the entry's evaluator episodes brings the mean to the
        threshold (an entry carries one or more episodes: actorq.actor.episodes)."""
        try:
            episodes = parse_episodes(fields)
        except (KeyError, ValueError):
            return None  # a malformed entry is skipped here as the monitor skips it
        for episode in episodes:
            if episode.kind != "eval":
                return None
            self.recent.append(episode.episode_return)
            self.versions.append(episode.policy_version)
            mean = self.mean()
            if mean is not None and mean >= self.threshold:
                candidate = self.solved_version()
                if candidate is not None and candidate > self.rejected_through:
                    return candidate
        return None

    def solved_version(self) -> int | None:
        """The newest version in the window whose own episodes average the threshold, else
        the newest: the window mixes versions, and the learner is 9-27 versions further on
        by the time it reads the stream (earlier BENCHMARKS 12t)."""
        by_version: dict[int, list[float]] = {}
        for version, episode_return in zip(self.versions, self.recent, strict=True):
            by_version.setdefault(version, []).append(episode_return)
        if not by_version:
            return None
        good = [v for v, rs in by_version.items() if sum(rs) / len(rs) >= self.threshold]
        return max(good) if good else max(by_version)


def credit_per_update(base_ratio: float, settled_ratio: float) -> float:
    """Batches the rate limiter counts per settled update, so inserts per update grow by
    base/settled and the replay ratio becomes `settled_ratio`."""
    if not (base_ratio > 0 and settled_ratio > 0):
        raise ValueError(
            f"replay ratios must be > 0, got base {base_ratio} and settled {settled_ratio}"
        )
    if settled_ratio > base_ratio:  # a negative credit would stall actors, not settle
        raise ValueError(
            f"settling lowers the replay ratio: settled {settled_ratio} > base {base_ratio}"
        )
    return base_ratio / settled_ratio


def scale_learning_rates(algorithm: object, scale: float) -> None:
    """Multiply the learning rate of every optimizer `algorithm` owns by `scale` (DQN has
    one; the actor-critic algorithms have one per network, SAC one more for its alpha)."""
    optimizers = [v for v in vars(algorithm).values() if isinstance(v, torch.optim.Optimizer)]
    if not optimizers:
        raise ConfigError(f"{type(algorithm).__name__} has no optimizer whose rate to scale")
    for optimizer in optimizers:
        for group in optimizer.param_groups:
            group["lr"] *= scale


class Settling:
    """The learner's side of settling: names, certifies and enters; the publish gate once
    settled; what a checkpoint keeps of it. One per learner whose settings set settle_at."""

    def __init__(
        self,
        settings: LearnerSettings,
        batch_size: int,
        algo: Any,
        spec: Any,
        client: redis.Redis,
        keys: RedisKeys,
        publisher: WeightsPublisher,
        sampler: Sampler,
    ) -> None:
        s = self.s = settings
        assert s.settle_at is not None  # LearnerSettings also refuses parallel learners
        self.batch_size, self.algo, self.spec = batch_size, algo, spec
        self.publisher, self.sampler = publisher, sampler
        self.watch = SolvedWatch(client, keys, s.settle_at, s.settle_episodes)
        self.certifier = GreedyCheck(
            s.env_id, s.settle_certify_episodes, s.settle_at, s.seed + 55_555,
            precision=publisher.precision,
        )  # fmt: skip
        self.gate = self._publish_gate()
        self.champion: dict[str, np.ndarray] | None = None  # last weights the gate passed
        self.settled_at: int | None = None  # the update at which the run settled
        self.credit = 0  # rows credited to the rate limiter per update once settled
        if s.settle_rollback:
            publisher.keep_weights_bytes = ROLLBACK_KEEP_BYTES

    def _publish_gate(self) -> GreedyCheck | None:
        s = self.s
        if s.settle_validation_episodes == 0:
            return None
        bar = s.settle_at if s.settle_validation_bar is None else s.settle_validation_bar
        return GreedyCheck(s.env_id, s.settle_validation_episodes, bar, s.seed + 77_777)

    def poll(self, updates: int) -> None:
        """Read the evaluator's episodes; certify a candidate they name."""
        candidate = self.watch.poll()
        if candidate is not None:
            self.try_settle(candidate, updates)

    def try_settle(self, candidate: int, updates: int) -> None:
        """Certify `candidate` and settle on its weights, or reject it and learn on."""
        weights = self._candidate_weights(candidate)
        if weights is None:
            self._reject(candidate, "its weights are not held (published before a restart?)")
            return
        if not self.certifier.passes(weights, self.spec):
            mean = self.certifier.last_mean
            self._reject(candidate, f"{self.certifier.episodes}-episode mean {mean:.1f}")
            return
        if self.s.settle_rollback:
            self.algo.load_policy_weights(weights)
        self.enter(
            updates,
            f"version {candidate} certified: {self.certifier.episodes}-episode mean "
            f"{self.certifier.last_mean:.1f} >= {self.watch.threshold:g}",
        )

    def _candidate_weights(self, candidate: int) -> dict[str, np.ndarray] | None:
        """The weights settling would freeze: the candidate's own (rollback), else the
        ones in hand, which are what the evaluator measured only without rollback."""
        if not self.s.settle_rollback:
            return self.algo.policy_weights()
        if getattr(self.algo, "load_policy_weights", None) is None:
            return None
        return self.publisher.weights_of(candidate)

    def _reject(self, candidate: int, why: str) -> None:
        self.watch.reject(candidate)
        metrics.LEARNER_SETTLE_REJECTED.inc()
        log.info(
            "not settling on version %d (%s; certification needs a mean >= %g): "
            "learning goes on", candidate, why, self.watch.threshold,
        )  # fmt: skip

    def enter(self, updates: int, why: str, resumed: bool = False) -> None:
        """From now on train at the settled replay ratio, on the weights in hand
        (`try_settle` has loaded the certified version's)."""
        if self.settled_at is not None:
            return
        base = self.s.samples_per_insert
        # A run already at a low ratio (e.g. 1) keeps it: settling never raises the ratio.
        low = min(self.s.settle_samples_per_insert, base)
        self.settled_at = updates
        self.watch.solved = True  # stop watching
        # Extra transitions credited per update on top of the batch actually sampled.
        self.credit = round(self.batch_size * (credit_per_update(base, low) - 1.0))
        metrics.LEARNER_REPLAY_RATIO.set(low)
        # A resumed learner's weights and optimizer state are already the settled ones.
        if self.s.settle_lr_scale != 1.0 and not resumed:
            scale_learning_rates(self.algo, self.s.settle_lr_scale)
        if isinstance(self.sampler, TerminalShareSampler):
            self.sampler.share = self.s.settle_terminal_share
        log.info(
            "settled at update %d (%s): replay ratio %g -> %g samples per insert, "
            "learning rate x %g, terminal rows %g of each batch",
            self.settled_at, why, base, low, self.s.settle_lr_scale,
            getattr(self.sampler, "share", 0.0),
        )  # fmt: skip

    def admits(self, weights: dict[str, np.ndarray]) -> bool:
        """Once settled with a gate, only weights that pass validation are published
        (actors keep the champion otherwise)."""
        if self.gate is None or self.settled_at is None:
            return True
        if not self.gate.passes(weights, self.spec):
            metrics.LEARNER_GATED_VERSIONS.inc()
            return False
        self.champion = weights
        return True

    def status(self) -> dict[str, float]:
        """GetStatus counters: the publish gate's and certification's."""
        gate = self.gate.counters() if self.gate is not None else {}
        return gate | {
            "settle_certifications": float(self.certifier.checks),
            "settle_rejected_through": float(self.watch.rejected_through),
        }

    def close(self) -> None:
        for gate in (self.gate, self.certifier):
            if gate is not None:
                gate.close()

    # --- across a restart -------------------------------------------------------------
    def state(self) -> dict[str, Any]:
        """Checkpoint fields: the settled update, the rejected versions, and the weights
        of the candidates still in the evaluator's window, so a restarted learner can
        certify them instead of finding them gone."""
        if self.settled_at is not None:
            return {"settled_at": self.settled_at}
        held = {}
        for version in self.watch.held_versions():
            weights = self.publisher.weights_of(version)
            if weights is not None:
                held[str(version)] = {k: torch.from_numpy(v) for k, v in weights.items()}
        return {
            "settled_at": None,
            "settle_rejected_through": self.watch.rejected_through,
            "settle_held": held,
        }

    def restore(self, state: dict[str, Any]) -> None:
        """The other side of `state`."""
        if state.get("settled_at") is not None:
            self.enter(int(state["settled_at"]), "resumed settled", resumed=True)
            return
        self.watch.reject(int(state.get("settle_rejected_through", 0)))
        for version, tensors in state.get("settle_held", {}).items():
            weights = {k: t.numpy() for k, t in tensors.items()}
            self.publisher.hold(int(version), weights)
