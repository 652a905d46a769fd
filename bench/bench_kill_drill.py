"""Kill drill: does a default CartPole run still solve when an actor and then the learner
are SIGKILLed mid-run? One `actorq run` per seed.

Per seed: `actorq run --actors 2 --precision int8 --target-return 475 --max-env-steps
600000 --seed S`; once metrics.jsonl reports --kill-at env steps (15k), actor-0 gets
SIGKILL, the learner --learner-after seconds (5) later; the supervisor restarts both and
the learner resumes from its checkpoint. The row says whether the run solved (the
evaluator's 100-episode mean >= 475), the final mean, the restarts the supervisor
recorded, and what the learner logged about settling after its restart.

    .venv/bin/python bench/bench_kill_drill.py --seeds 1,2,3,4,5
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def last_metrics(run_dir: Path) -> dict:
    path = run_dir / "metrics.jsonl"
    if not path.exists():
        return {}
    lines = path.read_text().strip().splitlines()
    try:
        return json.loads(lines[-1]) if lines else {}
    except json.JSONDecodeError:  # a line being written
        return {}


def pid_of(run_dir: Path, role: str) -> int:
    return int(json.loads((run_dir / "services.json").read_text())[role]["pid"])


def drill(seed: int, run_dir: Path, kill_at: int, learner_after: float, budget: int) -> dict:
    cmd = [sys.executable, "-m", "actorq", "run", "--actors", "2", "--precision", "int8"]
    cmd += ["--target-return", "475", "--max-env-steps", str(budget), "--seed", str(seed)]
    cmd += ["--run-dir", str(run_dir)]
    with subprocess.Popen(
        cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL
    ) as proc:
        killed_at = None
        try:
            while proc.poll() is None and killed_at is None:
                steps = last_metrics(run_dir).get("env_steps", 0)
                if steps >= kill_at:
                    os.kill(pid_of(run_dir, "actor-0"), signal.SIGKILL)
                    killed_at = steps
                    time.sleep(learner_after)
                    os.kill(pid_of(run_dir, "learner"), signal.SIGKILL)
                time.sleep(0.2)
            proc.wait(timeout=1800)
        finally:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                proc.wait(timeout=120)
    summary = json.loads((run_dir / "summary.json").read_text())
    services = json.loads((run_dir / "services.json").read_text())
    logs = "".join(p.read_text() for p in sorted((run_dir / "logs").glob("learner*.log")))
    settle_lines = [
        line.split("] ", 1)[-1]
        for line in logs.splitlines()
        if "settl" in line and ("certified" in line or "not settling" in line)
    ]
    return {
        "seed": seed,
        "killed_at_env_steps": killed_at,
        "restarts": {k: v["restarts"] for k, v in services.items() if v.get("restarts")},
        "solved": bool(summary.get("solved")),
        "final_eval_mean": summary.get("final_mean_return"),
        "wall_seconds": summary.get("wall_seconds"),
        "env_steps": summary.get("env_steps"),
        "settle_log": settle_lines,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", default="1,2,3,4,5")
    p.add_argument("--kill-at", type=int, default=15_000, help="env steps before the kills")
    p.add_argument("--learner-after", type=float, default=5.0, help="seconds after actor-0")
    p.add_argument("--max-env-steps", type=int, default=600_000)
    p.add_argument("--out", default="", help="keep run folders here (default: temp dir)")
    args = p.parse_args()
    out = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="actorq-drill-"))
    print(
        "| seed | killed at env step | restarts | solved | final 100-ep mean | env steps "
        "| seconds |"
    )
    print("|---|---:|---|---|---:|---:|---:|")
    for seed in (int(s) for s in args.seeds.split(",")):
        run_dir = out / f"seed{seed}"
        r = drill(seed, run_dir, args.kill_at, args.learner_after, args.max_env_steps)
        (run_dir / "drill.json").write_text(json.dumps(r, indent=2))
        restarts = ", ".join(f"{k} {v}" for k, v in r["restarts"].items()) or "none"
        mean = r["final_eval_mean"]
        print(
            f"| {seed} | {r['killed_at_env_steps']} | {restarts} | "
            f"{'yes' if r['solved'] else 'no'} | "
            f"{'-' if mean is None else f'{mean:.1f}'} | {r['env_steps']} | {r['wall_seconds']} |",
            flush=True,
        )
        for line in r["settle_log"]:
            print(f"  seed {seed} learner: {line}", file=sys.stderr)


if __name__ == "__main__":
    main()
