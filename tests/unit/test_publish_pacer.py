"""PublishPacer: at most one publication per `min_seconds` of wall clock."""

from __future__ import annotations

import pytest

from actorq.config import ConfigError, LearnerSettings
from actorq.learner.publisher import PublishPacer


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_first_publication_goes_at_once_then_one_per_interval() -> None:
    clock = _Clock()
    pacer = PublishPacer(0.1, clock=clock)
    assert pacer.ready()
    assert not pacer.ready()  # the same instant
    clock.now += 0.09
    assert not pacer.ready()
    clock.now += 0.02  # 0.11 s after the first
    assert pacer.ready()
    clock.now += 0.05  # the interval restarts at the last publication, not at the first
    assert not pacer.ready()


def test_zero_interval_publishes_every_time() -> None:
    pacer = PublishPacer(0.0, clock=_Clock())
    assert all(pacer.ready() for _ in range(5))


def test_negative_interval_is_refused_with_the_value() -> None:
    with pytest.raises(ConfigError, match=r"publish_min_seconds: expected >= 0, got -1"):
        LearnerSettings(publish_min_seconds=-1.0)
