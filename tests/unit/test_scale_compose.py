"""actorq scale --launcher compose without an engine: its arguments, the exit-2 errors that
name what is missing (docker CLI, engine, images), the cell's compose variables and
override file, when a cell stops, and the run folder it writes from what it polled, read
back by the report like an `actorq run` folder."""

from __future__ import annotations

import csv
import os
import string
from pathlib import Path

import pytest
import yaml

from actorq.actor.episodes import Episode
from actorq.cli import main
from actorq.config import ConfigError
from actorq.redis_keys import RedisKeys
from actorq.scale.compose_runner import (
    OVERRIDE,
    CellFailed,
    cell_variables,
    compose_line,
    execute_compose,
    find_tools,
    required_images,
    stop_reason,
)
from actorq.scale.compose_watch import ENV_STEPS, UPDATES, VERSION, StackWatch, write_run_folder
from actorq.scale.grid import GridConfig, ScaleRun
from actorq.scale.report import write_report
from actorq.scale.results import load_figures
from actorq.scale.runner import open_state
from actorq.study.runner import is_done
from actorq.testing.compose import compose_binary

NO_DAEMON = (
    "Cannot connect to the Docker daemon at unix:///var/run/docker.sock. "
    "Is the docker daemon running?"
)


def _config(**kw) -> GridConfig:
    base = dict(
        actors=(2,), precisions=("int8",), samples_per_insert=(16.0,), seeds=(1,),
        env="CartPole-v1", algo="dqn", target_return=475.0, max_seconds=60.0,
        max_env_steps=None, launcher="compose",
    )  # fmt: skip
    return GridConfig(**{**base, **kw})


def _fake_docker(folder: Path, info_ok: bool) -> Path:
    """A `docker` CLI on PATH: `info` answers or not; `image inspect` finds nothing."""
    folder.mkdir()
    info = "echo 28.2.2" if info_ok else f"echo '{NO_DAEMON}' >&2; exit 1"
    script = folder / "docker"
    script.write_text(
        "#!/bin/sh\n"
        f'case "$1" in\n  info) {info};;\n'
        '  image) echo "Error: No such image: $3" >&2; exit 1;;\nesac\nexit 0\n'
    )
    script.chmod(0o755)
    return folder


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--algo", "td3"], "--algo td3 with --launcher compose: the compose stack's learner"),
        (["--", "--hidden", "32,32"], "'--hidden 32,32' after '--' with --launcher compose"),
    ],
)
def test_compose_refuses_what_the_stack_cannot_run(argv, message, tmp_path, capsys) -> None:
    out = tmp_path / "scale"
    assert main(["scale", "--out", str(out), "--launcher", "compose", *argv]) == 2
    assert message in capsys.readouterr().err
    assert not out.exists()


def test_launcher_flag_choices_and_smoke(tmp_path: Path, capsys) -> None:
    from actorq.cli import build_parser
    from actorq.scale.cli import build_config

    with pytest.raises(SystemExit) as exited:
        main(["scale", "--out", str(tmp_path / "o"), "--launcher", "k8s"])
    assert exited.value.code == 2 and "invalid choice: 'k8s'" in capsys.readouterr().err
    args = build_parser().parse_args(["scale", "--smoke", "--out", "o", "--launcher", "compose"])
    config = build_config(args)
    assert config.launcher == "compose" and config.run_args == ()  # no `actorq run` flags
    assert build_config(build_parser().parse_args(["scale", "--out", "o"])).launcher == (
        "processes"
    )


def test_no_docker_cli_exits_2_naming_it(tmp_path: Path, monkeypatch, capsys) -> None:
    empty = tmp_path / "bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    out = tmp_path / "scale"
    assert main(["scale", "--out", str(out), "--launcher", "compose"]) == 2
    assert "no `docker` CLI on PATH" in capsys.readouterr().err
    assert not out.exists()


def test_no_engine_exits_2_with_dockers_own_words(tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.setenv("PATH", str(_fake_docker(tmp_path / "bin", info_ok=False)))
    out = tmp_path / "scale"
    assert main(["scale", "--out", str(out), "--launcher", "compose"]) == 2
    err = capsys.readouterr().err
    assert "--launcher compose: no Docker engine answers" in err and NO_DAEMON in err
    assert "scripts/docker_engine.sh start" in err
    assert not out.exists()


def test_missing_images_are_named_with_make_image(tmp_path: Path) -> None:
    env = {"PATH": str(_fake_docker(tmp_path / "bin", info_ok=True)),
           "ACTORQ_ACTOR_IMAGE": "actorq:atari"}  # fmt: skip
    with pytest.raises(ConfigError) as failed:
        find_tools(env)
    message = str(failed.value)
    named = message.split("images not built: ")[1].split(";")[0].split(", ")
    assert sorted(named) == ["actorq-local/prometheus:bookworm", "actorq-local/redis:bookworm",
                             "actorq:atari", "actorq:latest"]  # fmt: skip
    assert "`make image`" in message
    # The images as Compose resolves them: the local stack's, ACTORQ_ACTOR_IMAGE honoured.
    compose = (compose_binary(),)
    assert sorted(required_images(compose, {})) == [
        "actorq-local/prometheus:bookworm", "actorq-local/redis:bookworm", "actorq:core",
        "actorq:latest",
    ]  # fmt: skip


def test_a_cell_without_an_engine_fails_with_its_log_saying_why(
    tmp_path: Path, monkeypatch
) -> None:
    monkeypatch.setenv("PATH", str(_fake_docker(tmp_path / "bin", info_ok=False)))
    config, out = _config(), tmp_path / "scale"
    run = config.plan()[0]
    assert execute_compose(run, config, out) == 1
    log = (out / "runs" / f"{run.name}.log").read_text().strip().splitlines()
    assert log[-1].startswith("error: --launcher compose: no Docker engine answers")
    assert not is_done(run.folder(out))


def test_launcher_is_part_of_the_grid(tmp_path: Path) -> None:
    config = _config()
    assert config.command(Path("o")).endswith("--launcher compose")
    assert "--launcher" not in _config(launcher="processes").command(Path("o"))
    out = tmp_path / "scale"
    open_state(out, _config(launcher="processes"), "first")
    with pytest.raises(ConfigError, match="other run settings"):
        open_state(out, config, "second")  # a report never mixes launchers


def test_cell_variables_and_override(tmp_path: Path) -> None:
    run = ScaleRun(actors=2, precision="int8", samples_per_insert=0.5, seed=3)
    variables = cell_variables(run, "CartPole-v1", 9091, 6380)
    assert variables == {
        "ACTORQ_ENV_ID": "CartPole-v1", "ACTORQ_PRECISION": "int8",
        "ACTORQ_SAMPLES_PER_INSERT": "0.5", "ACTORQ_SEED": "3", "ACTORQ_NUM_ACTORS": "2",
        "PROMETHEUS_PORT": "9091", "SCALE_REDIS_PORT": "6380",
    }  # fmt: skip
    override = yaml.safe_load(string.Template(OVERRIDE).substitute(variables))["services"]
    assert override["redis"]["ports"] == ["127.0.0.1:6380:6379"]
    for service in ("learner", "actor", "evaluator"):
        assert override[service]["environment"] == {"ACTORQ_SEED": "3"}
    line = compose_line(run, "CartPole-v1", tmp_path / "cell")
    assert line.startswith("ACTORQ_ENV_ID=CartPole-v1 ACTORQ_PRECISION=int8 ")
    assert "-f docker-compose.yml -f deploy/compose.local.yml -f " in line
    assert line.endswith("up -d --scale actor=2 redis quantizer learner actor evaluator prometheus")


def test_stop_reasons_in_actorq_runs_words() -> None:
    row = {"wall_seconds": 30.0, "env_steps": 5000}
    assert stop_reason(_config(), row, solved=True) == "target return 475 reached"
    assert stop_reason(_config(stop_at_target=False), row, solved=True) == ""
    assert stop_reason(_config(max_env_steps=4000), row, False) == "env-step budget 4000 spent"
    assert stop_reason(_config(max_seconds=30.0), row, False) == "time budget 30s spent"
    with pytest.raises(CellFailed, match="no actor env step 600 s after `up -d`"):
        stop_reason(_config(max_seconds=0, max_env_steps=10), {"wall_seconds": 601.0,
                                                                "env_steps": 0}, False)  # fmt: skip


class _FakeStack:
    """Prometheus answers: nothing at the first poll, then counters that grow."""

    def __init__(self) -> None:
        self.polls = 0

    def value(self, expr: str) -> float | None:
        per_poll = {ENV_STEPS: 1000.0, UPDATES: 50.0, VERSION: 1.0}
        self.polls += expr == ENV_STEPS
        return None if self.polls < 2 else per_poll[expr] * (self.polls - 1)

    def query(self, expr: str) -> list[dict]:
        jobs = {"actor": "20.5", "learner": "30", "quantizer": "2", "evaluator": "4"}
        return [{"metric": {"job": job}, "value": [0, v]} for job, v in jobs.items()]


class _FakeRedis:
    def __init__(self) -> None:
        self.entries: list[tuple[bytes, dict[bytes, bytes]]] = []

    def add(self, episode: Episode) -> None:
        fields = {k.encode(): v.encode() for k, v in episode.fields().items()}
        self.entries.append((f"{len(self.entries) + 1}-0".encode(), fields))

    def xread(self, streams: dict, count: int) -> list:
        (last,) = streams.values()
        seen = 0 if last == "0-0" else int(str(last, "ascii").split("-")[0])
        new = self.entries[seen:]
        return [(b"actorq:episodes", new)] if new else []

    def info(self, section: str) -> dict:
        return {"used_cpu_user": 1.5, "used_cpu_sys": 0.5}

    def get(self, key: str) -> bytes:
        return b"12345"


def test_watch_writes_a_folder_the_report_reads(tmp_path: Path) -> None:
    client, stack = _FakeRedis(), _FakeStack()
    clock = iter([1000.0, 1010.0, 1020.0, 1030.0, 1040.0])  # start, then one per poll
    watch = StackWatch(stack, client, RedisKeys(), clock=lambda: next(clock))  # type: ignore[arg-type]
    assert watch.poll()["env_steps"] == 0  # Prometheus has nothing yet
    client.add(Episode("actor-1", "train", 9.0, 9, 1, 100, 1012.0))
    for returns, ended in ((400.0, 1015.0), (500.0, 1025.0)):
        for _ in range(60):
            client.add(Episode("evaluator", "eval", returns, 500, 1, 0, ended))
        watch.poll()
    # the last 100 evaluator episodes: 40 x 400 and 60 x 500
    assert watch.eval_mean() == 460.0 and watch.solved(450.0) and not watch.solved(475.0)
    last = watch.poll()
    assert (last["env_steps"], last["learner_updates"], last["policy_version"]) == (3000, 150, 3)
    assert last["eval_episodes"] == 120 and last["train_episodes"] == 1
    assert last["wall_seconds"] == 40.0
    folder = tmp_path / "cell"
    folder.mkdir()
    cpu = watch.cpu_seconds()
    assert cpu == {"actor": 20.5, "learner": 30.0, "quantizer": 2.0, "evaluator": 4.0,
                   "redis": 2.0}  # fmt: skip
    summary = {"wall_seconds": 40.0, "env_steps": 3000, "learner_updates": 150,
               "stop_reason": "time budget 40s spent", "final_mean_return": float("nan"),
               "cpu_seconds": cpu, "energy": {"joules": 10.0, "method": "estimate"},
               "final_records": {"transitions_inserted": watch.transitions_inserted()}}  # fmt: skip
    write_run_folder(folder, watch, summary)
    assert is_done(folder)
    figures = load_figures(folder, 450.0)
    assert figures.env_steps_per_s == pytest.approx(100.0)  # (3000 - 1000) / (40 - 20)
    assert figures.updates_per_s == pytest.approx(5.0)
    # episode 110 (the 10th at 500) brings the full window's mean to 450: its own end
    # time, 25 s, and the env steps interpolated between the polls at 20 s and 30 s
    assert figures.seconds_to_target == 25.0 and figures.env_steps_to_target == 1500
    assert figures.cpu_seconds["actors"] == 20.5 and figures.final_return is None
    with (folder / "episodes.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 121 and {r["instance"] for r in rows} == {"actor-1", "evaluator"}
    assert rows[1]["wall_seconds"] == "15.0" and rows[1]["total_env_steps"] == "500"


def test_a_target_reached_between_polls_counts(tmp_path: Path) -> None:
    client = _FakeRedis()
    clock = iter([1000.0, 1010.0, 1020.0])
    watch = StackWatch(_FakeStack(), client, RedisKeys(), clock=lambda: next(clock))  # type: ignore[arg-type]
    for value in [500.0] * 100 + [0.0] * 50:  # 475 reached at the 100th, then lost
        client.add(Episode("evaluator", "eval", value, 500, 1, 0, 1005.0))
    watch.poll()
    assert watch.eval_mean() == 250.0 and watch.solved(475.0) and watch.best_window == 500.0
    assert stop_reason(_config(), watch.poll(), watch.solved(475.0)) == "target return 475 reached"


def test_report_names_the_launcher_and_the_compose_line(tmp_path: Path) -> None:
    out, config = tmp_path / "scale", _config()
    state = open_state(out, config, config.command(out))
    report = write_report(out, config, state).read_text()
    assert "**Launcher:** compose" in report
    assert "docker compose -p actorq-scale-<id>" in report and "--scale actor=2" in report
    with (out / "runs.csv").open() as f:
        (row,) = list(csv.DictReader(f))
    assert row["launcher"] == "compose" and row["status"] == "not run"
    assert os.path.basename(row["folder"]) == config.plan()[0].name


def test_cgroup_cpu_seconds_counts_the_cgroup_of_a_pid() -> None:
    """The benches' per-container CPU (cgroup v1 cpuacct or v2 cpu.stat): it grows while a
    process of that cgroup works; a pid that does not exist reads None."""
    import time

    from actorq.testing.compose import cgroup_cpu_seconds

    before = cgroup_cpu_seconds(os.getpid())
    assert before is not None and before > 0
    end = time.process_time() + 0.2
    while time.process_time() < end:  # 0.2 s of this process's CPU
        pass
    after = cgroup_cpu_seconds(os.getpid())
    assert after is not None and after - before >= 0.15
    assert cgroup_cpu_seconds(2**22 + 7) is None  # above Linux's pid_max
