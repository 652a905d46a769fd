"""`actorq study`: the runs, interleaved and resumable, then the report.

Every run is a real `actorq run` child process (embedded Redis, quantizer, learner,
actors, evaluator), so the study measures exactly what users run. Runs are interleaved
(seed by seed, setting by setting, the precision order rotated per seed) so that machine
noise hits every precision alike. A run counts as done when its folder has a summary
that was written after its services stopped and was not interrupted; anything else is
deleted and run again, so `actorq study` picks up where an interrupted study left off.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from actorq.config import ConfigError
from actorq.procutil import sigterm_interrupts, wait_or_stop
from actorq.study.settings import FULL, PRECISIONS, QUICK, SETTINGS, Setting

EXIT_INTERRUPTED = 130


@dataclass(frozen=True)
class PlannedRun:
    setting: Setting
    precision: str
    seed: int

    def folder(self, out: Path) -> Path:
        return out / "runs" / self.setting.name / f"{self.precision}-seed{self.seed}"


def plan(settings: list[Setting], precisions: list[str], seeds: list[int]) -> list[PlannedRun]:
    runs = []
    for i, seed in enumerate(seeds):
        order = precisions[i % len(precisions) :] + precisions[: i % len(precisions)]
        for setting in settings:
            runs.extend(PlannedRun(setting, p, seed) for p in order)
    return runs


def is_done(folder: Path) -> bool:
    try:
        summary = json.loads((folder / "summary.json").read_text())
    except (OSError, ValueError):
        return False
    return "final_records" in summary and not summary.get("stop_reason", "").startswith(
        "interrupted"
    )


def machine() -> dict:
    """CPU model and the flags that decide int8 speed, cores, load: every figure's context."""
    model, flags = platform.processor() or "unknown", set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
            elif line.startswith("flags"):
                flags = set(line.split(":", 1)[1].split())
    except OSError:
        pass
    wanted = ("avx2", "fma", "avx512f", "avx512_vnni", "avx_vnni", "amx_int8")
    return {
        "cpu_model": model,
        "cpu_flags": [f for f in wanted if f in flags],
        "cores": os.cpu_count(),
        "python": sys.version.split()[0],
        "load_average": os.getloadavg(),
        "date_utc": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()),
    }


def _execute(run: PlannedRun, out: Path, seconds: float | None) -> int:
    folder = run.folder(out)
    if folder.exists():  # an interrupted or failed run: start it again from nothing
        shutil.rmtree(folder)
    folder.parent.mkdir(parents=True, exist_ok=True)
    args = run.setting.run_args()
    if seconds is not None:
        args[args.index("--max-seconds") + 1] = f"{seconds:g}"
    cmd = [sys.executable, "-m", "actorq", "run", *args]
    cmd += ["--precision", run.precision, "--seed", str(run.seed), "--run-dir", str(folder)]
    env = {**os.environ, **dict(run.setting.variables)}
    with (folder.parent / f"{folder.name}.log").open("w") as log:
        child = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT)
        return wait_or_stop(child)  # Ctrl-C or SIGTERM: the run stops its services first


def parse_selection(settings: str, precisions: str, seeds: str, quick: bool):
    names = [s for s in settings.split(",") if s] if settings else list(QUICK if quick else FULL)
    unknown = [n for n in names if n not in SETTINGS]
    if unknown:
        raise ConfigError(
            f"unknown study setting(s) {', '.join(unknown)}; expected any of {', '.join(SETTINGS)}"
        )
    chosen = [p for p in precisions.split(",") if p] if precisions else list(PRECISIONS)
    bad = [p for p in chosen if p not in PRECISIONS]
    if bad or "fp32" not in chosen:
        raise ConfigError(
            f"--precisions {precisions!r}: expected a list of {', '.join(PRECISIONS)} "
            "including fp32 (every ratio is to fp32)"
        )
    try:
        seed_list = [int(s) for s in seeds.split(",") if s]
    except ValueError:
        raise ConfigError(f"--seeds {seeds!r}: expected integers like 0,1,2") from None
    if not seed_list:
        raise ConfigError("--seeds: expected at least one seed")
    return [SETTINGS[n] for n in names], chosen, seed_list


def run_study(
    out: Path,
    settings: list[Setting],
    precisions: list[str],
    seeds: list[int],
    seconds: float | None,
    report_only: bool = False,
) -> tuple[int, list[PlannedRun], dict]:
    """Run what is not done yet; returns the exit code, the plan and the study state the
    report is written from (by the caller: report.py imports this module)."""
    out.mkdir(parents=True, exist_ok=True)
    runs = plan(settings, precisions, seeds)
    state_path = out / "study.json"
    state = json.loads(state_path.read_text()) if state_path.exists() else {}
    state.setdefault("machine_at_start", machine())
    state["plan"] = [
        {"setting": r.setting.name, "precision": r.precision, "seed": r.seed} for r in runs
    ]
    state["seconds_override"] = seconds
    state_path.write_text(json.dumps(state, indent=2) + "\n")
    code = 0
    if not report_only:
        with sigterm_interrupts():
            code = _run_all(runs, out, seconds)
    state["machine_at_end"] = machine()
    state_path.write_text(json.dumps(state, indent=2) + "\n")
    return code, runs, state


def _run_all(runs: list[PlannedRun], out: Path, seconds: float | None) -> int:
    for i, run in enumerate(runs, 1):
        folder = run.folder(out)
        label = f"[{i}/{len(runs)}] {run.setting.name} {run.precision} seed {run.seed}"
        if is_done(folder):
            print(f"{label}: done already", flush=True)
            continue
        started = time.monotonic()
        print(f"{label}: running ...", flush=True)
        try:
            code = _execute(run, out, seconds)
        except KeyboardInterrupt:
            print("interrupted; run `actorq study` again with the same --out to resume")
            return EXIT_INTERRUPTED
        took = time.monotonic() - started
        if code == EXIT_INTERRUPTED or not is_done(folder):
            print(f"{label}: did not finish (exit {code}); see {folder}.log", flush=True)
            if code == EXIT_INTERRUPTED:
                return EXIT_INTERRUPTED
            continue
        summary = json.loads((folder / "summary.json").read_text())
        ret = summary.get("final_mean_return")
        print(
            f"{label}: {took:.0f} s, {summary['env_steps']:,} env steps, "
            f"{summary['learner_updates']:,} updates, return "
            f"{'-' if ret is None else f'{ret:.1f}'}",
            flush=True,
        )
    return 0
