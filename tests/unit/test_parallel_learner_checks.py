"""What data-parallel learners refuse before anything starts, and what they accept."""

from __future__ import annotations

import pytest

from actorq.algos import load_algorithm_config, make_algorithm
from actorq.config import ConfigError
from actorq.config_run import RunSettings
from actorq.learner.loop import _check_parallel


@pytest.mark.parametrize("algo", ["dqn", "ddpg", "td3", "sac", "d4pg"])
def test_every_off_policy_algorithm_may_run_several_learners(algo: str) -> None:
    assert RunSettings(algo=algo, learners=2).learners == 2


@pytest.mark.parametrize("algo", ["ppo", "appo", "a2c"])
def test_on_policy_algorithms_are_refused_with_the_ones_that_work(algo: str) -> None:
    with pytest.raises(ConfigError, match=rf"off-policy algorithms .*got '{algo}'"):
        RunSettings(algo=algo, learners=2)


def test_observation_normalisation_is_refused_on_parallel_learners() -> None:
    config = load_algorithm_config("td3", {}, obs_norm=True)
    td3 = make_algorithm("td3", 3, 1, (8,), config)
    with pytest.raises(ConfigError, match="running statistics"):
        _check_parallel(td3, None, 2)
    plain = make_algorithm("td3", 3, 1, (8,), load_algorithm_config("td3", {}))
    _check_parallel(plain, None, 2)  # accepted
