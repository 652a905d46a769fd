"""Update paths of a learner: which runner calls the algorithm's one `step`.

- torch-eager: the algorithm's own `update`, calling `step` eagerly;
- numpy-flat: DQN's update in numpy (actorq.algos.dqn_flat), CPU only, DQN's default
  where it applies;
- cuda-graph: `step` captured once per static flag as a torch.cuda.CUDAGraph, replayed;
- compiled: torch.compile of `step` (optional, needs inductor; never the default).
`apply_update_path(algo, path)` switches a learner without changing `update`'s signature
or result. `CapturedUpdate.submit` + `drain` avoid a host sync per update (`lagged_td`
gives prioritized replay's |TD| one update late).
"""

from __future__ import annotations

import functools
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from actorq.algos.capture_steps import Program, Readback, program_for
from actorq.algos.dqn_flat import FlatDQNUpdate, flat_unsupported
from actorq.algos.feed import BatchFeeder, DeviceReplay

UPDATE_PATHS = ("numpy-flat", "torch-eager", "cuda-graph", "compiled")
_ATTR = "_captured_update"


# Paths that run on one torch thread whatever ACTORQ_TORCH_THREADS says. numpy-flat's only
# torch ops (Adam's fused kernel and the target sync over the flat buffers) gain nothing
# from a second OpenMP thread, which spins beside them: DQN 64x64 with 2 torch threads
# took 0.147 ms per update for 0.297 ms of CPU, against 0.129 ms for 0.129 ms on one
# (BENCHMARKS.md 21d).
ONE_THREAD_PATHS = frozenset({"numpy-flat"})


def torch_threads_for(path: str, requested: int) -> int:
    """The torch thread count a learner on `path` runs with: 1 on ONE_THREAD_PATHS, else
    `requested` (ACTORQ_TORCH_THREADS)."""
    return 1 if path in ONE_THREAD_PATHS else requested


def default_update_path(algo: Any) -> str:
    """The path `make_algorithm` puts an algorithm on: numpy-flat where it applies (DQN on
    the CPU), torch-eager (the algorithm's own update) otherwise."""
    return "numpy-flat" if flat_unsupported(algo) is None else "torch-eager"


def use_default_path(algo: Any) -> Any:
    """Put a fresh `algo` on its default path; returns it."""
    if default_update_path(algo) != "torch-eager":
        install_runner(algo, default_update_path(algo))
    return algo


def _unsupported(algo: Any) -> str | None:
    """Why the captured step cannot run for `algo`, or None when it can."""
    try:
        program_for(algo)
    except ValueError as exc:
        return str(exc)
    if getattr(algo, "obs_rms", None) is not None:
        return "obs_norm updates running statistics on the host every batch"
    if getattr(algo, "grad_sync", None) is not None:
        return "data-parallel learners all-reduce gradients between backward and step"
    if any(o._optimizer_step_pre_hooks or o._optimizer_step_post_hooks for o in algo.optimizers()):
        # The step calls the fused kernel directly: hooks (RLx2's mask re-application)
        # would not run.
        return "an optimizer has step hooks (RLx2 sparse training) the captured step skips"
    return None


def _compile_works(device: torch.device) -> bool:
    if device.type == "cuda":
        return True
    return any(shutil.which(cc) for cc in ("cc", "gcc", "clang"))  # inductor's CPU backend


def available_update_paths(algo: Any) -> tuple[str, ...]:
    """The paths this algorithm object can take on its device, in UPDATE_PATHS order."""
    paths = ["torch-eager"]
    if flat_unsupported(algo) is None:
        paths.append("numpy-flat")
    if _unsupported(algo) is None:
        device = algo.device
        if device.type == "cuda" and torch.cuda.is_available():
            paths.append("cuda-graph")
        if _compile_works(device):
            paths.append("compiled")
    return tuple(p for p in UPDATE_PATHS if p in paths)


def captured_runner(algo: Any) -> CapturedUpdate | None:
    """The CapturedUpdate behind `algo.update` (None on the default path); on-policy
    learners are left out: their update is a whole batch of minibatch steps."""
    runner = algo.__dict__.get(_ATTR)
    if isinstance(runner, CapturedUpdate) and runner.program.counts_updates:
        return runner
    return None


def current_update_path(algo: Any) -> str:
    runner = algo.__dict__.get(_ATTR)
    return runner.path if runner is not None else "torch-eager"


def apply_update_path(algo: Any, path: str, readback_every: int = 64) -> str:
    """Switch `algo` to `path` (torch-eager: its own update again); returns the path."""
    available = available_update_paths(algo)
    if path not in available:
        known = "unknown" if path not in UPDATE_PATHS else "not available"
        why = _unsupported(algo)
        raise ValueError(
            f"update path {path!r} is {known} for {type(algo).__name__} on {algo.device}; "
            f"available: {', '.join(available)}" + (f" ({why})" if why else "")
        )
    _remove(algo)
    if path != "torch-eager":
        install_runner(algo, path, readback_every)
    return path


def install_runner(algo: Any, path: str, readback_every: int = 64) -> Any:
    """Put `path`'s runner behind `algo.update`; for torch-eager a CapturedUpdate that calls
    the step eagerly (tests and bench_learner compare it with the algorithm's own update)."""
    _remove(algo)
    if path == "numpy-flat":
        flat = algo.__dict__[_ATTR] = FlatDQNUpdate(algo)
        algo.update = flat.update
        return flat
    runner = CapturedUpdate(algo, path, readback_every=readback_every)  # k=1: one batch
    algo.__dict__[_ATTR] = runner
    # An instance attribute shadows the class's update: same signature, same result.
    on_policy = not runner.program.counts_updates
    algo.update = functools.partial(_onpolicy_update, runner) if on_policy else runner.update
    return runner


def _remove(algo: Any) -> None:
    if algo.__dict__.pop(_ATTR, None) is None:
        return
    algo.__dict__.pop("update", None)
    for opt in algo.optimizers():
        forget = getattr(opt, "forget_state_lists", None)
        if forget is not None:
            forget()  # FastAdam's cached lists may hold state a runner replaced


@dataclass(frozen=True)
class CapturedResult:
    """One update's readback: the fields of UpdateResult (and actor_loss where there is one)."""

    loss: float
    q_mean: float
    td_abs: np.ndarray
    grad_norm: float
    actor_loss: float = float("nan")


class CapturedUpdate:
    """Runs an algorithm's capturable step on one of the paths, K updates per call."""

    def __init__(self, algo: Any, path: str, readback_every: int = 64, k: int = 1) -> None:
        if path not in ("torch-eager", "cuda-graph", "compiled"):
            raise ValueError(
                f"CapturedUpdate runs torch-eager, cuda-graph or compiled, got {path!r}"
            )
        if readback_every < k or k < 1:
            raise ValueError(
                f"need 1 <= k <= readback_every, got k={k}, readback_every={readback_every}"
            )
        self.algo, self.path, self.k, self.slots = algo, path, k, readback_every
        self.device: torch.device = algo.device
        self._tensor_lr = path != "torch-eager" or self.device.type == "cuda"
        self._fused = path != "compiled"  # no fake kernel of the fused op for torch.compile
        self.program: Program = program_for(algo)(algo, k, self._tensor_lr, self._fused)
        self.feeder: BatchFeeder | None = None
        self.out: Readback | None = None
        self._graphs: dict[tuple[bool, ...], Any] = {}
        self._written = 0  # updates written to the ring since the last drain
        self._slot = 0  # host mirror of the ring's device slot index
        self._drained: list[Any] = []
        self._td_copies: list[tuple[torch.Tensor, Any]] = []  # (pinned row, event), CUDA
        self.replay: DeviceReplay | None = None  # use_replay: sampling inside the step
        self._replay_gen: torch.Generator | None = None
        self._sampling = False
        self._call_rows = torch.arange(k, device=self.device)  # readback rows of one call

    # --- running ---------------------------------------------------------------------
    def submit(
        self, batches: Sequence[Mapping[str, Any]], weights: Sequence[Any] | None = None
    ) -> None:
        """Copy k batches into the static inputs and run k updates; no host sync."""
        if len(batches) != self.k:
            raise ValueError(f"submit takes k={self.k} batches, got {len(batches)}")
        weights = weights if weights is not None else [None] * self.k
        self._ensure_buffers(batches[0])
        assert self.feeder is not None
        self.feeder.put(batches, weights)
        self._submit_prepared()

    def _submit_prepared(self) -> None:
        """Run k updates on what the static inputs hold (or sample into them first)."""
        if getattr(self.algo, "grad_sync", None) is not None:  # set after the path was applied
            raise ValueError(
                f"{self.path}: data-parallel learners (grad_sync) need the default update path"
            )
        if not all(o.current() for o in self.program.opts):  # load_state_dict replaced them
            self.program = type(self.program)(self.algo, self.k, self._tensor_lr, self._fused)
            self._graphs.clear()
        if self._written + self.k > self.slots:
            self._drain_into_host()
        first = self.algo.num_updates + 1
        flags = tuple(self.program.flag(first + i) for i in range(self.k))
        self._set_lrs(first)
        self._run(flags)
        if self.program.counts_updates:
            self.algo.load_counters(self.algo.num_updates + self.k)
        self._written += self.k
        self._slot = (self._slot + self.k) % self.slots
        self._queue_td_copy()

    def use_replay(
        self, replay: DeviceReplay, batch_size: int, generator: torch.Generator | None = None
    ) -> None:
        """Sample from a device-resident ring inside the step: `submit_sampled` then runs k
        updates (sampling included, one graph replay on cuda-graph) without any batch
        crossing from the host."""
        example = {
            key: np.zeros(
                (batch_size, *col.shape[1:]), np.int64 if col.dtype == torch.int64 else np.float32
            )
            for key, col in replay.columns.items()
        }
        self._ensure_buffers(example)
        self.replay, self._replay_gen = replay, generator

    def submit_sampled(self) -> None:
        """k updates on batches drawn from the ring given to `use_replay`; no host sync."""
        if self.replay is None:
            raise ValueError("submit_sampled needs use_replay(...) first")
        if self.replay.size == 0:
            raise ValueError("submit_sampled: the device replay ring is empty")
        self._sampling = True
        try:
            self._submit_prepared()
        finally:
            self._sampling = False

    @property
    def pending(self) -> int:
        """Updates submitted since the last drain."""
        return self._written + len(self._drained)

    def update(self, batch: Mapping[str, Any], weights: Any = None) -> CapturedResult:
        """The algorithm's update API (k == 1): one update, its result read back at once."""
        self.submit([batch], [weights])
        return self.drain()[-1]

    def drain(self) -> list[CapturedResult]:
        """Results of every update since the last drain, oldest first (one host sync)."""
        self._drain_into_host()
        out, self._drained = self._drained, []
        return out

    def lagged_td(self) -> np.ndarray | None:
        """|TD errors| of the previous submit's last update (None after the first), for
        priorities one update late; on CUDA it waits for that update only (a pinned copy
        queued behind it), while the current one runs."""
        if len(self._td_copies) < 2:
            return None
        row, event = self._td_copies[0]
        if event is not None:
            event.synchronize()
        return row.numpy().copy()

    # --- internals -------------------------------------------------------------------
    def _ensure_buffers(self, batch: Mapping[str, Any]) -> None:
        rows = len(batch[self.program.keys[1]])  # numpy arrays or device tensors (PPO)
        if self.feeder is not None and self.feeder.rows == rows:
            return
        self.feeder = BatchFeeder(self.program.keys, batch, self.k, self.device)
        self.out = Readback(self.program.names, self.slots, rows, self.device)
        self._graphs.clear()
        self._written, self._slot, self._drained, self._td_copies = 0, 0, [], []

    def _set_lrs(self, first: int) -> None:
        changed = False
        for i in range(self.k):
            self.program.prepare(first + i)
            changed = any([o.set_lr(i) for o in self.program.opts]) or changed
        if changed and self._tensor_lr:
            for o in self.program.opts:
                o.push_lr()

    def _steps(self, flags: tuple[bool, ...], sampling: bool = False) -> None:
        assert self.feeder is not None and self.out is not None
        drawn = None
        if sampling:
            assert self.replay is not None
            drawn = self.replay.sample_into(self.feeder, self._replay_gen)
        for i, flag in enumerate(flags):
            self.program.step(self.feeder.device_view(i), self.out, flag, i)
        if drawn is not None:  # this call's |TD errors|: the k rows the steps just wrote
            assert self.replay is not None
            rows = (self.out.slot - len(flags) + self._call_rows) % self.slots
            self.replay.after_steps(drawn, self.out.td.index_select(0, rows))

    def _run(self, flags: tuple[bool, ...]) -> None:
        sampling = self._sampling
        if self.path == "torch-eager":
            self._steps(flags, sampling)
            return
        key = (sampling, *flags)
        fn = self._graphs.get(key)
        if fn is None:
            fn = self._graphs[key] = self._build(flags, sampling)
            if self.path == "cuda-graph":
                return  # _build ran this update for real after capturing
        fn()

    def _build(self, flags: tuple[bool, ...], sampling: bool) -> Any:
        if self.path == "compiled":
            mode = "reduce-overhead" if self.device.type == "cuda" else None
            return torch.compile(lambda: self._steps(flags, sampling), mode=mode, dynamic=False)
        return self._capture(flags, sampling)

    def _capture(self, flags: tuple[bool, ...], sampling: bool) -> Any:
        state = self.program.state_tensors() + (self.out.tensors() if self.out else [])
        gens = self.program.generators()
        if sampling and self.replay is not None:
            state += self.replay.state_tensors()  # priorities the warm-up rewrites
            if self._replay_gen is not None:
                gens.append(self._replay_gen)
        # The default generator needs no registration (graphs handle it) but its warm-up
        # draws are undone too.
        undo = [_default_generator(self.device)] if sampling else []
        return capture_graph(
            lambda: self._steps(flags, sampling), state, gens, undo, type(self.algo).__name__
        )

    def _drain_into_host(self) -> None:
        if not self._written or self.out is None:
            return
        n, slots = self._written, self.slots
        rows = [(self._slot - n + j) % slots for j in range(n)]
        stats = self.out.stats.cpu().numpy()  # the one host sync of a drain
        td = self.out.td.cpu().numpy()
        names = self.out.names
        for r in rows:
            values = dict(zip(names, (float(v) for v in stats[r]), strict=True))
            self._drained.append(_result(values, td[r].copy()))
        self._written = 0

    def _queue_td_copy(self) -> None:
        assert self.out is not None
        row = self.out.td[(self._slot - 1) % self.slots]
        if self.device.type == "cuda":
            pinned = (
                self._td_copies.pop(0)[0]
                if len(self._td_copies) == 2
                else torch.empty(row.shape, dtype=row.dtype).pin_memory()
            )
            pinned.copy_(row, non_blocking=True)
            event = torch.cuda.Event()
            event.record()
            self._td_copies.append((pinned, event))
        else:
            self._td_copies = [*self._td_copies[-1:], (row.clone(), None)]


def capture_graph(
    run: Any,
    state: list[torch.Tensor],
    gens: list[torch.Generator],
    undo_gens: list[torch.Generator],
    name: str,
) -> Any:
    """Warm `run` up on a side stream, undo the warm-up (every tensor of `state`, the draws
    of `gens` and `undo_gens`), capture it as a CUDA graph with `gens` registered, replay
    once (capture only records: that replay is the real run); returns the graph's replay."""
    saved = [t.detach().clone() for t in state]
    restore = [*gens, *undo_gens]
    gen_states = [g.get_state() for g in restore]
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):  # autograd and cuBLAS allocate their workspaces here
            run()
    torch.cuda.current_stream().wait_stream(side)
    with torch.no_grad():
        for t, s in zip(state, saved, strict=True):
            t.copy_(s)
    for g, s in zip(restore, gen_states, strict=True):
        g.set_state(s)
    graph = torch.cuda.CUDAGraph()
    if gens and not hasattr(graph, "register_generator_state"):
        raise RuntimeError(
            f"cuda-graph for {name} needs torch >= 2.5 "
            f"(CUDAGraph.register_generator_state), this is torch {torch.__version__}"
        )
    for g in gens:  # a non-default generator must be known to the graph (TD3/SAC noise)
        graph.register_generator_state(g)
    # thread_local: CUDA work of other threads (a publisher) is not an error meanwhile.
    with torch.cuda.graph(graph, capture_error_mode="thread_local"):
        run()
    graph.replay()
    return graph.replay


def _default_generator(device: torch.device) -> torch.Generator:
    index = device.index if device.index is not None else torch.cuda.current_device()
    return torch.cuda.default_generators[index]


def _result(values: dict[str, float], td: np.ndarray) -> Any:
    if "q_mean" in values:
        return CapturedResult(
            loss=values["loss"],
            q_mean=values["q_mean"],
            td_abs=td,
            grad_norm=values["grad_norm"],
            actor_loss=values.get("actor_loss", float("nan")),
        )
    return values  # on-policy minibatch rows: `_onpolicy_update` averages them


def _onpolicy_update(runner: CapturedUpdate, batch: Mapping[str, Any], weights: Any = None) -> Any:
    """OnPolicyLearner.update with each minibatch step run by `runner` and one readback
    for all of them at the end."""
    from actorq.algos.ppo import OnPolicyUpdate

    algo = runner.algo
    flat, stats = algo.prepare(batch)
    for minibatch in algo.minibatches(flat):
        runner.submit([minibatch])
    algo.load_counters(algo.num_updates + 1)
    rows: list[Any] = runner.drain()
    names = runner.program.names
    mean = np.mean(np.array([[r[n] for n in names] for r in rows]), axis=0)
    loss, policy_loss, value_loss, entropy, grad_norm = (float(x) for x in mean)
    return OnPolicyUpdate(loss, policy_loss, value_loss, entropy, grad_norm, ratios=stats)
