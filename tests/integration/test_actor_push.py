"""The actor's raw RESP push (actorq.actor.push) against redis-py's transaction pipeline:
the same commands store the same entries and counters in a real Redis."""

from __future__ import annotations

import threading
import time

import hiredis
import numpy as np
import pytest
import redis

from actorq.actor.episodes import EpisodeTracker, parse_episodes
from actorq.actor.fixed_policy import StaticFollower, make_policy
from actorq.actor.loop import Actor
from actorq.actor.push import Command, Transaction, pack_transaction
from actorq.config import ActorSettings
from actorq.envs import make_vector_env
from actorq.redis_keys import RedisKeys
from actorq.redis_server import EmbeddedRedis, find_free_port
from actorq.replay import RedisReplayWriter, TransitionBatch
from actorq.replay.batch import decode_batch


def execute_transaction(client: redis.Redis, commands: list[Command]) -> list:
    """Run `commands` in one MULTI/EXEC round trip and wait: `Transaction` sent and read."""
    transaction = Transaction(client, commands)
    transaction.send()
    return transaction.result()


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


def test_a_sent_transaction_is_kept_and_sent_again_until_redis_answers() -> None:
    """send() to a Redis that is not there yet raises nothing; result() raises, and once
    the server is up the same transaction is stored, exactly once."""
    port = find_free_port()
    client = redis.Redis(host="127.0.0.1", port=port, socket_connect_timeout=0.5)
    transaction = Transaction(client, [("XADD", "s", "*", "f", b"x" * 40_000), ("INCRBY", "n", 3)])
    transaction.send()
    with pytest.raises(redis.ConnectionError):
        transaction.result()
    with EmbeddedRedis(port=port):
        assert transaction.result()[1] == 3
        assert client.xlen("s") == 1 and client.get("n") == b"3"
        assert client.xrange("s")[0][1] == {b"f": b"x" * 40_000}  # a large argument, uncopied
    client.close()


def test_an_actor_loses_nothing_while_redis_is_away() -> None:
    """The actor starts against a port with no Redis, keeps its transitions and episodes
    through the failed pushes, and stores every one once the server comes up."""
    port = find_free_port()
    url = f"redis://127.0.0.1:{port}/0"
    keys = RedisKeys("outage")
    settings = ActorSettings(
        redis_url=url, redis_prefix=keys.prefix, env_id="CartPole-v1", envs_per_actor=8,
        seed=2, max_env_steps=3000, push_every=256,
    )  # fmt: skip
    env = make_vector_env("CartPole-v1", 8, settings.seed)
    client = redis.Redis.from_url(url, socket_connect_timeout=0.5)
    policy = make_policy("CartPole-v1", (16, 16), "int8", seed=1)
    actor = Actor(settings, env, StaticFollower(policy), client, keys, threading.Event())
    thread = threading.Thread(target=actor.run)
    thread.start()
    try:
        time.sleep(1.0)  # several failed pushes, with back-off
        assert actor.inserted == 0 and actor.unacknowledged > 0
        with EmbeddedRedis(port=port):
            thread.join(timeout=60)
            assert not thread.is_alive()
            stored = sum(len(decode_batch(f)) for _, f in client.xrange(keys.replay_stream))
            episodes = [
                e for _, f in client.xrange(keys.episodes_stream) for e in parse_episodes(f)
            ]
            assert actor.env_steps >= 3000 and actor.unacknowledged == 0
            assert stored == actor.inserted == actor.env_steps
            assert int(client.get(keys.inserted_counter)) == actor.env_steps
            assert len(episodes) == actor.episodes.count > 0
    finally:
        actor.stop.set()
        thread.join(timeout=60)
        env.close()
        client.close()


def test_packed_transaction_is_the_resp_hiredis_packs() -> None:
    big = np.arange(10_000, dtype=np.float32).tobytes()  # 40 KB: passed through as it is
    commands = [("XADD", "k", "MAXLEN", "~", "10", "*", "obs", big, "n", b"3"),
                ("INCRBY", "c", 7), ("SET", "f", 0.25), ("MGET", "a", "b")]  # fmt: skip
    chunks = pack_transaction(commands)
    assert any(chunk is big for chunk in chunks)
    framed = [("MULTI",), *commands, ("EXEC",)]
    assert b"".join(chunks) == b"".join(hiredis.pack_command(c) for c in framed)
    with pytest.raises(TypeError, match="bytes, str, int or float"):
        pack_transaction([("SET", "k", None)])
