"""An actor exports its rate-limited seconds at 0 from the start: the dashboard's "Actor
time rate-limited" panel reads 0 for actors never held back, not "no data" (a compose
stack whose learner kept up with 32 slow actors showed an empty panel)."""

from __future__ import annotations

import redis
from prometheus_client import REGISTRY

from actorq.redis_keys import RedisKeys
from tests.integration.test_learner_actor import _actor

METRIC = "actorq_actor_rate_limited_seconds_total"


def test_rate_limited_seconds_is_exported_at_zero_before_any_wait(
    redis_url: str, redis_client: redis.Redis, redis_keys: RedisKeys, quantizer: str
) -> None:
    instance = "actor-never-limited"
    assert REGISTRY.get_sample_value(METRIC, {"instance": instance}) is None
    actor, follower = _actor(
        redis_url, redis_keys, redis_client, quantizer, steps=0, instance=instance
    )
    try:
        assert REGISTRY.get_sample_value(METRIC, {"instance": instance}) == 0.0
    finally:
        follower.stop()
        actor.env.close()
