"""Bench arms that are a precision plus ACTORQ_* settings: `int8@ACTORQ_GUARD=true`.

Shared by the bench scripts (run as `python bench/NAME.py`, so this folder is on the path).
"""

from __future__ import annotations

import os
import subprocess

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
