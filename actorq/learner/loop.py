"""The off-policy learner: ingest (Redis -> local mirror, actorq.learner.ingest) on one
thread, train (mirror -> the algorithm's update) on another.

Replay flows: actors XADD batches -> Redis stream -> `RedisReplayReader.poll` on the
ingest thread -> `ReplayStorage` (+ sampler) -> `Sampler.sample` on the training thread
-> the algorithm's `update` (or its captured runner). Beside it: `Settling`
(actorq.learner.settle), `ProgressReport` (the sampled count actors wait on), the
publisher and the checkpointer. Sampling is local, so an update never waits on the network; the
rate limiter only holds it back when the replay ratio would exceed samples-per-insert.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from typing import Any

import numpy as np
import redis

from actorq import metrics
from actorq.algos.dqn import DQNConfig
from actorq.algos.factory import config_prefix, is_continuous, make_algorithm
from actorq.config import ConfigError, LearnerSettings
from actorq.learner.behaviour import BehaviourMonitor, nstep_correction
from actorq.learner.checkpoint import Checkpointer
from actorq.learner.counters import LearnerCounters
from actorq.learner.distributed import (
    DistConfig,
    GradientAverager,
    StepAgreement,
)
from actorq.learner.ingest_process import make_ingest, make_shared_replay
from actorq.learner.progress_report import ProgressReport
from actorq.learner.publisher import PublishPacer, Snapshot, WeightsPublisher
from actorq.learner.resume import resume, save_checkpoint, sync_from_primary
from actorq.learner.rlx2 import RLx2Learning
from actorq.learner.sampling import make_sampler
from actorq.learner.settle import Settling
from actorq.learner.update_step import HOST_UPDATES_PER_CALL, UpdateStep
from actorq.models import MLPSpec
from actorq.models.cnn import CNNSpec
from actorq.redis_keys import RedisKeys
from actorq.replay import (
    RedisReplayReader,
    ReplayStorage,
    SampleToInsertRatio,
)
from actorq.replay.shared import SharedReplay
from actorq.sparse.config import SparseTrainingConfig

log = logging.getLogger(__name__)

__all__ = ["Learner"]


class Learner:
    """Owns the replay mirror, the algorithm, the publisher and the checkpointer.

    With data-parallel learners (`dist.world_size > 1`) there is one `Learner` per rank;
    only rank 0 has a publisher and a checkpointer (see actorq.learner.distributed).
    """

    def __init__(
        self,
        settings: LearnerSettings,
        algo_config: DQNConfig,
        spec: MLPSpec | CNNSpec,
        client: redis.Redis,
        keys: RedisKeys,
        publisher: WeightsPublisher | None,
        stop: threading.Event,
        dist: DistConfig | None = None,
        rlx2: SparseTrainingConfig | None = None,
    ) -> None:
        self.s, self.cfg, self.spec = settings, algo_config, spec
        self.client, self.keys, self.stop = client, keys, stop
        self.dist = dist or DistConfig()
        if publisher is None and self.dist.is_primary:
            raise ValueError("the primary learner (rank 0) needs a publisher")
        self.publisher = publisher
        self.publish_pace = PublishPacer(settings.publish_min_seconds)
        self.algo = _algorithm(settings, algo_config, spec)  # whichever ACTORQ_ALGO names
        self.storage, self.rlx2, shared = _replay_mirror(
            settings, algo_config, spec, self.algo, rlx2
        )
        self.sampler = make_sampler(settings)
        # Behaviour vs learner gap on sampled rows; n-step importance weights when asked.
        self.behaviour = BehaviourMonitor(
            self.algo,
            is_continuous(settings.algo),
            settings.noise_sigma,
            settings.gap_every,
            settings.gap_min_seconds,
        )
        self.correction = nstep_correction(
            settings.algo, algo_config, self.algo, (rlx2 or SparseTrainingConfig()).delayed_nstep,
            settings.noise_sigma,
        )  # fmt: skip
        self.reader = RedisReplayReader(
            client, keys, self.storage, self.sampler, shard=self.dist.shard()
        )
        self.ingest = make_ingest(self.reader, shared, stop)
        self._agreement = StepAgreement(settings.device) if self.dist.enabled else None
        if self.dist.enabled:
            _check_parallel(self.algo, self.rlx2, self.dist.world_size)
            self.algo.grad_sync = GradientAverager(self.dist.world_size)
        # The limiter counts the whole learner group: it samples world_size batches per step.
        self.group_batch = algo_config.batch_size * self.dist.world_size
        self.limiter = SampleToInsertRatio(
            samples_per_insert=settings.samples_per_insert,
            min_size_to_sample=algo_config.learning_starts,
            error_buffer=max(4.0 * self.group_batch, 0.01 * settings.replay_capacity),
        )
        primary_dir = settings.checkpoint_dir if self.dist.is_primary else ""
        self.checkpointer = Checkpointer(primary_dir) if primary_dir else None
        self.counters = LearnerCounters()
        self.settling = (
            Settling(settings, algo_config.batch_size, self.algo, spec, client, keys,
                     publisher, self.sampler)
            if settings.settle_at is not None and publisher is not None
            else None
        )  # fmt: skip
        self.report = ProgressReport(client, keys, lambda: self.group_sampled)
        self.update_step = UpdateStep(
            self.algo, self.storage, self.sampler, algo_config.batch_size, self.counters,
            np.random.default_rng(settings.seed), self.rlx2, self.correction, self.behaviour,
        )  # fmt: skip
        metrics.LEARNER_REPLAY_RATIO.set(settings.samples_per_insert)

    # --- start-up ---------------------------------------------------------------------
    def restore(self) -> None:
        """Resume from the checkpoint (if any) and rebuild the replay mirror from Redis."""
        state = self.checkpointer.load() if self.checkpointer is not None else None
        if state is not None:
            resume(self, state)
        if self.dist.enabled:
            sync_from_primary(self)
        rebuilt = self.reader.rebuild()
        metrics.LEARNER_REPLAY_INSERTED.inc(rebuilt)
        log.info("replay mirror rebuilt from Redis: %d transitions", rebuilt)
        if state is not None and self.rlx2 is not None and "rlx2" in state:
            self.rlx2.restore_capacity(state["rlx2"])  # the rebuilt mirror keeps its capacity

    @property
    def version(self) -> int:
        """Newest published policy version (rank 0); 0 on other ranks, which never publish."""
        return self.publisher.version if self.publisher is not None else 0

    def start(self) -> None:
        """Start ingesting and publish the first version, so actors get a policy at once."""
        self.ingest.start()
        if self.publisher is None:
            return
        self.publisher.publish_first(self._snapshot, self.stop)

    # --- training ---------------------------------------------------------------------
    def train(self) -> None:
        """Run updates until stopped or `max_updates` is reached.

        Parallel learners agree before every update, so all ranks update, wait or stop
        together (each update holds a gradient all-reduce every rank must join).
        """
        while True:
            self.ingest.sync()
            done = self.stop.is_set() or self._budget_spent()
            has_data = len(self.storage) >= self.cfg.batch_size
            all_have_data, stopping, inserted = self._agree(
                has_data, done, self.storage.total_added
            )
            if stopping:
                return
            allowed = self._updates_allowed(inserted) if all_have_data else 0
            if allowed == 0:
                self._idle()
                continue
            self._update(allowed)
            self._periodic()

    def _budget_spent(self) -> bool:
        return bool(self.s.max_updates) and self.counters.updates >= self.s.max_updates

    def _updates_allowed(self, group_inserted: int) -> int:
        """Updates the next call may run: a device feed's k or none; on the host up to
        HOST_UPDATES_PER_CALL as the rate limiter admits them one by one (one at a time
        with parallel learners: each update is an all-reduce every rank must join)."""
        step, sampled = self.update_step, self.group_sampled
        if step.feed is not None or self.dist.world_size > 1:
            batches = self.group_batch * step.k
            return step.k if self.limiter.can_sample(group_inserted, sampled, batches) else 0
        most = min(HOST_UPDATES_PER_CALL, self._until_due())
        cost = self.group_batch + self._credit()  # what one update counts
        return self.limiter.batches_allowed(group_inserted, sampled, cost, most)

    def _until_due(self) -> int:
        """Updates until the next one that publishes, checkpoints or ends the budget: a
        call stops there, so those happen on the same update as one update a call."""
        done = self.counters.updates
        left = [every - done % every for every in (self.s.publish_every, self.s.checkpoint_every)]
        if self.s.max_updates:
            left.append(self.s.max_updates - done)
        return min(left)

    def _credit(self) -> int:
        """Transitions credited per update on top of its batch (settled: a lower ratio)."""
        if self.settling is None or self.settling.settled_at is None:
            return 0
        return self.settling.credit

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
        """Wait for replay data; first report a stale sampled count (actors wait on it)."""
        if self.publisher is not None and self.report.due_while_idle(self.counters.updates):
            self.report.request(self.counters.updates)
        started = time.perf_counter()
        self.stop.wait(0.002)
        waited = time.perf_counter() - started
        self.counters.wait_seconds += waited
        metrics.LEARNER_WAIT_SECONDS.inc(waited)

    def _update(self, most: int) -> None:
        newest = self.publisher.version if self.publisher is not None else None
        done = self.update_step(newest, most)
        self.counters.credited += self._credit() * done

    def _periodic(self) -> None:
        if self.publisher is None:  # ranks > 0 only train; rank 0 speaks for the group
            return
        updates, due = self.counters.updates, self.update_step.passed  # several a call
        if self.settling is not None:
            self.settling.poll(updates)
        if due(self.s.publish_every) and self.publish_pace.ready():
            snapshot = self._snapshot()
            if self.settling is None or self.settling.admits(snapshot.weights):
                self.publisher.submit(snapshot)
        if due(10):
            self.report.request_paced(updates)
        if self.checkpointer is not None and due(self.s.checkpoint_every):
            self.checkpoint()

    def _snapshot(self) -> Snapshot:
        return Snapshot(learner_step=self.counters.updates, weights=self.algo.policy_weights())

    # --- shutdown ---------------------------------------------------------------------
    def checkpoint(self) -> None:
        """Save the checkpoint (rank 0; a no-op elsewhere or without a checkpoint dir)."""
        if self.checkpointer is not None and self.publisher is not None:
            save_checkpoint(self, self.checkpointer, self.publisher.version)

    def finish(self) -> None:
        """Stop ingesting (after reading what Redis already holds), publish the final
        weights, write the final checkpoint."""
        self.stop.set()
        self.ingest.finish()
        with contextlib.suppress(redis.ConnectionError, redis.TimeoutError):  # for a check
            # This rank's ingested count: the run's lost-transitions check (launch.final).
            self.client.hset(self.keys.learner_ingested, str(self.dist.rank), self.reader.added)
        self.update_step.flush_metrics()
        self.report.close()  # the last counts are written below, on this thread
        if self.publisher is None:
            return
        self.publisher.close()
        final = self._snapshot()
        champion = self.settling.champion if self.settling is not None else None
        if champion is not None:  # a gated run ends on the last policy that passed
            final = Snapshot(learner_step=final.learner_step, weights=champion)
        self.publisher.publish_now(final, timeout=10.0)
        if self.settling is not None:
            self.settling.close()
        self.report.send(self.counters.updates)
        self.checkpoint()

    def close(self) -> None:
        """Stops the threads the constructor started, for a learner that will not `finish`
        (one restored to be inspected, or built and then refused): no final publication,
        no checkpoint."""
        self.stop.set()
        self.report.close()
        if self.publisher is not None:
            self.publisher.close()
        if self.settling is not None:
            self.settling.close()

    def behaviour_status(self) -> dict[str, float]:
        """The gap and n-step weights as GetStatus counters (behaviour_*)."""
        correction = self.correction.status() if self.correction is not None else {}
        return self.behaviour.status() | correction


def _algorithm(settings: LearnerSettings, cfg: DQNConfig, spec: MLPSpec | CNNSpec) -> Any:
    """The algorithm ACTORQ_ALGO names, checked against the spec the publisher declares."""
    if cfg.learning_starts > settings.replay_capacity:
        raise ConfigError(
            f"{config_prefix(settings.algo)}LEARNING_STARTS={cfg.learning_starts} exceeds "
            f"ACTORQ_REPLAY_CAPACITY={settings.replay_capacity}: the learner would never start"
        )
    algo = make_algorithm(
        settings.algo, spec.obs_dim, spec.num_outputs, spec.hidden, cfg,
        device=settings.device, seed=settings.seed, spec=spec,
    )  # fmt: skip
    if algo.policy_spec != spec:  # what is published must be what the algorithm fills
        raise ConfigError(
            f"{settings.algo} fills policy {algo.policy_spec}, publisher declares {spec}"
        )
    return algo


def _replay_mirror(
    settings: LearnerSettings,
    cfg: DQNConfig,
    spec: MLPSpec | CNNSpec,
    algo: Any,
    rlx2: SparseTrainingConfig | None,
) -> tuple[ReplayStorage, RLx2Learning | None, SharedReplay | None]:
    """The preallocated replay mirror (in shared memory with ACTORQ_INGEST=process), and
    RLx2 (sparse networks, delayed n-step, dynamic replay; FLOPs for every continuous
    run) where it applies."""
    continuous = is_continuous(settings.algo)
    rlx2 = rlx2 or SparseTrainingConfig()
    shape = (
        settings.replay_capacity, spec.obs_dim, spec.num_outputs if continuous else 0,
        spec.obs_shape if isinstance(spec, CNNSpec) else (),  # uint8 pixels
    )  # fmt: skip
    links = RLx2Learning.links_trajectories(rlx2)
    shared = make_shared_replay(*shape, links) if settings.ingest == "process" else None
    storage = (
        ReplayStorage(*shape[:3], link_trajectories=links, obs_shape=shape[3])
        if shared is None
        else shared.storage
    )
    log.info(
        "replay mirror: %d rows, %s observations, %.1f MiB preallocated%s",
        settings.replay_capacity, "uint8 pixel" if isinstance(spec, CNNSpec) else "float32",
        storage.nbytes / 2**20, "" if shared is None else ", shared with the ingest process",
    )  # fmt: skip
    learning = RLx2Learning(rlx2, algo, settings, storage) if continuous or rlx2.active else None
    return storage, learning, shared


def _check_parallel(algo: Any, rlx2: RLx2Learning | None, world_size: int) -> None:
    """Data-parallel learners average gradients; what would make replicas drift apart
    (state updated outside the optimizers, from each rank's own batches) is refused."""
    name = type(algo).__name__
    if getattr(algo, "obs_rms", None) is not None:
        raise ConfigError(
            f"parallel learners (world_size {world_size}): {name} normalises observations "
            "with running statistics each rank would update from its own batches; turn "
            "obs_norm off or run one learner"
        )
    if rlx2 is not None and rlx2.config.active:
        raise ConfigError(
            f"parallel learners (world_size {world_size}): RLx2 (sparse topologies, delayed "
            "n-step, dynamic replay) keeps per-learner state the ranks do not share; run "
            "one learner"
        )
