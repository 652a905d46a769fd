"""What `actorq scale` runs: the grid of (actors, precision, replay ratio, seed), each one
`actorq run` command line, and the checks that refuse a bad grid before anything starts."""

from __future__ import annotations

import shlex
import sys
from dataclasses import dataclass
from pathlib import Path

from actorq.config import ALGORITHMS, PRECISIONS, ConfigError

LAUNCHERS = ("processes", "compose")

# Flags the grid sets on every run: passing them after `--` would silently change an arm.
GRID_FLAGS = (
    "--actors", "--precision", "--samples-per-insert", "--seed", "--run-dir", "--env",
    "--algo", "--max-seconds", "--max-env-steps", "--target-return",
)  # fmt: skip


@dataclass(frozen=True)
class ScaleRun:
    """One cell of the grid and seed: one `actorq run`."""

    actors: int
    precision: str
    samples_per_insert: float
    seed: int

    @property
    def arm(self) -> tuple[int, str, float]:
        """What seeds are aggregated over: (actors, precision, samples per insert)."""
        return (self.actors, self.precision, self.samples_per_insert)

    @property
    def name(self) -> str:
        return (
            f"actors{self.actors}-{self.precision}-spi{self.samples_per_insert:g}-seed{self.seed}"
        )

    def label(self) -> str:
        return (
            f"actors={self.actors} {self.precision} spi={self.samples_per_insert:g} "
            f"seed={self.seed}"
        )

    def folder(self, out: Path) -> Path:
        return out / "runs" / self.name


@dataclass(frozen=True)
class GridConfig:
    """Everything `actorq scale` was asked for, validated."""

    actors: tuple[int, ...]
    precisions: tuple[str, ...]
    samples_per_insert: tuple[float, ...]
    seeds: tuple[int, ...]
    env: str
    algo: str
    target_return: float
    max_seconds: float
    max_env_steps: int | None
    stop_at_target: bool = True  # each run ends once its evaluator reaches the target
    run_args: tuple[str, ...] = ()  # passed through to every `actorq run`
    launcher: str = "processes"  # or "compose": each cell a `docker compose up --scale` stack

    def plan(self) -> list[ScaleRun]:
        """Seed by seed, then actor counts and ratios, with the precision order rotated
        per seed, so that machine noise over time hits every arm alike."""
        runs: list[ScaleRun] = []
        precisions = list(self.precisions)
        for i, seed in enumerate(self.seeds):
            k = i % len(precisions)
            order = precisions[k:] + precisions[:k]
            for actors in self.actors:
                for spi in self.samples_per_insert:
                    runs.extend(ScaleRun(actors, p, spi, seed) for p in order)
        return runs

    def run_command(self, run: ScaleRun, folder: Path) -> list[str]:
        cmd = [sys.executable, "-m", "actorq", "run", "--env", self.env, "--algo", self.algo]
        cmd += ["--actors", str(run.actors), "--precision", run.precision]
        cmd += ["--samples-per-insert", f"{run.samples_per_insert:g}", "--seed", str(run.seed)]
        cmd += ["--max-seconds", f"{self.max_seconds:g}"]
        if self.max_env_steps is not None:
            cmd += ["--max-env-steps", str(self.max_env_steps)]
        cmd += ["--target-return", f"{self.target_return:g}" if self.stop_at_target else "none"]
        return [*cmd, *self.run_args, "--run-dir", str(folder)]

    def command(self, out: Path) -> str:
        """The `actorq scale` command line that reproduces this grid (defaults resolved)."""
        parts = ["actorq", "scale", "--out", str(out)]
        parts += ["--actors", ",".join(map(str, self.actors))]
        parts += ["--precisions", ",".join(self.precisions)]
        parts += ["--samples-per-insert", ",".join(f"{v:g}" for v in self.samples_per_insert)]
        parts += ["--seeds", ",".join(map(str, self.seeds)), "--env", self.env]
        parts += ["--algo", self.algo, "--target-return", f"{self.target_return:g}"]
        parts += ["--max-seconds", f"{self.max_seconds:g}"]
        if self.max_env_steps is not None:
            parts += ["--max-env-steps", str(self.max_env_steps)]
        if not self.stop_at_target:
            parts.append("--no-stop-at-target")
        if self.launcher != "processes":
            parts += ["--launcher", self.launcher]
        if self.run_args:
            parts += ["--", *self.run_args]
        return shlex.join(parts)


def _items(text: str, flag: str, expected: str) -> list[str]:
    items = [s.strip() for s in text.split(",")]
    if not text.strip() or any(not s for s in items):
        raise ConfigError(f"{flag} {text!r}: expected {expected}, comma-separated, none empty")
    return items


def parse_actors(text: str) -> tuple[int, ...]:
    expected = "actor counts >= 1 like 1,2,4"
    values = []
    for item in _items(text, "--actors", expected):
        if not item.isdigit() or int(item) < 1:
            raise ConfigError(f"--actors: bad value {item!r}; expected {expected}")
        values.append(int(item))
    return _unique(values, "--actors")


def parse_precisions(text: str) -> tuple[str, ...]:
    expected = f"any of {', '.join(PRECISIONS)}"
    items = _items(text, "--precisions", expected)
    for item in items:
        if item not in PRECISIONS:
            raise ConfigError(f"--precisions: unknown precision {item!r}; expected {expected}")
    return _unique(items, "--precisions")


def parse_ratios(text: str) -> tuple[float, ...]:
    expected = "samples per insert > 0 like 16 or 1,16"
    values = []
    for item in _items(text, "--samples-per-insert", expected):
        try:
            value = float(item)
        except ValueError:
            value = float("nan")
        if not value > 0 or value == float("inf"):
            raise ConfigError(f"--samples-per-insert: bad value {item!r}; expected {expected}")
        values.append(value)
    return _unique(values, "--samples-per-insert")


def parse_seeds(text: str) -> tuple[int, ...]:
    expected = "integer seeds like 1,2,3"
    values = []
    for item in _items(text, "--seeds", expected):
        try:
            values.append(int(item))
        except ValueError:
            raise ConfigError(f"--seeds: bad value {item!r}; expected {expected}") from None
    return _unique(values, "--seeds")


def _unique(values: list, flag: str) -> tuple:
    repeated = sorted({str(v) for v in values if values.count(v) > 1})
    if repeated:
        raise ConfigError(f"{flag}: {', '.join(repeated)} given twice; expected each once")
    return tuple(values)


def check_run_args(run_args: list[str]) -> tuple[str, ...]:
    """Flags for every `actorq run`, after `--`; the grid's own flags are refused."""
    if run_args and not run_args[0].startswith("-"):
        raise ConfigError(
            f"unexpected argument {run_args[0]!r}; expected flags, or `actorq run` flags after '--'"
        )
    for arg in run_args:
        if arg.split("=", 1)[0] in GRID_FLAGS:
            raise ConfigError(
                f"{arg!r} after '--': the grid sets it on every run; use actorq scale's own "
                "flag (--actors, --precisions, --samples-per-insert, --seeds, --env, --algo, "
                "--max-seconds, --max-env-steps, --target-return)"
            )
    return tuple(run_args)


def resolve_target(env: str, given: float | None) -> float:
    """`given`, else the env's gymnasium reward threshold (475 on CartPole-v1)."""
    if given is not None:
        return given
    import gymnasium

    try:
        threshold = gymnasium.spec(env).reward_threshold
    except gymnasium.error.Error:
        threshold = None  # minatar:, dmc:, ale: ids are not gymnasium registrations
    if threshold is None:
        raise ConfigError(
            f"--target-return: {env} has no reward threshold to default to; give the return "
            "runs are timed to, e.g. --target-return 30"
        )
    return float(threshold)


def check_launcher(config: GridConfig) -> GridConfig:
    """The compose stack runs DQN and takes its settings from ACTORQ_* variables only."""
    if config.launcher not in LAUNCHERS:
        raise ConfigError(f"--launcher {config.launcher!r}: expected one of {', '.join(LAUNCHERS)}")
    if config.launcher != "compose":
        return config
    if config.algo != "dqn":
        raise ConfigError(
            f"--algo {config.algo} with --launcher compose: the compose stack's learner and "
            "actors run DQN only; use --launcher processes for other algorithms"
        )
    if config.run_args:
        raise ConfigError(
            f"{' '.join(config.run_args)!r} after '--' with --launcher compose: those are "
            "`actorq run` flags; the compose stack takes its settings from the environment's "
            "variables, as docker-compose.yml names them (docs/scale.md)"
        )
    return config


def check_budget(config: GridConfig) -> GridConfig:
    if config.algo not in ALGORITHMS:
        raise ConfigError(f"--algo {config.algo!r}: expected one of {', '.join(ALGORITHMS)}")
    if config.max_seconds < 0:
        raise ConfigError(f"--max-seconds {config.max_seconds:g}: expected >= 0 (0 = none)")
    if config.max_env_steps is not None and config.max_env_steps < 1:
        raise ConfigError(f"--max-env-steps {config.max_env_steps}: expected >= 1")
    if config.max_seconds == 0 and config.max_env_steps is None:
        raise ConfigError(
            "--max-seconds 0 without --max-env-steps: expected a budget per run, "
            "one of them or both"
        )
    return config


# --smoke: 1 and 2 actors x fp32 and int8 on CartPole, one seed, a few minutes on 2 cores.
SMOKE = {
    "actors": "1,2",
    "precisions": "fp32,int8",
    "samples_per_insert": "16",
    "seeds": "1",
    "env": "CartPole-v1",
    "algo": "dqn",
    "max_seconds": 40.0,
}
SMOKE_RUN_ARGS = ("--envs-per-actor", "4", "--eval-envs", "10")
DEFAULTS = {
    "actors": "1,2,4",
    "precisions": "fp32,int8",
    "samples_per_insert": "16",
    "seeds": "1,2,3",
    "env": "CartPole-v1",
    "algo": "dqn",
    "max_seconds": 300.0,
}
