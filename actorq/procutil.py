"""Child-process hygiene shared by everything that spawns processes."""

from __future__ import annotations

import ctypes
import os
import signal

_PR_SET_PDEATHSIG = 1


def die_with_parent(niceness: int = 0) -> None:
    """Run in a child before exec: the kernel SIGKILLs it when its parent dies (Linux), so
    no service or embedded Redis outlives a killed launcher; optionally lower its priority."""
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except OSError:
        pass  # not Linux: rely on the parent's own shutdown
    if niceness:
        os.nice(niceness)
