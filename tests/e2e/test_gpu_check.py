"""`make gpu-check`'s plumbing on a machine without a GPU: bench/gpu_check.sh installs the
wheels of a local folder with no index into its target dir, puts it first on PYTHONPATH,
runs every stage of bench/gpu_report.py (--cpu-only --tiny: cuda arms on the CPU, tiny
runs) and leaves one markdown report with every table filled, plus its JSON."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]


def _probe_wheel(folder: Path) -> Path:
    """A pure-Python wheel standing in for the cp312 wheels (any Python installs it)."""
    folder.mkdir()
    path = folder / "actorq_gpu_probe-1.0-py3-none-any.whl"
    dist = "actorq_gpu_probe-1.0.dist-info"
    with zipfile.ZipFile(path, "w") as whl:
        whl.writestr("actorq_gpu_probe.py", "FOUND = True\n")
        whl.writestr(f"{dist}/METADATA", "Metadata-Version: 2.1\nName: actorq-gpu-probe\n"
                     "Version: 1.0\n")  # fmt: skip
        whl.writestr(f"{dist}/WHEEL", "Wheel-Version: 1.0\nGenerator: test\n"
                     "Root-Is-Purelib: true\nTag: py3-none-any\n")  # fmt: skip
        whl.writestr(f"{dist}/RECORD", "")
    return path


@pytest.mark.timeout(600)
def test_gpu_check_runs_every_stage_without_a_gpu(tmp_path: Path) -> None:
    _probe_wheel(tmp_path / "wheels")
    report = tmp_path / "out" / "gpu-report.md"
    env = {**os.environ, "PYTHON": sys.executable, "GPU_WHEELS": str(tmp_path / "wheels"),
           "GPU_SITE": str(tmp_path / "site"), "GPU_REPORT": str(report)}  # fmt: skip
    env.pop("PYTHONPATH", None)
    result = subprocess.run(
        ["bench/gpu_check.sh", "--cpu-only", "--tiny", "--stages", "all", "--workdir",
         str(tmp_path / "runs")],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=580, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert result.returncode == 0, (result.stdout + result.stderr)[-4000:]
    assert (tmp_path / "site" / "actorq_gpu_probe.py").exists()  # installed from the folder
    text = report.read_text()
    stages = json.loads(report.with_suffix(".json").read_text())
    assert {name: s["status"] for name, s in stages.items()} == dict.fromkeys(
        ("env", "throughput", "cases", "scaling", "e2e", "learner", "pytest", "service"), "ok"
    )
    assert f"- PYTHONPATH: `{tmp_path / 'site'}:{ROOT}" in text  # wheels first, then checkout
    for title in (
        "## Machine",
        "## 1. Learner updates",
        "## 2. Actor scaling",
        "## 0. Throughput",
        "## 3. End to end",
        "## 4. bench_learner.py",
        "## 5. The gpu-marked tests",
        "## 6. The learner service against its update alone",
    ):
        assert title in text  # fmt: skip
    # every table filled with measured rows
    cases = stages["cases"]["data"]["rows"]
    assert any(r.get("path") == "numpy-flat" and r["ms"] > 0 for r in cases)
    assert all(r["auto"] == "cpu" for r in cases if "auto" in r)  # no GPU: auto is cpu
    for name in ("scaling", "e2e"):
        rows = stages[name]["data"]["rows"]
        assert rows and all(r["env_steps_per_s"] > 0 and r["updates_per_s"] > 0 for r in rows)
        assert all(r["learner_device"] == "cpu" for r in rows)
    assert "| 1 | 0.125 | auto | cpu (numpy-flat) |" in text
    # issue 30's figures: the actor/raw ratio, and no transition lost through the services
    (cell,) = stages["throughput"]["data"]["ratio"]["cells"]
    assert cell["m"] == 8 and cell["raw"] > 0 and 0 < cell["ratio"] == cell["actor"] / cell["raw"]
    (run,) = stages["throughput"]["data"]["rows"]
    assert run["env_steps_per_s"] > 0 and run["learner_device"] == "cpu"
    assert run["transitions_inserted"] == run["transitions_ingested"] > 0
    assert run["transitions_not_ingested"] == 0
    assert "not measured (no GPU learner in this check)" in text  # never an estimate
    assert "| fast / torch |" in text or "| device |" in text  # bench_learner's own table
    assert "skipped" in stages["pytest"]["data"]["out"]  # gpu tests skip, saying why
    # the learner service against its update alone (issue 41): its table and ratio line
    assert "| dqn | cpu | numpy-flat | thread |" in text
    assert "service/alone min" in stages["service"]["data"]["out"]
    assert "service/alone median" in stages["service"]["data"]["out"]
    # ... and with the device ring (ACTORQ_DEVICE_REPLAY_K, the captured step on the CPU)
    assert "| dqn | cpu | torch-eager | thread | 4 |" in text
    assert stages["service"]["data"]["ring"]["code"] == 0
    assert stages["service"]["data"]["ring_prioritized"]["code"] == 0
    assert "prioritized replay" in stages["service"]["data"]["ring_prioritized"]["out"]
    assert "gpu check: exit 0" in result.stdout
