"""DQN learner: hand-computed targets and losses, target sync, checkpoints, config checks."""

from __future__ import annotations

import io

import numpy as np
import pytest
import torch

from actorq.algos.dqn import DQNConfig, DQNLearner
from actorq.models.mlp import MLPSpec

IDENTITY = [[1.0, 0.0], [0.0, 1.0]]
SWAP = [[0.0, 1.0], [1.0, 0.0]]


def linear_learner(
    online_w: list[list[float]], target_w: list[list[float]], **cfg: object
) -> DQNLearner:
    """A learner whose nets are one 2x2 Linear layer without bias, set to the given weights."""
    learner = DQNLearner(MLPSpec(obs_dim=2, num_outputs=2, hidden=()), DQNConfig(**cfg))
    with torch.no_grad():
        for net, w in ((learner.online, online_w), (learner.target, target_w)):
            net.layers[0].weight.copy_(torch.tensor(w))
            net.layers[0].bias.zero_()
    return learner


def one_transition(reward: float = 0.5, done: float = 0.0) -> dict[str, np.ndarray]:
    return {
        "obs": np.array([[1.0, 2.0]], np.float32),
        "action": np.array([1], np.int64),
        "reward": np.array([reward], np.float32),
        "next_obs": np.array([[3.0, 1.0]], np.float32),
        "done": np.array([done], np.float32),
    }


def random_batch(
    rng: np.random.Generator, size: int = 32, obs_dim: int = 4
) -> dict[str, np.ndarray]:
    return {
        "obs": rng.standard_normal((size, obs_dim)).astype(np.float32),
        "action": rng.integers(0, 2, size),
        "reward": rng.standard_normal(size).astype(np.float32),
        "next_obs": rng.standard_normal((size, obs_dim)).astype(np.float32),
        "done": rng.random(size) < 0.1,
    }


@pytest.mark.parametrize(
    ("delta", "expected_loss"),
    [
        (1.0, 1.0 * (1.2 - 0.5 * 1.0)),  # |td| = 1.2 > delta: linear branch
        (2.0, 0.5 * 1.2**2),  # |td| = 1.2 < delta: quadratic branch
    ],
)
def test_loss_matches_hand_computation(delta: float, expected_loss: float) -> None:
    # Q(s) = s, so Q(s, a=1) = 2; Q(s') = [3, 1] -> a* = 0 -> y = 0.5 + 0.9 * 3 = 3.2.
    learner = linear_learner(IDENTITY, IDENTITY, gamma=0.9, huber_delta=delta)
    result = learner.update(one_transition())
    assert result.q_mean == pytest.approx(2.0)
    assert result.td_abs == pytest.approx([1.2], abs=1e-6)
    assert result.loss == pytest.approx(expected_loss, abs=1e-6)


def test_double_dqn_target_uses_online_argmax_and_target_value() -> None:
    # Online Q(s') = [3, 1] picks a* = 0; the swapped target net values it at 1 (its max is 3).
    reward, next_obs, done = torch.tensor([0.5]), torch.tensor([[3.0, 1.0]]), torch.tensor([0.0])
    double = linear_learner(IDENTITY, SWAP, gamma=0.9, double=True)
    vanilla = linear_learner(IDENTITY, SWAP, gamma=0.9, double=False)
    assert double.td_target(reward, next_obs, done).item() == pytest.approx(0.5 + 0.9 * 1.0)
    assert vanilla.td_target(reward, next_obs, done).item() == pytest.approx(0.5 + 0.9 * 3.0)


def test_terminal_transition_does_not_bootstrap() -> None:
    learner = linear_learner(IDENTITY, IDENTITY, gamma=0.9, huber_delta=10.0)
    result = learner.update(one_transition(reward=0.5, done=1.0))
    # y = r = 0.5 and Q(s, 1) = 2, whatever the next state is worth.
    assert result.td_abs == pytest.approx([1.5], abs=1e-6)
    assert result.loss == pytest.approx(0.5 * 1.5**2, abs=1e-6)


def test_importance_weights_scale_the_loss() -> None:
    plain = linear_learner(IDENTITY, IDENTITY, gamma=0.9).update(one_transition())
    weighted = linear_learner(IDENTITY, IDENTITY, gamma=0.9).update(
        one_transition(), weights=np.array([3.0], np.float32)
    )
    assert weighted.loss == pytest.approx(3.0 * plain.loss, rel=1e-6)


def test_weights_with_wrong_shape_are_rejected() -> None:
    learner = linear_learner(IDENTITY, IDENTITY)
    with pytest.raises(ValueError, match="weights must have shape"):
        learner.update(one_transition(), weights=np.ones(2, np.float32))


def test_missing_batch_key_is_named() -> None:
    batch = one_transition()
    del batch["next_obs"]
    with pytest.raises(KeyError, match="next_obs"):
        linear_learner(IDENTITY, IDENTITY).update(batch)


def params_equal(a: torch.nn.Module, b: torch.nn.Module) -> bool:
    return all(torch.equal(x, y) for x, y in zip(a.parameters(), b.parameters(), strict=True))


def test_hard_target_sync_happens_at_configured_update() -> None:
    learner = DQNLearner(MLPSpec(4, 2, (16,)), DQNConfig(target_update_every=3, tau=1.0))
    initial = {k: v.clone() for k, v in learner.target.state_dict().items()}
    rng = np.random.default_rng(0)
    for _ in range(2):
        learner.update(random_batch(rng))
    assert all(torch.equal(initial[k], v) for k, v in learner.target.state_dict().items())
    assert not params_equal(learner.online, learner.target)
    learner.update(random_batch(rng))
    assert learner.num_updates == 3
    assert params_equal(learner.online, learner.target)


def test_soft_target_sync_moves_by_tau() -> None:
    learner = DQNLearner(MLPSpec(4, 2, (16,)), DQNConfig(target_update_every=1, tau=0.25))
    before = [p.clone() for p in learner.target.parameters()]
    learner.update(random_batch(np.random.default_rng(0)))
    for old, new, online in zip(
        before, learner.target.parameters(), learner.online.parameters(), strict=True
    ):
        torch.testing.assert_close(new, 0.75 * old + 0.25 * online)


def test_state_dict_round_trip_resumes_identically() -> None:
    rng = np.random.default_rng(1)
    config = DQNConfig(target_update_every=4)
    saved = DQNLearner(MLPSpec(4, 2, (32, 32)), config, seed=3)
    for _ in range(6):
        saved.update(random_batch(rng))
    buffer = io.BytesIO()
    torch.save(saved.state_dict(), buffer)
    buffer.seek(0)
    restored = DQNLearner(MLPSpec(4, 2, (32, 32)), config, seed=99)
    restored.load_state_dict(torch.load(buffer, weights_only=True))
    assert restored.num_updates == 6

    batch = random_batch(rng)
    a, b = saved.update(batch), restored.update(batch)  # update 7 ...
    c, d = saved.update(batch), restored.update(batch)  # ... and 8 crosses a target sync
    assert (a.loss, c.loss) == (b.loss, d.loss)
    np.testing.assert_array_equal(c.td_abs, d.td_abs)
    for name, w in saved.policy_weights().items():
        np.testing.assert_array_equal(w, restored.policy_weights()[name])
    assert params_equal(saved.target, restored.target)


def test_seed_makes_initial_weights_reproducible_and_distinct() -> None:
    spec = MLPSpec(4, 2, (8,))
    a, b, c = (DQNLearner(spec, DQNConfig(), seed=s).policy_weights() for s in (0, 0, 1))
    assert all(np.array_equal(a[k], b[k]) for k in a)
    assert not all(np.array_equal(a[k], c[k]) for k in a)


def test_policy_weights_are_fp32_copies_named_like_the_state_dict() -> None:
    learner = DQNLearner(MLPSpec(4, 2, (8, 8)), DQNConfig())
    weights = learner.policy_weights()
    assert list(weights) == list(MLPSpec(4, 2, (8, 8)).weight_shapes())
    for name, w in weights.items():
        assert w.dtype == np.float32 and w.flags.c_contiguous
        assert w.shape == MLPSpec(4, 2, (8, 8)).weight_shapes()[name]
    weights["layers.0.weight"][:] = 123.0
    assert not np.any(learner.policy_weights()["layers.0.weight"] == 123.0)


def test_learns_a_one_step_bandit() -> None:
    # One state, action 0 pays 1 and action 1 pays 0, episodes end at once: Q -> [1, 0].
    learner = DQNLearner(MLPSpec(2, 2, (16,)), DQNConfig(lr=1e-2), seed=0)
    size = 32
    rng = np.random.default_rng(0)
    obs = np.tile(np.array([[1.0, -1.0]], np.float32), (size, 1))
    for _ in range(150):
        action = rng.integers(0, 2, size)
        batch = {
            "obs": obs,
            "action": action,
            "reward": (action == 0).astype(np.float32),
            "next_obs": obs,
            "done": np.ones(size, bool),
        }
        learner.update(batch)
    np.testing.assert_allclose(learner.q_values(obs[:1])[0], [1.0, 0.0], atol=0.05)
    assert learner.greedy_actions(obs[:3]).tolist() == [0, 0, 0]
    assert learner.greedy_actions(obs[:3]).dtype == np.int64


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("lr", 0.0),
        ("adam_eps", -1.0),
        ("gamma", 1.5),
        ("batch_size", 0),
        ("target_update_every", 0),
        ("tau", 0.0),
        ("tau", 1.5),
        ("huber_delta", 0.0),
        ("max_grad_norm", -1.0),
        ("learning_starts", -1),
    ],
)
def test_config_rejects_out_of_range_values(field: str, value: object) -> None:
    with pytest.raises(ValueError, match=rf"DQNConfig\.{field} must be"):
        DQNConfig(**{field: value})


def test_default_config_is_valid() -> None:
    config = DQNConfig()
    assert config.learning_starts >= config.batch_size  # first batches are not all duplicates
