"""What every learning algorithm offers the learner loop, and helpers the continuous ones share.

The loop (actorq.learner.loop) only needs::

    result = algo.update(batch, importance_weights)   # one gradient step
    sampler.update_priorities(indices, result.td_abs)
    publish(algo.policy_spec, algo.policy_weights())  # the actor network only, fp32
    checkpoint(algo.state_dict())

so DQN, DDPG, TD3, SAC and D4PG are interchangeable behind `make_algorithm`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any, Protocol, runtime_checkable

import numpy as np
import torch
from torch import nn

from actorq.algos.optim import Descend, FastAdam, descend
from actorq.models.mlp import MLPSpec

CONTINUOUS_BATCH_KEYS = ("obs", "action", "reward", "next_obs", "done")


@runtime_checkable
class UpdateResult(Protocol):
    loss: float
    q_mean: float
    td_abs: np.ndarray
    grad_norm: float


@runtime_checkable
class Algorithm(Protocol):
    """A learner algorithm: fp32 networks, one `update` per sampled batch."""

    config: Any  # a *Config dataclass with at least batch_size and learning_starts
    policy_spec: MLPSpec  # the network actors run (what policy_weights() fills)

    @property
    def num_updates(self) -> int: ...

    def update(
        self, batch: Mapping[str, np.ndarray], weights: np.ndarray | None = None
    ) -> UpdateResult: ...

    def policy_weights(self) -> dict[str, np.ndarray]: ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: Mapping[str, Any]) -> None: ...


@dataclass(frozen=True)
class ContinuousUpdate:
    """What one actor-critic update reports."""

    loss: float
    """Importance-weighted critic loss."""
    q_mean: float
    """Mean Q(s, a) of the batch's actions before the update (first critic)."""
    td_abs: np.ndarray
    """|target - Q(s, a)| per transition, shape [B]: priorities for prioritized replay."""
    grad_norm: float
    """Critic gradient norm before clipping."""
    actor_loss: float
    """Actor loss, NaN on steps where the actor was not updated (TD3's delay)."""


Rule = tuple[Callable[[Any], bool], str]  # (the value is valid, what valid means)
RULES: dict[str, Callable[[Any], bool]] = {
    "> 0": lambda v: v > 0,
    ">= 0": lambda v: v >= 0,
    ">= 1": lambda v: v >= 1,
    "in [0, 1]": lambda v: 0.0 <= v <= 1.0,
    "in (0, 1]": lambda v: 0.0 < v <= 1.0,
    "0 (off) or in [2, 8]": lambda v: v == 0 or 2 <= v <= 8,
}


def check_config(config: Any, **rules: str | Rule) -> None:
    """ValueError for the first field of `config`, in `rules` order, that breaks its rule:
    one of RULES by what it says, or (predicate, what it says)."""
    for name, rule in rules.items():
        ok, expected = (RULES[rule], rule) if isinstance(rule, str) else rule
        value = getattr(config, name)
        if not ok(value):
            raise ValueError(f"{type(config).__name__}.{name} must be {expected}, got {value!r}")


def require_keys(batch: Mapping[str, Any], keys: tuple[str, ...]) -> None:
    missing = [k for k in keys if k not in batch]
    if missing:
        raise KeyError(f"batch is missing {missing}; expected keys {list(keys)}")


def check_rows(columns: Mapping[str, Any], size: int, reference: str) -> None:
    """ValueError unless every column has `size` rows, as batch[reference] has."""
    for k, v in columns.items():
        if v.shape[0] != size:
            raise ValueError(f"batch[{k!r}] has {v.shape[0]} rows, batch[{reference!r}] has {size}")


def batch_tensors(
    batch: Mapping[str, np.ndarray], act_dim: int, device: torch.device
) -> dict[str, torch.Tensor]:
    """float32 tensors of a continuous batch, shapes checked; `steps` (n-step length) kept."""
    require_keys(batch, CONTINUOUS_BATCH_KEYS)
    out = {
        k: torch.as_tensor(np.asarray(batch[k]), device=device).to(torch.float32)
        for k in CONTINUOUS_BATCH_KEYS
    }
    if "steps" in batch:
        out["steps"] = torch.as_tensor(np.asarray(batch["steps"]), device=device).to(torch.float32)
    size = out["obs"].shape[0]
    if out["action"].shape != (size, act_dim):
        raise ValueError(
            f"batch['action'] must have shape ({size}, {act_dim}), got {tuple(out['action'].shape)}"
        )
    check_rows(out, size, "obs")
    return out


def bootstrap_discount(t: Mapping[str, torch.Tensor], gamma: float) -> torch.Tensor:
    """gamma ** steps * (1 - done), `steps` the n-step lengths (1 without that column)."""
    not_done = 1.0 - t["done"]
    if "steps" not in t:
        return gamma * not_done
    # A Python base, not torch.tensor(gamma, device=...): building a device tensor from host
    # data cannot happen inside a CUDA graph capture; pow computes in float32 either way.
    return torch.pow(gamma, t["steps"]) * not_done


def weights_tensor(weights: np.ndarray | None, size: int, device: torch.device) -> torch.Tensor:
    if weights is None:
        return torch.ones(size, device=device)
    w = torch.as_tensor(np.asarray(weights), dtype=torch.float32, device=device)
    if w.shape != (size,):
        raise ValueError(f"weights must have shape ({size},), got {tuple(w.shape)}")
    return w


def fp32_weights(module: nn.Module) -> dict[str, np.ndarray]:
    """fp32 contiguous copies of a module's state dict, keyed by name."""
    return {
        name: np.ascontiguousarray(t.detach().cpu().numpy(), dtype=np.float32).copy()
        for name, t in module.state_dict().items()
    }


def adam(module: nn.Module, lr: float, eps: float = 1e-8) -> FastAdam:
    """Adam with the fused kernel (~3x faster than the per-tensor loop for small MLPs on CPU)
    and a cached step (FastAdam, bit-identical)."""
    return FastAdam(module.parameters(), lr=lr, eps=eps)


class Learner:
    """What the update runners (actorq.algos.capture) need of an algorithm: its `step`.

    `step(x, flag, descend)` is the whole update, written once and capturable (static
    shapes, no host sync): one `descend(optimizer, loss, max_norm)` per optimizer, the
    target update, and 0-d tensors named `step_names` plus "td_abs" [B]. `flag` is
    `step_flag(n)`, a host-side schedule (TD3's delayed actor, DQN's target sync).
    """

    step_keys: tuple[str, ...] = (*CONTINUOUS_BATCH_KEYS, "steps", "weights")
    step_names: tuple[str, ...] = ("loss", "q_mean", "grad_norm", "actor_loss")
    step_counts_updates = True  # each step is one update (not one of PPO's minibatches)
    descend: Descend = staticmethod(descend)  # the eager path's optimizer step
    # Data-parallel learners (actorq.learner.distributed) set this to average gradients
    # across ranks between backward and each optimizer step; eager path only.
    grad_sync: Callable[[list[torch.Tensor]], None] | None = None
    _num_updates = 0

    @property
    def num_updates(self) -> int:
        """Learner updates done so far (also the policy version the learner would publish)."""
        return self._num_updates

    def load_counters(self, num_updates: int) -> None:
        """Set the update count (schedules follow it) without other state."""
        self._num_updates = int(num_updates)

    def optimizers(self) -> list[torch.optim.Optimizer]:
        """Every optimizer `step` descends with, in a fixed order."""
        raise NotImplementedError

    state_attrs: tuple[str, ...] = ()  # networks, optimizers, tensors a checkpoint keeps

    def state_dict(self) -> dict[str, Any]:
        """Everything needed to resume; only tensors and plain numbers (torch.load-safe)."""
        state = {name: _saved(getattr(self, name)) for name in self.state_attrs}
        state["num_updates"] = self._num_updates
        rms = getattr(self, "obs_rms", None)
        return state if rms is None else {**state, "obs_rms": rms.state_dict()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore what `state_dict` saved, so the next update matches the saved learner's."""
        rms = getattr(self, "obs_rms", None)
        if rms is not None and "obs_rms" in state:
            rms.load_state_dict(state["obs_rms"])
        for name in self.state_attrs:
            obj = getattr(self, name)
            if isinstance(obj, torch.Tensor):
                with torch.no_grad():
                    obj.copy_(state[name])
            else:
                obj.load_state_dict(state[name])
        self._num_updates = int(state["num_updates"])

    def prime_optimizer(self) -> None:
        """Create every optimizer's state with a zero-gradient step (parameters unchanged),
        so data-parallel ranks hold the same tensors for rank 0's state to overwrite."""
        for opt in self.optimizers():
            if opt.state:
                continue
            params = [p for group in opt.param_groups for p in group["params"]]
            for p in params:
                p.grad = torch.zeros_like(p)
            opt.step()
            opt.zero_grad(set_to_none=True)

    def weights_checksum(self) -> float:
        """Sum of |w| over every optimized parameter: equal on data-parallel ranks in sync."""
        params = [p for o in self.optimizers() for g in o.param_groups for p in g["params"]]
        return float(sum(p.detach().double().abs().sum().item() for p in params))

    def target_tensors(self) -> list[torch.Tensor]:
        """What `step` mutates besides the optimizers' parameters and state (targets)."""
        return []

    def step_flag(self, n: int) -> bool:
        """The static flag of update number n (1-based)."""
        return False

    def before_update(self, n: int) -> None:
        """Host work before update n (a learning-rate schedule)."""

    def step(self, x: Mapping[str, torch.Tensor], flag: bool, descend: Descend) -> dict:
        raise NotImplementedError

    def run_step(self, x: Mapping[str, torch.Tensor], descend: Descend | None = None) -> dict:
        """One update on the eager path: `step` with the host schedule around it."""
        n = self._num_updates + 1
        self.before_update(n)
        if descend is None:
            sync = self.grad_sync
            descend = self.descend if sync is None else partial(self.descend, grad_sync=sync)
        out = self.step(x, self.step_flag(n), descend)
        self._num_updates = n
        return out


def _saved(obj: Any) -> Any:
    return obj.detach().clone() if isinstance(obj, torch.Tensor) else obj.state_dict()


def continuous_result(out: Mapping[str, torch.Tensor]) -> ContinuousUpdate:
    """A step's outputs as the ContinuousUpdate the learner loop reads."""
    actor_loss = out.get("actor_loss")
    return ContinuousUpdate(
        loss=float(out["loss"]),
        q_mean=float(out["q_mean"]),
        td_abs=out["td_abs"].cpu().numpy(),
        grad_norm=float(out["grad_norm"]),
        actor_loss=float("nan") if actor_loss is None else float(actor_loss),
    )


def normalized(t: dict[str, torch.Tensor], rms: Any) -> dict[str, torch.Tensor]:
    """Update running observation statistics with the batch and normalise obs and next_obs
    (unchanged when `rms` is None)."""
    if rms is None:
        return t
    rms.update(t["obs"].cpu().numpy())
    return {**t, "obs": rms.normalize(t["obs"]), "next_obs": rms.normalize(t["next_obs"])}


def with_input_norm(weights: dict[str, np.ndarray], rms: Any) -> dict[str, np.ndarray]:
    """Policy weights plus the input normalisation tensors (unchanged when `rms` is None)."""
    if rms is None:
        return weights
    from actorq.normalize import input_norm_tensors

    return {**input_norm_tensors(rms), **weights}


class Critic(nn.Module):
    """Q(s, a): an MLP over the concatenated observation and action."""

    def __init__(self, obs_dim: int, act_dim: int, hidden: tuple[int, ...], outputs: int = 1):
        super().__init__()
        from actorq.models.mlp import QNetwork

        self.net = QNetwork(MLPSpec(obs_dim + act_dim, outputs, hidden))
        self.outputs = outputs

    def forward(self, obs: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        out = self.net(torch.cat([obs, action], dim=1))
        return out.squeeze(1) if self.outputs == 1 else out
