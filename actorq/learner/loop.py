"""The learner's two threads: ingest (Redis -> local mirror) and train (mirror -> DQN).

Replay flows: actors XADD batches -> Redis stream -> `RedisReplayReader.poll` on the
ingest thread -> `ReplayStorage` (+ sampler) -> `Sampler.sample` on the training thread
-> `DQNLearner.update`. Sampling is local, so an update never waits on the network; the
rate limiter only holds it back when the replay ratio would exceed samples-per-insert.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field

import numpy as np
import redis

from actorq import metrics
from actorq.algos.dqn import DQNConfig
from actorq.algos.factory import config_prefix, is_continuous, make_algorithm
from actorq.config import ConfigError, LearnerSettings
from actorq.learner.checkpoint import Checkpointer
from actorq.learner.publisher import Snapshot, WeightsPublisher
from actorq.models import MLPSpec
from actorq.redis_keys import RedisKeys
from actorq.replay import RedisReplayReader, ReplayStorage, SampleToInsertRatio, UniformSampler

log = logging.getLogger(__name__)


@dataclass
class LearnerCounters:
    updates: int = 0
    sampled: int = 0
    wait_seconds: float = 0.0
    started: float = field(default_factory=time.perf_counter)
    last_loss: float = float("nan")
    checkpoints: int = 0


class Learner:
    """Owns the replay mirror, the DQN learner, the publisher and the checkpointer."""

    def __init__(
        self,
        settings: LearnerSettings,
        dqn_config: DQNConfig,
        spec: MLPSpec,
        client: redis.Redis,
        keys: RedisKeys,
        publisher: WeightsPublisher,
        stop: threading.Event,
    ) -> None:
        if dqn_config.learning_starts > settings.replay_capacity:
            raise ConfigError(
                f"{config_prefix(settings.algo)}LEARNING_STARTS={dqn_config.learning_starts} "
                "exceeds "
                f"ACTORQ_REPLAY_CAPACITY={settings.replay_capacity}: the learner would never start"
            )
        self.s, self.cfg, self.spec = settings, dqn_config, spec
        self.client, self.keys, self.stop = client, keys, stop
        self.publisher = publisher
        # `dqn` is whichever algorithm ACTORQ_ALGO names (the attribute keeps its old name).
        self.dqn = make_algorithm(
            settings.algo,
            spec.obs_dim,
            spec.num_outputs,
            spec.hidden,
            dqn_config,
            device=settings.device,
            seed=settings.seed,
        )
        act_dim = spec.num_outputs if is_continuous(settings.algo) else 0
        self.storage = ReplayStorage(settings.replay_capacity, spec.obs_dim, act_dim)
        self.sampler = UniformSampler()
        self.reader = RedisReplayReader(client, keys, self.storage, self.sampler)
        self.limiter = SampleToInsertRatio(
            samples_per_insert=settings.samples_per_insert,
            min_size_to_sample=dqn_config.learning_starts,
            error_buffer=max(4.0 * dqn_config.batch_size, 0.01 * settings.replay_capacity),
        )
        self.checkpointer = (
            Checkpointer(settings.checkpoint_dir) if settings.checkpoint_dir else None
        )
        self.rng = np.random.default_rng(settings.seed)
        self.counters = LearnerCounters()
        self.ingest_thread = threading.Thread(target=self._ingest, name="ingest", daemon=True)

    # --- start-up ---------------------------------------------------------------------
    def restore(self) -> None:
        """Resume from the checkpoint (if any) and rebuild the replay mirror from Redis."""
        if self.checkpointer is not None:
            state = self.checkpointer.load()
            if state is not None:
                self.dqn.load_state_dict(state["dqn"])
                self.counters.updates = int(state["updates"])
                self.counters.sampled = int(state["sampled"])
                self.publisher.version = max(self.publisher.version, int(state["version"]))
                log.info(
                    "resumed from %s at update %d, version %d",
                    self.checkpointer.path,
                    self.counters.updates,
                    int(state["version"]),
                )
        rebuilt = self.reader.rebuild()
        metrics.LEARNER_REPLAY_INSERTED.inc(rebuilt)
        log.info("replay mirror rebuilt from Redis: %d transitions", rebuilt)

    def start(self) -> None:
        """Start ingesting and publish the first version, so actors get a policy at once."""
        self.ingest_thread.start()
        backoff = 0.1
        while not self.stop.is_set() and not self.publisher.publish_now(self._snapshot()):
            log.warning("quantizer not ready; retrying the first publication in %.1fs", backoff)
            self.stop.wait(backoff)
            backoff = min(backoff * 2, 2.0)

    # --- threads ----------------------------------------------------------------------
    def _ingest(self) -> None:
        backoff = 0.05
        rejected = self.reader.rejected
        while not self.stop.is_set():
            try:
                added = self.reader.poll(block_ms=50)
                backoff = 0.05
            except (redis.ConnectionError, redis.TimeoutError) as exc:
                log.warning("redis unavailable while ingesting (%s); retrying", exc)
                self.stop.wait(backoff)
                backoff = min(backoff * 2, 2.0)
                continue
            if added:
                metrics.LEARNER_REPLAY_INSERTED.inc(added)
                metrics.LEARNER_REPLAY_SIZE.set(len(self.storage))
            if self.reader.rejected != rejected:  # malformed entries: skipped and counted
                metrics.LEARNER_REPLAY_REJECTED.inc(self.reader.rejected - rejected)
                rejected = self.reader.rejected

    def train(self) -> None:
        """Run updates until stopped or `max_updates` is reached."""
        while not self.stop.is_set():
            if self.s.max_updates and self.counters.updates >= self.s.max_updates:
                break
            if not self._wait_for_data():
                continue
            self._update()
            self._periodic()

    def _wait_for_data(self) -> bool:
        inserted = self.storage.total_added
        if self.limiter.can_sample(inserted, self.counters.sampled, self.cfg.batch_size):
            return True
        started = time.perf_counter()
        self.stop.wait(0.002)
        waited = time.perf_counter() - started
        self.counters.wait_seconds += waited
        metrics.LEARNER_WAIT_SECONDS.inc(waited)
        return False

    def _update(self) -> None:
        sample = self.sampler.sample(self.storage, self.cfg.batch_size, self.rng)
        batch = self.storage.get(sample.indices)
        result = self.dqn.update(batch, sample.weights)
        self.sampler.update_priorities(sample.indices, result.td_abs)
        self.counters.updates += 1
        self.counters.sampled += self.cfg.batch_size
        self.counters.last_loss = result.loss
        metrics.LEARNER_UPDATES.inc()
        metrics.LEARNER_LOSS.set(result.loss)
        metrics.LEARNER_Q_MEAN.set(result.q_mean)
        metrics.LEARNER_REPLAY_SAMPLED.inc(self.cfg.batch_size)
        lag = self.publisher.version - float(np.mean(batch["policy_version"]))
        metrics.LEARNER_SAMPLE_LAG.set(lag)

    def _periodic(self) -> None:
        updates = self.counters.updates
        if updates % self.s.publish_every == 0:
            self.publisher.submit(self._snapshot())
        if updates % 10 == 0:
            self._report_progress()
        if self.checkpointer is not None and updates % self.s.checkpoint_every == 0:
            self.checkpoint()

    def _report_progress(self) -> None:
        """Tell actors how far sampling got (their side of the rate limiter)."""
        try:
            pipe = self.client.pipeline(transaction=False)
            pipe.set(self.keys.learner_updates, self.counters.updates)
            pipe.set(self.keys.learner_sampled, self.counters.sampled)
            pipe.execute()
        except (redis.ConnectionError, redis.TimeoutError) as exc:
            log.warning("could not report progress to redis: %s", exc)

    def _snapshot(self) -> Snapshot:
        return Snapshot(learner_step=self.counters.updates, weights=self.dqn.policy_weights())

    # --- shutdown ---------------------------------------------------------------------
    def checkpoint(self) -> None:
        if self.checkpointer is None:
            return
        state = {
            "dqn": self.dqn.state_dict(),
            "updates": self.counters.updates,
            "sampled": self.counters.sampled,
            "version": self.publisher.version,
        }
        meta = {
            "updates": self.counters.updates,
            "version": self.publisher.version,
            "env_id": self.s.env_id,
            "algo": self.s.algo,
            "hidden": list(self.spec.hidden),
            "precision": self.s.precision,
        }
        path = self.checkpointer.save(state, meta)
        self.counters.checkpoints += 1
        metrics.LEARNER_CHECKPOINTS.inc()
        log.info("checkpoint at update %d -> %s", self.counters.updates, path)

    def finish(self) -> None:
        """Publish the final weights, write the final checkpoint, stop ingesting."""
        self.stop.set()
        self.ingest_thread.join(timeout=5.0)
        self.publisher.close()
        self.publisher.publish_now(self._snapshot(), timeout=10.0)
        self._report_progress()
        self.checkpoint()

    def wait_fraction(self) -> float:
        elapsed = time.perf_counter() - self.counters.started
        return self.counters.wait_seconds / elapsed if elapsed > 0 else 0.0
