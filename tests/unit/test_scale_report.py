"""actorq scale: figures of one run folder, the report (runs.csv, report.md, PNGs) from
synthetic run folders in the format `actorq run` writes, resuming and failed runs, and
the refusal to mix machines. No training runs here."""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path

import pytest

from actorq.config import ConfigError
from actorq.scale.arms import collect, summarize, time_ratios
from actorq.scale.grid import GridConfig
from actorq.scale.report import RUN_COLUMNS, write_report
from actorq.scale.results import cpu_by_role, eval_curve, load_figures, reach, steady_rates
from actorq.scale.runner import STATE, Tally, close_session, open_state, run_grid
from actorq.study.runner import machine

PNG = b"\x89PNG\r\n\x1a\n"
REQUIRED = ["actors", "precision", "samples_per_insert", "seed", "env_steps_per_s",
            "updates_per_s", "seconds_to_target", "best_return", "cpu_model", "cores"]  # fmt: skip


def _config(**kw) -> GridConfig:
    base = dict(
        actors=(1, 2), precisions=("fp32", "int8"), samples_per_insert=(16.0,), seeds=(1, 2),
        env="CartPole-v1", algo="dqn", target_return=475.0, max_seconds=60.0,
        max_env_steps=None,
    )  # fmt: skip
    return GridConfig(**{**base, **kw})


def write_run(
    folder: Path, evals: list[tuple[float, float]], *, rate: float = 1000.0, wall: float = 60.0
) -> None:
    """A finished run: eval episodes (wall, return), polls every 2 s from 4 s, the learner
    idle (warm-up) until 10 s, env steps at `rate` per second, 50 updates/s after."""
    folder.mkdir(parents=True)
    polls = [4.0 + 2 * i for i in range(int((wall - 4) / 2) + 1)]
    metrics = [
        {"wall_seconds": t, "env_steps": int(rate * t),
         "learner_updates": 0 if t < 10 else int(50 * (t - 8))}
        for t in polls
    ]  # fmt: skip
    (folder / "metrics.jsonl").write_text("".join(json.dumps(m) + "\n" for m in metrics))
    with (folder / "episodes.csv").open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["kind", "instance", "return", "length", "policy_version",
                    "total_env_steps", "wall_seconds"])  # fmt: skip
        for t, ret in evals:
            w.writerow(["train", "actor-0", 9.0, 9, 1, int(rate * t), t])  # ignored
            w.writerow(["eval", "evaluator", ret, int(ret), 1, int(rate * t), t])
    summary = {
        "env_steps": int(rate * wall), "learner_updates": int(50 * (wall - 8)),
        "wall_seconds": wall, "final_mean_return": evals[-1][1] if evals else None,
        "stop_reason": "time budget 60s spent", "final_records": {"agree": True},
        "cpu_seconds": {"learner": 30.0, "actor-0": 10.0, "actor-1": 12.0, "evaluator": 5.0,
                        "quantizer": 2.0, "redis": 1.0, "launcher": 3.0},
        "energy": {"method": "estimate", "joules": 270.0, "grams_co2": 0.03},
    }  # fmt: skip
    (folder / "summary.json").write_text(json.dumps(summary))


def _ramp(reach_at: float | None, start: float = 5.0, end: float = 60.0):
    """Eval episodes of 100, four a second from `start`; at `reach_at` a batch of 100
    episodes of 500 at once (the evaluator's rounds share a timestamp), then 500s."""
    evals = [(start + i / 4, 100.0) for i in range(int((end - start) * 4))]
    if reach_at is None:
        return evals
    before = [e for e in evals if e[0] < reach_at]
    after = [(t, 500.0) for t, _ in evals if t > reach_at]
    return before + [(reach_at, 500.0)] * 100 + after


def test_time_to_target_needs_a_full_window_of_100(tmp_path: Path) -> None:
    # 50 episodes of 500 first: a mean of 500 over 50 episodes is not "reached".
    evals = [(1.0 + i * 0.1, 500.0) for i in range(50)] + [(10.0 + i, 0.0) for i in range(50)]
    evals += [(60.0 + i, 500.0) for i in range(100)]
    write_run(tmp_path / "r", evals, wall=200.0)
    curve = eval_curve(tmp_path / "r" / "episodes.csv")
    assert len(curve) == 200 and curve[49].mean == 500.0
    # mean of the last 100 >= 475 once 95 of them are 500: episode 195, at 60 + 94 s
    point = reach(curve, 475.0)
    assert point is not None and point.episodes == 195 and point.wall == 154.0
    figures = load_figures(tmp_path / "r", 475.0)
    assert figures.seconds_to_target == 154.0 and figures.best_return == 500.0
    assert load_figures(tmp_path / "r", 501.0).seconds_to_target is None


def test_best_return_with_fewer_than_100_episodes_is_their_mean(tmp_path: Path) -> None:
    write_run(tmp_path / "r", [(5.0, 10.0), (6.0, 30.0)])
    figures = load_figures(tmp_path / "r", 475.0)
    assert figures.best_return == 20.0 and figures.seconds_to_target is None


def test_steady_rates_leave_out_warm_up() -> None:
    rows = [
        {"wall_seconds": 2.0, "env_steps": 0, "learner_updates": 0},
        {"wall_seconds": 5.0, "env_steps": 9000, "learner_updates": 0},
        {"wall_seconds": 10.0, "env_steps": 10000, "learner_updates": 100},
        {"wall_seconds": 20.0, "env_steps": 30000, "learner_updates": 600},
    ]
    assert steady_rates(rows) == (2000.0, 50.0)
    assert steady_rates(rows[:3]) is None  # one poll with updates: no interval


def test_cpu_by_role_groups_services() -> None:
    roles = cpu_by_role({"actor-0": 1.0, "actor-11": 2.0, "learner": 3.0, "learner-1": 1.0,
                         "redis": 0.5, "mystery": 0.25, "evaluator": None})  # fmt: skip
    assert roles["actors"] == 3.0 and roles["learner"] == 4.0 and roles["other"] == 0.25
    assert roles["redis"] == 0.5 and roles["evaluator"] == 0.0


def _state(out: Path, config: GridConfig) -> dict:
    state = open_state(out, config, config.command(out))
    close_session(out, state, Tally())
    return state


def _grid(out: Path, reach_times: dict[tuple[int, str, int], float | None]) -> None:
    """Finished runs of _config's grid with the given (actors, precision, seed) times."""
    for run in _config().plan():
        key = (run.actors, run.precision, run.seed)
        if key in reach_times:
            rate = 1000.0 * run.actors * (1.2 if run.precision == "int8" else 1.0)
            write_run(run.folder(out), _ramp(reach_times[key]), rate=rate)


def test_report_from_run_folders(tmp_path: Path) -> None:
    out, config = tmp_path / "scale", _config()
    times = {(1, "fp32", 1): 40.0, (1, "fp32", 2): 50.0, (1, "int8", 1): 30.0,
             (1, "int8", 2): None, (2, "fp32", 1): 20.0,
             (2, "int8", 1): 16.0}  # fmt: skip
    _grid(out, times)
    failed = config.plan()[-1]  # actors 2, fp32, seed 2: failed (a log, no summary)
    assert (failed.actors, failed.precision, failed.seed) == (2, "fp32", 2)
    failed_log = failed.folder(out).parent / f"{failed.name}.log"
    failed_log.write_text("$ python -m actorq run ...\nstarting\nerror: learner exited 1\n")
    state = _state(out, config)
    report = write_report(out, config, state).read_text()

    with (out / "runs.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 8 and list(rows[0]) == RUN_COLUMNS
    assert set(REQUIRED) <= set(rows[0])
    by = {(r["actors"], r["precision"], r["seed"]): r for r in rows}
    assert by[("1", "fp32", "1")]["seconds_to_target"] == "40.0"
    assert by[("1", "int8", "2")]["seconds_to_target"] == ""  # never reached: empty
    assert by[("1", "int8", "2")]["best_return"] == "100.0"
    assert float(by[("2", "int8", "1")]["env_steps_per_s"]) == pytest.approx(2400.0)
    assert float(by[("1", "fp32", "1")]["updates_per_s"]) == pytest.approx(50.0)
    assert by[("1", "fp32", "1")]["cpu_actors_s"] == "22.0"
    assert by[("1", "fp32", "1")]["energy_joules"] == "270.0"
    assert by[("2", "int8", "2")]["status"] == "not run"
    bad = by[("2", "fp32", "2")]
    assert bad["status"] == "failed" and bad["error"] == "error: learner exited 1"
    assert all(r["cpu_model"] == machine()["cpu_model"] for r in rows)

    assert machine()["cpu_model"] in report and "load average" in report
    assert "actorq scale --out" in report and "python -m actorq run" in report
    assert "| 1 | fp32 | 16 | 2/2 | 2/2 | 45.0 [40.0, 50.0] | 1,000 |" in report
    assert "| 1 | int8 | 16 | 2/2 | 1/2 | 30.0 [30.0, 30.0] | 1,200 |" in report
    assert "(1 failed)" in report and "error: learner exited 1" in report
    assert "No run reached" not in report
    # int8 / fp32 on seeds where both reached: actors 1 seed 1 (30/40), actors 2 seed 1
    assert "| 1 | 16 | int8 | 1 | 40.0 | 30.0 | 0.75 [0.75, 0.75] |" in report
    assert "| 2 | 16 | int8 | 1 | 20.0 | 16.0 | 0.80 [0.80, 0.80] |" in report
    for png in ("return_vs_wall.png", "time_to_target.png"):
        data = (out / png).read_bytes()
        assert data.startswith(PNG) and len(data) > 5000


def test_no_run_reached_says_so_and_keeps_every_arm(tmp_path: Path) -> None:
    out, config = tmp_path / "scale", _config()
    _grid(out, {(a, p, s): None for a in (1, 2) for p in ("fp32", "int8") for s in (1,)})
    report = write_report(out, config, _state(out, config)).read_text()
    assert "No run reached the target 475" in report
    arm_rows = [line for line in report.splitlines() if "| 16 | 1/2 | 0/1 | not reached |" in line]
    assert len(arm_rows) == 4  # every arm has its row, with its best return
    assert all("| 100.0 (100.0) |" in line for line in arm_rows)
    assert "none: not both reached" in report
    assert (out / "time_to_target.png").read_bytes().startswith(PNG)


def test_arm_iqm_uses_stats_bootstrap(tmp_path: Path) -> None:
    out, config = tmp_path / "scale", _config(seeds=(1, 2, 3, 4))
    seeds = {1: 10.0, 2: 20.0, 3: 30.0, 4: 1000.0}
    for run in config.plan():
        if (run.actors, run.precision) == (1, "fp32"):
            write_run(run.folder(out), _ramp(None), wall=60.0)
            (run.folder(out) / "episodes.csv").write_text(
                "kind,instance,return,length,policy_version,total_env_steps,wall_seconds\n"
                + "".join(f"eval,e,500,500,1,1,{seeds[run.seed]}\n" for _ in range(100))
            )
    arm = next(a for a in summarize(collect(out, config)) if a.runs)
    assert arm.reached == 4 and arm.time_to_target is not None
    assert arm.time_to_target.point == pytest.approx(25.0)  # IQM drops 10 and 1000
    assert arm.time_to_target.low < 25.0 < arm.time_to_target.high
    assert time_ratios([arm]) == []  # no int8 arm finished: nothing to compare


def test_resume_runs_only_what_is_not_done(tmp_path: Path, monkeypatch, capsys) -> None:
    out, config = tmp_path / "scale", _config(seeds=(1,))
    runs = config.plan()
    for run in runs[:3]:
        write_run(run.folder(out), _ramp(30.0))
    started: list[str] = []
    code = "print('boom: bad things'); raise SystemExit(3)"  # a child that fails at once

    def fake_command(self, run, folder):
        started.append(run.name)
        return [sys.executable, "-c", code]

    monkeypatch.setattr(GridConfig, "run_command", fake_command)
    state = open_state(out, config, "actorq scale ...")
    exit_code, tally = run_grid(out, config, state)
    text = capsys.readouterr().out
    assert exit_code == 0 and started == [runs[3].name]
    assert (tally.ran, tally.done_already, tally.failed) == (1, 3, 1)
    assert text.count(": done already") == 3
    assert "FAILED (exit 3): boom: bad things" in text
    assert "runs" not in state  # a failed run is not recorded as run

    # The rerun succeeds (the child writes a finished folder); then nothing runs again.
    template = tmp_path / "template"
    write_run(template, _ramp(12.5))
    code = f"import shutil; shutil.copytree({str(template)!r}, {str(runs[3].folder(out))!r})"
    exit_code, tally = run_grid(out, config, state)
    assert started == [runs[3].name] * 2 and (tally.ran, tally.failed) == (1, 0)
    assert "target 475 reached at 12.5 s" in capsys.readouterr().out
    assert state["runs"][runs[3].name]["git_describe"] == state["sessions"][-1]["git_describe"]
    exit_code, tally = run_grid(out, config, state)
    assert len(started) == 2 and (tally.ran, tally.done_already) == (0, 4)


def test_a_folder_from_another_machine_is_refused(tmp_path: Path, capsys) -> None:
    from actorq.cli import main

    out, config = tmp_path / "scale", _config()
    _state(out, config)
    state = json.loads((out / STATE).read_text())
    state["machine"]["cpu_model"] = "Some Other CPU @ 1.00GHz"
    (out / STATE).write_text(json.dumps(state))
    with pytest.raises(ConfigError, match=r"another machine .*Some Other CPU"):
        open_state(out, config, "actorq scale")
    argv = ["scale", "--out", str(out), "--actors", "1,2", "--seeds", "1,2"]
    assert main(argv) == 2
    assert "A report never mixes machines" in capsys.readouterr().err
    assert not (out / "runs").exists()  # refused before any run started


def test_a_folder_with_other_run_settings_is_refused(tmp_path: Path) -> None:
    out = tmp_path / "scale"
    _state(out, _config())
    open_state(out, _config(actors=(1, 2, 4)), "more actors is fine")
    with pytest.raises(ConfigError, match=r"other run settings.*max_seconds"):
        open_state(out, _config(max_seconds=90.0), "another budget")


def test_an_interrupted_run_is_reported_and_not_done(tmp_path: Path) -> None:
    out, config = tmp_path / "scale", _config(actors=(1,), seeds=(1,))
    fp32, int8 = config.plan()
    write_run(fp32.folder(out), _ramp(20.0))
    write_run(int8.folder(out), _ramp(None))
    summary = json.loads((int8.folder(out) / "summary.json").read_text())
    summary["stop_reason"] = "interrupted (Ctrl-C)"
    (int8.folder(out) / "summary.json").write_text(json.dumps(summary))
    (out / "runs" / f"{int8.name}.log").write_text("stopping services\ninterrupted\n")
    report = write_report(out, config, _state(out, config)).read_text()
    assert "1 finished, 0 failed, 1 interrupted" in report
    assert f"`{int8.name}` (interrupted): interrupted" in report
