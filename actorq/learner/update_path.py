"""How the learner's updates run (the update path), and how device and path are told.

Paths (actorq.algos.capture.UPDATE_PATHS): `numpy-flat` (DQN's whole update in numpy on
one core, actorq.algos.dqn_flat), `torch-eager` (torch ops one by one), `cuda-graph` (the
update captured once as a CUDA graph and replayed), `compiled` (torch.compile). With
ACTORQ_UPDATE_PATH=auto the learner takes the first of `PREFERENCE` that its algorithm
offers on its device: the numpy update beats torch's ops on the CPU (earlier BENCHMARKS 12h);
on a GPU a replayed graph skips the per-op launches and host syncs that make an eager
update cost ~1.4 ms whatever its size (issue 29), and needs no compile at start-up.

Where the learner measured its candidates at start-up (actorq.learner.device), `auto`
takes the path measured fastest on its device instead, when the learner it trains offers
it (RLx2's sparse masks, for one, rule the captured paths out).

What was chosen is said three ways: the learner's start-up line (with the measured ms
per update), the Prometheus gauge `actorq_learner_info{device, update_path, dtype} 1`, and
a JSON record at `<prefix>:learner:info` in Redis that `actorq run` copies into
summary.json (`learner_device`, `learner_update_path`, `learner_dtype`,
`learner_device_timings`: "device/path" -> ms per update, absent when nothing was measured).
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

import redis

from actorq import metrics
from actorq.algos.capture import (
    apply_update_path,
    available_update_paths,
    current_update_path,
    torch_threads_for,
)
from actorq.config import ConfigError
from actorq.learner.device import format_timings
from actorq.learner.distributed import tensors_in
from actorq.redis_keys import RedisKeys
from actorq.torch_threads import set_torch_threads

if TYPE_CHECKING:
    from actorq.learner.device import DeviceChoice

log = logging.getLogger(__name__)

PREFERENCE = {
    "cpu": ("numpy-flat", "torch-eager", "compiled"),
    "cuda": ("cuda-graph", "compiled", "torch-eager"),
}


def choose_update_path(requested: str, available: tuple[str, ...], device: str) -> str:
    """`requested` when the algorithm offers it (ConfigError naming what it offers
    otherwise); for `auto` the first of PREFERENCE[device kind] that it offers."""
    if requested != "auto":
        if requested not in available:
            raise ConfigError(
                f"update_path (ACTORQ_UPDATE_PATH) {requested!r}: not available for this "
                f"learner on {device}; available: {', '.join(available)}"
            )
        return requested
    kind = "cuda" if device.startswith("cuda") else "cpu"
    for path in PREFERENCE[kind]:
        if path in available:
            return path
    if not available:
        raise ConfigError(f"the learner offers no update path on {device}")
    return available[0]


def set_update_path(algo: Any, requested: str, device: str) -> str:
    """Put `algo` on the chosen path; returns the path it then reports running."""
    path = choose_update_path(requested, tuple(available_update_paths(algo)), device)
    if path != current_update_path(algo):
        try:
            apply_update_path(algo, path)
        except ValueError as exc:
            raise ConfigError(f"update_path {path!r}: {exc}") from None
    return current_update_path(algo)


def learner_dtype(algo: Any) -> str:
    """dtype of the learner's trained weights, e.g. "float32" (first floating tensor of
    its state_dict; "unknown" when it has none)."""
    tensors = tensors_in(algo.state_dict())
    found = next((t.dtype for t in tensors if t.is_floating_point()), None)
    return str(found).removeprefix("torch.") if found is not None else "unknown"


@dataclass(frozen=True)
class LearnerInfo:
    """Device, update path and dtype the learner trains with, and why that device."""

    device: str
    update_path: str
    dtype: str
    reason: str = ""
    timings: Mapping[str, float] = field(default_factory=dict)
    """ms per update of each candidate measured at start-up, "device/path" -> ms."""
    device_replay: str = ""
    """Device-resident replay (actorq.learner.device_feed): "k=4, N rows on cuda:0", why
    it is off after a failed allocation, or "" when not asked for."""
    denormals: str = ""
    """Whether the training thread flushes subnormal floats (actorq.denormals): "flushed",
    "kept", or "" where not recorded."""
    torch_threads: int = 0
    """torch's thread count on the chosen path (`torch_threads_for`); 0: not set here."""

    def line(self) -> str:
        """For the start-up log line."""
        line = f"device {self.device}, update path {self.update_path}, dtype {self.dtype}"
        if self.torch_threads:
            line += f", torch threads {self.torch_threads}"
        if self.device_replay:
            line += f", device replay {self.device_replay}"
        if self.timings:
            line += f", measured {format_timings(self.timings)}"
        return f"{line}, denormals {self.denormals}" if self.denormals else line

    def announce(self, client: redis.Redis | None, keys: RedisKeys | None) -> None:
        """Set the info gauge; write the Redis record (rank 0 passes a client)."""
        metrics.LEARNER_INFO.clear()
        metrics.LEARNER_INFO.labels(self.device, self.update_path, self.dtype).set(1)
        if client is None or keys is None:
            return
        try:
            client.set(keys.learner_info, json.dumps(asdict(self)))
        except redis.RedisError as exc:  # telling is not worth failing the learner
            log.warning("could not record the learner's device in redis: %s", exc)


def setup_learner(
    algo: Any,
    device: str,
    requested_path: str,
    choice: DeviceChoice | None = None,
    *,
    torch_threads: int | None = None,
) -> LearnerInfo:
    """Choose and apply the update path of `algo` (built on `device`); what it runs.
    `choice`: how the device was chosen (its reason and timings are reported, and for an
    `auto` path its measured path is taken where `algo` offers it). `torch_threads`
    (a service's ACTORQ_TORCH_THREADS): the process then runs torch on the count the path
    wants (`torch_threads_for`: numpy-flat on one), as the start-up measurement timed it."""
    wanted = requested_path
    measured = choice.update_path if choice is not None and choice.device == device else ""
    if requested_path == "auto" and measured in available_update_paths(algo):
        wanted = measured
    path = set_update_path(algo, wanted, device)
    threads = 0
    if torch_threads is not None:
        threads = torch_threads_for(path, torch_threads)
        set_torch_threads(threads)  # this thread now, the loop's when it inherits them
    info = LearnerInfo(device, path, learner_dtype(algo), torch_threads=threads)
    if choice is None:
        return info
    return dataclasses.replace(info, reason=choice.reason, timings=dict(choice.timings))


def read_learner_info(client: redis.Redis | None, keys: RedisKeys) -> dict[str, Any]:
    """The learner's record as {learner_device, learner_update_path, learner_dtype, ...},
    learner_torch_threads when it set them, and, when it measured its candidates,
    learner_device_timings ("device/path" -> ms per update); {} when there is none (an
    older learner) or Redis cannot be read."""
    if client is None:
        return {}
    try:
        raw = client.get(keys.learner_info)
        record = json.loads(raw) if raw else {}
    except (redis.RedisError, ValueError):
        return {}
    if not isinstance(record, dict):
        return {}
    names = ("device", "update_path", "dtype", "device_replay", "denormals")
    info: dict[str, Any] = {
        f"learner_{k}": str(record[k]) for k in names if record.get(k, "") != ""
    }
    timings = _timings(record.get("timings"))
    if timings:
        info["learner_device_timings"] = timings
    threads = record.get("torch_threads")
    if isinstance(threads, int) and not isinstance(threads, bool) and threads > 0:
        info["learner_torch_threads"] = threads
    return info


def _timings(value: Any) -> dict[str, float]:
    """The record's timings, keeping only "device/path" -> number entries."""
    if not isinstance(value, dict):
        return {}
    return {
        str(k): float(v)
        for k, v in value.items()
        if isinstance(v, (int, float)) and not isinstance(v, bool)
    }
