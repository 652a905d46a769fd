"""Property-based fuzzing of every gRPC method against a real quantizer and real Redis.

Each input must get a deliberate status (never UNKNOWN/INTERNAL), leave the server healthy
and never leave a half-published version. bench/fuzz_grpc.py runs the same properties with
>= 10,000 inputs per method; here a few dozen each keep CI fast.
"""

from __future__ import annotations

from collections.abc import Iterator

import grpc
import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from actorq.rpc.control import safe_reason
from actorq.testing import grpc_fuzz as fz
from actorq.v1 import control_pb2

FUZZ = settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)


@pytest.fixture(scope="module")
def target(redis_url: str) -> Iterator[fz.FuzzTarget]:
    client = redis.Redis.from_url(redis_url)
    t = fz.FuzzTarget(client)
    t.ps.PublishWeights(fz.valid_stream(1), timeout=10)  # something to roll back from
    yield t
    t.close()
    client.close()


@FUZZ
@given(case=fz.publish_streams())
def test_publish_weights(target: fz.FuzzTarget, case: fz.PublishInput) -> None:
    code = target.publish(case)
    target.check_status(code, fz.ALLOWED, "PublishWeights")
    target.check_all()


@FUZZ
@given(request=fz.get_policy_requests())
def test_get_policy(target: fz.FuzzTarget, request) -> None:
    target.check_status(target.get_policy(request), fz.ALLOWED, "GetPolicy")
    target.check_all()


@FUZZ
@given(request=fz.watch_requests())
def test_watch_policy(target: fz.FuzzTarget, request) -> None:
    target.check_status(target.watch(request), fz.WATCH_ALLOWED, "WatchPolicy")
    target.check_all()


@settings(FUZZ, max_examples=20)
@given(request=fz.status_requests())
def test_get_status(target: fz.FuzzTarget, request) -> None:
    target.check_status(target.get_status(request), {grpc.StatusCode.OK}, "GetStatus")


@FUZZ
@given(request=fz.stop_requests())
def test_stop(target: fz.FuzzTarget, request: control_pb2.StopRequest) -> None:
    target.check_status(target.stop(request), {grpc.StatusCode.OK}, "Stop")
    reason = target.stop_reasons[-1]
    assert len(reason) <= 200 * 10 and reason.isprintable()  # escaped, never a raw newline
    assert reason == safe_reason(request.reason or "stop requested over gRPC")
    target.check_all()


@FUZZ
@given(method=st.sampled_from(sorted(fz.METHODS)), payloads=fz.raw_payloads())
def test_undecodable_bytes_to_any_method(target: fz.FuzzTarget, method: str, payloads) -> None:
    code = target.raw(method, payloads)
    allowed = fz.WATCH_ALLOWED if method in ("WatchPolicy", "GetPolicy") else fz.ALLOWED
    target.check_status(code, allowed, f"{method} with raw bytes")
    target.check_all()
