"""One arm of bench_links: run inside the hub namespace, actors in the spoke namespaces.

    ip netns exec HUB python bench/links_arm.py '<json ArmSpec>'   (bench_links.py does it)

Starts Redis (bound to the hub's link addresses), the quantizer and the learner here and
one actor per spoke namespace through `ip netns exec`, with the ACTORQ_* settings `actorq
run` would give them (`plan_services`), only the addresses changed. While they run it
records, from this side of the links:
- the newest stored policy version, polled every 10 ms (`<prefix>:policy:latest`), which
  gives each version's publish time;
- every replay batch the actors write (a second XREAD reader beside the learner's): its
  arrival time (the stream id's milliseconds), actor and policy version and row count;
- the quantizer's broadcast byte counter (Prometheus) at the window's start and end.
Lag of a transition = newest version when its batch arrived - the version that acted.
Publish-to-first-use of (actor, version) = first batch of that version - its publish time;
it includes up to one push interval (32 transitions) and the link's one-way time.
Prints one JSON line with the figures; bench_links.py collects them.
"""

from __future__ import annotations

import bisect
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import redis

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from actorq.actor.episodes import parse_episodes  # noqa: E402
from actorq.config import RunSettings  # noqa: E402
from actorq.launch.plan import plan_services  # noqa: E402
from actorq.launch.processes import stop_in_order  # noqa: E402
from actorq.redis_keys import RedisKeys  # noqa: E402
from actorq.testing.delay_relay import DelayRelay  # noqa: E402
from actorq.testing.netns import exec_prefix  # noqa: E402

REDIS_PORT = 6379  # the hub namespace is new: nothing else listens there

KINDS = {  # broadcast kind -> (precision, deltas, sparsity)
    "fp32": ("fp32", False, 0.0),
    "fp16": ("fp16", False, 0.0),
    "int8": ("int8", False, 0.0),
    "int8-delta": ("int8", True, 0.0),
    "sparse-int8": ("int8", False, 0.9),
}


@dataclass
class ArmSpec:
    kind: str
    seed: int
    hidden: list[int]
    seconds: float
    links: list[dict]  # per actor: {"spoke": ns, "hub_addr": ip, "spoke_addr": ip}
    link_label: str
    env: str = "CartPole-v1"
    algo: str = "dqn"
    publish_every: int = 15
    warmup_timeout: float = 240.0
    relay_delay_ms: float = 0.0  # one-way delay added by a relay in front of Redis/quantizer


class Recorder:
    """Background readers of the policy pointer and of the replay stream."""

    def __init__(self, client: redis.Redis, keys: RedisKeys) -> None:
        self.client, self.keys = client, keys
        self.versions: list[tuple[float, int]] = []  # (unix time, newest version)
        self.batches: list[tuple[float, str, int, int]] = []  # (time, actor, version, rows)
        self.inserted: list[tuple[float, int]] = []
        self.updates: list[tuple[float, int]] = []  # (time, learner updates reported)
        self.steps: dict[int, int] = {}  # version -> its learner_step (policy meta)
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=f, daemon=True) for f in (self._poll, self._read)]

    def start(self) -> Recorder:
        for t in self.threads:
            t.start()
        return self

    def close(self) -> None:
        self.stop.set()
        for t in self.threads:
            if t.ident is not None:  # a failed start-up never started them
                t.join(5)

    def _poll(self) -> None:
        last, tick = -1, 0
        while not self.stop.is_set():
            latest, inserted, updates = self.client.mget(
                self.keys.policy_latest, self.keys.inserted_counter, self.keys.learner_updates
            )
            now = time.time()
            version = int(latest or 0)
            if version != last:
                self.versions.append((now, version))
                step = self.client.hget(self.keys.policy_meta(version), "learner_step")
                if step is not None:
                    self.steps[version] = int(step)
                last = version
            if not self.updates or self.updates[-1][1] != int(updates or 0):
                self.updates.append((now, int(updates or 0)))
            if tick % 10 == 0:
                self.inserted.append((now, int(inserted or 0)))
            tick += 1
            time.sleep(0.01)

    def _read(self) -> None:
        cursor = "0-0"
        while not self.stop.is_set():
            reply = self.client.xread({self.keys.replay_stream: cursor}, count=1000, block=200)
            for _stream, entries in reply or []:
                for entry_id, fields in entries:
                    cursor = entry_id
                    ms = int(entry_id.split(b"-")[0])
                    self.batches.append(
                        (ms / 1000, fields[b"actor"].decode(), int(fields[b"version"]),
                         int(fields[b"n"]))
                    )  # fmt: skip

    def latest_at(self, t: float) -> int:
        i = bisect.bisect_right([v[0] for v in self.versions], t) - 1
        return self.versions[i][1] if i >= 0 else 0

    def published_at(self, version: int) -> float | None:
        for t, v in self.versions:
            if v >= version:
                return t
        return None

    def superseded_for(self, t: float, version: int) -> float:
        """Seconds at time t since a version newer than `version` was published (0 if
        `version` is still the newest): how long the actor has acted on an old policy."""
        for when, v in self.versions:
            if v > version:
                return max(0.0, t - when)
        return 0.0

    def updates_at(self, t: float) -> int:
        """Learner updates reported by time t (the learner reports every 10 updates)."""
        i = bisect.bisect_right([u[0] for u in self.updates], t) - 1
        return self.updates[i][1] if i >= 0 else 0

    def steps_at(self, t: float) -> int:
        times = [x[0] for x in self.inserted]
        i = bisect.bisect_right(times, t) - 1
        return self.inserted[i][1] if i >= 0 else 0


def broadcast_bytes(metrics_port: str) -> float:
    url = f"http://127.0.0.1:{metrics_port}/metrics"
    text = urllib.request.urlopen(url, timeout=5).read().decode()
    pattern = r"^actorq_quantizer_broadcast_bytes_total\{[^}]*\} ([0-9.e+]+)$"
    return sum(float(m) for m in re.findall(pattern, text, re.M))


def plan(spec: ArmSpec, run_dir: Path, prefix: str):
    precision, deltas, sparsity = KINDS[spec.kind]
    settings = RunSettings(
        env=spec.env, algo=spec.algo, actors=len(spec.links), precision=precision,
        hidden=tuple(spec.hidden), seed=spec.seed, max_env_steps=10**9, target_return=None,
        sparsity_actor=sparsity,
    )  # fmt: skip
    local_url = f"redis://127.0.0.1:{REDIS_PORT}/0"
    cluster = plan_services(settings, run_dir, local_url, prefix)
    quantizer = cluster.quantizer
    quantizer.env["ACTORQ_BIND_HOST"] = "0.0.0.0"  # actors reach it over their links
    quantizer.env["ACTORQ_DELTAS"] = "true" if deltas else "false"
    for learner in cluster.learners:
        learner.env["ACTORQ_PUBLISH_EVERY"] = str(spec.publish_every)
    for actor, link in zip(cluster.actors, spec.links, strict=True):
        actor.wrapper = exec_prefix(link["spoke"])
        actor.host = link["spoke_addr"]
    point_actors(cluster, spec, REDIS_PORT, quantizer.grpc_port)
    return cluster


def point_actors(cluster, spec: ArmSpec, redis_port: int, quantizer_port: int) -> None:
    """Actors reach Redis and the quantizer at these ports of their link's hub address."""
    for actor, link in zip(cluster.actors, spec.links, strict=True):
        hub = link["hub_addr"]
        actor.env.update(
            ACTORQ_BIND_HOST=link["spoke_addr"],
            ACTORQ_QUANTIZER_ADDR=f"{hub}:{quantizer_port}",
            ACTORQ_REDIS_URL=f"redis://{hub}:{redis_port}/0",
        )


def start_relays(spec: ArmSpec) -> list[DelayRelay]:
    """With a relay delay, actors reach Redis and the quantizer through delay relays
    listening on every hub address: RTT + 2 x delay where the kernel has no netem.

    They bind before the services are planned, so the free ports the plan picks cannot be
    the ones the relays took; the quantizer's relay learns its target in `route_relays`."""
    if not spec.relay_delay_ms:
        return []
    delay = spec.relay_delay_ms / 1000
    targets = [("127.0.0.1", REDIS_PORT), ("127.0.0.1", 0)]  # the quantizer's port comes later
    return [DelayRelay("0.0.0.0", 0, target, delay).start() for target in targets]


def route_relays(relays: list[DelayRelay], cluster, spec: ArmSpec) -> None:
    if relays:
        relays[1].target = ("127.0.0.1", cluster.quantizer.grpc_port)
        point_actors(cluster, spec, relays[0].port, relays[1].port)


def run_arm(spec: ArmSpec) -> dict:
    work = Path(tempfile.mkdtemp(prefix="actorq-links-"))
    prefix = f"actorq:links:{uuid.uuid4().hex[:6]}"
    redis_proc = subprocess.Popen(
        ["redis-server", "--port", str(REDIS_PORT), "--bind", "0.0.0.0", "--save", "",
         "--appendonly", "no", "--protected-mode", "no", "--dir", str(work)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    client = redis.Redis(port=REDIS_PORT)
    _wait(lambda: _ping(client), 10, "redis")
    relays = start_relays(spec)
    cluster = plan(spec, work, prefix)
    route_relays(relays, cluster, spec)
    services = [cluster.quantizer, cluster.learner, *cluster.actors]
    recorder = Recorder(client, RedisKeys(prefix))
    try:
        for proc in services:
            proc.start()
        for proc in services:
            proc.wait_healthy(180)
        recorder.start()
        # Warm-up: the learner has started publishing (DQN learns after 1000 transitions).
        _wait(lambda: len(recorder.versions) >= 3, spec.warmup_timeout, "policy versions")
        q_port = cluster.quantizer.env["ACTORQ_METRICS_PORT"]
        start, bytes0 = time.time(), broadcast_bytes(q_port)
        updates0 = int(client.get(RedisKeys(prefix).learner_updates) or 0)
        time.sleep(spec.seconds)
        end, bytes1 = time.time(), broadcast_bytes(q_port)
        updates1 = int(client.get(RedisKeys(prefix).learner_updates) or 0)
        time.sleep(0.5)  # batches written before `end` reach the reader
        episodes = _episodes(client, RedisKeys(prefix), recorder)
    finally:
        recorder.close()
        stop_in_order([cluster.actors, cluster.learners, [cluster.quantizer]])
        for relay in relays:
            relay.close()
        redis_proc.terminate()
        redis_proc.wait(10)
    return summarise(spec, recorder, start, end, bytes1 - bytes0, updates1 - updates0, episodes)


def _episodes(client, keys: RedisKeys, recorder: Recorder) -> list[tuple[int, float]]:
    """(transitions inserted when it ended, return) of every training episode."""
    out = []
    for _id, f in client.xrange(keys.episodes_stream):
        for e in parse_episodes(f):  # one entry: one or more episodes
            if e.kind == "train":
                out.append((recorder.steps_at(e.unix_time), e.episode_return))
    return out


def summarise(spec, rec: Recorder, start, end, sent_bytes, updates, episodes) -> dict:
    window = [b for b in rec.batches if start <= b[0] <= end]
    lags = np.array([rec.latest_at(t) - v for t, _a, v, _n in window], dtype=float)
    rows = np.array([n for *_x, n in window], dtype=float)
    stale = np.array([rec.superseded_for(t, v) for t, _a, v, _n in window], dtype=float)
    # policy age in learner updates: independent of how many versions/s are stored
    aged = [(rec.updates_at(t) - rec.steps[v], n) for t, _a, v, n in window if v in rec.steps]
    age = np.array([a for a, _n in aged], dtype=float)
    age_rows = np.array([n for _a, n in aged], dtype=float)
    first: dict[tuple[str, int], float] = {}
    for t, actor, version, _n in rec.batches:
        first.setdefault((actor, version), t)
    published = {v: t for t, v in rec.versions}
    delays = [t - published[v] for (_a, v), t in first.items()
              if v in published and start <= published[v] <= end]  # fmt: skip
    versions_in = [v for t, v in rec.versions if start <= t <= end]
    seconds = end - start
    return {
        "kind": spec.kind,
        "env": spec.env,
        "seed": spec.seed,
        "link": spec.link_label,
        "relay_delay_ms": spec.relay_delay_ms,
        "actors": len(spec.links),
        "hidden": spec.hidden,
        "seconds": round(seconds, 2),
        "versions_per_s": round(len(versions_in) / seconds, 3),
        "broadcast_bytes_per_s": round(sent_bytes / seconds, 1),
        "lag_median": _weighted_quantile(lags, rows, 0.5),
        "lag_p95": _weighted_quantile(lags, rows, 0.95),
        "lag_mean": _round(float(np.average(lags, weights=rows))) if len(lags) else None,
        "superseded_median_s": _round(_weighted_quantile(stale, rows, 0.5)),
        "superseded_p95_s": _round(_weighted_quantile(stale, rows, 0.95)),
        "age_updates_median": _weighted_quantile(age, age_rows, 0.5),
        "age_updates_p95": _weighted_quantile(age, age_rows, 0.95),
        "age_updates_mean": _round(float(np.average(age, weights=age_rows))) if aged else None,
        "age_rows_share": round(float(age_rows.sum() / max(rows.sum(), 1)), 3),
        "first_use_median_s": round(float(np.median(delays)), 3) if delays else None,
        "first_use_p95_s": round(float(np.quantile(delays, 0.95)), 3) if delays else None,
        "versions_used_share": round(
            len({v for (_a, v) in first if v in versions_in}) / max(len(versions_in), 1), 3
        ),
        "env_steps_per_s": round(rows.sum() / seconds, 1),
        "learner_updates_per_s": round(updates / seconds, 2),
        "episodes": episodes,
    }


def _weighted_quantile(values: np.ndarray, weights: np.ndarray, q: float) -> float | None:
    if len(values) == 0:
        return None
    order = np.argsort(values, kind="stable")
    cum = np.cumsum(weights[order])
    return float(values[order][np.searchsorted(cum, q * cum[-1])])


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


def _ping(client: redis.Redis) -> bool:
    try:
        return bool(client.ping())
    except redis.ConnectionError:
        return False


def _wait(ready, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not ready():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(0.1)


if __name__ == "__main__":
    os.environ.setdefault("ACTORQ_LOG_LEVEL", "WARNING")
    result = run_arm(ArmSpec(**json.loads(sys.argv[1])))
    print("ARM-RESULT " + json.dumps(result), flush=True)
