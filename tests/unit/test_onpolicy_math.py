"""GAE, V-trace and PPO's clipped ratio on tiny cases, against direct implementations."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from actorq.algos.ppo import OnPolicyLearner, PPOConfig, clipped_surrogate_loss
from actorq.algos.vtrace import gae, ratio_stats, vtrace


def col(*xs: float) -> torch.Tensor:
    """[T, 1] tensor (one env)."""
    return torch.tensor(xs, dtype=torch.float64).unsqueeze(1)


def test_gae_three_steps_by_hand() -> None:
    r, v, nv = col(1, 1, 1), col(0.5, 0.4, 0.3), col(0.4, 0.3, 0.2)
    zeros = col(0, 0, 0)
    adv, ret = gae(r, v, nv, zeros, zeros, gamma=0.9, lam=0.8)
    d = [1 + 0.9 * 0.4 - 0.5, 1 + 0.9 * 0.3 - 0.4, 1 + 0.9 * 0.2 - 0.3]  # 0.86, 0.87, 0.88
    k = 0.9 * 0.8
    expected = [d[0] + k * d[1] + k * k * d[2], d[1] + k * d[2], d[2]]
    assert adv.squeeze(1).tolist() == pytest.approx(expected)
    assert ret.squeeze(1).tolist() == pytest.approx(
        [e + x for e, x in zip(expected, [0.5, 0.4, 0.3], strict=True)]
    )


def test_gae_termination_and_truncation_cut_the_trace() -> None:
    r, v = col(1, 2, 3), col(0.5, 0.5, 0.5)
    nv = col(9.0, 7.0, 0.25)  # step 1 truncated: 7.0 is V(final obs)
    terminated, truncated = col(1, 0, 0), col(0, 1, 0)
    adv, _ = gae(r, v, nv, terminated, truncated, gamma=0.5, lam=1.0)
    d2 = 3 + 0.5 * 0.25 - 0.5
    d1 = 2 + 0.5 * 7.0 - 0.5  # bootstrapped from the final obs, no trace from step 2
    d0 = 1 - 0.5  # terminated: no bootstrap (9.0 ignored)
    assert adv.squeeze(1).tolist() == pytest.approx([d0, d1, d2])


def _vtrace_direct(log_rhos, r, v, nv, gamma, rho_bar, c_bar):
    """IMPALA eq. (1) summed term by term (no episode ends): one env, numpy."""
    T = len(r)
    rhos = np.minimum(rho_bar, np.exp(log_rhos))
    cs = np.minimum(c_bar, np.exp(log_rhos))
    vs = []
    for s in range(T):
        total = v[s]
        for t in range(s, T):
            prod_c = np.prod(cs[s:t]) if t > s else 1.0
            delta = rhos[t] * (r[t] + gamma * nv[t] - v[t])
            total += gamma ** (t - s) * prod_c * delta
        vs.append(total)
    return np.array(vs)


def test_vtrace_targets_match_the_direct_formula() -> None:
    rng = np.random.default_rng(3)
    T = 6
    log_rhos = rng.normal(0, 0.7, T)
    r, v = rng.normal(size=T), rng.normal(size=T)
    nv = np.append(v[1:], 0.37)  # V(x_{t+1}); last = bootstrap
    expected = _vtrace_direct(log_rhos, r, v, nv, 0.9, rho_bar=1.0, c_bar=0.8)
    zeros = torch.zeros(T, 1, dtype=torch.float64)
    out = vtrace(
        torch.tensor(log_rhos).unsqueeze(1), torch.tensor(r).unsqueeze(1),
        torch.tensor(v).unsqueeze(1), torch.tensor(nv).unsqueeze(1), zeros, zeros,
        gamma=0.9, rho_bar=1.0, c_bar=0.8,
    )  # fmt: skip
    assert out.vs.squeeze(1).numpy() == pytest.approx(expected)
    # Policy-gradient advantage: rho_s (r_s + gamma v_{s+1} - V(x_s)), v_T = bootstrap.
    vs_next = np.append(expected[1:], 0.37)
    rhos = np.minimum(1.0, np.exp(log_rhos))
    assert out.pg_advantages.squeeze(1).numpy() == pytest.approx(rhos * (r + 0.9 * vs_next - v))


def test_vtrace_two_steps_by_hand() -> None:
    # rho_0 = 2 -> truncated to 1; c_0 = min(1, 2) = 1; rho_1 = 0.5.
    log_rhos = col(math.log(2.0), math.log(0.5))
    zeros = col(0, 0)
    out = vtrace(log_rhos, col(1, 1), col(0, 0), col(0, 2), zeros, zeros, gamma=1.0)
    v1 = 0 + 0.5 * (1 + 2 - 0)  # 1.5
    v0 = 0 + 1.0 * (1 + 0 - 0) + 1.0 * 1.0 * 0.5 * (1 + 2 - 0)  # 2.5
    assert out.vs.squeeze(1).tolist() == pytest.approx([v0, v1])


def test_vtrace_on_policy_is_the_n_step_return() -> None:
    zeros = col(0, 0, 0)
    r, v, nv = col(1, 2, 3), col(0.1, 0.2, 0.3), col(0.2, 0.3, 10.0)
    out = vtrace(col(0, 0, 0), r, v, nv, zeros, zeros, gamma=0.5)
    expected = [1 + 0.5 * 2 + 0.25 * 3 + 0.125 * 10, 2 + 0.5 * 3 + 0.25 * 10, 3 + 0.5 * 10]
    assert out.vs.squeeze(1).tolist() == pytest.approx(expected)


def test_vtrace_terminated_step_does_not_bootstrap_or_trace() -> None:
    r, v, nv = col(1, 1), col(0, 0), col(5, 5)
    out = vtrace(col(0, 0), r, v, nv, col(1, 0), col(0, 0), gamma=1.0)
    assert out.vs.squeeze(1).tolist() == pytest.approx([1.0, 6.0])


def test_clipped_surrogate_by_hand() -> None:
    ratio = torch.tensor([1.5, 0.5, 0.5, 1.1])
    adv = torch.tensor([1.0, 1.0, -1.0, 2.0])
    loss = clipped_surrogate_loss(ratio, adv, 0.2)
    # 1.5*1 clipped to 1.2; 0.5*1 (min of 0.5, 0.8); 0.5*-1 -> min(-0.5, -0.8); 1.1*2 inside.
    assert loss.tolist() == pytest.approx([-1.2, -0.5, 0.8, -2.2])


def _batch(learner: OnPolicyLearner, T: int = 5, B: int = 3, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    obs = rng.normal(size=(T, B, 4)).astype(np.float32)
    action = rng.integers(0, 2, size=(T, B))
    with torch.no_grad():
        logp = learner.log_probs(torch.from_numpy(obs), torch.from_numpy(action)).numpy()
    return {
        "obs": obs,
        "action": action,
        "reward": np.ones((T, B), np.float32),
        "terminated": np.zeros((T, B), np.uint8),
        "truncated": np.zeros((T, B), np.uint8),
        "behaviour_logp": logp,
        "last_obs": rng.normal(size=(B, 4)).astype(np.float32),
    }


@pytest.mark.parametrize("loss", ["ppo", "vtrace"])
def test_importance_weights_are_one_when_behaviour_is_the_learner(loss: str) -> None:
    learner = OnPolicyLearner(4, 2, (16,), PPOConfig(loss=loss), seed=1)
    result = learner.update(_batch(learner))
    r = result.ratios
    assert r.mean == pytest.approx(1.0, abs=1e-6)
    assert r.max == pytest.approx(1.0, abs=1e-6)
    assert r.mean_abs_deviation == pytest.approx(0.0, abs=1e-6)
    assert r.ess == pytest.approx(1.0, abs=1e-9)
    assert r.clipped_fraction == 0.0


def test_ratio_stats_report_a_shifted_behaviour_policy() -> None:
    learner = OnPolicyLearner(4, 2, (16,), PPOConfig(clip=0.2), seed=1)
    batch = _batch(learner)
    batch["behaviour_logp"] = batch["behaviour_logp"] - np.log(1.5)  # ratio 1.5 everywhere
    r = learner.update(batch).ratios
    assert r.mean == pytest.approx(1.5, rel=1e-5)
    assert r.clipped_fraction == 1.0  # |1.5 - 1| > 0.2
    assert r.ess == pytest.approx(1.0)  # constant weights lose no samples


def test_ess_of_unequal_weights() -> None:
    stats = ratio_stats(torch.log(torch.tensor([1.0, 3.0])), torch.zeros(2, dtype=torch.bool))
    assert stats.ess == pytest.approx(16 / (2 * 10))  # (1+3)^2 / (2 (1+9))
    assert stats.max == pytest.approx(3.0)


def test_a2c_and_appo_updates_change_the_policy() -> None:
    from actorq.algos.ppo import A2CConfig, APPOConfig

    for config in (A2CConfig(), APPOConfig()):
        learner = OnPolicyLearner(4, 2, (16,), config, seed=2)
        before = learner.policy_weights()
        result = learner.update(_batch(learner))
        after = learner.policy_weights()
        assert np.isfinite(result.loss)
        assert any(not np.array_equal(before[k], after[k]) for k in before)


def test_bad_batch_names_the_missing_key() -> None:
    learner = OnPolicyLearner(4, 2, (16,), PPOConfig(), seed=0)
    batch = _batch(learner)
    del batch["behaviour_logp"]
    with pytest.raises(KeyError, match="behaviour_logp"):
        learner.update(batch)


def test_bad_config_names_field() -> None:
    with pytest.raises(ValueError, match="clip"):
        PPOConfig(clip=-0.1)
    with pytest.raises(ValueError, match="loss"):
        PPOConfig(loss="trpo")


def test_cnn_learner_updates_on_uint8_pixel_batches() -> None:
    from actorq.algos.factory import make_algorithm, policy_spec
    from actorq.models.cnn import CNNSpec

    spec = policy_spec("minatar:breakout", "ppo", (64, 64))
    assert isinstance(spec, CNNSpec) and spec.obs_shape == (4, 10, 10)
    learner = make_algorithm("ppo", spec.obs_dim, spec.num_outputs, (64,), spec=spec)
    rng = np.random.default_rng(0)
    T, B = 4, 2
    obs = rng.integers(0, 2, (T, B, 4, 10, 10)).astype(np.uint8)
    action = rng.integers(0, spec.num_outputs, (T, B))
    with torch.no_grad():
        logp = learner.log_probs(torch.from_numpy(obs), torch.from_numpy(action)).numpy()
    batch = {
        "obs": obs,
        "action": action,
        "reward": np.ones((T, B), np.float32),
        "terminated": np.zeros((T, B), np.uint8),
        "truncated": np.zeros((T, B), np.uint8),
        "behaviour_logp": logp,
        "last_obs": obs[-1],
    }
    result = learner.update(batch)
    assert result.ratios.mean == pytest.approx(1.0, abs=1e-6)
    weights = learner.policy_weights()
    assert weights["act_max"][0] == 1.0 and weights["act_max"][1] > 0  # ranges observed
    assert set(weights) == set(spec.weight_shapes())


def test_pixel_envs_refuse_algorithms_without_a_cnn_clearly() -> None:
    from actorq.algos.factory import policy_spec
    from actorq.envs import EnvError

    for algo in ("td3", "sac"):
        with pytest.raises(EnvError, match=f"pixel observations.*; {algo} has no CNN policy"):
            policy_spec("minatar:breakout", algo, (64,))
