"""Ingest in its own process (ACTORQ_INGEST=process): XREAD, unpack and insert run under
another GIL than the learner's updates, writing into a replay storage both processes map
(actorq.replay.shared).

The learner starts `python -m actorq.learner.ingest_process`, which reads the learner's
own ACTORQ_* environment (Redis address, password file, prefix) and, on stdin, one JSON
line: the shared storage's `describe()`, the stream id to continue after, the shard and
the learner's pid. Nothing crosses the boundary pickled. Once the child has mapped the
storage it says so (`ready`), and the learner removes the files: the mappings stay, so a
kill of either process leaves nothing in /dev/shm.

Each training-loop iteration the learner calls `sync()`: rows the child added since are
announced to the sampler (prioritized replay gives them the max priority) and counted in
the learner's metrics; a child that died is an error (the learner exits; its supervisor
restarts it and the replay mirror is rebuilt from Redis). `finish()` asks the child to
stop, which drains the stream as the ingest thread does, and waits for it.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from typing import Any

import numpy as np

from actorq import metrics
from actorq.config import ConfigError
from actorq.learner.ingest import ReplayIngest
from actorq.procutil import INGEST_CORES_ENV, parse_cores
from actorq.replay import RedisReplayReader
from actorq.replay.shared import SharedReplay

log = logging.getLogger("actorq.learner.loop")

READY_TIMEOUT_S = 60.0  # the child imports numpy and redis and maps the storage
FINISH_TIMEOUT_S = 15.0  # the child's drain takes up to 5 s, after 1 s of quiet


class IngestProcessError(RuntimeError):
    """The ingest process did not start or stopped while the learner ran."""


class ProcessIngest:
    """The learner's side: starts, watches and stops the ingest process."""

    def __init__(
        self, reader: RedisReplayReader, shared: SharedReplay, stop: threading.Event
    ) -> None:
        self.reader, self.shared, self.stop = reader, shared, stop
        self.storage = shared.storage
        self.child: subprocess.Popen[bytes] | None = None
        self._seen = 0  # rows announced to the sampler so far (insert sequence number)
        self._counted = (0, 0)  # child's (added, rejected) already in the metrics
        self._base = (reader.added, reader.rejected)  # the rebuild's, before the child
        self.cores = ingest_cores(os.environ)  # () = the learner's own

    def start(self) -> None:
        """Start the child after the replay mirror was rebuilt; wait until it mapped the
        storage, then remove the shared files (IngestProcessError if it never does)."""
        self._seen = self.storage.total_added
        self._base = (self.reader.added, self.reader.rejected)
        config = {
            "replay": self.shared.describe(),
            "last_id": self.reader.last_id,
            "shard": list(self.reader.shard),
            "read_count": self.reader.read_count,
            "parent_pid": os.getpid(),
            "cores": list(self.cores),
        }
        self.child = subprocess.Popen(
            [sys.executable, "-m", "actorq.learner.ingest_process"], stdin=subprocess.PIPE
        )
        assert self.child.stdin is not None
        self.child.stdin.write(json.dumps(config).encode() + b"\n")
        self.child.stdin.close()
        deadline = time.monotonic() + READY_TIMEOUT_S
        while not self.shared.get("ready"):
            if self.child.poll() is not None or time.monotonic() > deadline:
                self._stop_child()
                raise IngestProcessError(
                    f"the ingest process did not start (exit status {self.child.returncode}); "
                    "its log is above. ACTORQ_INGEST=thread ingests in the learner instead"
                )
            time.sleep(0.01)
        self.shared.unlink()
        log.info("ingest process %d started (ACTORQ_INGEST=process)", self.child.pid)

    def sync(self) -> None:
        """Announce the child's new rows to the sampler, count them; raise if it died."""
        total = self.storage.total_added
        if total != self._seen:
            first = max(self._seen, total - self.storage.capacity)
            slots = np.arange(first, total, dtype=np.int64) % self.storage.capacity
            if self.reader.sampler is not None:
                self.reader.sampler.on_insert(slots)
            self._seen = total
            self._count()
        if self.child is not None and self.child.poll() is not None and not self.stop.is_set():
            raise IngestProcessError(
                f"the ingest process exited with status {self.child.returncode} while the "
                "learner ran"
            )

    def _count(self) -> None:
        added, rejected = self.shared.get("added"), self.shared.get("rejected")
        metrics.LEARNER_REPLAY_INSERTED.inc(added - self._counted[0])
        metrics.LEARNER_REPLAY_REJECTED.inc(rejected - self._counted[1])
        metrics.LEARNER_REPLAY_SIZE.set(len(self.storage))
        self._counted = (added, rejected)
        # The reader's counts stay the learner's (status, the lost-transitions check).
        self.reader.added, self.reader.rejected = self._base[0] + added, self._base[1] + rejected

    def finish(self) -> None:
        """Ask the child to stop (it drains what the stream still holds), wait for it,
        then count what it added into the learner's reader."""
        self.stop.set()
        self.shared.set("stop", 1)
        self._stop_child()
        self.sync()
        self._count()
        self.shared.close()

    def _stop_child(self) -> None:
        if self.child is None or self.child.poll() is not None:
            return
        try:
            self.child.wait(timeout=FINISH_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            log.warning("the ingest process did not stop within %.0f s; killing it",
                        FINISH_TIMEOUT_S)  # fmt: skip
            self.child.kill()
            self.child.wait()


def ingest_cores(env: Mapping[str, str]) -> tuple[int, ...]:
    """The cores ACTORQ_INGEST_CORES gives the ingest process (`actorq run` sets it where it
    pins the learner), or () to share the learner's; ConfigError for a bad list."""
    text = env.get(INGEST_CORES_ENV, "").strip()
    if not text:
        return ()
    try:
        cores = parse_cores(text)
    except ValueError as exc:
        raise ConfigError(f"{INGEST_CORES_ENV}: {exc}") from None
    machine = os.cpu_count() or 1
    if cores[-1] >= machine:
        raise ConfigError(
            f"{INGEST_CORES_ENV}: names core {cores[-1]}; this machine has cores 0-{machine - 1}"
        )
    return cores


def make_ingest(
    reader: RedisReplayReader, shared: SharedReplay | None, stop: threading.Event
) -> ReplayIngest | ProcessIngest:
    """The ingest thread, or with a shared storage (ACTORQ_INGEST=process) the process."""
    if shared is None:
        return ReplayIngest(reader, reader.storage, stop)
    return ProcessIngest(reader, shared, stop)


def make_shared_replay(
    capacity: int, obs_dim: int, act_dim: int, obs_shape: tuple[int, ...], links: bool
) -> SharedReplay:
    """The shared storage ACTORQ_INGEST=process trains from (ConfigError where the
    storage must link trajectories at insert time, which only the learner can do)."""
    if links:
        raise ConfigError(
            "ACTORQ_INGEST=process: RLx2's delayed n-step links trajectories as rows are "
            "inserted, in the learner's process; use ACTORQ_INGEST=thread with it"
        )
    return SharedReplay.create(capacity, obs_dim, act_dim, obs_shape)


# --- the child ------------------------------------------------------------------------
def _child(config: dict[str, Any]) -> None:
    from actorq.config import LearnerSettings, load_settings
    from actorq.redis_keys import RedisKeys
    from actorq.service import connect_redis

    if config.get("cores"):  # off the learner's cores (actorq run --pin-learner)
        os.sched_setaffinity(0, config["cores"])
    settings = load_settings(LearnerSettings)
    client = connect_redis(settings.redis_url, password_file=settings.redis_password_file)
    shared = SharedReplay.attach(config["replay"])
    reader = RedisReplayReader(
        client, RedisKeys(settings.redis_prefix), shared.storage,
        shard=tuple(config["shard"]), read_count=int(config["read_count"]),
    )  # fmt: skip
    reader.last_id = config["last_id"]
    stop = threading.Event()
    parent = int(config["parent_pid"])

    def report() -> None:  # after every poll: counts for the learner; stop when asked
        shared.set("added", reader.added)
        shared.set("rejected", reader.rejected)
        if shared.get("stop") or os.getppid() != parent:  # asked, or orphaned
            stop.set()

    ingest = ReplayIngest(reader, shared.storage, stop, after_poll=report)
    shared.set("ready", 1)
    ingest.run()
    if os.getppid() == parent:  # a clean stop: leave nothing the actors sent unread
        ingest.drain()


def main() -> None:
    from actorq.service import setup_logging

    setup_logging(os.environ.get("ACTORQ_LOG_LEVEL", "INFO"))
    _child(json.loads(sys.stdin.readline()))


if __name__ == "__main__":
    main()
