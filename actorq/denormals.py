"""Subnormal ("denormal") floats flushed to zero in the learner process.

Adam's first moment of a parameter whose gradient is zero (the weights into and out of a
ReLU unit no row of the batch activates) shrinks by beta1 = 0.9 each update and spends
~150 updates below float32's smallest normal number, 1.2e-38, before it rounds to zero;
its second moment, by beta2 = 0.999, spends ~16,000. On x86 every arithmetic instruction
that meets such a number takes a microcode assist (tens to hundreds of cycles) unless the
thread's MXCSR flushes them (FTZ) and reads them as zero (DAZ). Measured on DQN 64x64
CartPole (BENCHMARKS 20i, Xeon): the numpy-flat update took 0.19-0.24 ms over 70,000 updates
with 39% of Adam's first moment subnormal, 0.17 ms with them flushed; in the learner
service, updates/s rose 37%.

What flushing changes: values below 1.2e-38 become 0. An Adam step of such a moment is
below 1e-30 of the learning rate, so training is unchanged at any precision a float32
weight can show. torch and numpy both compute in the calling thread's MXCSR, so one call
covers the numpy-flat, torch-eager and compiled CPU paths. The flags are per thread and a
thread inherits its creator's: set them in `main()` before any thread starts.
"""

from __future__ import annotations

import numpy as np

_SMALLEST_NORMAL = np.finfo(np.float32).tiny


def flush_denormals(on: bool) -> bool:
    """Flush (`on`) or keep subnormals on the calling thread and the threads it starts
    from now on; returns whether they are flushed now (False where the CPU has no such
    mode, which leaves arithmetic as it was)."""
    import torch  # here: this module is also imported where torch never loads

    torch.set_flush_denormal(on)
    return denormals_flushed()


def denormals_flushed() -> bool:
    """Whether the calling thread flushes subnormals: read from the arithmetic itself (half
    the smallest normal float32 comes out 0), not from what was asked."""
    with np.errstate(under="ignore"):
        return bool(np.float32(_SMALLEST_NORMAL) * np.float32(0.5) == 0)


def subnormal_mask(values: np.ndarray) -> np.ndarray:
    """Where float32 `values` are subnormal: nonzero and below the smallest normal number."""
    return (values != 0) & (np.abs(values) < _SMALLEST_NORMAL)


def describe() -> str:
    """For the learner's start-up line and summary.json: "flushed" or "kept"."""
    return "flushed" if denormals_flushed() else "kept"
