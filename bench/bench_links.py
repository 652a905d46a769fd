"""Actors on other hosts over shaped links: broadcast kinds x link speeds (BENCHMARKS.md 22).

Each arm: a fresh hub namespace (Redis, quantizer, learner) and one namespace per actor,
each joined to the hub by its own veth pair shaped with `tc tbf` both ways
(actorq.testing.netns). The arm itself runs inside the hub namespace (bench/links_arm.py)
and reports broadcast bytes/s, policy lag in versions (median, p95, per transition),
policy age in learner updates (does not shrink when fewer versions are stored),
publish-to-first-use time, env steps/s, learner updates/s and the actors' training
returns by env step. Arms run interleaved (for each seed: every link, every kind), each in
its own namespaces, which are removed afterwards; stale ones from a killed run are
removed first. Needs root (`ip netns`).

    make bench-links ARGS="--links 20 --kinds fp32,int8-delta --seeds 0,1,2"
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from actorq.testing.netns import (  # noqa: E402
    LinkShape,
    NetnsLab,
    exec_prefix,
    remove_stale,
    unavailable_reason,
)
from bench.links_arm import KINDS  # noqa: E402

SPARSE_ARM = {"algo": "td3", "env": "Pendulum-v1"}  # RLx2 sparsity needs an actor-critic


def run_one(
    kind: str, seed: int, rate: float | None, args, tree: Path = ROOT, rtt_ms: float = 0.0
) -> dict:
    """One arm; `tree` is the checkout whose links_arm.py and services run (a baseline);
    `rtt_ms` > 0 adds that round-trip time through delay relays (actorq.testing.delay_relay)."""
    shape = LinkShape(rate_mbit=rate)
    label = shape.label + (f", RTT +{rtt_ms:g} ms (relay)" if rtt_ms else "")
    with NetnsLab() as lab:
        links = [lab.add_spoke(f"a{i}", shape) for i in range(args.actors)]
        spec = {
            "kind": kind,
            "seed": seed,
            "hidden": args.hidden,
            "seconds": args.seconds,
            "publish_every": args.publish_every,
            "link_label": label,
            "relay_delay_ms": rtt_ms / 2,
            "links": [
                {"spoke": link.spoke, "hub_addr": link.hub_addr, "spoke_addr": link.spoke_addr}
                for link in links
            ],
            **(SPARSE_ARM if kind == "sparse-int8" else {}),
        }
        argv = [*exec_prefix(lab.hub), sys.executable, str(tree / "bench" / "links_arm.py"),
                json.dumps(spec)]  # fmt: skip
        proc = subprocess.run(
            argv, capture_output=True, text=True, timeout=args.seconds + 400, cwd=tree
        )
    for line in proc.stdout.splitlines():
        if line.startswith("ARM-RESULT "):
            result = json.loads(line[len("ARM-RESULT ") :])
            if tree != ROOT:
                result["kind"] += f" ({tree.name})"
            return result
    raise RuntimeError(f"arm {kind} seed {seed} {label} failed:\n{proc.stderr[-3000:]}")


def _arm(kind: str, seed: int, rate: float, args, tree: Path, rtt_ms: float = 0.0) -> dict:
    started = time.monotonic()
    r = run_one(kind, seed, rate or None, args, tree, rtt_ms)
    took = time.monotonic() - started
    print(f"{r['link']} {r['kind']} seed {seed}: lag median {r['lag_median']} "
          f"p95 {r['lag_p95']} ({took:.0f}s)", file=sys.stderr, flush=True)  # fmt: skip
    if args.out:
        with open(args.out, "a") as f:
            f.write(json.dumps(r) + "\n")
    return r


def _fmt(value, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def table(results: list[dict], return_at: tuple[int, ...] = ()) -> str:
    """The arms' figures; `return_at` adds a column per transition count E: the mean
    training return of the last 20 episodes ended by E transitions."""
    head = ("| link | kind | seed | versions/s | broadcast KB/s | lag mean | median | p95 "
            "| superseded median s | p95 s | first use median s | p95 s | versions used "
            "| age (updates) mean | median | p95 "
            "| env steps/s | updates/s "
            "| return @E |" + "".join(f" return @{n} |" for n in return_at))  # fmt: skip
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    equal = {  # per env: the fewest transitions any arm reached
        env: min(max((s for s, _r in r["episodes"]), default=0) for r in results if r["env"] == env)
        for env in {r["env"] for r in results}
    }
    for r in results:
        ret = _return_at(r["episodes"], equal[r["env"]])
        lines.append(
            f"| {r['link']} | {r['kind']} | {r['seed']} | {r['versions_per_s']:.2f} "
            f"| {r['broadcast_bytes_per_s'] / 1e3:.0f} | {_fmt(r.get('lag_mean'), 2)} "
            f"| {_fmt(r['lag_median'], 0)} "
            f"| {_fmt(r['lag_p95'], 0)} | {_fmt(r['superseded_median_s'], 2)} "
            f"| {_fmt(r['superseded_p95_s'], 2)} | {_fmt(r['first_use_median_s'], 2)} "
            f"| {_fmt(r['first_use_p95_s'], 2)} | {r['versions_used_share']:.2f} "
            f"| {_fmt(r.get('age_updates_mean'), 1)} | {_fmt(r.get('age_updates_median'), 0)} "
            f"| {_fmt(r.get('age_updates_p95'), 0)} "
            f"| {r['env_steps_per_s']:.0f} | {r['learner_updates_per_s']:.1f} | {_fmt(ret)} |"
            + "".join(f" {_fmt(_return_at(r['episodes'], n))} |" for n in return_at)
        )
    lines.append(f"\nreturn @E: mean training return of the last 20 episodes ended by "
                 f"E = {equal} transitions (per env, the fewest any arm reached).")  # fmt: skip
    return "\n".join(lines)


def _return_at(episodes: list, steps: int) -> float | None:
    done = [ret for s, ret in episodes if s <= steps][-20:]
    return sum(done) / len(done) if done else None


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--links", default="20", help="Mbit/s per link, comma separated; 0 = unshaped")
    p.add_argument(
        "--rtt-ms",
        default="0",
        help="added round-trip times, comma separated (a delay relay per service; this "
        "kernel has no netem)",
    )
    p.add_argument("--kinds", default="fp32,int8-delta", help=f"of {', '.join(KINDS)}")
    p.add_argument("--seeds", default="0")
    p.add_argument("--actors", type=int, default=2, help="actor namespaces (one link each)")
    p.add_argument("--hidden", default="512,512,512")
    p.add_argument("--seconds", type=float, default=40.0, help="measured window per arm")
    p.add_argument("--publish-every", type=int, default=15, help="learner updates per version")
    p.add_argument("--out", default="", help="append each arm's JSON line to this file")
    p.add_argument("--baseline-tree", default="", help="another checkout to run arms from too")
    p.add_argument("--baseline-kinds", default="", help="kinds run from --baseline-tree")
    p.add_argument(
        "--return-at", default="", help="also the return at these transition counts (a,b,..)"
    )
    p.add_argument("--table-from", default="", help="only print the table of a --out file")
    args = p.parse_args(argv)
    try:
        return_at = tuple(int(x) for x in args.return_at.split(",") if x)
    except ValueError:
        p.error(f"--return-at: expected comma-separated transition counts, got {args.return_at!r}")
    if args.table_from:
        lines = Path(args.table_from).read_text().splitlines()
        print(table([json.loads(line) for line in lines if line.strip()], return_at))
        return 0
    kinds = args.kinds.split(",")
    bad = [k for k in kinds if k not in KINDS]
    if bad:
        p.error(f"--kinds: unknown {bad}; expected some of {', '.join(KINDS)}")
    if args.actors < 2:
        p.error(f"--actors: expected >= 2 actor namespaces, got {args.actors}")
    args.hidden = [int(x) for x in args.hidden.split(",")]
    try:
        rtts = [float(x) for x in args.rtt_ms.split(",")]
    except ValueError:
        p.error(f"--rtt-ms: expected comma-separated milliseconds, got {args.rtt_ms!r}")
    if any(not 0 <= r <= 2000 for r in rtts):
        p.error(f"--rtt-ms: expected values in 0..2000 ms, got {args.rtt_ms!r}")
    reason = unavailable_reason()
    if reason:
        print(f"bench_links: cannot run: {reason}", file=sys.stderr)
        return 2
    stale = remove_stale()
    if stale:
        print(f"removed stale namespaces: {', '.join(stale)}", file=sys.stderr)
    results = []
    for seed in [int(s) for s in args.seeds.split(",")]:
        for rate in [float(x) for x in args.links.split(",")]:
            for rtt in rtts:
                arms = [(kind, ROOT) for kind in kinds]
                if args.baseline_tree:
                    base = Path(args.baseline_tree).resolve()
                    arms += [(kind, base) for kind in args.baseline_kinds.split(",") if kind]
                for kind, tree in arms:
                    results.append(_arm(kind, seed, rate, args, tree, rtt))
    print(table(results, return_at))
    return 0


if __name__ == "__main__":
    sys.exit(main())
