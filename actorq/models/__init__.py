"""Policy and value networks shared by the learner (fp32) and actors (quantized).

The specs import without torch (actorq.models.specs); `QNetwork` loads torch when first
asked for, so that an actor acting through numpy never does.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from actorq.models.specs import MLPSpec, linear_layer_names

if TYPE_CHECKING:
    from actorq.models.mlp import QNetwork

__all__ = ["MLPSpec", "QNetwork", "linear_layer_names"]


def __getattr__(name: str) -> object:
    if name == "QNetwork":
        from actorq.models.mlp import QNetwork

        return QNetwork
    raise AttributeError(f"module 'actorq.models' has no attribute {name!r}")
