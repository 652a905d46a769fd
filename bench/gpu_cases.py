"""Issue 29's four learner cases on each device and update path, and what `auto` picks.

For each case (DQN 64x64 b128, DQN 1024^3 b256, TD3 and SAC 256x256 b256) and each
device (cpu on one thread; cuda when present) a fresh learner is built per update path
the learner offers there (actorq.learner.update_path), warmed up, then timed over fixed
random batches by the wall clock, `torch.cuda.synchronize()` before each clock read and
the host->device copy included (as in the service). One JSON line per measurement, then
one per case with `auto`'s choice: the learner's own start-up measurement
(actorq.learner.device.resolve_device on this machine), whose pick the report's verdict
compares with the faster device measured here. Run by bench/gpu_report.py; alone:

    python bench/gpu_cases.py [--devices cpu,cuda] [--seconds 1.5] [--tiny]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout's actorq

CASES = [  # (algo, obs_dim, outputs, hidden, batch): issue 29's learner table
    ("dqn", 4, 2, (64, 64), 128),
    ("dqn", 4, 2, (1024, 1024, 1024), 256),
    ("td3", 17, 6, (256, 256), 256),
    ("sac", 17, 6, (256, 256), 256),
]
TINY_CASES = [("dqn", 4, 2, (64, 64), 128), ("td3", 17, 6, (32, 32), 64)]
# Issue 29's targets for the captured path on an H100/H200, updates/s.
TARGETS = {("dqn", (64, 64)): 8000, ("dqn", (1024, 1024, 1024)): 2500,
           ("td3", (256, 256)): 2500, ("sac", (256, 256)): 2000}  # fmt: skip


def batches(algo: str, obs: int, out: int, batch: int, n: int = 8) -> list[dict]:
    from actorq.testing.batches import random_update_batches

    return random_update_batches(algo, obs, out, batch, n)


def _build(case: tuple, device: str):
    from actorq.algos import load_algorithm_config, make_algorithm

    algo, obs, out, hidden, batch = case
    config = load_algorithm_config(algo, {}, batch_size=batch)
    return make_algorithm(algo, obs, out, hidden, config, device=device, seed=0)


def _stepper(learner):
    """One update as the learner loop runs it: through the captured runner's submit (no
    host sync per update, results drained in batches) where a captured path is applied,
    else `learner.update`. Returns (step, drain)."""
    from actorq.algos.capture import captured_runner

    runner = captured_runner(learner)
    if runner is None:
        return learner.update, lambda: None

    def step(batch: dict) -> None:
        runner.submit([batch], [None])
        if runner.pending >= runner.slots:
            runner.drain()

    return step, runner.drain


def time_updates(learner, data: list[dict], device: str, seconds: float) -> tuple[float, int]:
    """(ms per update, updates timed): warm-up, then updates until `seconds` have passed;
    pending results drained and the GPU synchronized before each clock read."""
    import torch

    step, drain = _stepper(learner)

    def sync() -> None:
        drain()
        if device.startswith("cuda"):
            torch.cuda.synchronize()

    for i in range(10):
        step(data[i % len(data)])
    sync()
    started, n = time.perf_counter(), 0
    while True:
        for _ in range(10):
            step(data[n % len(data)])
            n += 1
        sync()
        elapsed = time.perf_counter() - started
        if elapsed >= seconds or n >= 20000:
            return elapsed / n * 1e3, n


def measure(case: tuple, device: str, seconds: float, with_compiled: bool) -> list[dict]:
    from actorq.algos.capture import apply_update_path as apply
    from actorq.algos.capture import available_update_paths as available
    from actorq.algos.capture import current_update_path as current

    paths = [p for p in available(_build(case, device)) if with_compiled or p != "compiled"]
    data = batches(case[0], case[1], case[2], case[4])
    rows = []
    for path in paths:
        learner = _build(case, device)
        try:
            if path != current(learner):
                apply(learner, path)
            ms, n = time_updates(learner, data, device, seconds)
            rows.append({"ms": ms, "updates": n})
        except Exception as exc:  # one path failing must not hide the others
            rows.append({"error": f"{type(exc).__name__}: {exc}"[:300]})
        rows[-1].update(path=path)
    return rows


def auto_choice(case: tuple, cuda_devices: int) -> dict:
    """What `auto` picks for the case: the learner's own start-up measurement
    (actorq.learner.device.resolve_device, a few dozen updates per candidate), checked
    against this bench's longer timings by the verdict."""
    from actorq.algos import load_algorithm_config
    from actorq.learner.device import CudaInfo, resolve_device, update_mflop
    from actorq.learner.device_probe import LearnerRecipe
    from actorq.models import MLPSpec

    algo, obs, out, hidden, batch = case
    config = load_algorithm_config(algo, {}, batch_size=batch)
    recipe = LearnerRecipe(algo, MLPSpec(obs, out, hidden), config, seed=0)
    cuda = CudaInfo.probe() if cuda_devices else CudaInfo(0)
    started = time.perf_counter()
    choice = resolve_device("auto", recipe, cuda=cuda)
    return {
        "auto": choice.device, "auto_path": choice.update_path, "reason": choice.reason,
        "auto_timings": dict(choice.timings), "auto_seconds": time.perf_counter() - started,
        "mflop": update_mflop(algo, obs, out, hidden, batch),
    }  # fmt: skip


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--devices", default="cpu,cuda")
    p.add_argument("--seconds", type=float, default=1.5, help="timed seconds per path")
    p.add_argument("--tiny", action="store_true", help="two small cases (plumbing tests)")
    p.add_argument("--with-compiled", action="store_true", help="also time torch.compile")
    args = p.parse_args()
    import torch

    torch.set_num_threads(1)  # the learner's default (ACTORQ_TORCH_THREADS=1)
    cuda = torch.cuda.device_count() if torch.cuda.is_available() else 0
    devices = [d for d in args.devices.split(",") if d == "cpu" or cuda]
    for case in TINY_CASES if args.tiny else CASES:
        key = {"algo": case[0], "hidden": list(case[3]), "batch": case[4]}
        for device in devices:
            for row in measure(case, device, args.seconds, args.with_compiled):
                print(json.dumps({**key, "device": device, **row}), flush=True)
        target = TARGETS.get((case[0], case[3]))
        print(json.dumps({**key, **auto_choice(case, cuda), "target": target}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
