"""Dense vs RLx2-sparse training at equal env steps, through the real services.

`actorq run` per (arm, seed), interleaved seed by seed (dense, sparse, dense, ...), int8
actors, no early stop. Each final checkpoint is then evaluated greedily on the same
seeded episodes in fp32 and in int8 through the real blob path (actorq.ptq), so the
arms differ only in how they trained. Prints per-run rows, then per arm the mean, the
sample std and the range of the final int8 return, its change against dense, the
sparsity reached, the training/inference FLOPs against dense, and the broadcast sizes
(one full blob; the deltas' 10th percentile, median and 90th percentile) over the dense
fp32 blob of the same version.

    nice -n 5 .venv/bin/python bench/bench_sparse.py --algo td3 --env Pendulum-v1 \\
        --seeds 0,1,2 --sparsities 0,0.9 --env-steps 16000 [-- extra actorq run flags]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

from arms import run_quietly

from actorq.ptq import load_policy, run_study
from actorq.study.stats import table


def _run(args: argparse.Namespace, sparsity: float, seed: int, out: Path, extra: list[str]):
    run_dir = out / f"{args.algo}-s{sparsity:g}-seed{seed}"
    cmd = [
        *(sys.executable, "-m", "actorq", "run", "--env", args.env, "--algo", args.algo),
        *("--sparsity", str(sparsity), "--seed", str(seed), "--run-dir", str(run_dir)),
        *("--max-env-steps", str(args.env_steps), "--target-return", "none"),
        *("--max-seconds", str(args.max_seconds), *extra),
    ]
    code = run_quietly(cmd, {})
    if not (run_dir / "summary.json").exists():
        print(f"{sparsity:>8g} {seed:>4} | run failed (exit {code}): {run_dir}/logs")
        return None
    summary = json.loads((run_dir / "summary.json").read_text())
    rows = {r.bits: r.mean for r in run_study(load_policy(run_dir), (32, 8), args.episodes)}
    return summary, rows[32], rows[8]


def _per_fp32(summary: dict, key: str) -> str:
    """A broadcast size over the same version as a dense fp32 blob ("-" if none sent)."""
    dense = summary.get("dense_fp32_bytes") or 0
    value = summary.get(key) or 0
    return f"{value / dense:.3f}" if dense and value else "-"


def _delta_spread(summary: dict) -> str:
    """The stored deltas' 10th percentile, median and 90th percentile over dense fp32."""
    keys = ("delta_bytes_p10", "delta_bytes_median", "delta_bytes_p90")
    return "/".join(_per_fp32(summary, key) for key in keys)


def _spread(values: list[float]) -> str:
    if len(values) < 2:
        return f"{values[0]:8.1f}" if values else "-"
    return (
        f"{statistics.mean(values):8.1f} ± {statistics.stdev(values):5.1f} "
        f"[{min(values):.1f}, {max(values):.1f}]"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--algo", default="td3")
    parser.add_argument("--env", default="Pendulum-v1")
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--sparsities", default="0,0.9", help="arms; 0 = dense")
    parser.add_argument("--env-steps", type=int, default=16000)
    parser.add_argument("--episodes", type=int, default=50, help="final greedy evaluation")
    parser.add_argument("--max-seconds", type=float, default=900.0, help="safety net per run")
    parser.add_argument("--out", default="", help="keep run folders here (default: temp dir)")
    args, extra = parser.parse_known_args()
    extra = [a for a in extra if a != "--"]
    seeds = [int(s) for s in args.seeds.split(",")]
    arms = [float(s) for s in args.sparsities.split(",")]
    out = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="actorq-sparse-"))
    print(
        f"{'sparsity':>8} {'seed':>4} | {'env steps':>9} | {'updates':>7} | {'wall s':>6} | "
        f"{'eval last 100':>13} | {'final fp32':>10} | {'final int8':>10} | "
        f"{'actor/critic 0s':>15} | {'train FLOPs':>11} | {'infer FLOPs':>11} | "
        f"{'blob/fp32':>9} | {'delta p10/med/p90 / fp32':>24}"
    )
    finals: dict[float, list[float]] = {a: [] for a in arms}
    facts: dict[float, list[dict]] = {a: [] for a in arms}
    for seed in seeds:
        for arm in arms:
            result = _run(args, arm, seed, out, extra)
            if result is None:
                continue
            s, fp32, int8 = result
            finals[arm].append(int8)
            facts[arm].append(s)
            sp = s.get("sparsity") or {}
            train = s["train_flops"] / s["dense_train_flops"]
            infer = s["inference_flops"] / s["dense_inference_flops"]
            print(
                f"{arm:>8g} {seed:>4} | {s['env_steps']:>9,} | {s['learner_updates']:>7,} | "
                f"{s['wall_seconds']:>6.1f} | {s['final_mean_return'] or 0:>13.1f} | "
                f"{fp32:>10.1f} | {int8:>10.1f} | "
                f"{sp.get('actor', 0):>7.3f}/{sp.get('critic', 0):<7.3f} | "
                f"{train:>10.3f}x | {infer:>10.3f}x | {_per_fp32(s, 'blob_bytes'):>9} | "
                f"{_delta_spread(s):>24}",
                flush=True,
            )
    print(f"\nfinal int8 greedy return ({args.episodes} episodes each): mean ± std [min, max]")
    dense = statistics.mean(finals[arms[0]]) if finals[arms[0]] else None
    for arm in arms:
        if not finals[arm]:
            print(f"{arm:>8g}: no run finished")
            continue
        mean = statistics.mean(finals[arm])
        gap = f"{100 * (mean - dense) / abs(dense):+.1f}% vs {arms[0]:g}" if dense else ""
        train = statistics.mean(f["train_flops"] / f["dense_train_flops"] for f in facts[arm])
        print(f"{arm:>8g}: {_spread(finals[arm])}  {gap}  train FLOPs {train:.3f}x dense")
    print("\nIQM with 95% stratified bootstrap CIs (Agarwal et al. 2021; actorq.study.stats):")
    print("\n".join(table({f"{a:g}": finals[a] for a in arms}, f"{arms[0]:g}")))
    print(f"run folders: {out}")


if __name__ == "__main__":
    main()
