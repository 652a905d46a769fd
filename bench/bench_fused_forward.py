"""The fused int8 forward (actorq.quant.fused_mlp) against the torch module, by net width.

Same process, same policy and inputs, interleaved: median microseconds per forward of a
fixed int8 CartPole policy with two hidden layers of each width, at batch 16 and 128, one
torch thread. Run it with and without OPENBLAS_NUM_THREADS=1 (the fused forward's matrix
products go through scipy's OpenBLAS). BENCHMARKS.md 23j; its figures set
`FUSE_MAX_LAYER_WEIGHTS`, the size above which actors keep the torch module.

`--min-max` instead times the int8 quantizer's two (min, max) passes (four running pairs
over the flat array; per-column extremes) on a [batch, width] activation, and the fused
forward with each (BENCHMARKS.md 23l; `MIN_MAX_BY_COLUMN` picks per CPU).

    .venv/bin/python bench/bench_fused_forward.py [--widths 64,128,256,512,1024]
    .venv/bin/python bench/bench_fused_forward.py --min-max --widths 64 --batches 32,128
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import numpy as np
import torch

from actorq.actor.fixed_policy import make_policy
from actorq.quant import fused_mlp
from actorq.quant.fused_mlp import fuse_mlp


def median_us(call: Callable[[], object], calls: int, blocks: int = 7) -> float:
    times = []
    for _ in range(blocks):
        started = time.perf_counter()
        for _ in range(calls):
            call()
        times.append((time.perf_counter() - started) / calls * 1e6)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--widths", default="64,128,256,512,1024")
    parser.add_argument("--batches", default="16,128")
    parser.add_argument("--min-max", action="store_true", help="the two min/max passes")
    args = parser.parse_args()
    torch.set_num_threads(1)
    rng = np.random.default_rng(0)
    if args.min_max:
        compare_min_max(args, rng)
        return
    print("| width | batch | fused us | torch us | fused / torch |\n|---:|---:|---:|---:|---:|")
    for width in (int(w) for w in args.widths.split(",")):
        policy = make_policy("CartPole-v1", (width, width), "int8", seed=5)
        fused = fuse_mlp(policy.arrays, max_layer_weights=None)  # the kernel at every size
        for batch in (int(b) for b in args.batches.split(",")):
            obs = rng.normal(size=(batch, 4)).astype(np.float32)
            fused(obs)  # compiled or loaded from the cache before timing
            calls = max(10, 20_000 // (width * width // 4096 + 1))
            module = policy.module
            with torch.inference_mode():
                a = median_us(lambda f=fused, x=obs: f(x), calls)
                b = median_us(lambda m=module, x=obs: m.forward(torch.from_numpy(x)), calls)
            print(f"| {width} | {batch} | {a:.1f} | {b:.1f} | {a / b:.2f} |", flush=True)


def compare_min_max(args: argparse.Namespace, rng: np.random.Generator) -> None:
    """Both (min, max) forms alone, then the whole fused forward with each (the layout's
    flag flipped), interleaved in blocks; which one this CPU gets."""
    print(f"MIN_MAX_BY_COLUMN on this CPU: {fused_mlp.MIN_MAX_BY_COLUMN}")
    print("| width | batch | pairs us | by column us | forward, pairs us | forward, by column us |")
    print("|---:|---:|---:|---:|---:|---:|")
    for width in (int(w) for w in args.widths.split(",")):
        fused = fuse_mlp(make_policy("CartPole-v1", (width, width), "int8", seed=5).arrays)
        if fused is None:
            print(f"| {width} | | not fused at this width | | | |")
            continue
        layouts = [np.array(fused.layout) for _ in range(2)]
        layouts[0][3], layouts[1][3] = 0, 1
        for batch in (int(b) for b in args.batches.split(",")):
            x = np.abs(rng.normal(size=(batch, width))).astype(np.float32)
            obs = rng.normal(size=(batch, 4)).astype(np.float32)
            params = fused.params
            calls = [
                lambda x=x: fused_mlp.min_max(x),
                lambda x=x: fused_mlp.min_max_by_column(x),
                *(
                    lambda o=obs, w=w: fused_mlp.mlp_forward(o, params, w)  # noqa: B023
                    for w in layouts
                ),
            ]
            for call in calls:
                call()  # compiled or loaded from the cache before timing
            us = [median_us(call, 3000) for call in calls]
            print(f"| {width} | {batch} | " + " | ".join(f"{u:.2f}" for u in us) + " |")


if __name__ == "__main__":
    main()
