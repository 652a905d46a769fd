"""On-policy actor-critic learners on trajectory segments: PPO, APPO (V-trace) and A2C.

Actors record the behaviour log-probability of every action under their int8 policy; the
learner corrects lag and quantization with importance ratios pi_learner / mu_behaviour:
- PPO: clipped surrogate, GAE(lam) advantages from the learner's value net;
- APPO: V-trace targets and advantages, then the same surrogate (RLlib's APPO; `clip = 0`
  gives IMPALA's rho-weighted gradient);
- A2C: one epoch, one minibatch, no clipping.
Only the policy network is broadcast. Batches are time-major: obs [T, B, obs_dim],
the rest [T, B] (actorq.onpolicy.segments).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from actorq.algos.base import RULES, Learner, check_config, fp32_weights
from actorq.algos.optim import Descend, FastAdam
from actorq.algos.vtrace import RatioStats, gae, ratio_stats, vtrace
from actorq.models.cnn import CNNSpec, build_network
from actorq.models.mlp import MLPSpec

LOSSES = ("ppo", "vtrace")


@dataclass
class PPOConfig:
    """PPO hyperparameters (ACTORQ_PPO_*). Defaults tuned on CartPole-v1 through the services."""

    lr: float = 1e-3
    gamma: float = 0.99
    lam: float = 0.95
    """GAE lambda (V-trace: the trace-cutting lambda)."""
    clip: float = 0.2
    """Surrogate clip epsilon; 0 = no clipping."""
    epochs: int = 4
    minibatches: int = 4
    ent_coef: float = 0.01
    vf_coef: float = 0.5
    max_grad_norm: float = 0.5
    normalize_advantages: bool = True
    loss: str = "ppo"
    rho_bar: float = 1.0
    """V-trace truncation of the importance weights in the targets and the gradient."""
    c_bar: float = 1.0
    """V-trace truncation of the trace coefficients."""
    segments_per_update: int = 2
    """Trajectory segments (each T steps x one actor's envs) per learner update."""
    max_policy_lag: int = 8
    """Segments whose policy is more than this many versions behind are dropped (counted)."""
    batch_size: int = field(default=0, repr=False)
    """Unused (the loop counts segments); present for the Algorithm protocol."""
    learning_starts: int = field(default=0, repr=False)

    def __post_init__(self) -> None:
        check_config(
            self, lr="> 0", gamma="in [0, 1]", lam="in [0, 1]",
            clip=(RULES[">= 0"], ">= 0 (0 = off)"), epochs=">= 1", minibatches=">= 1",
            max_grad_norm="> 0", loss=(lambda v: v in LOSSES, f"one of {LOSSES}"),
            rho_bar="> 0", c_bar="> 0", segments_per_update=">= 1", max_policy_lag=">= 0",
        )  # fmt: skip


@dataclass
class APPOConfig(PPOConfig):
    """APPO (ACTORQ_APPO_*): V-trace targets and advantages, clipped surrogate."""

    loss: str = "vtrace"
    lam: float = 1.0
    epochs: int = 2
    minibatches: int = 2


@dataclass
class A2CConfig(PPOConfig):
    """A2C (ACTORQ_A2C_*): one unclipped gradient step per batch."""

    clip: float = 0.0
    epochs: int = 1
    minibatches: int = 1
    lam: float = 1.0


@dataclass(frozen=True)
class OnPolicyUpdate:
    loss: float
    policy_loss: float
    value_loss: float
    entropy: float
    grad_norm: float
    ratios: RatioStats
    """Ratios before the first gradient step: the behaviour-vs-learner gap itself."""
    q_mean: float = 0.0  # the UpdateResult protocol's fields; no Q here
    td_abs: np.ndarray = field(default_factory=lambda: np.zeros(0, np.float32))


class OnPolicyLearner(Learner):
    """fp32 policy (broadcast) and value networks, one Adam, one `update` per batch."""

    state_attrs = ("policy", "value", "optimizer")

    def __init__(
        self,
        obs_dim: int,
        num_actions: int,
        hidden: tuple[int, ...],
        config: PPOConfig | None = None,
        device: str = "cpu",
        seed: int = 0,
        spec: CNNSpec | None = None,
    ) -> None:
        """`spec`: a CNNSpec for pixel envs (policy and value are then separate CNNs)."""
        self.config = config or PPOConfig()
        self.device = torch.device(device)
        self.policy_spec: MLPSpec | CNNSpec = spec or MLPSpec(obs_dim, num_actions, hidden)
        value_spec = (
            dataclasses.replace(spec, num_outputs=1) if spec else MLPSpec(obs_dim, 1, hidden)
        )
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            self.policy = build_network(self.policy_spec).to(self.device)
            self.value = build_network(value_spec).to(self.device)
            _shrink_last_layer(self.policy, 0.01)  # near-uniform first policy (PPO practice)
        self.generator = torch.Generator().manual_seed(seed)
        params = [*self.policy.parameters(), *self.value.parameters()]
        self.optimizer = FastAdam(params, lr=self.config.lr, eps=1e-5)
        self._num_updates = 0

    step_keys = ("obs", "action", "behaviour_logp", "advantage", "target")
    step_names = ("loss", "policy_loss", "value_loss", "entropy", "grad_norm")
    step_counts_updates = False  # a step is one minibatch; `update` runs many

    def optimizers(self) -> list[torch.optim.Optimizer]:
        return [self.optimizer]

    def log_probs(self, obs: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        """log pi(a | s) of the learner's fp32 policy, any leading shape."""
        logp = F.log_softmax(self._forward(self.policy, obs), dim=-1)
        return logp.gather(-1, actions.unsqueeze(-1)).squeeze(-1)

    def _forward(self, net: torch.nn.Module, obs: torch.Tensor) -> torch.Tensor:
        """Any leading shape [..., *obs_shape] (MLPs take float obs, CNNs uint8 pixels)."""
        if not isinstance(self.policy_spec, CNNSpec):
            return net(obs.float())
        lead = obs.shape[: obs.dim() - 3]
        return net(obs.reshape(-1, *obs.shape[-3:])).reshape(*lead, -1)

    def update(self, batch: Mapping[str, np.ndarray], weights: np.ndarray | None = None):
        """Several epochs of minibatch steps on one time-major batch (see module doc)."""
        flat, stats = self.prepare(batch)
        results = [self._step(mb) for mb in self.minibatches(flat)]
        self._num_updates += 1
        mean = np.mean(np.array(results), axis=0)
        return OnPolicyUpdate(*(float(x) for x in mean), ratios=stats)

    def prepare(
        self, batch: Mapping[str, np.ndarray]
    ) -> tuple[dict[str, torch.Tensor], RatioStats]:
        """Flattened [T * B] step inputs (advantages and value targets from the current
        networks) and the ratio statistics before any step."""
        t = _tensors(batch, self.device)
        with torch.no_grad():
            log_ratio0 = self.log_probs(t["obs"], t["action"]) - t["behaviour_logp"]
            advantages, targets, clipped = self._targets(t, log_ratio0)
        stats = ratio_stats(log_ratio0, clipped)
        flat = {k: t[k].flatten(0, 1) for k in ("obs", "action", "behaviour_logp")}
        flat["advantage"], flat["target"] = advantages.flatten(), targets.flatten()
        return flat, stats

    def minibatches(self, flat: dict[str, torch.Tensor]):  # type: ignore[no-untyped-def]
        """The epochs' minibatches in order (a fresh permutation per epoch); every
        minibatch has the same size, so a captured step's static inputs fit them all."""
        n = flat["action"].shape[0]
        size = max(n // self.config.minibatches, 1)
        for _ in range(self.config.epochs):
            order = torch.randperm(n, generator=self.generator).to(self.device)
            for start in range(0, n - size + 1, size):
                idx = order[start : start + size]
                yield {k: v[idx] for k, v in flat.items()}

    def _targets(self, t: dict[str, torch.Tensor], log_ratio: torch.Tensor):
        """(advantages, value targets, clipped mask) with the current value net."""
        cfg = self.config
        values, next_values = self._values(t)
        if cfg.loss == "vtrace":
            vt = vtrace(
                log_ratio, t["reward"], values, next_values, t["terminated"], t["truncated"],
                cfg.gamma, cfg.rho_bar, cfg.c_bar, cfg.lam,
            )  # fmt: skip
            clipped = torch.exp(log_ratio) > cfg.rho_bar
            advantages, targets = vt.pg_advantages, vt.vs
        else:
            advantages, targets = gae(
                t["reward"], values, next_values, t["terminated"], t["truncated"],
                cfg.gamma, cfg.lam,
            )  # fmt: skip
            # A2C (clip 0) clips nothing.
            clipped = (torch.exp(log_ratio) - 1.0).abs() > (cfg.clip or float("inf"))
        if cfg.normalize_advantages and advantages.numel() > 1:
            advantages = (advantages - advantages.mean()) / (advantages.std() + 1e-8)
        return advantages, targets, clipped

    def _values(self, t: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        """V(s_t) [T, B] and V(s_{t+1}) [T, B], truncated steps bootstrapped from final obs."""
        all_obs = torch.cat([t["obs"], t["last_obs"].unsqueeze(0)], dim=0)
        v = self._forward(self.value, all_obs).squeeze(-1)
        values, next_values = v[:-1], v[1:].clone()
        if t["trunc_index"].numel():
            flat = next_values.view(-1)
            flat[t["trunc_index"]] = self._forward(self.value, t["trunc_obs"]).squeeze(-1)
        return values, next_values

    def _step(self, mb: dict[str, torch.Tensor]) -> tuple[float, ...]:
        out = self.step(mb, False, self.descend)
        return tuple(float(out[name]) for name in self.step_names)

    def step(self, x: Mapping[str, torch.Tensor], flag: bool, descend: Descend) -> dict:
        """One minibatch step: policy loss (clipped surrogate, IMPALA's or A2C's), value
        loss and entropy bonus, one Adam step."""
        cfg = self.config
        logp_all = F.log_softmax(self._forward(self.policy, x["obs"]), dim=-1)
        logp = logp_all.gather(-1, x["action"].unsqueeze(-1)).squeeze(-1)
        ratio = torch.exp(logp - x["behaviour_logp"])
        adv = x["advantage"]
        if cfg.clip:
            policy_loss = clipped_surrogate_loss(ratio, adv, cfg.clip).mean()
        elif cfg.loss == "vtrace":  # IMPALA: advantages already carry the truncated rho
            policy_loss = -(logp * adv).mean()
        else:
            policy_loss = -(ratio * adv).mean()
        values = self._forward(self.value, x["obs"]).squeeze(-1)
        value_loss = 0.5 * (values - x["target"]).pow(2).mean()
        entropy = -(logp_all.exp() * logp_all).sum(-1).mean()
        loss = policy_loss + cfg.vf_coef * value_loss - cfg.ent_coef * entropy
        norm = descend(self.optimizer, loss, cfg.max_grad_norm)
        parts = (loss, policy_loss, value_loss, entropy)
        out = {name: t.detach() for name, t in zip(self.step_names, parts, strict=False)}
        return {**out, "grad_norm": norm}

    def policy_weights(self) -> dict[str, np.ndarray]:
        """The policy network only (logits): what actors run."""
        return fp32_weights(self.policy)

    def state_dict(self) -> dict[str, Any]:
        # `actorq ptq` evaluates "online": the network actors run.
        return {**super().state_dict(), "online": self.policy.state_dict()}


def clipped_surrogate_loss(ratio: torch.Tensor, adv: torch.Tensor, clip: float) -> torch.Tensor:
    """PPO's per-sample loss -min(r A, clip(r, 1 - eps, 1 + eps) A)."""
    return -torch.min(ratio * adv, torch.clamp(ratio, 1.0 - clip, 1.0 + clip) * adv)


BATCH_KEYS = ("obs", "action", "reward", "terminated", "truncated", "behaviour_logp", "last_obs")


def _tensors(batch: Mapping[str, np.ndarray], device: torch.device) -> dict[str, torch.Tensor]:
    missing = [k for k in BATCH_KEYS if k not in batch]
    if missing:
        raise KeyError(f"on-policy batch is missing {missing}; expected keys {list(BATCH_KEYS)}")
    out = {k: torch.as_tensor(np.asarray(batch[k]), device=device) for k in BATCH_KEYS}
    out["action"] = out["action"].long()
    for k in ("reward", "terminated", "truncated", "behaviour_logp"):
        out[k] = out[k].float()
    shape = tuple(out["action"].shape)
    if len(shape) != 2:
        raise ValueError(f"batch['action'] must be time-major [T, B], got shape {shape}")
    for k in ("reward", "terminated", "truncated", "behaviour_logp"):
        if tuple(out[k].shape) != shape:
            raise ValueError(f"batch[{k!r}] has shape {tuple(out[k].shape)}, expected {shape}")
    index = batch.get("trunc_index", np.zeros(0, np.int64))
    out["trunc_index"] = torch.as_tensor(np.asarray(index, np.int64), device=device)
    trunc_obs = batch.get("trunc_obs", np.zeros((0, *out["obs"].shape[2:]), np.float32))
    out["trunc_obs"] = torch.as_tensor(np.asarray(trunc_obs), device=device)
    return out


@torch.no_grad()
def _shrink_last_layer(net: torch.nn.Module, factor: float) -> None:
    last = [m for m in net.modules() if isinstance(m, torch.nn.Linear)][-1]
    last.weight.mul_(factor)
    last.bias.zero_()
