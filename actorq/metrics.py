"""Every Prometheus metric actorq exposes, defined once.

Names follow `actorq_<component>_<what>_<unit>`, base units, `_total` on counters.
Each service is one process with one /metrics port; the `instance` label tells actors
apart when several run in one process (tests) or behind one scrape target.
"""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram, start_http_server

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
QUANTIZER_WATCHERS = Gauge("actorq_quantizer_watchers", "Open WatchPolicy streams.")

# --- learner ----------------------------------------------------------------------------
LEARNER_UPDATES = Counter("actorq_learner_updates_total", "Gradient updates.")
LEARNER_LOSS = Gauge("actorq_learner_loss", "TD loss of the latest update.")
LEARNER_Q_MEAN = Gauge("actorq_learner_q_mean", "Mean Q-value of the latest batch.")
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


def serve_metrics(host: str, port: int) -> int | None:
    """Start the /metrics HTTP endpoint; returns the bound port (None when port == -1)."""
    if port < 0:
        return None
    server, _thread = start_http_server(port, addr=host)
    return int(server.server_port)
