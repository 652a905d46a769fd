"""The learner's two threads: ingest (Redis -> local mirror) and train (mirror -> DQN).

Replay flows: actors XADD batches -> Redis stream -> `RedisReplayReader.poll` on the
ingest thread -> `ReplayStorage` (+ sampler) -> `Sampler.sample` on the training thread
-> `DQNLearner.update`. Sampling is local, so an update never waits on the network; the
rate limiter only holds it back when the replay ratio would exceed samples-per-insert.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time

import numpy as np
import redis

from actorq import metrics
from actorq.algos.capture import captured_runner
from actorq.algos.dqn import DQNConfig, DQNLearner
from actorq.algos.factory import config_prefix, is_continuous, make_algorithm
from actorq.config import ConfigError, LearnerSettings
from actorq.learner.behaviour import BehaviourMonitor, nstep_correction
from actorq.learner.captured import LaggedSubmit
from actorq.learner.checkpoint import Checkpointer, checkpoint_meta
from actorq.learner.counters import LearnerCounters
from actorq.learner.distributed import (
    DistConfig,
    GradientAverager,
    StepAgreement,
    broadcast_ints,
    broadcast_tensors,
    tensors_in,
)
from actorq.learner.publisher import Snapshot, WeightsPublisher
from actorq.learner.rlx2 import RLx2Learning
from actorq.learner.sampling import make_sampler
from actorq.learner.settling import ROLLBACK_KEEP_BYTES, SettleSteps
from actorq.models import MLPSpec
from actorq.models.cnn import CNNSpec
from actorq.redis_keys import RedisKeys
from actorq.replay import (
    RedisReplayReader,
    ReplayStorage,
    SampleToInsertRatio,
)
from actorq.sparse.config import SparseTrainingConfig
from actorq.v1.policy_pb2 import PRECISION_FP32 as FP32

log = logging.getLogger(__name__)

__all__ = ["Learner"]


class Learner(SettleSteps):
    """Owns the replay mirror, the DQN learner, the publisher and the checkpointer.

    With data-parallel learners (`dist.world_size > 1`) there is one `Learner` per rank;
    only rank 0 has a publisher and a checkpointer (see actorq.learner.distributed).
    """

    def __init__(
        self,
        settings: LearnerSettings,
        dqn_config: DQNConfig,
        spec: MLPSpec | CNNSpec,
        client: redis.Redis,
        keys: RedisKeys,
        publisher: WeightsPublisher | None,
        stop: threading.Event,
        dist: DistConfig | None = None,
        rlx2: SparseTrainingConfig | None = None,
    ) -> None:
        if dqn_config.learning_starts > settings.replay_capacity:
            raise ConfigError(
                f"{config_prefix(settings.algo)}LEARNING_STARTS={dqn_config.learning_starts} "
                "exceeds "
                f"ACTORQ_REPLAY_CAPACITY={settings.replay_capacity}: the learner would never start"
            )
        self.s, self.cfg, self.spec = settings, dqn_config, spec
        self.client, self.keys, self.stop = client, keys, stop
        self.dist = dist or DistConfig()
        if publisher is None and self.dist.is_primary:
            raise ValueError("the primary learner (rank 0) needs a publisher")
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
            spec=spec,
        )
        if self.dqn.policy_spec != spec:  # what is published must be what the algorithm fills
            raise ConfigError(
                f"{settings.algo} fills policy {self.dqn.policy_spec}, publisher declares {spec}"
            )
        act_dim = spec.num_outputs if is_continuous(settings.algo) else 0
        rlx2 = rlx2 or SparseTrainingConfig()
        self.storage = ReplayStorage(
            settings.replay_capacity,
            spec.obs_dim,
            act_dim,
            link_trajectories=RLx2Learning.links_trajectories(rlx2),
            obs_shape=spec.obs_shape if isinstance(spec, CNNSpec) else (),  # uint8 pixels
        )
        log.info(
            "replay mirror: %d rows, %s observations, %.1f MiB preallocated",
            settings.replay_capacity, "uint8 pixel" if isinstance(spec, CNNSpec) else "float32",
            self.storage.nbytes / 2**20,
        )  # fmt: skip
        # RLx2 (sparse networks, delayed n-step, dynamic replay; FLOPs for every run).
        self.rlx2 = (
            RLx2Learning(rlx2, self.dqn, settings, self.storage) if act_dim or rlx2.active else None
        )
        self.sampler = make_sampler(settings)
        # Behaviour vs learner gap on sampled rows; n-step importance weights when asked.
        continuous = bool(act_dim)
        self.behaviour = BehaviourMonitor(
            self.dqn, continuous, settings.noise_sigma, settings.gap_every
        )
        self.correction = nstep_correction(
            settings.algo, dqn_config, self.dqn, rlx2.delayed_nstep, settings.noise_sigma
        )
        self.reader = RedisReplayReader(
            client, keys, self.storage, self.sampler, shard=self.dist.shard()
        )
        self._agreement = StepAgreement(settings.device) if self.dist.enabled else None
        if self.dist.enabled:
            if not isinstance(self.dqn, DQNLearner):
                raise ConfigError(
                    f"parallel learners (world_size {self.dist.world_size}) support algo dqn "
                    f"only so far, got {settings.algo!r}"
                )
            self.dqn.grad_sync = GradientAverager(self.dist.world_size)
        # The limiter counts the whole learner group: it samples world_size batches per step.
        self.group_batch = dqn_config.batch_size * self.dist.world_size
        self.limiter = SampleToInsertRatio(
            samples_per_insert=settings.samples_per_insert,
            min_size_to_sample=dqn_config.learning_starts,
            error_buffer=max(4.0 * self.group_batch, 0.01 * settings.replay_capacity),
        )
        self.checkpointer = (
            Checkpointer(settings.checkpoint_dir)
            if settings.checkpoint_dir and self.dist.is_primary
            else None
        )
        self.rng = np.random.default_rng(settings.seed)
        self.counters = LearnerCounters()
        self.settle = self._solved_watch()
        if self.settle is not None and publisher is not None and settings.settle_rollback:
            publisher.keep_weights_bytes = ROLLBACK_KEEP_BYTES
        self.settled_at: int | None = None  # the update at which the run settled
        self.certifier = self._certifier(publisher.precision if publisher is not None else FP32)
        self._submit_captured = LaggedSubmit()  # a captured path: priorities one update late
        self.gate = self._publish_gate()
        self.champion: dict[str, np.ndarray] | None = None  # last weights the gate passed
        metrics.LEARNER_REPLAY_RATIO.set(settings.samples_per_insert)
        self.ingest_thread = threading.Thread(target=self._ingest, name="ingest", daemon=True)
        self._reported_updates, self._reported_at = -1, 0.0  # last progress report (`_idle`)

    # --- start-up ---------------------------------------------------------------------
    def restore(self) -> None:
        """Resume from the checkpoint (if any) and rebuild the replay mirror from Redis."""
        state = None
        if self.checkpointer is not None:
            state = self.checkpointer.load()
            if state is not None:
                self.dqn.load_state_dict(state["dqn"])
                if self.rlx2 is not None and "rlx2" in state:
                    self.rlx2.load_sparse_state(state["rlx2"])
                self.counters.updates = int(state["updates"])
                self.counters.sampled = int(state["sampled"])
                self.counters.credited = int(state.get("credited", 0))
                self.restore_settle_state(state)
                assert self.publisher is not None  # the checkpointer lives on rank 0 only
                self.publisher.version = max(self.publisher.version, int(state["version"]))
                log.info(
                    "resumed from %s at update %d, version %d",
                    self.checkpointer.path,
                    self.counters.updates,
                    int(state["version"]),
                )
        if self.dist.enabled:
            self._sync_from_primary()
        rebuilt = self.reader.rebuild()
        metrics.LEARNER_REPLAY_INSERTED.inc(rebuilt)
        log.info("replay mirror rebuilt from Redis: %d transitions", rebuilt)
        if state is not None and self.rlx2 is not None and "rlx2" in state:
            self.rlx2.restore_capacity(state["rlx2"])  # the rebuilt mirror keeps its capacity

    def _sync_from_primary(self) -> None:
        """Every rank starts from rank 0's weights, optimizer state and counters."""
        self.dqn.prime_optimizer()
        broadcast_tensors(list(tensors_in(self.dqn.state_dict())))
        updates, sampled, num_updates = broadcast_ints(
            [self.counters.updates, self.counters.sampled, self.dqn.num_updates],
            device=self.s.device,
        )
        self.counters.updates, self.counters.sampled = updates, sampled
        self.dqn.load_counters(num_updates)
        log.info("rank %d synced with rank 0 at update %d", self.dist.rank, updates)

    @property
    def version(self) -> int:
        """Newest published policy version (rank 0); 0 on other ranks, which never publish."""
        return self.publisher.version if self.publisher is not None else 0

    def start(self) -> None:
        """Start ingesting and publish the first version, so actors get a policy at once."""
        self.ingest_thread.start()
        if self.publisher is None:
            return
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
        """Run updates until stopped or `max_updates` is reached.

        Parallel learners agree before every update, so all ranks update, wait or stop
        together (each update holds a gradient all-reduce every rank must join).
        """
        while True:
            done = self.stop.is_set() or self._budget_spent()
            has_data = len(self.storage) >= self.cfg.batch_size
            all_have_data, stopping, inserted = self._agree(
                has_data, done, self.storage.total_added
            )
            if stopping:
                return
            if not (all_have_data and self._can_sample(inserted)):
                self._idle()
                continue
            self._update()
            self._periodic()

    def _budget_spent(self) -> bool:
        return bool(self.s.max_updates) and self.counters.updates >= self.s.max_updates

    def _can_sample(self, group_inserted: int) -> bool:
        return self.limiter.can_sample(group_inserted, self.group_sampled, self.group_batch)

    @property
    def group_sampled(self) -> int:
        """Transitions the rate limiter counts as sampled by the whole learner group (every
        rank samples alike; settled updates count extra, see LearnerCounters.credited)."""
        return (self.counters.sampled + self.counters.credited) * self.dist.world_size

    def _agree(self, has_data: bool, done: bool, inserted: int) -> tuple[bool, bool, int]:
        if self._agreement is None:
            return has_data, done, inserted
        return self._agreement(has_data, done, inserted)

    def _idle(self) -> None:
        """Wait for replay data; first report a stale sampled count (actors wait on it),
        or again each second while the last report failed (Redis away)."""
        stale = self._reported_updates != self.counters.updates
        if self.publisher is not None and (stale or time.monotonic() > self._reported_at + 1):
            self._report_progress()
        started = time.perf_counter()
        self.stop.wait(0.002)
        waited = time.perf_counter() - started
        self.counters.wait_seconds += waited
        metrics.LEARNER_WAIT_SECONDS.inc(waited)

    def _update(self) -> None:
        started = time.perf_counter()
        sample = self.sampler.sample(self.storage, self.cfg.batch_size, self.rng)
        trace = self.correction is not None
        if self.rlx2 is not None:
            batch = self.rlx2.gather(self.storage, sample.indices, trace)
        else:
            batch = self.storage.get(sample.indices)
        self.counters.sample_seconds += time.perf_counter() - started
        weights = sample.weights
        if self.correction is not None:  # truncated IS of the n-step return's actions
            weights = weights * self.correction.weights(batch)
        newest = self.publisher.version if self.publisher is not None else None
        self.behaviour.maybe_measure(batch, newest)  # before the update: the actors' gap
        runner = captured_runner(self.dqn)
        if runner is not None and self.rlx2 is None:
            reported = self._submit_captured(runner, self.sampler, sample, batch, weights)
            if reported is not None:
                self._report_loss(*reported)
        else:
            result = self.dqn.update(batch, weights)
            if self.rlx2 is not None:
                self.rlx2.after_update()
            self.sampler.update_priorities(sample.indices, result.td_abs, sample.generations)
            self._report_loss(result.loss, result.q_mean)
        self.counters.updates += 1
        self.counters.sampled += self.cfg.batch_size
        if self.settled_at is not None:
            self.counters.credited += self._credit
        metrics.LEARNER_UPDATES.inc()
        metrics.LEARNER_REPLAY_SAMPLED.inc(self.cfg.batch_size)
        if self.publisher is not None:
            lag = self.publisher.version - float(np.mean(batch["policy_version"]))
            metrics.LEARNER_SAMPLE_LAG.set(lag)

    def _report_loss(self, loss: float, q_mean: float) -> None:
        self.counters.last_loss = loss
        metrics.LEARNER_LOSS.set(loss)
        metrics.LEARNER_Q_MEAN.set(q_mean)

    def _periodic(self) -> None:
        if self.publisher is None:  # ranks > 0 only train; rank 0 speaks for the group
            return
        updates = self.counters.updates
        candidate = self.settle.poll() if self.settle is not None else None
        if candidate is not None:
            self._try_settle(candidate)
        if updates % self.s.publish_every == 0:
            self._publish()
        if updates % 10 == 0:
            self._report_progress()
        if self.checkpointer is not None and updates % self.s.checkpoint_every == 0:
            self.checkpoint()

    def _report_progress(self) -> None:
        """Tell actors how far sampling got (their side of the rate limiter)."""
        try:
            pipe = self.client.pipeline(transaction=False)
            pipe.set(self.keys.learner_updates, self.counters.updates)
            pipe.set(self.keys.learner_sampled, self.group_sampled)
            self._reported_updates = self.counters.updates
            pipe.execute()
            self._reported_at = time.monotonic()  # only once Redis has it
        except (redis.ConnectionError, redis.TimeoutError) as exc:
            log.warning("could not report progress to redis: %s", exc)

    def _snapshot(self) -> Snapshot:
        return Snapshot(learner_step=self.counters.updates, weights=self.dqn.policy_weights())

    def _publish(self) -> None:
        """Submit the current weights; once settled with a gate, only those that pass
        validation (actors keep the champion otherwise)."""
        snapshot = self._snapshot()
        if self.gate is not None and self.settled_at is not None:
            if not self.gate.passes(snapshot.weights, self.spec):
                metrics.LEARNER_GATED_VERSIONS.inc()
                return
            self.champion = snapshot.weights
        self.publisher.submit(snapshot)

    # --- shutdown ---------------------------------------------------------------------
    def checkpoint(self) -> None:
        if self.checkpointer is None or self.publisher is None:
            return
        state = {
            "dqn": self.dqn.state_dict(),
            "updates": self.counters.updates,
            "sampled": self.counters.sampled,
            "credited": self.counters.credited,
            **self.settle_state(),
            "version": self.publisher.version,
            **({"rlx2": self.rlx2.state_dict()} if self.rlx2 is not None else {}),
        }
        meta = checkpoint_meta(
            self.s, self.spec, self.cfg, self.counters.updates, self.publisher.version
        )
        if self.rlx2 is not None:
            meta["rlx2"] = self.rlx2.status()
        path = self.checkpointer.save(state, meta)
        self.counters.checkpoints += 1
        metrics.LEARNER_CHECKPOINTS.inc()
        log.info("checkpoint at update %d -> %s", self.counters.updates, path)

    def finish(self) -> None:
        """Stop ingesting (after reading what Redis already holds), publish the final
        weights, write the final checkpoint."""
        self.stop.set()
        self.ingest_thread.join(timeout=5.0)
        if not self.ingest_thread.is_alive():
            self._drain()
        with contextlib.suppress(redis.ConnectionError, redis.TimeoutError):  # for a check
            # This rank's ingested count: the run's lost-transitions check (launch.final).
            self.client.hset(self.keys.learner_ingested, str(self.dist.rank), self.reader.added)
        if self.publisher is None:
            return
        self.publisher.close()
        final = self._snapshot()
        if self.champion is not None:  # a gated run ends on the last policy that passed
            final = Snapshot(learner_step=final.learner_step, weights=self.champion)
        self.publisher.publish_now(final, timeout=10.0)
        for gate in (self.gate, self.certifier):
            if gate is not None:
                gate.close()
        self._report_progress()
        self.checkpoint()

    def _drain(self, timeout: float = 5.0, quiet: float = 1.0) -> None:
        """Ingest what the stream still holds, and what actors stopping beside the learner
        push until the stream has been quiet for `quiet` seconds (`compose stop` stops
        them in parallel), so a clean stop leaves the mirror (and the final checkpoint's
        counts) equal to what Redis acknowledged to the actors."""
        deadline = time.monotonic() + timeout
        quiet_until = time.monotonic() + quiet
        try:
            while time.monotonic() < min(deadline, quiet_until):
                added = self.reader.poll(block_ms=100)
                if added:
                    quiet_until = time.monotonic() + quiet
                    metrics.LEARNER_REPLAY_INSERTED.inc(added)
        except (redis.ConnectionError, redis.TimeoutError) as exc:
            log.warning("redis unavailable while draining the replay stream: %s", exc)

    def wait_fraction(self) -> float:
        """Share of wall time the learner waited for replay data (rate limiter or empty)."""
        return self._share_of_wall(self.counters.wait_seconds)

    def _share_of_wall(self, seconds: float) -> float:
        elapsed = time.perf_counter() - self.counters.started
        return seconds / elapsed if elapsed > 0 else 0.0

    def behaviour_status(self) -> dict[str, float]:
        """The gap and n-step weights as GetStatus counters (behaviour_*)."""
        correction = self.correction.status() if self.correction is not None else {}
        return self.behaviour.status() | correction

    def sample_fraction(self) -> float:
        """Share of wall time spent sampling rows and copying them out of the mirror."""
        return self._share_of_wall(self.counters.sample_seconds)
