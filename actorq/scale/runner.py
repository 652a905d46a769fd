"""Running the grid: one `actorq run` child per cell and seed, one progress line per run
started and finished, resumable.

A run counts as done when its folder holds a summary written after its services stopped
(`actorq.study.runner.is_done`); anything else is deleted and run again, so a second
`actorq scale` with the same --out runs only what the first did not finish. A run that
fails is reported with its log's last line and the grid goes on. The folder's scale.json
records the machine it was written on; resuming on another CPU model is refused, so a
report never mixes machines.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from actorq.config import ConfigError
from actorq.procutil import sigterm_interrupts, wait_or_stop
from actorq.scale.grid import GridConfig, ScaleRun
from actorq.scale.results import last_line, load_figures
from actorq.study.runner import EXIT_INTERRUPTED, is_done, machine

STATE = "scale.json"


def git_describe() -> str:
    """`git describe` of the checkout actorq runs from, or 'unknown' outside one."""
    root = Path(__file__).resolve().parents[2]
    try:
        done = subprocess.run(
            ["git", "describe", "--always", "--dirty", "--tags"],
            cwd=root, capture_output=True, text=True, timeout=10, check=False,
        )  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    return done.stdout.strip() or "unknown"


def _grid_key(config: GridConfig) -> dict:
    """What every run of one report must share; the grid's lists may grow on resume."""
    key = {
        "env": config.env,
        "algo": config.algo,
        "target_return": config.target_return,
        "max_seconds": config.max_seconds,
        "max_env_steps": config.max_env_steps,
        "stop_at_target": config.stop_at_target,
        "run_args": list(config.run_args),
    }
    if config.launcher != "processes":  # absent for processes: older folders still resume
        key["launcher"] = config.launcher
    return key


def _same_machine(saved: dict, now: dict) -> bool:
    keys = ("cpu_model", "cpu_flags", "cores")
    return all(saved.get(k) == (list(now[k]) if k == "cpu_flags" else now[k]) for k in keys)


def open_state(out: Path, config: GridConfig, command: str) -> dict:
    """scale.json with this session added; refuses a folder from another machine or grid."""
    path = out / STATE
    now = machine()
    state = json.loads(path.read_text()) if path.exists() else {}
    saved = state.get("machine")
    if saved is not None and not _same_machine(saved, now):
        raise ConfigError(
            f"{out} holds runs from another machine ({saved.get('cpu_model')}, "
            f"{saved.get('cores')} cores, flags {','.join(saved.get('cpu_flags', []))}); this "
            f"one is {now['cpu_model']}, {now['cores']} cores, flags "
            f"{','.join(now['cpu_flags'])}. A report never mixes machines: use another --out"
        )
    key = _grid_key(config)
    if "grid" in state and state["grid"] != key:
        diff = {k: (state["grid"].get(k), v) for k, v in key.items() if state["grid"].get(k) != v}
        raise ConfigError(
            f"{out} was written with other run settings ({diff}, as (then, now)); its runs "
            "could not share one report: give the same settings or use another --out"
        )
    state.setdefault("machine", {k: now[k] for k in ("cpu_model", "cpu_flags", "cores")})
    state["grid"] = key
    session = {"command": command, "git_describe": git_describe(), "started_utc": now["date_utc"]}
    session["load_average_start"] = list(now["load_average"])
    state.setdefault("sessions", []).append(session)
    state["plan"] = [r.name for r in config.plan()]
    out.mkdir(parents=True, exist_ok=True)
    save_state(out, state)
    return state


def save_state(out: Path, state: dict) -> None:
    tmp = out / (STATE + ".tmp")
    tmp.write_text(json.dumps(state, indent=2) + "\n")
    tmp.replace(out / STATE)


@dataclass
class Tally:
    ran: int = 0
    done_already: int = 0
    failed: int = 0


def execute(run: ScaleRun, config: GridConfig, out: Path) -> int:
    """One `actorq run` (or compose stack), its output in runs/<name>.log; an unfinished
    folder starts over."""
    if config.launcher == "compose":
        from actorq.scale.compose_runner import execute_compose

        return execute_compose(run, config, out)
    folder = run.folder(out)
    if folder.exists():
        shutil.rmtree(folder)
    folder.parent.mkdir(parents=True, exist_ok=True)
    cmd = config.run_command(run, folder)
    with (folder.parent / f"{run.name}.log").open("w") as log:
        log.write("$ " + " ".join(cmd) + "\n")
        log.flush()
        child = subprocess.Popen(
            cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            env={**os.environ, "COLUMNS": "200"},  # keep rich's lines whole in the log
        )  # fmt: skip
        return wait_or_stop(child)  # Ctrl-C or SIGTERM: the run stops its services first


def finished_line(run: ScaleRun, out: Path, target: float, took: float) -> str:
    f = load_figures(run.folder(out), target)
    rates = (
        "-"
        if f.env_steps_per_s is None
        else f"{f.env_steps_per_s:,.0f} env steps/s, {f.updates_per_s:,.1f} updates/s"
    )
    best = "-" if f.best_return is None else f"{f.best_return:.1f}"
    reached = (
        f"target {target:g} reached at {f.seconds_to_target:.1f} s"
        if f.seconds_to_target is not None
        else f"target {target:g} not reached"
    )
    return (
        f"{took:.0f} s, {f.env_steps:,} env steps, {rates} (steady), {reached}, best "
        f"return {best}, CPU {f.cpu_total:.0f} s"
    )


def run_grid(out: Path, config: GridConfig, state: dict | None = None) -> tuple[int, Tally]:
    """Run what is not done yet, printing a line per run started and finished; `state`
    (scale.json) records which session, at which `git describe`, ran each run."""
    runs = config.plan()
    tally = Tally()
    with sigterm_interrupts():
        for i, run in enumerate(runs, 1):
            label = f"[{i}/{len(runs)}] {run.label()}"
            if is_done(run.folder(out)):
                tally.done_already += 1
                print(f"{label}: done already", flush=True)
                continue
            print(f"{label}: running ...", flush=True)
            started = time.monotonic()
            try:
                code = execute(run, config, out)
            except KeyboardInterrupt:
                print("interrupted; run the same `actorq scale` again to resume", flush=True)
                return EXIT_INTERRUPTED, tally
            tally.ran += 1
            if not is_done(run.folder(out)):
                tally.failed += 1
                log = run.folder(out).parent / f"{run.name}.log"
                print(f"{label}: FAILED (exit {code}): {last_line(log)} [log: {log}]", flush=True)
                continue
            took = time.monotonic() - started
            print(f"{label}: {finished_line(run, out, config.target_return, took)}", flush=True)
            if state is not None:
                session = state["sessions"][-1]
                state.setdefault("runs", {})[run.name] = {
                    "session": len(state["sessions"]),
                    "git_describe": session["git_describe"],
                }
                save_state(out, state)
    return 0, tally


def close_session(out: Path, state: dict, tally: Tally) -> None:
    session = state["sessions"][-1]
    session["load_average_end"] = list(os.getloadavg())
    session.update(ran=tally.ran, done_already=tally.done_already, failed=tally.failed)
    save_state(out, state)
