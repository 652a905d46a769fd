"""The reference every update runner is compared with: torch's own optimizer step.

`plain_torch(algo)` puts a learner on what its update was before the fast paths:
torch.optim.Adam(fused=True) instead of FastAdam, `loss.backward()` into every parameter,
`nn.utils.clip_grad_norm_`, and autograd instead of DQN's hand-written MLP backward. The
losses are the algorithm's one `step`; only the machinery around them is torch's own.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from actorq.algos.capture import apply_update_path


def torch_descend(
    opt: torch.optim.Optimizer,
    loss: torch.Tensor | None,
    max_norm: float | None = None,
    grad_sync: Any = None,
) -> torch.Tensor | None:
    assert loss is not None, "the oracle runs autograd, not a hand-written backward"
    opt.zero_grad(set_to_none=True)
    loss.backward()
    params = opt.param_groups[0]["params"]
    if grad_sync is not None:
        grad_sync(params)
    norm = None if max_norm is None else nn.utils.clip_grad_norm_(params, max_norm)
    opt.step()
    return norm


def plain_torch(algo: Any) -> Any:
    """`algo` (fresh, before its first update) on torch's own update path; returns it."""
    apply_update_path(algo, "torch-eager")
    for name, opt in list(vars(algo).items()):
        if isinstance(opt, torch.optim.Optimizer):
            group = opt.param_groups[0]
            params = group["params"]
            plain = torch.optim.Adam(params, lr=group["lr"], eps=group["eps"], fused=True)
            setattr(algo, name, plain)
    if hasattr(algo, "manual_grad"):
        algo.manual_grad = False
    algo.descend = torch_descend
    return algo
