"""What rank 0 tells actors through Redis: how far the learner group has sampled, which
is their side of the rate limiter (actorq.replay.rate_limiter).

The writes happen on a thread of their own: a blocking Redis round trip every 10 updates
held the training thread for ~7% of its time (py-spy, DQN 64x64 on 2 cores), while all it
needs to do is hand over the newest count. A busy learner only stores the count
(`request_paced`) and the reporter picks it up on its own clock; an idle one wakes the
reporter (`request`); `send` (shutdown, and tests) writes at once. Neither request waits."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

import redis

from actorq.redis_keys import RedisKeys

log = logging.getLogger("actorq.learner.loop")

# A busy learner reports at most this often (`request_paced`): each report costs the
# learner's core ~0.1 ms of redis-py; every 10 updates of a 2,000 updates/s DQN was 7% of
# the training thread (py-spy), every 20 ms cut CPU per update 10% (BENCHMARKS 20). Actors
# may run 20,000 transitions ahead of the count anyway, and an idle learner reports at once.
# The reporter polls at this period rather than being woken: waking it from the training
# thread (Condition.notify) was ~5% of that thread in py-spy, and DQN's updates/s rose a
# median 2% without it (BENCHMARKS 20j).
REPORT_MIN_SECONDS = 0.02


class ProgressReport:
    """Writes the update count and the group's sampled count; remembers what it wrote."""

    def __init__(
        self,
        client: redis.Redis,
        keys: RedisKeys,
        group_sampled: Callable[[], int],
        min_seconds: float = REPORT_MIN_SECONDS,
    ) -> None:
        self.client, self.keys, self.group_sampled = client, keys, group_sampled
        self.min_seconds = min_seconds
        self.reported_updates, self.reported_at = -1, 0.0
        self.writes = 0  # counts written to Redis so far
        self._wanted: int | None = None  # the newest update count asked for, not yet sent
        self._cond = threading.Condition()
        self._urgent = False  # `request` asked for a write now, not at the next turn
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="progress", daemon=True)
        self._thread.start()

    def due_while_idle(self, updates: int) -> bool:
        """An idle learner reports a stale count at once (actors wait on it), and again
        each second while the last report failed (Redis away)."""
        stale = self.reported_updates != updates and self._wanted != updates
        return stale or time.monotonic() > self.reported_at + 1

    def request(self, updates: int) -> None:
        """Have the reporter thread write the counts as of `updates` (never blocks)."""
        with self._cond:
            self._wanted, self._urgent = updates, True
            self._cond.notify()

    def request_paced(self, updates: int) -> None:
        """Leave `updates` for the reporter's next turn, at most `min_seconds` away, without
        waking it (a busy learner); with no floor (0) this is `request`."""
        if self.min_seconds <= 0:
            self.request(updates)
        else:
            # One attribute store, atomic under the GIL: should the reporter take the older
            # count at that instant, this one is lost, and the next paced call replaces it.
            self._wanted = updates

    def send(self, updates: int) -> None:
        """Write the counts now, on the calling thread."""
        try:
            pipe = self.client.pipeline(transaction=False)
            pipe.set(self.keys.learner_updates, updates)
            pipe.set(self.keys.learner_sampled, self.group_sampled())
            pipe.execute()
            self.writes += 1
            self.reported_updates = updates
            self.reported_at = time.monotonic()  # only once Redis has it
        except (redis.ConnectionError, redis.TimeoutError) as exc:
            log.warning("could not report progress to redis: %s", exc)

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify()
        self._thread.join(timeout=5.0)

    def _run(self) -> None:
        while True:
            with self._cond:
                # A turn per floor (a busy learner's counts), sooner when woken (an idle one).
                woken = lambda: self._closed or self._urgent  # noqa: E731
                self._cond.wait_for(woken, timeout=self.min_seconds or None)
                if self._closed:
                    return
                updates, self._wanted, self._urgent = self._wanted, None, False
            if updates is not None:
                self.send(updates)
