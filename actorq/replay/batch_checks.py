"""Checks of a transition batch's arrays (dtype, shape, finiteness), shared by
`TransitionBatch` and the stream decoder of actorq.replay.batch."""

from __future__ import annotations

import math

import numpy as np


def _check_action(action: object, n: int) -> None:
    if isinstance(action, np.ndarray) and action.dtype == np.float32:
        if action.ndim != 2 or action.shape[0] != n or action.shape[1] < 1:
            raise ValueError(f"action must have shape [{n}, act_dim>=1], got {list(action.shape)}")
        return
    _check_array("action", action, np.dtype(np.int64), (n,))


def _check_behaviour(
    behaviour: np.ndarray | None, logp: np.ndarray | None, action: np.ndarray
) -> None:
    if behaviour is None:
        if logp is not None:
            raise ValueError("behaviour_logp needs behaviour")
        return
    _check_array("behaviour", behaviour, action.dtype, action.shape)
    if action.dtype == np.float32 and not _all_finite(behaviour):
        raise ValueError("behaviour contains NaN or infinity")
    if logp is not None:
        _check_array("behaviour_logp", logp, np.dtype(np.float32), (len(action),))
        if np.isnan(logp).any() or (logp == np.inf).any():  # -inf: a zero-probability action
            raise ValueError("behaviour_logp contains NaN or +infinity")


def _check_obs(name: str, arr: object) -> int:
    """Check an observation array and return its row count N."""
    if isinstance(arr, np.ndarray) and arr.dtype == np.uint8:
        if arr.ndim != 4 or min(arr.shape) < 1:
            raise ValueError(f"{name} (uint8 pixels) must have shape [N, C, H, W] >= 1, got "
                             f"{arr.shape}")  # fmt: skip
        return int(arr.shape[0])
    if not isinstance(arr, np.ndarray) or arr.dtype != np.float32:
        raise ValueError(f"{name} must be a float32 (or uint8 pixel) numpy array, got "
                         f"{_describe(arr)}")  # fmt: skip
    if arr.ndim != 2 or arr.shape[0] < 1 or arr.shape[1] < 1:
        raise ValueError(f"{name} must have shape [N>=1, obs_dim>=1], got {arr.shape}")
    return int(arr.shape[0])


def _check_array(name: str, arr: object, dtype: np.dtype, shape: tuple[int, ...]) -> None:
    if not isinstance(arr, np.ndarray) or arr.dtype != dtype:
        raise ValueError(f"{name} must be a {dtype} numpy array, got {_describe(arr)}")
    if arr.shape != shape:
        raise ValueError(f"{name} must have shape {list(shape)}, got {list(arr.shape)}")


def _all_finite(arr: np.ndarray) -> bool:
    """Whether every float32 element is finite, via one float64 sum (about 2x cheaper).

    The float64 sum of float32 values cannot overflow, and any NaN or infinity makes it
    NaN or infinite, so the sum is finite exactly when every element is.
    """
    return math.isfinite(np.add.reduce(arr.ravel(), dtype=np.float64))


def _describe(arr: object) -> str:
    if isinstance(arr, np.ndarray):
        return f"{arr.dtype} array"
    return type(arr).__name__
