"""Env steps/s of the raw vector env, one actor alone, and the whole services, side by side.

Phases, interleaved round by round so machine load hits them alike:
  raw       the vector env the actor builds (actorq.envs.make_vector_env), random actions;
            env steps leave NEXT_STEP reset rows out, as the actor's count does, and
            `raw-rows` counts every row (raw_env_rate)
  actor     the actor loop (actorq.actor.loop.Actor) with its policy built in process
            (bench/actor_inproc.py), pushing to the real Redis at 127.0.0.1:6379
  noep      `actor` without writing finished episodes to Redis (a diagnostic: what the
            episodes stream, one columnar entry per push, costs the loop)
  plain     the same loop on its plain path with the old fixed push_every 32
            (ACTORQ_FAST_STEP=0 ACTORQ_PUSH_EVERY=32): the before of the fast path
  unfused   `actor` with ACTORQ_FUSED_ACT=0: the fast path's numpy forward
            (actorq.quant.numpy_mlp) and numpy exploration instead of its numba kernels
            (actorq.actor.fast_act): an actor where numba is not installed
  torchfwd  `unfused` with ACTORQ_NUMPY_ACT=0: torch's module as the forward
  services  `actorq run` with N actors at a low samples-per-insert, --target-return none
Each phase runs once per env backend of --env-backends (gymnasium, envpool: who builds the
vector env, actorq.envs.make_vector_env), side by side in the same round; envpool rows are
labelled `<phase>:envpool`. Per cell: median env steps/s, the ratio to the raw env of the
same backend, the ratio to the same phase on gymnasium (x gym), and microseconds per
vector step by loop phase (actorq.breakdown). CPU model and flags are printed first.

    .venv/bin/python bench/bench_throughput.py --quick
    .venv/bin/python bench/bench_throughput.py --envs cartpole64 --m 32,128 --phases raw,actor
    .venv/bin/python bench/bench_throughput.py --envs halfcheetah --m 8,32 --phases raw,actor \
        --env-backends gymnasium,envpool
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from actor_inproc import run_actor

from actorq.actor.fixed_policy import make_policy
from actorq.actor.stepper import VectorStepper
from actorq.envs import check_backend, describe_env, make_vector_env


@dataclass(frozen=True)
class Cell:
    name: str
    env_id: str
    hidden: tuple[int, ...]
    algo: str


CELLS = {
    "cartpole64": Cell("cartpole64", "CartPole-v1", (64, 64), "dqn"),
    "cartpole512": Cell("cartpole512", "CartPole-v1", (512, 512, 512), "dqn"),
    "halfcheetah": Cell("halfcheetah", "HalfCheetah-v5", (256, 256), "td3"),
    "pong": Cell("pong", "ale:Pong", (), "dqn"),  # Nature CNN (actorq.models.cnn)
}
MIN_SECONDS = {"pong": 10.0}  # ~1k env steps/s: a few seconds hold too few pushes
ARMS = {
    "actor": {},
    "noep": {"episodes": False},
    "plain": {"fast_step": False, "push_every": 32},
    "unfused": {"fused_act": False},
    "torchfwd": {"fused_act": False, "numpy_act": False},
}
ROOT = Path(__file__).resolve().parent.parent


def raw_env_rate(
    env_id: str, m: int, seconds: float, seed: int, backend: str
) -> tuple[float, float]:
    """(env steps/s, rows/s) of the vector env alone, uniformly random actions per step.

    With NEXT_STEP autoreset (gymnasium's native vector envs, EnvPool) the row after an
    episode's end is a reset: no transition, its action ignored, and the actor does not
    count it as an env step (actorq.actor.stepper). Env steps leave those rows out too, so
    that actor/raw compares like with like; rows/s counts every row. The ends are counted
    after the timed loop, from the step's own (fresh) flag arrays."""
    env = make_vector_env(env_id, m, seed, backend=backend)
    space = env.single_action_space
    rng = np.random.default_rng(seed)
    discrete = hasattr(space, "n")
    next_step = VectorStepper(env).next_step_mode
    env.reset(seed=seed)
    flags, started = [], time.perf_counter()
    while (elapsed := time.perf_counter() - started) < seconds:
        if discrete:
            actions = rng.integers(0, space.n, m)
        else:
            actions = rng.uniform(-1, 1, (m, *space.shape)).astype(np.float32)
        _, _, terminated, truncated, _ = env.step(actions)
        flags.append((terminated, truncated))
    env.close()
    rows = len(flags) * m
    # Each end but those of the last step was followed by one reset row.
    resets = sum(np.count_nonzero(np.logical_or(*f)) for f in flags[:-1]) if next_step else 0
    return (rows - resets) / elapsed, rows / elapsed


def services_rate(cell: Cell, precision: str, n: int, m: int, seconds: float, backend: str) -> dict:
    """`actorq run` for about `seconds`: env steps/s between the first progress row with
    steps and the last one (start-up left out), and the run's actor breakdown."""
    with tempfile.TemporaryDirectory(prefix="bench-tp-") as tmp:
        run_dir = Path(tmp) / "run"
        cmd = [
            str(ROOT / ".venv/bin/actorq"), "run", "--env", cell.env_id, "--algo", cell.algo,
            "--actors", str(n), "--envs-per-actor", str(m), "--precision", precision,
            "--samples-per-insert", "0.125", "--target-return", "none", "--settle-at", "none",
            "--max-seconds", str(seconds), "--max-env-steps", "1000000000",
            "--run-dir", str(run_dir), "--env-backend", backend,
        ]  # fmt: skip
        if cell.hidden:
            cmd += ["--hidden", ",".join(map(str, cell.hidden))]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=seconds + 180)
        if proc.returncode != 0:
            return {"error": proc.stderr.strip().splitlines()[-1:] or [f"rc {proc.returncode}"]}
        rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
        summary = json.loads((run_dir / "summary.json").read_text())
    moving = [r for r in rows if r["env_steps"] > 0]
    if len(moving) < 2:
        return {"error": [f"fewer than 2 progress rows with env steps in {seconds:.0f} s"]}
    first, last = moving[0], moving[-1]
    span = last["wall_seconds"] - first["wall_seconds"]
    rate = (last["env_steps"] - first["env_steps"]) / span if span > 0 else float("nan")
    parts = summary.get("actor_breakdown") or {}
    phases = {p: s * 1e6 for p, s in parts.get("phases", {}).items()}  # per actor step
    return {"rate": rate, "phases": phases}


def cpu_description() -> str:
    lines = subprocess.run(["lscpu"], capture_output=True, text=True).stdout.splitlines()
    fields = dict(line.split(":", 1) for line in lines if ":" in line)
    model = fields.get("Model name", "?").strip()
    flags = set(fields.get("Flags", "").split())
    shown = [f for f in ("avx2", "avx512f", "avx512_vnni", "avx_vnni", "amx_int8") if f in flags]
    load = os.getloadavg()
    return (
        f"CPU: {model}, {os.cpu_count()} cores, flags {' '.join(shown) or '(no avx2)'}; "
        f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}"
    )


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--envs", default=",".join(CELLS), help=f"of {','.join(CELLS)}")
    parser.add_argument("--m", default="8,32,128", help="envs per actor")
    parser.add_argument("--n", default="1,2", help="actors in the services phase")
    parser.add_argument("--precisions", default="fp32,int8")
    parser.add_argument("--phases", default="raw,actor,services")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=4.0, help="per raw/actor measure")
    parser.add_argument("--service-seconds", type=float, default=30.0)
    parser.add_argument("--service-m", type=int, default=32, help="envs per actor (services)")
    parser.add_argument("--json", type=Path, help="also write every measurement here")
    parser.add_argument(
        "--env-backends", default="gymnasium", help="vector-env backends: gymnasium,envpool"
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="CartPole 64x64 int8, M 32 and 128, 2 rounds of 3 s; services N=1 for 20 s",
    )
    args = parser.parse_args()
    if args.quick:
        args.envs, args.m, args.precisions, args.n = "cartpole64", "32,128", "int8", "1"
        args.rounds, args.seconds, args.service_seconds = 2, 3.0, 20.0
    for name in args.envs.split(","):
        if name not in CELLS:
            parser.error(f"--envs: unknown {name!r}, expected some of {', '.join(CELLS)}")
    for phase in args.phases.split(","):
        if phase not in ("raw", *ARMS, "services"):
            parser.error(f"--phases: unknown {phase!r}, expected raw, {', '.join(ARMS)}, services")
    return args


def label(phase: str, backend: str) -> str:
    """The table's phase column: gymnasium rows keep the plain names of earlier tables."""
    return phase if backend == "gymnasium" else f"{phase}:{backend}"


def measure_round(args, cell: Cell, r: int, backend: str, policies, results) -> None:
    """One round of the raw and actor phases of `cell` on one backend, every M."""
    phases, precisions = args.phases.split(","), args.precisions.split(",")
    for m in (int(x) for x in args.m.split(",")):
        if "raw" in phases:
            rate, rows = raw_env_rate(cell.env_id, m, args.seconds, seed=r, backend=backend)
            results.setdefault((cell.name, label("raw", backend), "-", m), []).append(rate)
            results.setdefault((cell.name, label("raw-rows", backend), "-", m), []).append(rows)
        seconds = max(args.seconds, MIN_SECONDS.get(cell.name, 0.0))
        for p in precisions:
            for arm in (a for a in ARMS if a in phases):
                run = run_actor(cell.env_id, policies[cell.name, p], m, seconds, seed=r,
                                env_backend=backend, **ARMS[arm])  # fmt: skip
                key = (cell.name, label(arm, backend), p, m)
                results.setdefault(key, []).append((run.env_steps_per_s, run.phases_us))


def measure_services(args, cell: Cell, backend: str, results) -> None:
    for p in args.precisions.split(","):
        for n in (int(x) for x in args.n.split(",")):
            seconds = max(args.service_seconds, 3 * MIN_SECONDS.get(cell.name, 0.0))
            got = services_rate(cell, p, n, args.service_m, seconds, backend)
            key = (cell.name, label(f"services N={n}", backend), p, args.service_m)
            results.setdefault(key, []).append(got)


def main() -> None:
    args = parse_args()
    torch.set_num_threads(1)
    print(cpu_description())
    cells = [CELLS[n] for n in args.envs.split(",")]
    backends = args.env_backends.split(",")
    results: dict[tuple, list] = {}
    for cell in cells:
        describe_env(cell.env_id, continuous=None)  # fail early on a missing env ...
        for backend in backends:
            check_backend(cell.env_id, backend)  # ... or one a backend cannot build
    policies = {
        (c.name, p): make_policy(c.env_id, c.hidden, p)
        for c in cells
        for p in args.precisions.split(",")
    }
    for r in range(args.rounds):
        for cell in cells:
            for backend in backends:  # side by side in each round: load hits them alike
                measure_round(args, cell, r, backend, policies, results)
                if "services" in args.phases.split(",") and r == 0:
                    measure_services(args, cell, backend, results)
            print_table(results, file=sys.stderr)  # partial tables survive an interrupted run
        print(f"round {r + 1}/{args.rounds} done", file=sys.stderr, flush=True)
    print_table(results)
    if args.json:
        args.json.write_text(json.dumps({" ".join(map(str, k)): v for k, v in results.items()}))


def _rate_and_phases(values: list) -> tuple[float, dict[str, float]]:
    if isinstance(values[0], float):
        return statistics.median(values), {}
    if isinstance(values[0], dict):  # services: one run
        good = [v for v in values if "rate" in v]
        if not good:
            return float("nan"), {"error": values[0].get("error")}
        return statistics.median(v["rate"] for v in good), good[0]["phases"]
    rates = [v[0] for v in values]
    names = values[0][1].keys()
    return statistics.median(rates), {n: statistics.median(v[1][n] for v in values) for n in names}


def _ratio(results: dict[tuple, list], rate: float, key: tuple) -> str:
    base = _rate_and_phases(results[key])[0] if key in results else 0.0
    if not base > 0:  # missing, failed (nan) or no steps in time (0)
        return "      "
    return f"{rate / base:6.2f}"


RAW = ("raw", "raw-rows")  # rows/s: reset rows included (raw_env_rate)


def print_table(results: dict[tuple, list], file=None) -> None:
    short = ("inference", "explore", "env_step", "record", "push", "rate_limit_wait")
    print(
        f"\n{'env':<12}|{'phase':<21}|{'prec':<5}|{'M':>4} |{'env steps/s':>12} |{'x raw':>6} |"
        + f"{'x gym':>6} |"
        + "".join(f"{s[:8]:>9}" for s in short)
        + "  (us per vector step)",
        file=file,
    )
    for key, values in results.items():
        env, phase, precision, m = key
        rate, phases = _rate_and_phases(values)
        if "error" in phases:
            print(
                f"{env:<12}|{phase:<21}|{precision:<5}|{m:>4} | failed: {phases['error']}",
                file=file,
            )
            continue
        base_phase, _, backend = phase.partition(":")
        raw_key = (env, label("raw", backend or "gymnasium"), "-", m)
        x_raw = _ratio(results, rate, raw_key) if base_phase not in RAW else "      "
        x_gym = _ratio(results, rate, (env, base_phase, precision, m)) if backend else "      "
        cols = "".join(f"{phases[s]:>9.1f}" if s in phases else f"{'':>9}" for s in short)
        print(
            f"{env:<12}|{phase:<21}|{precision:<5}|{m:>4} |{rate:>12,.0f} |{x_raw} |{x_gym} |"
            + cols,
            file=file,
        )


if __name__ == "__main__":
    main()
