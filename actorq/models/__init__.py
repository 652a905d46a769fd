"""Policy and value networks shared by the learner (fp32) and actors (quantized)."""

from actorq.models.mlp import MLPSpec, QNetwork, linear_layer_names

__all__ = ["MLPSpec", "QNetwork", "linear_layer_names"]
