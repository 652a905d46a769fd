"""Dashboard rows: runtime breakdown, energy and CO2, sparse training (RLx2)."""

from __future__ import annotations

from panels_common import ACTORS, Panel, _q, _quantiles

ROWS: list[tuple[str, list[Panel]]] = [
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
