"""A replay storage two processes share: the learner samples from it while its ingest
process (actorq.learner.ingest_process) writes into it, each under its own GIL.

The columns and the two counters live in one file in shared memory (/dev/shm where it
has room, mapped with mmap by both processes); a lock that holds across processes
(flock on a second file, plus a thread lock, since flock does not exclude threads that
share a descriptor) guards every read and write as the in-process storage's lock does.
The layout is described by a small JSON-able dict (`SharedReplay.describe`), so the
other process attaches by path: nothing is pickled across the process boundary.
"""

from __future__ import annotations

import contextlib
import fcntl
import math
import mmap
import os
import shutil
import tempfile
import threading
import uuid
from dataclasses import dataclass
from typing import Any

import numpy as np

from actorq.replay.storage import FILL, ReplayStorage, column_layout

HEADER = ("total", "dropped_before", "added", "rejected", "stop", "ready")
"""int64 slots at the start of the file: the storage's two counters (`ReplayStorage._counts`
order), then the ingest process's control block (actorq.learner.ingest_process)."""
ALIGN = 64  # each column starts on a cache line (the header fits in the first)


class ProcessLock:
    """Excludes other threads of this process and other processes holding `path`."""

    def __init__(self, path: str) -> None:
        self._thread = threading.Lock()
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)

    def __enter__(self) -> ProcessLock:
        self._thread.acquire()
        fcntl.flock(self._fd, fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc: Any) -> None:
        fcntl.flock(self._fd, fcntl.LOCK_UN)
        self._thread.release()

    def __del__(self) -> None:  # with the storage that holds it: no descriptor leaks
        with contextlib.suppress(OSError, AttributeError):
            os.close(self._fd)


@dataclass
class _Mapped:
    """What `ReplayStorage(shared=...)` takes: columns, counts and the lock."""

    columns: dict[str, np.ndarray]
    counts: np.ndarray
    lock: ProcessLock


def shared_dir(nbytes: int) -> str:
    """/dev/shm when it has room for `nbytes` (memory, never written back to disk), else
    the temporary directory (an mmapped file there is still shared, through the page
    cache)."""
    if os.path.isdir("/dev/shm") and shutil.disk_usage("/dev/shm").free > 1.1 * nbytes:
        return "/dev/shm"
    return tempfile.gettempdir()


class SharedReplay:
    """Owns (`create`) or attaches to (`attach`) one shared storage file and its lock."""

    def __init__(self, describe: dict[str, Any], owner: bool) -> None:
        self._describe, self.owner = describe, owner
        layout = column_layout(
            describe["capacity"], describe["obs_dim"], describe["act_dim"],
            tuple(describe["obs_shape"]),
        )  # fmt: skip
        offsets, nbytes = _offsets(layout)
        flags = os.O_RDWR | (os.O_CREAT | os.O_EXCL if owner else 0)
        fd = os.open(describe["path"], flags, 0o600)
        try:
            if owner:
                os.ftruncate(fd, nbytes)
            mapping = mmap.mmap(fd, nbytes)
        finally:
            os.close(fd)
        # numpy keeps `mapping` alive while any of these arrays (or their views) is.
        columns = {
            name: np.ndarray(shape, dtype, buffer=mapping, offset=offsets[name])
            for name, (shape, dtype) in layout.items()
        }
        if owner:  # a new file reads as zeros; only FILL's columns need writing
            for name, value in FILL.items():
                columns[name].fill(value)
        self.header = np.ndarray((len(HEADER),), np.int64, buffer=mapping, offset=0)
        self.control = {name: i for i, name in enumerate(HEADER)}
        mapped = _Mapped(columns, self.header[:2], ProcessLock(describe["lock_path"]))
        self.storage = ReplayStorage(
            describe["capacity"], describe["obs_dim"], describe["act_dim"],
            obs_shape=tuple(describe["obs_shape"]), shared=mapped,
        )  # fmt: skip

    @classmethod
    def create(
        cls, capacity: int, obs_dim: int, act_dim: int = 0, obs_shape: tuple[int, ...] = ()
    ) -> SharedReplay:
        """A new shared storage (this process owns and finally removes its files)."""
        _, nbytes = _offsets(column_layout(capacity, obs_dim, act_dim, obs_shape))
        base = os.path.join(shared_dir(nbytes), f"actorq-replay-{os.getpid()}-{uuid.uuid4().hex}")
        describe = {
            "path": base, "lock_path": base + ".lock", "capacity": capacity,
            "obs_dim": obs_dim, "act_dim": act_dim, "obs_shape": list(obs_shape),
        }  # fmt: skip
        return cls(describe, owner=True)

    @classmethod
    def attach(cls, describe: dict[str, Any]) -> SharedReplay:
        """The storage another process created, from its `describe()`."""
        return cls(describe, owner=False)

    def describe(self) -> dict[str, Any]:
        """JSON-able: where the files are and the storage's shape."""
        return dict(self._describe)

    def close(self) -> None:
        """Remove the files if this process created them. The mapping and the lock stay
        valid while the storage or any array from it is alive, and go with the last of
        them: unmapping here would leave views that crash."""
        if self.owner:
            self.unlink()

    def unlink(self) -> None:
        """Remove the files; both processes keep their mappings and descriptors, so once
        the other has attached nothing is left behind even if both are killed."""
        for path in (self._describe["path"], self._describe["lock_path"]):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)

    def get(self, name: str) -> int:
        """A header slot (HEADER) as an int."""
        return int(self.header[self.control[name]])

    def set(self, name: str, value: int) -> None:
        self.header[self.control[name]] = value


def _offsets(layout: dict[str, tuple[tuple[int, ...], np.dtype]]) -> tuple[dict[str, int], int]:
    """Byte offset of each column after the counters, and the file's size."""
    offsets, at = {}, ALIGN
    for name, (shape, dtype) in layout.items():
        offsets[name] = at
        at += -(-math.prod(shape) * dtype.itemsize // ALIGN) * ALIGN
    return offsets, at
