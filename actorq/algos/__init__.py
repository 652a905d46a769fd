"""Learning algorithms: one module per algorithm, each with its own config dataclass."""

from actorq.algos.base import Algorithm, ContinuousUpdate
from actorq.algos.d4pg import D4PGConfig, D4PGLearner
from actorq.algos.ddpg import DDPGConfig, DDPGLearner
from actorq.algos.dqn import DQNConfig, DQNLearner, DQNUpdate
from actorq.algos.factory import (
    ALGORITHMS,
    CONTINUOUS_ALGORITHMS,
    is_continuous,
    load_algorithm_config,
    make_algorithm,
)
from actorq.algos.sac import SACConfig, SACLearner
from actorq.algos.td3 import TD3Config, TD3Learner

__all__ = [
    "ALGORITHMS",
    "CONTINUOUS_ALGORITHMS",
    "Algorithm",
    "ContinuousUpdate",
    "D4PGConfig",
    "D4PGLearner",
    "DDPGConfig",
    "DDPGLearner",
    "DQNConfig",
    "DQNLearner",
    "DQNUpdate",
    "SACConfig",
    "SACLearner",
    "TD3Config",
    "TD3Learner",
    "is_continuous",
    "load_algorithm_config",
    "make_algorithm",
]
