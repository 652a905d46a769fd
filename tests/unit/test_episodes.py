"""Episode bookkeeping of actors and its wire form in the episodes stream."""

from __future__ import annotations

import numpy as np
import pytest

from actorq.actor.episodes import Episode, EpisodeTracker, parse_episode


def test_tracker_accumulates_per_env_and_resets_on_end() -> None:
    tracker = EpisodeTracker(3, "actor-0", "train")
    tracker.step(np.array([1.0, 1.0, 1.0]), np.array([False, False, False]), version=4, env_steps=3)
    tracker.step(np.array([1.0, 2.0, 1.0]), np.array([False, True, False]), version=5, env_steps=6)
    assert tracker.count == 1
    (episode,) = tracker.pending
    assert episode.episode_return == 3.0 and episode.length == 2 and episode.policy_version == 5
    tracker.step(np.array([1.0, 1.0, 1.0]), np.array([True, True, True]), version=5, env_steps=9)
    returns = sorted(e.episode_return for e in tracker.pending)
    assert returns == [1.0, 3.0, 3.0, 3.0]  # env 1 restarted after its first episode
    assert tracker.mean_return == pytest.approx(2.5)


def test_episode_fields_round_trip() -> None:
    episode = Episode("evaluator", "eval", 500.0, 500, 12, 4000, 1.5e9)
    fields = {k.encode(): v.encode() for k, v in episode.fields().items()}
    assert parse_episode(fields) == episode


def test_malformed_episode_raises() -> None:
    with pytest.raises((KeyError, ValueError)):
        parse_episode({b"instance": b"a", b"kind": b"train", b"return": b"nan?"})
