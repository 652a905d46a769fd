"""One sparse network: masks over its Linear weights, kept exact, evolved RigL-style.

`SparseNetwork` attaches to a module and its optimizer without changes to the algorithm:

- a gradient hook on every masked weight multiplies the gradient by the mask during
  backward, so gradient clipping and Adam see only active weights (Adam's moments of an
  inactive weight stay exactly zero), and, just before a topology step, keeps |dense
  gradient| for the grow criterion (autograd computes the dense gradient anyway);
- an optimizer step post-hook re-applies the masks after every step (so the pruned weights
  are exactly 0.0 whatever the optimizer does) and, every `schedule.interval` steps before
  `schedule.stop`, drops the active weights of smallest magnitude and grows as many
  inactive ones where |dense gradient| is largest. Grown weights start at 0.0 and their
  optimizer state is zeroed; target networks get the new masks too (Polyak averaging then
  keeps their pruned entries at exactly 0.0: 0 + tau * (0 - 0) = 0).

RLx2's reference skips the optimizer step on a topology step; here the step runs and the
topology changes right after it (one step in `interval`, 10,000 by default).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from actorq.sparse.allocation import active_counts
from actorq.sparse.schedule import TopologySchedule

_OPTIMIZER_STATE_KEYS = ("exp_avg", "exp_avg_sq", "max_exp_avg_sq", "momentum_buffer")


@dataclass(frozen=True)
class LayerStats:
    name: str
    size: int
    active: int

    @property
    def sparsity(self) -> float:
        return 1.0 - self.active / self.size


def linear_layers(module: nn.Module) -> list[tuple[str, nn.Linear]]:
    return [(name, m) for name, m in module.named_modules() if isinstance(m, nn.Linear)]


class SparseNetwork:
    """Masks of one network (all Linear weights of `module`, biases stay dense)."""

    def __init__(
        self,
        name: str,
        module: nn.Module,
        optimizer: torch.optim.Optimizer,
        sparsity: float,
        schedule: TopologySchedule,
        targets: Sequence[nn.Module] = (),
    ) -> None:
        self.name, self.optimizer, self.sparsity, self.schedule = (
            name,
            optimizer,
            sparsity,
            schedule,
        )
        layers = linear_layers(module)
        self.layer_names = [n for n, _ in layers]
        self.weights = [m.weight for _, m in layers]
        self.target_weights = [[m.weight for _, m in linear_layers(t)] for t in targets]
        shapes = [tuple(w.shape) for w in self.weights]
        self.masks = [
            _largest(w, k)
            for w, k in zip(self.weights, active_counts(shapes, sparsity), strict=True)
        ]
        self._dense_grads: list[torch.Tensor | None] = [None] * len(self.weights)
        self.steps = 0  # optimizer steps of this network
        self.topology_updates = 0
        self.changed_total = 0  # weights moved (dropped here, grown there), all updates
        self.last_changed = 0
        self.apply_masks()
        for i, w in enumerate(self.weights):
            w.register_hook(self._grad_hook(i))
        optimizer.register_step_post_hook(self._after_step)

    # --- hooks -----------------------------------------------------------------------------
    def _grad_hook(self, i: int):
        def hook(grad: torch.Tensor) -> torch.Tensor:
            if self.schedule.due(self.steps + 1):  # the next step changes the topology
                self._dense_grads[i] = grad.detach().abs()
            return grad * self.masks[i]

        return hook

    @torch.no_grad()
    def _after_step(self, *_: Any) -> None:
        self.steps += 1
        self.apply_masks()
        if self.schedule.due(self.steps):
            self.update_topology(self.schedule.fraction(self.steps))

    # --- masks -----------------------------------------------------------------------------
    @torch.no_grad()
    def apply_masks(self) -> None:
        """Zero every pruned weight, in the network and in its targets."""
        for i, mask in enumerate(self.masks):
            self.weights[i].mul_(mask)
            for target in self.target_weights:
                target[i].mul_(mask)

    @torch.no_grad()
    def update_topology(self, fraction: float) -> int:
        """Drop `fraction` of each layer's active weights (smallest |w|) and grow as many
        (largest |dense grad|); returns how many weights moved."""
        changed = 0
        for i, weight in enumerate(self.weights):
            grad = self._dense_grads[i]
            if grad is None:  # no backward since the last update: nothing to grow by
                continue
            old = self.masks[i]
            new = _evolve(weight.abs(), grad, old, int(int(old.sum()) * fraction))
            grown = new & ~old
            weight.masked_fill_(grown, 0.0)
            self._reset_optimizer_state(weight, new & old)
            self.masks[i] = new
            changed += int(grown.sum())
        self._dense_grads = [None] * len(self.weights)
        self.apply_masks()
        self.topology_updates += 1
        self.changed_total += changed
        self.last_changed = changed
        return changed

    def _reset_optimizer_state(self, weight: torch.Tensor, kept: torch.Tensor) -> None:
        """Zero the optimizer's per-weight state everywhere except where a weight stayed."""
        state = self.optimizer.state.get(weight, {})
        for key in _OPTIMIZER_STATE_KEYS:
            if key in state:
                state[key].mul_(kept)

    # --- reporting and checkpoints ------------------------------------------------------------
    def layer_stats(self) -> list[LayerStats]:
        return [
            LayerStats(name, m.numel(), int(m.sum()))
            for name, m in zip(self.layer_names, self.masks, strict=True)
        ]

    def state_dict(self) -> dict[str, Any]:
        return {
            "masks": [m.clone() for m in self.masks],
            "steps": self.steps,
            "topology_updates": self.topology_updates,
            "changed_total": self.changed_total,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        masks = list(state["masks"])
        shapes = [tuple(m.shape) for m in masks]
        if shapes != [tuple(w.shape) for w in self.weights]:
            raise ValueError(
                f"{self.name}: checkpoint masks have shapes {shapes}, the network "
                f"{[tuple(w.shape) for w in self.weights]}"
            )
        self.masks = [
            m.to(device=w.device, dtype=torch.bool)
            for m, w in zip(masks, self.weights, strict=True)
        ]
        self.steps = int(state["steps"])
        self.topology_updates = int(state["topology_updates"])
        self.changed_total = int(state["changed_total"])
        self.apply_masks()


def _largest(weight: torch.Tensor, count: int) -> torch.Tensor:
    """Mask keeping the `count` weights of largest magnitude (RLx2's initial mask)."""
    flat = torch.zeros(weight.numel(), dtype=torch.bool, device=weight.device)
    flat[torch.topk(weight.detach().abs().flatten(), count).indices] = True
    return flat.view_as(weight)


def _evolve(
    magnitude: torch.Tensor, grad: torch.Tensor, mask: torch.Tensor, count: int
) -> torch.Tensor:
    """The new mask: `count` active entries of smallest magnitude off, then the `count`
    entries of largest |grad| among those now off on (a just-dropped one may come back)."""
    if count <= 0:
        return mask.clone()
    flat_mask = mask.flatten()
    kept = flat_mask.clone()
    drop_score = magnitude.flatten().masked_fill(~flat_mask, float("inf"))
    kept[torch.topk(drop_score, count, largest=False).indices] = False
    grow_score = grad.flatten().masked_fill(kept, float("-inf"))
    new = kept.clone()
    new[torch.topk(grow_score, count).indices] = True
    return new.view_as(mask)


def total_stats(networks: Iterable[SparseNetwork]) -> tuple[int, int]:
    """(weights, active weights) over several networks."""
    size = active = 0
    for net in networks:
        for s in net.layer_stats():
            size += s.size
            active += s.active
    return size, active
