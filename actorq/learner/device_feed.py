"""Device-resident replay for the learner service (ACTORQ_DEVICE_REPLAY_K = k >= 1).

On a captured update path (cuda-graph, compiled, torch-eager's captured step) the learner
keeps a copy of its replay mirror on the update's device (actorq.algos.feed.DeviceReplay).
Each loop turn copies the rows ingested since the last turn to the device once; one call
then draws k uniform batches on the device and runs k updates of the algorithm's one
`step` (on cuda-graph: one graph replay). No batch crosses from the host per update, and
the host's per-update Python (sample, gather, copy, count) is paid once per k updates.
With prioritized replay the priorities live on the device too (PrioritizedDeviceReplay,
the host sampler's alpha, beta schedule and eps): a call's |TD errors| are written back
inside the call, so batch i + 1 of a call is drawn before batch i's priorities land (at
most one call late; the host path is one update late).

Refused at start-up, with the reason (exit 2): a path that is not captured (numpy-flat),
settling's terminal share (a host-side sampler), RLx2's sparse
training, delayed n-step or dynamic replay and the n-step importance correction (they
read host rows per batch; a dense continuous run only counts its FLOPs, k per call),
pixel observations (the ring holds flat float32 observations) and data-parallel learners
(their gradients are all-reduced between backward and step). The behaviour gap and the
sample lag are then measured on a host sample every gap_every / METRICS_EVERY updates.

A ring that cannot be allocated (device memory) leaves the learner sampling on the host,
with one warning and `learner_device_replay` in summary.json saying why.
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
import torch

from actorq.algos.capture import CapturedUpdate, current_update_path
from actorq.algos.feed import DeviceReplay, PrioritizedDeviceReplay
from actorq.config import ConfigError
from actorq.learner.captured import losses_when_full
from actorq.replay import ReplayStorage
from actorq.replay.storage import column_layout

log = logging.getLogger(__name__)

RING_COLUMNS = (*DeviceReplay.COLUMNS, "steps")  # the service's rows carry n-step lengths
READBACK_UPDATES = 64  # losses are read back once per this many updates (rounded up to k)


class DeviceFeed:
    """A device ring that follows a host replay mirror, and a k-update runner on it."""

    def __init__(
        self,
        algo: Any,
        storage: ReplayStorage,
        batch_size: int,
        k: int,
        seed: int = 0,
        prioritized: Any = None,
    ) -> None:
        """`prioritized`: the host PrioritizedSampler whose parameters the ring takes
        (None: uniform)."""
        path = current_update_path(algo)
        slots = -(-READBACK_UPDATES // k) * k
        self.runner = CapturedUpdate(algo, path, readback_every=slots, k=k)
        self.storage, self.k = storage, k
        layout = column_layout(1, storage.obs_dim, storage.act_dim)  # one row: the dtypes
        example = {c: np.zeros(*layout[c]) for c in RING_COLUMNS}
        self.ring = _ring(storage.capacity, example, algo.device, prioritized)
        generator = torch.Generator(device=algo.device).manual_seed(seed)
        self.runner.use_replay(self.ring, batch_size, generator)
        self.copied = 0  # host rows (by insert count) already on the device

    def catch_up(self) -> int:
        """Copy the rows added to the host mirror since the last call (the newest
        `capacity` of them) to the device; returns how many. The mirror is a ring of the
        same capacity, so the device holds the same rows (a row overwritten on the host
        while it is copied is replaced by a newer one; it enters at the max priority)."""
        total = self.storage.total_added
        new = min(total - self.copied, self.storage.capacity)
        if new <= 0:
            return 0
        slots = np.arange(total - new, total, dtype=np.int64) % self.storage.capacity
        rows = self.storage.get(slots)
        self.ring.add({c: rows[c] for c in RING_COLUMNS})
        self.copied = total
        return new

    def run(self) -> tuple[float, float] | None:
        """k updates on device-sampled batches; (loss, q_mean) of the last update each
        time the readback slots fill (one host sync per READBACK_UPDATES), else None."""
        self.runner.submit_sampled()
        return losses_when_full(self.runner)


def _ring(capacity: int, example: Any, device: Any, prioritized: Any) -> DeviceReplay:
    if prioritized is None:
        return DeviceReplay(capacity, example, device, RING_COLUMNS)
    return PrioritizedDeviceReplay(
        capacity, example, device, RING_COLUMNS, alpha=prioritized.alpha, beta=prioritized.beta,
        beta_final=prioritized.beta_final, beta_steps=prioritized.beta_steps,
        eps=prioritized.eps,
    )  # fmt: skip


def check_device_replay(k: int, learner: Any) -> None:
    """ConfigError naming what rules device replay out for this learner (k >= 1)."""
    s, path = learner.s, current_update_path(learner.algo)
    reasons = []
    if path == "numpy-flat":  # the other paths run the captured step
        reasons.append(f"a captured update path (torch-eager, cuda-graph or compiled), not {path}")
    if s.settle_terminal_share > 0:
        reasons.append("settle_terminal_share 0 (its terminal rows are drawn on the host)")
    sparse = learner.rlx2 is not None and learner.rlx2.config.active
    if sparse or learner.correction is not None:
        reasons.append("no RLx2 and no n-step importance correction (they read host rows)")
    if learner.storage.obs_layout[0] == np.uint8:
        reasons.append("flat observations (pixel frames are sampled on the host)")
    if learner.dist.world_size > 1:
        reasons.append("one learner (data-parallel ranks all-reduce inside the update)")
    if reasons:
        raise ConfigError(
            f"device_replay_k (ACTORQ_DEVICE_REPLAY_K) {k} needs " + "; ".join(reasons)
        )


def attach_device_feed(learner: Any, k: int) -> str:
    """Give the learner's update step a DeviceFeed of k updates per call (0: none);
    returns what summary.json reports as learner_device_replay ("" when k is 0)."""
    if k == 0:
        return ""
    check_device_replay(k, learner)
    try:
        prioritized = learner.update_step.sampler if learner.s.replay == "prioritized" else None
        feed = DeviceFeed(
            learner.algo, learner.storage, learner.cfg.batch_size, k, learner.s.seed, prioritized
        )
    except ValueError as exc:  # the algorithm has no capturable step
        raise ConfigError(f"device_replay_k (ACTORQ_DEVICE_REPLAY_K) {k}: {exc}") from None
    except (torch.OutOfMemoryError, RuntimeError) as exc:  # device memory for the ring
        first = str(exc).splitlines()[0][:200]
        log.warning(
            "device replay (k=%d): a %d-row ring could not be allocated on %s (%s); "
            "sampling on the host instead", k, learner.storage.capacity, learner.algo.device,
            first,
        )  # fmt: skip
        return f"off: could not allocate {learner.storage.capacity} rows on the device: {first}"
    learner.update_step.use_feed(feed)
    kind = "prioritized " if prioritized is not None else ""
    return f"k={k}, {learner.storage.capacity} {kind}rows on {learner.algo.device}"
