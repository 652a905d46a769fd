"""Seconds from `docker compose up -d --scale actor=N` to every actorq container healthy,
the README's command (docker-compose.yml + deploy/compose.local.yml, `make image`'s
images) under its own project name, optionally beside CPU-bound background processes.

Prints the actors' health counts every `--every` seconds (as issue 33 reported them),
the time to all healthy (or the readiness report on timeout), the load average, then
tears the project down (`down -v`, else removal by the compose project label) and checks
that nothing with the label is left.

    python bench/bench_compose_up.py --actors 32 --hogs 2 --timeout 300
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from actorq.redis_server import find_free_port
from actorq.testing.compose import COMPOSE_FILES, ComposeStack


def counts(stack: ComposeStack) -> dict[str, int]:
    out: dict[str, int] = {}
    for info in stack.containers():
        if info["Config"]["Labels"].get("com.docker.compose.service") == "actor":
            health = info["State"].get("Health", {}).get("Status", info["State"]["Status"])
            out[health] = out.get(health, 0) + 1
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--actors", type=int, default=32)
    parser.add_argument("--hogs", type=int, default=0, help="CPU-bound background processes")
    parser.add_argument("--timeout", type=float, default=300.0)
    parser.add_argument("--every", type=float, default=30.0)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="compose-up-"))
    stack = ComposeStack("docker", f"actorq-up-{uuid.uuid4().hex[:8]}", work, find_free_port())
    stack.files = list(COMPOSE_FILES)  # exactly the README's files, no test override
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"])
            for _ in range(args.hogs)]  # fmt: skip
    started = time.monotonic()
    healthy_at = None
    try:
        stack.compose("up", "-d", "--scale", f"actor={args.actors}")
        print(f"up -d returned after {time.monotonic() - started:.0f} s; {stack.cpu_weight()}")
        next_report = args.every
        while time.monotonic() - started < args.timeout:
            elapsed = time.monotonic() - started
            if stack.all_healthy(args.actors):
                healthy_at = elapsed
                break
            if elapsed >= next_report:
                print(f"{elapsed:4.0f} s: actors {counts(stack)}, load {os.getloadavg()[0]:.1f}")
                next_report += args.every
            time.sleep(3)
        if healthy_at is None:
            print(f"NOT healthy within {args.timeout:.0f} s:\n{stack.health_report()}")
        else:
            print(f"all {args.actors} actors and every actorq service healthy {healthy_at:.0f} s "
                  f"after `up -d` ({args.hogs} hogs, load {os.getloadavg()[0]:.1f})")  # fmt: skip
    finally:
        for hog in hogs:
            hog.kill()
        left = stack.teardown()
        print(f"teardown: left {left}")
    return 0 if healthy_at is not None and not any(left.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
