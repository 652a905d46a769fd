#!/usr/bin/env python3
"""Build the actorq Grafana dashboard from the panel list below (stdlib only).

    python deploy/grafana/build_dashboard.py            # write dashboards/actorq.json
    python deploy/grafana/build_dashboard.py --check    # exit 1 if the committed JSON is stale
    python deploy/grafana/build_dashboard.py --rules-out F  # every query as a rule file,
                                                            # so `promtool check rules F` parses it

The dashboard is reviewed as this file; the JSON is generated and committed so Grafana can
provision it from disk. Metric names: actorq/metrics.py.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
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
                "fp32-equivalent bytes minus bytes actually broadcast.",
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
                [
                    _q(
                        f"histogram_quantile({q}, sum by (le, precision) "
                        "(rate(actorq_actor_inference_seconds_bucket[$w])))",
                        f"p{int(q * 100)} {{{{precision}}}}",
                    )
                    for q in (0.5, 0.9, 0.99)
                ],
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
                "Learner waiting for replay",
                [_q("sum(rate(actorq_learner_replay_wait_seconds_total[$w]))", "")],
                "percentunit",
                description="Fraction of time the learner waited for data.",
            ),
            Panel("Scrape targets up", [_q("sum by (job) (up)", "{{job}}")], "none"),
        ],
    ),
    (
        "On-policy (PPO, APPO, A2C)",
        [
            Panel(
                "Importance ratios (learner / behaviour)",
                [
                    _q("max(actorq_learner_importance_ratio_mean)", "mean ratio"),
                    _q("max(actorq_learner_importance_ratio_max)", "max ratio"),
                    _q("max(actorq_learner_importance_ratio_abs_dev)", "mean |ratio - 1|"),
                    _q("max(actorq_learner_importance_ess_fraction)", "ESS fraction"),
                    _q("max(actorq_learner_importance_clipped_fraction)", "clipped fraction"),
                ],
                "short",
                description="Per update, before its first step: the int8, lagged actors' gap.",
            ),
            Panel(
                "Segments and policy lag",
                [
                    _q("max(actorq_learner_segment_policy_lag_versions)", "lag (versions)"),
                    _q("sum(rate(actorq_learner_segments_trained_total[$w]))", "trained/s"),
                    _q("sum(rate(actorq_learner_segments_dropped_total[$w]))", "dropped stale/s"),
                ],
                "short",
            ),
        ],
    ),
    (
        "Runtime breakdown, guard and energy",
        [
            Panel(
                "Actor step time by phase",
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
                "Policy load and publish phases",
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
                "Guard: divergence from fp32",
                [
                    _q(
                        "max by (measure, stage) (actorq_quantizer_guard_divergence_ratio)",
                        "{{stage}} {{measure}}",
                    ),
                    _q("max(actorq_quantizer_guard_threshold_ratio)", "threshold"),
                ],
                "percentunit",
                description="How differently the newest version acts from fp32 on recent "
                "replay observations, before and after per-layer fallbacks.",
            ),
            Panel(
                "Guard: versions with fallback layers",
                [_q("sum(increase(actorq_quantizer_guard_fallback_versions_total[$w]))", "")],
                "short",
            ),
            Panel(
                "Power (estimate)",
                [_q("sum by (job) (rate(actorq_service_energy_joules_total[$w]))", "{{job}}")],
                "watt",
                description="CPU seconds x watts per core (actorq/energy.py); an estimate.",
            ),
            Panel(
                "CO2e so far (estimate)",
                [_q("sum(actorq_service_co2_grams_total)", "grams")],
                "short",
                "stat",
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
                description="Share of zero weights per Linear layer; empty on DQN runs.",
            ),
            Panel(
                "Topology changes",
                [
                    _q(
                        "max by (network) (actorq_learner_mask_version)", "{{network}} mask version"
                    ),
                    _q(
                        "sum by (network) "
                        "(increase(actorq_learner_topology_changed_weights_total[$w]))",
                        "{{network}} weights moved",
                    ),
                ],
                "short",
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
            ),
            Panel(
                "Replay capacity and policy distance",
                [
                    _q("max(actorq_learner_replay_capacity)", "capacity"),
                    _q("max(actorq_learner_replay_size)", "size"),
                ],
                "short",
                description="RLx2's dynamic capacity: rows the replay may hold now.",
            ),
            Panel(
                "TD target n and oldest data's policy distance",
                [
                    _q("max(actorq_learner_td_nstep)", "n"),
                    _q("max(actorq_learner_replay_policy_distance)", "policy distance"),
                ],
                "short",
            ),
        ],
    ),
]


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
        print(f"{DASHBOARD_PATH.name} is up to date ({len(queries(dashboard))} queries)")
        return 0
    DASHBOARD_PATH.write_text(text)
    print(f"wrote {DASHBOARD_PATH} ({len(queries(dashboard))} queries)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
