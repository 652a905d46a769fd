"""Dashboard queries that are empty in a healthy CartPole DQN run, and why.

Shared by the two tests that run every Grafana panel query against a real Prometheus
(tests/e2e/test_observability.py, processes; tests/e2e/test_compose.py, containers).
A query matches when it contains one of these fragments.
"""

from __future__ import annotations

EMPTY_IN_A_HEALTHY_DQN_RUN = (
    # Counted only when something is refused.
    "increase(actorq_actor_policy_rejections_total",
    "increase(actorq_quantizer_publish_rejections_total",
    # Labelled by reason: a healthy run has no delta fallbacks.
    "actorq_actor_policy_delta_fallbacks_total",
    # On-policy learners only (these runs are DQN).
    "actorq_learner_importance_",
    "actorq_learner_segment",
    # Sparse training: labelled per network/kind, absent on a dense run.
    "actorq_learner_sparsity_ratio",
    "actorq_learner_mask_version",
    "actorq_learner_topology_changed_weights_total",
    "actorq_learner_train_flops_total",
    "actorq_learner_policy_inference_flops",
    # The divergence guard is opt-in (ACTORQ_GUARD=true): off, it measures nothing.
    "actorq_quantizer_guard_divergence_ratio",
    "actorq_quantizer_guard_fallback_layers_total",  # labelled by layer: none until one
    "actorq_learner_policy_entropy",  # on-policy learners only
    "actorq_actor_connection_errors_total",  # labelled by peer: none while healthy
)


def unexpectedly_empty(empty: list[str]) -> list[str]:
    """The entries of `empty` ("title: expr") that a healthy DQN run should fill."""
    return [e for e in empty if not any(f in e for f in EMPTY_IN_A_HEALTHY_DQN_RUN)]
