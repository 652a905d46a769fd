"""Fixtures for the integration tests: a real quantizer gRPC server on an ephemeral port."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis

from actorq.quantizer.server import ParameterServer, parameter_server_service
from actorq.quantizer.store import PolicyStore
from actorq.redis_keys import RedisKeys
from actorq.rpc import GrpcServer


@pytest.fixture
def quantizer(redis_client: redis.Redis, redis_keys: RedisKeys) -> Iterator[str]:
    """Address of a quantizer serving from this test's Redis key prefix."""
    params = ParameterServer(PolicyStore(redis_client, redis_keys))
    server = GrpcServer("127.0.0.1", 0, [parameter_server_service(params)])
    server.start()
    yield f"127.0.0.1:{server.port}"
    params.close()
    server.stop(0.2)
