"""Device-resident replay in the learner service (actorq.learner.device_feed), on the CPU
(the ring lives on the update's device; here that is the CPU, with the captured step run
eagerly): the ring follows the host mirror, k updates per call run the algorithm's one
`step` on the rows the ring draws, and the loop's periodic work still happens when
updates come k at a time."""

from __future__ import annotations

import logging

import numpy as np
import pytest
import torch

from actorq.algos import load_algorithm_config, make_algorithm
from actorq.algos.capture import apply_update_path
from actorq.algos.feed import DeviceReplay, PrioritizedDeviceReplay
from actorq.learner import device_feed
from actorq.learner.counters import LearnerCounters
from actorq.learner.device_feed import RING_COLUMNS, DeviceFeed, attach_device_feed
from actorq.learner.update_step import UpdateStep, crossed
from actorq.replay import ReplayStorage, TransitionBatch, UniformSampler

OBS, ACTIONS, BATCH = 4, 2, 32


def _rows(n: int, start: int) -> TransitionBatch:
    """n transitions whose reward is their insert number (to tell rows apart), n-step
    lengths cycling 1..3."""
    rng = np.random.default_rng(start)
    return TransitionBatch(
        obs=rng.standard_normal((n, OBS), dtype=np.float32),
        action=rng.integers(0, ACTIONS, n),
        reward=np.arange(start, start + n, dtype=np.float32),
        next_obs=rng.standard_normal((n, OBS), dtype=np.float32),
        done=rng.random(n) < 0.1,
        actor_id="a",
        policy_version=1,
        steps=(np.arange(n) % 3 + 1).astype(np.uint8),
    )


def _dqn(path: str = "torch-eager"):  # type: ignore[no-untyped-def]
    config = load_algorithm_config("dqn", {}, batch_size=BATCH)
    algo = make_algorithm("dqn", OBS, ACTIONS, (16, 16), config, seed=3)
    apply_update_path(algo, path)
    return algo


def test_ring_follows_the_host_mirror_through_wraps() -> None:
    storage = ReplayStorage(50, OBS)
    feed = DeviceFeed(_dqn(), storage, BATCH, k=4)
    assert feed.catch_up() == 0
    storage.add(_rows(30, 0))
    assert feed.catch_up() == 30
    storage.add(_rows(45, 30))  # 75 rows ever, the newest 50 kept; 45 new since last time
    assert feed.catch_up() == 45 and feed.ring.size == 50
    on_device = sorted(feed.ring.columns["reward"].tolist())
    assert on_device == list(range(25, 75)), "the ring holds exactly the mirror's rows"
    storage.add(_rows(120, 75))  # more than the capacity between two calls
    assert feed.catch_up() == 50
    assert sorted(feed.ring.columns["reward"].tolist()) == list(range(145, 195))
    # n-step lengths travel with their rows (the step discounts by gamma ** steps)
    reward = feed.ring.columns["reward"].long()
    assert torch.equal(feed.ring.columns["steps"].long(), (reward - 75) % 3 + 1)


def test_k_updates_per_call_run_the_one_step_on_the_rows_the_ring_draws() -> None:
    """The device path against the algorithm's own update fed the same rows: same
    weights after 3 calls of k = 4 (the ring's draws replayed from its generator)."""
    storage = ReplayStorage(200, OBS)
    storage.add(_rows(200, 0))
    algo, twin = _dqn(), _dqn()
    feed = DeviceFeed(algo, storage, BATCH, k=4, seed=11)
    feed.catch_up()
    for _ in range(3):
        feed.run()
    feed.runner.drain()
    draws = torch.Generator().manual_seed(11)
    columns = feed.ring.columns
    for _ in range(3):
        index = feed.ring.indices(4, BATCH, draws)
        for i in range(4):
            rows = {c: columns[c][index[i]].numpy() for c in RING_COLUMNS}
            rows["action"] = rows["action"].astype(np.int64)
            twin.update(rows)
    assert algo.num_updates == twin.num_updates == 12
    for mine, theirs in zip(algo.online.parameters(), twin.online.parameters(), strict=True):
        torch.testing.assert_close(mine, theirs, rtol=1e-5, atol=1e-6)


def test_update_step_counts_k_updates_and_reports_losses() -> None:
    storage = ReplayStorage(500, OBS)
    storage.add(_rows(300, 0))
    algo, counters = _dqn(), LearnerCounters()
    step = UpdateStep(
        algo, storage, UniformSampler(), BATCH, counters, np.random.default_rng(0)
    )  # fmt: skip
    before = [p.detach().clone() for p in algo.online.parameters()]
    step.use_feed(DeviceFeed(algo, storage, BATCH, k=8))
    assert step.k == 8
    for _ in range(8):  # 64 updates: one readback
        step(newest_version=3)
    assert counters.updates == 64 and counters.sampled == 64 * BATCH
    assert algo.num_updates == 64
    assert np.isfinite(counters.last_loss)
    assert any(not torch.equal(a, b) for a, b in zip(before, algo.online.parameters(), strict=True))


@pytest.mark.parametrize(
    ("before", "k", "every", "expected"),
    [(9, 1, 10, True), (10, 1, 10, False), (48, 4, 50, True), (44, 4, 50, False),
     (50, 4, 50, False), (0, 64, 50, True), (5, 1, 0, False)],
)  # fmt: skip
def test_crossed_is_modulo_for_k_updates_a_call(
    before: int, k: int, every: int, expected: bool
) -> None:
    assert crossed(before, k, every) is expected
    if k == 1 and every:
        assert crossed(before, k, every) == ((before + 1) % every == 0)


def test_ring_without_steps_samples_ones_and_with_steps_keeps_them() -> None:
    batch = _rows(64, 0)
    rows = {c: np.asarray(getattr(batch, c)) for c in RING_COLUMNS}
    feeder_keys = (*DeviceReplay.COLUMNS, "steps", "weights")
    from actorq.algos.feed import BatchFeeder

    example = {c: rows[c][:BATCH] for c in RING_COLUMNS}
    for columns, all_ones in ((DeviceReplay.COLUMNS, True), (RING_COLUMNS, False)):
        ring = DeviceReplay(64, rows, torch.device("cpu"), columns)
        ring.add(rows)
        feeder = BatchFeeder(feeder_keys, example, 2, torch.device("cpu"))
        ring.sample_into(feeder, torch.Generator().manual_seed(0))
        assert bool((feeder.inputs["steps"] == 1).all()) is all_ones
        assert bool((feeder.inputs["weights"] == 1).all())


def test_a_ring_that_cannot_be_allocated_leaves_host_sampling(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """GPU memory cannot run out here: the ring's allocation raises as a CUDA one would."""

    class _Learner:
        def __init__(self) -> None:
            from actorq.config import LearnerSettings
            from actorq.learner.distributed import DistConfig

            self.s, self.algo = LearnerSettings(), _dqn()
            self.storage, self.cfg = ReplayStorage(100, OBS), self.algo.config
            self.rlx2 = self.correction = None
            self.dist = DistConfig()
            self.update_step = UpdateStep(
                self.algo, self.storage, UniformSampler(), BATCH, LearnerCounters(),
                np.random.default_rng(0),
            )  # fmt: skip

    def no_memory(*args: object, **kwargs: object) -> None:
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")

    learner = _Learner()
    monkeypatch.setattr(device_feed, "DeviceReplay", no_memory)
    with caplog.at_level(logging.WARNING):
        said = attach_device_feed(learner, 4)
    assert said.startswith("off: could not allocate 100 rows on the device: CUDA out of memory")
    assert learner.update_step.feed is None and learner.update_step.k == 1
    assert "sampling on the host instead" in caplog.text


def test_numpy_flat_and_a_terminal_share_are_refused_with_the_reason() -> None:
    from actorq.config import ConfigError, LearnerSettings
    from actorq.learner.distributed import DistConfig

    class _Learner:
        def __init__(self, path: str, replay: str, share: float = 0.0) -> None:
            self.s = LearnerSettings(replay=replay, settle_terminal_share=share)
            self.algo, self.storage = _dqn(path), ReplayStorage(100, OBS)
            self.rlx2 = self.correction = None
            self.dist = DistConfig()

    with pytest.raises(ConfigError, match=r"captured update path .* not numpy-flat"):
        device_feed.check_device_replay(4, _Learner("numpy-flat", "uniform"))
    with pytest.raises(ConfigError, match=r"REPLAY_K\) 4 needs settle_terminal_share 0"):
        device_feed.check_device_replay(4, _Learner("torch-eager", "uniform", 0.25))
    device_feed.check_device_replay(4, _Learner("torch-eager", "uniform"))  # accepted
    device_feed.check_device_replay(4, _Learner("torch-eager", "prioritized"))


def _prioritized_ring(n: int, capacity: int, **kw: float) -> PrioritizedDeviceReplay:
    batch = _rows(n, 0)
    rows = {c: np.asarray(getattr(batch, c)) for c in RING_COLUMNS}
    ring = PrioritizedDeviceReplay(capacity, rows, torch.device("cpu"), RING_COLUMNS, **kw)
    ring.add(rows)
    return ring


def test_prioritized_ring_draws_in_proportion_to_priority() -> None:
    ring = _prioritized_ring(40, 64)  # 24 empty slots: never drawn
    assert torch.equal(ring.priority[:40], torch.ones(40)) and float(ring.priority[40:].sum()) == 0
    priority = torch.zeros(64)
    priority[:40] = torch.arange(1, 41, dtype=torch.float32)
    ring.priority.copy_(priority)
    draws = ring.indices(200, 100, torch.Generator().manual_seed(0)).flatten()
    assert int(draws.max()) < 40
    counts = torch.bincount(draws, minlength=64)[:40].double()
    expected = 20_000 * priority[:40].double() / priority.sum()
    chi2 = float(((counts - expected) ** 2 / expected).sum())
    assert chi2 < 80, f"draws do not follow the priorities (chi2 {chi2:.0f}, 39 dof)"
    # stratified: each batch takes row j from the j-th slice of the mass, so a row of
    # twice the priority is drawn twice as often within every batch, not just on average
    one_batch = ring.indices(1, 820, torch.Generator().manual_seed(1)).flatten()
    assert torch.equal(torch.bincount(one_batch, minlength=40)[:40], torch.arange(1, 41))


def test_prioritized_ring_weights_and_td_write_back_follow_the_host_rule() -> None:
    from actorq.algos.feed import BatchFeeder

    ring = _prioritized_ring(50, 50, alpha=0.5, beta=0.4, beta_final=1.0, beta_steps=4, eps=0.01)
    ring.priority.copy_(torch.linspace(0.5, 3.0, 50))
    example = {c: ring.columns[c][:BATCH].numpy() for c in RING_COLUMNS}
    feeder = BatchFeeder((*RING_COLUMNS, "weights"), example, 2, torch.device("cpu"))
    index = ring.sample_into(feeder, torch.Generator().manual_seed(3)).view(2, BATCH)
    for i, beta in enumerate((0.4, 0.4 + 0.6 / 4)):  # beta anneals per batch drawn
        p = ring.priority[index[i]].double().numpy()
        expected = (p.min() / p) ** beta
        np.testing.assert_allclose(feeder.inputs["weights"][i].numpy(), expected, rtol=1e-5)
        assert feeder.inputs["reward"][i].tolist() == ring.columns["reward"][index[i]].tolist()
    td = torch.rand(2, BATCH, generator=torch.Generator().manual_seed(4)) * 5
    ring.after_steps(index.flatten(), td)
    stored = (td + 0.01) ** 0.5
    drawn_once = torch.bincount(index.flatten(), minlength=50) == 1
    for row, value in zip(index.flatten().tolist(), stored.flatten().tolist(), strict=True):
        if drawn_once[row]:
            assert float(ring.priority[row]) == pytest.approx(value, rel=1e-6)
    assert float(ring.max_priority) == pytest.approx(float(stored.max()), rel=1e-6)
    ring.add({c: ring.columns[c][:3].numpy() for c in RING_COLUMNS})  # new rows: the max
    assert torch.allclose(ring.priority[:3], ring.max_priority.expand(3))


def test_prioritized_feed_trains_on_the_rows_and_weights_it_draws() -> None:
    """DeviceFeed on prioritized replay against the algorithm's own update, fed the rows
    and importance weights the ring drew and the priorities its |TD errors| give: same
    weights after 3 calls of k = 4."""
    from actorq.replay.prioritized import PrioritizedSampler

    storage = ReplayStorage(200, OBS)
    storage.add(_rows(200, 0))
    host = PrioritizedSampler(200, alpha=0.7, beta=0.5, beta_steps=6)
    algo, twin = _dqn(), _dqn()
    feed = DeviceFeed(algo, storage, BATCH, k=4, seed=11, prioritized=host)
    assert isinstance(feed.ring, PrioritizedDeviceReplay) and feed.ring.alpha == 0.7
    feed.catch_up()
    oracle = _prioritized_ring(200, 200, alpha=0.7, beta=0.5, beta_steps=6)
    for c in RING_COLUMNS:
        oracle.columns[c].copy_(feed.ring.columns[c])
    oracle.priority.copy_(feed.ring.priority)
    for _ in range(3):
        feed.run()
    feed.runner.drain()
    draws = torch.Generator().manual_seed(11)
    columns, drawn = oracle.columns, 0
    for _ in range(3):
        index = oracle.indices(4, BATCH, draws)
        tds = []
        for i in range(4):
            p = oracle.priority[index[i]].double().numpy()
            beta = 0.5 + 0.5 * min(1.0, drawn / 6)
            drawn += 1
            rows = {c: columns[c][index[i]].numpy() for c in RING_COLUMNS}
            rows["action"] = rows["action"].astype(np.int64)
            tds.append(torch.from_numpy(twin.update(rows, (p.min() / p) ** beta).td_abs))
        stored = (torch.stack(tds).flatten() + 1e-6) ** 0.7
        oracle.priority[index.flatten()] = stored
    assert algo.num_updates == twin.num_updates == 12
    for mine, theirs in zip(algo.online.parameters(), twin.online.parameters(), strict=True):
        torch.testing.assert_close(mine, theirs, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(feed.ring.priority, oracle.priority, rtol=1e-4, atol=1e-6)


def test_a_continuous_learner_runs_k_updates_on_its_ring() -> None:
    """TD3 (delayed actor: a static flag per update of the call) on a continuous mirror."""
    rng = np.random.default_rng(0)
    n, obs, act = 120, 3, 1
    storage = ReplayStorage(200, obs, act_dim=act)
    storage.add(
        TransitionBatch(
            obs=rng.standard_normal((n, obs), dtype=np.float32),
            action=rng.uniform(-1, 1, (n, act)).astype(np.float32),
            reward=rng.standard_normal(n, dtype=np.float32),
            next_obs=rng.standard_normal((n, obs), dtype=np.float32),
            done=np.zeros(n, bool),
            actor_id="a",
            policy_version=1,
        )
    )
    config = load_algorithm_config("td3", {}, batch_size=BATCH)
    algo = make_algorithm("td3", obs, act, (16, 16), config, seed=1)
    actor_before = [p.detach().clone() for p in algo.actor.parameters()]
    feed = DeviceFeed(algo, storage, BATCH, k=2)
    assert feed.catch_up() == n
    assert feed.ring.columns["action"].shape == (200, act)
    for _ in range(3):
        feed.run()
    feed.runner.drain()
    assert algo.num_updates == 6
    # the delayed actor stepped (every 2nd update), so it moved
    assert any(
        not torch.equal(a, b) for a, b in zip(actor_before, algo.actor.parameters(), strict=True)
    )
