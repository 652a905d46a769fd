"""numba kernels of the actor's fast path (actorq.actor.fast_act); imported only with numba.

Cached on disk next to this file, as actorq.replay.sumtree's kernels are.
"""

from __future__ import annotations

import math

import numba
import numpy as np


@numba.njit(cache=True, nogil=True)
def epsilon_greedy_into(q, u, tables, actions, logp):
    """`EpsilonGreedy.__call__` for draws u [M]; tables [4, M]: epsilon, A / epsilon,
    log-probs of the greedy action and of any other. Writes actions [2, M] (taken, greedy)
    and logp [M]; greedy is numpy's argmax (the first maximum, or the first NaN)."""
    m, num_actions = q.shape
    for i in range(m):
        g = _argmax(q[i])
        a = g
        if u[i] < tables[0, i]:
            a = np.int64(min(u[i] * tables[1, i], num_actions - 1))
        actions[0, i] = a
        actions[1, i] = g
        logp[i] = np.float32(tables[2, i] if a == g else tables[3, i])


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


@numba.njit(cache=True, nogil=True)
def record_step(at, obs, taken, rewards, next_obs, terminated, valid, greedy, logp, ended,
                c_obs, c_next_obs, c_action, c_reward, c_done, c_behaviour, c_logp,
                returns, lengths, done_returns, done_lengths, done_at):  # fmt: skip
    """`StepRecorder.__call__` for flat observations: valid rows to the step columns from
    row `at`, ended episodes to the tracker's pending columns from `done_at`, in env order.
    Returns (valid rows, ended)."""
    m, dim = obs.shape
    n_valid, n_done = 0, 0
    for i in range(m):
        if valid[i]:  # a reset row (NEXT_STEP autoreset) is no transition, adds nothing
            r = at + n_valid
            for f in range(dim):
                c_obs[r, f] = obs[i, f]
                c_next_obs[r, f] = next_obs[i, f]
            c_action[r] = taken[i]
            c_reward[r] = np.float32(rewards[i])  # float64 rewards round as astype does
            c_done[r] = terminated[i]
            c_behaviour[r] = greedy[i]
            c_logp[r] = logp[i]
            n_valid += 1
            returns[i] += np.float64(rewards[i])
            lengths[i] += 1
        if ended[i]:
            done_returns[done_at + n_done] = returns[i]
            done_lengths[done_at + n_done] = lengths[i]
            returns[i] = 0.0
            lengths[i] = 0
            n_done += 1
    return n_valid, n_done


def warm_up() -> None:
    """Load (or compile) the kernel for the actor's argument types."""
    f32, f64, i64 = np.float32, np.float64, np.int64
    epsilon_greedy_into(np.zeros((1, 2), f32), np.zeros(1, f64), np.ones((4, 1), f64),
                        np.zeros((2, 1), i64), np.zeros(1, f32))  # fmt: skip
    one, flag = np.zeros((1, 1), f32), np.zeros(1, np.bool_)
    columns = (np.zeros((1, 1), f32), np.zeros((1, 1), f32), np.zeros(1, i64),
               np.zeros(1, f32), np.zeros(1, np.bool_), np.zeros(1, i64),
               np.zeros(1, f32))  # fmt: skip
    for reward_dtype in (f32, f64):  # vector envs return either
        record_step(0, one, np.zeros(1, i64), np.zeros(1, reward_dtype), one, flag, flag,
                    np.zeros(1, i64), np.zeros(1, f32), flag, *columns, np.zeros(1, f64),
                    np.zeros(1, i64), np.zeros(1, f64), np.zeros(1, i64), 0)  # fmt: skip
