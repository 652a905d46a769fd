"""SAC (Haarnoja et al. 2018) with automatic entropy tuning, twin critics, fp32.

The actor is a Gaussian head: one MLP whose last layer outputs [mean, log_std] (2 x
act_dim), actions a = tanh(mean + std * eps). What actors receive is the mean half only:
`policy_weights()` keeps the first act_dim rows of the last layer, and `policy_spec` has a
tanh output, so the broadcast int8 policy computes the deterministic action tanh(mean).
The log-std rows never leave the learner; actors explore with Gaussian noise around
tanh(mean) instead of sampling the learned std (see actorq/exploration.py). With
per-output-channel scales, slicing rows commutes with quantization, so the broadcast
mean rows are quantized exactly as they would be inside the full head.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from actorq.algos.base import (
    ContinuousUpdate,
    Critic,
    Learner,
    adam,
    batch_tensors,
    bootstrap_discount,
    check_config,
    continuous_result,
    fp32_weights,
    normalized,
    weights_tensor,
    with_input_norm,
)
from actorq.algos.optim import Descend, FastAdam, sync_targets
from actorq.models.mlp import MLPSpec, QNetwork, linear_layer_names
from actorq.normalize import RunningMeanStd

LOG_STD_MIN, LOG_STD_MAX = -5.0, 2.0


@dataclass
class SACConfig:
    """SAC hyperparameters (ACTORQ_SAC_* on the learner service)."""

    actor_lr: float = 1e-3
    """Adam learning rate of the actor."""
    critic_lr: float = 1e-3
    """Adam learning rate of the twin critics."""
    alpha_lr: float = 1e-3
    """Adam learning rate of log(alpha) (automatic entropy tuning)."""
    gamma: float = 0.99
    """Discount factor."""
    tau: float = 0.005
    """Polyak step of the target critics after each update."""
    batch_size: int = 256
    """Transitions per learner update."""
    learning_starts: int = 1_000
    """Transitions the replay must hold before the learner starts updating."""
    init_alpha: float = 1.0
    """Initial entropy temperature."""
    autotune: bool = True
    """Tune alpha so the policy's entropy tracks target_entropy; False keeps init_alpha."""
    target_entropy: float | None = None
    """Entropy target; None = -act_dim (the usual choice)."""
    max_grad_norm: float = 100.0
    """Global gradient-norm clip of each optimizer step."""
    qat_bits: int = 0
    """Quantization-aware training of the actor at 2..8 bits; 0 = off."""
    obs_norm: bool = False
    """Normalise observations with running mean/std, carried by the broadcast policy."""

    def __post_init__(self) -> None:
        check_config(
            self, actor_lr="> 0", critic_lr="> 0", alpha_lr="> 0", init_alpha="> 0",
            max_grad_norm="> 0", gamma="in [0, 1]", tau="in (0, 1]", batch_size=">= 1",
            learning_starts=">= 0", qat_bits="0 (off) or in [2, 8]",
        )  # fmt: skip


def squashed_gaussian_log_prob(
    pre_tanh: torch.Tensor, mean: torch.Tensor, log_std: torch.Tensor
) -> torch.Tensor:
    """log pi(tanh(u)) for u ~ N(mean, exp(log_std)), summed over action dims; uses
    log(1 - tanh(u)^2) = 2 (log 2 - u - softplus(-2u)), finite at |u| >> 1."""
    var = torch.exp(2 * log_std)
    gauss = -((pre_tanh - mean) ** 2) / (2 * var) - log_std - 0.5 * math.log(2 * math.pi)
    squash = 2 * (math.log(2) - pre_tanh - F.softplus(-2 * pre_tanh))
    return (gauss - squash).sum(dim=-1)


class SACLearner(Learner):
    state_attrs = (
        "actor", "critics", "critics_target", "log_alpha", "actor_opt", "critic_opt", "alpha_opt"
    )  # fmt: skip

    def __init__(
        self,
        obs_dim: int,
        act_dim: int,
        hidden: tuple[int, ...],
        config: SACConfig,
        device: str = "cpu",
        seed: int = 0,
    ) -> None:
        self.config = config
        self.act_dim = act_dim
        self.device = torch.device(device)
        self.policy_spec = MLPSpec(
            obs_dim, act_dim, hidden, output_activation="tanh", input_norm=config.obs_norm
        )
        head = MLPSpec(obs_dim, 2 * act_dim, hidden)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            self.actor = QNetwork(head, weight_bits=config.qat_bits or None).to(self.device)
            self.critics = nn.ModuleList(Critic(obs_dim, act_dim, hidden) for _ in range(2)).to(
                self.device
            )
        self.critics_target = copy.deepcopy(self.critics).requires_grad_(False)
        self.log_alpha = torch.tensor(
            math.log(config.init_alpha), device=self.device, requires_grad=True
        )
        self.target_entropy = (
            -float(act_dim) if config.target_entropy is None else config.target_entropy
        )
        self.actor_opt = adam(self.actor, config.actor_lr)
        self.critic_opt = adam(self.critics, config.critic_lr)
        self.alpha_opt = FastAdam([self.log_alpha], lr=config.alpha_lr)
        self._targets = list(self.critics_target.parameters())
        self._online = list(self.critics.parameters())
        self.rng = torch.Generator(device=self.device).manual_seed(seed + 1)
        self._num_updates = 0
        self.obs_rms = RunningMeanStd(obs_dim) if config.obs_norm else None

    @property
    def alpha(self) -> float:
        return float(self.log_alpha.exp().item())

    def sample(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Reparameterized actions tanh(mean + std * eps) and their log-probabilities."""
        mean, log_std = self.actor(obs).chunk(2, dim=-1)
        log_std = log_std.clamp(LOG_STD_MIN, LOG_STD_MAX)
        eps = torch.randn(mean.shape, generator=self.rng, device=mean.device)
        pre_tanh = mean + log_std.exp() * eps
        return torch.tanh(pre_tanh), squashed_gaussian_log_prob(pre_tanh, mean, log_std)

    def optimizers(self) -> list[torch.optim.Optimizer]:
        return [self.critic_opt, self.actor_opt, self.alpha_opt]

    def target_tensors(self) -> list[torch.Tensor]:
        return self._targets

    def update(
        self, batch: Mapping[str, np.ndarray], weights: np.ndarray | None = None
    ) -> ContinuousUpdate:
        t = normalized(batch_tensors(batch, self.act_dim, self.device), self.obs_rms)
        t["weights"] = weights_tensor(weights, t["obs"].shape[0], self.device)
        return continuous_result(self.run_step(t))

    def step(self, x: Mapping[str, torch.Tensor], flag: bool, descend: Descend) -> dict:
        """Critic, actor and temperature steps, then the Polyak update of the target critics."""
        cfg = self.config
        alpha = self.log_alpha.exp().detach()
        target = self.td_target(x, alpha)
        qs = [critic(x["obs"], x["action"]) for critic in self.critics]
        critic_loss = (sum((q - target).pow(2) for q in qs) * x["weights"]).mean()
        grad_norm = descend(self.critic_opt, critic_loss, cfg.max_grad_norm)
        action, log_prob = self.sample(x["obs"])
        q_pi = torch.stack([c(x["obs"], action) for c in self.critics]).min(dim=0).values
        actor_loss = (alpha * log_prob - q_pi).mean()
        descend(self.actor_opt, actor_loss, cfg.max_grad_norm)
        if cfg.autotune:
            alpha_loss = -(self.log_alpha * (log_prob.detach() + self.target_entropy)).mean()
            descend(self.alpha_opt, alpha_loss)
        sync_targets(self._targets, self._online, cfg.tau)
        q0 = qs[0].detach()
        return {
            "loss": critic_loss.detach(),
            "q_mean": q0.mean(),
            "grad_norm": grad_norm,
            "actor_loss": actor_loss.detach(),
            "td_abs": (target - q0).abs(),
        }

    @torch.no_grad()
    def td_target(self, t: Mapping[str, torch.Tensor], alpha: torch.Tensor) -> torch.Tensor:
        """r + gamma^n (1 - done) (min_i Q_target_i(s', a') - alpha log pi(a'|s'))."""
        next_action, next_log_prob = self.sample(t["next_obs"])
        next_q = torch.stack([c(t["next_obs"], next_action) for c in self.critics_target])
        soft_value = next_q.min(dim=0).values - alpha * next_log_prob
        return t["reward"] + bootstrap_discount(t, self.config.gamma) * soft_value

    @torch.no_grad()
    def actions(self, obs: np.ndarray) -> np.ndarray:
        """Deterministic actions tanh(mean), [B, act_dim]: what the broadcast policy computes."""
        x = torch.as_tensor(np.asarray(obs, dtype=np.float32), device=self.device)
        if self.obs_rms is not None:
            x = self.obs_rms.normalize(x)
        mean, _ = self.actor(x).chunk(2, dim=-1)
        return torch.tanh(mean).cpu().numpy()

    def policy_weights(self) -> dict[str, np.ndarray]:
        """fp32 weights of the mean network: the head's last layer cut to its mean rows."""
        weights = fp32_weights(self.actor)
        last = linear_layer_names(len(self.policy_spec.widths) - 1)[-1]
        for suffix in ("weight", "bias"):
            key = f"{last}.{suffix}"
            weights[key] = np.ascontiguousarray(weights[key][: self.act_dim])
        return with_input_norm(weights, self.obs_rms)
