"""DDPG, TD3, SAC and D4PG: losses on tiny deterministic cases, the categorical projection
against hand-computed examples, policy weights, checkpoints and the factory."""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest
import torch

from actorq.algos import (
    ALGORITHMS,
    D4PGConfig,
    D4PGLearner,
    DDPGConfig,
    DDPGLearner,
    SACConfig,
    SACLearner,
    TD3Config,
    TD3Learner,
    load_algorithm_config,
    make_algorithm,
)
from actorq.algos.d4pg import categorical_projection
from actorq.algos.sac import squashed_gaussian_log_prob
from actorq.models.mlp import QNetwork
from actorq.quant import quantized_policy_from_weights

OBS, ACT, HIDDEN = 3, 2, (8,)


def batch(n: int = 4, seed: int = 0, done: bool = False) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "obs": rng.normal(size=(n, OBS)).astype(np.float32),
        "action": rng.uniform(-1, 1, size=(n, ACT)).astype(np.float32),
        "reward": rng.normal(size=n).astype(np.float32),
        "next_obs": rng.normal(size=(n, OBS)).astype(np.float32),
        "done": np.full(n, done),
    }


def tensors(b: dict[str, np.ndarray]) -> dict[str, torch.Tensor]:
    return {k: torch.as_tensor(v).float() for k, v in b.items()}


def test_ddpg_loss_is_the_mean_squared_td_error_by_hand() -> None:
    learner = DDPGLearner(OBS, ACT, HIDDEN, DDPGConfig(gamma=0.9))
    b = batch()
    t = tensors(b)
    with torch.no_grad():
        next_q = learner.critics_target[0](t["next_obs"], learner.actor_target(t["next_obs"]))
        target = t["reward"] + 0.9 * next_q
        q = learner.critics[0](t["obs"], t["action"])
        expected = float(((q - target) ** 2).mean())
        expected_td = (target - q).abs().numpy()
    result = learner.update(b)
    assert result.loss == pytest.approx(expected, rel=1e-5)
    np.testing.assert_allclose(result.td_abs, expected_td, rtol=1e-5)
    assert not math.isnan(result.actor_loss)


def test_done_transitions_do_not_bootstrap() -> None:
    learner = DDPGLearner(OBS, ACT, HIDDEN, DDPGConfig())
    t = tensors(batch(done=True))
    torch.testing.assert_close(learner.td_target(t), t["reward"])


def test_n_step_transitions_discount_by_gamma_to_the_steps() -> None:
    learner = DDPGLearner(OBS, ACT, HIDDEN, DDPGConfig(gamma=0.5))
    b = batch()
    one = learner.td_target(tensors(b))
    three = learner.td_target(tensors({**b, "steps": np.full(4, 3, np.uint8)}))
    r = torch.as_tensor(b["reward"])
    torch.testing.assert_close(three - r, (one - r) * 0.25)


def test_importance_weights_scale_the_loss() -> None:
    b = batch()
    plain = DDPGLearner(OBS, ACT, HIDDEN, DDPGConfig()).update(b).loss
    doubled = DDPGLearner(OBS, ACT, HIDDEN, DDPGConfig()).update(b, np.full(4, 2.0)).loss
    assert doubled == pytest.approx(2 * plain, rel=1e-5)


def test_td3_target_takes_the_smaller_critic_and_actor_waits() -> None:
    learner = TD3Learner(OBS, ACT, HIDDEN, TD3Config(policy_noise=0.0, policy_delay=2))
    t = tensors(batch())
    with torch.no_grad():
        a = learner.actor_target(t["next_obs"])
        q1, q2 = (c(t["next_obs"], a) for c in learner.critics_target)
    torch.testing.assert_close(learner.td_target(t), t["reward"] + 0.99 * torch.minimum(q1, q2))
    actor_before = {k: v.clone() for k, v in learner.actor.state_dict().items()}
    first = learner.update(batch())
    assert math.isnan(first.actor_loss)  # update 1 of 2: critic only
    assert all(torch.equal(actor_before[k], v) for k, v in learner.actor.state_dict().items())
    assert not math.isnan(learner.update(batch()).actor_loss)


def test_td3_target_smoothing_noise_is_clipped() -> None:
    learner = TD3Learner(OBS, ACT, HIDDEN, TD3Config(policy_noise=10.0, noise_clip=0.1))
    obs = torch.randn(256, OBS)
    with torch.no_grad():
        delta = learner._target_action(obs) - learner.actor_target(obs).clamp(-1, 1)
    assert delta.abs().max() <= 0.1 + 1e-6


def test_squashed_gaussian_log_prob_matches_change_of_variables() -> None:
    mean, log_std = torch.tensor([[0.3, -0.2]]), torch.tensor([[-0.5, 0.1]])
    u = torch.tensor([[0.7, -1.4]])
    normal = torch.distributions.Normal(mean, log_std.exp())
    expected = (normal.log_prob(u) - torch.log(1 - torch.tanh(u) ** 2)).sum(-1)
    torch.testing.assert_close(squashed_gaussian_log_prob(u, mean, log_std), expected)


def test_sac_loss_and_entropy_tuning() -> None:
    learner = SACLearner(OBS, ACT, HIDDEN, SACConfig(init_alpha=0.5))
    b = batch(n=64)
    t = tensors(b)
    alpha = torch.tensor(0.5)
    state = learner.rng.get_state()
    target = learner.td_target(t, alpha)
    learner.rng.set_state(state)  # the update draws the same next actions
    with torch.no_grad():
        qs = [c(t["obs"], t["action"]) for c in learner.critics]
        expected = float(sum((q - target) ** 2 for q in qs).mean())
    result = learner.update(b)
    assert result.loss == pytest.approx(expected, rel=1e-5)
    # A fresh policy's entropy is far above -act_dim, so alpha must shrink.
    assert learner.alpha < 0.5


def test_sac_without_autotune_keeps_alpha() -> None:
    learner = SACLearner(OBS, ACT, HIDDEN, SACConfig(init_alpha=0.3, autotune=False))
    learner.update(batch())
    assert learner.alpha == pytest.approx(0.3)


def test_sac_broadcast_policy_is_tanh_of_the_mean() -> None:
    learner = SACLearner(OBS, ACT, HIDDEN, SACConfig())
    weights = learner.policy_weights()
    assert learner.policy_spec.num_outputs == ACT
    assert {k: v.shape for k, v in weights.items()} == learner.policy_spec.weight_shapes()
    net = QNetwork(learner.policy_spec)
    net.load_state_dict({k: torch.from_numpy(v) for k, v in weights.items()})
    obs = np.random.default_rng(1).normal(size=(5, OBS)).astype(np.float32)
    np.testing.assert_allclose(
        net(torch.from_numpy(obs)).detach().numpy(), learner.actions(obs), atol=1e-6
    )


def test_categorical_projection_hand_computed() -> None:
    support = torch.tensor([0.0, 1.0, 2.0])
    # All mass on z=1, shifted by r=0.5 with discount 1: 1.5 splits evenly between 1 and 2.
    # Mass on z=2 shifts to 2.5 and is clipped to the top atom.
    probs = torch.tensor([[0.0, 1.0, 0.0], [0.0, 0.0, 1.0]])
    got = categorical_projection(probs, torch.tensor([0.5, 0.5]), torch.ones(2), support)
    torch.testing.assert_close(got, torch.tensor([[0.0, 0.5, 0.5], [0.0, 0.0, 1.0]]))
    # Discount 0.5, r=0: z -> [0, 0.5, 1]: 0.2 stays on 0; 0.5 splits 0.25/0.25 between 0
    # and 1; 0.3 lands exactly on 1.
    probs = torch.tensor([[0.2, 0.5, 0.3]])
    got = categorical_projection(probs, torch.zeros(1), torch.tensor([0.5]), support)
    torch.testing.assert_close(got, torch.tensor([[0.45, 0.55, 0.0]]))
    # A terminal transition (discount 0) puts everything on the atoms around r = 1.25.
    got = categorical_projection(probs, torch.tensor([1.25]), torch.zeros(1), support)
    torch.testing.assert_close(got, torch.tensor([[0.0, 0.75, 0.25]]))


def test_categorical_projection_keeps_total_probability() -> None:
    gen = torch.Generator().manual_seed(0)
    probs = torch.softmax(torch.randn(32, 11, generator=gen), dim=1)
    support = torch.linspace(-5, 5, 11)
    got = categorical_projection(probs, torch.randn(32, generator=gen) * 4, torch.rand(32), support)
    torch.testing.assert_close(got.sum(dim=1), torch.ones(32))
    assert (got >= 0).all()


def test_d4pg_loss_is_cross_entropy_to_the_projected_target() -> None:
    cfg = D4PGConfig(num_atoms=5, v_min=-2.0, v_max=2.0)
    learner = D4PGLearner(OBS, ACT, HIDDEN, cfg)
    b = batch()
    t = tensors(b)
    with torch.no_grad():
        target = learner.target_distribution(t)
        log_probs = torch.log_softmax(learner.critics[0](t["obs"], t["action"]), dim=1)
        expected = float(-(target * log_probs).sum(dim=1).mean())
    assert learner.update(b).loss == pytest.approx(expected, rel=1e-5)


@pytest.mark.parametrize("name", ["ddpg", "td3", "sac", "d4pg"])
def test_state_dict_round_trip_continues_identically(name: str) -> None:
    first = make_algorithm(name, OBS, ACT, HIDDEN, seed=3)
    for i in range(3):
        first.update(batch(seed=i))
    second = make_algorithm(name, OBS, ACT, HIDDEN, seed=99)
    # A deep copy, as a checkpoint on disk would be: Adam's load_state_dict keeps tensors
    # it can reuse, so the two learners would otherwise share their moment estimates.
    second.load_state_dict(copy.deepcopy(first.state_dict()))
    second.rng.set_state(first.rng.get_state())
    a, b = first.update(batch(seed=7)), second.update(batch(seed=7))
    assert a.loss == pytest.approx(b.loss, rel=1e-6)
    assert second.num_updates == first.num_updates == 4
    for k, v in first.policy_weights().items():
        np.testing.assert_allclose(second.policy_weights()[k], v, rtol=1e-6)


@pytest.mark.parametrize("name", ["ddpg", "td3", "sac", "d4pg"])
def test_int8_policy_follows_the_fp32_actor(name: str) -> None:
    learner = make_algorithm(name, OBS, ACT, (32, 32))
    policy = quantized_policy_from_weights(learner.policy_weights(), learner.policy_spec, "int8")
    obs = np.random.default_rng(0).normal(size=(16, OBS)).astype(np.float32)
    with torch.inference_mode():
        got = policy(torch.from_numpy(obs)).numpy()
    assert got.shape == (16, ACT) and np.abs(got).max() <= 1.0
    np.testing.assert_allclose(got, learner.actions(obs), atol=0.05)


def test_qat_actor_trains_through_fake_quantized_weights() -> None:
    learner = TD3Learner(OBS, ACT, HIDDEN, TD3Config(qat_bits=4, policy_delay=1))
    assert learner.actor.weight_bits == 4
    before = learner.actor.layers[0].weight.detach().clone()
    learner.update(batch())
    assert not torch.equal(before, learner.actor.layers[0].weight)  # gradients got through


def test_factory_and_configs() -> None:
    assert ALGORITHMS == ("dqn", "ddpg", "td3", "sac", "d4pg", "ppo", "appo", "a2c")
    cfg = load_algorithm_config("td3", {"ACTORQ_TD3_POLICY_DELAY": "3", "ACTORQ_DQN_LR": "x"})
    assert isinstance(cfg, TD3Config) and cfg.policy_delay == 3
    with pytest.raises(ValueError, match="unknown algorithm 'trpo'; expected one of dqn, ddpg"):
        make_algorithm("trpo", OBS, ACT, HIDDEN)
    with pytest.raises(TypeError, match="td3 needs a TD3Config, got DDPGConfig"):
        make_algorithm("td3", OBS, ACT, HIDDEN, DDPGConfig())
    with pytest.raises(ValueError, match=r"D4PGConfig.v_max must be > v_min=1.0, got 0.0"):
        D4PGConfig(v_min=1.0, v_max=0.0)
    with pytest.raises(ValueError, match=r"SACConfig.qat_bits must be 0 \(off\) or in \[2, 8\]"):
        SACConfig(qat_bits=1)
    dqn = make_algorithm("dqn", 4, 2, (8,))
    assert dqn.policy_spec.num_outputs == 2


def test_dqn_qat_forward_uses_the_codec_weights() -> None:
    from actorq.algos import DQNConfig
    from actorq.quant.lowbit import fake_quantize_array

    dqn = make_algorithm("dqn", 4, 2, (8,), DQNConfig(qat_bits=4))
    obs = torch.randn(5, 4)
    reference = QNetwork(dqn.policy_spec)
    reference.load_state_dict(
        {
            k: torch.from_numpy(fake_quantize_array(v, 4) if v.ndim == 2 else v)
            for k, v in dqn.policy_weights().items()
        }
    )
    with torch.no_grad():
        torch.testing.assert_close(dqn.online(obs), reference(obs), rtol=1e-5, atol=1e-6)


def test_settings_accept_exactly_the_factory_algorithms() -> None:
    from actorq import config

    assert config.ALGORITHMS == ALGORITHMS
