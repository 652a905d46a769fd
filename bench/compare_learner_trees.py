"""Learner update speed of an old tree against this one, alternated in one run (ratios).

Both arms run this tree's measuring code (bench_learner.py's worker and learner_paths.py);
only the `actorq` package differs, imported from `git archive OLD` through PYTHONPATH.

- default path, every algorithm of bench_learner's CASES and the on-policy ones (PPO,
  APPO, A2C: one `update` = all epochs of one rollout batch): two worker processes (old
  package, new package), each case timed in both per round, the first arm alternating;
  process CPU ms per update, as `make bench-learner` reports it.
- every CPU update path (learner_paths' four cases): `bench_learner.py --paths all
  --rounds 3 --warmup 60` per tree, calls alternating; wall ms per update.

Each row gives the median ms of both trees and new/old speed (old ms / new ms: above 1
is faster now); the last line is `new/old min <ratio>` over all rows.

    .venv/bin/python bench/compare_learner_trees.py 2f1ef4c --rounds 5 --path-rounds 2
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
from io import BytesIO
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]
BENCH = HERE / "bench" / "bench_learner.py"
sys.path.insert(0, str(HERE / "bench"))

from bench_learner import CASES, _auto_updates, cpu_info  # noqa: E402

ON_POLICY = [  # (config class, obs_dim, actions, hidden, T, B): CartPole-shaped rollouts
    ("PPOConfig", 4, 2, (64, 64), 32, 32),
    ("APPOConfig", 4, 2, (64, 64), 32, 32),
    ("A2CConfig", 4, 2, (64, 64), 32, 32),
]


def _on_policy_worker() -> None:
    """Read case indices from stdin, answer CPU ms per `update` of an on-policy learner
    (one time-major batch: all its epochs and minibatches) as one JSON line each."""
    import time

    import numpy as np
    import torch

    from actorq.algos import ppo

    torch.set_num_threads(1)
    learners: dict[int, tuple] = {}
    for line in sys.stdin:
        index, updates = (int(x) for x in line.split())
        if index not in learners:
            name, obs, actions, hidden, t, b = ON_POLICY[index]
            rng = np.random.default_rng(index)
            batch = {
                "obs": rng.standard_normal((t, b, obs), dtype=np.float32),
                "action": rng.integers(0, actions, (t, b)),
                "reward": np.ones((t, b), np.float32),
                "terminated": rng.random((t, b)) < 0.02,
                "truncated": np.zeros((t, b), bool),
                "behaviour_logp": np.full((t, b), np.log(1 / actions), np.float32),
                "last_obs": rng.standard_normal((b, obs), dtype=np.float32),
            }
            config = getattr(ppo, name)()
            learners[index] = (ppo.OnPolicyLearner(obs, actions, hidden, config), batch)
        learner, batch = learners[index]
        for _ in range(3):
            learner.update(batch)
        started = time.process_time()
        for _ in range(updates):
            learner.update(batch)
        ms = (time.process_time() - started) / updates * 1e3
        print(json.dumps({"case": index, "ms": ms}), flush=True)


def export_tree(commit: str, into: Path) -> Path:
    """`git archive COMMIT` unpacked into `into`; its generated protos are committed."""
    archive = subprocess.run(
        ["git", "-C", str(HERE), "archive", commit], capture_output=True, check=True
    ).stdout
    with tarfile.open(fileobj=BytesIO(archive)) as tar:
        tar.extractall(into, filter="data")
    return into


def _env(tree: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(tree)}


def default_paths(
    trees: dict[str, Path], rounds: int, on_policy: bool = False
) -> dict[tuple[int, str], list[float]]:
    """CPU ms per update of each CASES (or ON_POLICY) entry's default update, per tree,
    per round."""
    worker = [__file__, "--on-policy-worker"] if on_policy else [str(BENCH), "--worker", "fast"]
    cases = ON_POLICY if on_policy else CASES
    workers = {
        name: subprocess.Popen(
            [sys.executable, *worker],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=_env(tree),
        )
        for name, tree in trees.items()
    }  # fmt: skip
    times: dict[tuple[int, str], list[float]] = {}
    try:
        for r in range(rounds):
            order = list(workers) if r % 2 == 0 else list(workers)[::-1]
            for index, case in enumerate(cases):
                updates = 20 if on_policy else _auto_updates(case, False)
                for name in order:
                    proc = workers[name]
                    assert proc.stdin is not None and proc.stdout is not None
                    proc.stdin.write(f"{index} {updates}\n")
                    proc.stdin.flush()
                    line = proc.stdout.readline()
                    if not line:
                        raise SystemExit(f"the {name} tree's worker died on case {case}")
                    times.setdefault((index, name), []).append(json.loads(line)["ms"])
            print(f"# default path: round {r + 1}/{rounds} done", file=sys.stderr, flush=True)
    finally:
        for proc in workers.values():
            if proc.stdin is not None:
                proc.stdin.close()
            proc.wait(timeout=60)
    return times


def every_path(
    trees: dict[str, Path], rounds: int, scratch: Path, updates: int
) -> dict[tuple, list[float]]:
    """Wall ms per update of every available CPU path, per tree, per round. Each call
    warms 60 updates (past DQN's first target sync: its second graph/compile) and times
    3 interleaved rounds of `updates`; its median is one sample here."""
    times: dict[tuple, list[float]] = {}
    for r in range(rounds):
        order = list(trees) if r % 2 == 0 else list(trees)[::-1]
        for name in order:
            out = scratch / f"paths-{name}-{r}.json"
            subprocess.run(
                [sys.executable, str(BENCH), "--paths", "all", "--device", "cpu",
                 "--rounds", "3", "--updates", str(updates), "--warmup", "60",
                 "--json", str(out)],
                check=True, env=_env(trees[name]), stdout=subprocess.DEVNULL,
            )  # fmt: skip
            for row in json.loads(out.read_text())["rows"]:
                if row["ms_per_update"] is not None:
                    key = (row["algo"], row["hidden"], row["batch"], row["label"], name)
                    times.setdefault(key, []).append(row["ms_per_update"])
        print(f"# every path: round {r + 1}/{rounds} done", file=sys.stderr, flush=True)
    return times


def ratio_rows(times: dict, cases: list[tuple]) -> list[tuple[str, float, float, float]]:
    """(case label, old median ms, new median ms, old/new) for cases timed in both trees."""
    rows = []
    for key, label in cases:
        old, new = times.get((*key, "old")), times.get((*key, "new"))
        if old and new:
            o, n = statistics.median(old), statistics.median(new)
            rows.append((label, o, n, o / n))
    return rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("old", nargs="?", help="the old tree's commit")
    p.add_argument("--on-policy-worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--rounds", type=int, default=5, help="default-path rounds")
    p.add_argument(
        "--path-rounds", type=int, default=2, help="every-path calls per tree (0 = skip)"
    )
    p.add_argument("--path-updates", type=int, default=200, help="every-path updates per round")
    args = p.parse_args()
    if args.on_policy_worker:
        _on_policy_worker()
        return
    if not args.old:
        p.error("the old tree's commit is required")
    with tempfile.TemporaryDirectory(prefix="actorq-old-") as tmp:
        trees = {"old": export_tree(args.old, Path(tmp) / "tree"), "new": HERE}
        load = Path("/proc/loadavg").read_text().split()[:3]
        print(f"# compare_learner_trees: {args.old} vs {_head()}, CPU {cpu_info()}, "
              f"1 torch thread, load {' '.join(load)} at the start")  # fmt: skip
        table = ratio_rows(
            default_paths(trees, args.rounds),
            [((i,), f"{a.upper()} {'x'.join(map(str, h))} b{b}, default path (CPU ms)")
             for i, (a, _, _, h, b) in enumerate(CASES)],
        )  # fmt: skip
        table += ratio_rows(
            default_paths(trees, args.rounds, on_policy=True),
            [((i,), f"{c[:-6]} {'x'.join(map(str, h))} T{t}xB{b}, update (CPU ms)")
             for i, (c, _, _, h, t, b) in enumerate(ON_POLICY)],
        )  # fmt: skip
        if args.path_rounds:
            paths = every_path(trees, args.path_rounds, Path(tmp), args.path_updates)
            keys = sorted({k[:4] for k in paths})
            table += ratio_rows(
                paths, [(k, f"{k[0].upper()} {k[1]} b{k[2]}, {k[3]} (wall ms)") for k in keys]
            )
    print("| case | old ms/update | new ms/update | new/old speed |")
    print("|---|---:|---:|---:|")
    for label, old, new, ratio in table:
        print(f"| {label} | {old:.3f} | {new:.3f} | {ratio:.2f}x |")
    load = " ".join(Path("/proc/loadavg").read_text().split()[:3])
    print(f"# load {load} at the end")
    print(f"new/old min {min(r[3] for r in table):.2f}")


def _head() -> str:
    return subprocess.run(
        ["git", "-C", str(HERE), "rev-parse", "--short", "HEAD"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip


if __name__ == "__main__":
    main()
