"""The one optimizer step of every learner update: Adam, gradient clipping, target sync.

For small MLPs, `torch.optim.Adam(fused=True).step()` and `clip_grad_norm_` spend most of
their time in Python around one or two foreach kernels; here the lists are built once:
- `FastAdam`: a `torch.optim.Adam` (same state dict and param_groups) whose `step` calls
  `fused_adam` on cached state lists, falling back to Adam's own step when the cache does
  not fit (a parameter without gradient, a changed group);
- `clip_grad_norm`: the op sequence of `clip_grad_norm_(foreach=True)`;
- `sync_targets`: target <- tau * online + (1 - tau) * target;
- `descend`: backward, clip, Adam step, per optimizer on the eager path.
tests/unit/test_fast_update.py checks these against torch's own path bit for bit.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch import nn


def _unwrapped(fn: Callable[..., Any]) -> Callable[..., Any]:
    """torch's function without its decorator (`_disable_dynamo`, `_use_grad`), whose
    first call imports torch._dynamo; the function itself if torch drops the decorator."""
    return getattr(fn, "__wrapped__", fn)


_Optimizer = torch.optim.Optimizer
_ADD_PARAM_GROUP = _unwrapped(_Optimizer.add_param_group)
# The same for Adam.step's _use_grad wrapper (its first call imports torch._dynamo, 2-3 s
# of a learner's start-up under load): `FastAdam.step` already runs under no_grad.
_ADAM_STEP = _unwrapped(torch.optim.Adam.step)
# ... for state_dict / load_state_dict: the learner reads its dtype from its state dict
# before publishing its first policy (1.5 s of start-up on a 2-core Xeon, BENCHMARKS.md
# 12e), and the first checkpoint would stall the training thread as long; and for
# zero_grad, which the eager path calls before each backward (`auto` times that path at
# start-up, actorq.learner.device_probe).
_STATE_DICT = _unwrapped(_Optimizer.state_dict)
_LOAD_STATE_DICT = _unwrapped(_Optimizer.load_state_dict)
_ZERO_GRAD = _unwrapped(_Optimizer.zero_grad)


class FastAdam(torch.optim.Adam):
    """Adam (fused kernel, no amsgrad, no weight decay) with a cached step."""

    def __init__(self, params: Iterable[nn.Parameter], lr: float, eps: float = 1e-8) -> None:
        params = list(params)
        fused = bool(params) and params[0].device.type in ("cpu", "cuda")
        super().__init__(params, lr=lr, eps=eps, fused=fused)
        self._cache: _AdamLists | None = None

    def zero_grad(self, set_to_none: bool = True) -> None:
        _ZERO_GRAD(self, set_to_none)

    def state_dict(self) -> dict[str, Any]:
        return _STATE_DICT(self)  # torch's own code without the dynamo guard (see above)

    def load_state_dict(self, state_dict: dict) -> None:
        _LOAD_STATE_DICT(self, state_dict)
        self._cache = None  # the state tensors were replaced

    def add_param_group(self, param_group: dict) -> None:
        # torch wraps Optimizer.add_param_group in _disable_dynamo, whose first call
        # imports torch._dynamo: ~0.5 s of a learner's start-up, before its first policy
        # is published and so before any actor can step. The wrapped function is the same
        # code; only the (unused) tracing guard is skipped.
        _ADD_PARAM_GROUP(self, param_group)
        self._cache = None

    def forget_state_lists(self) -> None:
        """Drop the cached state lists (someone replaced Adam's state tensors)."""
        self._cache = None

    @torch.no_grad()
    def step(self, closure=None):  # type: ignore[no-untyped-def, override]
        cache = self._cache
        if closure is not None or cache is None or not cache.usable(self):
            loss = _ADAM_STEP(self, closure)
            self._cache = _AdamLists.build(self)
            return loss
        group = self.param_groups[0]
        grads = [p.grad for p in cache.params]
        fused_adam(cache, grads, group, group["lr"])
        return None


class _AdamLists:
    """Parameter and state lists of a single-group fused Adam, in the order Adam uses."""

    def __init__(self, params: list[torch.Tensor], state: dict) -> None:
        self.params = params
        self.exp_avgs = [state[p]["exp_avg"] for p in params]
        self.exp_avg_sqs = [state[p]["exp_avg_sq"] for p in params]
        self.steps = [state[p]["step"] for p in params]

    @classmethod
    def build(cls, opt: torch.optim.Adam) -> _AdamLists | None:
        """The lists, or None when the fast path does not apply to this optimizer."""
        if len(opt.param_groups) != 1:
            return None
        group = opt.param_groups[0]
        if not group["fused"] or group["amsgrad"] or group["weight_decay"] or group["maximize"]:
            return None
        params = group["params"]
        if any(p not in opt.state or "exp_avg" not in opt.state[p] for p in params):
            return None  # a parameter never stepped yet (no gradient so far)
        if len({(p.device, p.dtype) for p in params}) != 1:
            return None  # Adam would group them; keep its order semantics
        return cls(list(params), opt.state)

    def usable(self, opt: torch.optim.Adam) -> bool:
        """Every parameter has a gradient and the group still holds the cached parameters."""
        group = opt.param_groups[0]
        return len(group["params"]) == len(self.params) and all(
            p.grad is not None for p in self.params
        )


@torch.no_grad()
def fused_adam(state: Any, grads: list[torch.Tensor], group: dict, lr: Any) -> None:
    """One Adam step with torch's fused kernel (what Adam(fused=True) runs) on `state`'s
    params/exp_avgs/exp_avg_sqs/steps lists; `lr` a float or a device tensor."""
    torch._foreach_add_(state.steps, 1)
    fused_adam_kernel(state, grads, group, lr)


@torch.no_grad()
def fused_adam_kernel(state: Any, grads: list[torch.Tensor], group: dict, lr: Any) -> None:
    """`fused_adam` with the steps already counted: the kernel alone (the numpy-flat path
    counts its steps in numpy and runs this on its flat buffers)."""
    beta1, beta2 = group["betas"]
    torch._fused_adam_(
        state.params,
        grads,
        state.exp_avgs,
        state.exp_avg_sqs,
        [],
        state.steps,
        amsgrad=False,
        lr=lr,
        beta1=beta1,
        beta2=beta2,
        weight_decay=0.0,
        eps=group["eps"],
        maximize=False,
        grad_scale=None,
        found_inf=None,
    )


@torch.no_grad()
def adam_in_tensor_ops(state: Any, grads: list[torch.Tensor], group: dict, lr: Any) -> None:
    """`fused_adam` written out in tensor ops, equal to float rounding: torch.compile has
    no fake kernel for the fused op with a tensor lr."""
    beta1, beta2 = group["betas"]
    torch._foreach_add_(state.steps, 1)
    for p, g, m, v, step in zip(
        state.params, grads, state.exp_avgs, state.exp_avg_sqs, state.steps, strict=True
    ):
        m.lerp_(g, 1.0 - beta1)
        v.mul_(beta2).addcmul_(g, g, value=1.0 - beta2)
        step_size = lr / (1.0 - torch.pow(beta1, step))
        denom = (v.sqrt() / torch.sqrt(1.0 - torch.pow(beta2, step))).add_(group["eps"])
        p.sub_(step_size * m / denom)


def clip_grad_norm(grads: list[torch.Tensor], max_norm: float) -> torch.Tensor:
    """Scale `grads` in place so their global L2 norm is at most `max_norm`; returns the
    norm before clipping. The op sequence of `nn.utils.clip_grad_norm_(foreach=True)` for
    tensors of one device and dtype, so results are bit-identical."""
    norms = torch._foreach_norm(grads, 2.0)
    total = torch.linalg.vector_norm(torch.stack(norms), 2.0)
    coef = torch.clamp(max_norm / (total + 1e-6), max=1.0)
    torch._foreach_mul_(grads, coef)
    return total


@torch.no_grad()
def sync_targets(targets: list[torch.Tensor], online: list[torch.Tensor], tau: float) -> None:
    """target <- tau * online + (1 - tau) * target; an exact copy when tau == 1."""
    if tau == 1.0:
        torch._foreach_copy_(targets, online)
    else:
        torch._foreach_lerp_(targets, online, tau)


Descend = Callable[..., "torch.Tensor | None"]
"""descend(optimizer, loss, max_norm=None) -> gradient norm before clipping (None when
not clipped). `loss` None: the gradients are already in the parameters' `.grad`."""


def descend(
    opt: torch.optim.Optimizer,
    loss: torch.Tensor | None,
    max_norm: float | None = None,
    grad_sync: Callable[[list[torch.Tensor]], None] | None = None,
) -> torch.Tensor | None:
    """zero_grad, backward, (grad_sync), clip, step: the eager path's optimizer step.
    Gradients of this optimizer's parameters only (an actor loss through the critic does
    not pay for the critic's weight gradients); step hooks run (RLx2's masks)."""
    params = opt.param_groups[0]["params"]
    if loss is not None:
        opt.zero_grad(set_to_none=True)
        loss.backward(inputs=params)
    if grad_sync is not None:  # data-parallel learners average gradients across ranks
        grad_sync(params)
    norm = None
    if max_norm is not None:
        norm = clip_grad_norm([p.grad for p in params if p.grad is not None], max_norm)
    opt.step()
    return norm
