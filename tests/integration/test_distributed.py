"""Data-parallel learners: real gloo process groups over loopback, real Redis streams."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from dist_worker import CONFIG, SPEC, algo_batch, make_learner, rank_batch

from actorq.algos.dqn import DQNLearner
from actorq.redis_keys import RedisKeys
from actorq.redis_server import find_free_port
from actorq.replay import RedisReplayReader, RedisReplayWriter, ReplayStorage, TransitionBatch

WORKER = Path(__file__).with_name("dist_worker.py")
ROOT = Path(__file__).resolve().parents[2]


def _run_group(
    world_size: int, steps: int, tmp_path: Path, algo: str = "dqn"
) -> list[dict[str, np.ndarray]]:
    addr = f"127.0.0.1:{find_free_port()}"
    outs = [tmp_path / f"rank{r}.npz" for r in range(world_size)]
    procs = [
        subprocess.Popen(
            [
                *[sys.executable, str(WORKER), "--rank", str(r), "--world-size", str(world_size)],
                *["--addr", addr, "--steps", str(steps), "--out", str(outs[r])],
                *["--algo", algo],
            ],
            cwd=ROOT,
            env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
        )
        for r in range(world_size)
    ]
    try:
        codes = [p.wait(timeout=120) for p in procs]
    finally:
        for p in procs:
            p.kill()
    assert codes == [0] * world_size
    return [dict(np.load(o)) for o in outs]


def test_ranks_stay_identical_and_match_one_learner_on_the_joint_batch(tmp_path):
    steps = 6
    ranks = _run_group(2, steps, tmp_path)
    for name in ranks[0]:
        np.testing.assert_array_equal(ranks[0][name], ranks[1][name], err_msg=name)
    # The averaged gradient of two equal halves is the gradient of the joint batch, so one
    # learner that starts from rank 0's seed and trains on both halves lands in the same place.
    reference = DQNLearner(SPEC, CONFIG, seed=100)
    reference.prime_optimizer()  # the group primes Adam with one zero-gradient step too
    for step in range(steps):
        halves = [rank_batch(0, step), rank_batch(1, step)]
        joint = {k: np.concatenate([h[k] for h in halves]) for k in halves[0]}
        reference.update(joint)
    for name, value in reference.policy_weights().items():
        np.testing.assert_allclose(ranks[0][name], value, rtol=1e-4, atol=1e-5, err_msg=name)


@pytest.mark.parametrize("algo", ["ddpg", "td3", "d4pg", "sac"])
def test_every_off_policy_algorithm_trains_data_parallel(algo: str, tmp_path: Path) -> None:
    """Two ranks stay identical; for the deterministic updates (DDPG, TD3 without target
    smoothing noise, D4PG) they also equal one learner on the joint batch. SAC samples
    its actions with each rank's own noise, so no single-batch reference exists: its
    ranks must agree and have moved from the shared start."""
    steps = 6  # TD3's actor steps on every second update: three actor steps
    ranks = _run_group(2, steps, tmp_path, algo)
    for name in ranks[0]:
        np.testing.assert_array_equal(ranks[0][name], ranks[1][name], err_msg=f"{algo} {name}")
    start = make_learner(algo, seed=100).policy_weights()
    assert any(not np.array_equal(ranks[0][k], v) for k, v in start.items())  # it trained
    if algo == "sac":
        return
    reference = make_learner(algo, seed=100)
    reference.prime_optimizer()
    for step in range(steps):
        halves = [algo_batch(algo, 0, step), algo_batch(algo, 1, step)]
        reference.update({k: np.concatenate([h[k] for h in halves]) for k in halves[0]})
    for name, value in reference.policy_weights().items():
        np.testing.assert_allclose(ranks[0][name], value, rtol=1e-4, atol=1e-5, err_msg=name)


def test_initial_sync_overrides_each_ranks_own_initialisation(tmp_path):
    ranks = _run_group(2, 0, tmp_path)
    rank0_init = DQNLearner(SPEC, CONFIG, seed=100).policy_weights()
    rank1_init = DQNLearner(SPEC, CONFIG, seed=101).policy_weights()
    for name in rank0_init:
        np.testing.assert_array_equal(ranks[1][name], rank0_init[name])
        assert not np.array_equal(ranks[1][name], rank1_init[name])


def _batch(rows: int, start: float) -> TransitionBatch:
    obs = np.full((rows, 4), start, np.float32) + np.arange(rows, dtype=np.float32)[:, None]
    return TransitionBatch(
        obs=obs,
        action=np.zeros(rows, np.int64),
        reward=np.ones(rows, np.float32),
        next_obs=obs + 1,
        done=np.zeros(rows, np.bool_),
        actor_id="actor-0",
        policy_version=1,
    )


def test_shards_split_the_stream_without_overlap_or_loss(redis_client, redis_keys: RedisKeys):
    writer = RedisReplayWriter(redis_client, redis_keys, maxlen_entries=10_000)
    entries = 60
    for i in range(entries):
        writer.write(_batch(3, start=100.0 * i))
    seen = []
    for index in range(3):
        storage = ReplayStorage(1000, 4)
        reader = RedisReplayReader(redis_client, redis_keys, storage, shard=(index, 3))
        added = reader.rebuild()
        seen.append({float(x) for x in storage.get(np.arange(added))["obs"][:, 0]})
        assert 0 < added < 3 * entries  # each shard got some, none got all
    union = set().union(*seen)
    assert sum(len(s) for s in seen) == len(union) == 3 * entries


@pytest.mark.parametrize("shard", [(2, 2), (-1, 2), (0, 0)])
def test_bad_shard_is_refused(redis_client, redis_keys, shard):
    with pytest.raises(ValueError, match="shard"):
        RedisReplayReader(redis_client, redis_keys, ReplayStorage(1000, 4), shard=shard)
