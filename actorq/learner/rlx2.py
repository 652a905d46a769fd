"""What the learner loop does for RLx2: sparse networks, the delayed n-step target, the
dynamic-capacity replay, their metrics and their checkpoint state.

The loop calls, and nothing else::

    rlx2 = RLx2Learning(config, algo, settings, storage)    # after make_algorithm
    batch = rlx2.gather(storage, indices)                   # instead of storage.get
    rlx2.after_update()                                     # after algo.update
    rlx2.state_dict() / rlx2.restore(state)                 # checkpoint / after rebuild

Algorithms keep their update code: masks and topology run on optimizer and gradient
hooks (actorq.sparse.topology); n-step rows arrive as `steps` > 1 batches, which every
continuous algorithm already discounts by gamma ** steps.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from actorq import metrics
from actorq.config import LearnerSettings
from actorq.replay.dynamic_capacity import PROBE_BATCHES, DynamicCapacity
from actorq.replay.storage import ReplayStorage
from actorq.sparse.config import SparseTrainingConfig
from actorq.sparse.training import SparseTraining, attach_sparse_training


class RLx2Learning:
    def __init__(
        self,
        config: SparseTrainingConfig,
        algo: Any,
        settings: LearnerSettings,
        storage: ReplayStorage,
    ) -> None:
        config.check_usable(settings.algo, settings.replay, settings.world_size)
        self.config, self.algo, self.storage = config, algo, storage
        self.gamma = float(algo.config.gamma)
        self.sparse: SparseTraining = attach_sparse_training(algo, config, settings.algo)
        self.capacity = (
            DynamicCapacity(
                threshold=config.buffer_distance_threshold,
                check_every=config.buffer_check_every,
                min_rows=int(config.buffer_min_fraction * settings.replay_capacity),
                drop_fraction=config.buffer_drop_fraction,
                probe_rows=PROBE_BATCHES * int(algo.config.batch_size),
                noise_baseline=config.buffer_noise_baseline,
            )
            if config.dynamic_buffer
            else None
        )
        self._reported_changes = {name: 0 for name in self.sparse.networks}
        self.last_steps_mean = 1.0  # mean n-step length of the latest batch
        self._report_topology()

    @staticmethod
    def links_trajectories(config: SparseTrainingConfig) -> bool:
        return config.delayed_nstep > 1

    def nstep(self) -> int:
        """n of the TD target now: 1 until `delayed_nstep_after` updates, then n."""
        if self.algo.num_updates >= self.config.delayed_nstep_after:
            return self.config.delayed_nstep
        return 1

    def gather(
        self, storage: ReplayStorage, indices: np.ndarray, trace: bool = False
    ) -> dict[str, np.ndarray]:
        """The sampled rows, n-step once due; `trace` adds their intermediate steps (for
        the importance correction, actorq.learner.behaviour)."""
        n = self.nstep()
        if n == 1:
            return storage.get(indices)
        batch = storage.get_nstep(indices, n, self.gamma, trace)
        self.last_steps_mean = float(batch["steps"].mean())  # < n where episodes end
        return batch

    def after_update(self) -> None:
        before_sparse, before_dense = self.sparse.train_flops, self.sparse.dense_train_flops
        self.sparse.account_update()
        metrics.LEARNER_TRAIN_FLOPS.labels("sparse").inc(self.sparse.train_flops - before_sparse)
        metrics.LEARNER_TRAIN_FLOPS.labels("dense").inc(
            self.sparse.dense_train_flops - before_dense
        )
        metrics.LEARNER_NSTEP.set(self.nstep())
        if self.sparse.topology_updates != sum(self._reported_changes.values()) or any(
            net.changed_total != self._reported_changes[name]
            for name, net in self.sparse.networks.items()
        ):
            self._report_topology()
        if self.capacity is not None:
            dropped = self.capacity.maybe_adjust(self.storage, self.algo.actions)
            if dropped:
                metrics.LEARNER_REPLAY_DROPPED.inc(dropped)
            if not math.isnan(self.capacity.last_distance):
                metrics.LEARNER_POLICY_DISTANCE.set(self.capacity.last_distance)
        metrics.LEARNER_REPLAY_CAPACITY.set(self.replay_capacity())

    def replay_capacity(self) -> int:
        """Rows the replay may hold: its capacity, less what the dynamic rule dropped and
        new data has not refilled yet."""
        return self.storage.capacity - (
            self.storage.oldest_seq - max(self.storage.total_added - self.storage.capacity, 0)
        )

    def _report_topology(self) -> None:
        for name, layers in self.sparse.layer_stats().items():
            for s in layers:
                metrics.LEARNER_SPARSITY.labels(name, s.name).set(s.sparsity)
        for name, net in self.sparse.networks.items():
            metrics.LEARNER_MASK_VERSION.labels(name).set(net.topology_updates)
            metrics.LEARNER_TOPOLOGY_CHANGED.labels(name).inc(
                net.changed_total - self._reported_changes[name]
            )
            self._reported_changes[name] = net.changed_total
        sparse, dense = self.sparse.inference_flops()
        metrics.LEARNER_INFERENCE_FLOPS.labels("sparse").set(sparse)
        metrics.LEARNER_INFERENCE_FLOPS.labels("dense").set(dense)

    # --- status, summary, checkpoints -------------------------------------------------------
    def status(self) -> dict[str, float]:
        """Counters for Control.GetStatus (the run's summary.json reads them)."""
        sparsity = self.sparse.sparsity()
        inference, dense_inference = self.sparse.inference_flops()
        out = {f"sparsity_{name}": value for name, value in sparsity.items()}
        out.update(
            train_flops=self.sparse.train_flops,
            dense_train_flops=self.sparse.dense_train_flops,
            inference_flops=float(inference),
            dense_inference_flops=float(dense_inference),
            topology_updates=float(self.sparse.topology_updates),
            topology_changed_weights=float(self.sparse.changed_total),
            td_nstep=float(self.nstep()),
            td_steps_mean=self.last_steps_mean,
            replay_capacity=float(self.replay_capacity()),
        )
        if self.capacity is not None:
            out["replay_dropped"] = float(self.capacity.dropped_total)
        return out

    def state_dict(self) -> dict[str, Any]:
        state: dict[str, Any] = {"sparse": self.sparse.state_dict()}
        if self.capacity is not None:
            state["capacity"] = self.capacity.state_dict(self.storage)
        return state

    def load_sparse_state(self, state: dict[str, Any]) -> None:
        """Masks and schedule; call after the algorithm's own state is loaded."""
        self.sparse.load_state_dict(state["sparse"])
        self._report_topology()

    def restore_capacity(self, state: dict[str, Any]) -> None:
        """Replay capacity; call after the replay mirror was rebuilt from Redis."""
        if self.capacity is not None and "capacity" in state:
            self.capacity.load_state_dict(state["capacity"], self.storage)
