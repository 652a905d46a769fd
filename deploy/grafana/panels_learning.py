"""Dashboard rows: learner and replay, on-policy learning, behaviour vs learner policy,
quantizer guard."""

from __future__ import annotations

from panels_common import EMPTY_ON_DQN, GUARD_LIMIT, GUARD_STAGES, Panel, _guard, _q

ROWS: list[tuple[str, list[Panel]]] = [
    (
        "Learner and replay",
        [
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
                24,
                text_mode="name",
            ),
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
                "Versions held back by the publish gate, settling candidates rejected",
                [
                    _q("sum(increase(actorq_learner_gated_versions_total[$w]))", "held back"),
                    _q(
                        "sum(increase(actorq_learner_settle_rejected_total[$w]))",
                        "candidates rejected",
                    ),
                ],
                "short",
                description="Held back: once settled with ACTORQ_SETTLE_VALIDATION_EPISODES > "
                "0, versions whose greedy validation fell below the bar (actors keep the last "
                "one that passed). Candidates rejected: versions the evaluator's round named "
                "whose 100-episode certification fell short (or whose weights were gone), "
                "so the learner did not settle on them.",
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
]
