"""The numpy-flat update path: DQN's update for a plain fp32 MLP on CPU in numpy, on one
flat parameter buffer; `apply_update_path(dqn, "numpy-flat")` puts it behind `dqn.update`.

At CartPole's sizes an update is a few MFLOP and its time is per-op overhead (~70 small
ops at 3-5 us each through torch, ~1 us through numpy; 0.21 against 0.94 ms per 64x64
update). The online parameters, gradients, Adam's moments and steps and the target
parameters each live in one contiguous torch buffer that every `nn.Parameter` and
optimizer-state tensor views, so state dicts, checkpoints, `policy_weights` and the torch
fallback keep working unchanged.

The forward, loss, backward and clip are `DQNLearner.step`'s written again for speed; Adam
is torch's fused kernel (`optim.fused_adam_kernel`, the one every path runs) over the flat
buffers in one call. tests/unit/test_dqn_flat_update.py pins the two paths together (equal
to float rounding: BLAS and MKL sum in other orders). It runs on one thread, whatever
torch's thread count (the learner service sets one on this path:
actorq.algos.capture.torch_threads_for); a data-parallel learner (grad_sync) runs the
learner's own step.
"""

from __future__ import annotations

import ctypes
import functools
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch

from actorq.algos.base import check_rows, require_keys
from actorq.algos.dqn_update import BATCH_KEYS, DQNUpdate, multi_step
from actorq.algos.optim import fused_adam_kernel, sync_targets
from actorq.models.mlp_grad import linear_layers


def flat_unsupported(learner: Any) -> str | None:
    """Why this path cannot run `learner`, or None when it can: it is DQN's, for a
    plain fp32 MLP (no QAT, no tanh output, no CNN) on CPU with a one-group Adam, a
    numpy whose BLAS thread count can be set, DQNConfig.flat on, one learner."""
    if not hasattr(learner, "manual_grad") or not hasattr(learner, "target"):
        return f"numpy-flat is DQN's update, not {type(learner).__name__}'s"
    online, opt = learner.online, learner.optimizer
    params = list(online.parameters())
    group = opt.param_groups[0]
    if not learner.config.flat:
        return "DQNConfig.flat (ACTORQ_DQN_FLAT) is off"
    if learner.grad_sync is not None:
        return "data-parallel learners all-reduce torch gradients"
    if (
        learner.device.type != "cpu"
        or not learner.manual_grad
        or len(params) != 2 * len(linear_layers(online))  # weight and bias per layer
        or any(p.dtype != torch.float32 for p in params)
        or len(opt.param_groups) != 1
        or group["weight_decay"]
        or group["amsgrad"]
        or group["maximize"]
    ):
        return "numpy-flat covers plain fp32 MLP Q-networks on CPU only"
    if _openblas_setter() is None:
        return "numpy's BLAS is not an OpenBLAS whose thread count can be set"
    return None


class FlatDQNUpdate:
    """The numpy-flat runner of one `DQNLearner` (where `flat_unsupported(learner)` is None)."""

    path = "numpy-flat"

    def __init__(self, learner: Any) -> None:
        why = flat_unsupported(learner)
        if why is not None:
            raise ValueError(f"update path 'numpy-flat': {why}")
        self.learner = learner
        self.params = list(learner.online.parameters())
        n = sum(p.numel() for p in self.params)
        # Re-home every tensor into its flat buffer; the Parameter objects stay the same
        # (the optimizer and the modules keep referring to them).
        self.flat = _rehome(self.params, torch.zeros(n))
        self.target_flat = _rehome(list(learner.target.parameters()), torch.zeros(n))
        # Gradients stay out of `.grad` (None until the torch path runs, as in torch's).
        self.grad_flat = torch.zeros(n)
        self.exp_avg = torch.zeros(n)
        self.exp_avg_sq = torch.zeros(n)
        self.steps = torch.zeros(len(self.params))  # Adam's per-parameter step (fused: fp32)
        # Adam's state is adopted on the first update (created there, as torch's Adam
        # does, so `prime_optimizer` and state dicts of fresh learners stay as they were).
        self.uniform_steps = True
        self._adopted: list[torch.Tensor] = []
        # numpy views of the same memory (the clip scales the gradient, the update counts steps)
        self.np_grad, self.np_steps = self.grad_flat.numpy(), self.steps.numpy()
        # torch's fused Adam kernel over the whole flat buffer at once: one step count (the
        # first parameter's; they are equal whenever this path runs, see `usable`).
        self.adam_lists = _FlatAdamLists(self)
        layers = linear_layers(learner.online)
        self.W = [m.weight.detach().numpy() for m in layers]
        self.b = [m.bias.detach().numpy() for m in layers]
        self.tW = [m.weight.detach().numpy() for m in linear_layers(learner.target)]
        self.tb = [m.bias.detach().numpy() for m in linear_layers(learner.target)]
        grads = _views(self.grad_flat, self.params)
        self.dW, self.db = [g.numpy() for g in grads[0::2]], [g.numpy() for g in grads[1::2]]
        self.widths = learner.online.spec.widths
        self._bufs: dict[int, _Buffers] = {}

    def adopt_optimizer_state(self) -> None:
        """Point Adam's state at the flat buffers, copying in what it holds (none: zeros
        and step 0); again whenever Adam holds other state tensors (a load, a runner)."""
        state = self.learner.optimizer.state
        # Clones first: the old state may already be views of the buffers zeroed below.
        old = [
            {
                k: v.detach().clone() if torch.is_tensor(v) else v
                for k, v in state.get(p, {}).items()
            }
            for p in self.params
        ]
        steps = self.steps
        steps.zero_()
        for i, s in enumerate(old):
            if "step" in s:
                steps[i] = float(s["step"])
        for key, buf in (("exp_avg", self.exp_avg), ("exp_avg_sq", self.exp_avg_sq)):
            buf.zero_()
            for view, s in zip(_views(buf, self.params), old, strict=True):
                if key in s:
                    view.copy_(s[key])
        for i, (p, avg, avg_sq) in enumerate(
            zip(
                self.params,
                _views(self.exp_avg, self.params),
                _views(self.exp_avg_sq, self.params),
                strict=True,
            )
        ):
            state[p] = {"step": steps[i], "exp_avg": avg, "exp_avg_sq": avg_sq}
        self._adopted = [state[p]["step"] for p in self.params]
        # One step count drives the bias correction below; per-parameter counts that differ
        # (never from DQN's own updates, every parameter gets a gradient) keep torch's step.
        self.uniform_steps = bool((steps == steps[0]).all()) if len(steps) else True
        self.learner.optimizer.forget_state_lists()  # FastAdam's lists held the old tensors

    def adopted(self) -> bool:
        """Whether Adam's state tensors are still this runner's views (torch's own steps
        update them in place; a load or a fresh state replaces them)."""
        state = self.learner.optimizer.state
        pairs = zip(self.params, self._adopted, strict=True)
        return bool(self._adopted) and all(state.get(p, {}).get("step") is s for p, s in pairs)

    def usable(self) -> bool:
        """Whether the next update can run here (Adam's state adopted first if needed).
        torch's thread count does not matter: with two threads torch's own step took 0.485
        ms per DQN 64x64 update on 2 cores, this one 0.147 ms (BENCHMARKS.md 21d)."""
        if not numpy_blas_single_thread():
            return False
        if self.learner.grad_sync is not None:  # parallel learners average torch gradients
            return False
        if not self.adopted():
            self.adopt_optimizer_state()
        return self.uniform_steps

    def update(self, batch: Mapping[str, np.ndarray], weights: Any = None) -> DQNUpdate:
        """The learner's update API: one update here, or the learner's own step where this
        path does not apply to it (see `usable`)."""
        algo = self.learner
        if not self.usable():
            return type(algo).update(algo, batch, weights)
        n = algo.num_updates + 1
        algo.before_update(n)
        result = self._update(batch, weights)
        algo.load_counters(n)
        if algo.step_flag(n):
            sync_targets([self.target_flat], [self.flat], algo.config.tau)
        return result

    # --- the update ---------------------------------------------------------------------
    def _update(self, batch: Mapping[str, np.ndarray], weights: np.ndarray | None) -> DQNUpdate:
        obs, action, reward, next_obs, done, w = _checked_batch(batch, weights, self.widths[-1])
        size = action.shape[0]
        cfg = self.learner.config
        bufs = self._bufs.get(size) or self._buffers(size)
        # Online net over [obs; next_obs] in one pass (double DQN needs both).
        bufs.x[:size] = obs
        bufs.x[size:] = next_obs
        q_both = _forward(bufs.x, self.W, self.b, bufs.acts, bufs.floors)
        q_all, q_next_online = q_both[:size], q_both[size:]
        q_next_target = _forward(next_obs, self.tW, self.tb, bufs.tacts, bufs.floors)

        index = np.add(bufs.row_base, action, out=bufs.index)  # flat index of (row, action)
        q = np.take(q_all, index)
        if cfg.double:
            best = q_next_online.argmax(axis=1)
            best += bufs.row_base
            next_q = np.take(q_next_target, best)
        else:
            next_q = q_next_target.max(axis=1)
        # target = reward + gamma^steps * (1 - done) * next_q, in torch's order of operations
        target = np.subtract(1.0, done, out=bufs.target)
        if multi_step(batch):  # n-step transitions: each bootstraps with gamma ** steps
            target *= np.power(np.float32(cfg.gamma), _f32(batch["steps"]))
        else:
            target *= cfg.gamma
        target *= next_q
        target += reward
        diff = np.subtract(q, target, out=bufs.diff)
        td_abs = np.abs(diff)  # returned: a fresh array
        loss = _huber_into(bufs, index, diff, td_abs, w, cfg.huber_delta)
        _backward(bufs, obs, self.W, self.dW, self.db)
        grad_norm = _clip(self.np_grad, cfg.max_grad_norm)
        self.np_steps += 1.0
        group = self.learner.optimizer.param_groups[0]
        fused_adam_kernel(self.adam_lists, [self.grad_flat], group, group["lr"])
        return DQNUpdate(
            loss=loss, q_mean=float(np.add.reduce(q)) / size, td_abs=td_abs, grad_norm=grad_norm
        )

    def _buffers(self, size: int) -> _Buffers:
        bufs = _Buffers(size, self.widths)
        self._bufs = {size: bufs}  # one batch size at a time in practice
        return bufs


class _Buffers:
    """Work arrays for one batch size: activations, gradients, per-item vectors."""

    def __init__(self, size: int, widths: tuple[int, ...]) -> None:
        f32 = np.float32
        self.x = np.empty((2 * size, widths[0]), f32)
        self.acts = [np.empty((2 * size, w), f32) for w in widths[1:]]
        self.tacts = [np.empty((size, w), f32) for w in widths[1:]]
        self.grads = [np.empty((size, w), f32) for w in widths[1:-1]]
        self.masks = [np.empty((size, w), f32) for w in widths[1:-1]]
        # ReLU's zero as a row per hidden layer: np.maximum against a broadcast row ran
        # 4.2-4.5 us on 256 x 64 floats, against the scalar 0.0 7.0-7.3 us (EPYC-Z4).
        self.floors = [np.zeros((1, w), f32) for w in widths[1:-1]]
        self.grad_out = np.empty((size, widths[-1]), f32)
        self.ones = np.ones(size, f32)
        self.row_base = np.arange(size, dtype=np.int64) * widths[-1]
        self.index = np.empty(size, np.int64)
        self.target, self.diff = np.empty(size, f32), np.empty(size, f32)
        self.clamped, self.per_item, self.dq = (np.empty(size, f32) for _ in range(3))


def _checked_batch(batch: Mapping[str, np.ndarray], weights: Any, num_actions: int) -> tuple:
    """(obs, int64 action, reward, next_obs, done, weights or None), float32 but the
    actions, of a batch whose columns agree in rows and whose actions are in range."""
    require_keys(batch, BATCH_KEYS)
    action = np.asarray(batch["action"])
    if action.dtype != np.int64:
        action = action.astype(np.int64)
    size = action.shape[0]
    obs, next_obs = _f32(batch["obs"]), _f32(batch["next_obs"])
    reward, done = _f32(batch["reward"]), _f32(batch["done"])
    columns = {"obs": obs, "reward": reward, "next_obs": next_obs, "done": done}
    check_rows(columns, size, "action")
    w = None
    if weights is not None:
        w = _f32(weights)
        if w.shape != (size,):
            raise ValueError(f"weights must have shape ({size},), got {tuple(w.shape)}")
    # torch's gather refuses an out-of-range action; the flat index would not (as uint64,
    # negative actions are huge).
    if size and int(action.view(np.uint64).max()) >= num_actions:
        raise IndexError(f"batch['action'] holds actions outside [0, {num_actions})")
    return obs, action, reward, next_obs, done, w


def _forward(
    x: np.ndarray, W: list[np.ndarray], b: list[np.ndarray], acts: list[np.ndarray],
    floors: list[np.ndarray],
) -> np.ndarray:  # fmt: skip
    """The MLP over x (ReLU between layers, against the zero rows `floors`), each layer's
    output into its buffer of `acts`."""
    last = len(W) - 1
    for i in range(last + 1):
        h = acts[i]
        np.matmul(x, W[i].T, out=h)
        h += b[i]
        if i != last:
            np.maximum(h, floors[i], out=h)
        x = h
    return x


def _huber_into(
    bufs: _Buffers,
    index: np.ndarray,
    diff: np.ndarray,
    td_abs: np.ndarray,
    w: np.ndarray | None,
    delta: float,
) -> float:
    """The (weighted) mean Huber loss of the TD errors; its gradient with respect to each
    taken action's Q value (flat `index` into bufs.grad_out) lands there, zero elsewhere."""
    size = diff.shape[0]
    # With c = min(|d|, delta), loss = c * (|d| - c / 2) (0.5 d^2 inside delta,
    # delta * (|d| - delta / 2) outside) and d loss / dq = copysign(c, d).
    c = np.minimum(td_abs, delta, out=bufs.clamped)
    per_item = np.multiply(c, -0.5, out=bufs.per_item)
    per_item += td_abs
    per_item *= c
    # (np.add.reduce: ndarray.mean's Python wrapper costs more than the sum itself)
    loss = float(np.add.reduce(per_item) if w is None else np.dot(per_item, w)) / size
    dq = np.copysign(c, diff, out=bufs.dq)
    if w is None:
        dq *= 1.0 / size
    else:
        dq *= w * (1.0 / size)
    bufs.grad_out.fill(0.0)
    np.put(bufs.grad_out, index, dq)
    return loss


def _backward(
    bufs: _Buffers, obs: np.ndarray, W: list[np.ndarray], dW: list[np.ndarray],
    db: list[np.ndarray],
) -> None:  # fmt: skip
    """dW = grad^T @ input, db = column sums, then through the ReLU, from bufs.grad_out
    back to the first layer (the online net's activations of obs in bufs.acts)."""
    size, grad = obs.shape[0], bufs.grad_out
    for i in range(len(W) - 1, -1, -1):
        inp = obs if i == 0 else bufs.acts[i - 1][:size]
        np.matmul(grad.T, inp, out=dW[i])
        np.matmul(bufs.ones, grad, out=db[i])
        if i > 0:
            g = np.matmul(grad, W[i], out=bufs.grads[i - 1])
            # inp = relu(.) >= 0, so sign(inp) is the 0/1 ReLU mask
            g *= np.sign(inp, out=bufs.masks[i - 1])
            grad = g


def _clip(g: np.ndarray, max_norm: float) -> float:
    """clip_grad_norm_(max_norm): scale by max_norm / (norm + 1e-6) when below 1."""
    total = np.float32(math.sqrt(float(np.dot(g, g))))
    coef = np.float32(max_norm) / (total + np.float32(1e-6))
    if coef < 1.0:
        g *= coef
    return float(total)


class _FlatAdamLists:
    """The one-tensor lists `fused_adam_kernel` takes, over a runner's flat buffers."""

    def __init__(self, f: FlatDQNUpdate) -> None:
        self.params, self.exp_avgs, self.exp_avg_sqs = [f.flat], [f.exp_avg], [f.exp_avg_sq]
        self.steps = [f.steps[0]]  # a 0-d view: the kernel reads it, np_steps counts it


def _f32(values: np.ndarray) -> np.ndarray:
    return np.asarray(values, dtype=np.float32)


def _views(flat: torch.Tensor, like: list[torch.Tensor]) -> list[torch.Tensor]:
    """Consecutive views of `flat` shaped like the tensors of `like`."""
    out, offset = [], 0
    for t in like:
        n = t.numel()
        out.append(flat[offset : offset + n].view_as(t))
        offset += n
    return out


def _rehome(params: list[torch.nn.Parameter], flat: torch.Tensor) -> torch.Tensor:
    """Copy `params` into `flat` and make each parameter a view of it; returns `flat`."""
    with torch.no_grad():
        for p, view in zip(params, _views(flat, params), strict=True):
            view.copy_(p)
            p.data = view
    return flat


# --- numpy's BLAS threads ----------------------------------------------------------------
_BLAS_SINGLE: bool | None = None  # None: not tried yet


def numpy_blas_single_thread() -> bool:
    """Put numpy's OpenBLAS on one thread (process-wide, once); False when it cannot.
    Its threads spin against torch's and other work: on 2 loaded cores the 64x64 update
    took 9.9 ms of CPU on two OpenBLAS threads against 0.28 ms on one."""
    global _BLAS_SINGLE
    if _BLAS_SINGLE is None:
        setter = _openblas_setter()
        if setter is not None:
            setter(1)
        _BLAS_SINGLE = setter is not None
    return _BLAS_SINGLE


@functools.cache
def _openblas_setter():  # type: ignore[no-untyped-def]
    root = Path(np.__file__).resolve().parent
    candidates = [
        *sorted((root.parent / "numpy.libs").glob("*openblas*")),
        *sorted((root / ".dylibs").glob("*openblas*")),
    ]
    for path in candidates:
        try:
            lib = ctypes.CDLL(str(path))
        except OSError:
            continue
        for name in (
            "scipy_openblas_set_num_threads64_",
            "scipy_openblas_set_num_threads",
            "openblas_set_num_threads64_",
            "openblas_set_num_threads",
        ):
            fn = getattr(lib, name, None)
            if fn is not None:
                fn.argtypes, fn.restype = [ctypes.c_int], None
                return fn
    return None
