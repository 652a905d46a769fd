"""Seconds from `actorq run` starting to the first actor env step, fork vs spawn launch.

Each run is a short real `actorq run` (embedded Redis, every service, defaults); the
first env step is the earliest "acting on" line in the actors' logs (an actor logs it
right after receiving the first policy and resetting its envs, just before stepping).
Launch modes (ACTORQ_LAUNCH_MODE): "fork", services forked from one pre-imported parent
(actorq.launch.zygote, the default) and "spawn", one interpreter per service. Runs are
interleaved so machine noise hits both alike; the load average is printed with each row.

    .venv/bin/python bench/bench_startup.py --runs 5     # make bench-startup
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

from arms import run_quietly

LINE = re.compile(r"^(\d\d):(\d\d):(\d\d)\.(\d\d\d) .* acting on ")


def first_step_after(launched: float, run_dir: Path) -> float | None:
    """Seconds from `launched` (unix time) to the earliest actor 'acting on' log line."""
    day = dt.datetime.fromtimestamp(launched).date()
    stamps = []
    for log in (run_dir / "logs").glob("actor-*.log"):
        for line in log.read_text(errors="replace").splitlines():
            m = LINE.match(line)
            if m:
                h, mi, s, ms = (int(x) for x in m.groups())
                when = dt.datetime.combine(day, dt.time(h, mi, s, ms * 1000))
                stamps.append(when.timestamp())
    return min(stamps) - launched if stamps else None


def one_run(mode: str, out: Path, index: int, extra: list[str] = ()) -> float | None:
    run_dir = out / f"{mode}-{index}-{len(extra)}"
    cmd = [
        sys.executable,
        "-m",
        "actorq",
        "run",
        "--max-env-steps",
        "2000",
        "--target-return",
        "none",
        "--run-dir",
        str(run_dir),
        *extra,
    ]
    launched = time.time()
    run_quietly(cmd, {"ACTORQ_LAUNCH_MODE": mode})
    return first_step_after(launched, run_dir)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=5, help="runs per launch mode")
    p.add_argument(
        "--modes",
        default="fork,spawn",
        help="launch modes, each optionally with actorq run flags: fork:--settle-at=none",
    )
    p.add_argument("--out", default="", help="keep run folders here (default: temp dir)")
    args = p.parse_args()
    out = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="actorq-startup-"))
    modes = args.modes.split(",")
    results: dict[str, list[float]] = {m: [] for m in modes}
    print("| run | mode | first env step (s after launch) | load average (1 min) |")
    print("|---|---|---|---|")
    for i in range(args.runs):
        for mode in modes:
            launch, _, flags = mode.partition(":")
            extra = [part for f in filter(None, flags.split(",")) for part in f.split("=", 1)]
            seconds = one_run(launch, out, i, extra)
            load = os.getloadavg()[0]
            shown = "no step" if seconds is None else f"{seconds:.2f}"
            print(f"| {i} | {mode} | {shown} | {load:.1f} |", flush=True)
            if seconds is not None:
                results[mode].append(seconds)
    for mode, values in results.items():
        if values:
            print(
                f"# {mode}: median {statistics.median(values):.2f} s, "
                f"min {min(values):.2f}, max {max(values):.2f} ({len(values)} runs)"
            )


if __name__ == "__main__":
    main()
