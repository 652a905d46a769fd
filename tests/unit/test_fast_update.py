"""The learners' one step on the eager path (FastAdam, direct clipping, hand-written MLP
backward) against the oracle, torch's own optimizer step (update_oracle: torch.optim.Adam,
clip_grad_norm_, autograd): bit for bit. (DQN's numpy-flat runner:
tests/unit/test_dqn_flat_update.py.)"""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from torch import nn
from update_oracle import plain_torch

from actorq.algos import ALGORITHMS, load_algorithm_config, make_algorithm
from actorq.algos.capture import apply_update_path
from actorq.algos.optim import FastAdam, clip_grad_norm
from actorq.allocator import retain_freed_memory
from actorq.models.mlp import MLPSpec, QNetwork
from actorq.models.mlp_grad import backward_into, forward_keep, linear_layers


def make_batch(rng: np.random.Generator, algo: str, n: int, obs: int, act: int) -> dict:
    batch = {
        "obs": rng.normal(size=(n, obs)).astype(np.float32),
        "next_obs": rng.normal(size=(n, obs)).astype(np.float32),
        "reward": rng.normal(size=n).astype(np.float32),
        "done": (rng.random(n) < 0.2).astype(np.float32),
    }
    if algo == "dqn":
        batch["action"] = rng.integers(0, act, n)
    else:
        batch["action"] = rng.uniform(-1, 1, (n, act)).astype(np.float32)
    return batch


def tensors(state: dict) -> list[torch.Tensor]:
    """Every tensor of a (nested) state dict, in a fixed order."""
    out: list[torch.Tensor] = []
    for key in sorted(state, key=str):
        value = state[key]
        if isinstance(value, dict):
            out += tensors(value)
        elif isinstance(value, list):
            for item in value:
                out += tensors(item) if isinstance(item, dict) else []
        elif torch.is_tensor(value):
            out.append(value)
    return out


# On-policy learners (PPO, APPO, A2C): tests/unit/test_captured_update.py.
REPLAY_ALGORITHMS = ("dqn", "ddpg", "td3", "sac", "d4pg")
assert set(REPLAY_ALGORITHMS) <= set(ALGORITHMS)


@pytest.mark.parametrize("algo", REPLAY_ALGORITHMS)
def test_fast_update_equals_torch_path_bit_for_bit(algo: str) -> None:
    rng = np.random.default_rng(7)
    obs, act = (4, 3) if algo == "dqn" else (5, 2)
    batches = [make_batch(rng, algo, 32, obs, act) for _ in range(12)]
    weights = [rng.uniform(0.1, 1.0, 32).astype(np.float32) for _ in range(12)]
    results, states = {}, {}
    for fast in (False, True):
        learner = make_algorithm(algo, obs, act, (16, 16), load_algorithm_config(algo, {}))
        if fast:
            # DQN's numpy-flat runner agrees to float rounding only: test_dqn_flat_update.py.
            # The step (taken with more torch threads) stays bit for bit.
            apply_update_path(learner, "torch-eager")
        else:
            plain_torch(learner)
        # every other batch with importance weights, as prioritized replay sends them
        results[fast] = [
            learner.update(b, w if i % 2 else None)
            for i, (b, w) in enumerate(zip(batches, weights, strict=True))
        ]
        states[fast] = learner.state_dict()
    slow, fast_ = tensors(states[False]), tensors(states[True])
    assert len(slow) == len(fast_) > 0
    for a, b in zip(slow, fast_, strict=True):
        assert torch.equal(a, b)
    for r_slow, r_fast in zip(results[False], results[True], strict=True):
        assert r_slow.loss == r_fast.loss
        assert r_slow.grad_norm == r_fast.grad_norm
        np.testing.assert_array_equal(r_slow.td_abs, r_fast.td_abs)


def test_fast_adam_matches_adam_and_resumes_from_its_state_dict() -> None:
    torch.manual_seed(0)
    net_a, net_b = nn.Linear(6, 4), nn.Linear(6, 4)
    net_b.load_state_dict(net_a.state_dict())
    ref = torch.optim.Adam(net_a.parameters(), lr=1e-2, eps=1e-5, fused=True)
    fast = FastAdam(net_b.parameters(), lr=1e-2, eps=1e-5)
    x = torch.randn(8, 6)
    for i in range(6):
        for net, opt in ((net_a, ref), (net_b, fast)):
            opt.zero_grad(set_to_none=True)
            (net(x) ** 2).mean().backward()
            opt.step()
        if i == 2:  # a checkpoint round trip in the middle: the cached lists are rebuilt
            fast.load_state_dict(copy.deepcopy(ref.state_dict()))
        for g in fast.param_groups:  # an LR schedule changes lr between steps
            g["lr"] *= 0.9
        for g in ref.param_groups:
            g["lr"] *= 0.9
    for p_a, p_b in zip(net_a.parameters(), net_b.parameters(), strict=True):
        assert torch.equal(p_a, p_b)


def test_fast_adam_skips_parameters_without_gradient_like_adam() -> None:
    net_a, net_b = nn.Linear(3, 2), nn.Linear(3, 2)
    net_b.load_state_dict(net_a.state_dict())
    ref = torch.optim.Adam(net_a.parameters(), lr=0.1, fused=True)
    fast = FastAdam(net_b.parameters(), lr=0.1)
    for step in range(4):
        for net, opt in ((net_a, ref), (net_b, fast)):
            opt.zero_grad(set_to_none=True)
            out = net.weight.sum() if step == 2 else net(torch.ones(1, 3)).sum()
            out.backward()  # step 2 leaves the bias without a gradient
            opt.step()
    assert torch.equal(net_a.bias, net_b.bias)
    assert torch.equal(net_a.weight, net_b.weight)


def test_clip_grad_norm_equals_torch_and_clips() -> None:
    torch.manual_seed(1)
    grads = [torch.randn(5, 4) * 10, torch.randn(4) * 10]
    copies = [g.clone() for g in grads]
    params = [nn.Parameter(torch.zeros_like(g)) for g in copies]
    for p, g in zip(params, copies, strict=True):
        p.grad = g
    expected = nn.utils.clip_grad_norm_(params, 1.0)
    norm = clip_grad_norm(grads, 1.0)
    assert torch.equal(norm, expected)
    for g, p in zip(grads, params, strict=True):
        assert torch.equal(g, p.grad)
    total = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads]))
    assert total.item() == pytest.approx(1.0, rel=1e-5)


def test_manual_mlp_backward_equals_autograd() -> None:
    torch.manual_seed(2)
    net = QNetwork(MLPSpec(5, 3, (7, 6)))
    x = torch.randn(9, 5)
    grad_out = torch.randn(9, 3)
    net(x).backward(grad_out)
    expected = [p.grad.clone() for p in net.parameters()]
    layers = linear_layers(net)
    with torch.no_grad():
        acts = forward_keep(layers, x)
        assert torch.equal(acts[-1], net(x))
        backward_into(layers, acts, grad_out)
    for p, g in zip(net.parameters(), expected, strict=True):
        assert torch.equal(p.grad, g)


def test_qat_learner_keeps_autograd() -> None:
    config = load_algorithm_config("dqn", {}, qat_bits=8)
    learner = make_algorithm("dqn", 4, 2, (8,), config)
    assert learner.manual_grad is False  # fake-quantized weights need autograd's STE
    learner.update(make_batch(np.random.default_rng(0), "dqn", 16, 4, 2))
    assert learner.num_updates == 1


def test_retain_freed_memory_on_glibc() -> None:
    assert retain_freed_memory() is True  # this project's machines run glibc


def test_dqn_learning_rate_schedule_is_linear_then_flat_and_resumes() -> None:
    config = load_algorithm_config("dqn", {}, lr=1e-3, lr_final=1e-4, lr_decay_updates=10)
    learner = make_algorithm("dqn", 4, 2, (8,), config)
    rng = np.random.default_rng(3)
    seen = []
    for _ in range(14):
        seen.append(learner.lr_at(learner.num_updates))
        learner.update(make_batch(rng, "dqn", 16, 4, 2))
        assert learner.optimizer.param_groups[0]["lr"] == seen[-1]  # what the step used
    assert seen[0] == pytest.approx(1e-3)
    assert seen[5] == pytest.approx(1e-3 + 0.5 * (1e-4 - 1e-3))
    assert seen[10:] == pytest.approx([1e-4] * 4)
    resumed = make_algorithm("dqn", 4, 2, (8,), config)
    resumed.load_state_dict(learner.state_dict())  # the schedule follows the update count
    assert resumed.lr_at(resumed.num_updates) == pytest.approx(1e-4)


def test_dqn_config_refuses_a_negative_final_lr() -> None:
    with pytest.raises(ValueError, match="lr_final must be >= 0"):
        load_algorithm_config("dqn", {}, lr_final=-1.0)
