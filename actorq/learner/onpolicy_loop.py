"""The on-policy learner's loop: trajectory segments from Redis -> PPO / APPO / A2C updates.

One thread: read segments (XREAD, in order), drop those whose policy is more than
`max_policy_lag` versions old (counted), stack `segments_per_update` of them into one
time-major batch, update, publish the policy network. Publication is asynchronous
(newest snapshot wins, actorq.learner.publisher), so actors keep stepping while the
quantizer encodes; the lag this causes is measured per batch and corrected by the
importance ratios (actorq.algos.ppo).
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field

import numpy as np
import redis

from actorq import metrics
from actorq.algos.factory import make_algorithm
from actorq.algos.ppo import OnPolicyLearner, PPOConfig
from actorq.config import LearnerSettings
from actorq.learner.checkpoint import Checkpointer, checkpoint_meta
from actorq.learner.counters import LearnerCounters
from actorq.learner.publisher import Snapshot, WeightsPublisher
from actorq.models import MLPSpec
from actorq.onpolicy import metrics as op_metrics
from actorq.onpolicy.segments import TrajectorySegment, stack_segments
from actorq.onpolicy.stream import SegmentReader
from actorq.redis_keys import RedisKeys

log = logging.getLogger(__name__)


@dataclass
class OnPolicyCounters(LearnerCounters):
    segments_trained: int = 0
    segments_dropped: int = 0
    transitions_trained: int = 0
    stats: dict[str, float] = field(default_factory=dict)


def split_stale(
    segments: list[TrajectorySegment], version: int, max_lag: int
) -> tuple[list[TrajectorySegment], list[TrajectorySegment]]:
    """(fresh, stale): stale segments' policy is more than `max_lag` versions behind."""
    fresh = [s for s in segments if version - s.policy_version <= max_lag]
    stale = [s for s in segments if version - s.policy_version > max_lag]
    return fresh, stale


class OnPolicyTrainer:
    """Owns the on-policy learner, the segment reader, the publisher and the checkpointer."""

    def __init__(
        self,
        settings: LearnerSettings,
        config: PPOConfig,
        spec: MLPSpec,
        client: redis.Redis,
        keys: RedisKeys,
        publisher: WeightsPublisher,
        stop: threading.Event,
    ) -> None:
        self.s, self.cfg, self.spec = settings, config, spec
        self.client, self.keys, self.stop = client, keys, stop
        self.publisher = publisher
        algo = make_algorithm(
            settings.algo, spec.obs_dim, spec.num_outputs, spec.hidden, config,
            device=settings.device, seed=settings.seed, spec=spec,
        )  # fmt: skip
        assert isinstance(algo, OnPolicyLearner)
        self.algo = algo
        self.reader = SegmentReader(client, keys)
        self.pending: list[TrajectorySegment] = []
        self.checkpointer = (
            Checkpointer(settings.checkpoint_dir) if settings.checkpoint_dir else None
        )
        self.counters = OnPolicyCounters()

    @property
    def version(self) -> int:
        return self.publisher.version

    def restore(self) -> None:
        if self.checkpointer is not None:
            state = self.checkpointer.load()
            if state is not None:
                self.algo.load_state_dict(state["dqn"])
                self.counters.updates = int(state["updates"])
                self.publisher.version = max(self.publisher.version, int(state["version"]))
                log.info(
                    "resumed from %s at update %d", self.checkpointer.path, self.counters.updates
                )
        self.reader.start_from_now()  # older segments are too stale to train on

    def start(self) -> None:
        self.publisher.publish_first(self._snapshot, self.stop)

    def train(self) -> None:
        while not self.stop.is_set() and not self._budget_spent():
            need = self.cfg.segments_per_update - len(self.pending)
            started = time.perf_counter()
            try:
                segments = self.reader.read(count=need, block_ms=50)
                self.reader.report()
            except (redis.ConnectionError, redis.TimeoutError) as exc:
                log.warning("redis unavailable while reading segments (%s); retrying", exc)
                self.stop.wait(0.5)
                continue
            self.counters.wait_seconds += time.perf_counter() - started
            self._accept(segments)
            if len(self.pending) >= self.cfg.segments_per_update:
                self._update()

    def _budget_spent(self) -> bool:
        return bool(self.s.max_updates) and self.counters.updates >= self.s.max_updates

    def _accept(self, segments: list[TrajectorySegment]) -> None:
        """Keep segments within the lag limit; count and drop the rest."""
        fresh, stale = split_stale(segments, self.version, self.cfg.max_policy_lag)
        self.pending.extend(fresh)
        if stale:
            self.counters.segments_dropped += len(stale)
            op_metrics.SEGMENTS_DROPPED.inc(len(stale))

    def _update(self) -> None:
        batch_segments = self.pending[: self.cfg.segments_per_update]
        del self.pending[: self.cfg.segments_per_update]
        lags = [self.version - s.policy_version for s in batch_segments]
        result = self.algo.update(stack_segments(batch_segments))
        c = self.counters
        c.updates += 1
        c.segments_trained += len(batch_segments)
        c.transitions_trained += sum(s.steps for s in batch_segments)
        c.last_loss = result.loss
        c.stats = {
            **result.ratios.as_dict(),
            "policy_lag_mean": float(np.mean(lags)),
            "policy_lag_max": float(np.max(lags)),
            "entropy": result.entropy,
            "value_loss": result.value_loss,
        }
        self._export(result, lags, len(batch_segments))
        self._report_updates()
        if c.updates % self.s.publish_every == 0:
            self.publisher.submit(self._snapshot())
        if self.checkpointer is not None and c.updates % self.s.checkpoint_every == 0:
            self.checkpoint()

    def _report_updates(self) -> None:
        """The update count in Redis, where `actorq run`'s final records read it
        (actorq.launch.final) as they do the off-policy learner's."""
        try:
            self.client.set(self.keys.learner_updates, self.counters.updates)
        except (redis.ConnectionError, redis.TimeoutError) as exc:
            log.warning("could not report the update count to redis: %s", exc)

    def _export(self, result, lags: list[int], segments: int) -> None:
        metrics.LEARNER_UPDATES.inc()
        metrics.LEARNER_LOSS.set(result.loss)
        metrics.LEARNER_SAMPLE_LAG.set(float(np.mean(lags)))
        r = result.ratios
        op_metrics.RATIO_MEAN.set(r.mean)
        op_metrics.RATIO_MAX.set(r.max)
        op_metrics.RATIO_ABS_DEV.set(r.mean_abs_deviation)
        op_metrics.CLIPPED_FRACTION.set(r.clipped_fraction)
        op_metrics.ESS.set(r.ess)
        op_metrics.POLICY_LAG.set(float(np.mean(lags)))
        op_metrics.SEGMENTS_TRAINED.inc(segments)
        op_metrics.ENTROPY.set(result.entropy)

    def _snapshot(self) -> Snapshot:
        return Snapshot(learner_step=self.counters.updates, weights=self.algo.policy_weights())

    def status_counters(self) -> dict[str, float]:
        c = self.counters
        return {
            "updates": c.updates,
            "loss": c.last_loss,
            "replay_inserted": c.transitions_trained,
            "wait_fraction": c.wait_fraction(),
            "checkpoints": c.checkpoints,
            "publish_failures": self.publisher.failures,
            "blob_bytes": self.publisher.blob_bytes,
            "segments_trained": c.segments_trained,
            "segments_dropped": c.segments_dropped,
            "segments_rejected": self.reader.rejected,
            "segment_bytes_per_transition": self.reader.bytes_read
            / max(self.reader.transitions_read, 1),
            **{f"onpolicy_{k}": v for k, v in c.stats.items()},
        }

    def checkpoint(self) -> None:
        if self.checkpointer is None:
            return
        state = {
            "dqn": self.algo.state_dict(),  # the key `actorq ptq` and restore read
            "updates": self.counters.updates,
            "sampled": self.counters.transitions_trained,
            "version": self.publisher.version,
        }
        meta = checkpoint_meta(
            self.s, self.spec, self.cfg, self.counters.updates, self.publisher.version
        )
        path = self.checkpointer.save(state, meta)
        self.counters.checkpoints += 1
        metrics.LEARNER_CHECKPOINTS.inc()
        log.info("checkpoint at update %d -> %s", self.counters.updates, path)

    def finish(self) -> None:
        self.stop.set()
        self.publisher.close()
        self.publisher.publish_now(self._snapshot(), timeout=10.0)
        self._report_updates()
        self.checkpoint()
