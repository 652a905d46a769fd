"""Where the learner trains: `auto`, `cpu`, `cuda` or `cuda:N`, and the rule `auto` follows.

`auto` compares two per-update costs predicted from issue 29's measurements (one NVIDIA
H200 with 16 Xeon cores, torch 2.11+cu130, warm updates on fixed batches, host->device
copy included; `MEASURED` below) and takes the cheaper device:

- CPU: `cpu_fixed_ms + update MFLOP / cpu_gflops`. The CPU time of an update grows with
  its arithmetic: DQN 64x64 b128 (5.7 MFLOP) took 0.172 ms in numpy, DQN 1024^3 b256
  (5.4 GFLOP) 53.6 ms, so about 100 GFLOP/s on one core plus ~0.11 ms of fixed work;
  TD3 and SAC 256x256 b256 (0.44 and 0.66 GFLOP) ran at ~72 GFLOP/s on torch's path.
- CUDA: a constant per algorithm. Eager CUDA updates cost launches and host syncs, not
  arithmetic: DQN took 1.385 ms at 5.7 MFLOP and 1.352 ms at 5.4 GFLOP (940x the work).

So `auto` keeps CartPole's 64x64 DQN on the CPU (0.17 vs 1.39 ms) and moves DQN
1024^3 (53.6 vs 1.35 ms), TD3 (6.1 vs 4.1 ms) and SAC (9.1 vs 7.5 ms) 256x256 to the
GPU: on each measured case the faster device (tests/unit/test_learner_device.py).
Algorithms not in the table borrow a measured one's constants (`COSTS` says which).
The CPU side is the learner's default of one torch thread; the GPU figures are the eager
path, so a captured (CUDA-graph) update only makes the GPU cheaper than predicted.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from actorq.config import ConfigError, check_learner_device

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Measured:
    """One row of issue 29's learner table: ms per update on each device."""

    algo: str
    obs_dim: int
    num_outputs: int
    hidden: tuple[int, ...]
    batch: int
    cpu_ms: float  # one CPU thread (numpy flat path for DQN)
    cuda_ms: float  # torch eager on the H200


MEASURED = (
    Measured("dqn", 4, 2, (64, 64), 128, cpu_ms=0.172, cuda_ms=1.385),
    Measured("dqn", 4, 2, (1024, 1024, 1024), 256, cpu_ms=53.6, cuda_ms=1.352),
    Measured("td3", 17, 6, (256, 256), 256, cpu_ms=6.13, cuda_ms=4.14),
    Measured("sac", 17, 6, (256, 256), 256, cpu_ms=9.13, cuda_ms=7.47),
)


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
    forward, a backward costs two forwards; biases and activations left out).

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


def _case_mflop(m: Measured) -> float:
    return update_mflop(m.algo, m.obs_dim, m.num_outputs, m.hidden, m.batch)


@dataclass(frozen=True)
class CostModel:
    """Predicted ms per update on each device for one algorithm."""

    cpu_fixed_ms: float
    cpu_gflops: float  # MFLOP per ms = GFLOP/s
    cuda_ms: float
    source: str

    def cpu_ms(self, mflop: float) -> float:
        return self.cpu_fixed_ms + mflop / self.cpu_gflops

    def predict(self, mflop: float) -> tuple[float, float]:
        return self.cpu_ms(mflop), self.cuda_ms


def _fit(algo: str) -> CostModel:
    """The algorithm's constants from its MEASURED rows: a line through two CPU points
    (fixed cost + rate), or the rate alone through one; the slowest CUDA time."""
    rows = sorted((m for m in MEASURED if m.algo == algo), key=_case_mflop)
    if len(rows) >= 2:
        (f0, t0), (f1, t1) = ((_case_mflop(m), m.cpu_ms) for m in (rows[0], rows[-1]))
        rate = (f1 - f0) / (t1 - t0)
        fixed = max(t0 - f0 / rate, 0.0)
    else:
        fixed, rate = 0.0, _case_mflop(rows[0]) / rows[0].cpu_ms
    cuda = max(m.cuda_ms for m in rows)
    return CostModel(fixed, rate, cuda, f"{algo}'s constants, measured on an H200")


def _costs() -> dict[str, CostModel]:
    measured = {algo: _fit(algo) for algo in ("dqn", "td3", "sac")}
    # Not measured: borrow the closest measured update. DDPG is TD3 without its extras;
    # D4PG's categorical projection adds ops like SAC's sampling; the on-policy minibatch
    # step and the CNN Q-network run torch's autograd path like TD3 (no numpy update).
    borrowed = {"ddpg": "td3", "d4pg": "sac", "ppo": "td3", "appo": "td3", "a2c": "td3"}
    costs = dict(measured)
    for algo, lender in borrowed.items():
        costs[algo] = replace(measured[lender], source=f"{lender}'s constants, not measured")
    costs["dqn-cnn"] = CostModel(
        0.0, measured["td3"].cpu_gflops, measured["dqn"].cuda_ms,
        "td3's CPU rate and dqn's CUDA time, not measured",
    )  # fmt: skip
    return costs


COSTS = _costs()


@dataclass(frozen=True)
class DeviceChoice:
    """The device the learner trains on, why, and (for auto) the predicted ms per update."""

    device: str
    reason: str
    cpu_ms: float | None = None
    cuda_ms: float | None = None


def choose_device(
    requested: str,
    algo: str,
    mflop: float,
    cuda_devices: int,
    world_size: int = 1,
    pixels: bool = False,
) -> DeviceChoice:
    """The rule: an explicit device is kept; `auto` takes CUDA only where a GPU exists, one
    learner runs, and the predicted CUDA update is cheaper than the CPU one."""
    check_learner_device(requested, "learner device")
    if requested != "auto":
        return DeviceChoice(requested, "asked for")
    if cuda_devices < 1:
        return DeviceChoice("cpu", "auto: no CUDA device here")
    if world_size > 1:
        return DeviceChoice("cpu", f"auto: {world_size} data-parallel learners stay on the CPU "
                            "(set ACTORQ_DEVICE=cuda:N per rank to use GPUs)")  # fmt: skip
    model = COSTS["dqn-cnn" if pixels and algo == "dqn" else algo]
    cpu_ms, cuda_ms = model.predict(mflop)
    device = "cuda" if cuda_ms < cpu_ms else "cpu"
    reason = (f"auto: {mflop:,.1f} MFLOP per update, predicted {cpu_ms:.3g} ms on 1 CPU "
              f"thread vs {cuda_ms:.3g} ms eager CUDA ({model.source})")  # fmt: skip
    return DeviceChoice(device, reason, cpu_ms, cuda_ms)


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


def learner_mflop(algo: str, spec: Any, config: Any) -> tuple[float, bool]:
    """(MFLOP of one update, pixels?) for the learner `algo` would build from `spec`.

    CNN specs count their convolutions and head, times DQN's five forward-equivalents
    per sample. On-policy
    configs have no batch size (segments decide it): 256 rows are assumed."""
    from actorq.models.cnn import CNNSpec

    batch = int(getattr(config, "batch_size", 0) or 256)
    if isinstance(spec, CNNSpec):
        return 5.0 * _cnn_forward_flops(spec) * batch / 1e6, True
    mflop = update_mflop(
        algo, spec.obs_dim, spec.num_outputs, tuple(spec.hidden), batch,
        policy_delay=int(getattr(config, "policy_delay", 2)),
        num_atoms=int(getattr(config, "num_atoms", 51)),
    )  # fmt: skip
    return mflop, False


def _cnn_forward_flops(spec: Any) -> float:
    """Multiply-add FLOPs of one sample through the CNN (valid convolutions, then the MLP
    head), from its spec alone."""
    c, h, w = spec.obs_shape
    flops = 0.0
    for out, k, stride in spec.convs:
        h, w = (h - k) // stride + 1, (w - k) // stride + 1
        flops += 2.0 * out * c * k * k * h * w
        c = out
    return flops + 2.0 * _mlp_weights([c * h * w, *spec.hidden, spec.num_outputs])


def resolve_device(
    requested: str, algo: str, spec: Any, config: Any, world_size: int = 1,
    cuda: CudaInfo | None = None,
) -> DeviceChoice:  # fmt: skip
    """The learner service's device: `auto` by `choose_device`, an explicit one checked
    against what torch sees (ConfigError naming both when it is not there)."""
    cuda = CudaInfo.probe() if cuda is None else cuda
    check_available(requested, cuda)
    if requested != "auto":
        return choose_device(requested, algo, 0.0, cuda.count, world_size)
    mflop, pixels = learner_mflop(algo, spec, config)
    return choose_device("auto", algo, mflop, cuda.count, world_size, pixels)


def resolve_settings_device(settings: Any, config: Any) -> DeviceChoice:
    """Resolve the learner service's ACTORQ_DEVICE in place (`auto` becomes the chosen
    device) and log the choice with its reason; ConfigError when the device is missing."""
    spec = None
    if settings.device == "auto":  # only auto needs the network's size
        from actorq.algos.factory import policy_spec

        spec = policy_spec(settings.env_id, settings.algo, settings.hidden, config)
    choice = resolve_device(settings.device, settings.algo, spec, config, settings.world_size)
    settings.device = choice.device
    log.info("learner device %s (%s)", choice.device, choice.reason)
    return choice
