"""Sparse training (actorq.sparse): ER allocation, exact masks, RigL topology, resume, FLOPs."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from actorq.algos import SACConfig, TD3Config, make_algorithm
from actorq.config import ConfigError
from actorq.sparse import (
    SparseTrainingConfig,
    TopologySchedule,
    active_counts,
    attach_sparse_training,
    erdos_renyi_densities,
)
from actorq.sparse.config import narrow_network_note
from actorq.sparse.topology import SparseNetwork

OBS, ACT, HIDDEN, BATCH = 3, 2, (64, 64), 32


pytestmark = pytest.mark.usefixtures("one_torch_thread")  # tests/conftest.py


def batch(rng: np.random.Generator, size: int = BATCH) -> dict[str, np.ndarray]:
    return {
        "obs": rng.normal(size=(size, OBS)).astype(np.float32),
        "action": rng.uniform(-1, 1, (size, ACT)).astype(np.float32),
        "reward": rng.normal(size=size).astype(np.float32),
        "next_obs": rng.normal(size=(size, OBS)).astype(np.float32),
        "done": rng.random(size) < 0.05,
    }


def sparse_learner(algo: str, interval: int = 3, stop: int = 10_000, actor=0.9, critic=0.8):
    cfg = (TD3Config if algo == "td3" else SACConfig)(batch_size=BATCH, learning_starts=0)
    learner = make_algorithm(algo, OBS, ACT, HIDDEN, cfg, seed=1)
    config = SparseTrainingConfig(
        sparsity_actor=actor, sparsity_critic=critic, topology_interval=interval, topology_stop=stop
    )
    return learner, attach_sparse_training(learner, config, algo)


# --- Erdos-Renyi allocation -------------------------------------------------------------------
@pytest.mark.parametrize("sparsity", [0.0, 0.5, 0.8, 0.9, 0.95, 0.98])
@pytest.mark.parametrize(
    "shapes", [[(256, 17), (256, 256), (6, 256)], [(64, 3), (64, 64), (1, 64)], [(400, 400)]]
)
def test_er_counts_sum_to_the_global_target(shapes, sparsity: float) -> None:
    counts = active_counts(shapes, sparsity)
    total = sum(o * i for o, i in shapes)
    assert sum(counts) == round((1 - sparsity) * total)
    assert all(1 <= c <= o * i for c, (o, i) in zip(counts, shapes, strict=True))


def test_er_keeps_small_layers_denser_and_caps_at_dense() -> None:
    shapes = [(256, 3), (256, 256), (1, 256)]
    densities = erdos_renyi_densities(shapes, 0.9)
    assert densities[0] == 1.0 and densities[2] == 1.0  # (in+out)/(in*out) would pass 1
    assert 0 < densities[1] < 0.1
    active = sum(d * o * i for d, (o, i) in zip(densities, shapes, strict=True))
    assert math.isclose(active, 0.1 * sum(o * i for o, i in shapes))


@pytest.mark.parametrize("bad", [-0.1, 1.0, 1.5])
def test_er_refuses_sparsity_outside_unit_interval(bad: float) -> None:
    with pytest.raises(ValueError, match="sparsity"):
        erdos_renyi_densities([(4, 4)], bad)


# --- schedule ------------------------------------------------------------------------------
def test_drop_fraction_is_cosine_annealed_to_zero_at_stop() -> None:
    s = TopologySchedule(interval=10, stop=100, drop_fraction=0.5)
    assert s.fraction(0) == pytest.approx(0.5)
    assert s.fraction(50) == pytest.approx(0.25)
    assert s.fraction(100) == 0.0 and s.fraction(150) == 0.0
    assert [t for t in range(1, 130) if s.due(t)] == [10, 20, 30, 40, 50, 60, 70, 80, 90]


# --- masks stay exact through training ------------------------------------------------------
@pytest.mark.parametrize("algo", ["td3", "sac"])
def test_per_layer_sparsity_is_exact_after_every_topology_update(algo: str) -> None:
    learner, sparse = sparse_learner(algo, interval=2)
    expected = {
        name: [s.active for s in net.layer_stats()] for name, net in sparse.networks.items()
    }
    rng = np.random.default_rng(0)
    seen_updates = 0
    for _ in range(16):
        learner.update(batch(rng))
        for name, net in sparse.networks.items():
            assert [s.active for s in net.layer_stats()] == expected[name]
            for weight, mask in zip(net.weights, net.masks, strict=True):
                assert torch.count_nonzero(weight[~mask]) == 0  # exactly 0.0, not small
            for target in net.target_weights:
                for weight, mask in zip(target, net.masks, strict=True):
                    assert torch.count_nonzero(weight[~mask]) == 0
            state = net.optimizer.state
            for weight, mask in zip(net.weights, net.masks, strict=True):
                for key in ("exp_avg", "exp_avg_sq"):
                    if key in state.get(weight, {}):
                        assert torch.count_nonzero(state[weight][key][~mask]) == 0
        seen_updates = sparse.topology_updates
    assert seen_updates >= 8 and sparse.changed_total > 0  # the topology did move


@pytest.mark.parametrize("algo", ["td3", "sac"])
def test_policy_weights_carry_exact_zeros_where_pruned(algo: str) -> None:
    learner, sparse = sparse_learner(algo, interval=2)
    rng = np.random.default_rng(1)
    for _ in range(6):
        learner.update(batch(rng))
    weights = learner.policy_weights()
    actor = sparse.networks["actor"]
    for name, mask in zip(actor.layer_names, actor.masks, strict=True):
        published = weights[f"{name}.weight"]
        keep = mask[: published.shape[0]].numpy()  # SAC publishes the mean rows only
        assert np.all(published[~keep] == 0.0)
    zeros = sum(int((w == 0).sum()) for k, w in weights.items() if k.endswith("weight"))
    size = sum(w.size for k, w in weights.items() if k.endswith("weight"))
    assert zeros / size >= 0.85  # ~0.9 by ER (the SAC head's log-std rows stay behind)


def test_grow_and_drop_counts_are_equal_and_follow_magnitude_and_gradient() -> None:
    layer = torch.nn.Linear(8, 8)
    opt = torch.optim.Adam(layer.parameters(), lr=1e-3)
    net = SparseNetwork("t", layer, opt, 0.5, TopologySchedule(interval=1_000, stop=10_000))
    before = net.masks[0].clone()
    active = int(before.sum())
    layer(torch.randn(4, 8)).pow(2).sum().backward()
    opt.step()  # Adam state now exists; weights re-masked by the post-hook
    # Gradient only where weights are inactive, so no dropped weight is grown back.
    grad = torch.rand(8, 8) * ~before
    net._dense_grads[0] = grad
    magnitude = layer.weight.detach().abs().clone()
    moved = net.update_topology(0.25)
    after = net.masks[0]
    k = int(active * 0.25)
    dropped, grown = before & ~after, after & ~before
    assert int(after.sum()) == active
    assert int(dropped.sum()) == int(grown.sum()) == moved == k
    assert magnitude[dropped].max() <= magnitude[before & after].min()  # smallest |w| went
    assert grad[grown].min() >= grad[~before & ~after].max()  # largest |grad| came
    assert torch.count_nonzero(layer.weight.detach()[grown]) == 0  # regrown at exactly 0.0
    for key in ("exp_avg", "exp_avg_sq"):
        assert torch.count_nonzero(opt.state[layer.weight][key][grown]) == 0


def test_resume_restores_masks_and_schedule_exactly() -> None:
    learner, sparse = sparse_learner("td3", interval=4)
    rng = np.random.default_rng(2)
    for _ in range(17):
        learner.update(batch(rng))
    algo_state, sparse_state = learner.state_dict(), sparse.state_dict()
    fresh, fresh_sparse = sparse_learner("td3", interval=4)
    fresh.load_state_dict(algo_state)
    fresh_sparse.load_state_dict(sparse_state)
    for name, net in sparse.networks.items():
        other = fresh_sparse.networks[name]
        assert other.steps == net.steps and other.topology_updates == net.topology_updates
        for a, b in zip(net.masks, other.masks, strict=True):
            assert torch.equal(a, b)
    assert fresh_sparse.train_flops == sparse.train_flops
    # A zero that is an active weight (just regrown) stays active after resume: masks are
    # saved, not re-derived from the zeros.
    for net in fresh_sparse.networks.values():
        for weight, mask in zip(net.weights, net.masks, strict=True):
            assert torch.count_nonzero(weight[~mask]) == 0
    with pytest.raises(ValueError, match="sparse networks"):
        _, other = sparse_learner("td3", actor=0.0)
        other.load_state_dict(sparse_state)


# --- FLOPs ---------------------------------------------------------------------------------
@pytest.mark.parametrize("algo", ["td3", "sac"])
def test_dense_flops_model_matches_torch_flop_counter(algo: str) -> None:
    learner, sparse = sparse_learner(algo, actor=0.0, critic=0.0)
    rng = np.random.default_rng(3)
    learner.update(batch(rng))  # builds optimizer state outside the count
    counter = FlopCounterMode(display=False)
    updates = 4
    with counter:
        for _ in range(updates):
            learner.update(batch(rng))
    measured = counter.get_total_flops() / updates
    sparse_flops, dense_flops = sparse.update_flops()
    assert sparse_flops == dense_flops
    # torch skips input gradients that nobody needs (first layers), and the fast update
    # path skips the critics' weight gradients in the actor step: the model counts both,
    # as RLx2's 3x-forward rule does, so it exceeds the measurement by up to ~15%.
    assert 0.85 * dense_flops <= measured <= 1.02 * dense_flops, (measured, dense_flops)


def test_sparse_flops_scale_with_density() -> None:
    learner, sparse = sparse_learner("td3", actor=0.9, critic=0.9)
    sparse_flops, dense_flops = sparse.update_flops()
    assert 0.08 < sparse_flops / dense_flops < 0.2  # ER keeps the small layers denser
    inference, dense_inference = sparse.inference_flops()
    weights = learner.policy_weights()
    matrices = [w for k, w in weights.items() if k.endswith(".weight")]
    assert inference == 2 * sum(int(np.count_nonzero(w)) for w in matrices)
    assert dense_inference == 2 * sum(w.size for w in matrices)


# --- configuration ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("field", "value", "named"),
    [
        ("sparsity_actor", 1.0, "ACTORQ_SPARSITY_ACTOR"),
        ("sparsity_critic", -0.1, "ACTORQ_SPARSITY_CRITIC"),
        ("topology_interval", 0, "ACTORQ_TOPOLOGY_INTERVAL"),
        ("delayed_nstep", 0, "ACTORQ_DELAYED_NSTEP"),
        ("buffer_drop_fraction", 1.0, "ACTORQ_BUFFER_DROP_FRACTION"),
    ],
)
def test_bad_sparse_settings_are_named(field: str, value: float, named: str) -> None:
    with pytest.raises(ConfigError, match=named):
        SparseTrainingConfig(**{field: value})


def test_algorithms_that_cannot_use_it_are_refused() -> None:
    with pytest.raises(ConfigError, match="actor-critic"):
        SparseTrainingConfig(sparsity_actor=0.9).check_usable("dqn")
    with pytest.raises(ConfigError, match="d4pg"):
        SparseTrainingConfig(delayed_nstep=3).check_usable("d4pg")
    with pytest.raises(ConfigError, match="uniform"):
        SparseTrainingConfig(dynamic_buffer=True).check_usable("td3", replay="prioritized")
    SparseTrainingConfig(sparsity_actor=0.9, delayed_nstep=3).check_usable("td3")


def test_narrow_network_note_only_for_very_sparse_narrow_networks() -> None:
    note = narrow_network_note(0.9, 0.0, (64, 64))
    assert note is not None and "64x64" in note and "--hidden 256,256" in note
    assert narrow_network_note(0.0, 0.95, (256, 128)) is not None  # critic alone, one narrow
    assert narrow_network_note(0.9, 0.9, (256, 256)) is None  # RLx2's width
    assert narrow_network_note(0.8, 0.8, (64, 64)) is None  # 80% held at 64x64 (13e)
    assert narrow_network_note(0.0, 0.0, (32,)) is None  # dense
