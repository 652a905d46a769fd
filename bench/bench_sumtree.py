"""Sum tree throughput: actorq's K-ary SumTree for several K, beside established libraries.

For each capacity the tree is filled with random priorities, then, batch 256, interleaved
in rounds so load from other processes hits every contestant alike:

* insert: a contiguous block of rows (a ring buffer's next rows) with new priorities,
* update: 256 random rows get new priorities,
* sample: one stratified batch of 256 (actorq, cpprb) or 256 prefix-sum searches of
  stratified targets (TorchRL's C++ sum tree).

Each cell is the best of the rounds (timeit's rule: other processes only ever slow a
round down, so the fastest round is the least disturbed one).

Contestants: `SumTree` at each K (K=2 is the binary baseline in the same code), actorq's
`PrioritizedSampler` (staging + flush + IS weights: what the learner pays), cpprb's
`PrioritizedReplayBuffer` (a binary segment tree in C++, one scalar field stored) and
TorchRL's `SumSegmentTreeFp64` when its C++ extension loads beside this torch.

Usage: python bench/bench_sumtree.py [--quick] [--capacities 17,20,22] [--branchings 2,8,16]
(`make bench-sumtree` installs the pinned comparison libraries first.)
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from actorq.replay.prioritized import PrioritizedSampler
from actorq.replay.sumtree import DEFAULT_BRANCHING, SumTree

OPS = ("insert", "update", "sample")


@dataclass
class Contestant:
    name: str
    ops: dict[str, Callable[[], None]]
    results: dict[str, list[float]] = field(default_factory=dict)  # op -> calls/s per round


class Batches:
    """Pre-drawn batches, cycled, so no contestant's timing includes drawing random numbers:
    contiguous insert blocks (a ring buffer's next rows), random update rows, priorities."""

    def __init__(self, capacity: int, batch: int, rng: np.random.Generator, count: int = 64):
        self.inserts = [(i * batch + np.arange(batch)) % capacity for i in range(count)]
        self.updates = [rng.integers(0, capacity, batch) for _ in range(count)]
        self.values = [rng.random(batch) + 0.01 for _ in range(count)]
        self._next = 0

    def next(self) -> int:
        self._next = (self._next + 1) % len(self.values)
        return self._next


def actorq_tree(capacity: int, k: int, pool: Batches, rng: np.random.Generator) -> Contestant:
    tree = SumTree(capacity, k)
    tree.set(np.arange(capacity), rng.random(capacity) + 0.01)
    batch = len(pool.values[0])

    def insert() -> None:
        i = pool.next()
        tree.set(pool.inserts[i], pool.values[i])

    def update() -> None:
        i = pool.next()
        tree.set(pool.updates[i], pool.values[i])

    ops = {"insert": insert, "update": update, "sample": lambda: tree.sample(batch, rng)}
    return Contestant(f"actorq K={k}", ops)


def actorq_sampler(capacity: int, pool: Batches, rng: np.random.Generator) -> Contestant:
    sampler = PrioritizedSampler(capacity)
    sampler.on_insert(np.arange(capacity), priorities=rng.random(capacity))
    sampler.flush()
    batch = len(pool.values[0])

    def insert() -> None:
        i = pool.next()
        sampler.on_insert(pool.inserts[i], priorities=pool.values[i])
        sampler.flush()

    def update() -> None:
        i = pool.next()
        sampler.update_priorities(pool.updates[i], pool.values[i])
        sampler.flush()

    ops = {
        "insert": insert,
        "update": update,
        "sample": lambda: sampler.sample(None, batch, rng),
    }
    return Contestant(f"actorq PrioritizedSampler K={sampler.branching}", ops)


def cpprb_buffer(capacity: int, pool: Batches, rng: np.random.Generator) -> Contestant | None:
    try:
        from cpprb import PrioritizedReplayBuffer
    except ImportError:
        return None
    buffer = PrioritizedReplayBuffer(capacity, {"obs": {"shape": 1}}, alpha=0.6)
    batch = len(pool.values[0])
    zeros = np.zeros((batch, 1))
    for _ in range(capacity // batch):
        buffer.add(obs=zeros, priorities=rng.random(batch) + 0.01)

    def insert() -> None:
        buffer.add(obs=zeros, priorities=pool.values[pool.next()])

    def update() -> None:
        i = pool.next()
        buffer.update_priorities(pool.updates[i], pool.values[i])

    ops = {"insert": insert, "update": update, "sample": lambda: buffer.sample(batch, beta=0.4)}
    return Contestant("cpprb 11 PrioritizedReplayBuffer", ops)


def torchrl_tree(capacity: int, pool: Batches, rng: np.random.Generator) -> Contestant | None:
    try:
        import torch
        from torchrl._torchrl import SumSegmentTreeFp64
    except ImportError:
        return None
    tree = SumSegmentTreeFp64(capacity)
    tree[torch.arange(capacity)] = torch.rand(capacity, dtype=torch.float64) + 0.01
    inserts = [torch.from_numpy(x) for x in pool.inserts]
    updates = [torch.from_numpy(x) for x in pool.updates]
    values = [torch.from_numpy(x) for x in pool.values]
    batch = len(pool.values[0])

    def insert() -> None:
        i = pool.next()
        tree[inserts[i]] = values[i]

    def update() -> None:
        i = pool.next()
        tree[updates[i]] = values[i]

    def sample() -> None:
        total = tree.query(0, capacity)
        mass = (torch.arange(batch, dtype=torch.float64) + torch.rand(batch)) * total / batch
        tree.scan_lower_bound(mass)

    return Contestant(
        "TorchRL SumSegmentTreeFp64", {"insert": insert, "update": update, "sample": sample}
    )


def torchrl_status() -> str:
    try:
        import torchrl
    except ImportError:
        return "not installed"
    try:
        import torchrl._torchrl
    except ImportError as exc:
        return f"{torchrl.__version__} installed, but its C++ extension fails to load: {exc}"[:200]
    return f"{torchrl.__version__}"


CLOCK = {"wall": time.perf_counter, "cpu": time.thread_time}
clock = CLOCK["wall"]


def calls_per_second(fn: Callable[[], None], seconds: float) -> float:
    fn()
    calls, start = 0, clock()
    while True:
        fn()
        calls += 1
        elapsed = clock() - start
        if elapsed >= seconds:
            return calls / elapsed


def measure(contestants: list[Contestant], rounds: int, seconds: float) -> None:
    for _ in range(rounds):
        for op in OPS:
            for contestant in contestants:
                rate = calls_per_second(contestant.ops[op], seconds)
                contestant.results.setdefault(op, []).append(rate)


def print_table(capacity: int, batch: int, contestants: list[Contestant]) -> None:
    print(f"\n### capacity 2^{capacity.bit_length() - 1} = {capacity:,}, batch {batch}\n")
    print(
        "| implementation | insert items/s | update items/s | sample batches/s | sample items/s |"
    )
    print("|---|---|---|---|---|")
    for c in contestants:
        med = {op: max(c.results[op]) for op in OPS}
        print(
            f"| {c.name} | {med['insert'] * batch / 1e6:.2f}M | {med['update'] * batch / 1e6:.2f}M"
            f" | {med['sample']:,.0f} | {med['sample'] * batch / 1e6:.2f}M |"
        )
    by_name = {c.name: max(c.results["sample"]) for c in contestants}
    binary = by_name.get("actorq K=2")
    if binary:
        ratios = ", ".join(
            f"{name.split()[-1]} {rate / binary:.2f}x"
            for name, rate in by_name.items()
            if name.startswith("actorq K=")
        )
        print(f"\nsample speed vs actorq K=2: {ratios}")


def compile_seconds() -> tuple[float, float]:
    """First call in a fresh process: with an empty numba cache, then with the cache warm."""
    code = (
        "import time; t = time.perf_counter(); import numpy as np;"
        "from actorq.replay.sumtree import SumTree; s = SumTree(100, 8);"
        "s.set(np.arange(100), np.ones(100)); s.sample(8, np.random.default_rng(0));"
        "s.find_prefixsum(np.array([1.0])); s.rebuild(); print(time.perf_counter() - t)"
    )
    with tempfile.TemporaryDirectory() as cache:
        env = {**os.environ, "NUMBA_CACHE_DIR": cache}
        cold, warm = (
            float(subprocess.check_output([sys.executable, "-c", code], env=env, text=True))
            for _ in range(2)
        )
    return cold, warm


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="2^17 and 2^20, short rounds")
    parser.add_argument("--capacities", default="17,18,19,20,21,22", help="log2 capacities")
    parser.add_argument("--branchings", default="2,4,8,16,32,64")
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=0.2, help="per op, contestant, round")
    parser.add_argument(
        "--clock",
        choices=sorted(CLOCK),
        default="wall",
        help="wall: elapsed time; cpu: this thread's CPU time (ignores time other processes "
        "take the core away, not their cache pressure)",
    )
    args = parser.parse_args()
    global clock
    clock = CLOCK[args.clock]
    if args.quick:
        args.capacities, args.rounds, args.seconds = "17,20", 3, 0.1
    import cpprb  # noqa: F401 - fail early with a clear message when missing

    cold, warm = compile_seconds()
    print(f"numba first call: {cold:.1f} s with an empty cache (compile), {warm:.1f} s cached")
    print(f"TorchRL: {torchrl_status()}; default K = {DEFAULT_BRANCHING}")
    print(f"rounds {args.rounds} x {args.seconds} s per cell, best round, {args.clock} clock")
    print(f"load average before: {os.getloadavg()[0]:.1f}")
    rng = np.random.default_rng(0)
    for log2 in (int(x) for x in args.capacities.split(",")):
        capacity = 2**log2
        pool = Batches(capacity, args.batch, rng)
        contestants = [actorq_tree(capacity, int(k), pool, rng) for k in args.branchings.split(",")]
        contestants.append(actorq_sampler(capacity, pool, rng))
        for library in (cpprb_buffer, torchrl_tree):
            contestant = library(capacity, pool, rng)
            if contestant is not None:
                contestants.append(contestant)
        measure(contestants, args.rounds, args.seconds)
        print_table(capacity, args.batch, contestants)
        sys.stdout.flush()


if __name__ == "__main__":
    main()
