"""bench/bench_replay_bytes.py on real envs, briefly: the actor's batches of Pong frames
shrink under zstd and decode back, MinAtar (not a frame stack) gets no frames-once bound,
and a run too short for one batch says so."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench" / "bench_replay_bytes.py"
ROW = re.compile(r"^\| (\S+) \| uint8 \[[\d, ]+\] \| 1 \| (\d) \| (\d+) \| (none|zstd) \| ([\d,]+) "
                 r"\| ([\d.]+) \| ([\d.]+) \| ([\d.]+) \| (.+) \|$", re.M)  # fmt: skip


def test_pong_batches_shrink_under_zstd_and_minatar_has_no_frame_bound() -> None:
    out = subprocess.run(
        [sys.executable, str(BENCH), "--envs", "ale:Pong,minatar:breakout",
         "--envs-per-actor", "1", "--n-step", "1,3", "--steps", "70"],
        capture_output=True, text=True, timeout=300, check=True,
    ).stdout  # fmt: skip
    rows = {(m[0], int(m[1]), m[3]): m for m in ROW.findall(out)}
    assert len(rows) == 8, out
    for n in (1, 3):
        raw, packed = rows[("ale:Pong", n, "none")], rows[("ale:Pong", n, "zstd")]
        assert int(raw[4].replace(",", "")) >= 2 * 4 * 84 * 84  # obs and next_obs, 4 frames
        assert float(packed[5]) < 0.05, out  # Pong's frames are mostly background
        bound = int(packed[8].replace(",", ""))
        assert 0 < bound < int(packed[4].replace(",", "")), out  # one frame < two stacks
        assert float(packed[6]) > 0 and float(packed[7]) > 0
        assert rows[("minatar:breakout", n, "zstd")][8] == "n/a (not stacked)"
    assert rows[("ale:Pong", 1, "zstd")][2] == "32"  # auto_push_every's floor for 56 kB rows


def test_too_few_steps_for_one_batch_is_an_error_naming_the_batch() -> None:
    got = subprocess.run(
        [sys.executable, str(BENCH), "--envs", "minatar:breakout", "--steps", "10"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert got.returncode != 0
    assert "--steps 10 is less than one batch of minatar:breakout at M=8" in got.stderr
