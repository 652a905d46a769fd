"""Quantizer / parameter server process: settings -> objects -> serve.

Configured by ACTORQ_* environment variables (see actorq.config.QuantizerSettings).
"""

from __future__ import annotations

import logging

from actorq import metrics
from actorq.config import QuantizerSettings, load_settings, redact_url
from actorq.guard import GuardConfig, PolicyGuard
from actorq.guard_probes import replay_probe, segment_probe
from actorq.quantizer.server import ParameterServer, parameter_server_service
from actorq.quantizer.store import PolicyStore
from actorq.redis_keys import RedisKeys
from actorq.rpc import GrpcServer
from actorq.rpc.control import StatusSnapshot, control_service
from actorq.security.signing import load_policy_keys
from actorq.security.tls import TlsConfig, allowed_peers
from actorq.service import ServiceRuntime, connect_redis, run_main, setup_logging

log = logging.getLogger("actorq.quantizer")


def serve(settings: QuantizerSettings) -> int:
    runtime = ServiceRuntime("quantizer")
    client = connect_redis(settings.redis_url, password_file=settings.redis_password_file)
    store = PolicyStore(client, RedisKeys(settings.redis_prefix), settings.keep_versions)
    keys = load_policy_keys(settings.policy_key_file, settings.policy_previous_key_file)
    params = ParameterServer(
        store,
        settings.chunk_bytes,
        settings.max_publish_bytes,
        keys=keys,
        guard=_guard(settings, client),
        deltas=settings.deltas,
    )

    def status() -> StatusSnapshot:
        latest = params.board.latest
        return StatusSnapshot(
            role="quantizer",
            instance_id="quantizer",
            policy_version=latest.version if latest else 0,
            state="stopping" if runtime.stopping else "running",
            counters={
                **params.counters,
                "broadcast_bytes_total": params.bytes_sent,
                "broadcast_fp32_equivalent_bytes_total": params.fp32_bytes_sent,
                "bytes_saved_total": max(params.fp32_bytes_sent - params.bytes_sent, 0),
                "blob_bytes": latest.blob_bytes if latest else 0,
                **params.clock.counters("publish_seconds"),  # actorq.breakdown
                **params.guard_stats.counters(),  # actorq.guard
                "dense_fp32_bytes": params.deltas.dense_fp32_bytes,
                **{
                    f"delta_bytes_{name}": size
                    for name, size in params.deltas.delta_bytes_quantiles().items()
                },
                **{f"broadcast_{k}_bytes": v for k, v in params.deltas.sent_by_kind.items()},
            },
        )

    server = GrpcServer(
        settings.bind_host,
        settings.grpc_port,
        [
            parameter_server_service(params, allowed_peers(settings, "tls_allowed_publishers")),
            control_service(
                status, runtime.request_stop, allowed_peers(settings, "tls_allowed_stop_peers")
            ),
        ],
        max_workers=512,  # one thread per open WatchPolicy stream, plus headroom
        tls=TlsConfig.from_settings(settings),
    )
    metrics_port = metrics.serve_metrics(
        settings.bind_host, settings.metrics_port, service="quantizer", health=server.status
    )
    server.start()
    log.info(
        "quantizer serving on %s:%d (%s, metrics %s), redis %s, latest version %d, %s",
        settings.bind_host,
        server.port,
        _tls_mode(server.tls),
        metrics_port,
        redact_url(settings.redis_url),
        store.latest_version(),
        f"signing with key {keys.current.key_id}" if keys.current else "blobs unsigned",
    )
    runtime.wait()
    params.close()
    server.stop(grace=2.0)
    return 0


def _guard(settings: QuantizerSettings, client) -> PolicyGuard | None:
    if not settings.guard:
        return None
    config = GuardConfig(
        max_disagreement=settings.guard_max_disagreement,
        discrete_measure=settings.guard_discrete_measure,
        gamma=settings.guard_gamma,
        lag_scale=settings.guard_lag_scale,
        max_action_diff=settings.guard_max_action_diff,
        probe_size=settings.guard_probe_size,
        fallback=settings.guard_fallback,
    )
    keys = RedisKeys(settings.redis_prefix)
    # On-policy pixel runs have no replay: their CNN probe reads trajectory segments.
    return PolicyGuard(config, replay_probe(client, keys), segment_probe(client, keys))


def _tls_mode(tls: TlsConfig) -> str:
    if not tls.enabled:
        return "plaintext"
    return "mutual TLS" if tls.require_client_cert else "TLS"


def main() -> None:
    def _main() -> int:
        settings = load_settings(QuantizerSettings)
        setup_logging(settings.log_level)
        return serve(settings)

    run_main(_main)


if __name__ == "__main__":
    main()
