"""Data-parallel learners: L processes, one model, gradients averaged with all-reduce.

Each rank mirrors its own share of the replay stream and computes gradients on its own
batches; `GradientAverager` all-reduces them before every optimizer step, so the replicas
stay identical. Rank 0 alone publishes, checkpoints and reports progress.

Every rank must take part in every collective, in the same order, so before each update
the ranks agree (`StepAgreement`) on whether all can sample, whether any stops (then all
do) and how much the group ingested (the rate limiter runs on group totals: one rank's
share of the stream is never exactly 1/L). A dead rank leaves the others blocked until
`dist_timeout`; the launcher then restarts the group. gloo on CPU, nccl on CUDA; only
tensors cross between ranks.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

log = logging.getLogger(__name__)

DEFAULT_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class DistConfig:
    """Where this learner sits in the group."""

    world_size: int = 1
    rank: int = 0
    address: str = "127.0.0.1:29500"  # host:port of rank 0's rendezvous store
    backend: str = ""  # "" = nccl on cuda, gloo otherwise
    timeout_s: float = DEFAULT_TIMEOUT_S

    @property
    def enabled(self) -> bool:
        return self.world_size > 1

    @property
    def is_primary(self) -> bool:
        return self.rank == 0

    def shard(self) -> tuple[int, int]:
        """(rank, world_size): which share of the replay stream this learner mirrors."""
        return self.rank, self.world_size


def init_group(cfg: DistConfig, device: str) -> None:
    """Join the process group (blocks until all `world_size` ranks have joined)."""
    if not cfg.enabled:
        return
    # torch._dynamo, imported lazily by the first optimizer.state_dict(), keeps a reference
    # to the default group when it is imported after the group exists; destroy_process_group
    # then leaves gloo's worker threads running into interpreter shutdown, where they abort
    # the process now and then (exit -6, "terminate called without an active exception").
    # Importing it first lets leave_group() end every thread the group started.
    import torch._dynamo  # noqa: F401

    backend = cfg.backend or ("nccl" if device.startswith("cuda") else "gloo")
    host, _, port = cfg.address.rpartition(":")
    log.info(
        "joining learner group: rank %d of %d via tcp://%s (%s)",
        cfg.rank,
        cfg.world_size,
        cfg.address,
        backend,
    )
    dist.init_process_group(
        backend,
        init_method=f"tcp://{host}:{port}",
        rank=cfg.rank,
        world_size=cfg.world_size,
        timeout=timedelta(seconds=cfg.timeout_s),
    )


def leave_group() -> None:
    """Leave the process group once every rank has reached this point: without the
    barrier a rank could tear down its gloo pairs while a peer still finished the last
    collective, and gloo aborts ("terminate called without an active exception", about
    one two-rank run in ten). No thread of the group is left running afterwards."""
    if not (dist.is_available() and dist.is_initialized()):
        return
    try:
        dist.barrier()
    except RuntimeError as exc:  # a peer died: leave anyway, there is nobody to wait for
        log.warning("leaving the learner group without a final barrier: %s", exc)
    dist.destroy_process_group()


class GradientAverager:
    """Averages the gradients of `params` over all ranks with one flat all-reduce."""

    def __init__(self, world_size: int) -> None:
        self.world_size = world_size

    def __call__(self, params: Sequence[torch.nn.Parameter]) -> None:
        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
        flat = torch.cat([g.reshape(-1) for g in grads])
        dist.all_reduce(flat, op=dist.ReduceOp.SUM)
        flat /= self.world_size
        offset = 0
        for p, g in zip(params, grads, strict=True):
            n = g.numel()
            p.grad = flat[offset : offset + n].view_as(p).clone()
            offset += n


class StepAgreement:
    """One tiny all-reduce per step: does every rank have data, does any rank want to stop,
    and how many transitions has the group ingested (for the samples-per-insert limiter)?
    """

    def __init__(self, device: str = "cpu") -> None:
        self._flags = torch.zeros(3, dtype=torch.float64, device=device)

    def __call__(self, ready: bool, stopping: bool, inserted: int) -> tuple[bool, bool, int]:
        """Returns (every rank ready, any rank stopping, transitions ingested by all ranks)."""
        self._flags[0] = 0.0 if ready else 1.0
        self._flags[1] = 1.0 if stopping else 0.0
        self._flags[2] = float(inserted)  # float64 counts exactly up to 2**53
        dist.all_reduce(self._flags, op=dist.ReduceOp.SUM)
        not_ready, stopping_ranks, total = self._flags.tolist()
        return not_ready == 0.0, stopping_ranks > 0.0, int(total)


def tensors_in(state: Any) -> Iterator[torch.Tensor]:
    """Every tensor in a nested state dict, in a traversal order that is the same on every
    rank whose state has the same structure (mapping keys sorted by their string)."""
    if isinstance(state, torch.Tensor):
        yield state
    elif isinstance(state, Mapping):
        for key in sorted(state, key=str):
            yield from tensors_in(state[key])
    elif isinstance(state, list | tuple):
        for item in state:
            yield from tensors_in(item)


def broadcast_tensors(tensors: Sequence[torch.Tensor], src: int = 0) -> None:
    """Overwrite `tensors` in place with rank `src`'s values."""
    for t in tensors:
        dist.broadcast(t, src=src)


def broadcast_ints(values: Sequence[int], src: int = 0, device: str = "cpu") -> list[int]:
    """Rank `src`'s integers, on every rank."""
    t = torch.tensor(list(values), dtype=torch.int64, device=device)
    dist.broadcast(t, src=src)
    return [int(v) for v in t.tolist()]
