"""The run folder's summary at the end of `actorq run`: summary.json, episodes, plots."""

from __future__ import annotations

from pathlib import Path

from actorq.config import RunSettings
from actorq.launch.final import FinalRecords
from actorq.launch.monitor import RunMonitor
from actorq.launch.outputs import (
    Summary,
    sparse_summary,
    write_episodes,
    write_plots,
    write_summary,
)
from actorq.launch.progress import ProgressView
from actorq.models import MLPSpec


def _solved(settings: RunSettings, monitor: RunMonitor) -> bool:
    recent = monitor.eval_recent
    return (
        settings.target_return is not None
        and len(recent) == recent.maxlen
        and sum(recent) / len(recent) >= settings.target_return
    )


def _write_outputs(
    settings: RunSettings,
    spec: MLPSpec,
    run_dir: Path,
    monitor: RunMonitor,
    reason: str,
    view: ProgressView,
    cpu: dict[str, float | None],
    restarts: dict[str, int],
    records: FinalRecords,
    energy: dict,
    learner_info: dict[str, str],
) -> None:
    last = monitor.samples[-1] if monitor.samples else None  # as of the stop decision
    checkpoint = run_dir / "checkpoints" / "checkpoint.pt"
    summary = Summary(
        env=settings.env,
        algo=settings.algo,
        precision=settings.precision,
        actors=settings.actors,
        learners=settings.learners,
        replay=settings.replay,
        envs_per_actor=settings.envs_per_actor,
        env_steps=last.env_steps if last else 0,
        learner_updates=_final(records.learner_updates, last.learner_updates if last else 0),
        wall_seconds=last.wall_seconds if last else 0.0,
        final_mean_return=last.eval_mean_return if last else None,
        train_mean_return=last.train_mean_return if last else None,
        target_return=settings.target_return,
        solved=_solved(settings, monitor),
        stop_reason=reason,
        policy_versions=_final(records.policy_version, last.policy_version if last else 0),
        blob_bytes=last.blob_bytes if last else 0,
        fp32_equivalent_bytes=spec.fp32_bytes(),
        dense_fp32_bytes=last.dense_fp32_bytes if last else 0,
        delta_bytes_median=last.delta_bytes_median if last else 0.0,
        delta_bytes_p10=last.delta_bytes_p10 if last else 0.0,
        delta_bytes_p90=last.delta_bytes_p90 if last else 0.0,
        broadcast_bytes_total=last.broadcast_bytes_total if last else 0,
        bytes_saved_total=last.bytes_saved_total if last else 0,
        eval_episodes=last.eval_episodes if last else 0,
        train_episodes=last.train_episodes if last else 0,
        policy_rejections=last.policy_rejections if last else 0,
        learner_wait_fraction=last.learner_wait_fraction if last else 0.0,
        learner_sample_fraction=last.learner_sample_fraction if last else 0.0,
        learner_update_fraction=last.learner_update_fraction if last else 0.0,
        seed=settings.seed,
        hidden=list(settings.hidden),
        checkpoint=str(checkpoint) if checkpoint.exists() else None,
        cpu_seconds={k: round(v, 2) for k, v in cpu.items() if v is not None},
        restarts=restarts,
        transitions_inserted=records.transitions_inserted,
        final_records=records.as_dict(),
        actor_breakdown=last.actor_breakdown if last else {},
        publish_breakdown=last.publish_breakdown if last else {},
        energy=energy,
        guard=last.guard if last else {},
        behaviour={k: v for k, v in last.extra.items() if k.startswith("behaviour_")}
        if last
        else {},
        **sparse_summary(run_dir, monitor),
        **learner_info,  # learner_device, _update_path, _dtype, _device_timings
    )
    write_summary(run_dir, summary)
    write_episodes(run_dir, monitor)
    write_plots(
        run_dir,
        monitor,
        f"{settings.env} {settings.algo.upper()}, {settings.precision} actors",
        settings.target_return,
    )
    view.final(summary, run_dir)


def _final(value: int | None, fallback: int) -> int:
    return fallback if value is None else value
