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


def inherit_torch_threads() -> int:
    """Apply the process's torch thread count to the calling thread; returns the count."""
    import torch  # here, not at module level: the launcher imports actorq.service, not torch

    threads = torch.get_num_threads()  # the value main() set, whichever thread asks
    torch.set_num_threads(threads)
    return threads
