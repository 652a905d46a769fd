"""Training and inference FLOPs of sparse networks against their dense equivalents.

Counted as RLx2 counts them: a Linear layer costs 2 * active weights multiply-adds per
sample forward and twice that backward (input and weight gradients); biases and
activations are left out. Per update, each network runs a known number of forward and
backward passes (`PASSES`); targets share their network's masks. This is what sparse
kernels would execute: PyTorch here runs dense kernels over masked weights, so the
saving is in the count, not in this process's wall time. The dense gradient needed once
per topology update (every 10,000 steps by default) is left out.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import numpy as np

from actorq.sparse.topology import LayerStats


@dataclass(frozen=True)
class Passes:
    """Passes of one network per update and per sample, in units of the whole network."""

    forward: float
    backward: float


def passes(algo: str, policy_delay: int = 1, num_critics: int = 1) -> dict[str, Passes]:
    """Forward/backward passes of "actor" and "critic" (all critics together) per update.

    DDPG/TD3/D4PG: the target actor and target critics on s' (forward), the critics on
    (s, a) (forward and backward), and every `policy_delay` updates the actor and the
    first critic on (s, pi(s)) (forward and backward). SAC: the actor samples on s' and on
    s (backward once), the target critics on s', the critics on (s, a) and on (s, pi(s)).
    """
    if algo == "sac":
        return {"actor": Passes(2.0, 1.0), "critic": Passes(3.0, 2.0)}
    every = 1.0 / policy_delay
    first_critic = every / num_critics
    return {
        "actor": Passes(1.0 + every, every),
        "critic": Passes(2.0 + first_critic, 1.0 + first_critic),
    }


def forward_flops(layers: Iterable[LayerStats], dense: bool = False) -> int:
    """FLOPs of one forward pass of one sample."""
    return sum(2 * (s.size if dense else s.active) for s in layers)


def update_flops(
    layers: Mapping[str, list[LayerStats]], per_pass: Mapping[str, Passes], batch_size: int
) -> tuple[float, float]:
    """(sparse, dense) FLOPs of one update on a batch."""
    sparse = dense = 0.0
    for name, stats in layers.items():
        p = per_pass[name]
        weight = p.forward + 2.0 * p.backward
        sparse += weight * forward_flops(stats)
        dense += weight * forward_flops(stats, dense=True)
    return sparse * batch_size, dense * batch_size


def policy_inference_flops(weights: Mapping[str, np.ndarray]) -> tuple[int, int]:
    """(sparse, dense) FLOPs of one action of the broadcast policy (its Linear weights)."""
    sparse = dense = 0
    for name, w in weights.items():
        if name.endswith(".weight") and w.ndim == 2:
            sparse += 2 * int(np.count_nonzero(w))
            dense += 2 * int(w.size)
    return sparse, dense
