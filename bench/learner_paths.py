"""bench_learner --paths: wall-clock time per update of each update path, per case.

One process, the paths of a case interleaved round by round; wall clock (the figure)
and process CPU time (beside it: on a shared machine wall time includes waiting). Every
update starts from a numpy batch (host->device copy included, as in the service). On CUDA the clock
is read after torch.cuda.synchronize(). The default path runs `algo.update` (today's
code: numpy-flat for DQN on CPU, the algorithm's own torch update otherwise); the
captured paths run the capturable step through CapturedUpdate.submit with results read
back every `readback` updates (drain), as a loop that does not sync per update would.

    .venv/bin/python bench/bench_learner.py --paths numpy-flat,torch-eager --device cpu
    python3 bench/bench_learner.py --paths all --device cuda --json out.json
"""

from __future__ import annotations

import json
import statistics
import time
from typing import Any

import numpy as np
import torch

from actorq.algos import load_algorithm_config, make_algorithm
from actorq.algos.capture import (
    UPDATE_PATHS,
    CapturedUpdate,
    available_update_paths,
    default_update_path,
)
from actorq.algos.feed import DeviceReplay
from actorq.testing.batches import random_update_batches

PATH_CASES = [  # (algo, obs_dim, outputs, hidden, batch): the four cases of issue 29
    ("dqn", 4, 2, (64, 64), 128),
    ("dqn", 4, 2, (1024, 1024, 1024), 256),
    ("td3", 17, 6, (256, 256), 256),
    ("sac", 17, 6, (256, 256), 256),
]


def _batches(algo: str, obs: int, out: int, batch: int, seed: int) -> list[dict]:
    return random_update_batches(algo, obs, out, batch, seed=seed)


class _Arm:
    """One (case, path): a learner and a function that runs n updates."""

    def __init__(
        self, case: tuple, path: str, own: bool, device: str, readback: int, ring_k: int = 0
    ) -> None:
        algo, obs, out, hidden, batch = case
        config = load_algorithm_config(algo, {}, batch_size=batch)
        self.learner = make_algorithm(algo, obs, out, hidden, config, device=device)
        self.batches = _batches(algo, obs, out, batch, seed=len(hidden))
        self.path, self.own, self.readback, self.i = path, own, readback, 0
        self.ring_k = ring_k
        self.runner = None
        if ring_k:  # device ring + k sampled updates per call (one graph replay)
            rows = {k: np.concatenate([b[k] for b in self.batches]) for k in DeviceReplay.COLUMNS}
            ring = DeviceReplay(len(rows["obs"]), rows, torch.device(device))
            ring.add(rows)
            slots = max(readback, ring_k)
            self.runner = CapturedUpdate(self.learner, path, readback_every=slots, k=ring_k)
            self.runner.use_replay(ring, batch)
        elif not own:
            self.runner = CapturedUpdate(self.learner, path, readback_every=readback)

    def run(self, n: int) -> None:
        batches = self.batches
        if self.ring_k:
            assert self.runner is not None
            for _ in range(max(n // self.ring_k, 1)):
                self.runner.submit_sampled()
                self.i += self.ring_k
                if self.runner.pending + self.ring_k > self.runner.slots:
                    self.runner.drain()
            return
        if self.runner is None:
            for _ in range(n):
                self.learner.update(batches[self.i % len(batches)])
                self.i += 1
            return
        for _ in range(n):
            self.runner.submit([batches[self.i % len(batches)]])
            self.i += 1
            if self.i % self.readback == 0:
                self.runner.drain()


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def time_paths(
    paths: list[str],
    device: str,
    rounds: int,
    updates: int,
    warmup: int,
    readback: int,
    ring_k: int = 0,
) -> list[dict[str, Any]]:
    """Rows of {case, path, ms, updates_per_s, ...}; paths not available are reported."""
    rows = []
    for case in PATH_CASES:
        probe = make_algorithm(case[0], case[1], case[2], case[3], device=device)
        available = available_update_paths(probe)
        default = default_update_path(probe)
        arms: dict[str, _Arm] = {}
        skipped = []
        for path in paths:
            if path == default:  # the algorithm's own update
                arms[f"{path} (default)"] = _Arm(case, path, True, device, readback)
            if path == "torch-eager" and path in available:  # the capturable step, eagerly
                arms[f"{path} (captured step)"] = _Arm(case, path, False, device, readback)
            elif path in available and path != default:
                arms[path] = _Arm(case, path, False, device, readback)
            elif path not in available:
                skipped.append(path)
            if ring_k and path in ("cuda-graph", "compiled") and path in available:
                label = f"{path} (device ring, k={ring_k})"
                arms[label] = _Arm(case, path, False, device, readback, ring_k)
        failed: dict[str, str] = {}
        for label, arm in list(arms.items()):  # capture / compile / warm-up, not timed
            try:
                arm.run(warmup)
                _sync(device)
            except Exception as exc:  # a path that cannot run here is reported, not fatal
                failed[label] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:120]}"
                del arms[label]
        _sync(device)
        times: dict[str, list[tuple[float, float]]] = {p: [] for p in arms}
        for _ in range(rounds):
            for path, arm in arms.items():
                _sync(device)
                started, cpu_started = time.perf_counter(), time.process_time()
                before = arm.i
                arm.run(updates)
                if arm.runner is not None:
                    arm.runner.drain()
                _sync(device)
                done = arm.i - before  # k-update calls may round the count
                wall = (time.perf_counter() - started) / done * 1e3
                times[path].append((wall, (time.process_time() - cpu_started) / done * 1e3))
        for label, values in times.items():
            arm = arms[label]
            wall = statistics.median(v[0] for v in values)
            row = _row(case, label, arm.path, arm.own, wall, device)
            row["cpu_ms_per_update"] = statistics.median(v[1] for v in values)
            rows.append(row)
        rows += [_row(case, p, p, False, None, device) for p in skipped]
        for label, why in failed.items():
            rows.append({**_row(case, label, label.split()[0], False, None, device), "error": why})
    return rows


def _row(case: tuple, label: str, path: str, default: bool, ms: float | None, device: str) -> dict:
    algo, _, _, hidden, batch = case
    return {
        "algo": algo,
        "hidden": "x".join(str(h) for h in hidden),
        "batch": batch,
        "device": device,
        "label": label,
        "path": path,
        "default": default,
        "ms_per_update": ms,
        "updates_per_s": None if ms is None else 1e3 / ms,
    }


def print_paths_table(rows: list[dict], header: str) -> None:
    print(header)
    print("| case | device | path | wall ms/update | updates/s | vs default | CPU ms/update |")
    print("|---|---|---|---:|---:|---:|---:|")
    base = {(r["algo"], r["hidden"]): r["ms_per_update"] for r in rows if r["default"]}
    for r in rows:
        case = f"{r['algo'].upper()} {r['hidden']} b{r['batch']}"
        path = r["label"]
        if r["ms_per_update"] is None:
            status = f"failed: {r['error']}" if "error" in r else "not available"
            print(f"| {case} | {r['device']} | {path} | {status} | | | |")
            continue
        ref = base.get((r["algo"], r["hidden"]))
        ratio = f"{ref / r['ms_per_update']:.2f}x" if ref else ""
        print(
            f"| {case} | {r['device']} | {path} | {r['ms_per_update']:.3f} "
            f"| {r['updates_per_s']:,.0f} | {ratio} | {r['cpu_ms_per_update']:.3f} |"
        )


def main_paths(args: Any, cpu_info: str) -> None:
    paths = list(UPDATE_PATHS) if args.paths == "all" else args.paths.split(",")
    unknown = [p for p in paths if p not in UPDATE_PATHS]
    if unknown:
        raise SystemExit(f"--paths: unknown {unknown}; expected {', '.join(UPDATE_PATHS)} or all")
    torch.set_num_threads(args.threads)
    rounds = 2 if args.quick else args.rounds
    updates = args.updates or (20 if args.quick else 100)
    rows = time_paths(paths, args.device, rounds, updates, args.warmup, args.readback, args.ring_k)
    gpu = torch.cuda.get_device_name(0) if args.device.startswith("cuda") else "none"
    header = (
        f"# bench_learner --paths: CPU {cpu_info}, {args.threads} torch thread(s), GPU {gpu}, "
        f"torch {torch.__version__}, {rounds} interleaved rounds x {updates} updates, "
        f"wall clock, readback every {args.readback}"
        + (f", device-ring arms sample k={args.ring_k} updates per call" if args.ring_k else "")
    )
    print_paths_table(rows, header)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"header": header, "rows": rows}, f, indent=1)
