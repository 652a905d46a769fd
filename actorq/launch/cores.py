"""Cores of its own for the CPU learner of `actorq run`.

On one machine at the default replay ratio the learner sets the pace of the whole run.
Left to the scheduler, actors, the evaluator, the quantizer and Redis run on the
learner's core in turn with its updates (hundreds of involuntary context switches a
second on 2 cores), so its updates take longer than they do alone. With `--pin-learner
on` each learner rank gets its own cores (ACTORQ_TORCH_THREADS of them) and every other
process of the run the rest (BENCHMARKS 20): +27-35% DQN updates/s on 2 cores where the
learner sets the pace, but -16% env steps/s where the actors do (the learner's core then
idles), hence opt-in.

It pins only a CPU learner (the GPU learner's host side is not measured), with replay
ingested on a thread (an ingest process would share the learner's core), and with at
least one core left for everything else.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from actorq.config import ConfigError, RunSettings
from actorq.launch.plan import _Cluster

PIN_MODES = ("on", "off")


@dataclass(frozen=True)
class CoreLayout:
    """Which cores each learner rank and the run's other processes may use."""

    learners: tuple[tuple[int, ...], ...]  # rank 0 first
    others: tuple[int, ...]

    def describe(self) -> str:
        ranks = "; ".join(_cores(c) for c in self.learners)
        return f"learner on core(s) {ranks}, other services on {_cores(self.others)}"

    def as_dict(self) -> dict[str, list]:
        return {"learners": [list(c) for c in self.learners], "others": list(self.others)}


def plan_cores(
    settings: RunSettings,
    learner_on_cpu: bool,
    allowed: set[int] | None = None,
    env: Mapping[str, str] | None = None,
) -> CoreLayout | None:
    """The layout `settings.pin_learner` asks for on the cores this process may use, or
    None (no pinning: `off`, or `auto` where it does not apply)."""
    if settings.pin_learner == "off":
        return None
    if not learner_on_cpu or settings.ingest == "process":
        return None
    cores = sorted(os.sched_getaffinity(0) if allowed is None else allowed)
    threads = _torch_threads(os.environ if env is None else env)
    wanted = settings.learners * threads
    if wanted >= len(cores):  # nothing would be left for actors, Redis and the quantizer
        return None
    # The learners take the highest-numbered cores: core 0 usually serves most interrupts.
    learner_cores = cores[len(cores) - wanted :]
    ranks = tuple(
        tuple(learner_cores[r * threads : (r + 1) * threads]) for r in range(settings.learners)
    )
    return CoreLayout(learners=ranks, others=tuple(cores[: len(cores) - wanted]))


def _torch_threads(env: Mapping[str, str]) -> int:
    text = env.get("ACTORQ_TORCH_THREADS", "1")
    try:
        threads = int(text)
    except ValueError:
        threads = 0
    if threads < 1:
        raise ConfigError(f"ACTORQ_TORCH_THREADS: expected an integer >= 1, got {text!r}")
    return threads


def _cores(cores: tuple[int, ...]) -> str:
    """`0-3,6` style, as taskset and /sys print core lists."""
    spans: list[list[int]] = []
    for core in cores:
        if spans and core == spans[-1][1] + 1:
            spans[-1][1] = core
        else:
            spans.append([core, core])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in spans)


def learner_on_cpu(settings: RunSettings, dev: Path = Path("/dev")) -> bool:
    """Whether the learner will train on the CPU: `cpu`, or `auto` where it cannot pick a
    GPU (no NVIDIA device node here, or several learners, which stay on the CPU under
    auto). Device nodes, not torch: the launcher imports no torch before the services
    start (tests/unit/test_startup_imports.py)."""
    if settings.learner_device == "cpu":
        return True
    if settings.learner_device != "auto":
        return False
    return settings.learners > 1 or not any(dev.glob("nvidia[0-9]*"))


def pin(cluster: _Cluster, layout: CoreLayout | None) -> None:
    """Put each planned service on its cores (started later, they start there)."""
    if layout is None:
        return
    for proc in cluster.all:
        proc.cpus = layout.others
    for proc, cores in zip(cluster.learners, layout.learners, strict=True):
        proc.cpus = cores
