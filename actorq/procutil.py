"""Child-process hygiene shared by everything that spawns processes."""

from __future__ import annotations

import contextlib
import ctypes
import functools
import os
import shutil
import signal
import subprocess
from collections.abc import Callable, Iterator

_PR_SET_PDEATHSIG = 1


def die_with_parent(
    niceness: int = 0, parent_pid: int | None = None, cpus: tuple[int, ...] = ()
) -> None:
    """Run in a child before exec: the kernel SIGKILLs it when its parent dies (Linux), so
    no service or embedded Redis outlives a killed launcher; optionally lower its priority
    and keep it (and every thread it starts) on `cpus`.
    With `parent_pid` (the forking process's pid, read before the fork) a child whose
    parent died before this call, and so would get no signal, kills itself at once."""
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except OSError:
        pass  # not Linux: rely on the parent's own shutdown
    if parent_pid is not None and os.getppid() != parent_pid:
        os.kill(os.getpid(), signal.SIGKILL)
    if niceness:
        os.nice(niceness)
    if cpus:
        os.sched_setaffinity(0, cpus)


# The cores a learner's ingest process runs on, set by `actorq run --pin-learner` for the
# learner it pins (actorq.launch.cores.pin): the other services' cores, not the learner's.
INGEST_CORES_ENV = "ACTORQ_INGEST_CORES"


def format_cores(cores: tuple[int, ...]) -> str:
    """`0-3,6` style, as taskset and /sys print core lists."""
    spans: list[list[int]] = []
    for core in cores:
        if spans and core == spans[-1][1] + 1:
            spans[-1][1] = core
        else:
            spans.append([core, core])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in spans)


def parse_cores(text: str) -> tuple[int, ...]:
    """`0-3,6` as (0, 1, 2, 3, 6); ValueError naming the text and the expected form."""
    cores: set[int] = set()
    try:
        for part in text.split(","):
            first, dash, last = part.strip().partition("-")
            low = int(first)
            high = int(last) if dash else low
            if low < 0 or high < low:
                raise ValueError
            cores.update(range(low, high + 1))
    except ValueError:
        raise ValueError(f"expected a core list such as 0-3,6, got {text!r}") from None
    return tuple(sorted(cores))


def bound_to_parent(
    niceness: int = 0, cpus: tuple[int, ...] = ()
) -> tuple[list[str], Callable[[], None] | None]:
    """(command prefix, preexec_fn) for `subprocess.Popen` giving a child what
    `die_with_parent` does: util-linux's `setpriv --pdeathsig KILL`, coreutils' `nice` and
    util-linux's `taskset`, each exec'ing the next, so the child's pid is the program's
    own; where one is missing, no prefix and `die_with_parent` as the preexec_fn.

    Why not always the preexec_fn: it forces a full fork() and runs Python in the child of
    a launcher whose gRPC threads are live; one such child (an embedded Redis) died of
    SIGABRT before exec, in gRPC's fork handling. Without a preexec_fn subprocess uses
    vfork + exec: no fork handlers, no Python in the child."""
    wanted = [["setpriv", "--pdeathsig", "KILL", "--"]]
    if niceness:
        wanted.append(["nice", "-n", str(niceness)])
    if cpus:
        wanted.append(["taskset", "--cpu-list", ",".join(map(str, cpus))])
    prefix = []
    for tool, *args in wanted:
        path = shutil.which(tool)
        if path is None:
            return [], functools.partial(die_with_parent, niceness, cpus=cpus)
        prefix += [path, *args]
    return prefix, None


@contextlib.contextmanager
def sigterm_interrupts() -> Iterator[None]:
    """Within this block SIGTERM raises KeyboardInterrupt, as Ctrl-C does, so one handler
    stops children cleanly on either (main thread only)."""
    previous = signal.signal(signal.SIGTERM, _interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _interrupt(signum: int, _frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def wait_or_stop(child: subprocess.Popen, stop_seconds: float = 120.0) -> int:
    """`child`'s exit code. If the wait is interrupted, the child gets SIGTERM and
    `stop_seconds` to stop its own services (then SIGKILL), and the interrupt goes on, so
    no `actorq run` outlives the process that started it."""
    try:
        return child.wait()
    except KeyboardInterrupt:
        stop_child(child, stop_seconds)
        raise


def stop_child(child: subprocess.Popen, timeout: float) -> int:
    """SIGTERM `child` (if it still runs), SIGKILL it after `timeout`; reap it."""
    if child.poll() is None:
        child.terminate()
    try:
        return child.wait(timeout)
    except subprocess.TimeoutExpired:
        child.kill()
        return child.wait()
