"""Every Prometheus metric actorq exposes, defined once.

Names follow `actorq_<component>_<what>_<unit>`, base units, `_total` on counters.
Each service is one process with one /metrics port; the `instance` label tells actors
apart when several run in one process (tests) or behind one scrape target.
"""

from __future__ import annotations

from prometheus_client import REGISTRY, Counter, Gauge, Histogram

from actorq.healthz import HealthSource, start_server

# Latency buckets from 50 us to 1 s: actor inference on small MLPs sits well under 1 ms.
_FAST_BUCKETS = (5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2, 2.5e-2, 0.1, 0.25, 1.0)

# --- actor ----------------------------------------------------------------------------
ACTOR_ENV_STEPS = Counter(
    "actorq_actor_env_steps_total", "Environment steps taken (summed over envs).", ["instance"]
)
ACTOR_EPISODES = Counter("actorq_actor_episodes_total", "Episodes finished.", ["instance"])
ACTOR_EPISODE_RETURN = Gauge(
    "actorq_actor_episode_return_mean", "Mean return of the last 100 episodes.", ["instance"]
)
ACTOR_INFERENCE_SECONDS = Histogram(
    "actorq_actor_inference_seconds",
    "Seconds per batched policy forward (one per env step of the vector env).",
    ["instance", "precision"],
    buckets=_FAST_BUCKETS,
)
# Runtime breakdown (actorq.breakdown): 10 us .. 1 s, per phase of an actor step.
_PHASE_BUCKETS = (1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2, 0.1, 1.0)
ACTOR_STEP_PHASE_SECONDS = Histogram(
    "actorq_actor_step_phase_seconds",
    "Seconds per occurrence of one phase of the env loop (inference, explore, env_step, "
    "record: per step; push, rate_limit_wait: per push). Phases add up to the loop time.",
    ["instance", "phase"],
    buckets=_PHASE_BUCKETS,
)
ACTOR_LOOP_SECONDS = Counter(
    "actorq_actor_loop_seconds_total",
    "Wall seconds of the env loop (measured apart from its phases, to check their sum).",
    ["instance"],
)
ACTOR_LOOP_STEPS = Counter(
    "actorq_actor_loop_steps_total", "Vector-env steps of the env loop.", ["instance"]
)
ACTOR_POLICY_PHASE_SECONDS = Histogram(
    "actorq_actor_policy_phase_seconds",
    "Seconds per loaded version in each phase of the policy follower thread: policy_pull "
    "(GetPolicy chunks), verify_deserialize (sha256, shapes, decode), build (inference module).",
    ["instance", "phase"],
    buckets=(1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2, 2.5e-2, 5e-2, 0.1, 0.25, 1.0, 2.5),
)
ACTOR_POLICY_LOAD_SECONDS = Histogram(
    "actorq_actor_policy_load_seconds",
    "Seconds to fetch, verify and build one policy version.",
    ["instance"],
    buckets=(1e-3, 2.5e-3, 5e-3, 1e-2, 2.5e-2, 5e-2, 0.1, 0.25, 0.5, 1.0, 2.5),
)
ACTOR_POLICY_VERSION = Gauge(
    "actorq_actor_policy_version", "Policy version the actor is acting with.", ["instance"]
)
ACTOR_POLICY_LAG = Gauge(
    "actorq_actor_policy_lag_versions",
    "Newest announced version minus the version in use.",
    ["instance"],
)
ACTOR_POLICY_REJECTIONS = Counter(
    "actorq_actor_policy_rejections_total",
    "Policy blobs refused (bad checksum, shape or format); the previous policy is kept.",
    ["instance", "reason"],
)
ACTOR_POLICY_BYTES_RECEIVED = Counter(
    "actorq_actor_policy_bytes_received_total",
    "Policy bytes fetched, by kind (full, sparse, delta).",
    ["instance", "kind"],
)
ACTOR_POLICY_DELTA_FALLBACKS = Counter(
    "actorq_actor_policy_delta_fallbacks_total",
    "Deltas that failed to apply or verify; the full blob was fetched instead.",
    ["instance", "reason"],
)
ACTOR_REPLAY_INSERTS = Counter(
    "actorq_actor_replay_inserts_total",
    "Transitions acknowledged by Redis.",
    ["instance"],
)
ACTOR_RATE_LIMITED_SECONDS = Counter(
    "actorq_actor_rate_limited_seconds_total",
    "Seconds spent waiting because actors ran ahead of the samples-per-insert ratio.",
    ["instance"],
)
ACTOR_CONNECTION_ERRORS = Counter(
    "actorq_actor_connection_errors_total",
    "Failed calls to Redis or the quantizer (retried with backoff).",
    ["instance", "peer"],
)

# --- quantizer --------------------------------------------------------------------------
QUANTIZER_PUBLISHES = Counter(
    "actorq_quantizer_publishes_total", "Policy versions quantized and stored.", ["precision"]
)
QUANTIZER_PUBLISH_REJECTIONS = Counter(
    "actorq_quantizer_publish_rejections_total",
    "Weight publications refused (NaN/Inf, shape, order, version rollback).",
    ["reason"],
)
QUANTIZER_POLICY_VERSION = Gauge("actorq_quantizer_policy_version", "Newest stored version.")
QUANTIZER_BLOB_BYTES = Gauge(
    "actorq_quantizer_blob_bytes", "Size of the newest blob.", ["precision"]
)
QUANTIZER_FP32_EQUIVALENT_BYTES = Gauge(
    "actorq_quantizer_fp32_equivalent_bytes", "Size of the newest policy's weights in fp32."
)
QUANTIZER_BROADCAST_BYTES = Counter(
    "actorq_quantizer_broadcast_bytes_total", "Blob bytes sent to actors.", ["precision"]
)
QUANTIZER_BROADCAST_FP32_BYTES = Counter(
    "actorq_quantizer_broadcast_fp32_equivalent_bytes_total",
    "Bytes the same broadcasts would have cost as fp32 weights.",
    ["precision"],
)
QUANTIZER_BYTES_SAVED = Counter(
    "actorq_quantizer_broadcast_bytes_saved_total",
    "fp32-equivalent bytes minus bytes actually sent.",
    ["precision"],
)
QUANTIZER_QUANT_ERROR = Gauge(
    "actorq_quantizer_quantization_error_ratio",
    "Max over weight matrices of ||W - deq(q(W))|| / ||W|| for the newest version.",
    ["precision"],
)
QUANTIZER_QUANTIZE_SECONDS = Histogram(
    "actorq_quantizer_quantize_seconds",
    "Seconds to validate, quantize and store one version.",
    buckets=(1e-3, 5e-3, 1e-2, 2.5e-2, 5e-2, 0.1, 0.25, 0.5, 1.0, 5.0),
)
QUANTIZER_PUBLISH_PHASE_SECONDS = Histogram(
    "actorq_quantizer_publish_phase_seconds",
    "Seconds per published version in each phase: assemble (receive and check the stream), "
    "quantize, guard (divergence probe, fallbacks), store (Redis).",
    ["phase"],
    buckets=(1e-4, 5e-4, 1e-3, 5e-3, 1e-2, 2.5e-2, 5e-2, 0.1, 0.25, 0.5, 1.0, 5.0),
)
QUANTIZER_FANOUT_BYTES = Histogram(
    "actorq_quantizer_fanout_bytes",
    "Blob bytes served per GetPolicy call (one actor fetching one version).",
    ["precision"],
    buckets=(1e3, 1e4, 3e4, 1e5, 3e5, 1e6, 3e6, 1e7, 3e7, 1e8),
)
QUANTIZER_GUARD_DIVERGENCE = Gauge(
    "actorq_quantizer_guard_divergence_ratio",
    "How differently the newest version acts from fp32 on the probe (actorq.guard): measure "
    "disagreement/agreement/q_error (Q-networks) or action_diff/kl (tanh policies); stage "
    "before (plain quantized) or broadcast (after fallbacks).",
    ["measure", "stage"],
)
QUANTIZER_GUARD_THRESHOLD = Gauge(
    "actorq_quantizer_guard_threshold_ratio", "The guard's threshold on its guarded measure."
)
QUANTIZER_GUARD_FALLBACK_VERSIONS = Counter(
    "actorq_quantizer_guard_fallback_versions_total",
    "Versions whose quantized policy was past the threshold and got float fallback layers.",
)
QUANTIZER_GUARD_FALLBACK_LAYERS = Counter(
    "actorq_quantizer_guard_fallback_layers_total",
    "Weight matrices stored in float instead of the policy precision, per layer.",
    ["layer", "precision"],
)
QUANTIZER_WATCHERS = Gauge("actorq_quantizer_watchers", "Open WatchPolicy streams.")
QUANTIZER_BROADCASTS_BY_KIND = Counter(
    "actorq_quantizer_broadcasts_total",
    "Policy versions sent to actors, by kind: full (dense blob), sparse (blob with sparse "
    "layers), delta (change from the version the actor held).",
    ["kind"],
)
QUANTIZER_BROADCAST_BYTES_BY_KIND = Counter(
    "actorq_quantizer_broadcast_kind_bytes_total", "Bytes sent to actors, by kind.", ["kind"]
)
QUANTIZER_BROADCAST_DENSE_FP32_BYTES = Counter(
    "actorq_quantizer_broadcast_dense_fp32_bytes_total",
    "Bytes the same broadcasts would have cost as dense fp32 blobs, by kind.",
    ["kind"],
)
QUANTIZER_DENSE_FP32_BLOB_BYTES = Gauge(
    "actorq_quantizer_dense_fp32_blob_bytes", "Size of the newest version as a dense fp32 blob."
)
QUANTIZER_DELTA_BYTES = Gauge(
    "actorq_quantizer_delta_bytes",
    "Size of the newest version's delta from the previous one (0: none stored).",
)
QUANTIZER_DELTA_RATIO = Histogram(
    "actorq_quantizer_delta_ratio",
    "Delta size over the dense fp32 blob size, one sample per stored delta.",
    buckets=(0.005, 0.01, 0.02, 0.03, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3),
)

# --- learner ----------------------------------------------------------------------------
LEARNER_UPDATES = Counter("actorq_learner_updates_total", "Gradient updates.")
LEARNER_LOSS = Gauge(
    "actorq_learner_loss", "Loss of the latest update written (off-policy: every 10th update)."
)
LEARNER_Q_MEAN = Gauge(
    "actorq_learner_q_mean", "Mean Q-value of the latest batch written (every 10th update)."
)
LEARNER_POLICY_VERSION = Gauge("actorq_learner_policy_version", "Newest published version.")
LEARNER_REPLAY_SIZE = Gauge("actorq_learner_replay_size", "Transitions in the local replay mirror.")
LEARNER_REPLAY_INSERTED = Counter(
    "actorq_learner_replay_inserted_total", "Transitions ingested from Redis."
)
LEARNER_REPLAY_SAMPLED = Counter(
    "actorq_learner_replay_sampled_total", "Transitions sampled for updates."
)
LEARNER_REPLAY_REJECTED = Counter(
    "actorq_learner_replay_rejected_total", "Malformed replay entries skipped."
)
LEARNER_WAIT_SECONDS = Counter(
    "actorq_learner_replay_wait_seconds_total",
    "Seconds the learner waited for replay data (min size or samples-per-insert).",
)
LEARNER_SAMPLE_LAG = Gauge(
    "actorq_learner_sample_policy_lag_versions",
    "Current version minus the mean policy version of the latest sampled batch.",
)
LEARNER_PUBLISH_SECONDS = Histogram(
    "actorq_learner_publish_seconds",
    "Seconds to stream one version's fp32 weights to the quantizer.",
    buckets=(1e-3, 5e-3, 1e-2, 2.5e-2, 5e-2, 0.1, 0.25, 0.5, 1.0, 5.0),
)
LEARNER_CHECKPOINTS = Counter("actorq_learner_checkpoints_total", "Checkpoints written.")
LEARNER_SETTLE_REJECTED = Counter(
    "actorq_learner_settle_rejected_total",
    "Candidate versions settling did not freeze: their certification mean fell short of "
    "the target, or their weights were no longer held (actorq.learner.settle).",
)
LEARNER_GATED_VERSIONS = Counter(
    "actorq_learner_gated_versions_total",
    "Versions not broadcast because they failed the learner's validation once settled "
    "(actorq.learner.greedy_check); actors keep the last version that passed.",
)
LEARNER_INFO = Gauge(
    "actorq_learner_info",
    "1, labelled with the device the learner trains on (cpu, cuda, cuda:N), its update "
    "path (numpy-flat, torch-eager, cuda-graph, compiled) and the dtype of its weights.",
    ["device", "update_path", "dtype"],
)
LEARNER_REPLAY_RATIO = Gauge(
    "actorq_learner_replay_ratio",
    "Samples per inserted transition the learner trains at now (lower once settled).",
)

# --- learner: sparse training (RLx2, actorq.sparse) ------------------------------------
LEARNER_SPARSITY = Gauge(
    "actorq_learner_sparsity_ratio",
    "Share of zero weights per Linear layer (network: actor or critic).",
    ["network", "layer"],
)
LEARNER_MASK_VERSION = Gauge(
    "actorq_learner_mask_version", "Topology updates so far (the masks' version).", ["network"]
)
LEARNER_TOPOLOGY_CHANGED = Counter(
    "actorq_learner_topology_changed_weights_total",
    "Weights moved by topology updates (each dropped in one place, grown in another).",
    ["network"],
)
LEARNER_TRAIN_FLOPS = Counter(
    "actorq_learner_train_flops_total",
    "Training FLOPs of the networks (kind: sparse as trained, dense equivalent).",
    ["kind"],
)
LEARNER_INFERENCE_FLOPS = Gauge(
    "actorq_learner_policy_inference_flops",
    "FLOPs of one action of the broadcast policy (kind: sparse, dense equivalent).",
    ["kind"],
)
LEARNER_REPLAY_CAPACITY = Gauge(
    "actorq_learner_replay_capacity",
    "Rows the replay may hold now (RLx2's dynamic capacity: live rows after drops).",
)
LEARNER_REPLAY_DROPPED = Counter(
    "actorq_learner_replay_dropped_total", "Oldest rows dropped by the dynamic capacity rule."
)
LEARNER_POLICY_DISTANCE = Gauge(
    "actorq_learner_replay_policy_distance",
    "Policy distance of the oldest replay data at the latest check (dynamic capacity).",
)
LEARNER_NSTEP = Gauge("actorq_learner_td_nstep", "n of the TD target in use (delayed n-step).")
# Behaviour vs learner policy on sampled replay rows (actorq.learner.behaviour).
LEARNER_BEHAVIOUR_GAP = Gauge(
    "actorq_learner_behaviour_gap",
    "Behaviour vs learner policy on the latest measured batch: mean |mu_behaviour - "
    "mu_learner(s)| / action range (continuous), or the share of rows whose behaviour greedy "
    "action differs from the learner's (discrete).",
)
LEARNER_BEHAVIOUR_FRESH_GAP = Gauge(
    "actorq_learner_behaviour_fresh_gap",
    "The behaviour gap over the latest measured batch's rows acted by the newest published "
    "version or the one before: quantization plus at most one version of lag.",
)
LEARNER_BEHAVIOUR_LOG_RATIO = Gauge(
    "actorq_learner_behaviour_log_ratio",
    "log pi_learner(a|s) - log mu_behaviour(a|s) of the taken actions on the latest measured "
    "batch, learner with the behaviour's exploration (stat: mean, abs_mean).",
    ["stat"],
)
LEARNER_BEHAVIOUR_RHO = Gauge(
    "actorq_learner_behaviour_rho_mean",
    "Mean of min(1, pi_learner / mu_behaviour) of the taken actions on the latest batch.",
)
LEARNER_BEHAVIOUR_ROWS = Counter(
    "actorq_learner_behaviour_rows_total",
    "Sampled rows looked at for the gap: measured, or not (entries without behaviour fields).",
    ["measured"],
)
LEARNER_NSTEP_IS_WEIGHT = Gauge(
    "actorq_learner_nstep_is_weight_mean",
    "Mean truncated importance weight prod_k min(rho_bar, pi/mu) of the latest n-step batch.",
)
LEARNER_NSTEP_IS_TRUNCATED = Gauge(
    "actorq_learner_nstep_is_truncated_fraction",
    "Share of the latest n-step batch's intermediate steps whose ratio was cut at rho_bar.",
)


def serve_metrics(
    host: str, port: int, service: str | None = None, health: HealthSource | None = None
) -> int | None:
    """Start the /metrics HTTP endpoint; returns the bound port (None when port == -1).

    With `service`, the page also carries that process's estimated energy and CO2
    (`actorq_service_energy_joules_total`, actorq.energy). With `health` (the service's
    `GrpcServer.status`), the same port answers `/healthz` (actorq.healthz)."""
    if port < 0:
        return None
    if service is not None:
        from actorq.energy import PowerModel, ProcessEnergyCollector

        REGISTRY.register(ProcessEnergyCollector(service, PowerModel.from_env()))
    server = start_server(host, port, health)
    return int(server.server_port)
