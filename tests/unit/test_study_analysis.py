"""actorq study: plan, selection errors, time/CPU/energy to the fp32 final return, and the
report written from run folders (folders written here in the format `actorq run` writes)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from actorq.cli import main
from actorq.config import ConfigError
from actorq.study.analysis import against_fp32, load_run, summarize_arm
from actorq.study.report import write_report
from actorq.study.runner import is_done, parse_selection, plan
from actorq.study.settings import SETTINGS


def _write_run(folder: Path, final: float, curve: list[tuple], joules: float, step_us: float):
    """curve: (wall, cpu, eval_mean, eval_episodes) per progress poll."""
    folder.mkdir(parents=True)
    rows = [
        {"wall_seconds": w, "cpu_seconds": c, "env_steps": int(w * 100),
         "eval_mean_return": m, "eval_episodes": e}
        for w, c, m, e in curve
    ]  # fmt: skip
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    summary = {
        "env_steps": int(curve[-1][0] * 100), "learner_updates": 500, "policy_versions": 10,
        "wall_seconds": curve[-1][0], "final_mean_return": final, "eval_episodes": 100,
        "stop_reason": "time budget spent", "final_records": {"agree": True},
        "cpu_seconds": {"learner": curve[-1][1] * 0.6, "actor-0": curve[-1][1] * 0.4},
        "energy": {"method": "estimate", "joules": joules, "grams_co2": joules / 3.6e6 * 475},
        "actor_breakdown": {
            "step_seconds": step_us / 1e6, "coverage": 0.99,
            "phases": {"inference": step_us / 2e6, "env_step": step_us * 0.49 / 1e6},
            "background": {"policy_pull": 1e-6},
        },
        "guard": {"guard_fallback_versions": 0.0, "guard_max_divergence": 0.01},
    }  # fmt: skip
    (folder / "summary.json").write_text(json.dumps(summary))


def test_plan_interleaves_and_rotates_precisions() -> None:
    setting = SETTINGS["cartpole-dqn-64x2"]
    runs = plan([setting], ["fp32", "int8"], [0, 1])
    assert [(r.precision, r.seed) for r in runs] == [
        ("fp32", 0), ("int8", 0), ("int8", 1), ("fp32", 1)
    ]  # fmt: skip


def test_bad_selection_is_a_config_error_and_exit_2(capsys) -> None:
    with pytest.raises(ConfigError, match="unknown study setting"):
        parse_selection("nope", "fp32", "0", False)
    with pytest.raises(ConfigError, match="including fp32"):
        parse_selection("", "int8", "0", True)
    with pytest.raises(ConfigError, match="--seeds"):
        parse_selection("", "fp32,int8", "a", True)
    assert main(["study", "--precisions", "int9", "--out", "/nonexistent/x"]) == 2
    assert "int9" in capsys.readouterr().err


def test_time_cpu_and_energy_to_the_fp32_final_return(tmp_path: Path) -> None:
    fp32_dir, int8_dir = tmp_path / "fp32", tmp_path / "int8"
    # fp32 ends at 100 after 100 s; int8 reaches 100 at 40 s, but an early lucky round
    # (10 episodes) at 10 s does not count: the fp32 mean covers 100 episodes.
    _write_run(fp32_dir, 100.0, [(10, 10, 20, 10), (50, 50, 60, 100), (100, 100, 100, 200)],
               joules=450.0, step_us=200.0)  # fmt: skip
    _write_run(int8_dir, 150.0, [(10, 8, 120, 10), (40, 30, 100, 100), (100, 80, 150, 300)],
               joules=360.0, step_us=100.0)  # fmt: skip
    fp32 = load_run(fp32_dir, "s", "fp32", 0)
    int8 = load_run(int8_dir, "s", "int8", 0)
    reached = against_fp32(int8, fp32)
    assert reached.target == 100.0 and reached.wall == 40 and reached.cpu == 30
    assert reached.joules == pytest.approx(360.0 * 30 / 80)
    arm = summarize_arm("s", "int8", [int8], {0: fp32})
    assert arm.speedup == pytest.approx(100 / 40)
    assert arm.cpu_ratio == pytest.approx(100 / 30)
    assert arm.energy_ratio == pytest.approx(450 / 360)
    assert arm.breakdown["inference"] == pytest.approx(50e-6)
    base = summarize_arm("s", "fp32", [fp32], {0: fp32})
    assert base.speedup == pytest.approx(1.0) and base.reached == 1


def test_a_fixed_target_times_every_arm_and_bounds_the_speedup(tmp_path: Path) -> None:
    # fp32 ends at 200 after 100 s without reaching 475; int8 reaches 480 over 100 episodes
    # at 60 s. Timed to fp32's final return, int8 would "reach" it at 20 s.
    _write_run(tmp_path / "fp32", 200.0, [(20, 20, 150, 100), (100, 100, 200, 400)],
               joules=450.0, step_us=200.0)  # fmt: skip
    _write_run(tmp_path / "int8", 500.0, [(20, 20, 210, 100), (60, 60, 480, 300),
                                          (100, 100, 500, 500)],
               joules=450.0, step_us=100.0)  # fmt: skip
    fp32 = load_run(tmp_path / "fp32", "s", "fp32", 0)
    int8 = load_run(tmp_path / "int8", "s", "int8", 0)
    assert against_fp32(int8, fp32).wall == 20
    reached = against_fp32(int8, fp32, fixed_target=475.0)
    assert reached.target == 475.0 and reached.wall == 60
    assert against_fp32(fp32, fp32, fixed_target=475.0).wall is None
    arm = summarize_arm("s", "int8", [int8], {0: fp32}, fixed_target=475.0)
    assert arm.reached == 1 and arm.speedup is None
    assert arm.speedup_at_least == pytest.approx(100 / 60)
    assert arm.energy_ratio_to_target is None
    assert arm.energy_ratio_at_least == pytest.approx(450 / (450 * 60 / 100))
    base = summarize_arm("s", "fp32", [fp32], {0: fp32}, fixed_target=475.0)
    assert base.reached == 0 and base.speedup is None and base.speedup_at_least is None


def test_report_names_a_fixed_target_and_a_lower_bound(tmp_path: Path) -> None:
    setting = SETTINGS["cartpole-dqn-1024x3-spi0.125-replay2m"]
    assert setting.target_return == 475.0
    runs = plan([setting], ["fp32", "int8"], [0])
    by_precision = {r.precision: r.folder(tmp_path) for r in runs}
    _write_run(by_precision["fp32"], 200.0, [(20, 20, 150, 100), (480, 480, 200, 900)],
               joules=450.0, step_us=200.0)  # fmt: skip
    _write_run(by_precision["int8"], 500.0, [(20, 20, 150, 100), (300, 300, 490, 900),
                                             (480, 480, 500, 1500)],
               joules=450.0, step_us=100.0)  # fmt: skip
    report = write_report(tmp_path, runs, {}).read_text()
    assert "timed to return 475" in report
    assert "| int8 | 1 | 500.0 |" in report and "| 1/1 | 300.0 | > 1.60x |" in report
    assert "| 1.00x | > 1.60x |" in report  # energy: whole run equal, to the target bound
    # rliable figures beside them: final return +150%, and fp32's whole run (480 s, never
    # reached) against int8's 300 s to the target
    assert "| int8 | 1 | 500.0 [500.0, 500.0] | +150.0% [+150.0%, +150.0%] |" in report
    assert "| int8 | 1 | 300.0 [300.0, 300.0] | -37.5% [-37.5%, -37.5%] | 1.00" in report
    with (tmp_path / "runs.csv").open() as f:
        rows = {r["precision"]: r for r in csv.DictReader(f)}
    assert rows["int8"]["target"] == "475.0" and rows["int8"]["wall_to_target"] == "300.0"
    assert rows["fp32"]["wall_to_target"] == ""


def test_report_from_run_folders(tmp_path: Path) -> None:
    setting = SETTINGS["cartpole-dqn-64x2"]
    runs = plan([setting], ["fp32", "int8"], [0])
    curve = [(10, 10, 20, 10), (50, 50, 60, 100), (100, 100, 100, 200)]
    _write_run(runs[0].folder(tmp_path), 100.0, curve, joules=450.0, step_us=200.0)
    assert is_done(runs[0].folder(tmp_path)) and not is_done(runs[1].folder(tmp_path))
    state = {"machine_at_start": {"cpu_model": "test cpu", "cpu_flags": ["avx2"], "cores": 2}}
    report = write_report(tmp_path, runs, state).read_text()
    assert "test cpu (avx2), 2 cores" in report and "Runs finished: 1 of 2" in report
    assert "| fp32 | 1 | 100.0 |" in report
    for name in ("return_vs_time", "breakdown", "ratios"):
        assert (tmp_path / f"{name}_{setting.name}.png").stat().st_size > 1000
    with (tmp_path / "runs.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 1 and rows[0]["precision"] == "fp32" and rows[0]["step_us"] == "200.0"
    with (tmp_path / "arms.csv").open() as f:
        arms = list(csv.DictReader(f))
    assert arms[0]["inference_us"] == "100.0"


def test_a_ratio_and_its_lower_bound_are_shown_together() -> None:
    from actorq.study.report import _at_least

    assert _at_least(1.723, None) == "1.72x"
    assert _at_least(None, 1.666) == "> 1.67x"
    assert _at_least(1.723, 1.666) == "1.72x; > 1.67x"
    assert _at_least(None, None) == "-"
