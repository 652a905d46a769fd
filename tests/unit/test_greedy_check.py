"""GreedyCheck: greedy validation of a candidate policy on real gymnasium envs."""

from __future__ import annotations

import numpy as np
import pytest

from actorq.learner.greedy_check import GreedyCheck
from actorq.models import MLPSpec

SPEC = MLPSpec(obs_dim=4, num_outputs=2, hidden=(2,))


def cartpole_policy(direction: float) -> dict[str, np.ndarray]:
    """Q-values from two ReLU units of the pole's angle and angular velocity: direction 1
    pushes the cart under the falling pole (balances for long), -1 pushes it away."""
    lean = np.array([0.0, 0.0, 1.0, 0.5], np.float32) * direction
    return {
        "layers.0.weight": np.stack([lean, -lean]),
        "layers.0.bias": np.zeros(2, np.float32),
        "layers.2.weight": np.array([[0.0, 1.0], [1.0, 0.0]], np.float32),  # Q(left), Q(right)
        "layers.2.bias": np.zeros(2, np.float32),
    }


def test_gate_passes_a_balancing_policy_and_refuses_a_falling_one() -> None:
    gate = GreedyCheck("CartPole-v1", episodes=5, bar=100.0, seed=3)
    assert gate.passes(cartpole_policy(1.0), SPEC)
    good = gate.last_mean
    assert not gate.passes(cartpole_policy(-1.0), SPEC)
    bad = gate.last_mean
    assert good is not None and bad is not None and good >= 100.0 > bad
    counters = gate.counters()
    assert counters["validation_checks"] == 2 and counters["validation_passed"] == 1
    # Every validation step is a real env step, counted: 5 episodes of each policy.
    assert counters["validation_env_steps"] == pytest.approx(5 * good + 5 * bad)
    gate.close()


def test_each_check_starts_from_fresh_states() -> None:
    gate = GreedyCheck("CartPole-v1", episodes=3, bar=0.0, seed=0)
    means = set()
    for _ in range(3):
        gate.passes(cartpole_policy(-1.0), SPEC)
        means.add(gate.last_mean)
    assert len(means) > 1  # the same start states every time would give one mean
    gate.close()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [({"episodes": 0, "bar": 1.0}, "episodes"), ({"episodes": 2, "bar": float("nan")}, "bar")],
)
def test_bad_settings_are_refused(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        GreedyCheck("CartPole-v1", seed=0, **kwargs)


def test_certification_plays_int8_and_more_episodes_than_envs_in_rounds() -> None:
    """Settling's certification: 60 episodes (more than the 50 envs played at once) of the
    int8-decoded policy, as actors would run it; the balancing policy keeps passing."""
    from actorq.v1 import policy_pb2

    check = GreedyCheck(
        "CartPole-v1", episodes=60, bar=100.0, seed=5, precision=policy_pb2.PRECISION_INT8
    )
    assert check.passes(cartpole_policy(1.0), SPEC) and check.rounds == 2
    assert check.last_mean is not None and check.last_mean >= 100.0
    assert not check.passes(cartpole_policy(-1.0), SPEC) and check.rounds == 4
    check.close()
