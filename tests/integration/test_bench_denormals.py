"""bench/bench_denormals.py end to end on a short run: both arms, in fresh processes, and
the flushed arm's Adam moment never subnormal."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench" / "bench_denormals.py"


def test_short_run_reports_both_arms_and_their_ratio() -> None:
    out = subprocess.run(
        [sys.executable, str(BENCH), "--updates", "3000", "--block", "1500", "--rounds", "1"],
        capture_output=True, text=True, timeout=300, check=True,
    ).stdout  # fmt: skip
    rows = {m[0]: m for m in re.findall(r"^\| 1 \| (kept|flushed) \| (\S+) \| (.+) \| (\d+)% \|$",
                                          out, re.M)}  # fmt: skip
    assert set(rows) == {"kept", "flushed"}, out
    assert rows["flushed"][3] == "0" and rows["kept"][1] == "numpy-flat", out
    assert all(float(ms) > 0 for ms in rows["kept"][2].split(" / ")), out
    assert re.search(r"^flushed/kept ms per update, last block: median \d+\.\d\d of 1 round",
                     out.splitlines()[-1]), out  # fmt: skip


def test_bad_arguments_exit_2_naming_them() -> None:
    got = subprocess.run(
        [sys.executable, str(BENCH), "--updates", "10", "--block", "100"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert got.returncode == 2 and "--updates >= --block" in got.stderr
