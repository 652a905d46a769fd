"""Client channels with the limits and keepalives every actorq client uses."""

from __future__ import annotations

import grpc

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


def make_channel(address: str) -> grpc.Channel:
    """An insecure channel to `host:port` with actorq's limits and keepalives."""
    if ":" not in address:
        raise ValueError(f"expected a gRPC address host:port, got {address!r}")
    return grpc.insecure_channel(address, options=CHANNEL_OPTIONS)
