"""What rank 0 tells actors through Redis: how far the learner group has sampled, which
is their side of the rate limiter (actorq.replay.rate_limiter)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import redis

from actorq.redis_keys import RedisKeys

log = logging.getLogger("actorq.learner.loop")


class ProgressReport:
    """Writes the update count and the group's sampled count; remembers what it wrote."""

    def __init__(
        self, client: redis.Redis, keys: RedisKeys, group_sampled: Callable[[], int]
    ) -> None:
        self.client, self.keys, self.group_sampled = client, keys, group_sampled
        self.reported_updates, self.reported_at = -1, 0.0

    def due_while_idle(self, updates: int) -> bool:
        """An idle learner reports a stale count at once (actors wait on it), and again
        each second while the last report failed (Redis away)."""
        stale = self.reported_updates != updates
        return stale or time.monotonic() > self.reported_at + 1

    def send(self, updates: int) -> None:
        try:
            pipe = self.client.pipeline(transaction=False)
            pipe.set(self.keys.learner_updates, updates)
            pipe.set(self.keys.learner_sampled, self.group_sampled())
            self.reported_updates = updates
            pipe.execute()
            self.reported_at = time.monotonic()  # only once Redis has it
        except (redis.ConnectionError, redis.TimeoutError) as exc:
            log.warning("could not report progress to redis: %s", exc)
