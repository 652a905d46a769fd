"""The captured runners (actorq.algos.capture) against the algorithm's own update.

On CPU the runner calls the step eagerly ("torch-eager" through CapturedUpdate: static
inputs, slot Adam, readback ring): same seeds, same 50 fixed batches, and the parameters,
optimizer state, losses and |TD errors| must match the algorithm's own update, which is
the same `step`. Tolerances: exactly equal (0) for DQN's torch step, DDPG, TD3, SAC, D4PG
and PPO/APPO/A2C (same ops, same fused Adam kernel); 1e-6 absolute against DQN's
numpy-flat runner (BLAS summation order). GPU tests (marker `gpu`) compare the CUDA graph
with the eager step on CUDA.
"""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from actorq.algos import load_algorithm_config, make_algorithm
from actorq.algos.capture import (
    UPDATE_PATHS,
    CapturedUpdate,
    apply_update_path,
    available_update_paths,
    current_update_path,
    install_runner,
)
from actorq.algos.feed import BatchFeeder, DeviceReplay, PrioritizedDeviceReplay
from actorq.testing.batches import random_update_batches

OBS, OUT, HIDDEN, B = 5, 3, (32, 32), 32


@pytest.fixture(autouse=True)
def _one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # DQN's numpy-flat path runs on one thread only
    yield
    torch.set_num_threads(threads)


def _batches(algo: str, n: int = 50, seed: int = 0, nstep: bool = False) -> list[dict]:
    return random_update_batches(
        algo, OBS, OUT, B, n, seed, done_rate=0.1, nstep_every=3 if nstep else 0
    )


def _weights(i: int) -> np.ndarray | None:
    return None if i % 2 else np.random.default_rng(i).uniform(0.5, 1.5, B).astype(np.float32)


def _learner(name: str, device: str = "cpu", **overrides):
    config = load_algorithm_config(name, {}, batch_size=B, **overrides)
    return make_algorithm(name, OBS, OUT, HIDDEN, config, device=device, seed=3)


def _flat_state(state, prefix: str = "") -> dict[str, torch.Tensor]:
    out: dict[str, torch.Tensor] = {}
    for key, value in state.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(_flat_state(value, name + "."))
        elif torch.is_tensor(value):
            out[name] = value.detach().cpu().double()
        elif isinstance(value, int | float):
            out[name] = torch.tensor(float(value), dtype=torch.float64)
    return out


def _assert_states_close(a, b, atol: float) -> None:
    sa, sb = _flat_state(a.state_dict()), _flat_state(b.state_dict())
    assert sa.keys() == sb.keys()
    assert any("exp_avg" in k for k in sa), "optimizer state is part of the comparison"
    for key in sa:
        torch.testing.assert_close(sa[key], sb[key], atol=atol, rtol=0, msg=key)


_SCHEDULE = {"flat": False, "lr_final": 1e-4, "lr_decay_updates": 30, "tau": 0.5}
OFF_POLICY = [
    ("dqn", {"flat": False}, 0.0),
    ("dqn", {**_SCHEDULE, "target_update_every": 7}, 0.0),  # lr schedule, soft sync
    ("dqn", {}, 1e-6),  # against the numpy-flat update, the CPU default
    ("dqn", {"qat_bits": 8}, 0.0),  # fake-quantized weights: autograd, not mlp_grad
    ("ddpg", {}, 0.0),
    ("td3", {}, 0.0),
    ("td3", {"qat_bits": 4}, 0.0),
    ("sac", {}, 0.0),
    ("d4pg", {}, 0.0),
]


@pytest.mark.parametrize(("name", "overrides", "atol"), OFF_POLICY)
def test_captured_step_matches_todays_update(name, overrides, atol):
    ref, cap = _learner(name, **overrides), _learner(name, **overrides)
    install_runner(cap, "torch-eager")
    assert current_update_path(cap) == "torch-eager"
    for i, batch in enumerate(_batches(name, nstep=name in ("dqn", "d4pg"))):
        r_ref, r_cap = ref.update(batch, _weights(i)), cap.update(batch, _weights(i))
        for field in ("loss", "q_mean", "grad_norm"):
            assert getattr(r_cap, field) == pytest.approx(getattr(r_ref, field), abs=atol)
        np.testing.assert_allclose(r_cap.td_abs, r_ref.td_abs, atol=atol, rtol=0)
        if hasattr(r_ref, "actor_loss"):  # NaN on TD3's delayed steps in both
            np.testing.assert_allclose(r_cap.actor_loss, r_ref.actor_loss, atol=atol, rtol=0)
    assert cap.num_updates == ref.num_updates == 50
    _assert_states_close(ref, cap, atol)


def test_captured_step_matches_pixel_dqn():
    """A CNN Q-network (pixel envs): uint8 frames become float32 static inputs."""
    from actorq.models.cnn import cnn_spec_for

    spec = cnn_spec_for((4, 10, 10), OUT)
    config = load_algorithm_config("dqn", {}, batch_size=8)
    ref, cap = (make_algorithm("dqn", 0, OUT, (), config, seed=1, spec=spec) for _ in range(2))
    install_runner(cap, "torch-eager")
    rng = np.random.default_rng(0)
    for _ in range(10):
        batch = {
            "obs": rng.integers(0, 2, (8, 4, 10, 10), dtype=np.uint8),
            "next_obs": rng.integers(0, 2, (8, 4, 10, 10), dtype=np.uint8),
            "action": rng.integers(0, OUT, 8),
            "reward": rng.standard_normal(8).astype(np.float32),
            "done": np.zeros(8, np.float32),
        }
        assert cap.update(batch).loss == ref.update(batch).loss
    _assert_states_close(ref, cap, 0.0)


def _segments(n: int, seed: int = 0) -> list[dict]:
    rng = np.random.default_rng(seed)
    t, b = 16, 8
    return [
        {
            "obs": rng.standard_normal((t, b, OBS), dtype=np.float32),
            "action": rng.integers(0, OUT, (t, b)),
            "reward": rng.standard_normal((t, b)).astype(np.float32),
            "terminated": (rng.random((t, b)) < 0.05).astype(np.float32),
            "truncated": np.zeros((t, b), np.float32),
            "behaviour_logp": np.full((t, b), np.log(1 / OUT), np.float32),
            "last_obs": rng.standard_normal((b, OBS), dtype=np.float32),
        }
        for _ in range(n)
    ]


@pytest.mark.parametrize("name", ["ppo", "appo", "a2c"])
def test_captured_minibatch_step_matches_onpolicy_update(name):
    ref = make_algorithm(name, OBS, OUT, HIDDEN, seed=2)
    cap = make_algorithm(name, OBS, OUT, HIDDEN, seed=2)
    install_runner(cap, "torch-eager")
    for batch in _segments(12):  # 12 batches x (epochs x minibatches) steps: >= 12 for A2C
        r_ref, r_cap = ref.update(batch), cap.update(batch)
        for field in ("loss", "policy_loss", "value_loss", "entropy", "grad_norm"):
            assert getattr(r_cap, field) == pytest.approx(getattr(r_ref, field), abs=1e-6)
        assert r_cap.ratios.mean == r_ref.ratios.mean
    _assert_states_close(ref, cap, 0.0)  # one fused Adam on both since the step is one


@pytest.mark.parametrize("name", ["dqn", "td3", "sac"])
def test_batched_readback_equals_per_update_reads(name):
    per, batched = _learner(name), _learner(name)
    install_runner(per, "torch-eager")
    runner = CapturedUpdate(batched, "torch-eager", readback_every=16)  # the ring wraps
    batches = _batches(name)
    expected = [per.update(b, _weights(i)) for i, b in enumerate(batches)]
    lagged = []
    for i, b in enumerate(batches):
        runner.submit([b], [_weights(i)])
        lagged.append(runner.lagged_td())
    got = runner.drain()
    assert len(got) == 50 and runner.drain() == []
    for e, g in zip(expected, got, strict=True):
        assert (g.loss, g.q_mean, g.grad_norm) == (e.loss, e.q_mean, e.grad_norm)
        np.testing.assert_array_equal(g.td_abs, e.td_abs)
    # Priorities one update late: after submit i, the |TD errors| of update i - 1.
    assert lagged[0] is None
    for i in range(1, 50):
        np.testing.assert_array_equal(lagged[i], expected[i - 1].td_abs)


def test_k_updates_per_call_equal_k_single_updates():
    one, two = _learner("td3"), _learner("td3")
    install_runner(one, "torch-eager")
    runner = CapturedUpdate(two, "torch-eager", readback_every=8, k=2)
    batches = _batches("td3", n=10)
    expected = [one.update(b) for b in batches]
    for i in range(0, 10, 2):
        runner.submit(batches[i : i + 2])
    got = runner.drain()
    assert [g.loss for g in got] == [e.loss for e in expected]
    assert two.num_updates == 10
    _assert_states_close(one, two, 0.0)


def test_load_state_dict_under_a_runner_rebuilds_it():
    ref, cap = _learner("sac"), _learner("sac")
    install_runner(cap, "torch-eager")
    batches = _batches("sac", n=6)
    for b in batches[:3]:
        ref.update(b)
    # A deep copy, as a checkpoint would be: Adam's load_state_dict keeps the very tensors
    # it is given, so loading ref's live state would make both learners share it.
    cap.load_state_dict(copy.deepcopy(ref.state_dict()))  # replaces Adam's state tensors
    cap.rng.set_state(ref.rng.get_state())
    for b in batches[3:]:
        assert cap.update(b).loss == ref.update(b).loss
    _assert_states_close(ref, cap, 0.0)


def test_paths_reported_and_switched_back():
    dqn = _learner("dqn")
    assert available_update_paths(dqn)[:2] == ("numpy-flat", "torch-eager")
    assert current_update_path(dqn) == "numpy-flat"
    ref = _learner("dqn")
    batches = _batches("dqn", n=8)
    assert apply_update_path(dqn, "torch-eager") == "torch-eager"
    assert current_update_path(dqn) == "torch-eager"
    for b in batches[:4]:
        np.testing.assert_allclose(dqn.update(b).loss, ref.update(b).loss, atol=1e-6)
    assert "update" not in vars(dqn)  # the class's own update: the step, eagerly
    assert apply_update_path(dqn, "numpy-flat") == "numpy-flat"
    assert current_update_path(dqn) == "numpy-flat"
    for b in batches[4:]:  # the numpy update re-adopts the state the captured step moved
        np.testing.assert_allclose(dqn.update(b).loss, ref.update(b).loss, atol=1e-6)
    td3 = _learner("td3")
    assert current_update_path(td3) == "torch-eager"
    assert "numpy-flat" not in available_update_paths(td3)


def test_unknown_and_unavailable_paths_are_refused():
    td3 = _learner("td3")
    with pytest.raises(ValueError, match=r"'warp-drive' is unknown .*available: torch-eager"):
        apply_update_path(td3, "warp-drive")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match=r"'cuda-graph' is not available .*on cpu"):
            apply_update_path(td3, "cuda-graph")
    with pytest.raises(ValueError, match=r"'numpy-flat' is not available.*available: torch-eager"):
        apply_update_path(td3, "numpy-flat")
    assert set(available_update_paths(td3)) <= set(UPDATE_PATHS)
    hooked = _learner("td3")
    hooked.actor_opt.register_step_post_hook(lambda opt, args, kwargs: None)
    assert available_update_paths(hooked) == ("torch-eager",)  # its own update only
    with pytest.raises(ValueError, match=r"step hooks \(RLx2"):
        apply_update_path(hooked, "compiled")
    normed = _learner("sac", obs_norm=True)
    assert available_update_paths(normed) == ("torch-eager",)
    with pytest.raises(ValueError, match=r"'compiled' is not available .*obs_norm"):
        apply_update_path(normed, "compiled")


def test_batch_of_another_shape_is_refused_clearly():
    dqn = _learner("dqn")
    runner = install_runner(dqn, "torch-eager")
    batch = _batches("dqn", n=1)[0]
    dqn.update(batch)
    bad = {**batch, "next_obs": batch["next_obs"][:, :2]}
    with pytest.raises(ValueError, match=r"batch\['next_obs'\] has shape \(32, 2\)"):
        dqn.update(bad)
    with pytest.raises(KeyError, match="missing"):
        runner.submit([{k: v for k, v in batch.items() if k != "reward"}])


def test_device_replay_samples_stored_rows():
    rows = _batches("dqn", n=1)[0]
    ring = DeviceReplay(20, rows, torch.device("cpu"))
    ring.add(rows)  # 32 rows into 20 slots: the last 20 stay
    assert ring.size == 20
    feeder = BatchFeeder(
        ("obs", "action", "reward", "next_obs", "done", "weights"), rows, 2, ring.device
    )
    ring.sample_into(feeder, torch.Generator().manual_seed(0))
    stored = {tuple(r) for r in rows["obs"][-20:]}
    sampled = feeder.inputs["obs"].reshape(-1, OBS).numpy()
    assert all(tuple(r) in stored for r in sampled)
    assert torch.equal(feeder.inputs["weights"], torch.ones(2, B))
    assert feeder.inputs["action"].dtype == torch.int64


# inductor imports torch.utils.mkldnn, which warns about its own torch.jit use.
@pytest.mark.filterwarnings("ignore:`torch.jit.script_method` is deprecated:DeprecationWarning")
@pytest.mark.parametrize("name", ["dqn", "td3"])
def test_sampling_from_the_device_ring_inside_the_step(name):
    """use_replay + submit_sampled: k=2 updates per call, batches drawn on the device;
    the same indices fed through today's update give the same losses and state."""
    ref, cap = _learner(name), _learner(name)
    install_runner(ref, "torch-eager")  # exact comparison (DQN's default is numpy-flat)
    rows = {k: np.concatenate([b[k] for b in _batches(name, n=3)]) for k in DeviceReplay.COLUMNS}
    ring = DeviceReplay(200, rows, torch.device("cpu"))
    ring.add(rows)  # 96 rows
    runner = CapturedUpdate(cap, "torch-eager", readback_every=8, k=2)
    runner.use_replay(ring, B, torch.Generator().manual_seed(5))
    replica = torch.Generator().manual_seed(5)
    expected = []
    for _ in range(4):
        runner.submit_sampled()
        for index in ring.indices(2, B, replica).numpy():
            batch = {k: rows[k][index] for k in DeviceReplay.COLUMNS}
            expected.append(ref.update(batch).loss)
    assert [r.loss for r in runner.drain()] == expected
    assert cap.num_updates == 8
    _assert_states_close(ref, cap, 0.0)


def test_compiled_path_matches_eager_on_cpu():
    """torch.compile (inductor, default mode on CPU): ~100 s of compilation on 2 cores."""
    if "compiled" not in available_update_paths(_learner("dqn", flat=False)):
        pytest.skip("no C compiler for inductor's CPU backend")
    ref, cap = _learner("dqn", flat=False), _learner("dqn", flat=False)
    apply_update_path(cap, "compiled")
    for i, b in enumerate(_batches("dqn", n=4)):
        r_ref, r_cap = ref.update(b, _weights(i)), cap.update(b, _weights(i))
        assert r_cap.loss == pytest.approx(r_ref.loss, abs=1e-5)
    _assert_states_close(ref, cap, 1e-5)


# --- on a GPU (make gpu-check) ------------------------------------------------------------
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
GPU_CASES = [("dqn", {}), ("ddpg", {}), ("d4pg", {}), ("td3", {"policy_noise": 0.0}), ("sac", {})]


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize(("name", "overrides"), GPU_CASES)
def test_cuda_graph_matches_eager_on_gpu(name, overrides):
    eager, graph = _learner(name, "cuda", **overrides), _learner(name, "cuda", **overrides)
    install_runner(eager, "torch-eager")
    assert apply_update_path(graph, "cuda-graph") == "cuda-graph"
    for i, b in enumerate(_batches(name, n=50)):
        r_e, r_g = eager.update(b, _weights(i)), graph.update(b, _weights(i))
        assert np.isfinite(r_g.loss)
        if name != "sac":  # SAC samples actions: graph and eager RNG offsets may differ
            assert r_g.loss == pytest.approx(r_e.loss, rel=1e-4, abs=1e-5)
    if name != "sac":
        _assert_states_close(eager, graph, 1e-4)
    assert graph.num_updates == 50


@pytest.mark.gpu
@needs_cuda
def test_cuda_graph_minibatch_step_on_gpu():
    eager = make_algorithm("ppo", OBS, OUT, HIDDEN, device="cuda", seed=2)
    graph = make_algorithm("ppo", OBS, OUT, HIDDEN, device="cuda", seed=2)
    install_runner(eager, "torch-eager")
    apply_update_path(graph, "cuda-graph")
    for batch in _segments(5):
        assert graph.update(batch).loss == pytest.approx(eager.update(batch).loss, abs=1e-4)


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("name", ["dqn", "td3"])
def test_cuda_graph_samples_k_updates_per_replay_on_gpu(name):
    """One graph replay = sampling from the device ring + 4 updates (no host batch)."""
    learner = _learner(name, "cuda")
    rows = {k: np.concatenate([b[k] for b in _batches(name, n=3)]) for k in DeviceReplay.COLUMNS}
    ring = DeviceReplay(200, rows, torch.device("cuda"))
    ring.add(rows)
    runner = CapturedUpdate(learner, "cuda-graph", readback_every=16, k=4)
    runner.use_replay(ring, B, torch.Generator(device="cuda").manual_seed(5))
    before = (
        [p.detach().clone() for p in learner.critics.parameters()]
        if name == "td3"
        else [p.detach().clone() for p in learner.online.parameters()]
    )
    for _ in range(4):
        runner.submit_sampled()
    results = runner.drain()
    assert len(results) == 16 and learner.num_updates == 16
    assert all(np.isfinite(r.loss) for r in results)
    assert len({r.loss for r in results}) > 1  # fresh batches on every replay
    after = learner.critics.parameters() if name == "td3" else learner.online.parameters()
    assert any(not torch.equal(a, b) for a, b in zip(before, after, strict=True))


@pytest.mark.gpu
@needs_cuda
def test_cuda_graph_samples_by_priority_as_the_eager_step_does_on_gpu():
    """Prioritized ring: one graph replay = draws by priority, k updates, |TD errors|
    written back as priorities; the same as the eager runner on the same ring and seed
    (the capture's warm-up leaves the priorities as they were)."""
    rows = {k: np.concatenate([b[k] for b in _batches("dqn", n=8)]) for k in DeviceReplay.COLUMNS}
    runs = []
    for path in ("torch-eager", "cuda-graph"):
        learner = _learner("dqn", "cuda", flat=False)
        ring = PrioritizedDeviceReplay(512, rows, torch.device("cuda"), beta_steps=8)
        ring.add(rows)
        runner = CapturedUpdate(learner, path, readback_every=16, k=4)
        runner.use_replay(ring, B, torch.Generator(device="cuda").manual_seed(5))
        for _ in range(4):
            runner.submit_sampled()
        runs.append(([r.loss for r in runner.drain()], ring.priority.cpu(), learner))
    (eager_losses, eager_p, eager), (graph_losses, graph_p, graph) = runs
    assert graph_losses == pytest.approx(eager_losses, rel=1e-4, abs=1e-5)
    assert not torch.equal(graph_p[: len(rows["obs"])], torch.ones(len(rows["obs"])))
    torch.testing.assert_close(graph_p, eager_p, rtol=1e-4, atol=1e-6)
    _assert_states_close(eager, graph, 1e-4)
