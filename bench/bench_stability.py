"""Does DQN stay solved? `actorq run --target-return none` per (arm, seed), interleaved.

For each run, the evaluator's greedy episodes (episodes.csv, kind "eval") are ordered by
the env step they ended at; the rolling mean of the last 100 is followed from the first
time it reaches --solve-at (475 on CartPole-v1) for --window env steps (200k). A run
"stays solved" when every later 100-episode mean in that window is >= --keep-above (450).

Arms are sets of ACTORQ_* variables for the services, e.g.

    .venv/bin/python bench/bench_stability.py --seeds 1,2,3 \\
        --arm base: --arm decay:ACTORQ_DQN_LR_FINAL=2.5e-4 --arm fp32:--precision=fp32

(`make bench-stability` runs the defaults, which settle once solved, against `--settle-at none`).
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
import tempfile
from collections import deque
from pathlib import Path

from arms import run_quietly


def parse_arm(text: str) -> tuple[str, dict[str, str], list[str]]:
    """NAME:ACTORQ_X=V,--flag=W -> (name, environment, extra `actorq run` arguments)."""
    name, _, assignments = text.partition(":")
    env, flags = {}, []
    for item in filter(None, assignments.split(",")):
        key, sep, value = item.partition("=")
        if key.startswith("--") and sep:
            flags += [key, value]
        elif key.startswith("ACTORQ_") and sep:
            env[key] = value
        else:
            raise SystemExit(f"--arm {text!r}: expected NAME:ACTORQ_X=V[,--flag=W,...]")
    return name, env, flags


def eval_curve(run_dir: Path) -> list[tuple[int, float]]:
    """(env step, mean of the last 100 evaluator returns) after each evaluator episode."""
    with (run_dir / "episodes.csv").open() as f:
        rows = [r for r in csv.DictReader(f) if r["kind"] == "eval"]
    rows.sort(key=lambda r: int(r["total_env_steps"]))
    last: deque[float] = deque(maxlen=100)
    curve = []
    for r in rows:
        last.append(float(r["return"]))
        if len(last) == 100:
            curve.append((int(r["total_env_steps"]), sum(last) / 100))
    return curve


def stability(curve: list[tuple[int, float]], solve_at: float, window: int) -> dict:
    first = next((step for step, mean in curve if mean >= solve_at), None)
    if first is None:
        return {"solved_at": None, "min_after": None, "covered": 0}
    after = [(s, m) for s, m in curve if first < s <= first + window]
    # Watched up to the evaluator's last reading (inside the window or past it): once
    # settled, its rounds land ~15-25k env steps apart, so the last one inside the
    # window can fall short of its end in a run that went on well past it.
    covered = min(curve[-1][0], first + window) - first
    return {
        "solved_at": first,
        "min_after": min((m for _, m in after), default=None),
        "covered": covered,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", default="1,2,3")
    p.add_argument("--arm", action="append", default=[], help="NAME:ACTORQ_X=V,...")
    p.add_argument("--max-env-steps", type=int, default=400_000)
    p.add_argument("--solve-at", type=float, default=475.0)
    p.add_argument("--keep-above", type=float, default=450.0)
    p.add_argument("--window", type=int, default=200_000, help="env steps watched after")
    p.add_argument("--out", default="", help="keep run folders here (default: temp dir)")
    args, extra = p.parse_known_args()
    arms = [parse_arm(a) for a in (args.arm or ["defaults:"])]
    out = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="actorq-stab-"))
    print(
        f"| arm | seed | first 100-ep mean >= {args.solve_at:g} at env step | lowest later mean "
        f"| env steps watched | stays >= {args.keep_above:g} |"
    )
    print("|---|---|---|---|---|---|")
    for seed in (int(s) for s in args.seeds.split(",")):
        for name, env, flags in arms:
            run_dir = out / f"{name}-seed{seed}"
            if not (run_dir / "summary.json").exists():
                cmd = [
                    sys.executable,
                    "-m",
                    "actorq",
                    "run",
                    "--seed",
                    str(seed),
                    "--target-return",
                    "none",
                    # The default arm settles once solved (--target-return none alone
                    # no longer does); an arm's own --settle-at comes later and wins.
                    "--settle-at",
                    "auto",
                    "--max-env-steps",
                    str(args.max_env_steps),
                    "--run-dir",
                    str(run_dir),
                    *[a for a in extra if a != "--"],
                    *flags,
                ]
                run_quietly(cmd, env)
            s = stability(eval_curve(run_dir), args.solve_at, args.window)
            ok = (
                s["min_after"] is not None
                and s["min_after"] >= args.keep_above
                and s["covered"] >= 0.95 * args.window
            )
            low = "-" if s["min_after"] is None else f"{s['min_after']:.1f}"
            print(
                f"| {name} | {seed} | {s['solved_at'] or 'never'} | {low} "
                f"| {s['covered']:,} | {'yes' if ok else 'no'} |",
                flush=True,
            )
            (run_dir / "stability.json").write_text(json.dumps(s))


if __name__ == "__main__":
    main()
