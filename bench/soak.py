"""Soak: many actors for a long time; lost transitions, RSS growth per service, policy lag.

    python bench/soak.py --actors 32 --minutes 10          # the reliability issue's soak
    python bench/soak.py --actors 8 --minutes 2 --warmup 30 # a quick look

Starts `actorq run` (embedded Redis, no target so it runs for the whole time), samples
every service's RSS (from /proc, pids from the run's services.json) and each actor's
policy lag (quantizer's version minus the actor's) every few seconds, then stops the
actors, lets the learner drain the stream and compares what Redis acknowledged with what
the learner ingested. Prints a table; exits 1 if a transition was lost.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import grpc
import redis

from actorq.rpc import make_channel
from actorq.v1 import control_pb2, control_pb2_grpc


def rss_mib(pid: int) -> float | None:
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    match = re.search(r"VmRSS:\s+(\d+) kB", text)
    return int(match.group(1)) / 1024 if match else None


class Soak:
    def __init__(self, run_dir: Path, actors: int, envs_per_actor: int) -> None:
        self.run_dir = run_dir
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "actorq",
                "run",
                "--actors",
                str(actors),
                "--envs-per-actor",
                str(envs_per_actor),
                "--target-return",
                "none",
                "--max-env-steps",
                str(10**10),
                "--run-dir",
                str(run_dir),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
        self.config = self._json("config.json", 300)
        self.services = self.config["services"]
        self.stubs = {
            name: control_pb2_grpc.ControlStub(make_channel(s["grpc"]))
            for name, s in self.services.items()
        }

    def _json(self, name: str, timeout: float) -> dict:
        path = self.run_dir / name
        deadline = time.monotonic() + timeout
        while not path.exists():
            if time.monotonic() > deadline or self.proc.poll() is not None:
                raise SystemExit(f"actorq run did not write {name}")
            time.sleep(0.5)
        return json.loads(path.read_text())

    def status(self, name: str) -> control_pb2.ServiceStatus | None:
        try:
            return self.stubs[name].GetStatus(control_pb2.GetStatusRequest(), timeout=5.0)
        except grpc.RpcError:
            return None

    def pids(self) -> dict[str, int]:
        return {k: v["pid"] for k, v in self._json("services.json", 60).items() if v["pid"]}

    def acknowledged(self) -> int:
        client = redis.Redis.from_url(self.config["redis_url"])
        return int(client.get(f"{self.config['redis_prefix']}:replay:inserted") or 0)

    def lag(self) -> list[int]:
        quantizer = self.status("quantizer")
        if quantizer is None:
            return []
        lags = []
        for name in self.services:
            if name.startswith("actor-"):
                s = self.status(name)
                if s is not None and s.policy_version > 0:
                    lags.append(int(quantizer.policy_version - s.policy_version))
        return lags

    def drain(self) -> tuple[int, int]:
        """Stop the actors, wait for the learner to ingest everything; (acked, ingested)."""
        for name in self.services:
            if name.startswith("actor-"):
                with contextlib.suppress(grpc.RpcError):
                    self.stubs[name].Stop(control_pb2.StopRequest(reason="soak: drain"), timeout=5)
        time.sleep(5.0)
        acked = self.acknowledged()
        deadline = time.monotonic() + 300
        ingested = -1
        while time.monotonic() < deadline:
            s = self.status("learner")
            ingested = int(s.counters["replay_inserted"]) if s else -1
            if ingested >= acked:
                break
            time.sleep(1.0)
        return acked, ingested

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(300)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--actors", type=int, default=32)
    parser.add_argument("--envs-per-actor", type=int, default=4)
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--warmup", type=float, default=120.0, help="seconds before RSS baseline")
    parser.add_argument("--every", type=float, default=10.0, help="seconds between samples")
    parser.add_argument("--run-dir", default="")
    args = parser.parse_args()
    run_dir = Path(args.run_dir or tempfile.mkdtemp(prefix="actorq-soak-")) / "run"
    soak = Soak(run_dir, args.actors, args.envs_per_actor)
    started = time.monotonic()
    baseline: dict[str, float] = {}
    last: dict[str, float] = {}
    lags: list[int] = []
    try:
        while time.monotonic() - started < args.minutes * 60:
            time.sleep(args.every)
            elapsed = time.monotonic() - started
            rss = {name: rss_mib(pid) for name, pid in soak.pids().items()}
            current = {k: v for k, v in rss.items() if v is not None}
            if elapsed >= args.warmup and not baseline:
                baseline = dict(current)
            last = current
            lags += soak.lag()
            print(
                f"[{elapsed:6.0f}s] acked {soak.acknowledged():>10,}  "
                f"RSS total {sum(current.values()):8.0f} MiB  "
                f"max lag {max(lags[-args.actors :], default=0)}",
                flush=True,
            )
        acked, ingested = soak.drain()
    finally:
        soak.stop()
    summary = json.loads((run_dir / "summary.json").read_text())
    print(f"\nsoak: {args.actors} actors x {args.minutes:g} min, run folder {run_dir}")
    print(f"env steps {summary['env_steps']:,}, learner updates {summary['learner_updates']:,}")
    print(f"restarts {summary['restarts'] or 'none'}")
    print(
        f"acknowledged by Redis {acked:,}, ingested by the learner {ingested:,}, "
        f"lost {max(acked - ingested, 0):,}"
    )
    if lags:
        print(f"policy lag (versions): median {statistics.median(lags):g}, max {max(lags)}")
    print(f"\n{'service':<12} {'RSS after warm-up MiB':>22} {'RSS at end MiB':>15} {'growth':>8}")
    growths = []
    for name in sorted(baseline):
        if name in last:
            growth = (last[name] - baseline[name]) / baseline[name]
            growths.append((growth, name))
            print(f"{name:<12} {baseline[name]:>22.1f} {last[name]:>15.1f} {growth:>8.1%}")
    if growths:
        worst = max(growths)
        print(f"\nworst RSS growth: {worst[1]} {worst[0]:.1%} (target < 5%)")
    return 0 if ingested >= acked else 1


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
