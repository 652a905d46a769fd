"""D4PG (Barth-Maron et al. 2018): DDPG with a categorical distributional critic and
n-step returns; the algorithm of the QuaRL paper's ActorQ experiments.

The critic outputs logits over `num_atoms` fixed returns z_i in [v_min, v_max]. The
target distribution of r + gamma^n (1 - done) Z(s', pi_target(s')) is projected back
onto the atoms (`categorical_projection`) and the critic minimizes the cross-entropy to
it. The actor ascends E[Z(s, pi(s))]. n-step returns are built by actors
(actorq.actor.nstep): each stored transition carries its reward sum and its length n in
the replay column `steps`, so the learner discounts the bootstrap by gamma ** steps.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from actorq.algos.base import Critic, bootstrap_discount, check_config
from actorq.algos.ddpg import DDPGConfig, DDPGLearner


@dataclass
class D4PGConfig(DDPGConfig):
    """D4PG hyperparameters (ACTORQ_D4PG_* on the learner service)."""

    num_atoms: int = 51
    """Atoms of the categorical value distribution."""
    v_min: float = -150.0
    """Smallest representable return (set it from the env's reward scale)."""
    v_max: float = 150.0
    """Largest representable return."""
    n_step: int = 5
    """n of the n-step returns; actors build them (ACTORQ_N_STEP)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        check_config(
            self, num_atoms=(lambda v: v >= 2, ">= 2"),
            v_max=(lambda v: v > self.v_min, f"> v_min={self.v_min}"), n_step=">= 1",
        )  # fmt: skip


def categorical_projection(
    next_probs: torch.Tensor,
    rewards: torch.Tensor,
    discounts: torch.Tensor,
    support: torch.Tensor,
    bounds: tuple[float, float] | None = None,
) -> torch.Tensor:
    """Project r + discount * Z onto the evenly spaced atoms `support` [N] (C51):
    next_probs [B, N], rewards and discounts [B] -> probabilities [B, N]. `bounds` =
    (support[0], support[-1]) as floats spares a host sync (impossible in a CUDA graph).
    """
    v_min, v_max = bounds if bounds is not None else (float(support[0]), float(support[-1]))
    delta = (v_max - v_min) / (support.numel() - 1)
    shifted = (rewards[:, None] + discounts[:, None] * support[None, :]).clamp(v_min, v_max)
    position = (shifted - v_min) / delta
    lower = position.floor().clamp(0, support.numel() - 1)
    upper = position.ceil().clamp(0, support.numel() - 1)
    # When the position is exactly on an atom, lower == upper and all mass goes there.
    lower_mass = next_probs * (upper - position + (upper == lower).float())
    upper_mass = next_probs * (position - lower)
    projected = torch.zeros_like(next_probs)
    projected.scatter_add_(1, lower.long(), lower_mass)
    projected.scatter_add_(1, upper.long(), upper_mass)
    return projected


class D4PGLearner(DDPGLearner):
    config: D4PGConfig

    def _make_critic(self, obs_dim: int, act_dim: int, hidden: tuple[int, ...]) -> nn.Module:
        cfg = self.config
        self.support = torch.linspace(cfg.v_min, cfg.v_max, cfg.num_atoms, device=self.device)
        self.support_bounds = (float(self.support[0]), float(self.support[-1]))  # read once
        return Critic(obs_dim, act_dim, hidden, outputs=cfg.num_atoms)

    def _critic_loss(
        self, t: Mapping[str, torch.Tensor], w: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        target_probs = self.target_distribution(t)
        log_probs = F.log_softmax(self.critics[0](t["obs"], t["action"]), dim=1)
        cross_entropy = -(target_probs * log_probs).sum(dim=1)
        loss = (cross_entropy * w).mean()
        q = (log_probs.detach().exp() * self.support).sum(dim=1)
        target_mean = (target_probs * self.support).sum(dim=1)
        return loss, q, (target_mean - q).abs()

    @torch.no_grad()
    def target_distribution(self, t: Mapping[str, torch.Tensor]) -> torch.Tensor:
        next_action = self.actor_target(t["next_obs"])
        next_probs = F.softmax(self.critics_target[0](t["next_obs"], next_action), dim=1)
        discount = bootstrap_discount(t, self.config.gamma)
        return categorical_projection(
            next_probs, t["reward"], discount, self.support, self.support_bounds
        )

    def _actor_q(self, obs: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        probs = F.softmax(self.critics[0](obs, action), dim=1)
        return (probs * self.support).sum(dim=1)
