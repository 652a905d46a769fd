"""numba kernels of the actor's fast path (actorq.actor.fast_act); imported only with numba.

Cached on disk next to this file, as actorq.replay.sumtree's kernels are.
"""

from __future__ import annotations

import math

import numba
import numpy as np


@numba.njit(cache=True, nogil=True)
def epsilon_greedy_into(q, u, epsilon, action_scale, logp_greedy, logp_other, taken, greedy,
                        logp):  # fmt: skip
    """`EpsilonGreedy.__call__` for draws u [M], written into taken, greedy and logp [M].

    Row i explores when u < epsilon[i], taking floor(min(u * A / epsilon, A - 1)); greedy
    is numpy's argmax (the first maximum; the first NaN if any)."""
    m, num_actions = q.shape
    for i in range(m):
        g = _argmax(q[i])
        a = g
        if u[i] < epsilon[i]:
            a = np.int64(min(u[i] * action_scale[i], num_actions - 1))
        greedy[i] = g
        taken[i] = a
        logp[i] = logp_greedy[i] if a == g else logp_other[i]


@numba.njit(cache=True, nogil=True)
def _argmax(row):
    best, index = row[0], 0
    if math.isnan(best):
        return 0
    for j in range(1, row.shape[0]):
        v = row[j]
        if math.isnan(v):
            return j
        if v > best:
            best, index = v, j
    return index


def warm_up() -> None:
    """Load (or compile) the kernel for the actor's argument types."""
    f32, f64, i64 = np.float32, np.float64, np.int64
    epsilon_greedy_into(np.zeros((1, 2), f32), np.zeros(1, f64), np.ones(1, f64),
                        np.ones(1, f64), np.zeros(1, f32), np.zeros(1, f32),
                        np.zeros(1, i64), np.zeros(1, i64), np.zeros(1, f32))  # fmt: skip
