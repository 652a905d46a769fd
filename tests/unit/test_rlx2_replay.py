"""RLx2's replay parts on hand-made data: trajectory links and the delayed n-step target,
the dynamic-capacity rule, and their checkpoint state."""

from __future__ import annotations

import numpy as np
import pytest

from actorq.replay import ReplayStorage, UniformSampler
from actorq.replay.batch import TransitionBatch
from actorq.replay.dynamic_capacity import DynamicCapacity

GAMMA = 0.5


def transitions(
    rows: list[tuple[float, float, float, bool]], actor: str = "a", steps=None
) -> TransitionBatch:
    """Rows of (obs, reward, next_obs, done) with 1-d observations and action = obs / 100."""
    obs = np.array([[r[0]] for r in rows], np.float32)
    return TransitionBatch(
        obs=obs,
        action=obs / 100,
        reward=np.array([r[1] for r in rows], np.float32),
        next_obs=np.array([[r[2]] for r in rows], np.float32),
        done=np.array([r[3] for r in rows], bool),
        actor_id=actor,
        policy_version=0,
        steps=None if steps is None else np.asarray(steps, np.uint8),
    )


def interleaved_episodes() -> ReplayStorage:
    """Two envs of one actor, stepped together, the way a vector env sends them:
    env A: 1 -> 2 -> 3 -> 4 (terminates), env B: 10 -> 11 -> 12 -> 13 (goes on)."""
    storage = ReplayStorage(100, 1, 1, link_trajectories=True)
    storage.add(transitions([(1, 1, 2, False), (10, 10, 11, False)]))
    storage.add(transitions([(2, 2, 3, False), (11, 11, 12, False)]))
    storage.add(transitions([(3, 3, 4, True), (12, 12, 13, False)]))
    return storage


def test_nstep_follows_each_episode_through_interleaved_rows() -> None:
    storage = interleaved_episodes()
    rows = storage.get_nstep(np.arange(6), 3, GAMMA)
    # slot: 0=A1 1=B10 2=A2 3=B11 4=A3 5=B12
    np.testing.assert_allclose(
        rows["reward"], [1 + 0.5 * 2 + 0.25 * 3, 10 + 5.5 + 3, 2 + 1.5, 11 + 6, 3, 12]
    )
    np.testing.assert_array_equal(rows["next_obs"][:, 0], [4, 13, 4, 13, 4, 13])
    np.testing.assert_array_equal(rows["done"], [True, False, True, False, True, False])
    np.testing.assert_array_equal(rows["steps"], [3, 3, 2, 2, 1, 1])
    np.testing.assert_array_equal(rows["obs"][:, 0], [1, 10, 2, 11, 3, 12])  # first step's


def test_one_step_gather_is_unchanged() -> None:
    storage = interleaved_episodes()
    one = storage.get_nstep(np.arange(6), 1, GAMMA)
    plain = storage.get(np.arange(6))
    for key in plain:
        np.testing.assert_array_equal(one[key], plain[key])


def test_no_link_across_actors_truncations_or_nstep_rows() -> None:
    storage = ReplayStorage(100, 1, 1, link_trajectories=True)
    storage.add(transitions([(1, 1, 2, False)], actor="a"))
    storage.add(transitions([(2, 2, 3, False)], actor="b"))  # same obs, other actor
    storage.add(transitions([(5, 5, 6, False)], actor="a", steps=[3]))  # already n-step
    storage.add(transitions([(6, 6, 7, False)], actor="a"))
    storage.add(transitions([(7, 7, 99, False)], actor="a"))  # truncated: reset obs next
    storage.add(transitions([(50, 50, 51, False)], actor="a"))
    rows = storage.get_nstep(np.arange(6), 3, GAMMA)
    np.testing.assert_array_equal(rows["steps"], [1, 1, 3, 2, 1, 1])
    np.testing.assert_allclose(rows["reward"][3], 6 + 0.5 * 7)


def test_links_to_overwritten_or_dropped_rows_are_not_followed() -> None:
    storage = ReplayStorage(4, 1, 1, link_trajectories=True)
    for t in range(6):  # one env, one episode; rows 0 and 1 overwritten by rows 4 and 5
        storage.add(transitions([(t, t, t + 1, False)]))
    rows = storage.get_nstep(np.array([2, 3, 0, 1]), 3, GAMMA)  # slots of steps 2, 3, 4, 5
    np.testing.assert_array_equal(rows["steps"], [3, 3, 2, 1])
    storage.drop_oldest(1)  # step 2 gone: nothing may lead into it, step 3 still leads on
    assert len(storage) == 3
    rows = storage.get_nstep(np.array([3]), 3, GAMMA)
    np.testing.assert_array_equal(rows["steps"], [3])


def test_uniform_sampler_never_draws_dropped_rows() -> None:
    storage = ReplayStorage(1000, 1, 1)
    storage.add(transitions([(t, 0, t + 1, False) for t in range(600)]))
    assert storage.drop_oldest(400) == 400 and len(storage) == 200
    sample = UniformSampler().sample(storage, 5000, np.random.default_rng(0))
    seen = storage.get(sample.indices)["obs"][:, 0]
    assert seen.min() >= 400 and seen.max() == 599
    storage.add(transitions([(t, 0, t + 1, False) for t in range(600, 1100)]))  # wraps
    assert len(storage) == 700  # refills after a drop, up to the capacity
    seen = storage.get(UniformSampler().sample(storage, 5000, np.random.default_rng(1)).indices)
    assert seen["obs"][:, 0].min() >= 400


# --- dynamic capacity --------------------------------------------------------------------------
def filled(rows: int, stored_action: float) -> ReplayStorage:
    storage = ReplayStorage(10_000, 1, 1)
    batch = transitions([(t, 0, t + 1, False) for t in range(rows)])
    batch.action[:] = stored_action
    storage.add(batch)
    return storage


def zero_policy(obs: np.ndarray) -> np.ndarray:
    return np.zeros((len(obs), 1), np.float32)


def rule(**overrides) -> DynamicCapacity:
    args = dict(
        threshold=0.2,
        check_every=1000,
        min_rows=1000,
        drop_fraction=0.1,
        probe_rows=64,
        noise_baseline=False,
    )
    args.update(overrides)
    return DynamicCapacity(**args)


def test_drops_oldest_tenth_when_old_data_is_far_from_the_policy() -> None:
    storage = filled(5000, 0.9)  # distance 0.5 * 0.81 = 0.405 > 0.2
    capacity = rule()
    assert capacity.maybe_adjust(storage, zero_policy) == 500
    assert capacity.last_distance == pytest.approx(0.405)
    assert len(storage) == 4500
    assert storage.get(storage.age_slots(np.array([0])))["obs"][0, 0] == 500  # oldest gone
    assert capacity.maybe_adjust(storage, zero_policy) == 0  # not due: no new insert


def test_keeps_data_close_to_the_policy_and_the_minimum() -> None:
    assert rule().maybe_adjust(filled(5000, 0.6), zero_policy) == 0  # 0.18 <= 0.2
    storage = filled(1050, 0.9)
    assert rule().maybe_adjust(storage, zero_policy) == 50  # stops at min_rows
    assert len(storage) == 1000


def test_noise_baseline_ignores_a_distance_shared_by_the_newest_data() -> None:
    storage = filled(5000, 0.9)  # old and new alike far: exploration noise, not drift
    assert rule(noise_baseline=True).maybe_adjust(storage, zero_policy) == 0
    batch = transitions([(t, 0, t + 1, False) for t in range(5000, 6000)])
    batch.action[:] = 0.0  # the newest data agrees with the policy: the old has drifted
    storage.add(batch)
    assert rule(noise_baseline=True).maybe_adjust(storage, zero_policy) == 600


def test_capacity_state_survives_a_rebuilt_mirror() -> None:
    storage = filled(5000, 0.9)
    capacity = rule()
    capacity.maybe_adjust(storage, zero_policy)
    state = capacity.state_dict(storage)
    rebuilt = filled(5000, 0.9)  # a restart rebuilds the mirror from the Redis stream
    restored = rule()
    restored.load_state_dict(state, rebuilt)
    assert len(rebuilt) == len(storage) == 4500
    assert restored.dropped_total == 500 and restored.last_distance == capacity.last_distance
    assert restored.next_check - rebuilt.total_added == capacity.next_check - storage.total_added


# --- the delayed n-step switch in the learner --------------------------------------------------
def test_nstep_target_switches_on_after_the_delay(one_torch_thread: None) -> None:

    from actorq.algos import TD3Config, make_algorithm
    from actorq.config import LearnerSettings
    from actorq.learner.rlx2 import RLx2Learning
    from actorq.sparse import SparseTrainingConfig

    storage = ReplayStorage(1000, 1, 1, link_trajectories=True)
    for t in range(40):  # one long episode
        storage.add(transitions([(t, 1.0, t + 1, False)]))
    algo = make_algorithm("td3", 1, 1, (8,), TD3Config(batch_size=8, learning_starts=0))
    config = SparseTrainingConfig(delayed_nstep=3, delayed_nstep_after=2)
    rlx2 = RLx2Learning(config, algo, LearnerSettings(algo="td3", replay_capacity=1000), storage)
    early = np.arange(8, dtype=np.int64)  # rows 0..7: two more steps always follow
    steps_seen = []
    for _ in range(4):
        batch = rlx2.gather(storage, early)
        steps_seen.append(int(batch["steps"].max()))
        algo.update(batch)
    assert steps_seen == [1, 1, 3, 3]
    np.testing.assert_allclose(batch["reward"], 1 + GAMMA_TD3 + GAMMA_TD3**2, rtol=1e-6)
    assert rlx2.status()["td_nstep"] == 3.0


GAMMA_TD3 = 0.99
