"""The numpy-flat runner (actorq.algos.dqn_flat) pinned to DQN's one `step` (the torch
path: DQNLearner.update, itself bit for bit the oracle's, test_fast_update.py). Summation
orders differ (numpy's BLAS vs torch's), so results are compared with tight tolerances
rather than bit for bit; the cases are built so that the Huber clamp, the gradient clip
and Adam's bias correction all matter (each changes the result by far more than the
tolerances)."""

from __future__ import annotations

import io

import numpy as np
import pytest
import torch

from actorq.algos import load_algorithm_config, make_algorithm
from actorq.algos.capture import apply_update_path, current_update_path, install_runner
from actorq.algos.dqn import DQNLearner
from actorq.algos.dqn_flat import FlatDQNUpdate
from actorq.learner.settle import scale_learning_rates

OBS, ACTIONS = 5, 3


pytestmark = pytest.mark.usefixtures("one_torch_thread")  # the flat path needs one thread


def make_batch(rng: np.random.Generator, n: int = 32, reward_scale: float = 4.0) -> dict:
    return {
        "obs": rng.normal(size=(n, OBS)).astype(np.float32),
        "next_obs": rng.normal(size=(n, OBS)).astype(np.float32),
        # rewards of a few units against huber_delta 1: many TD errors beyond the clamp
        "reward": (reward_scale * rng.normal(size=n)).astype(np.float32),
        "done": (rng.random(n) < 0.2).astype(np.float32),
        "action": rng.integers(0, ACTIONS, n),
    }


def make_dqn(hidden=(16, 16), config=None, path: str = "numpy-flat", seed: int = 0):
    dqn = make_algorithm("dqn", OBS, ACTIONS, hidden, config, seed=seed)
    assert apply_update_path(dqn, path) == path
    return dqn


def runner(dqn: DQNLearner) -> FlatDQNUpdate:
    """The numpy-flat runner behind `dqn.update`."""
    assert current_update_path(dqn) == "numpy-flat"
    return dqn.update.__self__


def pair(hidden=(16, 16), **overrides) -> tuple[DQNLearner, DQNLearner]:
    """(torch step, numpy-flat runner) learners with the same initial weights."""
    base = {"huber_delta": 1.0, "max_grad_norm": 0.1, "target_update_every": 7}
    config = load_algorithm_config("dqn", {}, **{**base, **overrides})
    return make_dqn(hidden, config, "torch-eager"), make_dqn(hidden, config)


def assert_states_close(a: DQNLearner, b: DQNLearner, rtol: float, atol: float) -> None:
    for net in ("online", "target"):
        sa, sb = getattr(a, net).state_dict(), getattr(b, net).state_dict()
        for name in sa:
            torch.testing.assert_close(sb[name], sa[name], rtol=rtol, atol=atol, msg=name)
    oa, ob = a.optimizer.state_dict()["state"], b.optimizer.state_dict()["state"]
    assert oa.keys() == ob.keys()
    for i in oa:
        assert float(oa[i]["step"]) == float(ob[i]["step"])
        for key in ("exp_avg", "exp_avg_sq"):
            torch.testing.assert_close(ob[i][key], oa[i][key], rtol=rtol, atol=atol * 1e-2)


def assert_updates_close(ra, rb, rtol: float = 1e-5) -> None:
    assert rb.loss == pytest.approx(ra.loss, rel=rtol)
    assert rb.grad_norm == pytest.approx(ra.grad_norm, rel=rtol)
    assert rb.q_mean == pytest.approx(ra.q_mean, rel=rtol, abs=1e-6)
    np.testing.assert_allclose(rb.td_abs, ra.td_abs, rtol=rtol, atol=1e-6)


@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("double", [True, False])
def test_one_update_matches_torch_path(weighted: bool, double: bool) -> None:
    rng = np.random.default_rng(0)
    slow, fast = pair(double=double)
    batch = make_batch(rng)
    w = rng.uniform(0.1, 1.0, 32).astype(np.float32) if weighted else None
    ra, rb = slow.update(batch, w), fast.update(batch, w)
    # the case exercises the Huber clamp and the gradient clip
    assert (ra.td_abs > 1.0).mean() > 0.5 and (ra.td_abs < 1.0).any()
    assert ra.grad_norm > 0.1
    assert_updates_close(ra, rb)
    assert_states_close(slow, fast, rtol=1e-5, atol=1e-7)


def test_one_update_without_clipping_matches() -> None:
    rng = np.random.default_rng(1)
    slow, fast = pair(max_grad_norm=1e3, huber_delta=10.0)
    batch = make_batch(rng, reward_scale=0.5)
    ra, rb = slow.update(batch), fast.update(batch)
    assert ra.grad_norm < 1e3 and (ra.td_abs < 10.0).all()
    assert_updates_close(ra, rb)
    assert_states_close(slow, fast, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize(
    ("hidden", "overrides"),
    [
        ((16, 16), {}),
        ((8,), {"tau": 0.2, "target_update_every": 1}),  # Polyak averaging every update
        ((12, 9, 7), {"lr_final": 1e-4, "lr_decay_updates": 120}),  # the lr schedule
    ],
)
def test_200_updates_on_fixed_batches_stay_close(hidden, overrides) -> None:
    rng = np.random.default_rng(2)
    batches = [make_batch(rng) for _ in range(10)]
    weights = [rng.uniform(0.1, 1.0, 32).astype(np.float32) for _ in range(10)]
    slow, fast = pair(hidden, **overrides)
    for i in range(200):
        w = weights[i % 10] if i % 2 else None
        ra, rb = slow.update(batches[i % 10], w), fast.update(batches[i % 10], w)
        assert rb.loss == pytest.approx(ra.loss, rel=1e-4), i
        assert rb.grad_norm == pytest.approx(ra.grad_norm, rel=1e-4), i
        assert slow.optimizer.param_groups[0]["lr"] == fast.optimizer.param_groups[0]["lr"]
    assert_states_close(slow, fast, rtol=1e-4, atol=1e-5)
    assert slow.num_updates == fast.num_updates == 200


def test_flat_memory_is_shared_with_parameters_state_and_policy_weights() -> None:
    rng = np.random.default_rng(3)
    _, fast = pair(target_update_every=3)
    before = fast.policy_weights()
    fast.update(make_batch(rng))
    after = fast.policy_weights()
    assert all(not np.array_equal(before[k], after[k]) for k in before)  # updates reach them
    flat = runner(fast).flat.numpy()
    np.testing.assert_array_equal(
        np.concatenate([after[k].ravel() for k in after]), flat
    )  # parameters are views of the flat buffer, in state-dict order
    state = fast.optimizer.state_dict()["state"]
    np.testing.assert_array_equal(
        np.concatenate([state[i]["exp_avg"].numpy().ravel() for i in sorted(state)]),
        runner(fast).exp_avg.numpy(),
    )
    fast.update(make_batch(rng))
    fast.update(make_batch(rng))  # update 3: target sync (tau 1: an exact copy)
    for name, value in fast.target.state_dict().items():
        assert torch.equal(value, fast.online.state_dict()[name])


@pytest.mark.parametrize("direction", ["torch_to_flat", "flat_to_torch"])
def test_checkpoints_load_across_paths(direction: str) -> None:
    rng = np.random.default_rng(4)
    batches = [make_batch(rng) for _ in range(12)]
    slow, fast = pair(lr_final=1e-4, lr_decay_updates=20)
    source = slow if direction == "torch_to_flat" else fast
    for b in batches[:8]:
        source.update(b)
    buffer = io.BytesIO()
    torch.save(source.state_dict(), buffer)
    buffer.seek(0)
    # a learner from another seed: everything must come from the checkpoint
    other = "numpy-flat" if source is slow else "torch-eager"
    resumed = make_dqn((16, 16), source.config, other, seed=5)
    resumed.load_state_dict(torch.load(buffer, weights_only=True))
    assert current_update_path(resumed) != current_update_path(source)  # the other path
    assert resumed.lr_at(resumed.num_updates) == source.lr_at(source.num_updates)
    for b in batches[8:]:
        ra, rb = source.update(b), resumed.update(b)
        assert_updates_close(ra, rb, rtol=1e-4)
    assert_states_close(source, resumed, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("direction", ["torch_to_flat", "flat_to_torch"])
def test_state_dicts_load_into_the_other_path(direction: str) -> None:
    rng = np.random.default_rng(6)
    batches = [make_batch(rng) for _ in range(10)]
    slow, fast = pair()
    reference, _ = pair()
    source, dest = (slow, fast) if direction == "torch_to_flat" else (fast, slow)
    for b in batches[:5]:
        source.update(b)
        reference.update(b)
    dest.load_state_dict(source.state_dict())
    for b in batches[5:]:
        ra, rb = reference.update(b), dest.update(b)
        assert_updates_close(ra, rb, rtol=1e-4)
    assert_states_close(reference, dest, rtol=1e-4, atol=1e-6)


def test_torch_path_with_grad_sync_shares_the_flat_state() -> None:
    """Parallel learners (grad_sync) take the torch path; switching back and forth keeps
    one parameter and Adam state, as prime_optimizer + broadcast in the learner loop do."""
    rng = np.random.default_rng(7)
    slow, fast = pair()
    calls = []
    slow.prime_optimizer()
    fast.prime_optimizer()  # step 1 with zero gradients, as in torch's path
    assert_states_close(slow, fast, rtol=0, atol=0)
    for i in range(12):
        fast.grad_sync = calls.append if i % 3 == 0 else None
        batch = make_batch(rng)
        assert_updates_close(slow.update(batch), fast.update(batch), rtol=1e-4)
    assert len(calls) == 4
    assert_states_close(slow, fast, rtol=1e-4, atol=1e-6)


def test_more_torch_threads_keep_the_numpy_path() -> None:
    """torch's thread count does not send the update back to torch's step (it did: at two
    threads, 3x slower for DQN 64x64); the result still matches torch's to rounding."""
    rng = np.random.default_rng(9)
    slow, fast = pair()
    flat, ran = runner(fast), []
    numpy_update = flat._update
    flat._update = lambda *args: ran.append(torch.get_num_threads()) or numpy_update(*args)
    threads = torch.get_num_threads()
    try:
        for i in range(6):
            torch.set_num_threads(2 if i in (2, 3) else 1)
            batch = make_batch(rng)
            assert_updates_close(slow.update(batch), fast.update(batch), rtol=1e-4)
            assert flat.usable() and flat.adopted()
        assert ran == [1, 1, 2, 2, 1, 1]  # every update ran here, on either count
    finally:
        torch.set_num_threads(threads)
    assert_states_close(slow, fast, rtol=1e-4, atol=1e-6)


def test_batch_checks_and_input_dtypes() -> None:
    rng = np.random.default_rng(8)
    slow, fast = pair()
    batch = make_batch(rng)
    cast = {
        **batch,
        "obs": batch["obs"].astype(np.float64),
        "action": batch["action"].astype(np.int32),
        "done": batch["done"].astype(bool),
    }
    assert_updates_close(slow.update(batch), fast.update(cast))
    with pytest.raises(KeyError, match="missing"):
        fast.update({k: v for k, v in batch.items() if k != "done"})
    with pytest.raises(ValueError, match="rows"):
        fast.update({**batch, "reward": batch["reward"][:5]})
    with pytest.raises(ValueError, match="weights must have shape"):
        fast.update(batch, np.ones(3, np.float32))
    for bad in (ACTIONS, -1):
        action = batch["action"].copy()
        action[4] = bad
        with pytest.raises(IndexError, match="actions outside"):
            fast.update({**batch, "action": action})
    assert fast.num_updates == 1  # refused batches change nothing


def test_flat_path_only_where_it_applies() -> None:
    def path(config) -> str:
        return current_update_path(make_algorithm("dqn", 4, 2, (8,), config))

    assert path(load_algorithm_config("dqn", {})) == "numpy-flat"  # DQN's default on CPU
    qat = load_algorithm_config("dqn", {}, qat_bits=8)
    assert path(qat) == "torch-eager"  # autograd's STE
    # ACTORQ_DQN_FLAT=false: torch's path on request (A/B benches, debugging)
    assert path(load_algorithm_config("dqn", {"ACTORQ_DQN_FLAT": "false"})) == "torch-eager"
    with pytest.raises(ValueError, match=r"'numpy-flat' is not available.*available: torch"):
        apply_update_path(make_algorithm("dqn", 4, 2, (8,), qat), "numpy-flat")
    with pytest.raises(ValueError, match="DQN's update, not TD3Learner's"):
        install_runner(make_algorithm("td3", 4, 2, (8,)), "numpy-flat")


@pytest.mark.parametrize("path", ["torch-eager", "numpy-flat"])
def test_n_step_transitions_bootstrap_with_gamma_to_their_length(path: str) -> None:
    """A transition that sums 3 rewards bootstraps with gamma^3; one of length 1 with gamma;
    both paths compute the same target (TD errors) as written out here."""
    rng = np.random.default_rng(5)
    config = load_algorithm_config("dqn", {}, gamma=0.9, double=False)
    learner = make_dqn((16,), config, path)
    batch = make_batch(rng, n=8)
    batch["steps"] = np.array([3, 1, 2, 3, 1, 3, 2, 1], np.uint8)
    q_next = learner.target(torch.as_tensor(batch["next_obs"])).max(dim=1).values.numpy()
    q = learner.online(torch.as_tensor(batch["obs"])).detach().numpy()
    q = q[np.arange(8), batch["action"]]
    target = (
        batch["reward"] + 0.9 ** batch["steps"].astype(np.float32) * (1.0 - batch["done"]) * q_next
    )
    result = learner.update(batch)
    np.testing.assert_allclose(result.td_abs, np.abs(q - target), rtol=1e-5, atol=1e-5)
    # all-ones steps are plain one-step DQN
    one = make_dqn((16,), config, path)
    other = make_dqn((16,), config, path)
    plain = make_batch(np.random.default_rng(6), n=8)
    ra = one.update(plain)
    rb = other.update({**plain, "steps": np.ones(8, np.uint8)})
    np.testing.assert_array_equal(ra.td_abs, rb.td_abs)


def test_settling_with_a_zero_rate_freezes_both_paths_exactly() -> None:
    """ACTORQ_SETTLE_LR_SCALE=0: later updates leave online and target weights bit for bit
    as they were, while a scale of 0.5 still moves them (earlier BENCHMARKS 12r)."""
    rng = np.random.default_rng(3)
    for scale, frozen in ((0.0, True), (0.5, False)):
        for dqn in pair():
            for _ in range(10):
                dqn.update(make_batch(rng))
            scale_learning_rates(dqn, scale)
            before = {k: v.clone() for k, v in dqn.online.state_dict().items()}
            for _ in range(20):  # past a target sync (every 7)
                dqn.update(make_batch(rng))
            for net in (dqn.online, dqn.target):
                same = all(torch.equal(before[k], v) for k, v in net.state_dict().items())
                assert same == frozen, (scale, current_update_path(dqn))
