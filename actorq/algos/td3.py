"""TD3 (Fujimoto et al. 2018): DDPG with twin critics, target policy smoothing and a
delayed actor. Only the pieces that differ from DDPG live here."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from actorq.algos.base import check_config
from actorq.algos.ddpg import DDPGConfig, DDPGLearner


@dataclass
class TD3Config(DDPGConfig):
    """TD3 hyperparameters (ACTORQ_TD3_* on the learner service)."""

    policy_noise: float = 0.2
    """Std of the Gaussian noise added to the target actor's actions (smoothing)."""
    noise_clip: float = 0.5
    """The smoothing noise is clipped to [-noise_clip, noise_clip]."""
    policy_delay: int = 2
    """Critic updates per actor (and target) update."""

    def __post_init__(self) -> None:
        super().__post_init__()
        check_config(self, policy_noise=">= 0", noise_clip=">= 0", policy_delay=">= 1")


class TD3Learner(DDPGLearner):
    num_critics = 2
    config: TD3Config

    def _target_action(self, next_obs: torch.Tensor) -> torch.Tensor:
        action = self.actor_target(next_obs)
        noise = torch.randn(action.shape, generator=self.rng, device=action.device)
        clip = self.config.noise_clip
        noise = (noise * self.config.policy_noise).clamp(-clip, clip)
        return (action + noise).clamp(-1.0, 1.0)

    def step_flag(self, n: int) -> bool:
        return n % self.config.policy_delay == 0
