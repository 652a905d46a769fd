"""PTQ of several groups of trained runs side by side, e.g. QAT-trained vs normally trained.

Each run folder's final checkpoint is evaluated at every width on the same seeded episodes
(actorq.ptq.run_study); the table gives each run's fp32 return and its drop at each width
(paired 95% interval), then each group's mean return per width over its runs.

    .venv/bin/python bench/ptq_compare.py --bits 32,8,4 --episodes 100 \\
        --group "fp32-trained=runs/a,runs/b,runs/c" --group "qat4=runs/d,runs/e,runs/f"
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import torch

from actorq.ptq import PTQError, load_policy, parse_bits, run_study


def parse_group(text: str) -> tuple[str, list[Path]]:
    name, sep, folders = text.partition("=")
    paths = [Path(p) for p in folders.split(",") if p.strip()]
    if not sep or not name or not paths:
        raise PTQError(f"--group: expected NAME=RUN_DIR[,RUN_DIR...], got {text!r}")
    return name, paths


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--group", action="append", required=True, help="NAME=DIR,DIR,...")
    parser.add_argument("--bits", default="32,8,4")
    parser.add_argument("--episodes", type=int, default=100)
    args = parser.parse_args()
    try:
        groups = [parse_group(g) for g in args.group]
        bits = tuple(sorted(set(parse_bits(args.bits)) | {32}, reverse=True))
    except PTQError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    torch.set_num_threads(1)
    header = " | ".join(f"{f'{b} bit drop':>16}" for b in bits[1:])
    print(f"{'group':>14} | {'run':>24} | {'fp32 return':>11} | {header}")
    means: dict[str, dict[int, list[float]]] = {}
    for name, folders in groups:
        per_bits = means.setdefault(name, {b: [] for b in bits})
        for folder in folders:
            rows = {r.bits: r for r in run_study(load_policy(folder), bits, args.episodes)}
            for b in bits:
                per_bits[b].append(rows[b].mean)
            drops = " | ".join(
                f"{100 * rows[b].relative_drop:+7.2f}% ±{100 * rows[b].drop_ci95:5.2f}%"
                for b in bits[1:]
            )
            print(f"{name:>14} | {folder.name:>24} | {rows[32].mean:>11.1f} | {drops}", flush=True)
    print(f"\nmean return over each group's runs ({args.episodes} episodes per run and width):")
    print(f"{'group':>14} | " + " | ".join(f"{f'{b} bit':>9}" for b in bits))
    for name, per_bits in means.items():
        cells = " | ".join(f"{statistics.mean(per_bits[b]):>9.1f}" for b in bits)
        print(f"{name:>14} | {cells}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
