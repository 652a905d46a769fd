"""Episode bookkeeping of actors and its wire form in the episodes stream."""

from __future__ import annotations

import numpy as np
import pytest

from actorq.actor.episodes import Episode, EpisodeTracker, parse_episodes
from actorq.redis_keys import RedisKeys


def parse_episode(fields: dict[bytes, bytes]) -> Episode:
    """The one episode of a one-episode entry; ValueError when it holds another count."""
    episodes = parse_episodes(fields)
    if len(episodes) != 1:
        raise ValueError(f"expected an entry with one episode, got {len(episodes)}")
    return episodes[0]


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


def test_tracker_writes_its_pending_episodes_as_one_columnar_entry() -> None:
    tracker = EpisodeTracker(4, "actor-1", "train")
    tracker.step(np.array([1.0, 0.5, 1.0, 1.0]), np.array([False, True, False, True]), 7, 4)
    tracker.step(np.array([1.0, 1.0, 2.0, 1.0]), np.array([True, False, True, False]), 8, 8)
    (command,) = tracker.commands(RedisKeys("p"), maxlen=1000)
    assert command[:6] == ("XADD", "p:episodes", "MAXLEN", "~", "250", "*")  # 1000 // 4
    flat = command[6:]
    fields = {k.encode(): v if isinstance(v, bytes) else v.encode()
              for k, v in zip(flat[::2], flat[1::2], strict=True)}  # fmt: skip
    assert fields[b"count"] == b"4"
    assert np.frombuffer(fields[b"return"], "<f8").tolist() == [0.5, 1.0, 2.0, 3.0]
    assert np.frombuffer(fields[b"version"], "<i8").tolist() == [7, 7, 8, 8]
    parsed = parse_episodes(fields)
    assert parsed == tracker.pending and len(parsed) == tracker.pending_count == 4
    assert [(e.length, e.env_steps) for e in parsed] == [(1, 4), (1, 4), (2, 8), (2, 8)]
    assert {e.instance for e in parsed} == {"actor-1"} and {e.kind for e in parsed} == {"train"}
    tracker.clear_pending()
    assert tracker.commands(RedisKeys("p"), 1000) == [] and tracker.count == 4


def test_one_episode_text_entries_still_read_and_bad_columns_raise() -> None:
    episode = Episode("a", "eval", 9.0, 9, 1, 9, 1.0)
    single = {k.encode(): v.encode() for k, v in episode.fields().items()}
    assert parse_episodes(single) == [parse_episode(single)] == [episode]
    tracker = EpisodeTracker(2, "b", "train")
    tracker.step(np.ones(2), np.ones(2, bool), 1, 2)
    columns = {k.encode(): v if isinstance(v, bytes) else v.encode()
               for k, v in tracker.fields().items()}  # fmt: skip
    with pytest.raises(ValueError, match="one episode"):
        parse_episode(columns)
    with pytest.raises(ValueError, match="'length': 8 bytes, expected 8 x 2"):
        parse_episodes({**columns, b"length": columns[b"length"][:8]})
