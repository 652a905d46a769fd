"""Prometheus metrics of the on-policy learner (actorq.learner.onpolicy_loop).

Kept beside the on-policy code rather than in actorq.metrics so that the on-policy path
can change without touching the shared module; names follow the same convention.
"""

from __future__ import annotations

from prometheus_client import Counter, Gauge

RATIO_MEAN = Gauge(
    "actorq_learner_importance_ratio_mean",
    "Mean pi_learner / mu_behaviour over the last update's batch (before its first step).",
)
RATIO_MAX = Gauge(
    "actorq_learner_importance_ratio_max", "Largest importance ratio in the last batch."
)
RATIO_ABS_DEV = Gauge(
    "actorq_learner_importance_ratio_abs_dev",
    "Mean |ratio - 1| of the last batch: how far the int8, lagged behaviour policy was.",
)
CLIPPED_FRACTION = Gauge(
    "actorq_learner_importance_clipped_fraction",
    "Share of the last batch whose ratio was clipped (PPO) or truncated (V-trace rho-bar).",
)
ESS = Gauge(
    "actorq_learner_importance_ess_fraction",
    "Normalised effective sample size of the last batch's ratios, (sum w)^2 / (n sum w^2).",
)
POLICY_LAG = Gauge(
    "actorq_learner_segment_policy_lag_versions",
    "Mean policy lag (learner version minus segment version) of the last batch.",
)
SEGMENTS_TRAINED = Counter(
    "actorq_learner_segments_trained_total", "Trajectory segments used in updates."
)
SEGMENTS_DROPPED = Counter(
    "actorq_learner_segments_dropped_total",
    "Trajectory segments dropped because their policy lag exceeded max_policy_lag.",
)
ENTROPY = Gauge("actorq_learner_policy_entropy", "Mean policy entropy in the last update.")
