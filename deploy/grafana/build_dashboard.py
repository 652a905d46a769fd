#!/usr/bin/env python3
"""Build the actorq Grafana dashboard from the panel list below (stdlib only).

    python deploy/grafana/build_dashboard.py            # write dashboards/actorq.json
    python deploy/grafana/build_dashboard.py --check    # exit 1 if the committed JSON is stale
                                                        # or a defined metric is not charted
    python deploy/grafana/build_dashboard.py --rules-out F  # every query as a rule file,
                                                            # so `promtool check rules F` parses it

The dashboard is reviewed as this file; the JSON is generated and committed so Grafana can
provision it from disk. Metric names: actorq/metrics.py, actorq/onpolicy/metrics.py and
actorq/energy.py; `defined_metrics()` finds every actorq_* metric under actorq/ and
services/, and each one is charted by some panel or listed in NOT_CHARTED with the reason.
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
DASHBOARD_PATH = HERE / "dashboards" / "actorq.json"
DATASOURCE = {"type": "prometheus", "uid": "prometheus"}  # provisioning/datasources sets it
# Actor series carry their own instance label (actor-<n> or evaluator; scrape configs use
# honor_labels). Training panels leave the greedy evaluator out.
ACTORS = 'instance!="evaluator"'
WINDOW = "1m"  # rate window: >= 4 scrape intervals at the 5 s (compose) to 15 s (k8s) scrape


@dataclass(frozen=True)
class Query:
    expr: str
    legend: str


@dataclass(frozen=True)
class Panel:
    title: str
    queries: list[Query]
    unit: str = "short"
    kind: str = "timeseries"  # or "stat"
    description: str = ""
    width: int = 12
    extra: dict = field(default_factory=dict)


def _q(expr: str, legend: str = "") -> Query:
    return Query(expr.replace("$w", WINDOW).replace("$a", ACTORS), legend)


def _quantiles(
    metric: str, legend: str, by: str = "", selector: str = "", qs: Iterable[float] = (0.5, 0.99)
) -> list[Query]:
    """histogram_quantile over a histogram's buckets, one query per quantile; `by` adds
    labels to keep beside `le`, `legend` follows "p50 " etc."""
    keep = ", ".join(["le", *([by] if by else [])])
    match = f"{{{selector}}}" if selector else ""
    return [
        _q(
            f"histogram_quantile({q}, sum by ({keep}) (rate({metric}_bucket{match}[$w])))",
            f"p{round(q * 100)} {legend}".rstrip(),
        )
        for q in qs
    ]


def _guard(measure: str, with_limit: bool = False) -> list[Query]:
    """One guard measure at each stage: before (plain quantized), broadcast (after
    fallback layers), lag (the previous fp32 version against this one)."""
    out = [
        _q(
            f'max by (stage) (actorq_quantizer_guard_divergence_ratio{{measure="{measure}"}})',
            f"{measure} {{{{stage}}}}",
        )
    ]
    if with_limit:
        out.append(_q("max(actorq_quantizer_guard_threshold_ratio)", "limit"))
    return out


GUARD_STAGES = (
    "Stages: before = the plain quantized policy; broadcast = what actors get, after "
    "fallback layers; lag = the previous version's fp32 policy against this one (what "
    "actors already live with). "
)
GUARD_LIMIT = (
    "The limit is max(fixed threshold, lag_scale x lag) and applies to the guarded "
    "measure (regret by default, or disagreement, for Q-networks; action_diff for tanh "
    "policies). "
)
EMPTY_ON_DQN = "Empty on DQN runs (on-policy learners only)."

PANELS: list[tuple[str, list[Panel]]] = [
    (
        "Overview",
        [
            Panel(
                "Env steps/s",
                [_q("sum(rate(actorq_actor_env_steps_total{$a}[$w]))", "total")],
                "short",
                "stat",
                "All actors together.",
                4,
            ),
            Panel(
                "Learner updates/s",
                [_q("sum(rate(actorq_learner_updates_total[$w]))", "")],
                "short",
                "stat",
                "Gradient updates per second.",
                4,
            ),
            Panel(
                "Learner device",
                [
                    _q(
                        "max by (device, update_path, dtype) (actorq_learner_info)",
                        "{{device}} {{update_path}} {{dtype}}",
                    )
                ],
                "none",
                "stat",
                "Where the learner trains (cpu, cuda, cuda:N), how its updates run (numpy-flat, "
                "torch-eager, cuda-graph, compiled) and its weights' dtype (docs/gpu-learner.md).",
                4,
            ),
            Panel(
                "Policy version",
                [_q("max(actorq_learner_policy_version)", "learner")],
                "none",
                "stat",
                "Newest version the learner published.",
                4,
            ),
            Panel(
                "Actors up",
                [_q('count(up{job="actor"} == 1)', "")],
                "none",
                "stat",
                "Actor replicas answering scrapes.",
                4,
            ),
            Panel(
                "Bytes saved",
                [_q("sum(actorq_quantizer_broadcast_bytes_saved_total)", "")],
                "bytes",
                "stat",
                "fp32-equivalent bytes minus bytes actually broadcast, since the quantizer "
                "started.",
                4,
            ),
            Panel(
                "Blob / fp32 size",
                [
                    _q(
                        "max(actorq_quantizer_blob_bytes) / "
                        "max(actorq_quantizer_fp32_equivalent_bytes)",
                        "",
                    )
                ],
                "percentunit",
                "stat",
                "Size of the newest blob relative to fp32 weights.",
                4,
            ),
        ],
    ),
    (
        "Actors",
        [
            Panel(
                "Env steps/s per actor",
                [
                    _q(
                        "sum by (instance) (rate(actorq_actor_env_steps_total{$a}[$w]))",
                        "{{instance}}",
                    )
                ],
                "short",
            ),
            Panel(
                "Episode return (mean of last 100)",
                [
                    _q(
                        'max(actorq_actor_episode_return_mean{instance="evaluator"})',
                        "evaluator (greedy)",
                    ),
                    _q(
                        'avg(actorq_actor_episode_return_mean{instance!="evaluator"})',
                        "actors (exploring)",
                    ),
                ],
                "short",
            ),
            Panel(
                "Inference latency by precision",
                _quantiles(
                    "actorq_actor_inference_seconds",
                    "{{precision}}",
                    "precision",
                    qs=(0.5, 0.9, 0.99),
                ),
                "s",
                description="Seconds per batched forward over all envs of an actor.",
            ),
            Panel(
                "Actor time rate-limited",
                [
                    _q(
                        "sum by (instance) (rate(actorq_actor_rate_limited_seconds_total[$w]))",
                        "{{instance}}",
                    )
                ],
                "percentunit",
                description="Fraction of time actors wait for the samples-per-insert ratio.",
            ),
            Panel(
                "Episodes finished/s",
                [
                    _q("sum(rate(actorq_actor_episodes_total{$a}[$w]))", "actors"),
                    _q(
                        'sum(rate(actorq_actor_episodes_total{instance="evaluator"}[$w]))',
                        "evaluator",
                    ),
                ],
                "short",
            ),
            Panel(
                "Connection errors (retried)",
                [
                    _q(
                        "sum by (instance, peer) "
                        "(increase(actorq_actor_connection_errors_total[5m]))",
                        "{{instance}} -> {{peer}}",
                    )
                ],
                "none",
                description="Failed calls to Redis or the quantizer over the last 5 minutes "
                "(retried with backoff); empty or 0 when healthy.",
            ),
        ],
    ),
    (
        "Policy",
        [
            Panel(
                "Policy version",
                [
                    _q("max(actorq_learner_policy_version)", "learner published"),
                    _q("max(actorq_quantizer_policy_version)", "quantizer stored"),
                    _q("min(actorq_actor_policy_version)", "oldest in use by an actor"),
                ],
                "none",
            ),
            Panel(
                "Policy lag (versions)",
                [
                    _q("max by (instance) (actorq_actor_policy_lag_versions)", "{{instance}}"),
                    _q("max(actorq_learner_sample_policy_lag_versions)", "sampled batch"),
                ],
                "none",
                description="Announced minus in-use version per actor; learner batch staleness.",
            ),
            Panel(
                "Broadcast bytes/s by precision",
                [
                    _q(
                        "sum by (precision) (rate(actorq_quantizer_broadcast_bytes_total[$w]))",
                        "sent {{precision}}",
                    ),
                    _q(
                        "sum by (precision) "
                        "(rate(actorq_quantizer_broadcast_fp32_equivalent_bytes_total[$w]))",
                        "as fp32 {{precision}}",
                    ),
                ],
                "Bps",
            ),
            Panel(
                "Bytes saved (cumulative)",
                [
                    _q(
                        "sum by (precision) (actorq_quantizer_broadcast_bytes_saved_total)",
                        "{{precision}}",
                    )
                ],
                "bytes",
            ),
            Panel(
                "Quantization error",
                [
                    _q(
                        "max by (precision) (actorq_quantizer_quantization_error_ratio)",
                        "{{precision}}",
                    )
                ],
                "percentunit",
                description="max ||W - deq(q(W))|| / ||W|| over weight matrices.",
            ),
            Panel(
                "Rejections",
                [
                    _q(
                        "sum by (reason) (increase(actorq_actor_policy_rejections_total[5m]))",
                        "actor refused blob: {{reason}}",
                    ),
                    _q(
                        "sum by (reason) (increase(actorq_quantizer_publish_rejections_total[5m]))",
                        "quantizer refused publish: {{reason}}",
                    ),
                    _q(
                        "sum(increase(actorq_learner_replay_rejected_total[5m]))",
                        "learner skipped replay entries",
                    ),
                ],
                "none",
                description="Counts over the last 5 minutes; all should stay 0.",
            ),
            Panel(
                "Versions quantized/s by precision",
                [
                    _q(
                        "sum by (precision) (rate(actorq_quantizer_publishes_total[$w]))",
                        "{{precision}}",
                    )
                ],
                "short",
                description="Policy versions the quantizer quantized and stored.",
            ),
            Panel(
                "Open WatchPolicy streams",
                [_q("max(actorq_quantizer_watchers)", "watchers")],
                "none",
                description="Actors and evaluators following new versions; one per follower.",
            ),
        ],
    ),
    (
        "Broadcasts: full, sparse, delta",
        [
            Panel(
                "Broadcast bytes/s by kind vs dense fp32",
                [
                    _q(
                        "sum by (kind) (rate(actorq_quantizer_broadcast_kind_bytes_total[$w]))",
                        "sent {{kind}}",
                    ),
                    _q(
                        "sum by (kind) "
                        "(rate(actorq_quantizer_broadcast_dense_fp32_bytes_total[$w]))",
                        "as dense fp32 {{kind}}",
                    ),
                ],
                "Bps",
                description="full: dense int8 blob; sparse: blob with sparse layers; "
                "delta: change from the version the actor held.",
            ),
            Panel(
                "Bytes sent / dense fp32 by kind",
                [
                    _q(
                        "sum by (kind) (rate(actorq_quantizer_broadcast_kind_bytes_total[$w])) "
                        "/ sum by (kind) "
                        "(rate(actorq_quantizer_broadcast_dense_fp32_bytes_total[$w]))",
                        "{{kind}}",
                    ),
                    _q(
                        "sum(rate(actorq_quantizer_broadcast_kind_bytes_total[$w])) "
                        "/ sum(rate(actorq_quantizer_broadcast_dense_fp32_bytes_total[$w]))",
                        "all kinds",
                    ),
                ],
                "percentunit",
                description="What the broadcasts cost relative to sending every version as "
                "a dense fp32 blob.",
            ),
            Panel(
                "Broadcasts/s by kind",
                [
                    _q(
                        "sum by (kind) (rate(actorq_quantizer_broadcasts_total[$w]))",
                        "{{kind}}",
                    )
                ],
                "short",
                description="Policy versions sent to actors (one per actor and version).",
            ),
            Panel(
                "Policy bytes received/s by kind (actors)",
                [
                    _q(
                        "sum by (kind) (rate(actorq_actor_policy_bytes_received_total{$a}[$w]))",
                        "{{kind}}",
                    )
                ],
                "Bps",
                description="What the actors fetched, as they count it (evaluator left out).",
            ),
            Panel(
                "Delta size / dense fp32 blob",
                [
                    _q(
                        "histogram_quantile(0.5, sum by (le) "
                        "(rate(actorq_quantizer_delta_ratio_bucket[5m])))",
                        "median",
                    ),
                    _q(
                        "histogram_quantile(0.9, sum by (le) "
                        "(rate(actorq_quantizer_delta_ratio_bucket[5m])))",
                        "p90",
                    ),
                    _q(
                        "max(actorq_quantizer_blob_bytes) / "
                        "max(actorq_quantizer_dense_fp32_blob_bytes)",
                        "full blob",
                    ),
                ],
                "percentunit",
                description="Each stored delta against the same version as a dense fp32 blob.",
            ),
            Panel(
                "Newest version sizes",
                [
                    _q("max(actorq_quantizer_dense_fp32_blob_bytes)", "dense fp32 blob"),
                    _q("max(actorq_quantizer_fp32_equivalent_bytes)", "fp32 weights"),
                    _q("max by (precision) (actorq_quantizer_blob_bytes)", "blob {{precision}}"),
                    _q("max(actorq_quantizer_delta_bytes)", "delta from previous (0: none)"),
                ],
                "bytes",
            ),
            Panel(
                "Bytes per GetPolicy call",
                _quantiles(
                    "actorq_quantizer_fanout_bytes", "{{precision}}", "precision", qs=(0.5, 0.9)
                ),
                "bytes",
                description="Blob bytes served per call (one actor fetching one version).",
            ),
            Panel(
                "Delta fallbacks",
                [
                    _q(
                        "sum by (reason) (increase(actorq_actor_policy_delta_fallbacks_total[5m]))",
                        "{{reason}}",
                    )
                ],
                "none",
                description="Deltas an actor could not apply or verify (it fetched the full "
                "blob); should stay 0.",
            ),
        ],
    ),
    (
        "Learner and replay",
        [
            Panel(
                "Learner updates/s",
                [_q("sum(rate(actorq_learner_updates_total[$w]))", "updates/s")],
                "short",
            ),
            Panel(
                "Learner loss",
                [
                    _q("max(actorq_learner_loss)", "TD loss"),
                    _q("max(actorq_learner_q_mean)", "mean Q"),
                ],
                "short",
            ),
            Panel("Replay size", [_q("max(actorq_learner_replay_size)", "transitions")], "short"),
            Panel(
                "Replay insert and sample rates",
                [
                    _q("sum(rate(actorq_actor_replay_inserts_total[$w]))", "actors inserted/s"),
                    _q("sum(rate(actorq_learner_replay_inserted_total[$w]))", "learner ingested/s"),
                    _q("sum(rate(actorq_learner_replay_sampled_total[$w]))", "learner sampled/s"),
                ],
                "short",
            ),
            Panel(
                "Replay ratio (samples per insert)",
                [
                    _q("max(actorq_learner_replay_ratio)", "target"),
                    _q(
                        "sum(rate(actorq_learner_replay_sampled_total[$w])) "
                        "/ sum(rate(actorq_learner_replay_inserted_total[$w]))",
                        "measured",
                    ),
                ],
                "short",
                description="The samples-per-insert ratio the learner trains at now (lower "
                "once settled) and the one it achieved over the window.",
            ),
            Panel(
                "Versions held back by the publish gate",
                [_q("sum(increase(actorq_learner_gated_versions_total[$w]))", "held back")],
                "short",
                description="Once settled with ACTORQ_SETTLE_VALIDATION_EPISODES > 0, "
                "versions whose greedy validation fell below the bar; actors keep the last "
                "one that passed. 0 otherwise.",
            ),
            Panel(
                "Learner waiting for replay",
                [_q("sum(rate(actorq_learner_replay_wait_seconds_total[$w]))", "")],
                "percentunit",
                description="Fraction of time the learner waited for data.",
            ),
            Panel("Scrape targets up", [_q("sum by (job) (up)", "{{job}}")], "none"),
            Panel(
                "Checkpoints written (last hour)",
                [_q("sum(increase(actorq_learner_checkpoints_total[1h]))", "")],
                "none",
                "stat",
                width=6,
            ),
        ],
    ),
    (
        "On-policy learning (PPO, APPO, A2C)",
        [
            Panel(
                "Importance ratio pi_learner / mu_behaviour",
                [
                    _q("max(actorq_learner_importance_ratio_mean)", "mean"),
                    _q("max(actorq_learner_importance_ratio_max)", "max"),
                ],
                "short",
                description="Over the last update's batch, before its first step: 1 when the "
                "int8, lagged actors act as the learner would. " + EMPTY_ON_DQN,
                width=8,
            ),
            Panel(
                "Mean |ratio - 1|",
                [_q("max(actorq_learner_importance_ratio_abs_dev)", "mean |r - 1|")],
                "percentunit",
                description="How far the behaviour policy (int8, lagged) was from the "
                "learner's on the last batch. " + EMPTY_ON_DQN,
                width=8,
            ),
            Panel(
                "Clipped fraction and effective sample size",
                [
                    _q("max(actorq_learner_importance_clipped_fraction)", "clipped / truncated"),
                    _q("max(actorq_learner_importance_ess_fraction)", "ESS / batch"),
                ],
                "percentunit",
                description="Share of the batch whose ratio PPO clipped or V-trace truncated "
                "(rho-bar): the stale or off-policy part that was down-weighted; normalised "
                "ESS (sum w)^2 / (n sum w^2). " + EMPTY_ON_DQN,
                width=8,
            ),
            Panel(
                "Policy lag of trained segments (versions)",
                [_q("max(actorq_learner_segment_policy_lag_versions)", "mean lag")],
                "none",
                description="Learner version minus segment version, mean over the last "
                "batch. " + EMPTY_ON_DQN,
                width=8,
            ),
            Panel(
                "Segments trained and dropped as stale /s",
                [
                    _q("sum(rate(actorq_learner_segments_trained_total[$w]))", "trained"),
                    _q("sum(rate(actorq_learner_segments_dropped_total[$w]))", "dropped (stale)"),
                ],
                "short",
                description="Dropped: policy lag above max_policy_lag. " + EMPTY_ON_DQN,
                width=8,
            ),
            Panel(
                "Stale segments dropped (share)",
                [
                    _q(
                        "sum(rate(actorq_learner_segments_dropped_total[$w])) / "
                        "(sum(rate(actorq_learner_segments_dropped_total[$w])) "
                        "+ sum(rate(actorq_learner_segments_trained_total[$w])))",
                        "dropped / received",
                    )
                ],
                "percentunit",
                description=EMPTY_ON_DQN,
                width=8,
            ),
            Panel(
                "Policy entropy",
                [_q("max(actorq_learner_policy_entropy)", "entropy (nats)")],
                "short",
                description="Mean policy entropy in the last update. " + EMPTY_ON_DQN,
                width=8,
            ),
        ],
    ),
    (
        "Behaviour vs learner policy (off-policy replay)",
        [
            Panel(
                "Behaviour vs learner gap",
                [
                    _q("max(actorq_learner_behaviour_gap)", "all sampled rows"),
                    _q("max(actorq_learner_behaviour_fresh_gap)", "rows of the newest 2 versions"),
                ],
                "percentunit",
                description="On sampled replay rows, before the update: mean |mu_behaviour - "
                "mu_learner| / action range (continuous), or the share of rows whose "
                "behaviour greedy action differs from the learner's (DQN). All rows: mostly "
                "replay age; rows of the newest two versions: quantization plus at most one "
                "version of lag.",
                width=8,
            ),
            Panel(
                "Log-ratio log pi_learner - log mu_behaviour and min(1, ratio)",
                [
                    _q('max(actorq_learner_behaviour_log_ratio{stat="mean"})', "mean"),
                    _q('max(actorq_learner_behaviour_log_ratio{stat="abs_mean"})', "mean |.|"),
                    _q("max(actorq_learner_behaviour_rho_mean)", "mean min(1, ratio)"),
                ],
                "short",
                description="Of the taken actions, the learner explored as the actors were "
                "(same sigma or epsilon): 0 and 1 when the actors act as the learner would.",
                width=8,
            ),
            Panel(
                "Sampled rows with / without behaviour fields /s",
                [
                    _q(
                        "sum by (measured) (rate(actorq_learner_behaviour_rows_total[$w]))",
                        "measured={{measured}}",
                    )
                ],
                "short",
                description="measured=false: rows from replay entries written without the "
                "behaviour fields (older actors); the gap ignores them.",
                width=8,
            ),
            Panel(
                "n-step importance weights (ACTORQ_<ALGO>_IS_CORRECTION)",
                [
                    _q("max(actorq_learner_nstep_is_weight_mean)", "mean weight"),
                    _q("max(actorq_learner_nstep_is_truncated_fraction)", "truncated steps"),
                ],
                "short",
                description="Mean prod_k min(rho_bar, pi/mu) over the intermediate steps of "
                "learner-side n-step rows, and the share of steps cut at rho_bar. 0 "
                "unless the correction is on.",
                width=8,
            ),
        ],
    ),
    (
        "Quantizer guard (divergence from fp32)",
        [
            Panel(
                "Guard: regret (Q-networks)",
                _guard("regret", with_limit=True),
                "percentunit",
                description="Share of return the quantized greedy actions lose under the "
                "fp32 Q-values. " + GUARD_STAGES + GUARD_LIMIT,
                width=8,
            ),
            Panel(
                "Guard: greedy-action disagreement and agreement (Q-networks)",
                [*_guard("disagreement", with_limit=True), *_guard("agreement")],
                "percentunit",
                description="Share of probe observations whose argmax differs (agrees). "
                + GUARD_STAGES
                + GUARD_LIMIT,
                width=8,
            ),
            Panel(
                "Guard: relative Q error (Q-networks)",
                _guard("q_error"),
                "percentunit",
                description="mean |q_quantized - q_fp32| / mean |q_fp32|. " + GUARD_STAGES,
                width=8,
            ),
            Panel(
                "Guard: action difference (tanh policies)",
                _guard("action_diff", with_limit=True),
                "percentunit",
                description="mean |a_q - a_fp32| / action range. " + GUARD_STAGES + GUARD_LIMIT,
                width=8,
            ),
            Panel(
                "Guard: exploration KL (tanh policies)",
                _guard("kl"),
                "short",
                description="KL (nats) between the actors' Gaussian exploration around the "
                "two actions. " + GUARD_STAGES,
                width=8,
            ),
            Panel(
                "Guard: versions with fallback layers",
                [
                    _q(
                        "sum(increase(actorq_quantizer_guard_fallback_versions_total[5m]))",
                        "with fallback layers",
                    ),
                    _q("sum(increase(actorq_quantizer_publishes_total[5m]))", "all versions"),
                ],
                "none",
                description="Versions over the last 5 minutes whose quantized policy was past "
                "the limit and got float layers.",
                width=8,
            ),
            Panel(
                "Guard: fallback layers by layer and precision",
                [
                    _q(
                        "sum by (layer, precision) "
                        "(increase(actorq_quantizer_guard_fallback_layers_total[5m]))",
                        "{{layer}} -> {{precision}}",
                    )
                ],
                "none",
                description="Weight matrices stored as fp16/fp32 instead of the policy "
                "precision over the last 5 minutes; empty while no version needed one.",
            ),
            Panel(
                "Guard: limit applied",
                [_q("max(actorq_quantizer_guard_threshold_ratio)", "limit")],
                "percentunit",
                "stat",
                "The newest version's limit on the guarded measure (0: guard off or no "
                "version checked yet).",
                width=12,
            ),
        ],
    ),
    (
        "Runtime breakdown",
        [
            Panel(
                "Actor step time by phase (mean)",
                [
                    _q(
                        "sum by (phase) (rate(actorq_actor_step_phase_seconds_sum{$a}[$w])) "
                        "/ scalar(sum(rate(actorq_actor_loop_steps_total{$a}[$w])))",
                        "{{phase}}",
                    ),
                    _q(
                        "sum(rate(actorq_actor_loop_seconds_total{$a}[$w])) "
                        "/ sum(rate(actorq_actor_loop_steps_total{$a}[$w]))",
                        "measured step",
                    ),
                ],
                "s",
                description="Seconds per env-loop step by phase (push and rate-limit waits "
                "amortised over steps); the phases add up to the measured step.",
            ),
            Panel(
                "Actor phase latency p50 / p99",
                _quantiles("actorq_actor_step_phase_seconds", "{{phase}}", "phase", ACTORS),
                "s",
                description="Per occurrence: inference, explore, env_step, record per step; "
                "push, rate_limit_wait per push.",
            ),
            Panel(
                "Policy load and publish phases (mean)",
                [
                    _q(
                        "sum by (phase) (rate(actorq_actor_policy_phase_seconds_sum{$a}[$w])) "
                        "/ sum by (phase) (rate(actorq_actor_policy_phase_seconds_count{$a}[$w]))",
                        "actor {{phase}}",
                    ),
                    _q(
                        "sum by (phase) (rate(actorq_quantizer_publish_phase_seconds_sum[$w])) "
                        "/ sum by (phase) (rate(actorq_quantizer_publish_phase_seconds_count[$w]))",
                        "quantizer {{phase}}",
                    ),
                ],
                "s",
                description="Seconds per version: actors' pull, verify and build (policy "
                "follower thread) and the quantizer's assemble, quantize, guard, store.",
            ),
            Panel(
                "Policy follower phases p90 (actors)",
                _quantiles(
                    "actorq_actor_policy_phase_seconds", "{{phase}}", "phase", ACTORS, (0.9,)
                ),
                "s",
                description="policy_pull (GetPolicy chunks), verify_deserialize (sha256, "
                "shapes, decode), build (inference module), per loaded version.",
            ),
            Panel(
                "Quantizer publish phases p50 / p99",
                _quantiles("actorq_quantizer_publish_phase_seconds", "{{phase}}", "phase"),
                "s",
                description="assemble (receive and check the stream), quantize, guard "
                "(divergence probe, fallbacks), store (Redis), per version.",
            ),
            Panel(
                "Version pipeline latency p50 / p99",
                [
                    *_quantiles("actorq_learner_publish_seconds", "learner publish"),
                    *_quantiles("actorq_quantizer_quantize_seconds", "quantizer quantize+store"),
                    *_quantiles("actorq_actor_policy_load_seconds", "actor load", selector=ACTORS),
                ],
                "s",
                description="Per version: the learner streaming fp32 weights to the quantizer; "
                "the quantizer validating, quantizing and storing it; an actor fetching, "
                "verifying and building it.",
            ),
        ],
    ),
    (
        "Energy and CO2 (estimates)",
        [
            Panel(
                "Power (estimate)",
                [_q("sum by (job) (rate(actorq_service_energy_joules_total[$w]))", "{{job}}")],
                "watt",
                description="CPU seconds x watts per core (actorq/energy.py); an estimate.",
            ),
            Panel(
                "CO2e rate (estimate, g/h)",
                [
                    _q(
                        "sum by (job) (rate(actorq_service_co2_grams_total[$w])) * 3600",
                        "{{job}}",
                    )
                ],
                "massg",
                description="Grams CO2e per hour at the configured grid intensity.",
            ),
            Panel(
                "Energy so far (estimate)",
                [_q("sum(actorq_service_energy_joules_total)", "")],
                "joule",
                "stat",
                "Since each service started.",
                8,
            ),
            Panel(
                "CO2e so far (estimate)",
                [_q("sum(actorq_service_co2_grams_total)", "")],
                "massg",
                "stat",
                "Since each service started.",
                8,
            ),
            Panel(
                "Power model: watts per core",
                [_q("max(actorq_service_power_model_watts_per_core)", "")],
                "watt",
                "stat",
                "Per-core power the estimate assumes (ACTORQ_WATTS_PER_CORE).",
                8,
            ),
        ],
    ),
    (
        "Sparse training (RLx2)",
        [
            Panel(
                "Sparsity per layer",
                [
                    _q(
                        "max by (network, layer) (actorq_learner_sparsity_ratio)",
                        "{{network}} {{layer}}",
                    )
                ],
                "percentunit",
                description="Share of zero weights per Linear layer; empty on dense runs.",
            ),
            Panel(
                "Mask version (topology updates)",
                [_q("max by (network) (actorq_learner_mask_version)", "{{network}}")],
                "none",
                width=6,
            ),
            Panel(
                "Weights moved by topology updates/s",
                [
                    _q(
                        "sum by (network) "
                        "(rate(actorq_learner_topology_changed_weights_total[$w]))",
                        "{{network}}",
                    )
                ],
                "short",
                description="Each dropped in one place and grown in another.",
                width=6,
            ),
            Panel(
                "Training FLOPs/s: sparse vs dense",
                [_q("sum by (kind) (rate(actorq_learner_train_flops_total[$w]))", "{{kind}}")],
                "short",
                description="As trained (sparse) and the dense equivalent, RLx2's count.",
            ),
            Panel(
                "Inference FLOPs per action",
                [_q("max by (kind) (actorq_learner_policy_inference_flops)", "{{kind}}")],
                "short",
                description="One action of the broadcast policy: sparse and dense equivalent.",
            ),
            Panel(
                "Replay capacity vs size",
                [
                    _q("max(actorq_learner_replay_capacity)", "capacity"),
                    _q("max(actorq_learner_replay_size)", "size"),
                ],
                "short",
                description="RLx2's dynamic capacity: rows the replay may hold now.",
            ),
            Panel(
                "Replay rows dropped/s (dynamic capacity)",
                [_q("sum(rate(actorq_learner_replay_dropped_total[$w]))", "dropped")],
                "short",
                description="Oldest rows dropped once they were too far from the policy.",
                width=6,
            ),
            Panel(
                "TD target n and oldest data's policy distance",
                [
                    _q("max(actorq_learner_td_nstep)", "n"),
                    _q("max(actorq_learner_replay_policy_distance)", "policy distance"),
                ],
                "short",
                width=6,
            ),
            Panel(
                "Training FLOPs / dense",
                [
                    _q(
                        'sum(rate(actorq_learner_train_flops_total{kind="sparse"}[$w])) / '
                        'sum(rate(actorq_learner_train_flops_total{kind="dense"}[$w]))',
                        "",
                    )
                ],
                "percentunit",
                "stat",
                width=12,
            ),
            Panel(
                "Inference FLOPs / dense",
                [
                    _q(
                        'max(actorq_learner_policy_inference_flops{kind="sparse"}) / '
                        'max(actorq_learner_policy_inference_flops{kind="dense"})',
                        "",
                    )
                ],
                "percentunit",
                "stat",
                width=12,
            ),
        ],
    ),
]

# Metrics under actorq/ and services/ deliberately left off the dashboard, name -> why.
# tests/unit/test_dashboard.py (and `--check`) fail for any other actorq_* metric that no
# panel queries, and for an entry here that is charted after all or no longer defined.
NOT_CHARTED: dict[str, str] = {
    # (none: every metric has a panel; add "actorq_x": "reason" to leave one off)
}


def _panel_json(panel: Panel, panel_id: int, x: int, y: int) -> dict:
    height = 4 if panel.kind == "stat" else 8
    return {
        "id": panel_id,
        "type": panel.kind,
        "title": panel.title,
        "description": panel.description,
        "datasource": DATASOURCE,
        "gridPos": {"h": height, "w": panel.width, "x": x, "y": y},
        "fieldConfig": {"defaults": {"unit": panel.unit}, "overrides": []},
        "options": {"reduceOptions": {"calcs": ["lastNotNull"]}} if panel.kind == "stat" else {},
        "targets": [
            {
                "refId": chr(ord("A") + i),
                "datasource": DATASOURCE,
                "expr": q.expr,
                "legendFormat": q.legend or "__auto",
            }
            for i, q in enumerate(panel.queries)
        ],
    }


def build() -> dict:
    """The dashboard as Grafana's JSON model (rows laid out on the 24-column grid)."""
    panels: list[dict] = []
    y = 0
    next_id = 1
    for row_title, row_panels in PANELS:
        panels.append(
            {
                "id": next_id,
                "type": "row",
                "title": row_title,
                "collapsed": False,
                "gridPos": {"h": 1, "w": 24, "x": 0, "y": y},
                "panels": [],
            }
        )
        next_id += 1
        y += 1
        x = 0
        row_height = 0
        for panel in row_panels:
            if x + panel.width > 24:
                x, y = 0, y + row_height
                row_height = 0
            item = _panel_json(panel, next_id, x, y)
            panels.append(item)
            next_id += 1
            x += panel.width
            row_height = max(row_height, item["gridPos"]["h"])
        y += row_height
    return {
        "uid": "actorq-overview",
        "title": "actorq: ActorQ training",
        "description": "Generated by deploy/grafana/build_dashboard.py; edit that, not this.",
        "tags": ["actorq"],
        "timezone": "utc",
        "schemaVersion": 39,
        "version": 1,
        "editable": False,
        "refresh": "10s",
        "time": {"from": "now-30m", "to": "now"},
        "panels": panels,
        "templating": {"list": []},
        "annotations": {"list": []},
    }


def queries(dashboard: dict) -> list[tuple[str, str]]:
    """(panel title, PromQL) for every query of every panel."""
    return [(p["title"], t["expr"]) for p in dashboard["panels"] for t in p.get("targets", [])]


def render(dashboard: dict) -> str:
    return json.dumps(dashboard, indent=2, sort_keys=True) + "\n"


def rules_file(dashboard: dict) -> str:
    """Every query as a recording rule: `promtool check rules` then parses each one."""
    lines = ["groups:", "  - name: actorq-dashboard-queries", "    rules:"]
    for i, (title, expr) in enumerate(queries(dashboard)):
        lines.append(f"      - record: actorq:dashboard_query_{i}")
        lines.append(f"        expr: {json.dumps(expr)}")
        lines.append(f"        labels: {{panel: {json.dumps(title)}}}")
    return "\n".join(lines) + "\n"


# --- which metrics exist and which the panels chart -------------------------------------
_CONSTRUCTORS = {
    "Counter": "counter",
    "Gauge": "gauge",
    "Histogram": "histogram",
    "Summary": "summary",
    "CounterMetricFamily": "counter",  # custom collectors (actorq/energy.py)
    "GaugeMetricFamily": "gauge",
    "HistogramMetricFamily": "histogram",
    "SummaryMetricFamily": "summary",
}
_SERIES_SUFFIXES = ("_total", "_created", "_bucket", "_sum", "_count")
_METRIC_NAME = re.compile(r"\bactorq_[a-z0-9_]*[a-z0-9]")


@dataclass(frozen=True)
class Metric:
    """One metric as defined in code: its exposed name (counters end in _total), Prometheus
    type, label names, and where it is defined."""

    name: str
    type: str
    labels: tuple[str, ...]
    where: str


def _labels(call: ast.Call) -> tuple[str, ...]:
    node = next(
        (k.value for k in call.keywords if k.arg in ("labelnames", "labels")),
        call.args[2] if len(call.args) > 2 else None,
    )
    if isinstance(node, (ast.List, ast.Tuple)):
        return tuple(str(e.value) for e in node.elts if isinstance(e, ast.Constant))
    return ()


def defined_metrics(root: Path = ROOT) -> dict[str, Metric]:
    """Every actorq_* metric constructed under actorq/ and services/ (prometheus_client's
    Counter/Gauge/Histogram/Summary and the *MetricFamily of custom collectors), found by
    reading the source: the builder stays stdlib-only and sees modules no service imports."""
    found: dict[str, Metric] = {}
    for folder in ("actorq", "services"):
        for path in sorted((root / folder).rglob("*.py")):
            tree = ast.parse(path.read_text(), str(path))
            for call in ast.walk(tree):
                if not isinstance(call, ast.Call) or not call.args:
                    continue
                func = call.func
                ctor = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
                first = call.args[0]
                if ctor not in _CONSTRUCTORS or not isinstance(first, ast.Constant):
                    continue
                if not str(first.value).startswith("actorq_"):
                    continue
                kind = _CONSTRUCTORS[ctor]
                name = str(first.value)
                if kind == "counter" and not name.endswith("_total"):
                    name += "_total"  # what prometheus_client exposes
                where = f"{path.relative_to(root)}:{call.lineno}"
                found[name] = Metric(name, kind, _labels(call), where)
    return found


def base_name(series: str) -> str:
    """A series name without the suffix its type adds (_total, _bucket, _sum, ...)."""
    for suffix in _SERIES_SUFFIXES:
        if series.endswith(suffix):
            return series[: -len(suffix)]
    return series


def charted_metrics(dashboard: dict) -> set[str]:
    """Base names (base_name) of every actorq_* series some panel query reads."""
    return {base_name(m) for _, expr in queries(dashboard) for m in _METRIC_NAME.findall(expr)}


def uncharted(names: Iterable[str], dashboard: dict) -> list[str]:
    """The metric or series names no panel reads and NOT_CHARTED does not excuse."""
    seen = charted_metrics(dashboard) | {base_name(n) for n in NOT_CHARTED}
    return sorted({n for n in names if n.startswith("actorq_") and base_name(n) not in seen})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail if the committed JSON differs")
    parser.add_argument("--rules-out", type=Path, help="also write the queries as a rules file")
    args = parser.parse_args(argv)
    dashboard = build()
    text = render(dashboard)
    if args.rules_out:
        args.rules_out.write_text(rules_file(dashboard))
    if args.check:
        if not DASHBOARD_PATH.exists() or DASHBOARD_PATH.read_text() != text:
            print(f"{DASHBOARD_PATH} is stale: run python deploy/grafana/build_dashboard.py")
            return 1
        missing = uncharted(defined_metrics(), dashboard)
        if missing:
            print("metrics no panel queries (chart them, or list them in NOT_CHARTED):")
            print("\n".join(f"  {name}" for name in missing))
            return 1
        print(f"{DASHBOARD_PATH.name} is up to date ({len(queries(dashboard))} queries)")
        return 0
    DASHBOARD_PATH.write_text(text)
    print(f"wrote {DASHBOARD_PATH} ({len(queries(dashboard))} queries)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
