"""Delta codecs side by side: make_delta + apply_delta CPU time and bytes, zlib/xz/zstd.

Consecutive versions come from a real learner (bench/blob_versions.py: the actorq DQN/TD3
update, a gymnasium vector env, `publish_every` updates between versions, as the learner
service publishes them), quantized to int8. For every consecutive pair, every arm (codec
and level) makes the delta and applies it, arms in a rotating order so that load from
other jobs falls on all of them alike (BENCHMARKS.md 22c).

    .venv/bin/python bench/bench_delta_codec.py                       # the 22c cases
    .venv/bin/python bench/bench_delta_codec.py --case dqn:CartPole-v1:64x64:5 --versions 6

Times are CPU seconds of this process (time.process_time; one torch thread, the codecs run
single-threaded), medians over the pairs; `make` = diff + compress + envelope, `apply` =
inflate + undiff + payload rebuild + SHA-256 + decode.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

import numpy as np
import torch

from actorq.quant import delta as delta_module
from actorq.quant import encode_policy
from actorq.quant.delta import apply_delta, make_delta
from actorq.study.runner import machine
from actorq.v1 import policy_pb2

try:
    from bench.blob_versions import policy_versions
except ImportError:  # run as a script: bench/ is on sys.path
    from blob_versions import policy_versions  # type: ignore[no-redef]

P = policy_pb2
# arm -> (codec, module constant holding its level, level)
ARMS: dict[str, tuple[int, str, int]] = {
    "zlib-1": (P.DELTA_CODEC_ZLIB, "ZLIB_LEVEL", 1),
    "zlib-6": (P.DELTA_CODEC_ZLIB, "ZLIB_LEVEL", 6),
    "xz-0": (P.DELTA_CODEC_XZ, "XZ_PRESET", 0),
    "xz-6": (P.DELTA_CODEC_XZ, "XZ_PRESET", 6),
    "zstd-1": (P.DELTA_CODEC_ZSTD, "ZSTD_LEVEL", 1),
    "zstd-3": (P.DELTA_CODEC_ZSTD, "ZSTD_LEVEL", 3),
    "zstd-6": (P.DELTA_CODEC_ZSTD, "ZSTD_LEVEL", 6),
    "zstd-9": (P.DELTA_CODEC_ZSTD, "ZSTD_LEVEL", 9),
    "zstd-19": (P.DELTA_CODEC_ZSTD, "ZSTD_LEVEL", 19),
}
CASES = ["dqn:CartPole-v1:512x512x512:5", "dqn:CartPole-v1:64x64:5", "td3:Pendulum-v1:256x256:5"]


def parse_case(text: str) -> tuple[str, str, tuple[int, ...], int]:
    try:
        algo, env_id, hidden, every = text.split(":")
        return algo, env_id, tuple(int(h) for h in hidden.split("x")), int(every)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"--case {text!r}: expected algo:env:WxH:every, e.g. dqn:CartPole-v1:64x64:5"
        ) from None


def run_case(case: str, versions: int, arms: list[str], repeats: int) -> list[dict]:
    algo, env_id, hidden, every = parse_case(case)
    rows: list[dict] = []
    previous = None
    stream = policy_versions(env_id, algo, hidden, versions, publish_every=every, seed=0)
    for v, (spec, weights) in enumerate(stream, 1):
        encoded = encode_policy(weights, spec, P.PRECISION_INT8, v, v * every)
        if previous is not None:
            pair = v - 2
            order = arms[pair % len(arms) :] + arms[: pair % len(arms)]  # rotate
            for arm in order:
                rows.append(_one(case, arm, previous, encoded, repeats, v))
        previous = encoded
    return rows


def _one(case: str, arm: str, base, target, repeats: int, version: int) -> dict:
    codec, constant, level = ARMS[arm]
    saved = getattr(delta_module, constant)
    setattr(delta_module, constant, level)
    try:
        make_s, apply_s = [], []
        for _ in range(repeats):
            start = time.process_time()
            envelope = make_delta(base.arrays, target, codec=codec)
            make_s.append(time.process_time() - start)
            assert envelope is not None
            start = time.process_time()
            got = apply_delta(base.arrays, envelope, expected_sha256=target.sha256)
            apply_s.append(time.process_time() - start)
            assert got.sha256 == target.sha256
    finally:
        setattr(delta_module, constant, saved)
    diff = P.PolicyDelta.FromString(P.PolicyEnvelope.FromString(envelope).payload).diff
    changed = [
        float((t.values != base.arrays.tensors[n].values).mean())
        for n, t in target.arrays.tensors.items()
        if t.scales is not None
    ]
    return {
        "case": case,
        "arm": arm,
        "version": version,
        "make_ms": 1e3 * min(make_s),
        "apply_ms": 1e3 * min(apply_s),
        "delta_bytes": len(envelope),
        "diff_bytes": len(diff),
        "full_bytes": target.blob_bytes,
        "codes_changed": float(np.mean(changed)),
        "load": os.getloadavg(),
    }


def table(rows: list[dict], arms: list[str]) -> str:
    lines = [
        "| case | arm | make ms | apply ms | delta bytes | / full int8 | codes changed | pairs |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for case in dict.fromkeys(r["case"] for r in rows):
        for arm in arms:
            got = [r for r in rows if r["case"] == case and r["arm"] == arm]
            if not got:
                continue
            med = {k: statistics.median(r[k] for r in got) for k in ("make_ms", "apply_ms")}
            size = statistics.median(r["delta_bytes"] for r in got)
            ratio = statistics.median(r["delta_bytes"] / r["full_bytes"] for r in got)
            changed = statistics.mean(r["codes_changed"] for r in got)
            lines.append(
                f"| {case} | {arm} | {med['make_ms']:.1f} | {med['apply_ms']:.1f} | "
                f"{size:,.0f} | {ratio:.3f} | {changed:.3f} | {len(got)} |"
            )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", action="append", help="algo:env:WxH:every (repeatable)")
    parser.add_argument("--versions", type=int, default=8, help="versions per case")
    parser.add_argument("--arms", default=",".join(ARMS), help=f"some of {','.join(ARMS)}")
    parser.add_argument("--repeats", type=int, default=3, help="timings per pair (min kept)")
    parser.add_argument("--out", type=Path, help="append one JSON row per pair and arm")
    parser.add_argument("--table-from", type=Path, help="print the table of a --out file")
    args = parser.parse_args()
    arms = [a.strip() for a in args.arms.split(",") if a.strip()]
    unknown = [a for a in arms if a not in ARMS]
    if unknown:
        parser.error(f"--arms: unknown {unknown}; expected some of {','.join(ARMS)}")
    if args.table_from:
        rows = [json.loads(line) for line in args.table_from.read_text().splitlines() if line]
        print(table([r for r in rows if "arm" in r], arms))
        return
    torch.set_num_threads(1)
    info = {**machine(), "load_start": os.getloadavg(), "command": vars(args)}
    print(json.dumps(info, default=str))
    rows: list[dict] = []
    for case in args.case or CASES:
        got = run_case(case, args.versions, arms, args.repeats)
        rows.extend(got)
        print(table(got, arms), flush=True)
    info["load_end"] = os.getloadavg()
    print(json.dumps({"load_end": info["load_end"]}))
    if args.out:
        with args.out.open("a") as f:
            f.write(json.dumps({"machine": info}, default=str) + "\n")
            for row in rows:
                f.write(json.dumps(row) + "\n")
    print(table(rows, arms))


if __name__ == "__main__":
    main()
