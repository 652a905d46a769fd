"""Ingest: the learner's thread that moves actors' transitions from Redis into the local
replay mirror (XREAD -> unpack -> insert), and the drain at shutdown."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

import redis

from actorq import metrics
from actorq.replay import RedisReplayReader, ReplayStorage

log = logging.getLogger("actorq.learner.loop")


class ReplayIngest:
    """Polls `reader` on a daemon thread until `stop` is set."""

    def __init__(
        self,
        reader: RedisReplayReader,
        storage: ReplayStorage,
        stop: threading.Event,
        after_poll: Callable[[], None] | None = None,
    ) -> None:
        """`after_poll` runs after every poll (the ingest process reports its counts)."""
        self.reader, self.storage, self.stop = reader, storage, stop
        self.after_poll = after_poll or (lambda: None)
        self.thread = threading.Thread(target=self.run, name="ingest", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def sync(self) -> None:
        """Nothing to do: the reader tells the sampler of new rows as it inserts them
        (the ingest process's `sync` does it for rows another process wrote)."""

    def run(self) -> None:
        """Poll until `stop` is set (the thread's body; the ingest process's main loop)."""
        backoff = 0.05
        rejected = self.reader.rejected
        while not self.stop.is_set():
            try:
                added = self.reader.poll(block_ms=50)
                backoff = 0.05
            except (redis.ConnectionError, redis.TimeoutError) as exc:
                log.warning("redis unavailable while ingesting (%s); retrying", exc)
                self.stop.wait(backoff)
                backoff = min(backoff * 2, 2.0)
                continue
            if added:
                metrics.LEARNER_REPLAY_INSERTED.inc(added)
                metrics.LEARNER_REPLAY_SIZE.set(len(self.storage))
            if self.reader.rejected != rejected:  # malformed entries: skipped and counted
                metrics.LEARNER_REPLAY_REJECTED.inc(self.reader.rejected - rejected)
                rejected = self.reader.rejected
            self.after_poll()

    def finish(self) -> None:
        """Join the thread (`stop` must be set), then ingest what the stream still holds."""
        self.thread.join(timeout=5.0)
        if not self.thread.is_alive():
            self.drain()

    def drain(self, timeout: float = 5.0, quiet: float = 1.0) -> None:
        """Ingest what the stream still holds, and what actors stopping beside the learner
        push until the stream has been quiet for `quiet` seconds (`compose stop` stops
        them in parallel), so a clean stop leaves the mirror (and the final checkpoint's
        counts) equal to what Redis acknowledged to the actors."""
        deadline = time.monotonic() + timeout
        quiet_until = time.monotonic() + quiet
        try:
            while time.monotonic() < min(deadline, quiet_until):
                added = self.reader.poll(block_ms=100)
                if added:
                    quiet_until = time.monotonic() + quiet
                    metrics.LEARNER_REPLAY_INSERTED.inc(added)
                self.after_poll()
        except (redis.ConnectionError, redis.TimeoutError) as exc:
            log.warning("redis unavailable while draining the replay stream: %s", exc)
