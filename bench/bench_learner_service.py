"""The learner service against its own update run alone: updates/s per algorithm, device
and path, the ratio service/alone, and where the service's time goes.

Per (algorithm, device), interleaved round by round:
- alone: a worker process builds the algorithm as the learner service does
  (make_algorithm, then the update path `auto` picks on that device: setup_learner) and
  runs updates on fixed random batches of the service's batch size for --seconds;
  updates/s of wall time after a warm-up.
- service: `actorq run` with --actors actors feeding at --samples-per-insert, the same
  network, device and path, for --seconds after the first update; updates/s from the
  learner's counters in metrics.jsonl over the steady part (the second half of the
  samples after learning starts), the learner's wait and sample shares, and CPU seconds
  per role from summary.json.
A ratio under 1 means the service delivers less than its update can do: the learner
waits for actors (wait share high) or spends its time elsewhere (ingest, sampling,
bookkeeping: CPU of the learner process above what its updates need). `--ingest
thread,process` runs the service once per ACTORQ_INGEST mode after each alone arm (the
learner's CPU then includes its ingest process, which it waits for at exit).
`--device-replay-k 0,8` likewise runs the service once per ACTORQ_DEVICE_REPLAY_K (8:
the replay mirrored on the update's device, 8 device-sampled updates per call; needs a
captured `--update-path`, e.g. torch-eager on the CPU, cuda-graph on a GPU).
`--service-env 'ACTORQ_PUBLISH_MIN_SECONDS=0'` (repeatable; comma-separated K=V, empty =
the defaults) runs the service once per such setting, interleaved like the arms above.
`--replay prioritized` runs every service arm on prioritized replay (on the ring: its
priorities on the device); the alone arm is the same update either way.
`--alone-drawn` also runs the update through the service's own UpdateStep on a full replay
mirror of the service's capacity (draws of 8 batches, gathers of random rows, bookkeeping;
no ingest, actors or Redis) and prints the service against it: what the replay's memory
costs the update, apart from what the service adds.
`--crowded-alone N` also runs N copies of the alone update at once (N = the cores) and
prints the service against a copy's rate: what the update itself does when no core is
idle, as in the service, where actors, Redis and the quantizer run on the other cores.

    .venv/bin/python bench/bench_learner_service.py --algos dqn --devices cpu --seconds 20

The last two lines are `service/alone median <ratio> of <n> run(s)` and `service/alone min
<ratio>`.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CASES = {  # algo -> (env, hidden, obs_dim, outputs) as the service runs it
    "dqn": ("CartPole-v1", (64, 64), 4, 2),
    "td3": ("Pendulum-v1", (256, 256), 3, 1),
    "sac": ("Pendulum-v1", (256, 256), 3, 1),
    "ddpg": ("Pendulum-v1", (256, 256), 3, 1),
    "d4pg": ("Pendulum-v1", (256, 256), 3, 1),
}


def alone_worker(
    algo: str, device: str, seconds: float, path: str = "auto", drawn: bool = False
) -> dict:
    """Updates/s of the algorithm's update alone, on the path the service would run; with
    `drawn`, through the service's own `UpdateStep` drawing from a full replay mirror."""
    import torch

    from actorq.algos import load_algorithm_config, make_algorithm
    from actorq.algos.capture import captured_runner
    from actorq.denormals import flush_denormals
    from actorq.learner.update_path import setup_learner
    from actorq.testing.batches import random_update_batches

    torch.set_num_threads(1)  # the service's learner default on CPU (ACTORQ_TORCH_THREADS)
    flush_denormals(True)  # ... and ACTORQ_FLUSH_DENORMALS's
    _env, hidden, obs, out = CASES[algo]
    config = load_algorithm_config(algo, {})
    learner = make_algorithm(algo, obs, out, hidden, config, device=device)
    info = setup_learner(learner, device, path)
    batches = random_update_batches(algo, obs, out, config.batch_size, seed=0)
    runner = captured_runner(learner)
    step = _drawn_step(learner, algo, obs, out, config.batch_size) if drawn else None

    def run(n: int) -> None:
        if step is not None:
            done = 0
            while done < n:
                done += step(None, n - done)
            return
        for i in range(n):
            batch = batches[i % len(batches)]
            if runner is None:
                learner.update(batch)
            else:
                runner.submit([batch])
                if runner.pending >= runner.slots:
                    runner.drain()
        if runner is not None and runner.pending:
            runner.drain()

    run(50)  # warm-up: allocations, captures
    done, started = 0, time.perf_counter()
    while time.perf_counter() - started < seconds:
        run(100)
        done += 100
    elapsed = time.perf_counter() - started
    return {"updates_per_s": done / elapsed, "path": info.update_path, "batch": config.batch_size}


def _drawn_step(learner, algo: str, obs: int, out: int, batch_size: int):
    """The learner service's `UpdateStep` (its draws of 8 batches at once, gathers and
    bookkeeping) on a replay mirror of the service's default capacity, full of random
    transitions: the update as the service feeds it, without ingest, actors or Redis.
    (Continuous runs in the service gather through RLx2's one-batch draw instead.)"""
    import numpy as np

    from actorq.config import LearnerSettings
    from actorq.learner.counters import LearnerCounters
    from actorq.learner.update_step import UpdateStep
    from actorq.replay import ReplayStorage, TransitionBatch, UniformSampler
    from actorq.testing.batches import random_update_batches

    capacity = LearnerSettings().replay_capacity
    storage = ReplayStorage(capacity, obs, 0 if algo == "dqn" else out)
    chunk = 10_000
    for b in random_update_batches(algo, obs, out, chunk, n=-(-capacity // chunk), seed=1):
        action = b["action"].astype(np.int64 if algo == "dqn" else np.float32)
        storage.add(TransitionBatch(
            obs=b["obs"], action=action, reward=b["reward"], next_obs=b["next_obs"],
            done=b["done"].astype(bool), actor_id="bench", policy_version=1, precision="int8",
        ))  # fmt: skip
    rng = np.random.default_rng(0)
    return UpdateStep(learner, storage, UniformSampler(), batch_size, LearnerCounters(), rng)


def _alone(
    algo: str, device: str, seconds: float, path: str, copies: int = 1, drawn: bool = False
) -> dict:
    """The update alone; with `copies` > 1 that many at once (one per core), and the mean
    updates/s of a copy: the update's rate when the other cores are busy too. `drawn`:
    through UpdateStep on a full replay mirror (alone_worker)."""
    cmd = [sys.executable, __file__, "--worker", algo, "--devices", device]
    cmd += ["--seconds", str(seconds), "--update-path", path] + (["--alone-drawn"] if drawn else [])
    procs = [
        subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)
        for _ in range(copies)
    ]
    results = []
    for proc in procs:
        out, _ = proc.communicate(timeout=600)
        if proc.returncode:
            raise SystemExit(f"alone worker for {algo} on {device} exited {proc.returncode}")
        results.append(json.loads(out.strip().splitlines()[-1]))
    mean = statistics.mean(r["updates_per_s"] for r in results)
    return {**results[0], "updates_per_s": mean}


def _service(
    algo: str,
    device: str,
    args: argparse.Namespace,
    run_dir: Path,
    ingest: str = "thread",
    ring_k: str = "0",
    extra_env: str = "",
) -> dict:
    env, hidden, _obs, _out = CASES[algo]
    cmd = [sys.executable, "-m", "actorq", "run", "--algo", algo, "--env", env]
    cmd += ["--hidden", ",".join(map(str, hidden)), "--actors", str(args.actors)]
    cmd += ["--samples-per-insert", str(args.samples_per_insert), "--learner-device", device]
    cmd += ["--target-return", "none", "--max-seconds", str(args.seconds + args.startup)]
    cmd += ["--run-dir", str(run_dir), "--replay", args.replay]
    env = os.environ | {"ACTORQ_INGEST": ingest, "ACTORQ_DEVICE_REPLAY_K": ring_k}
    env |= {"ACTORQ_UPDATE_PATH": args.update_path} | _env_arm(extra_env)
    subprocess.run(cmd, capture_output=True, text=True, check=True, timeout=1800, env=env)
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    learning = [r for r in rows if r.get("learner_updates", 0) > 0]
    steady = learning[len(learning) // 2 :]
    if len(steady) < 2:
        raise SystemExit(f"{algo} on {device}: too few samples after learning started")
    first, last = steady[0], steady[-1]
    rate = (last["learner_updates"] - first["learner_updates"]) / (
        last["wall_seconds"] - first["wall_seconds"]
    )
    summary = json.loads((run_dir / "summary.json").read_text())
    return {
        "updates_per_s": rate,
        "env_steps_per_s": (last["env_steps"] - first["env_steps"])
        / (last["wall_seconds"] - first["wall_seconds"]),
        "wait": statistics.median(r.get("learner_wait_fraction", 0.0) for r in steady),
        "sample": statistics.median(r.get("learner_sample_fraction", 0.0) for r in steady),
        "update": statistics.median(r.get("learner_update_fraction", 0.0) for r in steady),
        "update_ms": _window_update_ms(first, last),
        "cpu": summary.get("cpu_seconds", {}),
        "wall": summary.get("wall_seconds", 0.0),
        "updates": summary.get("learner_updates", 0),
        "path": summary.get("learner_update_path"),
    }


def _env_arm(text: str) -> dict[str, str]:
    """`K=V,K2=V2` as a dict (empty: none); a pair without `=` exits naming it."""
    pairs = [p for p in text.split(",") if p.strip()]
    for pair in pairs:
        if "=" not in pair:
            raise SystemExit(f"--service-env: expected K=V pairs, got {pair!r}")
    return dict(p.strip().split("=", 1) for p in pairs)


def _window_update_ms(first: dict, last: dict) -> float:
    """Milliseconds per update in the learner's update calls between two metrics rows
    (each row's `learner_update_ms` is the mean since the start)."""
    spent = (
        last.get("learner_update_ms", 0.0) * last["learner_updates"]
        - first.get("learner_update_ms", 0.0) * first["learner_updates"]
    )
    done = last["learner_updates"] - first["learner_updates"]
    return spent / done if done > 0 else 0.0


def _crowded_cells(crowded: dict | None, service_rate: float) -> str:
    """`| rate | service/rate |` cells of a further alone arm (crowded, drawn), or none."""
    if crowded is None:
        return ""
    rate = crowded["updates_per_s"]
    return f" {rate:,.0f} | {service_rate / rate:.2f} |"


def _cpu_line() -> str:
    model, flags = platform.processor() or "unknown", ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
            if line.startswith("flags"):
                have = set(line.split(":", 1)[1].split())
                flags = " ".join(f for f in ("avx2", "avx512f", "avx512_vnni") if f in have)
                break
    except OSError:
        pass
    return f"{model} ({flags}); load {Path('/proc/loadavg').read_text().split()[:3]}"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--algos", default="dqn,td3", help=f"comma-separated, of {sorted(CASES)}")
    p.add_argument("--devices", default="cpu", help="comma-separated: cpu, cuda")
    p.add_argument("--seconds", type=float, default=20.0, help="measured seconds per arm")
    p.add_argument("--startup", type=float, default=15.0, help="seconds added for start-up")
    p.add_argument("--actors", type=int, default=1)
    p.add_argument("--samples-per-insert", type=float, default=16.0)
    p.add_argument("--rounds", type=int, default=1, help="interleaved rounds")
    p.add_argument("--ingest", default="thread", help="ACTORQ_INGEST arms: thread,process")
    p.add_argument(
        "--device-replay-k", default="0",
        help="ACTORQ_DEVICE_REPLAY_K arms, e.g. 0,8 (needs a captured --update-path)",
    )  # fmt: skip
    p.add_argument("--update-path", default="auto", help="ACTORQ_UPDATE_PATH of both arms")
    p.add_argument("--replay", default="uniform", choices=("uniform", "prioritized"))
    p.add_argument(
        "--crowded-alone", type=int, default=0, metavar="N",
        help="also run N copies of the alone update at once (N = cores: none idle) and "
        "print the service against that rate too",
    )  # fmt: skip
    p.add_argument(
        "--service-env", action="append", default=None, metavar="K=V,...",
        help="a service arm's extra ACTORQ_* settings (repeat for more arms; '' = defaults)",
    )  # fmt: skip
    p.add_argument(
        "--alone-drawn", action="store_true",
        help="also run the update through the service's UpdateStep on a full replay mirror "
        "(its draws and gathers, no ingest or actors) and print the service against it",
    )  # fmt: skip
    p.add_argument("--worker", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        print(json.dumps(alone_worker(
            args.worker, args.devices, args.seconds, args.update_path, args.alone_drawn
        )))  # fmt: skip
        return
    algos = args.algos.split(",")
    env_arms = args.service_env or [""]
    for arm in env_arms:
        _env_arm(arm)  # refused before any run
    for algo in algos:
        if algo not in CASES:
            raise SystemExit(f"--algos: {algo!r} is not one of {sorted(CASES)}")
    print(f"# learner service vs update alone; {_cpu_line()}")
    print(
        f"# {args.actors} actor(s), samples per insert {args.samples_per_insert:g}, "
        f"{args.replay} replay"
    )
    print("| algo | device | path | ingest | ring k | service env | alone upd/s | service upd/s "
          "| service/alone | env steps/s | learner wait | learner sample | learner update "
          "| update ms service/alone | learner CPU/wall | learner CPU ms/update |"
          + (" crowded alone upd/s | service/crowded |" if args.crowded_alone else "")
          + (" drawn alone upd/s | service/drawn |" if args.alone_drawn else ""))  # fmt: skip
    print("|---|---|---|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
          + ("---:|---:|" if args.crowded_alone else "")
          + ("---:|---:|" if args.alone_drawn else ""))  # fmt: skip
    ratios, drawn_ratios = [], []
    with tempfile.TemporaryDirectory(prefix="actorq-lsvc-") as tmp:
        for rnd in range(args.rounds):
            for algo in algos:
                for device in args.devices.split(","):
                    alone = _alone(algo, device, args.seconds, args.update_path)
                    crowded = (
                        _alone(algo, device, args.seconds, args.update_path, args.crowded_alone)
                        if args.crowded_alone
                        else None
                    )
                    drawn = (
                        _alone(algo, device, args.seconds, args.update_path, drawn=True)
                        if args.alone_drawn
                        else None
                    )
                    arms = [
                        (ingest, k, extra)
                        for ingest in args.ingest.split(",")
                        for k in args.device_replay_k.split(",")
                        for extra in env_arms
                    ]
                    for index, (ingest, k, extra) in enumerate(arms):
                        run_dir = Path(tmp) / f"{algo}-{device}-{rnd}-arm{index}"
                        svc = _service(algo, device, args, run_dir, ingest, k, extra)
                        ratio = svc["updates_per_s"] / alone["updates_per_s"]
                        ratios.append(ratio)
                        learner_cpu = svc["cpu"].get("learner", 0.0)
                        cpu = learner_cpu / max(svc["wall"], 1e-9)
                        per_update = 1e3 * learner_cpu / max(svc["updates"], 1)
                        print(
                            f"| {algo} | {device} | {svc['path']} | {ingest} | {k} "
                            f"| {extra or 'defaults'} "
                            f"| {alone['updates_per_s']:,.0f} "
                            f"| {svc['updates_per_s']:,.0f} | {ratio:.2f} "
                            f"| {svc['env_steps_per_s']:,.0f} | {svc['wait']:.2f} "
                            f"| {svc['sample']:.2f} | {svc['update']:.2f} "
                            f"| {svc['update_ms']:.3f} / {1e3 / alone['updates_per_s']:.3f} "
                            f"| {cpu:.2f} | {per_update:.3f} |"
                            + _crowded_cells(crowded, svc["updates_per_s"])
                            + _crowded_cells(drawn, svc["updates_per_s"]),
                            flush=True,
                        )
                        if drawn is not None:
                            drawn_ratios.append(svc["updates_per_s"] / drawn["updates_per_s"])
    # Rounds differ more than arms on a shared machine (the alone rate alone moved 40%
    # between rounds on 2 cores, BENCHMARKS 20g): the median says more than one round.
    if drawn_ratios:
        print(f"service/drawn median {statistics.median(drawn_ratios):.2f} of "
              f"{len(drawn_ratios)} run(s)")  # fmt: skip
    print(f"service/alone median {statistics.median(ratios):.2f} of {len(ratios)} run(s)")
    print(f"service/alone min {min(ratios):.2f}")


if __name__ == "__main__":
    main()
