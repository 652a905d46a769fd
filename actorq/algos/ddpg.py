"""DDPG: a deterministic tanh actor and a Q critic, both fp32, with Polyak-averaged targets.

TD3 (actorq.algos.td3) and D4PG (actorq.algos.d4pg) reuse this learner and change only
the critic: two critics with target smoothing and a delayed actor, or a distributional
critic with n-step targets. Actors receive `policy_weights()`: the actor network alone,
whose spec (`policy_spec`) has a tanh output, so the broadcast policy maps observations
straight to actions in [-1, 1]; exploration noise is the actors' business.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import torch
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
from actorq.algos.optim import Descend, sync_targets
from actorq.models.mlp import MLPSpec, QNetwork
from actorq.normalize import RunningMeanStd


@dataclass
class DDPGConfig:
    """DDPG hyperparameters (ACTORQ_DDPG_* on the learner service)."""

    actor_lr: float = 1e-3
    """Adam learning rate of the actor."""
    critic_lr: float = 1e-3
    """Adam learning rate of the critic(s)."""
    gamma: float = 0.99
    """Discount factor."""
    tau: float = 0.005
    """Polyak step of the target networks after each actor update."""
    batch_size: int = 256
    """Transitions per learner update."""
    learning_starts: int = 1_000
    """Transitions the replay must hold before the learner starts updating."""
    max_grad_norm: float = 100.0
    """Global gradient-norm clip of each optimizer step (a guard, rarely active)."""
    qat_bits: int = 0
    """Quantization-aware training: 2..8 trains the actor through fake-quantized weights
    at that width (straight-through estimator); 0 = off."""
    obs_norm: bool = False
    """Normalise observations with running mean/std (useful on MuJoCo and DM Control);
    the broadcast policy carries the statistics (MLPSpec.input_norm) and actors apply them."""
    is_correction: bool = False
    """Weight learner-side n-step rows (ACTORQ_DELAYED_NSTEP > 1; DDPG and TD3) by their
    truncated importance ratios prod_k min(rho_bar, pi/mu) (actorq.learner.behaviour)."""
    rho_bar: float = 1.0
    """Truncation of each intermediate step's ratio pi_learner / mu_behaviour."""

    def __post_init__(self) -> None:
        check_config(
            self, actor_lr="> 0", critic_lr="> 0", gamma="in [0, 1]", tau="in (0, 1]",
            batch_size=">= 1", learning_starts=">= 0", max_grad_norm="> 0",
            rho_bar="> 0", qat_bits="0 (off) or in [2, 8]",
        )  # fmt: skip


class DDPGLearner(Learner):
    """Owns actor, critic(s), their targets and optimizers; one `update` per batch."""

    num_critics = 1
    state_attrs = ("actor", "critics", "actor_target", "critics_target", "actor_opt", "critic_opt")

    def __init__(
        self,
        obs_dim: int,
        act_dim: int,
        hidden: tuple[int, ...],
        config: DDPGConfig,
        device: str = "cpu",
        seed: int = 0,
    ) -> None:
        self.config = config
        self.act_dim = act_dim
        self.device = torch.device(device)
        self.policy_spec = MLPSpec(
            obs_dim, act_dim, hidden, output_activation="tanh", input_norm=config.obs_norm
        )
        bits = config.qat_bits or None
        # A private RNG fork: building a learner never disturbs the caller's torch RNG.
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            self.actor = QNetwork(self.policy_spec, weight_bits=bits).to(self.device)
            self.critics = nn.ModuleList(
                self._make_critic(obs_dim, act_dim, hidden) for _ in range(self.num_critics)
            ).to(self.device)
        self.actor_target = copy.deepcopy(self.actor).requires_grad_(False)
        self.critics_target = copy.deepcopy(self.critics).requires_grad_(False)
        self.actor_opt = adam(self.actor, config.actor_lr)
        self.critic_opt = adam(self.critics, config.critic_lr)
        self._targets = [*self.actor_target.parameters(), *self.critics_target.parameters()]
        self._online = [*self.actor.parameters(), *self.critics.parameters()]
        self._num_updates = 0
        self.rng = torch.Generator(device=self.device).manual_seed(seed + 1)
        self.obs_rms = RunningMeanStd(obs_dim) if config.obs_norm else None

    def _make_critic(self, obs_dim: int, act_dim: int, hidden: tuple[int, ...]) -> nn.Module:
        return Critic(obs_dim, act_dim, hidden)

    def optimizers(self) -> list[torch.optim.Optimizer]:
        return [self.critic_opt, self.actor_opt]

    def target_tensors(self) -> list[torch.Tensor]:
        return self._targets

    def step_flag(self, n: int) -> bool:
        """Whether update n also steps the actor and the targets (TD3: every policy_delay-th)."""
        return True

    # --- one update -----------------------------------------------------------------------
    def update(
        self, batch: Mapping[str, np.ndarray], weights: np.ndarray | None = None
    ) -> ContinuousUpdate:
        """One critic step (and an actor step when due) on `batch`; `weights` are IS weights."""
        t = normalized(batch_tensors(batch, self.act_dim, self.device), self.obs_rms)
        t["weights"] = weights_tensor(weights, t["obs"].shape[0], self.device)
        return continuous_result(self.run_step(t))

    def step(self, x: Mapping[str, torch.Tensor], flag: bool, descend: Descend) -> dict:
        """Critic step; with `flag`, the actor step and the Polyak update of both targets."""
        cfg = self.config
        loss, q, td_abs = self._critic_loss(x, x["weights"])
        grad_norm = descend(self.critic_opt, loss, cfg.max_grad_norm)
        out = {"loss": loss.detach(), "q_mean": q.mean(), "grad_norm": grad_norm, "td_abs": td_abs}
        if flag:
            obs = x["obs"]
            actor_loss = -self._actor_q(obs, self.actor(obs)).mean()
            descend(self.actor_opt, actor_loss, cfg.max_grad_norm)
            sync_targets(self._targets, self._online, cfg.tau)
            out["actor_loss"] = actor_loss.detach()
        return out

    def _critic_loss(
        self, t: Mapping[str, torch.Tensor], w: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(weighted loss, Q(s, a) of the first critic, |TD error|) for a batch."""
        target = self.td_target(t)
        qs = [critic(t["obs"], t["action"]) for critic in self.critics]
        per_item = sum((q - target).pow(2) for q in qs)
        loss = (per_item * w).mean()
        q0 = qs[0].detach()
        return loss, q0, (target - q0).abs()

    @torch.no_grad()
    def td_target(self, t: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """r + gamma^n (1 - done) min_i Q_target_i(s', pi_target(s'))."""
        next_action = self._target_action(t["next_obs"])
        next_q = torch.stack([c(t["next_obs"], next_action) for c in self.critics_target])
        discount = bootstrap_discount(t, self.config.gamma)
        return t["reward"] + discount * next_q.min(dim=0).values

    def _target_action(self, next_obs: torch.Tensor) -> torch.Tensor:
        return self.actor_target(next_obs)

    def _actor_q(self, obs: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        return self.critics[0](obs, action)

    # --- what leaves the learner ---------------------------------------------------------
    @torch.no_grad()
    def actions(self, obs: np.ndarray) -> np.ndarray:
        """The actor's deterministic actions in [-1, 1], [B, act_dim], for obs [B, obs_dim]."""
        x = torch.as_tensor(np.asarray(obs, dtype=np.float32), device=self.device)
        if self.obs_rms is not None:
            x = self.obs_rms.normalize(x)
        return self.actor(x).cpu().numpy()

    def policy_weights(self) -> dict[str, np.ndarray]:
        """fp32 weights of the actor network only (matching `policy_spec`); with obs_norm,
        plus the input normalisation tensors, so actors feed raw observations."""
        return with_input_norm(fp32_weights(self.actor), self.obs_rms)
