"""bench/gpu_tables.py: the GPU check's verdicts (auto within 10%, the updates/s targets,
GPU vs CPU learner at 14 actors) and how bench output becomes a table."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import gpu_tables as tables


def _timed(algo, hidden, device, path, ms):
    return {"algo": algo, "hidden": hidden, "batch": 128, "device": device, "path": path, "ms": ms}


def _choice(algo, hidden, auto, target=None):
    return {"algo": algo, "hidden": hidden, "batch": 128, "auto": auto, "reason": "r",
            "mflop": 5.7, "target": target}  # fmt: skip


def _auto_line(rows: list[dict], case: str) -> str:
    text = "\n".join(tables.cases_section({"rows": rows}))
    return next(ln for ln in text.splitlines() if ln.startswith(f"| {case} | 5.7"))


@pytest.mark.parametrize(
    ("auto", "cpu_ms", "cuda_ms", "verdict"),
    [("cpu", 0.17, 1.39, "ok"), ("cuda", 1.0, 1.08, "ok"), ("cuda", 1.0, 1.2, "MISSED"),
     ("cpu", 2.0, 0.5, "MISSED")],
)  # fmt: skip
def test_auto_verdict_uses_best_path_per_device(auto, cpu_ms, cuda_ms, verdict) -> None:
    rows = [
        _timed("dqn", [64, 64], "cpu", "numpy-flat", cpu_ms),
        _timed("dqn", [64, 64], "cpu", "torch-eager", cpu_ms * 3),  # slower path ignored
        _timed("dqn", [64, 64], "cuda", "torch-eager", cuda_ms * 2),
        _timed("dqn", [64, 64], "cuda", "cuda-graph", cuda_ms),
        _choice("dqn", [64, 64], auto, target=8000),
    ]
    line = _auto_line(rows, "dqn 64x64 b128")
    assert f"| {verdict} |" in line, line
    best = min(cpu_ms, cuda_ms)
    picked = cpu_ms if auto == "cpu" else cuda_ms
    assert f"| {picked / best:.2f} |" in line


def test_target_met_or_not_on_the_best_cuda_path() -> None:
    met = [
        _timed("dqn", [64, 64], "cuda", "cuda-graph", 0.1),
        _choice("dqn", [64, 64], "cuda", 8000),
    ]
    assert ">= 8,000: 10,000 met" in _auto_line(met, "dqn 64x64 b128")
    slow = [
        _timed("dqn", [64, 64], "cuda", "torch-eager", 1.385),
        _choice("dqn", [64, 64], "cpu", 8000),
    ]
    line = _auto_line(slow, "dqn 64x64 b128")
    assert ">= 8,000: 722 NOT met" in line and "not measured (one device only)" in line


def _run(actors, spi, asked, device, rate):
    return {"actors": actors, "spi": spi, "asked": asked, "learner_device": device,
            "learner_update_path": "p", "env_steps_per_s": rate, "updates_per_s": 1.0}  # fmt: skip


def test_scaling_target_compares_gpu_and_cpu_learner_at_most_actors() -> None:
    rows = [_run(1, 16.0, "auto", "cpu", 13900), _run(14, 16.0, "auto", "cpu", 14900),
            _run(14, 0.125, "auto", "cpu", 202000),
            _run(14, 16.0, "cuda", "cuda", 30000)]  # fmt: skip
    text = "\n".join(tables.scaling_section({"rows": rows}))
    assert "14 actors at 16 samples/insert: 2.01x env steps/s (target >= 4x: NOT met)" in text
    assert "| 14 | 16 | auto | cpu (p) | 14,900 | 1 | 1.07x |" in text
    rows[-1]["env_steps_per_s"] = 60000
    assert "4.03x env steps/s (target >= 4x: met)" in "\n".join(
        tables.scaling_section({"rows": rows})
    )
    rows[-1]["learner_device"] = "cpu"  # --learner-device cpu-only: no GPU learner ran
    assert "not measured" in tables._scaling_target(rows)


def test_bench_output_json_lines_become_a_table() -> None:
    text = "note\n" + "\n".join(
        json.dumps({"algo": "dqn", "device": d, "ms": ms})
        for d, ms in (("cpu", 0.172), ("cuda", 1.385))
    )
    lines = tables.render_bench_output(text)
    assert lines[0] == "| algo | device | ms |" and "| dqn | cuda | 1.385 |" in lines
    doc = json.dumps({"device": "cuda", "cases": [{"algo": "td3", "ms": 4.14}]})
    assert "| td3 | 4.14 |" in tables.render_bench_output(doc)
    markdown = "# bench_learner: CPU x\n| a | b |\n|---|---|\n| 1 | 2 |\n"
    assert tables.render_bench_output(markdown) == [
        "- bench_learner: CPU x", "", "| a | b |", "|---|---|", "| 1 | 2 |",
    ]  # fmt: skip
    assert tables.render_bench_output("Traceback: boom")[1] == "Traceback: boom"


def test_steady_rates_leave_out_start_up(tmp_path: Path) -> None:
    rows = [{"wall_seconds": 1.0, "env_steps": 0, "learner_updates": 0},
            {"wall_seconds": 6.0, "env_steps": 5000, "learner_updates": 100},
            {"wall_seconds": 11.0, "env_steps": 55000, "learner_updates": 600}]  # fmt: skip
    (tmp_path / "metrics.jsonl").write_text("\n".join(map(json.dumps, rows)))
    rates = tables.steady_rates(tmp_path, skip=0.0)  # the empty start-up row is skipped
    assert {k: rates[k] for k in ("env_steps_per_s", "updates_per_s", "window_s")} == {
        "env_steps_per_s": 10000.0,
        "updates_per_s": 100.0,
        "window_s": 5.0,
    }
    with pytest.raises(RuntimeError, match="too few progress rows"):
        tables.steady_rates(tmp_path, skip=10.0)
