"""The actor's raw RESP push (actorq.actor.push) against redis-py's transaction pipeline:
the same commands store the same entries and counters in a real Redis."""

from __future__ import annotations

import numpy as np
import pytest
import redis

from actorq.actor.episodes import EpisodeTracker, parse_episodes
from actorq.actor.push import execute_transaction
from actorq.redis_keys import RedisKeys
from actorq.replay import RedisReplayWriter, TransitionBatch


def _batch(n: int) -> TransitionBatch:
    rng = np.random.default_rng(n)
    return TransitionBatch(
        obs=rng.normal(size=(n, 4)).astype(np.float32), action=rng.integers(0, 2, n),
        reward=np.ones(n, np.float32), next_obs=rng.normal(size=(n, 4)).astype(np.float32),
        done=rng.random(n) < 0.2, actor_id="actor-0", policy_version=3, precision="int8",
        behaviour=rng.integers(0, 2, n), behaviour_logp=np.full(n, -0.1, np.float32),
    )  # fmt: skip


def _tracker() -> EpisodeTracker:
    """Six finished episodes, pending as one columnar entry."""
    tracker = EpisodeTracker(3, "actor-0", "train")
    for i in range(3):
        tracker.step(np.full(3, 1.0 + i), np.array([i != 1, True, i == 2]), 3 + i, 100 * i)
    assert tracker.pending_count == 6
    return tracker


def _stored(client: redis.Redis, keys: RedisKeys) -> tuple:
    replay = [fields for _, fields in client.xrange(keys.replay_stream)]
    episodes = [fields for _, fields in client.xrange(keys.episodes_stream)]
    return replay, episodes, client.get(keys.inserted_counter)


def test_raw_push_stores_what_the_pipeline_stores(
    redis_client: redis.Redis, redis_keys: RedisKeys
) -> None:
    raw_keys, pipe_keys = RedisKeys(redis_keys.prefix + ":raw"), RedisKeys(redis_keys.prefix + ":p")
    tracker = _tracker()
    for keys, raw in ((raw_keys, True), (pipe_keys, False)):
        writer = RedisReplayWriter(redis_client, keys, maxlen_entries=100)
        redis_client.set(keys.learner_sampled, 7)
        for n in (3, 5):
            if raw:
                commands = writer.commands(_batch(n)) + tracker.commands(keys, 1000)
                commands.append(("MGET", keys.inserted_counter, keys.learner_sampled))
                counters = execute_transaction(redis_client, commands)[-1]
            else:
                pipe = redis_client.pipeline(transaction=True)
                writer.queue(pipe, _batch(n))
                pipe.xadd(keys.episodes_stream, tracker.fields(), maxlen=200, approximate=True)
                pipe.mget(keys.inserted_counter, keys.learner_sampled)
                counters = pipe.execute()[-1]
        assert counters == [b"8", b"7"]
    raw, piped = _stored(redis_client, raw_keys), _stored(redis_client, pipe_keys)
    assert raw == piped
    assert len(raw[0]) == 2 and len(raw[1]) == 2 and raw[2] == b"8"  # one episodes entry a push
    assert [parse_episodes(f) for f in raw[1]] == [tracker.pending] * 2


def test_raw_push_raises_a_refused_command_and_the_client_stays_usable(
    redis_client: redis.Redis, redis_keys: RedisKeys
) -> None:
    redis_client.xadd(redis_keys.inserted_counter, {"x": "1"})  # wrong type for INCRBY
    with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
        execute_transaction(redis_client, [("INCRBY", redis_keys.inserted_counter, 1)])
    assert execute_transaction(redis_client, [("INCRBY", redis_keys.learner_sampled, 2)]) == [2]


def test_raw_push_raises_connection_error_when_redis_is_away() -> None:
    client = redis.Redis(host="127.0.0.1", port=1, socket_connect_timeout=0.5)
    with pytest.raises(redis.ConnectionError):
        execute_transaction(client, [("INCRBY", "actorq-test-nowhere", 1)])
