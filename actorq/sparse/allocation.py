"""Erdos-Renyi per-layer sparsity from one global target (Mocanu et al. 2018; RLx2 uses it).

A layer of shape [out, in] gets density proportional to (in + out) / (in * out): small
layers (the first and last of an MLP) stay denser, the wide hidden layers sparser. The
proportionality constant is chosen so that the active weights of all layers sum to the
global target; a layer whose density would pass 1 is made dense and the rest re-solved
(the same loop as RLx2's `sparse_set`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence


def erdos_renyi_densities(shapes: Sequence[tuple[int, int]], sparsity: float) -> list[float]:
    """Density (fraction of weights kept) of each [out, in] layer for a global `sparsity`."""
    if not 0.0 <= sparsity < 1.0:
        raise ValueError(f"sparsity must be in [0, 1), got {sparsity!r}")
    if not shapes or any(len(s) != 2 or min(s) < 1 for s in shapes):
        raise ValueError(f"expected a list of [out, in] layer shapes, got {list(shapes)}")
    sizes = [out * inp for out, inp in shapes]
    raw = [(out + inp) / (out * inp) for out, inp in shapes]
    dense: set[int] = set()
    while True:
        budget = (1.0 - sparsity) * sum(sizes) - sum(sizes[i] for i in dense)
        scaled = sum(raw[i] * sizes[i] for i in range(len(shapes)) if i not in dense)
        if scaled <= 0 or budget <= 0:  # every layer dense already covers the target
            return [1.0 if i in dense else max(budget, 0.0) for i in range(len(shapes))]
        epsilon = budget / scaled
        over = [i for i in range(len(shapes)) if i not in dense and raw[i] * epsilon > 1.0]
        if not over:
            return [1.0 if i in dense else raw[i] * epsilon for i in range(len(shapes))]
        dense.update(over)


def active_counts(shapes: Sequence[tuple[int, int]], sparsity: float) -> list[int]:
    """Whole numbers of active weights per layer that sum to round((1 - sparsity) * total).

    Largest-remainder rounding of the Erdos-Renyi densities, so the network as a whole
    meets the target exactly; every layer keeps at least one weight.
    """
    sizes = [out * inp for out, inp in shapes]
    wanted = [d * n for d, n in zip(erdos_renyi_densities(shapes, sparsity), sizes, strict=True)]
    target = round((1.0 - sparsity) * sum(sizes))
    counts = [min(n, max(1, math.floor(w))) for w, n in zip(wanted, sizes, strict=True)]
    order = sorted(range(len(sizes)), key=lambda i: wanted[i] - math.floor(wanted[i]), reverse=True)
    for i in order * 2:  # hand out the remainder, one weight per layer per round
        if sum(counts) >= target:
            break
        if counts[i] < sizes[i]:
            counts[i] += 1
    return counts
