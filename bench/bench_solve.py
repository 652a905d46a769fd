"""Time to solve CartPole-v1 through the real services: `actorq run` per (precision, seed),
interleaved so machine noise hits every precision alike. Prints one row per run and a
median per precision (wall seconds, env steps, updates, CPU seconds of all services).

    .venv/bin/python bench/bench_solve.py [--seeds 0,1,2] [--precisions int8,fp32] [-- extra flags]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path


def _run(precision: str, seed: int, out: Path, extra: list[str], budget: float) -> dict:
    run_dir = out / f"{precision}-seed{seed}"
    cmd = [
        sys.executable,
        "-m",
        "actorq",
        "run",
        "--precision",
        precision,
        "--seed",
        str(seed),
        "--run-dir",
        str(run_dir),
        "--max-seconds",
        str(budget),
        *extra,
    ]
    subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    return json.loads((run_dir / "summary.json").read_text())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--precisions", default="int8,fp32")
    parser.add_argument("--max-seconds", type=float, default=240.0, help="budget per run")
    parser.add_argument("--out", default="", help="keep run folders here (default: temp dir)")
    args, extra = parser.parse_known_args()
    extra = [a for a in extra if a != "--"]
    seeds = [int(s) for s in args.seeds.split(",")]
    precisions = args.precisions.split(",")
    out = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="actorq-solve-"))
    rows = []
    print(
        f"{'precision':>9} {'seed':>4} | {'solved':>6} | {'wall s':>7} | {'env steps':>9} | "
        f"{'updates':>7} | {'eval ret':>8} | {'cpu s':>6} | blob B"
    )
    for seed in seeds:
        for precision in precisions:
            s = _run(precision, seed, out, extra, args.max_seconds)
            cpu = sum(s.get("cpu_seconds", {}).values())
            rows.append((precision, s, cpu))
            print(
                f"{precision:>9} {seed:>4} | {s['solved']!s:>6} | {s['wall_seconds']:>7.1f} | "
                f"{s['env_steps']:>9,} | {s['learner_updates']:>7,} | "
                f"{s['final_mean_return'] or 0:>8.1f} | {cpu:>6.1f} | {s['blob_bytes']:,}",
                flush=True,
            )
    print("\nmedians (solved runs only):")
    for precision in precisions:
        done = [(s, c) for p, s, c in rows if p == precision and s["solved"]]
        if not done:
            print(f"{precision:>9}: no run solved")
            continue
        wall = statistics.median(s["wall_seconds"] for s, _ in done)
        steps = statistics.median(s["env_steps"] for s, _ in done)
        cpu = statistics.median(c for _, c in done)
        print(
            f"{precision:>9}: {len(done)}/{len(seeds)} solved, wall {wall:.1f} s, "
            f"env steps {steps:,.0f}, CPU {cpu:.1f} s"
        )
    print(f"run folders: {out}")


if __name__ == "__main__":
    main()
