"""Bench arms that are a precision plus ACTORQ_* settings: `int8@ACTORQ_GUARD=true`.

Shared by the bench scripts (run as `python bench/NAME.py`, so this folder is on the path).
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
from pathlib import Path

from actorq.procutil import sigterm_interrupts, wait_or_stop


def arm_env(arm: str) -> tuple[str, dict[str, str]]:
    """'int8@ACTORQ_X=V,ACTORQ_Y=W' -> ('int8', {'ACTORQ_X': 'V', 'ACTORQ_Y': 'W'})."""
    precision, _, assignments = arm.partition("@")
    env = {}
    for item in filter(None, assignments.split(",")):
        key, sep, value = item.partition("=")
        if not (key.startswith("ACTORQ_") and sep):
            raise SystemExit(f"arm {arm!r}: expected PRECISION[@ACTORQ_X=V,...]")
        env[key] = value
    return precision, env


def split_arms(text: str) -> list[str]:
    """'int8@ACTORQ_X=V,ACTORQ_Y=W,fp32' -> ['int8@ACTORQ_X=V,ACTORQ_Y=W', 'fp32']: a
    comma followed by another assignment continues the arm before it. An arm named twice
    is refused: both would share one run folder per seed, and the second would resume the
    first's finished run instead of training."""
    arms: list[str] = []
    for item in text.split(","):
        if arms and "@" in arms[-1] and "=" in item and "@" not in item:
            arms[-1] += "," + item
        else:
            arms.append(item)
    twice = sorted({arm for arm in arms if arms.count(arm) > 1})
    if twice:
        raise SystemExit(f"arms {text!r}: {', '.join(twice)} named twice; expected distinct arms")
    return arms


def arm_folder(arm: str) -> str:
    """A folder name for the arm: 'int8@ACTORQ_X=V' -> 'int8-ACTORQ_X-V'."""
    return arm.replace("@", "-").replace("=", "-").replace(",", "-")


def run_quietly(cmd: list[str], env: dict[str, str]) -> int:
    """Run `cmd` (an `actorq run`) with ACTORQ_* `env` on top of ours, output discarded:
    the run folder is what the benches read. Returns the exit code. If the bench is stopped
    (Ctrl-C or SIGTERM), the run gets SIGTERM and time to stop its services before the bench
    exits, so no run outlives the bench that started it."""
    child = subprocess.Popen(
        cmd, env={**os.environ, **env}, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    with sigterm_interrupts():
        return wait_or_stop(child)


def cpu_label() -> str:
    """CPU model, the SIMD flags that decide int8 speed, and the core count."""
    path = Path("/proc/cpuinfo")
    lines = path.read_text().splitlines() if path.exists() else []
    model = next((ln.split(":", 1)[1].strip() for ln in lines if "model name" in ln), "")
    flags = next((ln.split(":", 1)[1].split() for ln in lines if ln.startswith("flags")), [])
    wanted = ("avx2", "fma", "avx512f", "avx512_vnni", "avx_vnni", "amx_tile")
    present = ", ".join(f for f in wanted if f in flags)
    return f"{model or platform.processor()} ({present}), {os.cpu_count()} cores"


def steady_rates(run_dir: Path, skip: float, min_window: float = 5.0) -> dict[str, float]:
    """Env steps/s and updates/s of an `actorq run` folder, between the first progress row
    at or after `skip` seconds that has env steps and the last row."""
    with (run_dir / "metrics.jsonl").open() as f:
        rows = [json.loads(line) for line in f if line.strip()]
    rows = [r for r in rows if r.get("wall_seconds") is not None]
    start = next((r for r in rows if r["wall_seconds"] >= skip and r.get("env_steps")), None)
    end = rows[-1] if rows else None
    if start is None or end is None or end["wall_seconds"] - start["wall_seconds"] < min_window:
        raise RuntimeError(f"{run_dir}: too few progress rows after {skip:g} s")
    span = end["wall_seconds"] - start["wall_seconds"]
    return {
        "env_steps_per_s": (end["env_steps"] - start["env_steps"]) / span,
        "updates_per_s": (end["learner_updates"] - start["learner_updates"]) / span,
        "window_s": span,
        "eval_return": end.get("eval_mean_return") or float("nan"),
    }
