"""Replicas started from one template claim distinct actor indices from a real Redis."""

from __future__ import annotations

import redis

from actorq.actor.identity import claim_actor_index
from actorq.config import ActorSettings, ConfigError, load_settings
from actorq.redis_keys import RedisKeys


def test_replicas_get_distinct_indices_and_names(redis_client: redis.Redis, redis_keys: RedisKeys):
    template = load_settings(ActorSettings, {"ACTORQ_ACTOR_INDEX": "-1", "ACTORQ_NUM_ACTORS": "4"})
    claimed = [claim_actor_index(template, redis_client, redis_keys) for _ in range(6)]
    assert [s.actor_index for s in claimed] == [0, 1, 2, 3, 0, 1]  # epsilons wrap around
    names = [s.instance_id for s in claimed]
    assert names == [f"actor-{i}" for i in range(6)]  # but every replica is its own series


def test_explicit_index_and_evaluator_are_left_alone(redis_client, redis_keys) -> None:
    fixed = ActorSettings(actor_index=2, num_actors=3)
    assert claim_actor_index(fixed, redis_client, redis_keys) is fixed
    evaluator = claim_actor_index(
        ActorSettings(actor_index=-1, evaluator=True), redis_client, redis_keys
    )
    assert evaluator.actor_index == 0 and evaluator.instance_id == "evaluator"
    assert redis_client.get(redis_keys.actor_index_counter) is None  # nothing claimed


def test_other_negative_indices_are_refused() -> None:
    try:
        ActorSettings(actor_index=-2, num_actors=2)
    except ConfigError as exc:
        assert "-1 (claim one from Redis)" in str(exc) and "-2" in str(exc)
    else:
        raise AssertionError("actor_index=-2 was accepted")
