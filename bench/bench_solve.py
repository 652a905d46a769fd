"""Time to solve CartPole-v1 through the real services: `actorq run` per (precision, seed),
interleaved so machine noise hits every precision alike. Prints one row per run and a
median per precision (wall seconds, env steps, updates, CPU seconds of all services).

    .venv/bin/python bench/bench_solve.py [--seeds 0,1,2] [--precisions int8,fp32] [-- extra flags]
    .venv/bin/python bench/bench_solve.py --seeds 1,2,3,4,5 --precisions int8,sb3-ppo,sb3-dqn

An actorq arm is a precision, optionally with ACTORQ_* variables for that arm's services:
`--precisions int8,int8@ACTORQ_DQN_FLAT=false` compares the numpy DQN update with torch's;
an arm with several settings: `int8@ACTORQ_X=1,ACTORQ_Y=2`.

SB3 contestants (bench/sb3_contestant.py, zoo settings) need stable-baselines3 in the venv:
`make bench-solve` installs it there; it is never a dependency of actorq itself.
Both criteria are wall seconds from the moment the bench launched the process.
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from arms import arm_env, arm_folder, run_quietly, split_arms

from actorq.study.stats import table


def _run(arm: str, seed: int, out: Path, extra: list[str], budget: float) -> dict:
    precision, env = arm_env(arm)
    run_dir = out / f"{arm_folder(arm)}-seed{seed}"
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
        # The env-step budget these figures were taken with (--max-seconds alone now
        # means no env-step limit: docs/ingest-and-run-defaults.md).
        "--max-env-steps",
        "500000",
        *extra,
    ]
    run_quietly(cmd, env)
    s = json.loads((run_dir / "summary.json").read_text())
    s["run_dir"] = str(run_dir)
    return s


def _actorq_times(run_dir: Path, launched: float, s: dict, target: float) -> dict:
    """Seconds from launch to the first evaluator round averaging >= target, and to the
    evaluator's 100-episode mean >= target (the run's stop rule), from the run folder."""
    # The run's clock starts inside `actorq run`; config.json is written right after, so
    # its mtime - launch is the launcher's own start-up (counted, conservatively).
    offset = (run_dir / "config.json").stat().st_mtime - launched
    rounds: dict[int, list[tuple[float, float]]] = {}
    with (run_dir / "episodes.csv").open() as f:
        for r in csv.DictReader(f):
            if r["kind"] == "eval":
                rounds.setdefault(int(r["policy_version"]), []).append(
                    (float(r["wall_seconds"]), float(r["return"]))
                )
    first_eval = None
    for version in sorted(rounds):
        episodes = sorted(rounds[version])[:25]
        if len(episodes) == 25 and sum(r for _, r in episodes) / 25 >= target:
            first_eval = offset + episodes[-1][0]
            break
    solved = offset + s["wall_seconds"] if s["solved"] else None
    return {"first_eval": first_eval, "train100": solved}


def _sb3_times(algo: str, env: str, seed: int, target: float, budget: float) -> dict:
    launched = time.time()
    cmd = [
        sys.executable,
        str(Path(__file__).with_name("sb3_contestant.py")),
        "--algo",
        algo,
        "--env",
        env,
        "--seed",
        str(seed),
        "--target",
        str(target),
        "--max-seconds",
        str(budget),
        "--launched",
        str(launched),
    ]
    out = subprocess.run(cmd, capture_output=True, text=True, check=False)
    lines = [line for line in out.stdout.splitlines() if line.startswith("{")]
    if not lines:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{out.stderr[-2000:]}")
    return json.loads(lines[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument(
        "--precisions",
        default="int8,fp32",
        help="actorq arms by actor precision, plus SB3 contestants sb3-ppo, sb3-dqn, sb3-td3",
    )
    parser.add_argument("--env", default="CartPole-v1")
    parser.add_argument("--target", type=float, default=475.0)
    parser.add_argument("--max-seconds", type=float, default=240.0, help="budget per run")
    parser.add_argument("--out", default="", help="keep run folders here (default: temp dir)")
    args, extra = parser.parse_known_args()
    extra = [a for a in extra if a != "--"]
    seeds = [int(s) for s in args.seeds.split(",")]
    arms = split_arms(args.precisions)
    out = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="actorq-solve-"))
    print(f"# bench_solve {args.env}, target {args.target:g}, CPU {cpu_info()}")
    print(
        "| arm | seed | first greedy round >= target (s) | 100-episode mean >= target (s) "
        "| env steps | cpu s |"
    )
    print("|---|---|---|---|---|---|")
    times: dict[str, list[tuple[float | None, float | None]]] = {a: [] for a in arms}
    for seed in seeds:
        for arm in arms:
            if arm.startswith("sb3-"):
                r = _sb3_times(arm[4:], args.env, seed, args.target, args.max_seconds)
                steps, cpu = r.get("train100_steps") or r.get("first_eval_steps"), None
            else:
                launched = time.time()
                s = _run(arm, seed, out, ["--env", args.env, *extra], args.max_seconds)
                r = _actorq_times(Path(s["run_dir"]), launched, s, args.target)
                steps, cpu = s["env_steps"], sum(s.get("cpu_seconds", {}).values())
            times[arm].append((r["first_eval"], r["train100"]))
            print(
                f"| {arm} | {seed} | {_fmt(r['first_eval'])} | {_fmt(r['train100'])} | "
                f"{steps or '-'} | {_fmt(cpu)} |",
                flush=True,
            )
    print("\n| arm | median first greedy round (s) | median 100-episode mean (s) | runs |")
    print("|---|---|---|---|")
    for arm, pairs in times.items():
        firsts = [a for a, _ in pairs if a is not None]
        hundreds = [b for _, b in pairs if b is not None]
        print(
            f"| {arm} | {_median(firsts, len(pairs))} | {_median(hundreds, len(pairs))} "
            f"| {len(pairs)} |"
        )
    print(
        f"\nSeconds to the 100-episode mean, IQM with 95% stratified bootstrap CIs; a run that"
        f" never got there counts as the budget ({args.max_seconds:g} s), so its arm's figure"
        " is a lower bound (Agarwal et al. 2021; actorq.study.stats):"
    )
    budget = {a: [b if b is not None else args.max_seconds for _, b in p] for a, p in times.items()}
    print("\n".join(table(budget, arms[0], higher_is_better=False)))
    print(f"run folders: {out}")


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def _median(values: list[float], runs: int) -> str:
    # A run that never got there counts as slower than every run that did.
    if len(values) * 2 <= runs:
        return f"not reached in {runs - len(values)}/{runs}"
    padded = sorted(values) + [float("inf")] * (runs - len(values))
    return f"{statistics.median(padded):.1f}"


def cpu_info() -> str:
    from bench_learner import cpu_info as info

    return info()


if __name__ == "__main__":
    main()
