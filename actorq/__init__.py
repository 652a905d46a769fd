"""actorq: off-policy RL where actors act with an int8-quantized policy (ActorQ)."""

__version__ = "0.1.0"
