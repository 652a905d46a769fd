"""Double DQN learner: fp32 online and target networks, Huber TD loss, Adam.

The learner only sees batches of numpy arrays, so it works the same whether the batch came
from a local ring buffer, a prioritized sum tree or the Redis replay mirror. Actors never
hold this object: they receive `policy_weights()` after quantization.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from actorq.algos.base import (
    RULES,
    Learner,
    check_config,
    check_rows,
    fp32_weights,
    require_keys,
    weights_tensor,
)
from actorq.algos.dqn_update import BATCH_KEYS, DQNUpdate, multi_step
from actorq.algos.optim import Descend, FastAdam, sync_targets
from actorq.models.cnn import CNNSpec, build_network
from actorq.models.mlp import MLPSpec, QNetwork
from actorq.models.mlp_grad import (
    backward_into,
    forward_keep,
    linear_layers,
    supports_manual_grad,
)
from actorq.models.mlp_grad import forward as mlp_forward

# BATCH_KEYS (dqn_update.py) are required. Optional: "steps", the n-step length of each
# transition (actorq.actor.nstep); the target then bootstraps with gamma ** steps. Absent
# (or all 1) = one-step DQN.
# Every other key becomes float32: pixel replay keeps uint8 [C, H, W] observations and
# they turn into floats here, per sampled batch, not in the replay memory.
_DTYPES = {"action": torch.int64}


def _tensor(values: np.ndarray, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """A tensor of `values` with `dtype` on `device`, sharing memory when nothing changes."""
    t = torch.as_tensor(np.asarray(values), device=device)
    return t if t.dtype == dtype else t.to(dtype)


@dataclass
class DQNConfig:
    """DQN hyperparameters. Defaults are tuned on CartPole-v1 with bench/dqn_inprocess.py."""

    lr: float = 2.5e-3
    """Adam learning rate (the initial one when lr_final is set)."""
    lr_final: float = 0.0
    """Learning rate reached after lr_decay_updates updates, linearly (0 = constant lr).
    A smaller step once the policy is good keeps it from drifting off a solved task."""
    lr_decay_updates: int = 20_000
    """Updates over which the learning rate moves from lr to lr_final."""
    adam_eps: float = 1e-5
    """Adam epsilon (1e-8 is PyTorch's default; a larger value damps steps on rare actions)."""
    gamma: float = 0.99
    """Discount factor (per env step; an n-step target bootstraps with gamma ** n)."""
    n_step: int = 1
    """Rewards each actor sums into one transition (actorq.actor.nstep); `actorq run`
    passes it to the actors, the learner reads each transition's own length."""
    batch_size: int = 128
    """Transitions per learner update."""
    target_update_every: int = 200
    """Learner updates between target-network syncs. At 50, `actorq run`'s CartPole-v1
    defaults missed 195 within 600k env steps in 4 of 42 runs, 3 of them with the TD loss
    diverging (2e4 to 2e10); at 200 all of 20 solved, at the same speed (BENCHMARKS 5c)."""
    tau: float = 1.0
    """Sync strength: target <- tau * online + (1 - tau) * target (1.0 = hard copy)."""
    huber_delta: float = 10.0
    """TD error beyond which the Huber loss grows linearly instead of quadratically."""
    max_grad_norm: float = 10.0
    """Global gradient-norm clip before each Adam step."""
    double: bool = True
    """Double DQN: the online net picks the next action and the target net evaluates it."""
    learning_starts: int = 1_000
    """Transitions the replay must hold before the learner starts updating."""
    flat: bool = True
    """Offer the numpy-flat update path (actorq.algos.dqn_flat) where it applies: one CPU
    thread, plain fp32 MLP, one learner; false = torch's step only (same maths to rounding)."""
    qat_bits: int = 0
    """Quantization-aware training: 2..8 trains the online net through fake-quantized
    weights at that width (straight-through estimator); 0 = off."""
    is_correction: bool = False
    """n-step only: actors end each n-step window before an exploratory (non-greedy)
    action, so returns sum only rewards that followed greedy actions (actorq.actor.nstep;
    `actorq run` passes it to the actors as ACTORQ_NSTEP_CUT)."""
    # Replay capacity and the samples-per-insert ratio belong to the learner service and the
    # rate limiter (LearnerSettings.replay_capacity / samples_per_insert), not to DQN.

    def __post_init__(self) -> None:
        check_config(
            self, lr="> 0", lr_final=(RULES[">= 0"], ">= 0 (0 = constant lr)"),
            lr_decay_updates=">= 1", adam_eps="> 0", gamma="in [0, 1]",
            n_step=(lambda v: 1 <= v <= 255, "in [1, 255]"), batch_size=">= 1",
            target_update_every=">= 1", tau="in (0, 1]", huber_delta="> 0",
            max_grad_norm="> 0", learning_starts=">= 0", qat_bits="0 (off) or in [2, 8]",
        )  # fmt: skip


class DQNLearner(Learner):
    """Online/target Q-networks (MLPSpec, or CNNSpec on pixel envs) and the optimizer."""

    step_keys = (*BATCH_KEYS, "steps", "weights")
    step_names = ("loss", "q_mean", "grad_norm")
    state_attrs = ("online", "target", "optimizer")

    def __init__(
        self,
        spec: MLPSpec | CNNSpec,
        config: DQNConfig,
        device: str = "cpu",
        seed: int = 0,
    ) -> None:
        pixels = isinstance(spec, CNNSpec)
        if pixels and config.qat_bits:
            raise ValueError("DQNConfig.qat_bits: quantization-aware training covers MLP "
                             "Q-networks only, not the CNN of pixel envs")  # fmt: skip
        self.spec = spec
        self.policy_spec = spec  # the Q-network is the policy actors run
        self.config = config
        self.device = torch.device(device)
        # Seed a private RNG fork so building a learner never disturbs the caller's torch RNG.
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            online = build_network(spec) if pixels else QNetwork(spec, config.qat_bits or None)
            self.online = online.to(self.device)
        self.target = build_network(spec).to(self.device)
        self.target.load_state_dict(self.online.state_dict())
        self.target.requires_grad_(False)
        self.optimizer = FastAdam(self.online.parameters(), lr=config.lr, eps=config.adam_eps)
        self._params = list(self.online.parameters())
        self._target_params = list(self.target.parameters())
        # Hand-written backward for plain MLPs: same gradients, a fraction of the op count.
        # It writes out MLP maths only, so a CNN or fake-quantized Q-network takes autograd.
        self._layers = [] if pixels else linear_layers(self.online)
        self._target_layers = [] if pixels else linear_layers(self.target)
        self.manual_grad = not pixels and supports_manual_grad(self.online)
        self._num_updates = 0

    def optimizers(self) -> list[torch.optim.Optimizer]:
        return [self.optimizer]

    def target_tensors(self) -> list[torch.Tensor]:
        return self._target_params

    def step_flag(self, n: int) -> bool:
        """Whether update n ends with a target sync."""
        return n % self.config.target_update_every == 0

    def before_update(self, n: int) -> None:
        if self.config.lr_final > 0:  # the schedule reads the count before the update
            self.optimizer.param_groups[0]["lr"] = self.lr_at(n - 1)

    def update(
        self, batch: Mapping[str, np.ndarray], weights: np.ndarray | None = None
    ) -> DQNUpdate:
        """One gradient step on `batch`; `weights` are importance-sampling weights [B]."""
        t = self._to_tensors(batch)
        if weights is not None:
            t["weights"] = weights_tensor(weights, t["action"].shape[0], self.device)
        out = self.run_step(t)
        td_abs = out["td_abs"]
        return DQNUpdate(
            loss=float(out["loss"]),
            q_mean=float(out["q_mean"]),
            td_abs=td_abs.numpy() if td_abs.device.type == "cpu" else td_abs.cpu().numpy(),
            grad_norm=float(out["grad_norm"]),
        )

    def step(self, x: Mapping[str, torch.Tensor], flag: bool, descend: Descend) -> dict:
        """Huber TD loss, one Adam step, the target sync when `flag`."""
        delta, w = self.config.huber_delta, x.get("weights")
        target = self.td_target(x["reward"], x["next_obs"], x["done"], x.get("steps"))
        if self.manual_grad:  # d(mean huber)/dq = clamp(q - target, -delta, delta) * w / B
            with torch.no_grad():
                acts = forward_keep(self._layers, x["obs"])
                index = x["action"].unsqueeze(1)
                q = acts[-1].gather(1, index).squeeze(1)
                per_item = F.huber_loss(q, target, reduction="none", delta=delta)
                loss = per_item.mean() if w is None else (per_item * w).mean()
                scale = 1.0 / q.shape[0] if w is None else w * (1.0 / q.shape[0])
                dq = (q - target).clamp_(-delta, delta).mul_(scale)
                grad_out = torch.zeros_like(acts[-1]).scatter_(1, index, dq.unsqueeze(1))
                backward_into(self._layers, acts, grad_out)
            grad_norm = descend(self.optimizer, None, self.config.max_grad_norm)
        else:
            q = self.online(x["obs"]).gather(1, x["action"].unsqueeze(1)).squeeze(1)
            per_item = F.huber_loss(q, target, reduction="none", delta=delta)
            loss = per_item.mean() if w is None else (per_item * w).mean()
            grad_norm = descend(self.optimizer, loss, self.config.max_grad_norm)
            q, loss = q.detach(), loss.detach()
        if flag:
            sync_targets(self._target_params, self._params, self.config.tau)
        td_abs = (target - q).abs()
        return {"loss": loss, "q_mean": q.mean(), "grad_norm": grad_norm, "td_abs": td_abs}

    def lr_at(self, done: int) -> float:
        """The learning rate of the update after `done` updates."""
        cfg = self.config
        if cfg.lr_final <= 0:
            return cfg.lr
        frac = min(1.0, done / cfg.lr_decay_updates)
        return cfg.lr + frac * (cfg.lr_final - cfg.lr)

    @torch.no_grad()
    def td_target(
        self,
        reward: torch.Tensor,
        next_obs: torch.Tensor,
        done: torch.Tensor,
        steps: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """r + gamma^steps * (1 - done) * Q_target(s', a*), a* from the online net when
        double; `steps` None = one-step transitions."""
        next_q_target = self._q(self.target, self._target_layers, next_obs)
        if self.config.double:
            next_action = self._q(self.online, self._layers, next_obs).argmax(dim=1, keepdim=True)
            next_q = next_q_target.gather(1, next_action).squeeze(1)
        else:
            next_q = next_q_target.max(dim=1).values
        discount = self.config.gamma if steps is None else self.config.gamma**steps
        return reward + discount * (1.0 - done) * next_q

    def _q(self, net: nn.Module, layers: list[nn.Linear], obs: torch.Tensor) -> torch.Tensor:
        # Functional forward skips nn.Module call overhead; same ops, same values.
        return mlp_forward(layers, obs) if self.manual_grad else net(obs)

    @torch.no_grad()
    def q_values(self, obs: np.ndarray) -> np.ndarray:
        """Online-network Q-values, [B, num_actions] float32, for obs [B, obs_dim]."""
        x = torch.as_tensor(np.asarray(obs, dtype=np.float32), device=self.device)
        return self.online(x).cpu().numpy()

    def greedy_actions(self, obs: np.ndarray) -> np.ndarray:
        """argmax_a Q(s, a) per row of obs [B, obs_dim], as int64 [B]."""
        return self.q_values(obs).argmax(axis=1).astype(np.int64)

    def policy_weights(self) -> dict[str, np.ndarray]:
        """fp32 contiguous copies of the online net's parameters, keyed by state-dict name."""
        return fp32_weights(self.online)

    @torch.no_grad()
    def load_policy_weights(self, weights: dict[str, np.ndarray]) -> None:
        """Set the online and the target net to `weights` (as `policy_weights` gives them),
        in place, so the numpy-flat runner's views of the parameters stay valid."""
        state = {name: torch.from_numpy(np.asarray(w)) for name, w in weights.items()}
        self.online.load_state_dict(state)
        self.target.load_state_dict(state)

    def _to_tensors(self, batch: Mapping[str, np.ndarray]) -> dict[str, torch.Tensor]:
        require_keys(batch, BATCH_KEYS)
        out = {k: _tensor(batch[k], _DTYPES.get(k, torch.float32), self.device) for k in BATCH_KEYS}
        if multi_step(batch):
            out["steps"] = _tensor(batch["steps"], torch.float32, self.device)
        check_rows(out, out["action"].shape[0], "action")
        return out
