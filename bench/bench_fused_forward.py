"""The fused int8 forward (actorq.quant.fused_mlp) and numpy's (actorq.quant.numpy_mlp)
against the torch module, by net width and precision.

Same process, same policy and inputs, interleaved: median microseconds per forward of a
fixed CartPole policy with two hidden layers of each width, at batch 16 and 128, one
torch thread. Run it with and without OPENBLAS_NUM_THREADS=1 (the fused forward's matrix
products go through scipy's OpenBLAS). BENCHMARKS.md 23j and 24c; their figures set
`FUSE_MAX_LAYER_WEIGHTS` and `NUMPY_MAX_LAYER_WEIGHTS`, the sizes above which actors keep
the torch module.

`--min-max` instead times the int8 quantizer's two (min, max) passes (four running pairs
over the flat array; per-column extremes) on a [batch, width] activation, and the fused
forward with each (BENCHMARKS.md 23l; `MIN_MAX_BY_COLUMN` picks per CPU).

    .venv/bin/python bench/bench_fused_forward.py [--widths 64,128,256,512,1024]
    .venv/bin/python bench/bench_fused_forward.py --precisions int8,fp32 --batches 8,32,128
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
from actorq.quant.numpy_mlp import numpy_mlp


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
    parser.add_argument("--precisions", default="int8", help="int8, int4, fp16, fp32")
    parser.add_argument("--min-max", action="store_true", help="the two min/max passes")
    args = parser.parse_args()
    torch.set_num_threads(1)
    rng = np.random.default_rng(0)
    if args.min_max:
        compare_min_max(args, rng)
        return
    print("| width | batch | precision | fused us | numpy us | torch us | fused / torch "
          "| numpy / torch |\n|---:|---:|---|---:|---:|---:|---:|---:|")  # fmt: skip
    for width in (int(w) for w in args.widths.split(",")):
        for precision in args.precisions.split(","):
            policy = make_policy("CartPole-v1", (width, width), precision, seed=5)
            for batch in (int(b) for b in args.batches.split(",")):
                obs = rng.normal(size=(batch, 4)).astype(np.float32)
                print(forward_row(policy, obs, width, precision), flush=True)


def forward_row(policy, obs: np.ndarray, width: int, precision: str) -> str:
    """One table row: each runner at every size (no size limit), "-" where it cannot run."""
    runners = {
        "fused": fuse_mlp(policy.arrays, max_layer_weights=None),  # None: not int8
        "numpy": numpy_mlp(policy.arrays, max_layer_weights=None),
    }
    module = policy.module
    calls = max(10, 20_000 // (width * width // 4096 + 1))
    us: dict[str, float | None] = {}
    with torch.inference_mode():
        for name, runner in runners.items():
            if runner is not None:
                runner(obs)  # compiled or loaded from the cache before timing
            us[name] = None if runner is None else median_us(lambda f=runner: f(obs), calls)
        torch_us = median_us(lambda: module.forward(torch.from_numpy(obs)), calls)
    cells = [f"{us[n]:.1f}" if us[n] is not None else "-" for n in runners]
    ratios = [f"{us[n] / torch_us:.2f}" if us[n] is not None else "-" for n in runners]
    row = [str(width), str(len(obs)), precision, *cells, f"{torch_us:.1f}", *ratios]
    return "| " + " | ".join(row) + " |"


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
