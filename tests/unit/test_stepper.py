"""VectorStepper turns both gymnasium autoreset modes into the same valid transitions."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from actorq.actor.stepper import VectorStepper
from actorq.envs import make_vector_env


def _run_until_episodes_end(native: bool, num_envs: int = 4, steps: int = 300):
    env = make_vector_env("CartPole-v1", num_envs, seed=3, native=native)
    stepper = VectorStepper(env)
    obs = stepper.reset(seed=3)
    rows = []
    for _ in range(steps):
        actions = np.zeros(num_envs, dtype=np.int64)  # always push left: episodes end fast
        step = stepper.step(actions)
        rows.append((obs, step))
        obs = step.obs
    env.close()
    return stepper, rows


@pytest.mark.parametrize("native", [True, False], ids=["native-next-step", "sync-same-step"])
def test_transitions_chain_and_terminal_rows_hold_the_true_last_obs(native: bool) -> None:
    stepper, rows = _run_until_episodes_end(native)
    assert stepper.next_step_mode is native
    ended_rows = 0
    for i, (obs, step) in enumerate(rows[:-1]):
        for e in range(len(obs)):
            if not step.valid[e]:
                continue
            if step.ended[e]:
                ended_rows += 1
                # a CartPole termination means the pole or cart left the allowed range
                assert abs(step.next_obs[e][2]) > 0.2 or abs(step.next_obs[e][0]) > 2.4
                assert step.terminated[e]
            else:
                next_obs, _next_step = rows[i + 1]
                assert np.array_equal(step.next_obs[e], next_obs[e])  # s' is the next s
    assert ended_rows >= 4


def test_next_step_mode_marks_reset_rows_invalid() -> None:
    _stepper, rows = _run_until_episodes_end(native=True)
    for (_, step), (_, following) in itertools.pairwise(rows):
        for e in np.flatnonzero(step.ended):
            assert not following.valid[e]  # the reset step is not a transition
            assert following.rewards[e] == 0.0
    invalid = sum(int((~s.valid).sum()) for _, s in rows)
    ended_before_last = sum(int(s.ended.sum()) for _, s in rows[:-1])
    assert invalid == ended_before_last  # exactly one reset row per finished episode
