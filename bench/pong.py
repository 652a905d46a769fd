"""`make pong`: ALE Pong through the real services to a 100-episode mean of 18, or 9
minutes of wall clock, start-up included (issue 42's flagship), and one report.

One arm per call (`--precision int8`, the default, or `fp32`): the GPU machine lends 15
minutes a session, one 9-minute arm at most. The report of each arm goes to
OUT/pong-<precision>.md and .json (OUT: --out, else $OUT/pong where $OUT is set, else
./pong-report); once both arms' JSON lie in one folder, each report also gives the
ActorQ speed-up (fp32's seconds to 18 over int8's), or why there is none.

    bench/pong.sh                         # make pong: int8 actors, 9 minutes at most
    bench/pong.sh --precision fp32        # the fp32-actor arm, the same way
    bench/pong.sh --tiny --out DIR        # plumbing on a CPU: 1 actor, 36 s, no 18

The run is `actorq run --env ale:Pong` with EnvPool where it imports (gymnasium + ale-py
otherwise, said in the report), `--learner-device auto` and `--target-return 18`;
arguments after `--` go to `actorq run` as they are (e.g. `-- --samples-per-insert 4`).
Time to 18 is read from the run's episodes.csv as `actorq scale` reads it
(actorq.scale.results); the wall clock is this script's, from launch to exit.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from arms import cpu_label  # noqa: E402  (bench/, this script's folder)

from actorq.procutil import stop_child  # noqa: E402
from actorq.scale.results import RunFigures, last_line, load_figures  # noqa: E402

TARGET = 18.0
SHUTDOWN_MARGIN_S = 15.0  # of the minutes, for start-up before actorq run and shutdown after
PRECISIONS = ("int8", "fp32")
# DQN's defaults are CartPole's (lr 2.5e-3, a target sync every 50 updates, 1-step
# returns). For Atari this uses the DQN family's usual values instead (lr 1e-4 as in
# Rainbow-era Atari agents, n-step 3 as Ape-X and Rainbow, a slower target), not tuned
# here: no Pong run has reached 18 yet. ACTORQ_DQN_* set in the environment win.
DQN_ATARI = {
    "ACTORQ_DQN_LR": "1e-4",
    "ACTORQ_DQN_N_STEP": "3",
    "ACTORQ_DQN_TARGET_UPDATE_EVERY": "500",
}


def parse(argv: list[str] | None) -> tuple[argparse.Namespace, list[str]]:
    argv = sys.argv[1:] if argv is None else argv
    extra: list[str] = []
    if "--" in argv:
        at = argv.index("--")
        argv, extra = argv[:at], argv[at + 1 :]
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--precision", default="int8", choices=PRECISIONS, help="the actors'")
    p.add_argument("--minutes", type=float, default=9.0, help="wall clock, start-up included")
    p.add_argument("--target", type=float, default=TARGET, help="100-episode mean to reach")
    p.add_argument("--algo", default="dqn", choices=("dqn", "appo"))
    cores = len(os.sched_getaffinity(0))
    p.add_argument(
        "--actors", type=int, default=max(1, cores - 2),
        help="actor processes (default: the cores less two, for the learner and the rest)",
    )  # fmt: skip
    p.add_argument("--envs-per-actor", type=int, default=8)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--out", type=Path, default=None, help="report folder")
    p.add_argument("--tiny", action="store_true", help="plumbing on a CPU: 1 actor x 4 envs, 36 s")
    args = p.parse_args(argv)
    if args.minutes <= 0 or args.actors < 1 or args.envs_per_actor < 1:
        p.error("--minutes, --actors and --envs-per-actor must be positive")
    if args.tiny:
        args.minutes, args.actors, args.envs_per_actor = 0.6, 1, 4
    if args.out is None:
        outside = os.environ.get("OUT")  # the device machine's folder that comes back
        args.out = Path(outside) / "pong" if outside else Path("pong-report")
    return args, extra


def env_backend() -> str:
    """EnvPool where it imports (the issue's backend), else gymnasium's ALE."""
    try:
        import envpool  # noqa: F401
    except ImportError:
        return "gymnasium"
    return "envpool"


def run_command(
    args: argparse.Namespace, run_dir: Path, backend: str, extra: list[str]
) -> list[str]:
    cmd = [sys.executable, "-m", "actorq", "run", "--env", "ale:Pong", "--algo", args.algo]
    cmd += ["--env-backend", backend, "--precision", args.precision]
    cmd += ["--actors", str(args.actors), "--envs-per-actor", str(args.envs_per_actor)]
    cmd += ["--learner-device", "cpu" if args.tiny else "auto"]
    cmd += ["--target-return", f"{args.target:g}", "--seed", str(args.seed)]
    # actorq run counts its budget from its own start and then stops its services; the
    # interpreter's start-up before (~2 s) and the shutdown after (~5-10 s with pixel
    # replay) are inside this script's clock, so they are left out of the minutes.
    budget = max(args.minutes * 60 - SHUTDOWN_MARGIN_S, 10)
    cmd += ["--max-seconds", f"{budget:g}", "--run-dir", str(run_dir)]
    return cmd + extra


def machine() -> dict[str, object]:
    """The CPU (model, SIMD flags, cores) and the GPU nvidia-smi names, or none."""
    gpu = "none"
    try:
        smi = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,memory.total", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=10, check=False,
        )  # fmt: skip
        gpu = smi.stdout.strip() or gpu
    except (OSError, subprocess.TimeoutExpired):
        pass
    return {"cpu": cpu_label(), "cores": len(os.sched_getaffinity(0)), "gpu": gpu}


def arm_record(
    args, cmd, backend, settings, code, wall, figures: RunFigures | None, why: str
) -> dict:
    """What the report says of one arm, as JSON."""
    record: dict[str, object] = {
        "date": datetime.date.today().isoformat(), "precision": args.precision,
        "algo": args.algo, "target": args.target, "minutes": args.minutes,
        "command": " ".join(["python", *cmd[1:]]), "exit_code": code,
        "wall_seconds": round(wall, 1),
        "machine": machine(), "env_backend": backend, "settings": settings, "failure": why,
    }  # fmt: skip
    if figures is not None:
        record.update(
            seconds_to_target=figures.seconds_to_target,
            env_steps_to_target=figures.env_steps_to_target,
            best_return=figures.best_return, eval_episodes=len(figures.curve),
            env_steps=figures.env_steps,
            env_steps_per_s=figures.env_steps_per_s, updates_per_s=figures.updates_per_s,
            stop_reason=figures.stop_reason, cpu_seconds=figures.cpu_seconds,
            joules=figures.joules, energy_method=figures.energy_method,
        )  # fmt: skip
    return record


def speedup(records: dict[str, dict]) -> str:
    """The ActorQ speed-up line, from both arms' records when there are both."""
    if set(records) != set(PRECISIONS):
        missing = [p for p in PRECISIONS if p not in records]
        return f"speed-up: not measured (no {missing[0]} arm in this folder)"
    machines = {json.dumps(r["machine"], sort_keys=True) for r in records.values()}
    if len(machines) > 1:
        return "speed-up: not comparable (the arms ran on different machines)"
    times = {p: records[p].get("seconds_to_target") for p in PRECISIONS}
    if times["int8"] is None or times["fp32"] is None:
        unreached = " and ".join(p for p in PRECISIONS if times[p] is None)
        return f"speed-up: none ({unreached} did not reach {records['int8']['target']:g})"
    ratio = times["fp32"] / times["int8"]
    return (
        f"speed-up: int8 actors reached {records['int8']['target']:g} {ratio:.2f}x sooner "
        f"({times['int8']:.0f} s against fp32's {times['fp32']:.0f} s; one seed each)"
    )


def markdown(record: dict, others: dict[str, dict]) -> str:
    m = record["machine"]
    reached = record.get("seconds_to_target")
    if record["failure"]:
        result = f"**failed**: {record['failure']}"
    elif reached is not None:
        result = (
            f"**reached {record['target']:g} at {reached:.0f} s** of the run "
            f"({record['env_steps_to_target']:,} env steps)"
        )
    else:
        best, episodes = record.get("best_return"), record.get("eval_episodes", 0)
        if best is None:
            best_text = "no evaluator episode"
        elif episodes >= 100:
            best_text = f"best 100-episode mean {best:.1f}"
        else:  # fewer than a window: the mean of them all (actorq.scale.results)
            best_text = f"mean {best:.1f} over its {episodes} evaluator episodes"
        result = f"**not reached in {record['wall_seconds']:.0f} s**: {best_text}"
    rate = record.get("env_steps_per_s")
    settings = " ".join(f"{k}={v}" for k, v in record.get("settings", {}).items())
    lines = [
        f"# Pong, {record['precision']} actors, {record['date']}",
        "",
        f"- machine: {m['cpu']}; {m['cores']} cores usable; GPU: {m['gpu']}",
        f"- command: `{record['command']}` (env backend {record['env_backend']}; "
        f"settings {settings or 'none'})",
        f"- result: {result}",
        f"- wall clock, launch to exit: {record['wall_seconds']:.0f} s "
        f"(budget {record['minutes'] * 60:.0f} s); exit code {record['exit_code']}",
    ]
    if rate is not None:
        lines.append(
            f"- env steps/s {rate:,.0f}, learner updates/s {record['updates_per_s']:,.0f} "
            f"(steady, after the first update); stop: {record['stop_reason']}"
        )
    lines.append(f"- {speedup(others)}")
    return "\n".join(lines) + "\n"


def run_env(algo: str) -> dict[str, str]:
    """The run's ACTORQ_* settings beyond the command line: DQN_ATARI for DQN, each unless
    the environment sets it already."""
    preset = DQN_ATARI if algo == "dqn" else {}
    return {key: os.environ.get(key, value) for key, value in preset.items()}


def run_logged(cmd: list[str], log: Path, timeout: float, env: dict[str, str] | None = None) -> int:
    """Run `cmd`, its output shown as it comes and kept in `log`; its exit code, or 124
    when it outlived `timeout` (then SIGTERM, and SIGKILL 30 s later), silent or not."""
    with log.open("w") as keep:
        proc = subprocess.Popen(
            cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            text=True, env={**os.environ, **(env or {})},
        )  # fmt: skip
        expired = threading.Event()

        def stop() -> None:
            expired.set()
            stop_child(proc, 30.0)

        watchdog = threading.Timer(timeout, stop)
        watchdog.start()
        try:
            assert proc.stdout is not None
            with proc.stdout:
                for line in proc.stdout:
                    sys.stdout.write(line)
                    keep.write(line)
            code = proc.wait()
        finally:
            watchdog.cancel()
    return 124 if expired.is_set() else code


def main(argv: list[str] | None = None) -> int:
    args, extra = parse(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    run_dir = args.out / f"run-{args.precision}"
    backend, settings = env_backend(), run_env(args.algo)
    cmd = run_command(args, run_dir, backend, extra)
    print(f"pong: python {' '.join(cmd[1:])}", flush=True)
    log = args.out / f"run-{args.precision}.log"
    started = time.monotonic()
    code = run_logged(cmd, log, args.minutes * 60 + 90, settings)
    wall = time.monotonic() - started
    figures, why = None, ""
    if (run_dir / "summary.json").exists():
        figures = load_figures(run_dir, args.target)
    if code != 0:
        why = f"actorq run exited {code}: {last_line(log)}"
    record = arm_record(args, cmd, backend, settings, code, wall, figures, why)
    (args.out / f"pong-{args.precision}.json").write_text(json.dumps(record, indent=1) + "\n")
    records = {
        p: json.loads((args.out / f"pong-{p}.json").read_text())
        for p in PRECISIONS
        if (args.out / f"pong-{p}.json").exists()
    }
    text = markdown(record, records)
    (args.out / f"pong-{args.precision}.md").write_text(text)
    print(text, flush=True)
    return 0 if code == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
