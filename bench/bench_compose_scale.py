"""Containers at scale: `docker compose up --scale actor=N` for N in 1, 2, 4, 8, 16, 32,
and (`--arms compose,processes`) `actorq run --actors N` with the same settings, the two
interleaved at each N (containers vs processes, issue 31).

For each N, on the local-image stack (docker-compose.yml + deploy/compose.local.yml, after
`make image`): time from `up -d` to every actorq container healthy, then, after a warm-up,
over a fixed window: env steps/s (all actors), learner updates/s, broadcast bytes/s
(quantizer -> actors), and per-container memory from `docker stats` (actors: median and
max). Then `down -v`. Counters come from the Prometheus container's HTTP API (two instant
queries, window apart). Prints one markdown table (BENCHMARKS.md "Containers at scale").

    make bench-compose                 # ARGS="--actors 1,2,4 --window 30" to change
    make bench-compose ARGS="--actors 8,16,32 --arms compose,processes"
    make bench-compose ARGS="--actors 32 --arms compose,processes --rounds 2 \
        --samples-per-insert 0.125"
Env steps/s stay bounded by the learner (updates/s x batch / samples-per-insert): at 0.125
and 32 actors on 2 cores both arms read exactly updates/s x 1,024 (BENCHMARKS 24b).

The processes arm runs `actorq run` with the compose defaults (CartPole-v1, 64x64, int8,
8 envs per actor, samples per insert 16, learner torch threads 2, no settling, no target)
and reads the launcher's metrics.jsonl (env steps of the actors, learner updates) at the
same warm-up and window; memory is the resident set of each service's pid.

CPU per role over the window, in cores (CPU-seconds per second): the learner, all actors
together, the quantizer, and the rest of the machine (the engine, Redis, Prometheus, the
kernel's share of the busy time) from /proc/stat. Containers read their cgroup's counter;
processes read their pid's own threads (a service's children are not counted).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from actorq.redis_server import find_free_port  # noqa: E402
from actorq.testing.compose import ComposeStack, cgroup_cpu_seconds, wait_for  # noqa: E402

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


def host_busy_seconds() -> float:
    """CPU-seconds the whole machine spent busy (not idle or iowait) since boot."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return (sum(fields) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")


class RoleCpu:
    """CPU-seconds per role, read at the start and end of the window."""

    def __init__(self, sources: dict[str, list[Callable[[], float | None]]]) -> None:
        self.sources = sources  # role -> readers of cumulative CPU-seconds

    def read(self) -> dict[str, float]:
        totals = {role: sum(_or_zero(r) for r in readers) for role, readers in self.sources.items()}
        return {**totals, "host": host_busy_seconds()}

    @staticmethod
    def cores(first: dict[str, float], last: dict[str, float], seconds: float) -> dict[str, float]:
        used = {role: (last[role] - first[role]) / seconds for role in first}
        roles = [r for r in used if r != "host"]
        used["rest"] = max(0.0, used.pop("host") - sum(used[r] for r in roles))
        return used


def _or_zero(reader: Callable[[], float | None]) -> float:
    try:  # a container or process that went away mid-window counts as nothing
        return reader() or 0.0
    except (OSError, ValueError):
        return 0.0


ROLES = ("learner", "actor", "quantizer")  # the rest of the machine is "rest"


def container_cpu(stack: ComposeStack) -> RoleCpu:
    """Each role's containers, read from their cgroups."""
    sources: dict[str, list[Callable[[], float | None]]] = {role: [] for role in ROLES}
    for info in stack.containers():
        role = info["Config"]["Labels"].get("com.docker.compose.service")
        if role in sources:
            pid = info["State"]["Pid"]
            sources[role].append(lambda pid=pid: cgroup_cpu_seconds(pid))
    return RoleCpu(sources)


def _pid_cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def process_cpu(run_dir: Path) -> RoleCpu:
    """Each role's processes (services.json: "learner", "actor-3", ...), read from /proc."""
    services = json.loads((run_dir / "services.json").read_text())
    sources: dict[str, list[Callable[[], float | None]]] = {role: [] for role in ROLES}
    for name, info in services.items():
        role = name.split("-")[0]
        if role in sources and isinstance(info.get("pid"), int):
            sources[role].append(lambda pid=info["pid"]: _pid_cpu_seconds(pid))
    return RoleCpu(sources)


def measure(
    docker: str, actors: int, warmup: float, window: float, spi: str = "16"
) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as work:
        stack = ComposeStack(docker, f"actorq-bench-{uuid.uuid4().hex[:6]}", Path(work),
                             find_free_port())  # fmt: skip
        stack.env["ACTORQ_SAMPLES_PER_INSERT"] = spi
        started = time.monotonic()
        try:
            stack.compose("up", "-d", "--scale", f"actor={actors}")
            wait_for(lambda: stack.all_healthy(actors), 900, "all healthy", every=2)
            healthy_s = time.monotonic() - started
            wait_for(lambda: (stack.value(COUNTERS["updates"]) or 0) > 0, 600, "updates")
            time.sleep(warmup)
            cpu = container_cpu(stack)
            first = {k: stack.value(q) or 0.0 for k, q in COUNTERS.items()}
            cpu_first, t0 = cpu.read(), time.monotonic()
            time.sleep(window)
            cpu_last, elapsed = cpu.read(), time.monotonic() - t0
            last = {k: stack.value(q) or 0.0 for k, q in COUNTERS.items()}
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
        "cores": RoleCpu.cores(cpu_first, cpu_last, elapsed),
    }


PROCESS_FLAGS = [  # the compose defaults (docker-compose.yml), as `actorq run` flags
    "--env", "CartPole-v1", "--hidden", "64,64", "--precision", "int8",
    "--envs-per-actor", "8", "--settle-at", "none",
    "--target-return", "none", "--max-env-steps", str(10**12),
]  # fmt: skip


def measure_processes(
    actors: int, warmup: float, window: float, spi: str = "16"
) -> dict[str, float]:
    """`actorq run --actors N`: env steps/s and updates/s over the window, from the
    launcher's metrics.jsonl; stopped with SIGINT (its normal, ordered shutdown)."""
    with tempfile.TemporaryDirectory() as work:
        run_dir = Path(work) / "run"
        argv = [sys.executable, "-m", "actorq", "run", "--actors", str(actors), *PROCESS_FLAGS,
                "--samples-per-insert", spi, "--run-dir", str(run_dir)]  # fmt: skip
        env = {**os.environ, "ACTORQ_TORCH_THREADS": "2"}  # compose's learner threads
        started = time.monotonic()
        log_path = Path(work) / "actorq-run.log"  # a file: a full pipe would block the run
        with log_path.open("w") as log:
            proc = subprocess.Popen(argv, env=env, cwd=ROOT, stdout=log, stderr=log)
        proc.log_path = log_path  # type: ignore[attr-defined]
        try:
            wait_for(lambda: _last_row(run_dir, proc) is not None, 900, "all healthy", every=1)
            healthy_s = time.monotonic() - started  # the first row follows all healthy
            wait_for(lambda: _last_row(run_dir, proc)["learner_updates"] > 0, 600, "updates")
            time.sleep(warmup)
            cpu = process_cpu(run_dir)
            first = _last_row(run_dir, proc)
            cpu_first, t0 = cpu.read(), time.monotonic()
            time.sleep(window)
            cpu_last, cpu_seconds = cpu.read(), time.monotonic() - t0
            last = _last_row(run_dir, proc)
            memory = _process_memory(run_dir)
        finally:
            proc.send_signal(signal.SIGINT)
            proc.wait(180)
    elapsed = last["wall_seconds"] - first["wall_seconds"]
    actor_mem = [m for name, m in memory.items() if name.startswith("actor-")]
    return {
        "actors": actors,
        "healthy_s": healthy_s,
        "env_steps": (last["env_steps"] - first["env_steps"]) / elapsed,
        "updates": (last["learner_updates"] - first["learner_updates"]) / elapsed,
        "broadcast_bytes": (last["broadcast_bytes_total"] - first["broadcast_bytes_total"])
        / elapsed,
        "actor_mib_median": statistics.median(actor_mem) if actor_mem else 0.0,
        "actor_mib_max": max(actor_mem, default=0.0),
        "learner_mib": memory.get("learner", 0.0),
        "quantizer_mib": memory.get("quantizer", 0.0),
        "total_mib": sum(memory.values()),
        "cores": RoleCpu.cores(cpu_first, cpu_last, cpu_seconds),
    }


def _last_row(run_dir: Path, proc: subprocess.Popen) -> dict | None:
    if proc.poll() is not None:
        tail = proc.log_path.read_text()[-3000:]  # type: ignore[attr-defined]
        raise RuntimeError(f"actorq run exited with {proc.returncode}:\n{tail}")
    try:
        lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    except FileNotFoundError:
        return None
    for line in reversed(lines):
        try:
            return json.loads(line)
        except json.JSONDecodeError:  # a row being written
            continue
    return None


def _process_memory(run_dir: Path) -> dict[str, float]:
    """Service name -> resident MiB of its pid (services.json), as docker stats would."""
    services = json.loads((run_dir / "services.json").read_text())
    out = {}
    for name, info in services.items():
        try:
            status = Path(f"/proc/{info['pid']}/status").read_text()
        except (OSError, TypeError):
            continue
        rss = re.search(r"VmRSS:\s+(\d+) kB", status)
        if rss:
            out[name] = int(rss.group(1)) / 1024
    return out


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
    parser.add_argument("--arms", default="compose", help="compose, processes or both")
    parser.add_argument("--rounds", type=int, default=1, help="interleaved rounds per size")
    parser.add_argument(
        "--samples-per-insert", default="16", help="16: compose's default; lower: more env steps"
    )
    args = parser.parse_args()
    try:  # a bad value fails before anything is printed or started
        if float(args.samples_per_insert) <= 0:
            raise ValueError
    except ValueError:
        parser.error(
            f"--samples-per-insert: expected a number > 0, got {args.samples_per_insert!r}"
        )
    sizes = [int(n) for n in args.actors.split(",")]
    arms = args.arms.split(",")
    if not arms or not set(arms) <= {"compose", "processes"}:
        parser.error(f"--arms: expected compose and/or processes, got {args.arms!r}")
    docker = shutil.which("docker")
    if docker is None and "compose" in arms:
        print("docker CLI not found: run `make image` first (it installs the engine)")
        return 2
    print(f"machine: {cpu_model()}, {os.cpu_count()} cores; docker {docker}")
    print("| arm | actors | up -> all healthy (s) | env steps/s | learner updates/s | broadcast "
          "KiB/s | actor MiB median / max | learner MiB | quantizer MiB | all containers "
          "MiB | cores: learner / actors / quantizer / rest | load |")  # fmt: skip
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    print(f"samples per insert {args.samples_per_insert}; load average {os.getloadavg()[0]:.1f}")
    turn = 0
    for n in sizes:
        for _ in range(args.rounds):
            order = arms if turn % 2 == 0 else arms[::-1]  # interleaved: alternate who's first
            turn += 1
            for arm in order:
                _row(arm, docker, n, args)
    return 0


def _row(arm: str, docker: str | None, n: int, args: argparse.Namespace) -> None:
    if arm == "compose":
        r = measure(docker, n, args.warmup, args.window, args.samples_per_insert)
    else:
        r = measure_processes(n, args.warmup, args.window, args.samples_per_insert)
    print(f"| {arm} | {n} | {r['healthy_s']:.0f} | {r['env_steps']:,.0f} | {r['updates']:.1f} "
          f"| {r['broadcast_bytes'] / 1024:.1f} | {r['actor_mib_median']:.0f} / "
          f"{r['actor_mib_max']:.0f} | {r['learner_mib']:.0f} | {r['quantizer_mib']:.0f} | "
          f"{r['total_mib']:,.0f} | {_cores(r['cores'])} | {os.getloadavg()[0]:.1f} |",
          flush=True)  # fmt: skip


def _cores(cores: dict[str, float]) -> str:
    return " / ".join(f"{cores[role]:.2f}" for role in (*ROLES, "rest"))


if __name__ == "__main__":
    sys.exit(main())
