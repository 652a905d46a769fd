"""Recompute BENCHMARKS.md's few-seed learning comparisons as rliable statistics.

IQM with 95% stratified bootstrap CIs, the CI of the difference in percent of the
baseline's IQM, and the probability of improvement (actorq.study.stats), from the
per-seed final returns recorded in BENCHMARKS.md: sections 10g, 10h, 10i (fp32 vs int8
actors; transcribed below) and 13a-13j (dense vs 90% sparse; parsed from the section's
per-run tables). Each arm's mean is checked against the one the section states, so a
transcription or parsing slip fails loudly.

    .venv/bin/python bench/recompute_ci.py [--benchmarks BENCHMARKS.md]
"""

from __future__ import annotations

import argparse
import re
import statistics
from pathlib import Path

from actorq.study.stats import compare

# section -> (title, fp32 per seed, int8 per seed, stated fp32 mean, stated int8 mean)
PRECISION = {
    "10h-dqn": (
        "CartPole-v1 DQN, 300k env steps, 5 seeds",
        [500.0, 487.3, 500.0, 500.0, 500.0],
        [500.0, 500.0, 500.0, 482.9, 500.0],
        497.5,
        496.6,
    ),
    "10h-td3": (
        "Pendulum-v1 TD3, 30k env steps, 8 seeds",
        [-131.2, -133.7, -139.8, -130.9, -140.3, -131.1, -139.5, -142.7],
        [-147.7, -132.2, -135.7, -130.8, -133.3, -140.4, -133.0, -132.1],
        -136.2,
        -135.7,
    ),
    "10g": (
        "dm_control cartpole-swingup D4PG, 100k env steps, 10 seeds",
        [849.5, 867.7, 849.0, 810.8, 722.6, 832.0, 750.1, 521.6, 375.5, 213.8],
        [822.8, 858.7, 867.9, 250.7, 843.9, 870.7, 838.6, 860.8, 785.1, 858.9],
        679.3,
        785.8,
    ),
    "10i": (
        "HalfCheetah-v5 TD3 64x64, 60k env steps, 5 seeds",
        [1586.8, 1398.8, 2738.5, 1292.9, 2193.7],
        [965.1, 3209.0, 1082.7, 1623.9, 2603.5],
        1842.2,
        1896.8,
    ),
}

# section -> (title, which per-run tables of the section, stated dense / sparse means)
SPARSE = {
    "13a": ("Pendulum-v1 TD3 64x64, 16k", None, -142.5, -134.6),
    "13e": ("Pendulum-v1 TD3 256x256, 16k", [1], -170.3, -132.8),
    "13c": ("Pendulum-v1 SAC 64x64, 30k", None, -130.4, -151.2),
    "13f": ("Pendulum-v1 SAC 256x256, 30k", None, -131.8, -129.7),
    "13d": ("HalfCheetah-v5 TD3 64x64, 100k", None, 1868.7, 132.0),
    "13g": ("HalfCheetah-v5 TD3 256x256, 100k", None, 1709.4, 1342.2),
    "13h": ("Hopper-v5 TD3 256x256, 100k", None, 299.3, 779.5),
    "13i": ("HalfCheetah-v5 SAC 256x256, 60k", None, 3242.6, 1537.1),
    "13j": ("Hopper-v5 SAC 256x256, 60k", None, 349.7, 1242.5),
}


def section_text(text: str, section: str) -> str:
    start = re.search(rf"^### {re.escape(section)}\. .*$", text, re.M)
    if not start:
        raise SystemExit(f"BENCHMARKS.md has no section {section}")
    end = re.search(r"^##+ ", text[start.end() :], re.M)
    return text[start.end() : start.end() + end.start() if end else len(text)]


def sparse_finals(body: str, tables: list[int] | None) -> dict[float, list[float]]:
    """sparsity -> final int8 returns, from tables headed `| sparsity | seed | ...` (a row
    per run) or `| sparsity | seeds | final int8 per seed | ...` (a row per sparsity, the
    runs' values separated by ", ", thousands by a bare ",")."""
    finals: dict[float, list[float]] = {}
    index, column, per_seed = -1, None, False
    for line in body.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if cells[:2] in (["sparsity", "seed"], ["sparsity", "seeds"]):
            per_seed = cells[1] == "seeds"
            index = index + 1
            column = cells.index("final int8 per seed" if per_seed else "final int8")
            continue
        if column is None or not line.startswith("| ") or cells[0].startswith("-"):
            continue
        if tables is not None and index not in tables:
            continue
        try:
            sparsity = float(cells[0])
            raw = cells[column].split(", ") if per_seed else [cells[column].replace(",", "")]
            values = [float(v.replace(",", "")) for v in raw]  # "1,358.2, 1,167.9"
        except (ValueError, IndexError):
            column = None  # another table ended this one
            continue
        finals.setdefault(sparsity, []).extend(values)
    return finals


def _check(name: str, values: list[float], stated: float) -> None:
    mean = statistics.mean(values)
    if abs(mean - stated) > 0.1:  # per-seed figures are rounded to 0.1
        raise SystemExit(f"{name}: recomputed mean {mean:.2f} differs from the stated {stated}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--benchmarks", default="BENCHMARKS.md")
    args = parser.parse_args()
    text = Path(args.benchmarks).read_text()
    header = (
        "| section | task | n | baseline IQM [95% CI] | arm IQM [95% CI] | "
        "arm - baseline, % [95% CI] | P(arm > baseline) [95% CI] |"
    )
    print("int8 actors (arm) against fp32 actors (baseline), final return:\n")
    print(header + "\n|---|---|---|---|---|---|---|")
    for section, (title, fp32, int8, m32, m8) in PRECISION.items():
        _check(f"{section} fp32", fp32, m32)
        _check(f"{section} int8", int8, m8)
        c = compare(int8, fp32, "int8", "fp32")
        print(f"| {section} | {title} | {len(fp32)}/{len(int8)} | {' | '.join(_cells(c))} |")
    print("\n90% sparse RLx2 (arm) against dense (baseline), final int8 return:\n")
    print(header + "\n|---|---|---|---|---|---|---|")
    for section, (title, tables, dense_mean, sparse_mean) in SPARSE.items():
        finals = sparse_finals(section_text(text, section), tables)
        dense, sparse = finals[0.0], finals[0.9]
        _check(f"{section} dense", dense, dense_mean)
        _check(f"{section} sparse", sparse, sparse_mean)
        c = compare(sparse, dense, "sparse", "dense")
        print(f"| {section} | {title} | {len(dense)}/{len(sparse)} | {' | '.join(_cells(c))} |")


def _cells(c) -> list[str]:
    return [c.iqm_y.fmt(1), c.iqm_x.fmt(1), c.diff_pct.fmt(1, "%"), c.poi.fmt(2)]


if __name__ == "__main__":
    main()
