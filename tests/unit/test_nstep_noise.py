"""Actor-side pieces of continuous control: n-step transitions and action noise."""

from __future__ import annotations

import numpy as np
import pytest

from actorq.actor.nstep import NStepAccumulator
from actorq.exploration import OUNoise, gaussian_action_noise


def _step(acc, t, reward, terminated=False, truncated=False, valid=True):
    obs = np.array([[float(t)]], np.float32)
    return acc.add(
        obs,
        np.array([[0.1 * t]], np.float32),
        np.array([reward], np.float32),
        obs + 1,
        np.array([terminated]),
        np.array([terminated or truncated]),
        np.array([valid]),
    )


def test_full_windows_sum_discounted_rewards() -> None:
    acc = NStepAccumulator(1, n=3, gamma=0.5)
    assert _step(acc, 0, 1.0) is None
    assert _step(acc, 1, 2.0) is None
    obs, action, reward, next_obs, done, steps = _step(acc, 2, 4.0)
    assert obs.tolist() == [[0.0]] and action.tolist() == [[0.0]]
    assert reward.tolist() == [1.0 + 0.5 * 2.0 + 0.25 * 4.0]
    assert next_obs.tolist() == [[3.0]] and done.tolist() == [False] and steps.tolist() == [3]
    _, _, reward, _, _, steps = _step(acc, 3, 8.0)  # window slides by one
    assert reward.tolist() == [2.0 + 0.5 * 4.0 + 0.25 * 8.0] and steps.tolist() == [3]


@pytest.mark.parametrize("terminated", [True, False])
def test_episode_end_flushes_shorter_windows(terminated: bool) -> None:
    acc = NStepAccumulator(1, n=3, gamma=0.5)
    _step(acc, 0, 1.0)
    obs, _, reward, next_obs, done, steps = _step(
        acc, 1, 2.0, terminated=terminated, truncated=not terminated
    )
    assert obs[:, 0].tolist() == [0.0, 1.0]
    assert reward.tolist() == [1.0 + 0.5 * 2.0, 2.0]
    assert next_obs[:, 0].tolist() == [2.0, 2.0]  # both bootstrap from the last observation
    assert done.tolist() == [terminated, terminated] and steps.tolist() == [2, 1]
    assert _step(acc, 5, 1.0) is None  # a fresh episode starts an empty window


def test_invalid_rows_are_skipped() -> None:
    acc = NStepAccumulator(1, n=1, gamma=0.9)
    assert _step(acc, 0, 1.0, valid=False) is None
    assert _step(acc, 1, 1.0)[5].tolist() == [1]


def test_bad_n_step_named() -> None:
    with pytest.raises(ValueError, match=r"n_step must be in \[1, 255\], got 0"):
        NStepAccumulator(1, 0, 0.9)


def test_gaussian_noise_is_clipped_and_scaled_per_row() -> None:
    rng = np.random.default_rng(0)
    actions = np.zeros((2, 1000), np.float32)
    noisy = gaussian_action_noise(actions, np.array([0.0, 0.3]), rng)
    assert np.all(noisy[0] == 0.0)
    assert 0.25 < noisy[1].std() < 0.35 and np.abs(noisy).max() <= 1.0
    assert np.abs(gaussian_action_noise(np.ones((4, 2)), 10.0, rng)).max() <= 1.0


def test_ou_noise_is_correlated_and_resets() -> None:
    noise = OUNoise(2, 1, sigma=0.2, theta=0.15, seed=0)
    values = np.array([noise(np.zeros((2, 1)))[:, 0] for _ in range(2000)])
    lag1 = np.corrcoef(values[:-1, 0], values[1:, 0])[0, 1]
    assert lag1 > 0.7  # white noise would be near 0
    noise.reset(np.array([True, False]))
    assert noise.state[0, 0] == 0.0 and noise.state[1, 0] != 0.0
