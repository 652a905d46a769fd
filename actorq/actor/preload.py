"""What an actor's compiled fast path loads, imported once by the zygote for every
service it forks (actorq.launch.zygote `PRELOAD`, last): numba, scipy's BLAS on one
thread and the cached kernels (`actorq.actor.fast_act.warm_up`). Each forked actor then
starts with them, instead of spending ~1.3 s of CPU on them before its first env step
(2 cores, BENCHMARKS.md 12e). Nothing here starts a thread: the kernels are `nogil`
single-threaded code, and OpenBLAS is loaded with a pool of one.

Where numba or scipy is missing this loads nothing, as `fused_available` decides for the
actor itself; an actor with ACTORQ_FUSED_ACT=0 ignores what was loaded.
"""

from __future__ import annotations

import sys

from actorq.actor.fast_act import fused_available, warm_up

try:
    if fused_available(True):  # scipy's OpenBLAS with a pool of one; the environment kept
        warm_up()
except Exception as exc:  # the zygote serves every service: an actor retries this itself
    print(f"actorq.actor.preload: the actors' kernels not preloaded: {exc!r}", file=sys.stderr)
