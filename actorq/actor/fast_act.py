"""The fast path in compiled calls: runners of the policy's forward, of `EpsilonGreedy`
and of `StepRecorder` (the one exploration and the one recording, actorq.actor.columns).

At CartPole's sizes the int8 forward is mostly the call overhead of ~8 torch ops and
`EpsilonGreedy` ~6 numpy calls: a third of a vector step (docs/actor-throughput.md).
With numba and scipy installed and `ACTORQ_FUSED_ACT=1` (default):
- `PolicyForward`: `actorq.quant.fused_mlp.FusedMLP`, built once per policy version;
  policies it cannot express or nets too large to pay (`FUSE_MAX_LAYER_WEIGHTS`) keep the
  torch module;
- `FusedEpsilonGreedy`: `EpsilonGreedy` in one numba call (same seed, same draws);
- `FusedRecorder`: `StepRecorder` in one numba call, for flat float32 observations.
Otherwise `EpsilonGreedy` and `StepRecorder` run, and the forward is numpy's
(`actorq.quant.numpy_mlp`, `ACTORQ_NUMPY_ACT=1`, default) for MLP policies up to 64 x 128
weights a layer, or torch's module (pixel policies, wider nets, `ACTORQ_NUMPY_ACT=0`): torch
is imported only for the last. Importing numba and
loading the cached kernels (~1-1.5 s) happen once in the zygote for every actor `actorq
run` forks (actorq.actor.preload); an actor started on its own (spawn mode, a container)
does it while it is built (`fast_acting`), before its loop's clock starts (BENCHMARKS.md
23l, 12e).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from typing import cast

import numpy as np

from actorq.actor.columns import EpsilonGreedy, StepColumns, StepRecorder
from actorq.actor.policy_follower import LoadedPolicy
from actorq.quant.numpy_mlp import numpy_mlp
from actorq.torch_threads import inherit_torch_threads


def fused_available(enabled: bool) -> bool:
    """Whether the compiled path runs: switched on, numba importable, and scipy too
    (numba's np.dot calls scipy's BLAS; scipy comes with the mujoco and atari extras,
    not with numba). Imported here, only when switched on."""
    if not enabled:
        return False
    try:
        with _one_blas_thread():
            import numba  # noqa: F401
            import scipy.linalg.cython_blas  # noqa: F401
    except ImportError:
        return False
    return True


@contextlib.contextmanager
def _one_blas_thread() -> Iterator[None]:
    """OPENBLAS_NUM_THREADS=1 while scipy's OpenBLAS loads, unless the user set it.

    The kernels' products are small and an actor is one thread by design (actors scale by
    processes): OpenBLAS's thread pool, one per actor, only fights the others (23j).
    OpenBLAS reads the variable once, when it loads; afterwards the process environment is
    as it was, so that what this process starts (and a zygote's forks, or pytest's later
    tests) does not inherit it."""
    set_here = "OPENBLAS_NUM_THREADS" not in os.environ
    if set_here:
        os.environ["OPENBLAS_NUM_THREADS"] = "1"
    try:
        yield
    finally:
        if set_here:
            os.environ.pop("OPENBLAS_NUM_THREADS", None)


class PolicyForward:
    """obs [M, ...] -> outputs [M, A] for a policy: numba's fused forward where it runs
    (`fused`), else numpy's for MLP policies (`numpy_act`), else torch's module."""

    def __init__(self, fused: bool, numpy_act: bool = True) -> None:
        self.fused, self.numpy_act = fused, numpy_act
        self._policy: LoadedPolicy | None = None
        self._call: Callable[[np.ndarray], np.ndarray] = _unset
        self.kind = "none"  # which path the current policy runs: fused, numpy, torch

    def __call__(self, policy: LoadedPolicy, obs: np.ndarray) -> np.ndarray:
        if policy is not self._policy:
            self._policy = policy
            self._call, self.kind = self._build(policy)
        return self._call(obs)

    def _build(self, policy: LoadedPolicy) -> tuple[Callable[[np.ndarray], np.ndarray], str]:
        # From the decoded arrays the version came as (None: only a module to run).
        arrays = policy.arrays
        if self.fused and arrays is not None:
            from actorq.quant.fused_mlp import fuse_mlp

            fused = fuse_mlp(arrays)
            if fused is not None:
                return fused, "fused"
        if self.numpy_act:  # the follower's, else built here (a policy made without one)
            forward = policy.numpy_forward or (numpy_mlp(arrays) if arrays is not None else None)
            if forward is not None:
                return forward, "numpy"
        return _torch_forward(policy.torch_module()), "torch"


def _unset(obs: np.ndarray) -> np.ndarray:
    raise RuntimeError("PolicyForward called before a policy was built")


def _torch_forward(module) -> Callable[[np.ndarray], np.ndarray]:
    import torch

    inherit_torch_threads(load=True)  # the thread that runs the ops: the loop's

    def forward(obs: np.ndarray) -> np.ndarray:
        # forward itself: Module.__call__'s hook checks cost ~4 us a call (no hooks here).
        with torch.inference_mode():
            return module.forward(torch.from_numpy(obs)).numpy()

    return forward


class FusedEpsilonGreedy(EpsilonGreedy):
    """`EpsilonGreedy` in one compiled call (actorq.actor.act_kernels).

    The uniforms come from one `rng.random` of DRAW_STEPS x M, handed out M per call: the
    same numbers in the same order as one `rng.random(M)` per call (PCG64 draws one word
    per double), while the generator runs up to a block ahead. The per-step draw was about
    half of the explore phase (BENCHMARKS.md 23l)."""

    DRAW_STEPS = 64

    def __init__(self, epsilon: np.ndarray, num_actions: int) -> None:
        super().__init__(epsilon, num_actions)
        from actorq.actor.act_kernels import epsilon_greedy_into

        self._kernel = epsilon_greedy_into
        m = len(self.epsilon)
        self._tables = np.stack(
            [self.epsilon, self.action_scale, self.logp_greedy, self.logp_other]
        ).astype(np.float64)  # float32 log-probs are exact in float64
        self._actions = np.empty((2, m), np.int64)
        self._logp = np.empty(m, np.float32)
        self._draws = np.empty((0, m))  # a block of uniforms, one row per call
        self._next, self._rng = 0, cast(np.random.Generator | None, None)

    def __call__(
        self, q_values: np.ndarray, rng: np.random.Generator
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(taken, greedy, log mu(taken)) in buffers reused by the next call: callers copy
        them before then (StepColumns.add_step and the recorder do)."""
        if self._next == len(self._draws) or rng is not self._rng:
            # A new generator starts a new block: the old one's draws are its own.
            self._draws = rng.random((self.DRAW_STEPS, len(self.epsilon)))
            self._next, self._rng = 0, rng
        u = self._draws[self._next]
        self._next += 1
        self._kernel(q_values, u, self._tables, self._actions, self._logp)
        return self._actions[0], self._actions[1], self._logp


class FusedRecorder(StepRecorder):
    """`StepRecorder` in one compiled call (actorq.actor.act_kernels.record_step): the
    seven column copies of the valid rows, the valid-row count and the episodes' running sums."""

    def __init__(self, pending: StepColumns, episodes) -> None:
        super().__init__(pending, episodes)
        from actorq.actor.act_kernels import record_step

        self._kernel, self.columns = record_step, pending

    def __call__(self, obs, taken, greedy, logp, step, version: int, env_steps: int) -> int:
        p, e = self.columns, self.episodes
        # C-ordered (the stepper's are: no copy), with the dtypes the kernel was warmed up
        # for (float32 or float64 rewards): no compile inside the loop.
        obs, next_obs = np.ascontiguousarray(obs), np.ascontiguousarray(step.next_obs)
        rewards: np.ndarray = np.asarray(step.rewards, _reward_dtype(step.rewards))
        done_at = e.reserve(p.num_envs)  # the ended episodes go straight to its columns
        valid, done = self._kernel(
            p.next_row(), obs, taken, rewards, next_obs,
            np.asarray(step.terminated, np.bool_), step.valid, greedy, logp, step.ended,
            p.obs, p.next_obs, p.action, p.reward, p.done, p.behaviour, p.logp,
            e.returns, e.lengths, e.columns["return"], e.columns["length"], done_at,
        )  # fmt: skip
        p.commit(valid)
        if done:
            e.commit_finished(done, version, env_steps + valid)
        return valid


def _reward_dtype(rewards: np.ndarray) -> type:
    return np.float32 if rewards.dtype == np.float32 else np.float64


def make_recorder(pending: StepColumns, episodes, enabled: bool) -> StepRecorder:
    """The compiled recorder for flat float32 observations when the kernels run (pixels
    and other dtypes keep the numpy one: one compiled signature, loaded before the loop)."""
    flat = len(pending.obs_shape) == 1 and pending.obs_dtype == np.float32
    fused = flat and fused_available(enabled)
    return (FusedRecorder if fused else StepRecorder)(pending, episodes)


def fast_acting(
    epsilon: np.ndarray, num_actions: int, enabled: bool, numpy_act: bool = True
) -> tuple[EpsilonGreedy, PolicyForward]:
    """The fast path's exploration and forward: compiled (kernels loaded now, before the
    loop's clock starts) when `enabled` and numba is installed, else numpy (and torch for
    what numpy does not run, `PolicyForward`)."""
    fused = fused_available(enabled)
    if fused:
        warm_up()
    explore = (FusedEpsilonGreedy if fused else EpsilonGreedy)(epsilon, num_actions)
    return explore, PolicyForward(fused, numpy_act)


def warm_up() -> None:
    """Import numba and load (or compile) the kernels, on a tiny net, before the loop."""
    from actorq.actor.act_kernels import warm_up as warm_explore
    from actorq.quant.fused_mlp import warm_up as warm_forward

    warm_forward()
    warm_explore()
