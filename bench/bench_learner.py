"""Learner updates per second, torch's update path vs actorq's fast path, one thread.

For each algorithm and network size, two worker processes (so the allocator setting of
one cannot leak into the other) run updates on fixed random batches, interleaved round
by round; the table gives CPU milliseconds per update (process CPU time, so time spent
descheduled on a shared machine does not count), updates/s and the fast/torch ratio.

- torch: torch.optim.Adam(fused=True), nn.utils.clip_grad_norm_, autograd backward,
  glibc's default allocator thresholds: the learner as it was before the fast path (the
  tests' oracle, tests/unit/update_oracle.py, around the same `step`).
- fast: FastAdam, direct foreach clipping, backward only into the stepped network,
  retain_freed_memory(): what the learner runs now. For DQN that is the whole update in
  numpy on flat parameter/gradient/Adam buffers (actorq.algos.dqn_flat, one thread).

The floor is the update's matmul FLOPs (counted by torch's FlopCounterMode on one update)
divided by the single-thread sgemm rate measured in the same run (a 256^3 product):
the time an update would take if it did nothing but its matrix products at full speed.

    .venv/bin/python bench/bench_learner.py            # make bench-learner
    .venv/bin/python bench/bench_learner.py --quick

--paths times the update paths of actorq.algos.capture instead (bench/learner_paths.py):
wall clock per update on --device cpu|cuda, host->device copy included, a markdown table
and optionally --json for the GPU check:

    .venv/bin/python bench/bench_learner.py --paths all --device cpu --quick
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import time
from pathlib import Path

CASES = [  # (algo, obs_dim, outputs, hidden, batch)
    ("dqn", 4, 2, (64, 64), 128),
    ("dqn", 4, 2, (256, 256), 128),
    ("ddpg", 17, 6, (256, 256), 256),
    ("td3", 17, 6, (64, 64), 256),
    ("td3", 17, 6, (256, 256), 256),
    ("sac", 17, 6, (64, 64), 256),
    ("sac", 17, 6, (256, 256), 256),
    ("d4pg", 17, 6, (256, 256), 256),
]


def cpu_info() -> str:
    model, flags = platform.processor() or "unknown", ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name") and model in ("unknown", "", platform.machine()):
                model = line.split(":", 1)[1].strip()
            if line.startswith("flags") and not flags:
                have = set(line.split(":", 1)[1].split())
                wanted = ("avx2", "fma", "avx512f", "avx512_vnni", "avx_vnni", "amx_tile")
                flags = " ".join(f for f in wanted if f in have)
    except OSError:
        pass
    return f"{model} [{flags}]"


# --- worker side -------------------------------------------------------------------------
def _worker(mode: str) -> None:
    """Read case indices from stdin, answer one JSON line each: CPU ms per update."""
    import torch

    from actorq.algos import load_algorithm_config, make_algorithm
    from actorq.allocator import retain_freed_memory

    torch.set_num_threads(1)
    fast = mode == "fast"
    if fast:
        retain_freed_memory()
    learners: dict[int, tuple] = {}
    for line in sys.stdin:
        index, updates = (int(x) for x in line.split())
        if index not in learners:
            learners[index] = _build(index, fast, make_algorithm, load_algorithm_config)
        learner, batches = learners[index]
        for i in range(5):  # warm caches and allocator state
            learner.update(batches[i % len(batches)])
        started = time.process_time()
        for i in range(updates):
            learner.update(batches[i % len(batches)])
        ms = (time.process_time() - started) / updates * 1e3
        print(json.dumps({"case": index, "ms": ms}), flush=True)


def _build(index, fast, make_algorithm, load_algorithm_config):  # type: ignore[no-untyped-def]
    from actorq.testing.batches import random_update_batches

    algo, obs, out, hidden, batch = CASES[index]
    config = load_algorithm_config(algo, {}, batch_size=batch)
    learner = make_algorithm(algo, obs, out, hidden, config)
    if not fast:
        sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "unit"))
        from update_oracle import plain_torch

        plain_torch(learner)
    batches = random_update_batches(algo, obs, out, batch, seed=index)
    return learner, batches


# --- parent side -------------------------------------------------------------------------
def matmul_flops_per_update(index: int) -> float:
    """Matmul FLOPs of one update (forward and backward), by torch's flop counter."""
    from torch.utils.flop_counter import FlopCounterMode

    from actorq.algos import load_algorithm_config, make_algorithm

    learner, batches = _build(index, False, make_algorithm, load_algorithm_config)
    learner.update(batches[0])  # TD3's delayed actor: count over two updates, halve
    with FlopCounterMode(display=False) as counter:
        learner.update(batches[1])
        learner.update(batches[2])
    return counter.get_total_flops() / 2


def sgemm_flops_per_second() -> float:
    import torch

    torch.set_num_threads(1)
    a, b = torch.randn(256, 256), torch.randn(256, 256)
    for _ in range(20):
        a @ b
    best = float("inf")
    for _ in range(5):
        started = time.process_time()
        for _ in range(50):
            a @ b
        best = min(best, (time.process_time() - started) / 50)
    return 2 * 256**3 / best


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=5, help="interleaved rounds per case")
    p.add_argument("--updates", type=int, default=0, help="updates per round (0 = auto)")
    p.add_argument("--quick", action="store_true", help="2 rounds, fewer updates")
    p.add_argument("--worker", choices=("torch", "fast"), help=argparse.SUPPRESS)
    p.add_argument("--paths", help="time update paths instead: comma-separated or 'all'")
    p.add_argument("--device", default="cpu", help="--paths: cpu, cuda or cuda:N")
    p.add_argument("--threads", type=int, default=1, help="--paths: torch threads")
    p.add_argument("--warmup", type=int, default=10, help="--paths: untimed updates per arm")
    p.add_argument("--readback", type=int, default=64, help="--paths: updates per drain")
    p.add_argument("--json", help="--paths: also write the rows as JSON here")
    p.add_argument(
        "--ring-k", type=int, default=0,
        help="--paths: also time cuda-graph/compiled sampling from a device ring, k per call",
    )  # fmt: skip
    args = p.parse_args()
    if args.worker:
        _worker(args.worker)
        return
    if args.paths:
        from learner_paths import main_paths

        main_paths(args, cpu_info())
        return
    rounds = 2 if args.quick else args.rounds
    workers = {
        mode: subprocess.Popen(
            [sys.executable, __file__, "--worker", mode],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for mode in ("torch", "fast")
    }
    times: dict[tuple[int, str], list[float]] = {}
    try:
        for _ in range(rounds):
            for index, case in enumerate(CASES):
                updates = args.updates or _auto_updates(case, args.quick)
                for mode, proc in workers.items():
                    assert proc.stdin is not None and proc.stdout is not None
                    proc.stdin.write(f"{index} {updates}\n")
                    proc.stdin.flush()
                    times.setdefault((index, mode), []).append(
                        json.loads(proc.stdout.readline())["ms"]
                    )
    finally:
        for proc in workers.values():
            if proc.stdin is not None:
                proc.stdin.close()
            proc.wait(timeout=30)
    _print_table(times, sgemm_flops_per_second(), rounds)


def _auto_updates(case: tuple, quick: bool) -> int:
    hidden, batch = case[3], case[4]
    size = max(hidden) ** 2 * batch
    n = 300 if size < 1e6 else 40
    return max(10, n // 3) if quick else n


def _print_table(times: dict, gemm_rate: float, rounds: int) -> None:
    import statistics

    print(f"# bench_learner: CPU {cpu_info()}, 1 thread, {rounds} interleaved rounds")
    print(f"# sgemm 256^3 on one thread: {gemm_rate / 1e9:.1f} GFLOP/s (floor = FLOPs / this)")
    print(
        "| algo | hidden | batch | torch ms/update | fast ms/update | fast updates/s "
        "| fast / torch | matmul MFLOP | floor ms | fast / floor |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for index, (algo, _, _, hidden, batch) in enumerate(CASES):
        slow = statistics.median(times[(index, "torch")])
        fast = statistics.median(times[(index, "fast")])
        flops = matmul_flops_per_update(index)
        floor = flops / gemm_rate * 1e3
        width = "x".join(str(h) for h in hidden)
        print(
            f"| {algo} | {width} | {batch} | {slow:.3f} | {fast:.3f} | {1e3 / fast:,.0f} "
            f"| {slow / fast:.2f}x | {flops / 1e6:.1f} | {floor:.3f} | {fast / floor:.1f}x |"
        )


if __name__ == "__main__":
    main()
