"""Uniform vs prioritized replay, 1 vs 2 learners, through the real services.

    .venv/bin/python bench/bench_replay_modes.py                       # CartPole + Acrobot
    .venv/bin/python bench/bench_replay_modes.py --envs CartPole-v1 --seeds 0,1,2

For each env, seed and (replay, learners) it runs `actorq run` until the env's target
return (evaluator mean of the last 100 episodes) or the budget, interleaving the configs
so machine noise hits them alike. Prints one row per run (wall s, env steps to solve,
learner updates and updates/s, the fraction of learner wall time spent waiting for data
and spent sampling replay rows) and medians per config.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

from arms import run_quietly

TARGETS = {"CartPole-v1": 475.0, "Acrobot-v1": -100.0, "MountainCar-v0": -110.0}
CONFIGS = [("uniform", 1), ("prioritized", 1), ("uniform", 2), ("prioritized", 2)]


def run_one(env: str, replay: str, learners: int, seed: int, out: Path, budget: float) -> dict:
    run_dir = out / f"{env}-{replay}-{learners}L-seed{seed}"
    cmd = [sys.executable, "-m", "actorq", "run", "--env", env, "--replay", replay]
    cmd += ["--learners", str(learners), "--seed", str(seed), "--run-dir", str(run_dir)]
    cmd += ["--target-return", str(TARGETS[env]), "--max-seconds", str(budget)]
    cmd += ["--max-env-steps", "500000"]  # as before --max-seconds alone lifted the limit
    run_quietly(cmd, {})
    return json.loads((run_dir / "summary.json").read_text())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--envs", default="CartPole-v1,Acrobot-v1")
    parser.add_argument("--seeds", default="0,1")
    parser.add_argument(
        "--configs", default="", help="e.g. uniform:1,prioritized:2 (default all 4)"
    )
    parser.add_argument("--max-seconds", type=float, default=300.0, help="budget per run")
    parser.add_argument("--out", default="", help="keep run folders here (default: temp dir)")
    args = parser.parse_args()
    configs = CONFIGS
    if args.configs:
        configs = [(c.split(":")[0], int(c.split(":")[1])) for c in args.configs.split(",")]
    out = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="actorq-replay-modes-"))
    header = (
        f"{'env':<12} {'replay':<11} {'L':>1} {'seed':>4} | {'solved':>6} | {'wall s':>6} | "
        f"{'env steps':>9} | {'updates':>7} | {'upd/s':>5} | {'wait':>5} | {'sample':>6} | ret"
    )
    print(header)
    rows = []
    for env in args.envs.split(","):
        for seed in [int(s) for s in args.seeds.split(",")]:
            for replay, learners in configs:
                s = run_one(env, replay, learners, seed, out, args.max_seconds)
                rows.append((env, replay, learners, s))
                ups = s["learner_updates"] / s["wall_seconds"] if s["wall_seconds"] else 0.0
                print(
                    f"{env:<12} {replay:<11} {learners:>1} {seed:>4} | {s['solved']!s:>6} | "
                    f"{s['wall_seconds']:>6.1f} | {s['env_steps']:>9,} | "
                    f"{s['learner_updates']:>7,} | {ups:>5.0f} | "
                    f"{s['learner_wait_fraction']:>5.2f} | {s['learner_sample_fraction']:>6.3f} | "
                    f"{s['final_mean_return'] or float('nan'):.1f}",
                    flush=True,
                )
    print("\nmedians over seeds (env steps and wall over solved runs only):")
    for env in args.envs.split(","):
        for replay, learners in configs:
            runs = [s for e, r, n, s in rows if (e, r, n) == (env, replay, learners)]
            solved = [s for s in runs if s["solved"]]
            steps = statistics.median(s["env_steps"] for s in solved) if solved else float("nan")
            wall = statistics.median(s["wall_seconds"] for s in solved) if solved else float("nan")
            sample = statistics.median(s["learner_sample_fraction"] for s in runs)
            print(
                f"{env:<12} {replay:<11} {learners}L: {len(solved)}/{len(runs)} solved, "
                f"env steps {steps:,.0f}, wall {wall:.1f} s, sample fraction {sample:.3f}"
            )
    print(f"run folders: {out}")


if __name__ == "__main__":
    main()
