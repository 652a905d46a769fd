"""Where the learner trains: `auto`, `cpu`, `cuda` or `cuda:N`, and how `auto` decides.

`auto` measures rather than predicts. At start-up the learner builds its own algorithm
(the run's network, config and seed) on each candidate device and update path, runs a few
warm updates and times a few dozen on random batches of the run's batch size
(actorq.learner.device_probe: about 0.1 s for CartPole's 64x64 DQN on 2 cores, 2 s at most
for any learner; the project's Adam skips torch's wrappers that would import
torch._dynamo, 1.5 s, on a first eager step), and trains on the fastest.

Candidates are every path the algorithm offers on the CPU and, where
torch.cuda.is_available(), on `cuda` (actorq.algos.capture); `compiled` only when
ACTORQ_UPDATE_PATH names it, since torch.compile takes tens of seconds before its first
update. An explicit ACTORQ_UPDATE_PATH is measured alone on each device that offers it;
an explicit device with the path `auto` has its paths measured and trains on the fastest.
A single candidate is not measured: there is nothing to choose.

Data-parallel learners (world_size > 1) stay on the CPU unless a device is asked for, and
are not measured: their gradient all-reduce is not part of a lone learner's update.

The timings ("device/path" -> ms per update) are in the learner's start-up lines and the
`<prefix>:learner:info` record that `actorq run` copies into summary.json
(`learner_device_timings`; actorq.learner.update_path).
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from actorq.config import ConfigError, check_learner_device

if TYPE_CHECKING:
    from actorq.learner.device_probe import LearnerRecipe, Measurement

log = logging.getLogger(__name__)


def _mlp_weights(sizes: Sequence[int]) -> int:
    return sum(a * b for a, b in itertools.pairwise(sizes))


def update_mflop(
    algo: str,
    obs_dim: int,
    num_outputs: int,
    hidden: Sequence[int],
    batch: int,
    policy_delay: int = 2,
    num_atoms: int = 51,
) -> float:
    """Matmul MFLOP of one update of an MLP learner (2 FLOPs per weight per sample per
    forward, a backward costs two forwards; biases and activations left out): the size
    of an update in the GPU check's tables (bench/gpu_cases.py).

    DQN: the online net on s and s' and the target on s' forward, one backward.
    Actor-critics: the passes of actorq.sparse.flops.passes. On-policy: the policy and
    value networks forward and backward once per row of the batch."""
    from actorq.sparse.flops import passes

    if algo == "dqn":
        return 10.0 * _mlp_weights([obs_dim, *hidden, num_outputs]) * batch / 1e6
    if algo in ("ddpg", "td3", "sac", "d4pg"):
        actor = _mlp_weights([obs_dim, *hidden, num_outputs * (2 if algo == "sac" else 1)])
        critics = 2 if algo in ("td3", "sac") else 1
        critic_out = num_atoms if algo == "d4pg" else 1
        critic = critics * _mlp_weights([obs_dim + num_outputs, *hidden, critic_out])
        p = passes(algo, policy_delay if algo == "td3" else 1, critics)
        a, c = p["actor"], p["critic"]
        per_sample = 2.0 * (
            (a.forward + 2 * a.backward) * actor + (c.forward + 2 * c.backward) * critic
        )
        return per_sample * batch / 1e6
    weights = _mlp_weights([obs_dim, *hidden, num_outputs]) + _mlp_weights([obs_dim, *hidden, 1])
    return 6.0 * weights * batch / 1e6


@dataclass(frozen=True)
class DeviceChoice:
    """The device the learner trains on, why, and what was measured to choose it."""

    device: str
    reason: str
    update_path: str = ""  # the path to take on `device`: the fastest or only candidate
    timings: Mapping[str, float] = field(default_factory=dict)  # "device/path" -> ms


def format_timings(timings: Mapping[str, float]) -> str:
    """Timings as `cpu/numpy-flat 0.21 ms, cpu/torch-eager 0.93 ms`, fastest first."""
    ordered = sorted(timings.items(), key=lambda item: item[1])
    return ", ".join(f"{key} {ms:.3g} ms" for key, ms in ordered)


def choose_measured(timings: Mapping[str, float], requested: str = "auto") -> DeviceChoice:
    """The fastest of `timings` ("device/path" -> ms per update, at least one); the
    reason names every timing."""
    if not timings:
        raise ValueError("choose_measured needs at least one timing")
    best = min(timings, key=lambda key: timings[key])
    device, _, path = best.partition("/")
    head = "auto" if requested == "auto" else "asked for"
    reason = f"{head}: fastest of {format_timings(timings)} per update"
    return DeviceChoice(device, reason, path, dict(timings))


@dataclass(frozen=True)
class CudaInfo:
    """What this process can train on besides the CPU."""

    count: int
    names: tuple[str, ...] = ()
    torch_version: str = ""

    @classmethod
    def probe(cls) -> CudaInfo:
        import torch

        if not torch.cuda.is_available():
            return cls(0, (), torch.__version__)
        n = torch.cuda.device_count()
        return cls(n, tuple(torch.cuda.get_device_name(i) for i in range(n)), torch.__version__)

    def available(self) -> str:
        gpus = [f"cuda:{i} ({name})" for i, name in enumerate(self.names)]
        return ", ".join(["cpu", *gpus])


def check_available(device: str, cuda: CudaInfo) -> None:
    """ConfigError when `device` names a GPU this process cannot use."""
    if not device.startswith("cuda"):
        return
    if cuda.count == 0:
        raise ConfigError(
            f"learner device {device!r}: torch.cuda.is_available() is False here (torch "
            f"{cuda.torch_version}); available: cpu. Use --learner-device cpu or auto "
            "(ACTORQ_DEVICE), or a CUDA build of torch on a machine with a GPU"
        )
    index = int(device.partition(":")[2] or 0)
    if index >= cuda.count:
        raise ConfigError(
            f"learner device {device!r}: this machine has {cuda.count} CUDA device(s); "
            f"available: {cuda.available()}"
        )


def candidate_devices(requested: str, cuda: CudaInfo) -> list[str]:
    """The devices `requested` leaves to measure: it alone when explicit; for `auto` the
    CPU, and `cuda` (the current GPU) where torch sees one."""
    check_learner_device(requested, "learner device")
    if requested != "auto":
        return [requested]
    return ["cpu", "cuda"] if cuda.count else ["cpu"]


def resolve_device(
    requested: str,
    recipe: LearnerRecipe,
    requested_path: str = "auto",
    world_size: int = 1,
    cuda: CudaInfo | None = None,
    torch_threads: int = 1,
) -> DeviceChoice:
    """The learner service's device (and, measured, its fastest path): an explicit device
    checked against what torch sees (ConfigError naming both when it is not there), then
    the candidates of `requested` and `requested_path` measured on `recipe`'s learner."""
    from actorq.learner.device_probe import measure

    cuda = CudaInfo.probe() if cuda is None else cuda
    check_available(requested, cuda)
    if world_size > 1:
        return _data_parallel(requested, world_size)
    devices = candidate_devices(requested, cuda)
    measured = measure(recipe, devices, requested_path, torch_threads)
    return _from_measurement(requested, requested_path, devices, measured, cuda)


def _data_parallel(requested: str, world_size: int) -> DeviceChoice:
    if requested != "auto":
        return DeviceChoice(requested, f"asked for; {world_size} data-parallel learners")
    return DeviceChoice(
        "cpu",
        f"auto: {world_size} data-parallel learners stay on the CPU, not measured (set "
        "ACTORQ_DEVICE=cuda:N per rank to use GPUs)",
    )


def _from_measurement(
    requested: str, path: str, devices: list[str], measured: Measurement, cuda: CudaInfo
) -> DeviceChoice:
    """The fastest candidate; else why none was timed (one candidate, none, or every one
    failed). Failures are named in the reason."""
    head = "auto" if requested == "auto" else "asked for"
    failed = "; ".join(f"{key} failed ({why})" for key, why in measured.failed.items())
    if measured.timings:
        choice = choose_measured(measured.timings, requested)
        reason = f"{choice.reason}; {failed}" if failed else choice.reason
        return DeviceChoice(choice.device, reason, choice.update_path, choice.timings)
    where = "" if requested != "auto" or cuda.count else " (no CUDA device here)"
    if len(measured.candidates) == 1:
        only = measured.candidates[0]
        device, _, only_path = only.partition("/")
        reason = f"{head}: {only} is the only candidate{where}, not measured"
        return DeviceChoice(device, reason, only_path)
    if not measured.candidates and not failed:
        reason = f"{head}: no candidate offers update path {path!r}{where}"
    else:
        reason = f"{head}: nothing measured{where}; {failed}"
    return DeviceChoice(devices[0], reason)


def resolve_settings_device(settings: Any, config: Any) -> DeviceChoice:
    """Resolve the learner service's ACTORQ_DEVICE in place (`auto` becomes the chosen
    device), measuring the candidates on the learner the service builds, and log the choice
    with its reason and timings; ConfigError when the device is missing."""
    from actorq.algos.factory import policy_spec
    from actorq.learner.device_probe import LearnerRecipe

    cuda = CudaInfo.probe()
    check_available(settings.device, cuda)  # before building anything: the plain error
    spec = policy_spec(settings.env_id, settings.algo, settings.hidden, config)
    recipe = LearnerRecipe(settings.algo, spec, config, settings.seed)
    choice = resolve_device(
        settings.device, recipe, settings.update_path, settings.world_size, cuda,
        settings.torch_threads,
    )  # fmt: skip
    settings.device = choice.device
    log.info("learner device %s (%s)", choice.device, choice.reason)
    return choice
