"""A stopped GrpcServer leaves no handler thread behind in its process (the tests and any
embedding program stop servers inside a longer-lived process)."""

from __future__ import annotations

import threading
import time

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from actorq.rpc.server import GrpcServer


def _handler_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("grpc_")]


def test_stop_ends_the_handler_threads() -> None:
    before = set(_handler_threads())
    server = GrpcServer("127.0.0.1", 0, [])
    server.start()
    with grpc.insecure_channel(f"127.0.0.1:{server.port}") as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        for _ in range(3):  # each call runs on a handler thread of the pool
            reply = stub.Check(health_pb2.HealthCheckRequest(), timeout=5)
            assert reply.status == health_pb2.HealthCheckResponse.SERVING
    assert set(_handler_threads()) - before, "the calls ran on no handler thread"
    server.stop(grace=0.5)
    deadline = time.monotonic() + 5
    while set(_handler_threads()) - before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not [t.name for t in set(_handler_threads()) - before if t.is_alive()]
