"""The learner's start-up measurement behind `auto`: a few dozen warm updates of the run's
own learner on each candidate device and update path, timed by the wall clock.

Each candidate ("device/path") gets a fresh learner built as the service builds it
(`make_algorithm` with the run's algorithm, network spec, config and seed, then the path
applied) and random batches of the run's batch size (actorq.testing.batches: flat or pixel
replay batches; for the on-policy algorithms one update's time-major segments). After
`WARMUP` updates (allocations, a CUDA graph's capture) the candidates take turns timing
the same number of updates (`CHUNK`, fewer where one is slow), so that load from the
services starting beside the learner falls on all of them alike. A candidate's time is its
fastest turn: load only ever adds time (a turn the scheduler preempted), and beside 32
starting actors on 2 cores the median turns read ~6x the unloaded times and one run
trained at torch-eager's rate instead of numpy-flat's (BENCHMARKS.md 21c). Turns stop
after `ROUNDS`, or once `seconds` have passed since the measurement began (one turn each
at least), so a measurement costs about `seconds` plus two updates of each candidate.
Updates run as the learner loop runs them: a captured path through `submit`, its results
drained in batches; the host->device copy of each batch is included and CUDA is
synchronized before each clock read. Each path runs on the torch thread count the service
gives it (`torch_threads_for`: numpy-flat on one, the others on ACTORQ_TORCH_THREADS).

The measured learners are thrown away: the service builds its own from the same seed.
Learners seed a private RNG fork, and the measurement runs inside one too, so the
weights a run starts from do not depend on whether or what was measured.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from actorq.algos.capture import (
    apply_update_path,
    available_update_paths,
    captured_runner,
    current_update_path,
    torch_threads_for,
)

WARMUP = 5  # updates before timing: allocations, a graph capture, Adam's first step
CHUNK = 8  # updates per timed turn
ROUNDS = 8  # turns per candidate: CHUNK x ROUNDS = 64 timed updates at most
SECONDS = 2.0  # the whole measurement's budget; CartPole's DQN takes a few tens of ms


@dataclass(frozen=True)
class LearnerRecipe:
    """What the learner service builds: the algorithm, its network spec (MLPSpec or
    CNNSpec), its config and the seed."""

    algo: str
    spec: Any
    config: Any
    seed: int = 0

    def build(self, device: str) -> Any:
        """A fresh learner on `device`, as actorq.learner.loop._algorithm builds it."""
        from actorq.algos.factory import make_algorithm

        s = self.spec
        return make_algorithm(
            self.algo, s.obs_dim, s.num_outputs, tuple(s.hidden), self.config,
            device=device, seed=self.seed, spec=s,
        )  # fmt: skip

    def batches(self, n: int = 4) -> list[dict[str, np.ndarray]]:
        """`n` random batches of the run's shape. On-policy: one update's segments,
        [--unroll steps, segments_per_update x ACTORQ_ENVS_PER_ACTOR envs] at `actorq
        run`'s defaults (the learner is not told the actors' T or env count)."""
        from actorq.algos.factory import is_on_policy
        from actorq.config import ActorSettings
        from actorq.config_run import RunSettings
        from actorq.models.cnn import CNNSpec
        from actorq.testing.batches import random_segment_batches, random_update_batches

        spec = self.spec
        obs = spec.obs_shape if isinstance(spec, CNNSpec) else spec.obs_dim  # pixels: C, H, W
        if is_on_policy(self.algo):
            envs = int(self.config.segments_per_update) * ActorSettings.envs_per_actor
            return random_segment_batches(obs, spec.num_outputs, RunSettings.unroll, envs, n)
        nstep = 1 if int(getattr(self.config, "n_step", 1)) > 1 else 0  # rows carry `steps`
        return random_update_batches(
            self.algo, obs, spec.num_outputs, int(self.config.batch_size), n, nstep_every=nstep
        )


@dataclass
class Measurement:
    """ms per update of each candidate that ran, and why the others did not."""

    candidates: list[str] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)


def wanted_paths(offered: Sequence[str], requested: str) -> list[str]:
    """The paths to measure among those a learner offers: the requested one alone, or for
    `auto` all but `compiled` (torch.compile takes tens of seconds before its first update)."""
    if requested != "auto":
        return [requested] if requested in offered else []
    return [p for p in offered if p != "compiled"]


class _Trial:
    """One candidate's learner, stepped as the learner loop steps it."""

    def __init__(
        self, key: str, learner: Any, batches: list[dict[str, np.ndarray]], threads: int
    ) -> None:
        self.key, self.learner, self.batches = key, learner, batches
        self.threads = threads  # torch's thread count on this path, as the service sets it
        self.cuda = learner.device.type == "cuda"
        self.runner = captured_runner(learner)  # None: the learner's own `update`
        self.done = 0
        self.chunk = CHUNK
        self.turns: list[float] = []  # ms per update of each timed turn

    def run(self, n: int) -> None:
        """`n` updates, then every pending result read back and the GPU idle."""
        for _ in range(n):
            batch = self.batches[self.done % len(self.batches)]
            self.done += 1
            if self.runner is None:
                self.learner.update(batch)
                continue
            self.runner.submit([batch])
            if self.runner.pending >= self.runner.slots:
                self.runner.drain()
        if self.runner is not None and self.runner.pending:
            self.runner.drain()
        if self.cuda:
            torch.cuda.synchronize(self.learner.device)

    def warm_up(self, seconds: float) -> None:
        """WARMUP updates, fewer when they take over `seconds` (one at least); the last
        one's time sets the turn size, so that ROUNDS turns fit in about `seconds` too."""
        torch.set_num_threads(self.threads)
        started = before = time.perf_counter()
        for _ in range(WARMUP):
            before = time.perf_counter()
            self.run(1)
            if time.perf_counter() - started >= seconds:
                break
        last = time.perf_counter() - before
        self.chunk = max(1, min(CHUNK, int(seconds / ROUNDS / max(last, 1e-6))))

    def turn(self) -> None:
        torch.set_num_threads(self.threads)  # outside the clock
        started = time.perf_counter()
        self.run(self.chunk)
        self.turns.append((time.perf_counter() - started) / self.chunk * 1e3)

    def ms(self) -> float:
        return min(self.turns)


def measure(
    recipe: LearnerRecipe,
    devices: Sequence[str],
    requested_path: str = "auto",
    torch_threads: int = 1,
    seconds: float = SECONDS,
    time_alone: bool = False,
) -> Measurement:
    """Time every (device, path) candidate: the paths `wanted_paths` keeps of those the
    learner offers on each of `devices`. A single candidate is listed, not timed (there is
    nothing to choose between), unless `time_alone`."""
    started = time.perf_counter()
    result = Measurement()
    cuda = any(d.startswith("cuda") for d in devices)
    with _isolated(cuda, torch_threads):
        trials = _trials(recipe, devices, requested_path, result, torch_threads)
        result.candidates = [t.key for t in trials]
        if len(trials) > 1 or time_alone:
            _time(trials, result, started + seconds)
        del trials
        if cuda:
            torch.cuda.empty_cache()  # the measured learners' blocks go back to the GPU
    return result


def _trials(
    recipe: LearnerRecipe,
    devices: Sequence[str],
    requested: str,
    result: Measurement,
    torch_threads: int,
) -> list[_Trial]:
    """A learner per candidate, on its path (the first path of a device reuses the learner
    built to ask which paths it offers)."""
    batches = recipe.batches()
    trials = []
    for device in devices:
        try:
            spare: Any = recipe.build(device)
        except Exception as exc:  # one device failing must not hide the others
            result.failed[device] = _why(exc)
            continue
        for path in wanted_paths(available_update_paths(spare), requested):
            key = f"{device}/{path}"
            try:
                learner = spare if spare is not None else recipe.build(device)
                spare = None
                if path != current_update_path(learner):
                    apply_update_path(learner, path)
                threads = torch_threads_for(path, torch_threads)
                trials.append(_Trial(key, learner, batches, threads))
            except Exception as exc:  # nor one path the others
                result.failed[key] = _why(exc)
    return trials


def _time(trials: list[_Trial], result: Measurement, deadline: float) -> None:
    """Warm every trial up, then timed turns in rounds until ROUNDS or the deadline."""
    share = max(deadline - time.perf_counter(), 0.0) / max(len(trials), 1)
    live = [t for t in trials if _attempt(t, result, lambda t: t.warm_up(share / 2))]
    # One turn size for all: the fastest of short turns and of long ones are not comparable
    # (a shorter turn is less often preempted).
    chunk = min((t.chunk for t in live), default=CHUNK)
    for trial in live:
        trial.chunk = chunk
    for round_ in range(ROUNDS):
        if round_ and time.perf_counter() >= deadline:
            break
        live = [t for t in live if _attempt(t, result, _Trial.turn)]
    result.timings = {t.key: t.ms() for t in live if t.turns}


def _attempt(trial: _Trial, result: Measurement, step: Any) -> bool:
    """Run `step(trial)`; False (and the failure recorded) when it raises."""
    try:
        step(trial)
        return True
    except Exception as exc:  # a path that fails here is left out, not fatal
        result.failed[trial.key] = _why(exc)
        return False


def _why(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"[:200]


@contextlib.contextmanager
def _isolated(cuda: bool, torch_threads: int) -> Iterator[None]:
    """Measure on the learner's torch thread count (each trial sets its path's own) and
    leave the caller's thread count and torch and numpy RNG states as they were."""
    threads, numpy_state = torch.get_num_threads(), np.random.get_state()
    torch.set_num_threads(torch_threads)
    try:
        with torch.random.fork_rng(devices=[torch.cuda.current_device()] if cuda else []):
            yield
    finally:
        torch.set_num_threads(threads)
        np.random.set_state(numpy_state)
