"""The off-policy learner across restarts: what its checkpoint holds, resuming from one,
and data-parallel ranks starting from rank 0's state. `learner`: an
actorq.learner.loop.Learner (typed Any: this module must not import the loop back).

A checkpoint keeps the algorithm's state under the key "dqn" (whatever the algorithm:
the key checkpoints have always used, and `actorq ptq` reads), the update, sampled and
credited counts, the newest published version, settling's certification state and RLx2's
sparse state; the replay is not in it (the learner rebuilds its mirror from Redis).
"""

from __future__ import annotations

import logging
from typing import Any

from actorq import metrics
from actorq.learner.checkpoint import Checkpointer, checkpoint_meta
from actorq.learner.distributed import broadcast_ints, broadcast_tensors, tensors_in

log = logging.getLogger(__name__)


def checkpoint_state(learner: Any, version: int) -> dict[str, Any]:
    """What a checkpoint of `learner` holds (see the module doc)."""
    return {
        "dqn": learner.algo.state_dict(),
        "updates": learner.counters.updates,
        "sampled": learner.counters.sampled,
        "credited": learner.counters.credited,
        "version": version,
        **(learner.settling.state() if learner.settling is not None else {}),
        **({"rlx2": learner.rlx2.state_dict()} if learner.rlx2 is not None else {}),
    }


def save_checkpoint(learner: Any, checkpointer: Checkpointer, version: int) -> None:
    """Write the checkpoint and its metadata; count it."""
    updates = learner.counters.updates
    meta = checkpoint_meta(learner.s, learner.spec, learner.cfg, updates, version)
    if learner.rlx2 is not None:
        meta["rlx2"] = learner.rlx2.status()
    path = checkpointer.save(checkpoint_state(learner, version), meta)
    learner.counters.checkpoints += 1
    metrics.LEARNER_CHECKPOINTS.inc()
    log.info("checkpoint at update %d -> %s", updates, path)


def resume(learner: Any, state: dict[str, Any]) -> None:
    """Load a checkpoint's state into rank 0's learner."""
    learner.algo.load_state_dict(state["dqn"])
    if learner.rlx2 is not None and "rlx2" in state:
        learner.rlx2.load_sparse_state(state["rlx2"])
    learner.counters.updates = int(state["updates"])
    learner.counters.sampled = int(state["sampled"])
    learner.counters.credited = int(state.get("credited", 0))
    if learner.settling is not None:
        learner.settling.restore(state)
    assert learner.publisher is not None and learner.checkpointer is not None  # rank 0 only
    learner.publisher.version = max(learner.publisher.version, int(state["version"]))
    log.info(
        "resumed from %s at update %d, version %d",
        learner.checkpointer.path, learner.counters.updates, int(state["version"]),
    )  # fmt: skip


def sync_from_primary(learner: Any) -> None:
    """Every rank starts from rank 0's weights, optimizer state and counters."""
    algo, counters = learner.algo, learner.counters
    algo.prime_optimizer()
    broadcast_tensors(list(tensors_in(algo.state_dict())))
    updates, sampled, num_updates = broadcast_ints(
        [counters.updates, counters.sampled, algo.num_updates], device=learner.s.device
    )
    counters.updates, counters.sampled = updates, sampled
    algo.load_counters(num_updates)
    log.info("rank %d synced with rank 0 at update %d", learner.dist.rank, updates)
