"""Behaviour fields in replay, the behaviour-vs-learner gap and n-step importance weights."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from actorq.actor.nstep import NStepAccumulator
from actorq.algos.ddpg import DDPGConfig
from actorq.algos.sac import SACConfig
from actorq.config import ConfigError, LearnerSettings
from actorq.exploration import (
    clipped_gaussian_logp,
    epsilon_from_logp,
    epsilon_greedy_logp,
    uniform_logp,
)
from actorq.learner.behaviour import (
    BehaviourMonitor,
    NStepCorrection,
    continuous_gap,
    discrete_gap,
    nstep_correction,
)
from actorq.replay import ReplayStorage
from actorq.replay.batch import ReplayDecodeError, TransitionBatch, decode_batch, encode_batch

SIGMA = 0.2


def continuous_batch(n: int = 5, act_dim: int = 2, logp: bool = True, seed: int = 0):
    rng = np.random.default_rng(seed)
    mean = rng.uniform(-0.8, 0.8, (n, act_dim)).astype(np.float32)
    action = np.clip(mean + SIGMA * rng.standard_normal((n, act_dim)), -1, 1).astype(np.float32)
    return TransitionBatch(
        obs=rng.standard_normal((n, 3)).astype(np.float32),
        action=action,
        reward=rng.standard_normal(n).astype(np.float32),
        next_obs=rng.standard_normal((n, 3)).astype(np.float32),
        done=np.zeros(n, bool),
        actor_id="actor-0",
        policy_version=3,
        precision="int8",
        behaviour=mean,
        behaviour_logp=clipped_gaussian_logp(action, mean, SIGMA) if logp else None,
    )


def discrete_batch(n: int = 6, eps: float = 0.3) -> TransitionBatch:
    rng = np.random.default_rng(1)
    greedy = rng.integers(0, 3, n)
    action = np.where(rng.random(n) < 0.5, greedy, (greedy + 1) % 3).astype(np.int64)
    return TransitionBatch(
        obs=rng.standard_normal((n, 4)).astype(np.float32),
        action=action,
        reward=np.ones(n, np.float32),
        next_obs=rng.standard_normal((n, 4)).astype(np.float32),
        done=np.zeros(n, bool),
        actor_id="actor-1",
        policy_version=1,
        behaviour=greedy.astype(np.int64),
        behaviour_logp=epsilon_greedy_logp(action, greedy, eps, 3),
    )


# --- replay format and storage -----------------------------------------------------------
@pytest.mark.parametrize("make", [continuous_batch, discrete_batch])
def test_behaviour_fields_round_trip_through_the_stream_format(make) -> None:
    batch = make()
    back = decode_batch({k.encode(): v for k, v in encode_batch(batch).items()})
    np.testing.assert_array_equal(back.behaviour, batch.behaviour)
    np.testing.assert_array_equal(back.behaviour_logp, batch.behaviour_logp)
    assert back.behaviour.dtype == batch.action.dtype


def test_entries_without_behaviour_fields_decode_as_before() -> None:
    fields = encode_batch(continuous_batch())
    old = {k: v for k, v in fields.items() if not k.startswith("behaviour")}
    batch = decode_batch(old)
    assert batch.behaviour is None and batch.behaviour_logp is None
    no_logp = decode_batch({k: v for k, v in fields.items() if k != "behaviour_logp"})
    assert no_logp.behaviour is not None and no_logp.behaviour_logp is None


def test_malformed_behaviour_fields_are_refused() -> None:
    fields = encode_batch(discrete_batch())
    with pytest.raises(ReplayDecodeError) as err:
        decode_batch({**fields, "behaviour": fields["behaviour"][:-1]})
    assert err.value.reason == "bad_length"
    nan = np.full(6, np.nan, np.float32).tobytes()
    with pytest.raises(ReplayDecodeError) as err:
        decode_batch({**fields, "behaviour_logp": nan})
    assert err.value.reason == "invalid_batch"
    with pytest.raises(ValueError, match="needs behaviour"):
        TransitionBatch(**{**vars(discrete_batch()), "behaviour": None})


def test_storage_keeps_behaviour_and_marks_old_rows() -> None:
    storage = ReplayStorage(10, 3, 2)
    new = continuous_batch(4)
    old = continuous_batch(3, seed=1)
    old.behaviour = old.behaviour_logp = None
    storage.add(new)
    storage.add(old)
    rows = storage.get(np.arange(7))
    np.testing.assert_array_equal(rows["has_behaviour"], [True] * 4 + [False] * 3)
    np.testing.assert_array_equal(rows["behaviour"][:4], new.behaviour)
    np.testing.assert_array_equal(rows["behaviour_logp"][:4], new.behaviour_logp)
    assert np.isnan(rows["behaviour_logp"][4:]).all()


def test_nstep_accumulator_keeps_the_first_steps_behaviour() -> None:
    acc = NStepAccumulator(1, n=3, gamma=0.5)
    out = None
    for t in range(3):
        obs = np.array([[float(t)]], np.float32)
        extras = (np.array([[t / 10]], np.float32), np.array([-float(t)], np.float32))
        args = (obs, np.array([[0.0]], np.float32), np.ones(1), obs + 1, np.zeros(1, bool))
        out = acc.add(*args, np.zeros(1, bool), np.ones(1, bool), extras)
    assert out is not None and len(out) == 8
    np.testing.assert_array_equal(out[6], [[0.0]])  # behaviour of step 0, not of step 2
    np.testing.assert_array_equal(out[7], [0.0])


# --- behaviour log-probabilities ---------------------------------------------------------
def test_epsilon_greedy_logp_is_a_distribution_and_gives_back_epsilon() -> None:
    greedy = np.array([2, 2, 2, 2])
    actions = np.arange(4)
    logp = epsilon_greedy_logp(actions, greedy, 0.2, 4)
    assert math.isclose(np.exp(logp.astype(np.float64)).sum(), 1.0, rel_tol=1e-6)
    np.testing.assert_allclose(epsilon_from_logp(logp, actions == greedy, 4), 0.2, rtol=1e-5)


def test_clipped_gaussian_logp_is_density_inside_and_tail_mass_at_the_bounds() -> None:
    mean = np.array([[0.3, 0.9, -0.7]])
    action = np.array([[0.1, 1.0, -1.0]])
    want = (
        stats.norm.logpdf(0.1, 0.3, SIGMA)
        + stats.norm.logsf(1.0, 0.9, SIGMA)
        + stats.norm.logcdf(-1.0, -0.7, SIGMA)
    )
    np.testing.assert_allclose(clipped_gaussian_logp(action, mean, SIGMA), [want], rtol=1e-5)
    np.testing.assert_allclose(uniform_logp(2, 3), -3 * math.log(2))


# --- the gap -----------------------------------------------------------------------------
def storage_rows(batch: TransitionBatch) -> dict[str, np.ndarray]:
    storage = ReplayStorage(len(batch), batch.obs_dim, batch.act_dim)
    storage.add(batch)
    return storage.get(np.arange(len(batch)))


@pytest.mark.parametrize("delta", [0.0, 0.05, 0.2])
def test_continuous_gap_is_zero_on_policy_and_grows_with_a_known_shift(delta: float) -> None:
    rows = storage_rows(continuous_batch(200, act_dim=2))
    learner_mean = rows["behaviour"] + delta
    gap = continuous_gap(rows, learner_mean, SIGMA)
    assert gap.gap == pytest.approx(delta / 2, abs=1e-6)  # half: the range [-1, 1] is 2
    if delta == 0.0:
        assert gap.log_ratio_abs_mean == pytest.approx(0.0, abs=1e-5)
        assert gap.rho_mean == pytest.approx(1.0, abs=1e-5)
    else:
        assert gap.log_ratio_abs_mean > 0 and gap.rho_mean < 1.0


def test_discrete_gap_counts_flipped_greedy_actions() -> None:
    rows = storage_rows(discrete_batch(6))
    same = discrete_gap(rows, rows["behaviour"].copy(), 3)
    assert same.gap == 0.0 and same.log_ratio_abs_mean == pytest.approx(0.0, abs=1e-6)
    flipped = rows["behaviour"].copy()
    flipped[:2] = (flipped[:2] + 1) % 3
    moved = discrete_gap(rows, flipped, 3)
    assert moved.gap == pytest.approx(2 / 6) and moved.log_ratio_abs_mean > 0


class ShiftedPolicy:
    """A learner policy: the recorded behaviour mean of each obs plus `shift`."""

    policy_spec = None

    def __init__(self, table: dict[bytes, np.ndarray], shift: float = 0.0) -> None:
        self.table, self.shift = table, shift

    def actions(self, obs: np.ndarray) -> np.ndarray:
        return np.stack([self.table[o.tobytes()] for o in obs]) + np.float32(self.shift)


def test_monitor_counts_rows_without_behaviour_as_unmeasured() -> None:
    old = continuous_batch(4)
    old.behaviour = old.behaviour_logp = None
    monitor = BehaviourMonitor(ShiftedPolicy({}), True, SIGMA, every=1)
    assert monitor.maybe_measure(storage_rows(old)) is None
    status = monitor.status()
    assert status["behaviour_rows_unmeasured"] == 4 and status["behaviour_rows_measured"] == 0
    assert "behaviour_gap" not in status  # not measured: not reported as zero


def test_the_monitor_measures_every_nth_batch_at_most_once_per_floor() -> None:
    now = [0.0]
    monitor = BehaviourMonitor(ShiftedPolicy({}), True, SIGMA, every=2, min_seconds=1.0,
                               clock=lambda: now[0])  # fmt: skip
    assert [monitor.due() for _ in range(3)] == [True, False, False]  # the floor holds the 3rd
    now[0] = 1.0
    assert [monitor.due() for _ in range(3)] == [True, False, False]  # 2 batches on, and 1 s
    now[0] = 5.0
    assert monitor.due() is True  # the count since the last measurement, not multiples
    assert monitor.due(3) is False  # k device-sampled batches count as k, floor or not
    now[0] = 9.0
    assert monitor.due(2) is True


def test_without_a_floor_the_monitor_measures_batches_1_then_every_nth() -> None:
    monitor = BehaviourMonitor(ShiftedPolicy({}), True, SIGMA, every=3)
    assert [i for i in range(1, 11) if monitor.due()] == [1, 4, 7, 10]
    never = BehaviourMonitor(ShiftedPolicy({}), True, SIGMA, every=0)
    assert not any(never.due() for _ in range(5))


# --- n-step importance weights -----------------------------------------------------------
def episode_storage(means: list[float], actions: list[float]) -> ReplayStorage:
    """One episode of 1-d obs t -> t + 1, action and behaviour mean per step, linked."""
    storage = ReplayStorage(20, 1, 1, link_trajectories=True)
    for t, (m, a) in enumerate(zip(means, actions, strict=True)):
        mean, act = np.array([[m]], np.float32), np.array([[a]], np.float32)
        storage.add(
            TransitionBatch(
                obs=np.array([[t]], np.float32),
                action=act,
                reward=np.array([1.0], np.float32),
                next_obs=np.array([[t + 1]], np.float32),
                done=np.zeros(1, bool),
                actor_id="a",
                policy_version=0,
                behaviour=mean,
                behaviour_logp=clipped_gaussian_logp(act, mean, SIGMA),
            )
        )
    return storage


def means_by_obs(means: list[float]) -> dict[bytes, np.ndarray]:
    return {np.float32([t]).tobytes(): np.float32([m]) for t, m in enumerate(means)}


MEANS, ACTIONS = [0.1, -0.2, 0.4, 0.0], [0.15, -0.1, 0.3, 0.2]


def test_weights_are_one_when_the_learner_acts_as_the_behaviour() -> None:
    rows = episode_storage(MEANS, ACTIONS).get_nstep(np.arange(4), 3, 0.5, trace=True)
    weights = NStepCorrection(ShiftedPolicy(means_by_obs(MEANS)), SIGMA, 1.0).weights(rows)
    np.testing.assert_allclose(weights, 1.0, rtol=1e-6)
    assert "trace_obs" not in rows  # taken out: the algorithm sees a plain batch


def hand_ratio(step: int, shift: float) -> float:
    a, m = ACTIONS[step], MEANS[step]
    return math.exp(((a - m) ** 2 - (a - m - shift) ** 2) / (2 * SIGMA**2))


def test_weights_are_hand_checked_products_truncated_at_rho_bar() -> None:
    shift = 0.1  # the learner's mean is 0.1 above the behaviour's at every state
    rows = episode_storage(MEANS, ACTIONS).get_nstep(np.arange(4), 3, 0.5, trace=True)
    np.testing.assert_array_equal(rows["steps"], [3, 3, 2, 1])  # stored data ends at step 3
    np.testing.assert_allclose(rows["reward"], [1.75, 1.75, 1.5, 1.0])  # return unchanged
    policy = ShiftedPolicy(means_by_obs(MEANS), shift)
    ratios = [hand_ratio(k, shift) for k in range(4)]  # 1.30, 2.12, 0.29, 6.05
    for rho_bar in (1.0, 2.0):
        rows = episode_storage(MEANS, ACTIONS).get_nstep(np.arange(4), 3, 0.5, trace=True)
        weights = NStepCorrection(policy, SIGMA, rho_bar).weights(rows)
        c = [min(rho_bar, r) for r in ratios]
        # row t weighs the ratios of its intermediate steps t+1 .. t+steps-1, never its own
        want = [c[1] * c[2], c[2] * c[3], c[3], 1.0]
        np.testing.assert_allclose(weights, want, rtol=1e-5)


def test_correction_is_refused_where_it_is_not_valid() -> None:
    on = DDPGConfig(is_correction=True)
    assert nstep_correction("td3", on, object(), 3, 0.1) is not None
    assert nstep_correction("td3", DDPGConfig(), object(), 3, 0.1) is None
    with pytest.raises(ConfigError, match="one-step targets need no correction"):
        nstep_correction("td3", on, object(), 1, 0.1)
    with pytest.raises(ConfigError, match="folds n steps"):
        nstep_correction("d4pg", on, object(), 3, 0.1)
    with pytest.raises(ConfigError, match="NOISE_SIGMA"):
        nstep_correction("ddpg", on, object(), 3, 0.0)
    assert nstep_correction("sac", SACConfig(), object(), 3, 0.1) is None  # no such setting


# --- DQN: n-step windows cut at exploratory actions ----------------------------------------
def discrete_steps(acc: NStepAccumulator, greedy: list[bool]) -> list[tuple]:
    """One env, rewards 1, 2, 4, ...; returns (obs, reward, next_obs, steps) emitted."""
    out = []
    for t, g in enumerate(greedy):
        obs = np.array([[float(t)]], np.float32)
        args = (obs, np.array([0]), np.array([2.0**t]), obs + 1, np.zeros(1, bool))
        done = acc.add(*args, np.zeros(1, bool), np.ones(1, bool), greedy=np.array([g]))
        if done is not None:
            rows = zip(done[0], done[2], done[3], done[5], strict=True)
            out += [(o[0], r, n[0], s) for o, r, n, s in rows]
    return out


def test_cut_ends_waiting_windows_before_an_exploratory_action() -> None:
    # steps 0, 1 greedy, step 2 exploratory, then greedy: the windows of steps 0 and 1 stop
    # at s_2 (bootstrapping there), and step 2's own window still runs its full 3 steps
    acc = NStepAccumulator(1, n=3, gamma=0.5, cut=True)
    out = discrete_steps(acc, [True, True, False, True, True])
    assert [(o, s) for o, _, _, s in out] == [(0.0, 2), (1.0, 1), (2.0, 3)]
    np.testing.assert_allclose([r for _, r, _, _ in out], [1 + 0.5 * 2, 2, 4 + 0.5 * 8 + 0.25 * 16])
    assert [n for _, _, n, _ in out] == [2.0, 2.0, 5.0] and acc.cuts == 1
    uncut = discrete_steps(NStepAccumulator(1, n=3, gamma=0.5), [True, True, False, True, True])
    assert [s for *_, s in uncut] == [3, 3, 3]  # without the cut: full windows over it


def test_dqn_correction_needs_n_step() -> None:
    from actorq.algos.dqn import DQNConfig

    assert nstep_correction("dqn", DQNConfig(n_step=3, is_correction=True), None, 1, 0.1) is None
    with pytest.raises(ConfigError, match="ACTORQ_DQN_N_STEP > 1"):
        nstep_correction("dqn", DQNConfig(is_correction=True), None, 1, 0.1)


@pytest.mark.parametrize("bad", [-0.5, float("nan")])
def test_a_negative_or_nan_gap_floor_is_refused_naming_it(bad: float) -> None:
    with pytest.raises(ConfigError, match=r"gap_min_seconds: expected a number of seconds >= 0"):
        LearnerSettings(gap_min_seconds=bad)
