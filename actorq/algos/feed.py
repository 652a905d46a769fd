"""Feeding a captured update: static device inputs, pinned staging, a device replay ring.

`BatchFeeder` owns the static inputs a captured step reads ([k, B, ...] for k updates per
replay). `put` copies a batch through one of two pinned staging buffers with non_blocking,
each reused only after the event behind its last copy, so the host samples the next batch
while the update runs. On CPU: a plain copy_.

`DeviceReplay` is an optional uniform ring on the device for flat observations:
`sample_into` gathers straight into the static inputs. Its fill level is a device tensor
(floor(rand * size), not randint(size), whose bound a capture would freeze), so a CUDA
graph can sample and update K times per replay (CapturedUpdate.use_replay).
`PrioritizedDeviceReplay` keeps proportional priorities beside the rows on the device
(the host PrioritizedSampler's rule: stored (|td| + eps) ** alpha, new rows at the running
max, stratified draws, weights (p_min / p) ** beta per batch) and writes a call's |TD
errors| back inside the same call, so no priority crosses to the host.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch

_ONES = ("steps", "weights")  # optional columns: all ones when a batch has none


def _dtype_of(key: str, value: Any) -> torch.dtype:
    if torch.is_tensor(value):
        return value.dtype  # on-policy minibatches: already the step's tensors
    kind = np.asarray(value).dtype.kind
    return torch.int64 if key == "action" and kind in "iub" else torch.float32


class BatchFeeder:
    """Static device inputs for `keys`, shaped after `example`, with k slots."""

    def __init__(
        self, keys: Sequence[str], example: Mapping[str, Any], k: int, device: torch.device
    ) -> None:
        missing = [key for key in keys if key not in example and key not in _ONES]
        if missing:
            raise KeyError(f"batch is missing {missing}; expected keys {list(keys)}")
        self.keys, self.k, self.device = tuple(keys), k, device
        first = next(key for key in keys if key in example)
        self.rows = len(example[first])
        self.shapes = {
            key: (self.rows,) if key not in example else tuple(np.shape(example[key]))
            for key in keys
        }
        self.dtypes = {
            key: torch.float32 if key not in example else _dtype_of(key, example[key])
            for key in keys
        }
        self.inputs = {
            key: torch.zeros((k, *self.shapes[key]), dtype=self.dtypes[key], device=device)
            for key in keys
        }
        self._cuda = device.type == "cuda"
        self._staging = [self._pinned() for _ in range(2)] if self._cuda else []
        self._events = [torch.cuda.Event() for _ in range(2)] if self._cuda else []
        self._turn = 0

    def _pinned(self) -> dict[str, torch.Tensor]:
        return {
            key: torch.empty((self.k, *self.shapes[key]), dtype=self.dtypes[key]).pin_memory()
            for key in self.keys
        }

    def device_view(self, i: int) -> dict[str, torch.Tensor]:
        """The static inputs of update i of a replay (views: fixed addresses)."""
        return {key: t[i] for key, t in self.inputs.items()}

    def put(self, batches: Sequence[Mapping[str, Any]], weights: Sequence[Any]) -> None:
        """Copy k batches (and their importance weights, None = ones) into the inputs."""
        if self._cuda:
            stage = self._staging[self._turn]
            self._events[self._turn].synchronize()  # its previous DMA has finished
        else:
            stage = self.inputs
        staged: set[str] = set()
        for i, (batch, w) in enumerate(zip(batches, weights, strict=True)):
            for key in self.keys:
                value = w if key == "weights" else batch.get(key)
                on_device = torch.is_tensor(value) and value.device == self.inputs[key].device
                # Tensors already on the device (on-policy minibatches) copy device-side.
                self._fill(self.inputs[key][i] if on_device else stage[key][i], key, value)
                if not on_device:
                    staged.add(key)
        if self._cuda:
            for key in staged:
                self.inputs[key].copy_(stage[key], non_blocking=True)
            self._events[self._turn].record()
            self._turn ^= 1

    def _fill(self, dest: torch.Tensor, key: str, value: Any) -> None:
        if value is None:
            if key not in _ONES:
                raise KeyError(f"batch is missing {key!r}; expected keys {list(self.keys)}")
            dest.fill_(1.0)
            return
        src = value if torch.is_tensor(value) else torch.from_numpy(np.asarray(value))
        if tuple(src.shape) != tuple(dest.shape):
            raise ValueError(
                f"batch[{key!r}] has shape {tuple(src.shape)}, the captured update was built "
                f"for {tuple(dest.shape)}"
            )
        dest.copy_(src)


class DeviceReplay:
    """A uniform replay ring on the device for flat observations (float32 columns,
    int64 discrete actions); `sample_into` fills a BatchFeeder's inputs directly."""

    COLUMNS = ("obs", "action", "reward", "next_obs", "done")

    def __init__(
        self,
        capacity: int,
        example: Mapping[str, np.ndarray],
        device: torch.device,
        columns: Sequence[str] = COLUMNS,
    ) -> None:
        """`columns`: COLUMNS, plus "steps" where rows carry n-step lengths (the service's
        replay does); a column absent here is all ones in the sampled batches."""
        if capacity < 1:
            raise ValueError(f"DeviceReplay capacity must be >= 1, got {capacity}")
        self.capacity, self.device = capacity, device
        self.columns = {
            key: torch.zeros(
                (capacity, *np.shape(example[key])[1:]),
                dtype=_dtype_of(key, example[key]),
                device=device,
            )
            for key in columns
        }
        self.size, self._next = 0, 0
        self.size_t = torch.zeros((), dtype=torch.float32, device=device)  # read in graphs

    def add(self, rows: Mapping[str, np.ndarray]) -> torch.Tensor:
        """Append transitions (each column [n, ...]); the oldest are overwritten when full.
        Returns the ring positions written (a device tensor)."""
        n = len(rows["obs"])
        if n > self.capacity:
            rows = {key: np.asarray(v)[-self.capacity :] for key, v in rows.items()}
            n = self.capacity
        positions = (self._next + np.arange(n)) % self.capacity
        index = torch.from_numpy(positions).to(self.device)
        for key, column in self.columns.items():
            src = torch.from_numpy(np.asarray(rows[key])).to(column.dtype)
            column.index_copy_(0, index, src.to(self.device, non_blocking=True))
        self._next = int((self._next + n) % self.capacity)
        self.size = min(self.size + n, self.capacity)
        self.size_t.fill_(float(self.size))
        return index

    def state_tensors(self) -> list[torch.Tensor]:
        """What sampling mutates (a capture's warm-up restores these): nothing here."""
        return []

    def indices(self, k: int, rows: int, generator: torch.Generator | None = None):  # type: ignore[no-untyped-def]
        """k x rows uniform indices in [0, size), drawn on the device without a host read."""
        u = torch.rand((k, rows), device=self.device, generator=generator)
        index = (u * self.size_t).long()
        return torch.minimum(index, self.size_t.long() - 1)  # rand * size rounding up to size

    def sample_into(
        self, feeder: BatchFeeder, generator: torch.Generator | None = None
    ) -> torch.Tensor:
        """Draw k uniform batches on the device into the feeder's static inputs (with
        replacement; importance weights and n-step lengths set to ones). No host sync, so
        it may run inside a captured graph; the caller checks `size > 0` first. Returns the
        rows drawn, flat."""
        index = self.indices(feeder.k, feeder.rows, generator).flatten()
        for key, column in self.columns.items():
            target = feeder.inputs[key]
            target.copy_(column.index_select(0, index).view_as(target))
        for key in _ONES:
            if key in feeder.inputs and key not in self.columns:
                feeder.inputs[key].fill_(1.0)
        return index

    def after_steps(self, drawn: torch.Tensor, td_abs: torch.Tensor) -> None:
        """The |TD errors| [k, B] of a call's updates on the rows `sample_into` drew
        (uniform replay has no use for them)."""


class PrioritizedDeviceReplay(DeviceReplay):
    """DeviceReplay sampling in proportion to priority, the priorities on the device."""

    def __init__(
        self,
        capacity: int,
        example: Mapping[str, np.ndarray],
        device: torch.device,
        columns: Sequence[str] = DeviceReplay.COLUMNS,
        *,
        alpha: float = 0.6,
        beta: float = 0.4,
        beta_final: float = 1.0,
        beta_steps: int = 100_000,
        eps: float = 1e-6,
    ) -> None:
        super().__init__(capacity, example, device, columns)
        self.alpha, self.eps = alpha, eps
        self.beta, self.beta_final, self.beta_steps = beta, beta_final, beta_steps
        self.priority = torch.zeros(capacity, dtype=torch.float32, device=device)
        self.max_priority = torch.ones((), dtype=torch.float32, device=device)
        self.batches_drawn = torch.zeros((), dtype=torch.float32, device=device)  # anneals beta

    def add(self, rows: Mapping[str, np.ndarray]) -> torch.Tensor:
        """Append rows at the running max priority (as the host sampler's on_insert)."""
        index = super().add(rows)
        self.priority.index_copy_(0, index, self.max_priority.expand(len(index)))
        return index

    def state_tensors(self) -> list[torch.Tensor]:
        return [self.priority, self.max_priority, self.batches_drawn]

    def indices(self, k: int, rows: int, generator: torch.Generator | None = None):  # type: ignore[no-untyped-def]
        """k x rows stratified draws: batch row j from the j-th of `rows` equal slices of
        the priority mass (float64 prefix sums: a million float32 priorities would lose
        the small ones)."""
        prefix = torch.cumsum(self.priority, 0, dtype=torch.float64)
        strata = torch.arange(rows, device=self.device, dtype=torch.float64)
        u = torch.rand((k, rows), device=self.device, generator=generator, dtype=torch.float64)
        target = (strata + u) / rows * prefix[-1]
        index = torch.searchsorted(prefix, target.flatten(), right=True)
        return torch.minimum(index, self.size_t.long() - 1).view(k, rows)

    def sample_into(
        self, feeder: BatchFeeder, generator: torch.Generator | None = None
    ) -> torch.Tensor:
        """As DeviceReplay's, with importance weights (p_min / p) ** beta per batch, beta
        annealed by batches drawn (the host sampler's schedule)."""
        index = super().sample_into(feeder, generator)
        if "weights" in feeder.inputs:
            p = self.priority.index_select(0, index).view(feeder.k, feeder.rows)
            steps = self.batches_drawn + torch.arange(feeder.k, device=self.device)
            progress = torch.clamp(steps / self.beta_steps, max=1.0)
            beta = (self.beta + (self.beta_final - self.beta) * progress).unsqueeze(1)
            lowest = p.min(dim=1, keepdim=True).values
            feeder.inputs["weights"].copy_((lowest / p) ** beta)
        self.batches_drawn.add_(feeder.k)
        return index

    def after_steps(self, drawn: torch.Tensor, td_abs: torch.Tensor) -> None:
        """Write the call's |TD errors| as priorities of the rows drawn (a row drawn twice
        keeps one of its values) and raise the running max."""
        stored = (td_abs.flatten().float() + self.eps) ** self.alpha
        self.priority.index_copy_(0, drawn, stored)
        torch.maximum(self.max_priority, stored.max(), out=self.max_priority)
