"""Give each actor replica its own index when many start from one template.

`docker compose up --scale actor=32` and a Kubernetes Deployment start identical
containers, so ACTORQ_ACTOR_INDEX cannot differ between them. With ACTORQ_ACTOR_INDEX=-1
each replica takes the next number from a Redis counter (INCR is atomic, so no two
replicas get the same one). The index, modulo ACTORQ_NUM_ACTORS, picks the Ape-X epsilon
and seeds; the instance name keeps the full number, so a replacement replica shows up in
metrics as a new actor instead of mixing its counters with a dead one's.
"""

from __future__ import annotations

import dataclasses

import redis

from actorq.config import AUTO_ACTOR_INDEX, ActorSettings
from actorq.redis_keys import RedisKeys


def claim_actor_index(
    settings: ActorSettings, client: redis.Redis, keys: RedisKeys
) -> ActorSettings:
    """`settings` with a claimed index when it asks for one (-1), else unchanged."""
    if settings.actor_index != AUTO_ACTOR_INDEX:
        return settings
    if settings.evaluator:  # one evaluator, writes no replay: nothing to tell apart
        return dataclasses.replace(settings, actor_index=0)
    number = int(client.incr(keys.actor_index_counter)) - 1
    return dataclasses.replace(
        settings,
        actor_index=number % settings.num_actors,
        instance=settings.instance or f"actor-{number}",
    )
