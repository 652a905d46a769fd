"""Learning algorithms: one module per algorithm, each with its own config dataclass."""

from actorq.algos.dqn import DQNConfig, DQNLearner, DQNUpdate

__all__ = ["DQNConfig", "DQNLearner", "DQNUpdate"]
