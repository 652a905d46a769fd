"""Child-process hygiene shared by everything that spawns processes."""

from __future__ import annotations

import ctypes
import os
import signal

_PR_SET_PDEATHSIG = 1


def die_with_parent(niceness: int = 0, parent_pid: int | None = None) -> None:
    """Run in a child before exec: the kernel SIGKILLs it when its parent dies (Linux), so
    no service or embedded Redis outlives a killed launcher; optionally lower its priority.
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
