"""Seconds from `docker compose up -d --scale actor=N` to every actorq container healthy,
the README's command (docker-compose.yml + deploy/compose.local.yml, `make image`'s
images) under its own project name, optionally beside CPU-bound background processes.

Prints the actors' health counts every `--every` seconds (as issue 33 reported them),
the time to all healthy (or the readiness report on timeout), the load average, where
the time went (per service: seconds to created, started and first seen healthy), what
each actor took and holds (CPU-seconds from its cgroup when first seen healthy, memory
from `docker stats` once all are, whether torch's library is mapped in its process),
then tears the project down (`down -v`, else removal by the compose project label) and
checks that nothing with the label is left.

    python bench/bench_compose_up.py --actors 32 --hogs 2 --timeout 300
    python bench/bench_compose_up.py --actors 32 --actor-image actorq:core-old  # A/B
    python bench/bench_compose_up.py --actors 32 --env ACTORQ_ACTOR_CPU_SHARES=256
"""

from __future__ import annotations

import argparse
import datetime
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from actorq.redis_server import find_free_port
from actorq.testing.compose import COMPOSE_FILES, ComposeError, ComposeStack, cgroup_cpu_seconds


def counts(containers: list[dict]) -> dict[str, int]:
    out: dict[str, int] = {}
    for info in containers:
        if info["Config"]["Labels"].get("com.docker.compose.service") == "actor":
            health = info["State"].get("Health", {}).get("Status", info["State"]["Status"])
            out[health] = out.get(health, 0) + 1
    return out


def _seconds_after(stamp: str, origin: float) -> float | None:
    """Docker's RFC 3339 nanosecond timestamp as seconds after the wall-clock `origin`
    (None for Docker's zero time: not created or not started yet)."""
    if not stamp or stamp.startswith("0001-"):
        return None
    return datetime.datetime.fromisoformat(stamp).timestamp() - origin  # 3.11: "Z", ns


class HealthWatch:
    """Polls the project's containers every 3 s on a thread of its own, from before `up -d`
    returns: the latest `docker inspect` of all of them, and the seconds after `origin` at
    which each container was first seen healthy. The main loop reads `latest` rather
    than asking Docker again (each poll costs the loaded host CPU)."""

    def __init__(self, stack: ComposeStack, origin: float) -> None:
        self.stack, self.origin = stack, origin
        self.latest: list[dict] = []
        self.latest_at = 0.0  # seconds after `origin` when `latest` was read
        self.first_healthy: dict[str, float] = {}
        self.cpu_at_healthy: dict[str, float | None] = {}  # CPU-s when first seen healthy
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="health-watch", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while True:
            self.poll()
            if self.stop.wait(3.0):
                return

    def poll(self) -> None:
        try:
            containers = self.stack.containers()
        except (ComposeError, subprocess.TimeoutExpired) as exc:  # removed between ps and
            # inspect, or the engine too loaded to answer in 120 s: the next poll tries again
            print(f"health watch: {str(exc)[:200]}", file=sys.stderr)
            return
        now = time.time() - self.origin
        for info in containers:
            healthy = (info["State"].get("Health") or {}).get("Status") == "healthy"
            if healthy and info["Id"] not in self.first_healthy:  # its CPU to get there too
                self.first_healthy[info["Id"]] = now
                self.cpu_at_healthy[info["Id"]] = cgroup_cpu_seconds(info["State"]["Pid"])
        self.latest, self.latest_at = containers, now

    def close(self) -> None:
        """Stop polling, after one last poll (the last containers turned healthy)."""
        self.stop.set()
        self.thread.join(timeout=30)
        self.poll()


def timeline(stack: ComposeStack, origin: float, healthy: dict[str, float]) -> str:
    """Per service, seconds after `up -d` began: containers created, started and first
    seen healthy (polled every 3 s), first and last replica."""
    by_service: dict[str, dict[str, list[float]]] = {}
    for info in stack.containers():
        service = info["Config"]["Labels"].get("com.docker.compose.service", "?")
        marks = by_service.setdefault(service, {"created": [], "started": [], "healthy": []})
        for key, stamp in (("created", info.get("Created", "")),
                           ("started", info["State"].get("StartedAt", ""))):  # fmt: skip
            seconds = _seconds_after(stamp, origin)
            if seconds is not None:
                marks[key].append(seconds)
        if info["Id"] in healthy:
            marks["healthy"].append(healthy[info["Id"]])

    def span(values: list[float]) -> str:
        if not values:
            return "-"
        low, high = min(values), max(values)
        return f"{low:.0f}" if high - low < 1 else f"{low:.0f}-{high:.0f}"

    order = ["redis", "quantizer", "learner", "actor", "evaluator", "prometheus", "grafana"]
    rows = [f"  {'service':<11} {'created':>9} {'started':>9} {'healthy':>9}"]
    for service in sorted(by_service, key=lambda s: (order.index(s) if s in order else 99, s)):
        marks = by_service[service]
        rows.append(f"  {service:<11} {span(marks['created']):>9} {span(marks['started']):>9} "
                    f"{span(marks['healthy']):>9}")  # fmt: skip
    return "seconds after `up -d` began:\n" + "\n".join(rows)


def actor_footprint(stack: ComposeStack, cpu_at_healthy: dict[str, float | None]) -> str:
    """Per actor container: CPU-seconds when first seen healthy (its cgroup's cpuacct, v1,
    or cpu.stat, v2; polled every 3 s), memory now (`docker stats`, which leaves out the
    page cache) and whether libtorch is mapped in the actor's process; median and largest."""
    actors = [i for i in stack.containers()
              if i["Config"]["Labels"].get("com.docker.compose.service") == "actor"]  # fmt: skip
    ids = [i["Id"] for i in actors]
    cpu = [c for c in (cpu_at_healthy.get(i) for i in ids) if c is not None]
    stats = stack.docker_cli("stats", "--no-stream", "--format", "{{.MemUsage}}", *ids)
    mib = [_mib(line.split("/")[0]) for line in stats.splitlines() if line.strip()]
    # The container's first process seen from the host (a `docker exec` each took seconds
    # on the loaded machine); its threads share the one address space.
    torch = sum(_maps_libtorch(i["State"]["Pid"]) for i in actors)

    def spread(values: list[float], unit: str) -> str:
        if not values:
            return "n/a"
        return f"median {statistics.median(values):.2f} {unit}, max {max(values):.2f} {unit}"

    return (f"per actor ({len(ids)}): CPU to healthy {spread(cpu, 's')}; memory "
            f"{spread(mib, 'MiB')}; "
            f"torch loaded in {torch}")  # fmt: skip


def _maps_libtorch(pid: int) -> bool:
    """Whether libtorch is mapped in host process `pid` or its children (under an init)."""
    pids = [pid, *(int(p) for p in _read(f"/proc/{pid}/task/{pid}/children").split())]
    return any("libtorch" in _read(f"/proc/{p}/maps") for p in pids)


def _read(path: str) -> str:
    try:
        return Path(path).read_text()
    except OSError:  # gone, or not ours to read
        return ""


def _mib(text: str) -> float:
    """Docker's "123.4MiB" (or KiB / GiB / B) as MiB."""
    m = re.fullmatch(r"\s*([\d.]+)\s*([KMG]i)?B\s*", text)
    if not m:
        raise ValueError(f"unexpected memory figure from docker stats: {text!r}")
    return (
        float(m.group(1)) * {"Ki": 1 / 1024, "Mi": 1.0, "Gi": 1024.0, None: 1 / 2**20}[m.group(2)]
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--actors", type=int, default=32)
    parser.add_argument("--hogs", type=int, default=0, help="CPU-bound background processes")
    parser.add_argument("--timeout", type=float, default=300.0)
    parser.add_argument("--every", type=float, default=30.0)
    parser.add_argument("--actor-image", help="the actors' image (default: compose's, actorq:core)")
    parser.add_argument(
        "--env", action="append", default=[], metavar="K=V",
        help="a variable docker-compose.yml reads, e.g. ACTORQ_ACTOR_CPU_SHARES=256 (repeatable)",
    )  # fmt: skip
    args = parser.parse_args()
    if args.actor_image:  # docker-compose.yml reads ACTORQ_ACTOR_IMAGE
        os.environ["ACTORQ_ACTOR_IMAGE"] = args.actor_image
    for item in args.env:
        name, sep, value = item.partition("=")
        if not sep or not name.startswith("ACTORQ_"):
            parser.error(f"--env wants ACTORQ_NAME=VALUE, got {item!r}")
        os.environ[name] = value
    if args.env:
        print(f"compose variables: {' '.join(args.env)}")
    work = Path(tempfile.mkdtemp(prefix="compose-up-"))
    stack = ComposeStack("docker", f"actorq-up-{uuid.uuid4().hex[:8]}", work, find_free_port())
    stack.files = list(COMPOSE_FILES)  # exactly the README's files, no test override
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"])
            for _ in range(args.hogs)]  # fmt: skip
    started = time.monotonic()
    origin = time.time()
    healthy_at = None
    watch = HealthWatch(stack, origin)
    try:
        stack.compose("up", "-d", "--scale", f"actor={args.actors}")
        print(f"up -d returned after {time.monotonic() - started:.0f} s; {stack.cpu_weight()}")
        next_report = args.every
        while time.monotonic() - started < args.timeout:
            elapsed = time.monotonic() - started
            latest, read_at = watch.latest, watch.latest_at
            if latest and stack.all_healthy(args.actors, latest):
                healthy_at = read_at
                break
            if elapsed >= next_report:
                load = os.getloadavg()[0]
                print(f"{elapsed:4.0f} s: actors {counts(latest)}, load {load:.1f}")
                next_report += args.every
            time.sleep(1)
        if healthy_at is None:
            print(f"NOT healthy within {args.timeout:.0f} s:\n{stack.health_report()}")
        else:
            print(f"all {args.actors} actors and every actorq service healthy {healthy_at:.0f} s "
                  f"after `up -d` ({args.hogs} hogs, load {os.getloadavg()[0]:.1f})")  # fmt: skip
        watch.close()
        print(timeline(stack, origin, watch.first_healthy))
        if healthy_at is not None:
            print(actor_footprint(stack, watch.cpu_at_healthy))
    finally:
        watch.stop.set()
        for hog in hogs:
            hog.kill()
        left = stack.teardown()
        print(f"teardown: left {left}")
    return 0 if healthy_at is not None and not any(left.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
