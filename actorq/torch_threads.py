"""Torch's intra-op thread count binds per thread: every thread that runs ops sets it.

`torch.set_num_threads` sizes the OpenMP team of the thread that calls it. A thread started
later still runs its ops on one OpenMP thread per core, so a service that sets one thread
in `main()` and then runs its loop in a worker thread gets neither. Measured on this
project's 2-core machine under load: a 64x64 fp32 policy forward took 7.1 ms in such a
worker thread against 0.2 ms in the main thread, and the idle OpenMP workers spin on the
cores the learner needs. Services choose the count once in `main()`; each worker thread
that runs torch ops calls `inherit_torch_threads()` first.
"""

from __future__ import annotations

import sys

_wanted: int | None = None  # the count main() chose, for a torch loaded later


def set_torch_threads(count: int) -> None:
    """The process's torch thread count: applied now if torch is loaded, else by the first
    `inherit_torch_threads(load=True)`. An actor whose policy runs in numpy never loads
    torch, and must not load it (1.5 CPU-s, ~165 MB) just to set this."""
    global _wanted
    _wanted = count
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.set_num_threads(count)


def inherit_torch_threads(load: bool = False) -> int | None:
    """Apply the process's torch thread count to the calling thread; returns the count.
    Without torch loaded this does nothing and returns None, unless `load` (the caller is
    about to run torch ops): then torch is imported here."""
    torch = sys.modules.get("torch")
    if torch is None:
        if not load:
            return None
        import torch  # here, not at module level: the launcher and actors may never need it
    threads = _wanted if _wanted is not None else torch.get_num_threads()
    torch.set_num_threads(threads)
    return threads
