"""Fuzz every actorq gRPC method with >= 10,000 generated inputs each and print a table.

    .venv/bin/python bench/fuzz_grpc.py [--inputs 10000] [--only PublishWeights,...]
                                        [--redis-url URL]

Target: the real quantizer stack (ParameterServer + Control on a GrpcServer, port 0) over
a real Redis: a private embedded redis-server by default (so the per-input store check
scans only this run's keys), or --redis-url. Inputs come from the hypothesis strategies in
actorq/testing/grpc_fuzz.py: typed adversarial messages (truncated/out-of-order chunks,
huge declared sizes, wrong shapes, NaN/Inf, version rollback, unknown precision, ...)
and raw undecodable bytes per method. After every input the status must be a handled one
(never UNKNOWN/INTERNAL), the server must answer health checks, and the store must hold no
half-published version; any breach counts as a crash and is printed. A unary call that
outlives the client's 10 s deadline on a loaded machine is counted as a timeout (and the
health and store checks still run after it), not as a crash.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import grpc
import redis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from actorq.redis_server import EmbeddedRedis
from actorq.testing import grpc_fuzz as fz


@dataclass
class Row:
    name: str
    inputs: int = 0
    statuses: collections.Counter[str] = field(default_factory=collections.Counter)
    crashes: list[str] = field(default_factory=list)
    timeouts: int = 0  # our own client deadline passed (a loaded machine), not a crash
    seconds: float = 0.0


def _cases(target: fz.FuzzTarget) -> dict[str, tuple[st.SearchStrategy, Callable, set]]:
    """name -> (strategy, call returning a status code, allowed codes)."""
    raw = {
        f"raw {m}": (
            fz.raw_payloads(),
            lambda p, m=m: target.raw(m, p),
            fz.WATCH_ALLOWED if m in ("WatchPolicy", "GetPolicy") else fz.ALLOWED,
        )
        for m in fz.METHODS
    }
    return {
        "PublishWeights": (
            fz.publish_streams(),
            target.publish,
            fz.ALLOWED,
        ),
        "WatchPolicy": (
            fz.watch_requests(),
            lambda r: target.watch(r, timeout=0.01),
            fz.WATCH_ALLOWED,
        ),
        "GetPolicy": (fz.get_policy_requests(), target.get_policy, fz.ALLOWED),
        "Stop": (fz.stop_requests(), target.stop, {grpc.StatusCode.OK}),
        **raw,  # GetStatus has an empty request: its inputs are bytes, valid or not
    }


def run_case(target: fz.FuzzTarget, row: Row, strategy, call, allowed, inputs: int) -> None:
    @settings(
        max_examples=inputs,
        phases=[Phase.generate],
        database=None,
        deadline=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(value=strategy)
    def one(value) -> None:
        row.inputs += 1
        try:
            code = call(value)
            row.statuses[code.name] += 1
            if code is grpc.StatusCode.DEADLINE_EXCEEDED and code not in allowed:
                row.timeouts += 1  # still checked below: the server must be healthy
            else:
                target.check_status(code, allowed, row.name)
            target.check_all()
        except Exception as exc:  # a breach is recorded, and the run goes on
            if len(row.crashes) < 5:
                row.crashes.append(f"{type(exc).__name__}: {exc}"[:300])
            else:
                row.crashes.append("")

    started = time.perf_counter()
    one()
    row.seconds = time.perf_counter() - started


@contextlib.contextmanager
def redis_client(url: str) -> Iterator[redis.Redis]:
    if url:
        client = redis.Redis.from_url(url)
        yield client
        client.close()
        return
    with EmbeddedRedis() as server:
        client = redis.Redis.from_url(server.url)
        yield client
        client.close()


def print_table(rows: list[Row]) -> None:
    print(f"{'method':<22} {'inputs':>7} {'crashes':>7} {'timeouts':>8} {'seconds':>8}  statuses")
    for row in rows:
        seen = ", ".join(f"{k} {v}" for k, v in row.statuses.most_common())
        print(
            f"{row.name:<22} {row.inputs:>7} {len(row.crashes):>7} {row.timeouts:>8} "
            f"{row.seconds:>8.1f}  {seen}"
        )
    total = sum(r.inputs for r in rows)
    print(f"total: {total} inputs, {sum(len(r.crashes) for r in rows)} crashes")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--inputs", type=int, default=10_000, help="generated inputs per method")
    parser.add_argument("--only", default="", help="comma-separated case names to run")
    parser.add_argument("--redis-url", default="", help="default: a private embedded Redis")
    args = parser.parse_args()
    if args.inputs < 1:
        parser.error(f"--inputs: expected >= 1, got {args.inputs}")
    rows: list[Row] = []
    with redis_client(args.redis_url) as client:
        target = fz.FuzzTarget(client)
        try:
            target.ps.PublishWeights(fz.valid_stream(1), timeout=10)
            cases = _cases(target)
            wanted = [c for c in args.only.split(",") if c] or list(cases)
            unknown = [c for c in wanted if c not in cases]
            if unknown:
                parser.error(f"--only: unknown cases {unknown}; known: {', '.join(cases)}")
            for name in wanted:
                row = Row(name)
                rows.append(row)
                run_case(target, row, *cases[name], args.inputs)
                print(f"  done {name}: {row.inputs} inputs in {row.seconds:.1f} s", flush=True)
        finally:
            target.close()
    print_table(rows)
    for row in rows:
        for crash in row.crashes[:5]:
            print(f"CRASH {row.name}: {crash}")
    return 1 if any(r.crashes for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
