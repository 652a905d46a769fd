"""Containers at scale: `docker compose up --scale actor=N` for N in 1, 2, 4, 8, 16, 32.

For each N, on the local-image stack (docker-compose.yml + deploy/compose.local.yml, after
`make image`): time from `up -d` to every actorq container healthy, then, after a warm-up,
over a fixed window: env steps/s (all actors), learner updates/s, broadcast bytes/s
(quantizer -> actors), and per-container memory from `docker stats` (actors: median and
max). Then `down -v`. Counters come from the Prometheus container's HTTP API (two instant
queries, window apart). Prints one markdown table (BENCHMARKS.md "Containers at scale").

    make bench-compose                 # ARGS="--actors 1,2,4 --window 30" to change
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from actorq.redis_server import find_free_port  # noqa: E402
from actorq.testing.compose import ComposeStack, wait_for  # noqa: E402

COUNTERS = {
    "env_steps": 'sum(actorq_actor_env_steps_total{job="actor"})',  # not the evaluator's
    "updates": "sum(actorq_learner_updates_total)",
    "broadcast_bytes": "sum(actorq_quantizer_broadcast_bytes_total)",
}
UNITS = {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "kB": 1e3, "MB": 1e6, "GB": 1e9}


def memory_mib(stack: ComposeStack) -> dict[str, float]:
    """Container name -> memory use in MiB, as `docker stats --no-stream` reports it."""
    ids = stack.container_ids()
    out = stack.docker_cli("stats", "--no-stream", "--format", "{{.Name}} {{.MemUsage}}", *ids)
    usage = {}
    for line in out.splitlines():
        name, used = line.split()[0], line.split()[1]
        number, unit = re.match(r"([\d.]+)(\w+)", used).groups()
        usage[name] = float(number) * UNITS[unit] / 2**20
    return usage


def measure(docker: str, actors: int, warmup: float, window: float) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as work:
        stack = ComposeStack(docker, f"actorq-bench-{uuid.uuid4().hex[:6]}", Path(work),
                             find_free_port())  # fmt: skip
        started = time.monotonic()
        try:
            stack.compose("up", "-d", "--scale", f"actor={actors}")
            wait_for(lambda: stack.all_healthy(actors), 900, "all healthy", every=2)
            healthy_s = time.monotonic() - started
            wait_for(lambda: (stack.value(COUNTERS["updates"]) or 0) > 0, 600, "updates")
            time.sleep(warmup)
            first = {k: stack.value(q) or 0.0 for k, q in COUNTERS.items()}
            t0 = time.monotonic()
            time.sleep(window)
            last = {k: stack.value(q) or 0.0 for k, q in COUNTERS.items()}
            elapsed = time.monotonic() - t0
            memory = memory_mib(stack)
        finally:
            stack.compose("down", "-v", "--remove-orphans", "--timeout", "60")
    actor_mem = [m for name, m in memory.items() if "-actor-" in name]
    rates = {k: (last[k] - first[k]) / elapsed for k in COUNTERS}
    return {
        "actors": actors,
        "healthy_s": healthy_s,
        **rates,
        "actor_mib_median": statistics.median(actor_mem),
        "actor_mib_max": max(actor_mem),
        **{f"{role}_mib": _role_memory(memory, role) for role in ("learner", "quantizer")},
        "total_mib": sum(memory.values()),
    }


def cpu_model() -> str:
    """The CPU model and its widest vector extension (figures never cross CPUs)."""
    info = Path("/proc/cpuinfo").read_text()
    model = re.search(r"model name\s*:\s*(.*)", info)
    flags = set(re.search(r"flags\s*:\s*(.*)", info).group(1).split())
    vector = next((f for f in ("avx512_vnni", "avx512f", "avx2") if f in flags), "no avx2")
    return f"{model.group(1) if model else 'unknown CPU'} ({vector})"


def _role_memory(memory: dict[str, float], role: str) -> float:
    return sum(m for name, m in memory.items() if f"-{role}-" in name)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--actors", default="1,2,4,8,16,32", help="comma-separated sizes")
    parser.add_argument("--warmup", type=float, default=20.0, help="seconds after first update")
    parser.add_argument("--window", type=float, default=40.0, help="measurement seconds")
    args = parser.parse_args()
    sizes = [int(n) for n in args.actors.split(",")]
    docker = shutil.which("docker")
    if docker is None:
        print("docker CLI not found: run `make image` first (it installs the engine)")
        return 2
    print(f"machine: {cpu_model()}, {os.cpu_count()} cores; docker {docker}")
    print("| actors | up -> all healthy (s) | env steps/s | learner updates/s | broadcast "
          "KiB/s | actor MiB median / max | learner MiB | quantizer MiB | all containers "
          "MiB |")  # fmt: skip
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for n in sizes:
        r = measure(docker, n, args.warmup, args.window)
        print(f"| {n} | {r['healthy_s']:.0f} | {r['env_steps']:,.0f} | {r['updates']:.1f} | "
              f"{r['broadcast_bytes'] / 1024:.1f} | {r['actor_mib_median']:.0f} / "
              f"{r['actor_mib_max']:.0f} | {r['learner_mib']:.0f} | {r['quantizer_mib']:.0f} | "
              f"{r['total_mib']:,.0f} |", flush=True)  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
