"""Client channels with the limits and keepalives every actorq client uses."""

from __future__ import annotations

import grpc

from actorq.security.tls import TlsConfig

# Blobs travel in ~1 MiB chunks, so 8 MiB leaves room without inviting huge messages.
MAX_MESSAGE_BYTES = 8 << 20

CHANNEL_OPTIONS = [
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
    ("grpc.keepalive_time_ms", 10_000),
    ("grpc.keepalive_timeout_ms", 5_000),
    ("grpc.keepalive_permit_without_calls", 1),
    # Reconnect quickly after a quantizer restart instead of gRPC's default 20 s cap.
    ("grpc.initial_reconnect_backoff_ms", 200),
    ("grpc.max_reconnect_backoff_ms", 2_000),
]

# Servers must accept the clients' keepalive pings (every 10 s, also on idle connections);
# gRPC's default policy allows one per 5 min and answers more with GOAWAY "too_many_pings",
# which dropped idle watch streams and publisher channels every few minutes.
SERVER_KEEPALIVE_OPTIONS = [
    ("grpc.http2.min_ping_interval_without_data_ms", 5_000),
    ("grpc.http2.max_ping_strikes", 0),
]


def make_channel(address: str, tls: TlsConfig | None = None) -> grpc.Channel:
    """A channel to `host:port` with actorq's limits and keepalives.

    `tls` None means "as this process is configured": the ACTORQ_TLS_* variables (so the
    launcher and tools follow the services without extra wiring); plaintext when unset.
    """
    if ":" not in address:
        raise ValueError(f"expected a gRPC address host:port, got {address!r}")
    tls = TlsConfig.from_environ() if tls is None else tls
    if not tls.enabled:
        return grpc.insecure_channel(address, options=CHANNEL_OPTIONS)
    return grpc.secure_channel(
        address, tls.channel_credentials(), options=[*CHANNEL_OPTIONS, *tls.channel_options()]
    )
