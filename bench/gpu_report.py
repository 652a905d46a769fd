"""The project's GPU check (issue 29): every stage under its own timeout, one markdown report.

Stages, in this order (what does not fit the budget is reported as skipped):
  env      the machine: GPU, driver, CPU model and flags, Python, torch, git commit
  cases    issue 29's four learner cases on cpu and cuda, every update path the learner
           offers, and whether `auto` picked the faster device (bench/gpu_cases.py)
  scaling  CartPole 64x64 int8 `actorq run`, 1/4/8/14 actors at 16 and 0.125 samples
           per insert (learner auto), plus 14 actors at 16 with the learner on cuda
  throughput  issue 30 on this machine: one actor vs its raw vector env (CartPole 64x64
           int8, bench_throughput.py, Redis embedded), then `actorq run` with 14 actors at
           0.125 samples per insert: env steps/s, and transitions Redis acknowledged that
           the learner never read (0 expected)
  e2e      DQN 1024^3, 12 actors, fp32/int8 actors x CPU (4 threads) / GPU learner, 0.125
  learner  bench/bench_learner.py --paths ... --device cpu and cuda (--json)
  pytest   the `gpu`-marked tests
Rates of a run are read from its metrics.jsonl after --skip seconds (start-up left out).
`--cpu-only --tiny` runs the same plumbing on a machine without a GPU in about a minute
(tests/e2e/test_gpu_check.py). Usually started by bench/gpu_check.sh (make gpu-check).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import gpu_tables as tables
from arms import cpu_label

ROOT = Path(__file__).resolve().parents[1]
PY = sys.executable


@dataclass
class Stage:
    name: str
    status: str = "skipped"  # ok | failed | timeout | skipped
    seconds: float = 0.0
    note: str = ""
    data: dict = field(default_factory=dict)
    timeout: float = 0.0


@dataclass
class Plan:
    """Durations and sizes of every stage; `tiny` shrinks them for plumbing tests."""

    run_seconds: float = 11.0  # scaling runs (each also pays start-up and shutdown)
    run_skip: float = 4.0
    e2e_seconds: float = 18.0
    e2e_skip: float = 7.0
    scaling_actors: tuple[int, ...] = (1, 4, 8, 14)
    scaling_spi: tuple[float, ...] = (16.0, 0.125)
    envs_per_actor: int = 16
    e2e_hidden: str = "1024,1024,1024"
    e2e_actors: int = 12
    case_seconds: float = 1.5
    # Tiny runs stop on env steps (a loaded machine's start-up can outlast a time budget;
    # 500k leaves the 2 s rate window even where one actor steps ~200k/s, as the fused
    # fast path does at M = 8 on a quiet core); 0 = stop on time, as the full plan does.
    run_env_steps: int = 0
    bench_args: tuple[str, ...] = ("--quick",)
    # bench_learner_service: the service fed by an actor vs its update alone, per ingest
    service_args: tuple[str, ...] = (
        "--algos",
        "dqn,td3,sac",
        "--seconds",
        "10",
        "--startup",
        "12",
        "--ingest",
        "thread,process",
    )
    # ... and with the replay mirrored on the device, k updates per call (ACTORQ_DEVICE_REPLAY_K)
    ring_args: tuple[str, ...] = (
        "--algos", "dqn,td3", "--seconds", "10", "--startup", "12", "--device-replay-k", "0,8",
    )  # fmt: skip
    # ... the same on prioritized replay (host priorities vs the ring's on the device)
    ring_prioritized_args: tuple[str, ...] = (
        "--algos", "dqn", "--seconds", "10", "--startup", "12", "--device-replay-k", "0,8",
        "--replay", "prioritized",
    )  # fmt: skip
    # throughput: bench_throughput.py's raw/actor phases, then (actors, M, spi) runs
    ratio_m: tuple[int, ...] = (32, 128)
    ratio_rounds: int = 2
    ratio_seconds: float = 3.0
    throughput_arms: tuple[tuple[int, int, float], ...] = (
        (14, 128, 0.125), (14, 128, 0.03), (14, 32, 0.125),
    )  # fmt: skip
    throughput_seconds: float = 35.0
    throughput_skip: float = 10.0
    pytest_paths: tuple[str, ...] = ("tests",)
    e2e_arms: tuple[tuple[str, str, str], ...] = (  # (learner, torch threads, precision)
        ("gpu", "1", "fp32"), ("gpu", "1", "int8"), ("cpu", "4", "fp32"), ("cpu", "4", "int8"),
    )  # fmt: skip
    # Seconds per stage; the default stages (all but throughput) together 435 of the 440 s
    # budget (bench/gpu_check.sh: 8 minutes with the wheel install and start-up).
    timeouts: dict[str, float] = field(default_factory=lambda: {
        "env": 15, "throughput": 230, "cases": 45, "scaling": 150, "e2e": 120, "learner": 55,
        "pytest": 50, "service": 300,
    })  # fmt: skip

    @classmethod
    def tiny(cls) -> Plan:
        return cls(
            run_seconds=11.0, run_skip=0.0, e2e_seconds=11.0, e2e_skip=0.0,
            # A low samples-per-insert, so the runs stop on env steps as fast as the actor
            # goes: at 16 the learner sets the pace, and on the 2-core AMD EPYC (~600
            # updates/s, ~5k env steps/s) two 500k-step runs outlasted the stage.
            scaling_actors=(1,), scaling_spi=(0.125,), envs_per_actor=4,
            # One end-to-end arm: the "gpu" learner asked for (the CPU with --cpu-only) with
            # int8 actors covers the plumbing; a second arm cost CI ~25 s and checked no more.
            e2e_arms=(("gpu", "1", "int8"),),
            e2e_hidden="64,64", e2e_actors=1, case_seconds=0.2, run_env_steps=500_000,
            bench_args=("--rounds", "1", "--updates", "3"),
            service_args=("--algos", "dqn", "--seconds", "3", "--startup", "10"),
            ring_args=("--algos", "dqn", "--seconds", "3", "--startup", "10",
                       "--device-replay-k", "4"),
            ring_prioritized_args=("--algos", "dqn", "--seconds", "3", "--startup", "10",
                                   "--device-replay-k", "4", "--replay", "prioritized"),
            ratio_m=(8,), ratio_rounds=1, ratio_seconds=1.0,
            throughput_arms=((1, 8, 0.125),), throughput_skip=0.0,
            pytest_paths=("tests/unit/test_learner_device_gpu.py",),
            timeouts={"env": 30, "throughput": 150, "cases": 60, "scaling": 150, "e2e": 150,
                      "learner": 240, "pytest": 60, "service": 120},
        )  # fmt: skip


class Deadline:
    def __init__(self, budget: float) -> None:
        self.end = time.monotonic() + budget

    def left(self) -> float:
        return self.end - time.monotonic()


def run_cmd(cmd: list[str], timeout: float, env: dict | None = None) -> tuple[int | None, str]:
    """(exit code or None on timeout, stdout+stderr tail)."""
    try:
        proc = subprocess.run(
            cmd, capture_output=True, text=True, timeout=max(timeout, 1.0), cwd=ROOT,
            env={**os.environ, **(env or {})}, stdin=subprocess.DEVNULL,
        )  # fmt: skip
    except subprocess.TimeoutExpired as exc:
        out = (exc.stdout or b"") + (exc.stderr or b"")
        return None, out.decode(errors="replace") if isinstance(out, bytes) else str(out)
    return proc.returncode, proc.stdout + proc.stderr


# --- stages -----------------------------------------------------------------------------
def stage_env(stage: Stage, args: argparse.Namespace, deadline: Deadline) -> None:
    probe = (
        "import json, torch; c = torch.cuda.is_available(); print(json.dumps({'torch': "
        "torch.__version__, 'cuda': torch.version.cuda, 'gpus': [torch.cuda.get_device_name(i) "
        "for i in range(torch.cuda.device_count())] if c else []}))"
    )
    code, out = run_cmd([PY, "-c", probe], deadline.left())
    facts = json.loads(out.strip().splitlines()[-1]) if code == 0 else {"torch": "unreadable"}
    smi_query = ["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv"]
    smi_code, smi = run_cmd(smi_query, 10) if _has("nvidia-smi") else (1, "")
    git_code, commit = (
        # --dirty: a device machine may get the working tree with an older .git beside it
        run_cmd(["git", "describe", "--always", "--dirty"], 10) if _has("git") else (1, "")
    )
    facts.update(
        python=platform.python_version(), cpu=cpu_label(), cores=os.cpu_count(),
        nvidia_smi=smi.strip() if smi_code == 0 else "not available",
        commit=commit.strip() if git_code == 0 else "unknown",
        date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        mode="cpu-only" if args.cpu_only else "gpu", plan="tiny" if args.tiny else "full",
        pythonpath=os.environ.get("PYTHONPATH", ""),
    )  # fmt: skip
    stage.data = facts
    stage.status = "ok" if code == 0 else "failed"


def _has(binary: str) -> bool:
    from shutil import which

    return which(binary) is not None


def stage_cases(stage: Stage, args: argparse.Namespace, deadline: Deadline) -> None:
    cmd = [PY, str(ROOT / "bench" / "gpu_cases.py"), "--seconds", str(args.plan.case_seconds)]
    cmd += ["--devices", "cpu" if args.cpu_only else "cpu,cuda"] + (["--tiny"] if args.tiny else [])
    code, out = run_cmd(cmd, deadline.left())
    rows = [json.loads(ln) for ln in out.splitlines() if ln.startswith("{")]
    stage.data = {"rows": rows}
    stage.status = "ok" if code == 0 else ("timeout" if code is None else "failed")
    if code != 0:
        stage.note = tables.tail(out)


def actorq_run(run_dir: Path, flags: list[str], seconds: float, steps: int) -> list[str]:
    cmd = [PY, "-m", "actorq", "run", "--target-return", "none", "--settle-at", "none"]
    cmd += ["--max-env-steps", str(steps or 1_000_000_000), "--max-seconds", str(seconds)]
    return [*cmd, "--run-dir", str(run_dir), *flags]


def one_run(name: str, flags: list[str], seconds: float, skip: float, args, deadline: Deadline,
            env: dict | None = None) -> dict:  # fmt: skip
    """One short `actorq run`; its steady rates and what its summary says."""
    run_dir = args.workdir / name
    steps = args.plan.run_env_steps
    seconds = 90.0 if steps else seconds  # stopping on steps: time is only a safety net
    limit = min(seconds + 60, deadline.left())
    if limit < (20 if steps else seconds + 5):
        return {"name": name, "error": "skipped: time budget"}
    code, out = run_cmd(actorq_run(run_dir, flags, seconds, steps), limit, env)
    row: dict = {"name": name, "run_dir": str(run_dir)}
    if code != 0:
        return {**row, "error": f"exit {code}: {tables.tail(out, 600)}"}
    try:
        row.update(tables.steady_rates(run_dir, skip))
        summary = json.loads((run_dir / "summary.json").read_text())
    except (OSError, ValueError, RuntimeError) as exc:
        return {**row, "error": str(exc)}
    for key in ("learner_device", "learner_update_path", "broadcast_bytes_total", "wall_seconds"):
        row[key] = summary.get(key)
    records = summary.get("final_records") or {}
    for key in ("transitions_inserted", "transitions_ingested", "transitions_not_ingested"):
        row[key] = records.get(key)
    row["restarts"] = summary.get("restarts") or {}
    return row


def stage_throughput(stage: Stage, args: argparse.Namespace, deadline: Deadline) -> None:
    """Issue 30's figures on this machine: the actor/raw ratio, then many actors through
    the real services, each run's env steps/s and transitions lost."""
    from actorq.redis_server import EmbeddedRedis

    plan = args.plan
    json_path = args.workdir / "bench-throughput.json"
    cmd = [PY, str(ROOT / "bench" / "bench_throughput.py"), "--envs", "cartpole64",
           "--m", ",".join(map(str, plan.ratio_m)), "--precisions", "int8",
           "--phases", "raw,actor", "--rounds", str(plan.ratio_rounds),
           "--seconds", f"{plan.ratio_seconds:g}", "--json", str(json_path)]  # fmt: skip
    budget = len(plan.ratio_m) * plan.ratio_rounds * 2 * plan.ratio_seconds + 60
    with EmbeddedRedis() as server:  # the actor phase pushes to a real Redis
        env = {"ACTORQ_BENCH_REDIS_URL": server.url}
        code, out = run_cmd(cmd, min(budget, deadline.left()), env)
    ratio = {"code": code, "out": tables.tail(out, 2500)}
    if code == 0 and json_path.exists():
        ratio["cells"] = tables.ratio_cells(json.loads(json_path.read_text()))
    rows = []
    for actors, m, spi in plan.throughput_arms:
        flags = ["--actors", str(actors), "--envs-per-actor", str(m), "--samples-per-insert",
                 f"{spi:g}", "--precision", "int8", "--learner-device", "auto"]  # fmt: skip
        name = f"tp-a{actors}-m{m}-spi{spi:g}"
        row = one_run(name, flags, plan.throughput_seconds, plan.throughput_skip, args, deadline)
        rows.append({**row, "actors": actors, "m": m, "spi": spi})
    stage.data = {"ratio": ratio, "rows": rows}
    ok = code == 0 and all("error" not in r for r in rows)
    stage.status = "ok" if ok else ("timeout" if code is None else "failed")


def stage_scaling(stage: Stage, args: argparse.Namespace, deadline: Deadline) -> None:
    plan, rows = args.plan, []
    gpu = "cpu" if args.cpu_only else "cuda"
    most, spi0 = max(plan.scaling_actors), plan.scaling_spi[0]
    # The GPU-vs-CPU pair at the most actors first: if the stage runs out of time, the
    # runs left out are the plain scaling ones.
    arms = [(most, spi0, "auto"), (most, spi0, gpu)]
    arms += [(n, spi, "auto") for spi in plan.scaling_spi for n in plan.scaling_actors]
    for actors, spi, device in dict.fromkeys(arms):
        flags = ["--actors", str(actors), "--envs-per-actor", str(plan.envs_per_actor),
                 "--samples-per-insert", f"{spi:g}", "--precision", "int8",
                 "--learner-device", device]  # fmt: skip
        name = f"scale-a{actors}-spi{spi:g}-{device}"
        row = one_run(name, flags, plan.run_seconds, plan.run_skip, args, deadline)
        rows.append({**row, "actors": actors, "spi": spi, "asked": device})
    order = {spi: i for i, spi in enumerate(plan.scaling_spi)}  # the table in plan order
    rows.sort(key=lambda r: (order[r["spi"]], r["asked"] != "auto", r["actors"]))
    stage.data = {"rows": rows}
    stage.status = "ok" if all("error" not in r for r in rows) else "failed"


def stage_e2e(stage: Stage, args: argparse.Namespace, deadline: Deadline) -> None:
    plan, rows = args.plan, []
    gpu = "cpu" if args.cpu_only else "cuda"
    for learner, threads, precision in plan.e2e_arms:
        device = gpu if learner == "gpu" else "cpu"
        flags = ["--hidden", plan.e2e_hidden, "--actors", str(plan.e2e_actors),
                 "--envs-per-actor", str(plan.envs_per_actor), "--samples-per-insert",
                 "0.125", "--precision", precision, "--learner-device", device]  # fmt: skip
        name = f"e2e-{device}-t{threads}-{precision}"
        env = {"ACTORQ_TORCH_THREADS": threads}
        row = one_run(name, flags, plan.e2e_seconds, plan.e2e_skip, args, deadline, env)
        rows.append({**row, "asked": device, "threads": int(threads), "precision": precision})
    stage.data = {"rows": rows}
    stage.status = "ok" if all("error" not in r for r in rows) else "failed"


# torch.compile is left out: compiling four cases does not fit the check's 8 minutes.
BENCH_PATHS = "numpy-flat,torch-eager,cuda-graph"


def stage_learner(stage: Stage, args: argparse.Namespace, deadline: Deadline) -> None:
    """bench_learner.py --paths (every update path per device, --json) where it has the
    flag; before that, its plain CPU table (torch path vs fast path)."""
    bench = [PY, str(ROOT / "bench" / "bench_learner.py")]
    _code, helptext = run_cmd([*bench, "--help"], 60)
    has_paths = "--paths" in helptext
    devices = ["cpu"] if args.cpu_only or not has_paths else ["cpu", "cuda"]
    if not has_paths:
        stage.note = "bench_learner.py has no --paths: its CPU table only"
    outputs = {}
    for device in devices:
        left = min(stage.timeout / len(devices), deadline.left())  # a share each
        if left < 5:
            outputs[device] = {"code": None, "out": "skipped: time budget"}
            continue
        cmd = [*bench, *args.plan.bench_args]
        json_path = args.workdir / f"bench-learner-{device}.json"
        if has_paths:
            cmd += ["--paths", BENCH_PATHS, "--device", device, "--json", str(json_path)]
        code, out = run_cmd(cmd, left)  # its markdown table goes into the report
        rows = json_path.read_text() if json_path.exists() else None  # into the JSON beside
        outputs[device] = {"code": code, "out": out, "json": rows}
    stage.data = outputs
    stage.status = "ok" if all(o["code"] == 0 for o in outputs.values()) else "failed"


def stage_pytest(stage: Stage, args: argparse.Namespace, deadline: Deadline) -> None:
    cmd = [PY, "-m", "pytest", "-m", "gpu", "-q", "-rs", "-p", "no:cacheprovider"]
    code, out = run_cmd([*cmd, *args.plan.pytest_paths], deadline.left())
    stage.data = {"code": code, "command": shlex.join(cmd[1:] + list(args.plan.pytest_paths)),
                  "out": tables.tail(out, 3000)}  # fmt: skip
    # exit 5: nothing collected; skips are fine without a GPU (cpu-only) and shown anyway
    stage.status = "ok" if code in (0, 5) else ("timeout" if code is None else "failed")


def stage_service(stage: Stage, args: argparse.Namespace, deadline: Deadline) -> None:
    """bench_learner_service.py: the learner service fed by a real actor against its
    update alone, per algorithm, device and ACTORQ_INGEST mode (issue 41)."""
    devices = "cpu" if args.cpu_only else "cpu,cuda"
    cmd = [PY, str(ROOT / "bench" / "bench_learner_service.py"), *args.plan.service_args,
           "--devices", devices]  # fmt: skip
    code, out = run_cmd(cmd, min(stage.timeout, deadline.left()))
    stage.data = {"code": code, "command": shlex.join(cmd[1:]), "out": tables.tail(out, 4000)}
    # The device ring on the captured path (the CPU runs the captured step eagerly),
    # uniform and prioritized.
    codes = [code]
    for name, ring_args in (
        ("ring", args.plan.ring_args),
        ("ring_prioritized", args.plan.ring_prioritized_args),
    ):
        ring = [PY, str(ROOT / "bench" / "bench_learner_service.py"), *ring_args,
                "--devices", "cpu" if args.cpu_only else "cuda",
                "--update-path", "torch-eager" if args.cpu_only else "cuda-graph"]  # fmt: skip
        ring_code, ring_out = run_cmd(ring, min(stage.timeout, deadline.left()))
        stage.data[name] = {
            "code": ring_code,
            "command": shlex.join(ring[1:]),
            "out": tables.tail(ring_out, 3000),
        }
        codes.append(ring_code)
    ok = all(c == 0 for c in codes)
    stage.status = "ok" if ok else ("timeout" if None in codes else "failed")


STAGES = {
    "env": stage_env, "throughput": stage_throughput, "cases": stage_cases,
    "scaling": stage_scaling, "e2e": stage_e2e, "learner": stage_learner, "pytest": stage_pytest,
    "service": stage_service,
}  # fmt: skip
# Issue 29's stages fill the 8-minute default; issue 30's throughput stage (~3 min) and
# issue 41's service stage (~5 min) run when asked for (`make gpu-throughput`,
# `make gpu-service`, or --stages).
DEFAULT_STAGES = [name for name in STAGES if name not in ("throughput", "service")]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    default_out = Path(os.environ["OUT"]) / "gpu-report.md" if os.environ.get("OUT") else None
    p.add_argument("--out", type=Path, default=default_out or Path("gpu-report.md"))
    p.add_argument("--budget", type=float, default=440.0, help="seconds for all stages")
    default = ",".join(DEFAULT_STAGES)
    stages_help = (f"comma-separated subset of {','.join(STAGES)}, or all (default: "
                   f"{default}; `make gpu-throughput` runs throughput)")  # fmt: skip
    p.add_argument("--stages", default=default, help=stages_help)
    p.add_argument("--cpu-only", action="store_true", help="no GPU: cuda arms run on cpu")
    p.add_argument("--tiny", action="store_true", help="tiny sizes and durations (tests)")
    p.add_argument("--workdir", type=Path, default=None, help="run folders (default: a temp dir)")
    args = p.parse_args(argv)
    args.plan = Plan.tiny() if args.tiny else Plan()
    if args.workdir is None:
        import tempfile

        args.workdir = Path(tempfile.mkdtemp(prefix="actorq-gpu-check-"))
    args.workdir.mkdir(parents=True, exist_ok=True)
    if args.stages == "all":
        args.stages = ",".join(STAGES)
    unknown = set(args.stages.split(",")) - set(STAGES)
    if unknown:
        p.error(f"--stages: unknown {sorted(unknown)}; expected some of {', '.join(STAGES)}")
    deadline = Deadline(args.budget)
    stages = [Stage(name) for name in STAGES if name in args.stages.split(",")]
    for stage in stages:
        stage.timeout = args.plan.timeouts[stage.name]
        if deadline.left() < 5:
            stage.note = "skipped: time budget spent"
        else:
            started = time.monotonic()
            own = Deadline(min(stage.timeout, deadline.left()))  # this stage's limit
            print(f"== {stage.name} (up to {own.left():.0f} s)", flush=True)
            STAGES[stage.name](stage, args, own)
            stage.seconds = time.monotonic() - started
            print(f"   {stage.status} in {stage.seconds:.0f} s", flush=True)
        tables.write_report(args.out, stages, args)  # after every stage: a kill keeps it
    print(f"report: {args.out}")
    return 0 if all(s.status == "ok" for s in stages) else 1


if __name__ == "__main__":
    sys.exit(main())
