"""Dashboard rows: overview, actors, policy, broadcasts (full, sparse, delta)."""

from __future__ import annotations

from panels_common import Panel, _q, _quantiles

ROWS: list[tuple[str, list[Panel]]] = [
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
]
