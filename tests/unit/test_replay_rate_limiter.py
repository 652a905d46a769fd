"""SampleToInsertRatio: Reverb's samples-per-insert rule over two counters."""

from __future__ import annotations

import pytest

from actorq.replay.rate_limiter import SampleToInsertRatio


def test_warm_up_blocks_sampling_and_allows_inserting() -> None:
    limiter = SampleToInsertRatio(samples_per_insert=4, min_size_to_sample=100, error_buffer=300)
    assert not limiter.can_sample(inserted=99, sampled=0, batch_size=1)
    assert limiter.can_insert(inserted=99, sampled=0, count=10_000)
    assert limiter.can_sample(inserted=100, sampled=0, batch_size=32)


def test_learner_may_not_run_ahead() -> None:
    # band around diff = 4*100 = 400 is [100, 700]
    limiter = SampleToInsertRatio(samples_per_insert=4, min_size_to_sample=100, error_buffer=300)
    # inserted 100 -> diff 400; sampling 300 lands on 100 (allowed), 301 does not
    assert limiter.can_sample(inserted=100, sampled=0, batch_size=300)
    assert not limiter.can_sample(inserted=100, sampled=0, batch_size=301)
    assert not limiter.can_sample(inserted=100, sampled=300, batch_size=1)
    assert limiter.can_sample(inserted=101, sampled=300, batch_size=4)


def test_actors_may_not_run_ahead() -> None:
    limiter = SampleToInsertRatio(samples_per_insert=4, min_size_to_sample=100, error_buffer=300)
    # inserting up to diff 700 is allowed: (100 + 75) * 4 = 700
    assert limiter.can_insert(inserted=100, sampled=0, count=75)
    assert not limiter.can_insert(inserted=100, sampled=0, count=76)
    assert limiter.can_insert(inserted=175, sampled=4, count=1)


def test_fractional_ratio() -> None:
    """0.25 samples per insert: each transition sampled a quarter time on average."""
    limiter = SampleToInsertRatio(samples_per_insert=0.25, min_size_to_sample=8, error_buffer=64)
    assert limiter.can_sample(inserted=1000, sampled=0, batch_size=64)
    assert not limiter.can_sample(inserted=1000, sampled=250, batch_size=64)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"samples_per_insert": 0}, "samples_per_insert"),
        ({"samples_per_insert": -1}, "samples_per_insert"),
        ({"samples_per_insert": float("nan")}, "samples_per_insert"),
        ({"min_size_to_sample": 0}, "min_size_to_sample"),
        ({"error_buffer": 0.5}, "error_buffer"),
        ({"samples_per_insert": 8, "error_buffer": 7}, "error_buffer"),
        ({"error_buffer": float("inf")}, "error_buffer"),
    ],
)
def test_rejects_bad_arguments(kwargs: dict[str, float], field: str) -> None:
    args = {"samples_per_insert": 1.0, "min_size_to_sample": 1, "error_buffer": 10.0, **kwargs}
    with pytest.raises(ValueError, match=field):
        SampleToInsertRatio(**args)  # type: ignore[arg-type]


def test_rejects_bad_counts() -> None:
    limiter = SampleToInsertRatio(1, 1, 10)
    with pytest.raises(ValueError, match="batch_size"):
        limiter.can_sample(10, 0, 0)
    with pytest.raises(ValueError, match="count"):
        limiter.can_insert(10, 0, 0)
    with pytest.raises(ValueError, match="counts"):
        limiter.can_insert(-1, 0, 1)


def simulate(limiter: SampleToInsertRatio, batch_size: int, count: int, steps: int) -> tuple:
    """Alternate an actor and a learner that each act whenever allowed; detect deadlock."""
    inserted = sampled = 0
    for _ in range(steps):
        moved = False
        if limiter.can_insert(inserted, sampled, count):
            inserted += count
            moved = True
        if limiter.can_sample(inserted, sampled, batch_size):
            sampled += batch_size
            moved = True
        if not moved:
            return inserted, sampled, True
    return inserted, sampled, False


def test_ratio_is_kept_and_no_deadlock_when_band_is_wide_enough() -> None:
    limiter = SampleToInsertRatio(samples_per_insert=8, min_size_to_sample=1000, error_buffer=400)
    assert limiter.is_deadlock_free(batch_size=256, count=64)
    inserted, sampled, stuck = simulate(limiter, batch_size=256, count=64, steps=20_000)
    assert not stuck
    assert sampled / inserted == pytest.approx(8, rel=0.02)


def test_narrow_band_can_deadlock_and_says_so() -> None:
    limiter = SampleToInsertRatio(samples_per_insert=8, min_size_to_sample=100, error_buffer=100)
    assert not limiter.is_deadlock_free(batch_size=256, count=64)
    assert simulate(limiter, batch_size=256, count=64, steps=1000)[2]


@pytest.mark.parametrize("spi", [16.0, 1.0, 0.125, 3.3])
def test_batches_allowed_is_what_can_sample_admits_one_at_a_time(spi: float) -> None:
    limiter = SampleToInsertRatio(samples_per_insert=spi, min_size_to_sample=100, error_buffer=640)
    for inserted in (0, 99, 100, 101, 150, 333, 1000):
        for sampled in (0, 128, 1600, 5000, 15_999, 16_000):
            one_by_one = 0
            while one_by_one < 8 and limiter.can_sample(inserted, sampled + one_by_one * 128, 128):
                one_by_one += 1
            assert limiter.batches_allowed(inserted, sampled, 128, 8) == one_by_one
    assert limiter.batches_allowed(1000, 0, 128, 0) == 0
    with pytest.raises(ValueError, match="most must be >= 0, got -1"):
        limiter.batches_allowed(1000, 0, 128, -1)
    with pytest.raises(ValueError, match="batch_size must be >= 1"):
        limiter.batches_allowed(1000, 0, 0, 8)
