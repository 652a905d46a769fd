"""Exploration: Ape-X epsilons, batched epsilon-greedy and the linear schedule."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from actorq.exploration import LinearSchedule, apex_epsilon, epsilon_greedy


def test_apex_epsilon_values() -> None:
    assert apex_epsilon(0, 1) == pytest.approx(0.4)
    assert apex_epsilon(0, 8) == pytest.approx(0.4)
    assert apex_epsilon(7, 8) == pytest.approx(0.4**8)
    assert apex_epsilon(1, 3) == pytest.approx(0.4**4.5)
    assert apex_epsilon(1, 2, base=0.5, alpha=1.0) == pytest.approx(0.25)


@given(
    num_actors=st.integers(1, 64),
    base=st.floats(0.01, 1.0),
    alpha=st.floats(0.0, 10.0),
)
def test_apex_epsilons_are_non_increasing_within_bounds(
    num_actors: int, base: float, alpha: float
) -> None:
    eps = [apex_epsilon(i, num_actors, base, alpha) for i in range(num_actors)]
    assert all(a >= b for a, b in itertools.pairwise(eps))
    assert eps[0] == pytest.approx(base)
    assert eps[-1] >= base ** (1 + alpha) * (1 - 1e-9)


@pytest.mark.parametrize(
    ("args", "match"),
    [((2, 2), "actor_index"), ((-1, 2), "actor_index"), ((0, 0), "num_actors")],
)
def test_apex_epsilon_rejects_bad_indices(args: tuple[int, int], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        apex_epsilon(*args)


def test_epsilon_zero_is_greedy() -> None:
    q = np.random.default_rng(0).standard_normal((100, 5))
    actions = epsilon_greedy(q, 0.0, np.random.default_rng(1))
    np.testing.assert_array_equal(actions, q.argmax(axis=1))
    assert actions.dtype == np.int64


def test_epsilon_one_is_uniform() -> None:
    q = np.tile(np.array([[0.0, 10.0, 0.0, 0.0]]), (40_000, 1))
    actions = epsilon_greedy(q, 1.0, np.random.default_rng(0))
    np.testing.assert_allclose(np.bincount(actions, minlength=4) / len(actions), 0.25, atol=0.01)


def test_per_row_epsilons() -> None:
    rows = 20_000
    q = np.tile(np.array([[1.0, 0.0]]), (rows, 1))
    eps = np.where(np.arange(rows) % 2 == 0, 0.0, 0.5)
    actions = epsilon_greedy(q, eps, np.random.default_rng(0))
    assert np.all(actions[0::2] == 0)
    # Non-greedy only when exploring and drawing the other action: 0.5 * 1/2.
    assert np.mean(actions[1::2] == 1) == pytest.approx(0.25, abs=0.02)


def test_epsilon_greedy_is_reproducible_from_rng() -> None:
    q = np.random.default_rng(0).standard_normal((50, 3))
    a = epsilon_greedy(q, 0.5, np.random.default_rng(7))
    b = epsilon_greedy(q, 0.5, np.random.default_rng(7))
    np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("eps", [-0.1, 1.1])
def test_epsilon_out_of_range_rejected(eps: float) -> None:
    with pytest.raises(ValueError, match="epsilon must be in"):
        epsilon_greedy(np.zeros((2, 2)), eps, np.random.default_rng(0))


def test_q_values_must_be_two_dimensional() -> None:
    with pytest.raises(ValueError, match="batch, num_actions"):
        epsilon_greedy(np.zeros(3), 0.1, np.random.default_rng(0))


def test_linear_schedule() -> None:
    sched = LinearSchedule(1.0, 0.1, 100)
    assert sched(0) == pytest.approx(1.0)
    assert sched(50) == pytest.approx(0.55)
    assert sched(100) == pytest.approx(0.1)
    assert sched(10_000) == pytest.approx(0.1)
    assert LinearSchedule(1.0, 0.1, 0)(0) == pytest.approx(0.1)
    with pytest.raises(ValueError, match="duration"):
        LinearSchedule(1.0, 0.1, -1)


def test_small_epsilon_explores_uniformly_over_actions() -> None:
    """One draw decides exploring and the action: given u < eps, u * A / eps is uniform."""
    q = np.tile(np.array([[0.0, 0.0, 5.0]]), (200_000, 1))
    actions = epsilon_greedy(q, 0.03, np.random.default_rng(4))
    share = np.bincount(actions, minlength=3) / len(actions)
    np.testing.assert_allclose(share, [0.01, 0.01, 0.98], atol=0.002)
