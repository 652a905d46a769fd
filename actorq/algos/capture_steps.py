"""What the captured runners (actorq.algos.capture) hold around an algorithm's `step`.

The update is the algorithm's own `step(x, flag, descend)`, the one the eager path calls;
a `Program` supplies only the static tensors: inputs `x` (filled by the runner), an
optimizer step (`SlotDescent`: `fused_adam` with the learning rate a device tensor) and a
readback ring (`Readback`). Nothing in a step syncs with the host. Host-scheduled variation
(TD3's delayed actor, DQN's target sync) is the static `flag`: one graph per flag value
(docs/learner-update-paths.md says why not a device-side mask).
"""

from __future__ import annotations

from typing import Any

import torch

from actorq.algos.optim import adam_in_tensor_ops, clip_grad_norm, fused_adam


class AdamSlots:
    """Parameter and state lists of a one-group Adam, for `fused_adam`. The state tensors
    are Adam's own, so checkpoints and the eager path see every step; with `tensor_lr`
    the learning rate is a device tensor [k], else a float (bit-identical to FastAdam).
    """

    def __init__(
        self, opt: torch.optim.Optimizer, k: int, tensor_lr: bool, fused: bool = True
    ) -> None:
        if len(opt.param_groups) != 1:
            raise ValueError(
                f"captured update needs one parameter group, got {len(opt.param_groups)}"
            )
        group = opt.param_groups[0]
        if group.get("amsgrad") or group.get("weight_decay") or group.get("maximize"):
            raise ValueError("captured update supports Adam without amsgrad/weight decay/maximize")
        self.opt, self.group = opt, group
        self.params: list[torch.Tensor] = list(group["params"])
        device = self.params[0].device
        for p in self.params:
            state = opt.state[p]
            if "exp_avg" not in state:  # what Adam's _init_group creates (fused: step on device)
                state["step"] = torch.zeros((), dtype=torch.float32, device=p.device)
                state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                state["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
            elif state["step"].device != p.device:
                state["step"] = state["step"].to(p.device)  # a graph cannot read host memory
        if device.type == "cuda":
            group["fused"], group["foreach"] = True, False  # eager Adam then takes device steps
        forget = getattr(opt, "forget_state_lists", None)
        if forget is not None:
            forget()  # FastAdam's cached lists may hold replaced steps
        self.exp_avgs = [opt.state[p]["exp_avg"] for p in self.params]
        self.exp_avg_sqs = [opt.state[p]["exp_avg_sq"] for p in self.params]
        self.steps = [opt.state[p]["step"] for p in self.params]
        self.tensor_lr = tensor_lr
        self.kernel = fused_adam if fused else adam_in_tensor_ops
        self.lr_host = [float(group["lr"])] * k
        self.lr = torch.full((k,), float(group["lr"]), dtype=torch.float32, device=device)

    def current(self) -> bool:
        """Whether Adam still holds these state tensors (load_state_dict replaces them)."""
        state = self.opt.state.get(self.params[0], {})
        return state.get("exp_avg") is self.exp_avgs[0] and state.get("step") is self.steps[0]

    def set_lr(self, i: int) -> bool:
        """Take the group's learning rate for update i of a replay; True when it changed."""
        lr = float(self.group["lr"])
        changed = lr != self.lr_host[i]
        self.lr_host[i] = lr
        return changed

    def push_lr(self) -> None:
        """Copy the host learning rates to the device tensor (outside any graph)."""
        self.lr.copy_(torch.tensor(self.lr_host, dtype=torch.float32))

    def step(self, grads: list[torch.Tensor], i: int = 0) -> None:
        lr = self.lr[i] if self.tensor_lr else self.lr_host[i]
        self.kernel(self, grads, self.group, lr)


class SlotDescent:
    """The captured paths' `descend(optimizer, loss, max_norm)`: autograd.grad into the
    optimizer's parameters, the one clip, Adam on its `AdamSlots` (update i of a replay)."""

    def __init__(self, slots: list[AdamSlots]) -> None:
        self.by_optimizer = {id(s.opt): s for s in slots}
        self.i = 0

    def __call__(
        self, opt: torch.optim.Optimizer, loss: torch.Tensor | None, max_norm: float | None = None
    ) -> torch.Tensor | None:
        slots = self.by_optimizer[id(opt)]
        if loss is None:  # gradients written by hand (DQN's MLP backward)
            grads = [p.grad for p in slots.params]
        else:  # of these parameters only, as the eager loss.backward(inputs=params)
            grads = list(torch.autograd.grad(loss, slots.params))
        norm = None if max_norm is None else clip_grad_norm(grads, max_norm)
        slots.step(grads, self.i)
        return norm


class Readback:
    """Static output ring: per update a row of scalars (NaN where a step produced none)
    and |TD error| [B]. The slot index is a device tensor advanced inside the step, so a
    captured graph writes a different row on each replay."""

    def __init__(self, names: tuple[str, ...], slots: int, batch: int, device: torch.device):
        self.names, self.slots = names, slots
        self.stats = torch.zeros((slots, len(names)), dtype=torch.float32, device=device)
        self.td = torch.zeros((slots, batch), dtype=torch.float32, device=device)
        self.slot = torch.zeros(1, dtype=torch.int64, device=device)
        self.nan = torch.full((), float("nan"), device=device)

    @torch.no_grad()
    def write(self, out: dict[str, torch.Tensor]) -> None:
        values = [out.get(name) for name in self.names]
        row = torch.stack(
            [self.nan if v is None else v.detach().reshape(()).float() for v in values]
        )
        self.stats.index_copy_(0, self.slot, row.unsqueeze(0))
        td_abs = out.get("td_abs")
        if td_abs is not None:
            self.td.index_copy_(0, self.slot, td_abs.detach().unsqueeze(0))
        self.slot.add_(1).remainder_(self.slots)

    def tensors(self) -> list[torch.Tensor]:
        return [self.stats, self.td, self.slot]


class Program:
    """An algorithm's `step` on static tensors, plus the host-side schedule around it."""

    def __init__(self, algo: Any, k: int, tensor_lr: bool, fused: bool = True) -> None:
        self.algo = algo
        self.names: tuple[str, ...] = algo.step_names
        self.keys: tuple[str, ...] = algo.step_keys
        self.counts_updates: bool = algo.step_counts_updates
        self.opts = [AdamSlots(o, k, tensor_lr, fused) for o in algo.optimizers()]
        self.descent = SlotDescent(self.opts)

    def flag(self, n: int) -> bool:
        """Static flag of update number n (1-based, after the increment)."""
        return bool(self.algo.step_flag(n))

    def prepare(self, n: int) -> None:
        """Host work before update n (DQN's learning-rate schedule)."""
        self.algo.before_update(n)

    def step(self, x: dict[str, torch.Tensor], out: Readback, flag: bool, i: int) -> None:
        self.descent.i = i
        out.write(self.algo.step(x, flag, self.descent))

    def state_tensors(self) -> list[torch.Tensor]:
        """Everything a step mutates (warm-up before a capture is undone with these)."""
        tensors = [p for o in self.opts for p in o.params]
        for o in self.opts:
            tensors += o.exp_avgs + o.exp_avg_sqs + o.steps
        return tensors + list(self.algo.target_tensors())

    def generators(self) -> list[torch.Generator]:
        rng = getattr(self.algo, "rng", None)
        return [rng] if isinstance(rng, torch.Generator) else []


def program_for(algo: Any) -> type[Program]:
    """The Program of an algorithm object (ValueError for one without a `step`)."""
    if not callable(getattr(algo, "step", None)) or not hasattr(algo, "step_names"):
        raise ValueError(f"no captured update for {type(algo).__name__}")
    return Program
