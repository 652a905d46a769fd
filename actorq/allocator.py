"""Keep freed tensor memory in the process heap instead of returning it to the kernel.

glibc's malloc serves blocks above its mmap threshold (128 KiB at start) with fresh
mmap'd pages and trims the heap top after frees, so a training step that allocates
the same activation and gradient buffers every update (256x256 fp32 = 256 KiB each)
page-faults on all of them each time. Measured on this project's learner (TD3, 256x256,
batch 256, one thread): 83 page faults per update and ~25% of its CPU time, against
none once the thresholds are raised (bench/bench_learner.py, BENCHMARKS.md section 12).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging

log = logging.getLogger(__name__)

# mallopt parameters from glibc's <malloc.h>
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
_THRESHOLD_BYTES = 256 << 20  # blocks below 256 MiB come from the heap and stay there


def retain_freed_memory() -> bool:
    """Raise glibc's mmap and trim thresholds for this process; False where there is no
    glibc (musl, macOS), which leaves the allocator as it was."""
    name = ctypes.util.find_library("c")
    if name is None:
        return False
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    ok = bool(mallopt(_M_MMAP_THRESHOLD, _THRESHOLD_BYTES))
    ok = bool(mallopt(_M_TRIM_THRESHOLD, 2 * _THRESHOLD_BYTES)) and ok
    if not ok:
        log.warning("mallopt refused the heap thresholds; the allocator is unchanged")
    return ok
