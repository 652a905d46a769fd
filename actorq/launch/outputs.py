"""The run folder: config.json, metrics.jsonl, episodes.csv, summary.json, plots."""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from actorq.extras import require
from actorq.launch.monitor import ProgressSample, RunMonitor


@dataclass
class Summary:
    """summary.json: what scripts read after a run."""

    env: str
    algo: str
    precision: str
    actors: int
    learners: int
    replay: str
    envs_per_actor: int
    env_steps: int
    learner_updates: int
    wall_seconds: float
    final_mean_return: float | None  # evaluator, last 100 episodes
    train_mean_return: float | None  # actors, last 100 episodes
    target_return: float | None
    solved: bool
    stop_reason: str
    policy_versions: int
    blob_bytes: int
    fp32_equivalent_bytes: int
    dense_fp32_bytes: int  # the newest version as a dense fp32 blob (baseline of ratios)
    delta_bytes_median: float  # median stored delta between consecutive versions (0: none)
    delta_bytes_p10: float  # 10th and 90th percentile of the same (nearest rank)
    delta_bytes_p90: float
    broadcast_bytes_total: int
    bytes_saved_total: int
    eval_episodes: int
    train_episodes: int
    policy_rejections: int
    learner_wait_fraction: float  # waiting for data (rate limiter, warm-up)
    learner_sample_fraction: float  # choosing rows and copying them out of the replay
    learner_update_fraction: float  # in the algorithm's update calls (the rest: bookkeeping)
    seed: int
    hidden: list[int]
    checkpoint: str | None
    cpu_seconds: dict[str, float]  # per service, up to its exit (incl. embedded "redis")
    restarts: dict[str, int]  # per service (learners count as one group), incl. "redis"
    # Read after the learner and quantizer stopped (actorq.launch.final): `policy_versions`
    # and `learner_updates` above come from here, not from the last progress poll.
    transitions_inserted: int | None = None  # acknowledged by Redis
    final_records: dict[str, Any] = field(default_factory=dict)
    # Seconds per actor step by phase (+ measured step time and coverage), and per
    # published version by phase; see actorq.breakdown.
    actor_breakdown: dict[str, Any] = field(default_factory=dict)
    publish_breakdown: dict[str, Any] = field(default_factory=dict)
    # Joules and grams CO2e per service and in total; `method` says "rapl" (measured) or
    # "estimate" (CPU seconds x watts per core); see actorq.energy.
    energy: dict[str, Any] = field(default_factory=dict)
    # The quantizer's guard: threshold, newest and largest divergence as broadcast and
    # before fallbacks, versions and layers that fell back (actorq.guard).
    guard: dict[str, Any] = field(default_factory=dict)
    # Off-policy learners: behaviour vs learner gap on sampled rows (recent average), rows
    # measured / not, n-step importance weights when corrected (actorq.learner.behaviour).
    behaviour: dict[str, float] = field(default_factory=dict)
    # Sparse training (actorq.sparse; continuous algorithms, dense runs too): share of zero
    # weights per network and in total, training FLOPs as trained and dense-equivalent,
    # FLOPs of one action of the broadcast policy; None for DQN.
    sparsity: dict[str, float] | None = None
    train_flops: float | None = None
    dense_train_flops: float | None = None
    inference_flops: float | None = None
    dense_inference_flops: float | None = None
    topology_updates: int | None = None
    replay_capacity: int | None = None
    # What the learner trained with (actorq.learner.update_path; None: not reported):
    # cpu / cuda / cuda:N, numpy-flat / torch-eager / cuda-graph / compiled, e.g. float32.
    learner_device: str | None = None
    learner_update_path: str | None = None
    learner_dtype: str | None = None
    # ms per update of each "device/path" the learner measured at start-up (None: not
    # measured: one candidate, parallel learners, or an older learner).
    learner_device_timings: dict[str, float] | None = None
    # Device-resident replay (ACTORQ_DEVICE_REPLAY_K): "k=4, N rows on cuda:0", why it is
    # off after a failed allocation; None when not asked for.
    learner_device_replay: str | None = None
    # "flushed" or "kept": subnormal floats in the learner (ACTORQ_FLUSH_DENORMALS).
    learner_denormals: str | None = None
    # torch's thread count on the learner's path: ACTORQ_TORCH_THREADS, or 1 on numpy-flat.
    learner_torch_threads: int | None = None


def _clean(value: Any) -> Any:
    return None if isinstance(value, float) and math.isnan(value) else value


def write_json(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps({k: _clean(v) for k, v in data.items()}, indent=2) + "\n")
    tmp.replace(path)


def append_metrics(path: Path, sample: ProgressSample) -> None:
    with path.open("a") as f:
        f.write(json.dumps(sample.row()) + "\n")


def write_summary(run_dir: Path, summary: Summary) -> Path:
    path = run_dir / "summary.json"
    write_json(path, asdict(summary))
    return path


def write_episodes(run_dir: Path, monitor: RunMonitor) -> Path:
    path = run_dir / "episodes.csv"
    with path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(
            [
                "kind",
                "instance",
                "return",
                "length",
                "policy_version",
                "total_env_steps",
                "wall_seconds",
            ]
        )
        for ep, env_steps, wall in monitor.episodes:
            writer.writerow(
                [
                    ep.kind,
                    ep.instance,
                    ep.episode_return,
                    ep.length,
                    ep.policy_version,
                    env_steps,
                    round(wall, 3),
                ]
            )
    return path


def write_plots(run_dir: Path, monitor: RunMonitor, title: str, target: float | None) -> list[Path]:
    """return_vs_env_steps.png and return_vs_wall_time.png (evaluator and actors)."""
    matplotlib = require("matplotlib", "plots", "plots")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    paths = []
    for x_index, x_label, name in (
        (1, "env steps (all actors)", "return_vs_env_steps.png"),
        (2, "wall time (s)", "return_vs_wall_time.png"),
    ):
        fig, ax = plt.subplots(figsize=(7, 4), dpi=110)
        for kind, label, style in (
            ("train", "actors (epsilon-greedy)", "."),
            ("eval", "evaluator (greedy)", "o"),
        ):
            points = [
                (row[x_index], row[0].episode_return)
                for row in monitor.episodes
                if row[0].kind == kind
            ]
            if points:
                xs, ys = zip(*points, strict=False)
                ax.plot(
                    xs, ys, style, markersize=2 if kind == "train" else 3, alpha=0.5, label=label
                )
                ax.plot(
                    xs,
                    _running_mean(list(ys), 100),
                    "-",
                    linewidth=1.5,
                    label=f"{label}, mean of 100",
                )
        if target is not None:
            ax.axhline(
                target, color="gray", linestyle="--", linewidth=1, label=f"target {target:g}"
            )
        ax.set_xlabel(x_label)
        ax.set_ylabel("episode return")
        ax.set_title(title)
        ax.legend(fontsize=7, loc="upper left")
        fig.tight_layout()
        path = run_dir / name
        fig.savefig(path)
        plt.close(fig)
        paths.append(path)
    return paths


def _running_mean(values: list[float], window: int) -> list[float]:
    out, total = [], 0.0
    for i, v in enumerate(values):
        total += v
        if i >= window:
            total -= values[i - window]
        out.append(total / min(i + 1, window))
    return out


def sparse_summary(run_dir: Path, monitor: RunMonitor) -> dict:
    """Sparsity and FLOPs: the learner's final checkpoint facts, else its last status."""
    facts: Mapping[str, float] = {}
    meta = run_dir / "checkpoints" / "checkpoint.json"
    if meta.exists():
        facts = json.loads(meta.read_text()).get("rlx2", {})
    if not facts and monitor.learner.last is not None:
        facts = dict(monitor.learner.last.counters)
    if "train_flops" not in facts:
        return {}
    sparsity = {
        k.removeprefix("sparsity_"): v for k, v in facts.items() if k.startswith("sparsity_")
    }
    return {
        "sparsity": {k: round(v, 6) for k, v in sparsity.items()},
        "train_flops": facts["train_flops"],
        "dense_train_flops": facts["dense_train_flops"],
        "inference_flops": facts["inference_flops"],
        "dense_inference_flops": facts["dense_inference_flops"],
        "topology_updates": int(facts["topology_updates"]),
        "replay_capacity": int(facts["replay_capacity"]),
    }
