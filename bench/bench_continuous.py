"""fp32 vs int8 (or any) actors at equal env steps for a continuous-control algorithm,
through the real services: `actorq run` per (precision, seed), interleaved, no early stop.
Each final checkpoint is then evaluated greedily in fp32 on the same seeded episodes
(actorq.ptq), so only the actors' precision during training differs. "eval last 100" is
the evaluator's own running mean; "eval eps" says how many episodes it played, i.e. how
much of the run those last 100 span.

    .venv/bin/python bench/bench_continuous.py --algo td3 --env Pendulum-v1 \\
        --seeds 0,1,2 --precisions fp32,int8 --env-steps 15000 [-- extra actorq run flags]

An arm may carry ACTORQ_* settings (bench/arms.py): `--precisions fp32,int4,int4@ACTORQ_GUARD=true`.
Any algorithm works (`--algo dqn --env CartPole-v1`); the final evaluation is fp32.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

from arms import arm_env, arm_folder, run_quietly, split_arms

from actorq.ptq import load_policy, run_study
from actorq.study.stats import table


def _run(args: argparse.Namespace, arm: str, seed: int, out: Path, extra: list[str]):
    precision, env = arm_env(arm)
    run_dir = out / f"{args.algo}-{arm_folder(arm)}-seed{seed}"
    cmd = [
        *(sys.executable, "-m", "actorq", "run", "--env", args.env, "--algo", args.algo),
        *("--precision", precision, "--seed", str(seed), "--run-dir", str(run_dir)),
        *("--max-env-steps", str(args.env_steps), "--target-return", "none"),
        *("--max-seconds", str(args.max_seconds), *extra),
    ]
    code = run_quietly(cmd, env)
    if not (run_dir / "summary.json").exists():  # a service failed to start: no results
        print(f"{arm:>9} {seed:>4} | run failed (exit {code}): {run_dir}/logs")
        return None
    summary = json.loads((run_dir / "summary.json").read_text())
    final = run_study(load_policy(run_dir), (32,), episodes=args.episodes)[0]
    return summary, final.mean


def _gap(value: float, reference: float) -> float:
    """Percent difference from `reference`, + = better (returns may be negative)."""
    return 100 * (value - reference) / abs(reference) if reference else 0.0


def _arm_summary(name: str, values: list[float], ref_name: str, ref: list[float]) -> str:
    """Mean +- sd, median, and Welch's t against the reference arm: with a few seeds a
    single run that fails to learn moves the mean, so the median is shown beside it."""
    if not values:
        return f"{name:>9}: no run finished"
    mean, median = statistics.mean(values), statistics.median(values)
    spread = statistics.stdev(values) if len(values) > 1 else 0.0
    line = (
        f"{name:>9}: mean {mean:8.1f} +- {spread:.1f} (sd over {len(values)} seeds; "
        f"{_gap(mean, statistics.mean(ref or [0.0])):+.1f}% vs {ref_name}), median {median:.1f} "
        f"({_gap(median, statistics.median(ref or [0.0])):+.1f}%)"
    )
    if name != ref_name and len(values) > 1 and len(ref) > 1:
        variance_of_means = statistics.variance(values) / len(values)
        variance_of_means += statistics.variance(ref) / len(ref)
        se = variance_of_means**0.5
        if se > 0:
            line += f", Welch t {(mean - statistics.mean(ref)) / se:+.2f}"
    return line + ("" if name != ref_name else "; + = better")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--algo", default="td3")
    parser.add_argument("--env", default="Pendulum-v1")
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--precisions", default="fp32,int8")
    parser.add_argument("--env-steps", type=int, default=15000)
    parser.add_argument("--episodes", type=int, default=50, help="final greedy evaluation")
    parser.add_argument("--max-seconds", type=float, default=600.0, help="safety net per run")
    parser.add_argument("--out", default="", help="keep run folders here (default: temp dir)")
    args, extra = parser.parse_known_args()
    extra = [a for a in extra if a != "--"]
    seeds = [int(s) for s in args.seeds.split(",")]
    precisions = split_arms(args.precisions)
    out = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="actorq-cont-"))
    print(
        f"{'precision':>9} {'seed':>4} | {'env steps':>9} | {'updates':>7} | {'wall s':>6} | "
        f"{'eval eps':>8} | {'eval last 100':>13} | {'final fp32 eval':>15}"
    )
    finals: dict[str, list[float]] = {p: [] for p in precisions}
    for seed in seeds:
        for precision in precisions:
            result = _run(args, precision, seed, out, extra)
            if result is None:
                continue
            s, final = result
            finals[precision].append(final)
            print(
                f"{precision:>9} {seed:>4} | {s['env_steps']:>9,} | {s['learner_updates']:>7,} | "
                f"{s['wall_seconds']:>6.1f} | {s['eval_episodes']:>8,} | "
                f"{s['final_mean_return'] or 0:>13.1f} | "
                f"{final:>15.1f}",
                flush=True,
            )
    print(f"\nfinal return over the seeds that ran ({args.episodes} episodes each):")
    for precision in precisions:
        print(_arm_summary(precision, finals[precision], precisions[0], finals[precisions[0]]))
    print("\nIQM with 95% stratified bootstrap CIs (Agarwal et al. 2021; actorq.study.stats):")
    print("\n".join(table(finals, precisions[0])))
    print(f"run folders: {out}")


if __name__ == "__main__":
    main()
