"""Cores of its own for the CPU learner of `actorq run`.

On one machine at the default replay ratio the learner sets the pace of the whole run.
Left to the scheduler, actors, the evaluator, the quantizer and Redis run on the
learner's core in turn with its updates (hundreds of involuntary context switches a
second on 2 cores), so its updates take longer than they do alone. With `--pin-learner
on` each learner rank gets its own cores (ACTORQ_TORCH_THREADS of them) and every other
process of the run the rest (BENCHMARKS 20): +27-35% DQN updates/s on 2 cores where the
learner sets the pace, but -16 to -21% env steps/s where the actors do (the learner's
core then idles). `auto` starts as `on` and lets the other processes onto the learner's
cores while it mostly waits for data (`CoreSharing`), back off when it stops waiting.
Pinning the learner alone, the others free, gained little: exclusion is what pays.

It pins only a CPU learner (the GPU learner's host side is not measured), with at least
one core left for everything else. An ingest process (ACTORQ_INGEST=process) runs on the
other services' cores (ACTORQ_INGEST_CORES), not the learner's."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from actorq.config import ConfigError, RunSettings
from actorq.launch.plan import _Cluster
from actorq.procutil import INGEST_CORES_ENV, format_cores


@dataclass(frozen=True)
class CoreLayout:
    """Which cores each learner rank and the run's other processes may use."""

    learners: tuple[tuple[int, ...], ...]  # rank 0 first
    others: tuple[int, ...]

    def describe(self) -> str:
        ranks = "; ".join(format_cores(c) for c in self.learners)
        return f"learner on core(s) {ranks}, other services on {format_cores(self.others)}"

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
    if not learner_on_cpu:
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
        # An ingest process (ACTORQ_INGEST=process) joins the other services: on the
        # learner's core it would take turns with the updates it feeds.
        proc.env[INGEST_CORES_ENV] = format_cores(layout.others)


class CoreSharing:
    """`--pin-learner auto`: the learner keeps its cores; every other process gets them
    too while the learner mostly waits for data (actors set the pace: an idle learner
    core is then lost to them) and loses them again once the learner stops waiting.

    `observe` takes the learner's cumulative wait seconds at each poll of the launcher;
    the wait share over the last poll decides, after `patience` polls in a row past a
    threshold, so a warm-up or one slow poll does not flip it.
    """

    SHARE_ABOVE = 0.3  # the learner waited this share of the last poll: actors are short
    EXCLUDE_BELOW = 0.1  # it hardly waited: it sets the pace again

    def __init__(
        self,
        layout: CoreLayout,
        others: Callable[[], list[int]],  # pids of every process but the learners, now
        patience: int = 4,
        clock: Callable[[], float] = time.monotonic,
        set_cores: Callable[[int, tuple[int, ...]], None] | None = None,
    ) -> None:
        self.layout, self._others, self.patience, self._clock = layout, others, patience, clock
        self._set_cores = set_cores or set_process_cores
        self.everyone = tuple(sorted({*layout.others, *(c for r in layout.learners for c in r)}))
        self.exclusive = True  # as the processes start (ServiceProcess.cpus)
        self.switches = 0
        self._streak = 0
        self._last: tuple[float, float] | None = None  # (clock, wait seconds)
        self._applied: set[int] = set()

    def observe(self, wait_seconds: float) -> str | None:
        """Account one poll; a message when the sharing changed, else None."""
        now = self._clock()
        last, self._last = self._last, (now, wait_seconds)
        self._reapply()
        if last is None or now <= last[0] or wait_seconds < last[1]:  # first, or a restart
            return None
        share = (wait_seconds - last[1]) / (now - last[0])
        wants_change = share > self.SHARE_ABOVE if self.exclusive else share < self.EXCLUDE_BELOW
        self._streak = self._streak + 1 if wants_change else 0
        if self._streak < self.patience:
            return None
        self._streak, self.exclusive, self.switches = 0, not self.exclusive, self.switches + 1
        self._applied = set()
        self._reapply()
        if self.exclusive:
            return f"learner busy again: other services back on {format_cores(self.layout.others)}"
        return f"learner waited {share:.0%} of the last poll: other services on every core"

    def _reapply(self) -> None:
        """Put every process not yet placed in the current mode (new ones: restarts)."""
        cores = self.layout.others if self.exclusive else self.everyone
        pids = set(self._others())
        for pid in pids - self._applied:
            self._set_cores(pid, cores)
        self._applied = pids


def child_pids(pid: int) -> list[int]:
    """The live children of `pid` (every thread's /proc children list; [] once it is gone
    or where the kernel keeps no such list)."""
    children: list[int] = []
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/children") as listing:
                children += [int(c) for c in listing.read().split()]
    except OSError:
        pass
    return children


def set_process_cores(pid: int, cores: tuple[int, ...]) -> None:
    """Every thread of `pid` onto `cores` (sched_setaffinity takes one thread at a time;
    threads started later inherit it from the thread that starts them). A process or
    thread that is gone is skipped."""
    try:
        threads = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return
    for tid in threads:
        try:
            os.sched_setaffinity(int(tid), cores)
        except (ProcessLookupError, PermissionError):
            continue
