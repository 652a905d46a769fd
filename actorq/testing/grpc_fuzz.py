"""Adversarial inputs for every actorq gRPC method, and the checks each input must pass.

Used by tests/integration/test_grpc_fuzz.py (a few hundred inputs, in CI) and
bench/fuzz_grpc.py (>= 10,000 per method). The target is the real quantizer stack:
ParameterServer + Control on a GrpcServer on port 0, storing in a real Redis.

After every input: the reply is a deliberate gRPC status (OK or one of ALLOWED, never
UNKNOWN or INTERNAL, which mean an unhandled exception), the server still answers health
checks, and the store is consistent: `latest` is the newest stored version, every stored
version has its blob and metadata and decodes to itself, and nothing else is stored.
"""

from __future__ import annotations

import math
import struct
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field

import grpc
import numpy as np
import redis
from grpc_health.v1 import health_pb2, health_pb2_grpc
from hypothesis import strategies as st

from actorq.models import MLPSpec
from actorq.quant import decode_policy, spec_to_proto
from actorq.quantizer.server import ParameterServer, parameter_server_service
from actorq.quantizer.store import PolicyStore
from actorq.redis_keys import RedisKeys
from actorq.rpc import GrpcServer, make_channel
from actorq.rpc.control import StatusSnapshot, control_service
from actorq.rpc.weight_stream import weight_chunks
from actorq.security.tls import PLAINTEXT
from actorq.v1 import control_pb2, control_pb2_grpc, policy_pb2
from actorq.v1 import parameter_server_pb2 as ps_pb2
from actorq.v1 import parameter_server_pb2_grpc as ps_grpc

# Statuses a well-behaved server may answer bad input with. UNKNOWN and INTERNAL are
# missing on purpose: they are what an unhandled exception in a handler becomes.
ALLOWED = {
    grpc.StatusCode.OK,
    grpc.StatusCode.INVALID_ARGUMENT,
    grpc.StatusCode.FAILED_PRECONDITION,
    grpc.StatusCode.NOT_FOUND,
    grpc.StatusCode.OUT_OF_RANGE,
    grpc.StatusCode.RESOURCE_EXHAUSTED,
    grpc.StatusCode.DATA_LOSS,
}
# A watch with nothing newer to announce stays open until the client's deadline.
WATCH_ALLOWED = ALLOWED | {grpc.StatusCode.DEADLINE_EXCEEDED}
UINT64_MAX = (1 << 64) - 1
METHODS = {
    "PublishWeights": "/actorq.v1.ParameterServer/PublishWeights",
    "WatchPolicy": "/actorq.v1.ParameterServer/WatchPolicy",
    "GetPolicy": "/actorq.v1.ParameterServer/GetPolicy",
    "GetStatus": "/actorq.v1.Control/GetStatus",
    "Stop": "/actorq.v1.Control/Stop",
}


class FuzzFailure(AssertionError):
    """An input broke a promise: a bad status, an unhealthy server or an inconsistent store."""


@dataclass
class FuzzTarget:
    """A real quantizer (ParameterServer + Control) on port 0 over a real Redis."""

    client: redis.Redis
    keys: RedisKeys = field(default_factory=lambda: RedisKeys(f"fuzz-{uuid.uuid4().hex}"))
    max_publish_bytes: int = 1 << 20

    def __post_init__(self) -> None:
        self.store = PolicyStore(self.client, self.keys, keep_versions=3)
        self.params = ParameterServer(
            self.store, chunk_bytes=4096, max_publish_bytes=self.max_publish_bytes
        )
        self.stop_reasons: list[str] = []
        self._lock = threading.Lock()
        self.server = GrpcServer(
            "127.0.0.1",
            0,
            [
                parameter_server_service(self.params),
                control_service(self._status, self._record_stop),
            ],
            max_workers=32,
            tls=PLAINTEXT,
        )
        self.server.start()
        self.channel = make_channel(f"127.0.0.1:{self.server.port}", PLAINTEXT)
        self.ps = ps_grpc.ParameterServerStub(self.channel)
        self.control = control_pb2_grpc.ControlStub(self.channel)
        self.health = health_pb2_grpc.HealthStub(self.channel)

    def _status(self) -> StatusSnapshot:
        latest = self.params.board.latest
        return StatusSnapshot(
            role="quantizer",
            instance_id="fuzz",
            policy_version=latest.version if latest else 0,
            counters=dict(self.params.counters),
        )

    def _record_stop(self, reason: str) -> None:
        with self._lock:  # a real service would stop; the fuzz target only records it
            self.stop_reasons.append(reason)

    # --- the checks every input must pass ------------------------------------------------
    def check_status(self, code: grpc.StatusCode, allowed: set[grpc.StatusCode], what: str):
        if code not in allowed:
            raise FuzzFailure(f"{what}: answered {code.name}, expected one of the handled codes")

    def check_healthy(self) -> None:
        reply = self.health.Check(health_pb2.HealthCheckRequest(service=""), timeout=5)
        if reply.status != health_pb2.HealthCheckResponse.SERVING:
            raise FuzzFailure(f"server not SERVING after the input: {reply.status}")
        self.control.GetStatus(control_pb2.GetStatusRequest(), timeout=5)

    def check_store(self) -> None:
        """No half-published version: what `latest` points at is complete and valid."""
        versions = self.store.stored_versions()
        latest = self.store.latest_version()
        if versions and latest != max(versions):
            raise FuzzFailure(f"latest is {latest} but stored versions are {versions}")
        if not versions and latest != 0:
            raise FuzzFailure(f"latest is {latest} with no stored version")
        for version in versions:
            policy = decode_policy(self.store.load(version))
            if policy.version != version:
                raise FuzzFailure(f"blob stored as {version} holds version {policy.version}")
            self.store.announcement(version)
        pattern = f"{self.keys.prefix}:policy:*"
        allowed = {self.keys.policy_latest.encode(), self.keys.policy_versions.encode()}
        for v in versions:
            allowed |= {
                self.keys.policy_blob(v).encode(),
                self.keys.policy_meta(v).encode(),
                self.keys.policy_delta(v).encode(),
            }
        stray = set(self.client.scan_iter(match=pattern, count=1000)) - allowed
        if stray:
            raise FuzzFailure(f"keys of unpublished versions left in Redis: {sorted(stray)[:4]}")

    def check_all(self) -> None:
        self.check_healthy()
        self.check_store()

    # --- calls --------------------------------------------------------------------------
    def publish(self, case: PublishInput) -> grpc.StatusCode:
        before = self.store.latest_version()
        try:
            reply = self.ps.PublishWeights(iter(case.stream(before)), timeout=10)
        except grpc.RpcError as exc:
            if self.store.latest_version() != before:
                raise FuzzFailure("a refused publication moved `latest`") from exc
            return exc.code()
        if self.store.latest_version() != reply.version or reply.version <= before:
            raise FuzzFailure(f"accepted version {reply.version} is not the new latest")
        return grpc.StatusCode.OK

    def get_policy(self, request: ps_pb2.GetPolicyRequest) -> grpc.StatusCode:
        try:
            chunks = list(self.ps.GetPolicy(request, timeout=10))
        except grpc.RpcError as exc:
            return exc.code()
        data = b"".join(c.data for c in chunks)
        if not chunks or len(data) != chunks[0].total_bytes:
            raise FuzzFailure("GetPolicy answered OK with an incomplete blob")
        decode_policy(data)
        return grpc.StatusCode.OK

    def watch(self, request: ps_pb2.WatchPolicyRequest, timeout: float = 0.05):
        call = self.ps.WatchPolicy(request, timeout=timeout)
        try:
            first = next(call)
        except grpc.RpcError as exc:
            return exc.code()
        except StopIteration:
            return grpc.StatusCode.OK
        finally:
            call.cancel()
        if first.version <= request.known_version:
            raise FuzzFailure(f"announced {first.version} to a watcher that knows {request}")
        return grpc.StatusCode.OK

    def get_status(self, request: control_pb2.GetStatusRequest) -> grpc.StatusCode:
        try:
            self.control.GetStatus(request, timeout=5)
        except grpc.RpcError as exc:
            return exc.code()
        return grpc.StatusCode.OK

    def stop(self, request: control_pb2.StopRequest) -> grpc.StatusCode:
        try:
            reply = self.control.Stop(request, timeout=5)
        except grpc.RpcError as exc:
            return exc.code()
        if not reply.accepted:
            raise FuzzFailure("Stop answered OK without accepting")
        return grpc.StatusCode.OK

    def raw(
        self, method: str, payloads: list[bytes], timeout: float = 10.0, stream_timeout=0.05
    ) -> grpc.StatusCode:
        """Send undecodable (or any) bytes to `method`, bypassing the client's message types.

        Server-streaming methods get `stream_timeout`: a valid watch may wait for news."""
        path = METHODS[method]
        try:
            if method == "PublishWeights":
                self.channel.stream_unary(path)(iter(payloads), timeout=timeout)
            elif method in ("WatchPolicy", "GetPolicy"):
                call = self.channel.unary_stream(path)(payloads[0], timeout=stream_timeout)
                try:
                    next(call, None)
                finally:
                    call.cancel()
            else:
                self.channel.unary_unary(path)(payloads[0], timeout=timeout)
        except grpc.RpcError as exc:
            return exc.code()
        return grpc.StatusCode.OK

    def close(self) -> None:
        self.params.close()
        self.channel.close()
        self.server.stop(0.2)
        stale = list(self.client.scan_iter(match=f"{self.keys.prefix}:*", count=1000))
        if stale:
            self.client.delete(*stale)


# --- strategies -----------------------------------------------------------------------
uint64 = st.one_of(
    st.integers(0, 8), st.integers(0, UINT64_MAX), st.sampled_from([UINT64_MAX, 1 << 53])
)
texts = st.one_of(st.text(max_size=40), st.text(max_size=5000), st.just("\x00\n\r\x1b[2J"))
garbage = st.one_of(
    st.binary(max_size=64),
    st.binary(min_size=1000, max_size=20000),
    st.sampled_from([b"\xff" * 16, b"\x0a\xff\xff\xff\xff\x0f", b"\x80" * 10, b"\x12\x05ab"]),
)
specs = st.builds(
    lambda obs, hidden, out: MLPSpec(obs_dim=obs, num_outputs=out, hidden=tuple(hidden)),
    st.integers(1, 6),
    st.lists(st.integers(1, 12), max_size=2),
    st.integers(1, 4),
)
MUTATIONS = (
    "none",
    "no_header",
    "header_twice",
    "truncate",
    "swap_chunks",
    "drop_chunk",
    "duplicate_chunk",
    "wrong_shape",
    "unknown_tensor",
    "bad_offset",
    "odd_length",
    "extra_bytes",
    "nan_inf",
    "huge_spec",
    "wrong_num_tensors",
    "bad_spec_fields",
    "empty_stream",
    "header_only",
)


@dataclass
class PublishInput:
    """A weight stream whose header version is set relative to the store's `latest` when
    sent (strategies may not read external state, so the rule travels with the input)."""

    chunks: list[ps_pb2.PublishChunk]
    version_rule: str  # next | rollback | ahead | max | zero
    k: int

    def stream(self, latest: int) -> list[ps_pb2.PublishChunk]:
        version = {
            "next": latest + 1,
            "rollback": max(latest - self.k, 0),
            "ahead": latest + 1 + self.k,
            "max": UINT64_MAX,
            "zero": 0,
        }[self.version_rule]
        out = []
        for chunk in self.chunks:
            if chunk.WhichOneof("item") == "header":
                chunk = ps_pb2.PublishChunk.FromString(chunk.SerializeToString())
                chunk.header.version = version
            out.append(chunk)
        return out


@st.composite
def publish_streams(draw: st.DrawFn) -> PublishInput:
    """A weight stream, valid or broken in one of MUTATIONS, for versions around `latest`."""
    spec = draw(specs)
    rule = draw(st.sampled_from(["next", "next", "rollback", "ahead", "max", "zero"]))
    k = draw(st.integers(0, 1000))
    precision = draw(st.one_of(st.sampled_from([0, 1, 2, 3]), st.integers(4, 2**31 - 1)))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    scale = draw(st.sampled_from([1.0, 1e-30, 1e30, 0.0]))
    weights = {
        name: (rng.standard_normal(shape) * scale).astype(np.float32)
        for name, shape in spec.weight_shapes().items()
    }
    header = ps_pb2.PublishHeader(
        version=1,
        learner_step=draw(uint64),
        precision=precision,
        spec=spec_to_proto(spec),
        num_tensors=len(weights),
    )
    chunk_bytes = draw(st.sampled_from([8, 64, 4096]))
    chunks = list(weight_chunks(header, weights, chunk_bytes=chunk_bytes))
    return PublishInput(_mutate(draw, chunks, draw(st.sampled_from(MUTATIONS))), rule, k)


def _mutate(draw: st.DrawFn, chunks: list[ps_pb2.PublishChunk], how: str):
    header, tensors = chunks[0], chunks[1:]
    pick = st.integers(0, len(tensors) - 1)
    if how == "no_header":
        return tensors
    if how == "header_twice":
        return [header, *tensors[: draw(pick)], header, *tensors[draw(pick) :]]
    if how == "truncate":
        return chunks[: draw(st.integers(1, len(chunks) - 1))]
    if how == "swap_chunks" and len(tensors) > 1:
        i, j = draw(pick), draw(pick)
        tensors[i], tensors[j] = tensors[j], tensors[i]
    elif how == "drop_chunk":
        tensors.pop(draw(pick))
    elif how == "duplicate_chunk":
        i = draw(pick)
        tensors.insert(i, tensors[i])
    elif how == "empty_stream":
        return []
    elif how == "header_only":
        return [header]
    elif how in ("huge_spec", "wrong_num_tensors", "bad_spec_fields"):
        _mutate_header(draw, header.header, how)
    elif how != "none":
        _mutate_tensor(draw, tensors[draw(pick)].tensor, how)
    return [header, *tensors]


def _mutate_header(draw: st.DrawFn, header: ps_pb2.PublishHeader, how: str) -> None:
    if how == "huge_spec":
        header.spec.hidden.append(draw(st.sampled_from([1 << 16, (1 << 32) - 1])))
        header.spec.obs_dim = draw(st.sampled_from([header.spec.obs_dim, (1 << 32) - 1]))
    elif how == "wrong_num_tensors":
        header.num_tensors = draw(st.integers(0, (1 << 32) - 1))
    else:
        header.spec.kind = draw(st.sampled_from(["mlp", "", "cnn", "\x00"]))
        header.spec.activation = draw(st.sampled_from(["relu", "", "tanh", "relu\x00"]))
        header.spec.obs_dim = draw(st.sampled_from([0, header.spec.obs_dim]))


def _mutate_tensor(draw: st.DrawFn, tensor: ps_pb2.TensorChunk, how: str) -> None:
    if how == "wrong_shape":
        del tensor.shape[:]
        tensor.shape.extend(draw(st.lists(st.integers(0, UINT64_MAX), max_size=3)))
    elif how == "unknown_tensor":
        tensor.name = draw(texts)
    elif how == "bad_offset":
        tensor.offset = draw(uint64)
    elif how == "odd_length":
        tensor.data = tensor.data[: max(len(tensor.data) - draw(st.integers(1, 3)), 0)]
    elif how == "extra_bytes":
        tensor.data += draw(st.binary(min_size=1, max_size=64))
    elif how == "nan_inf" and len(tensor.data) >= 4:
        bad = draw(st.sampled_from([math.nan, math.inf, -math.inf]))
        position = 4 * draw(st.integers(0, len(tensor.data) // 4 - 1))
        data = bytearray(tensor.data)
        data[position : position + 4] = struct.pack("<f", bad)
        tensor.data = bytes(data)


def get_policy_requests() -> st.SearchStrategy[ps_pb2.GetPolicyRequest]:
    return st.builds(ps_pb2.GetPolicyRequest, version=uint64, actor_id=texts)


def watch_requests() -> st.SearchStrategy[ps_pb2.WatchPolicyRequest]:
    return st.builds(ps_pb2.WatchPolicyRequest, actor_id=texts, known_version=uint64)


def stop_requests() -> st.SearchStrategy[control_pb2.StopRequest]:
    return st.builds(control_pb2.StopRequest, reason=texts)


def status_requests() -> st.SearchStrategy[control_pb2.GetStatusRequest]:
    return st.just(control_pb2.GetStatusRequest())


def raw_payloads() -> st.SearchStrategy[list[bytes]]:
    return st.lists(garbage, min_size=1, max_size=4)


def valid_stream(version: int, spec: MLPSpec | None = None) -> Iterator[ps_pb2.PublishChunk]:
    """A well-formed stream, to put the store in a state with versions to rollback from."""
    spec = spec or MLPSpec(obs_dim=4, num_outputs=2, hidden=(8,))
    rng = np.random.default_rng(version)
    weights = {
        n: rng.standard_normal(s).astype(np.float32) for n, s in spec.weight_shapes().items()
    }
    header = ps_pb2.PublishHeader(
        version=version,
        precision=policy_pb2.PRECISION_INT8,
        spec=spec_to_proto(spec),
        num_tensors=len(weights),
    )
    return iter(weight_chunks(header, weights))
