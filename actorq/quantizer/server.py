"""ParameterServer (plain object) and its gRPC servicer (conversion only)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping

import grpc

from actorq import metrics
from actorq.breakdown import PUBLISH_PHASES, PhaseClock
from actorq.guard import GuardStats, PolicyGuard
from actorq.quant import EncodedPolicy, WeightsError, encode_policy, precision_name
from actorq.quantizer.deltas import DeltaMaker
from actorq.quantizer.store import Announcement, PolicyStore, check_version
from actorq.rpc.errors import DataLoss, FailedPrecondition, abort_on_error
from actorq.rpc.guard import MalformedRequest
from actorq.rpc.weight_stream import PublishError, assemble
from actorq.security.signing import NO_KEYS, PolicyKeys
from actorq.security.tls import check_peer_allowed, peer_names
from actorq.v1 import parameter_server_pb2 as ps_pb2
from actorq.v1 import parameter_server_pb2_grpc as ps_grpc
from actorq.v1 import policy_pb2

log = logging.getLogger(__name__)


class VersionBoard:
    """The newest announcement, and a way to wait for a newer one."""

    def __init__(self, latest: Announcement | None = None) -> None:
        self._cond = threading.Condition()
        self._latest = latest
        self._closed = False

    @property
    def latest(self) -> Announcement | None:
        return self._latest

    def post(self, announcement: Announcement) -> None:
        with self._cond:
            if self._latest is None or announcement.version > self._latest.version:
                self._latest = announcement
                self._cond.notify_all()

    def wait_newer(self, known: int, timeout: float) -> Announcement | None:
        """The latest announcement if newer than `known`, waiting up to `timeout` s."""
        with self._cond:
            self._cond.wait_for(
                lambda: self._closed or (self._latest is not None and self._latest.version > known),
                timeout=timeout,
            )
            if self._latest is not None and self._latest.version > known:
                return self._latest
            return None

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    @property
    def closed(self) -> bool:
        return self._closed


def _rejection_reason(exc: Exception) -> str:
    if isinstance(exc, DataLoss):
        return "corrupt_store"
    if isinstance(exc, FailedPrecondition):
        return "version_rollback"
    if isinstance(exc, WeightsError):
        return "invalid_weights"
    if isinstance(exc, PublishError | MalformedRequest):
        return "malformed_stream"
    return "invalid_header"


class ParameterServer:
    """Validates and quantizes published weights, stores versions, serves blobs."""

    def __init__(
        self,
        store: PolicyStore,
        chunk_bytes: int = 1 << 20,
        max_publish_bytes: int = 1 << 30,
        default_precision: int = policy_pb2.PRECISION_INT8,
        keys: PolicyKeys = NO_KEYS,  # with a current key every stored blob is signed
        guard: PolicyGuard | None = None,  # measures each version vs fp32, falls back
        deltas: bool = True,  # False: no delta broadcasts, every version goes out full
    ) -> None:
        self.store = store
        self.guard = guard
        self.guard_stats = GuardStats()
        self.keys = keys
        self.chunk_bytes = chunk_bytes
        self.max_publish_bytes = max_publish_bytes
        self.default_precision = default_precision
        self.board = VersionBoard(self._stored_latest())
        self._publish_lock = threading.Lock()
        self.counters = {"publishes": 0, "rejections": 0, "blobs_served": 0}
        self._logged_reasons: set[str] = set()
        self.bytes_sent = 0
        self.fp32_bytes_sent = 0
        self.clock = PhaseClock(PUBLISH_PHASES, metrics.QUANTIZER_PUBLISH_PHASE_SECONDS)
        self.deltas = DeltaMaker(store, keys, enabled=deltas)

    def _stored_latest(self) -> Announcement | None:
        """What Redis already holds, so a restarted quantizer serves it at once."""
        try:
            return self.store.announcement(0)
        except LookupError:
            return None
        except DataLoss as exc:  # serve nothing until the learner's next version
            log.warning("not serving the stored latest version: %s", exc)
            return None

    def publish(self, chunks: Iterable[ps_pb2.PublishChunk]) -> EncodedPolicy:
        try:
            with self._publish_lock:
                encoded, announcement = self._publish_locked(chunks)
        except (ValueError, FailedPrecondition, DataLoss) as exc:  # nothing was stored
            self.count_rejection(_rejection_reason(exc), exc)
            raise
        self.board.post(announcement)  # what was just stored; no re-read
        self._record_publish(encoded)
        self.deltas.record(announcement)
        return encoded

    def count_rejection(self, reason: str, exc: Exception) -> None:
        """Every refusal is counted; each reason is logged once (a bad client cannot flood
        the log), later ones at DEBUG."""
        self.counters["rejections"] += 1
        metrics.QUANTIZER_PUBLISH_REJECTIONS.labels(reason).inc()
        first = reason not in self._logged_reasons
        self._logged_reasons.add(reason)
        log.log(
            logging.WARNING if first else logging.DEBUG,
            "refused a publication (%s): %s%s",
            reason,
            exc,
            "; further refusals for this reason are counted, not logged" if first else "",
        )

    def _publish_locked(
        self, chunks: Iterable[ps_pb2.PublishChunk]
    ) -> tuple[EncodedPolicy, Announcement]:
        started = time.perf_counter()
        self.clock.start()
        assembled = assemble(chunks, self.max_publish_bytes)
        self.clock.mark("assemble")
        header = assembled.header
        try:
            check_version(header.version)
        except ValueError as exc:
            raise PublishError(str(exc)) from None
        latest = self.store.latest_version()
        if header.version <= latest:  # cheap check before spending time quantizing
            raise FailedPrecondition(
                f"version {header.version} is not newer than the stored version {latest}"
            )
        precision = header.precision or self.default_precision

        def encode(fallbacks: Mapping[str, int] | None = None) -> EncodedPolicy:
            return encode_policy(
                assembled.weights,
                assembled.spec,
                precision,
                header.version,
                header.learner_step,
                keys=self.keys,
                fallback_layers=fallbacks,
            )

        encoded = encode()
        self.clock.mark("quantize")
        meta: dict[str, str] = {}
        guarded = self.guard is not None and self.guard.covers(assembled.spec)
        if guarded and precision != policy_pb2.PRECISION_FP32:
            result = self.guard.check(assembled.weights, assembled.spec, encoded, encode)
            encoded, meta = result.encoded, result.meta()
            self.guard_stats.record(result)
        self.clock.mark("guard")
        # The delta is taken from what was stored (and so what actors hold), guard
        # fallbacks included; a version whose layer types changed goes full (make_delta).
        delta = self.deltas.delta_to(encoded, latest)
        announcement = self.store.save(encoded, delta, meta)
        self.deltas.stored(encoded)
        self.clock.mark("store")
        metrics.QUANTIZER_QUANTIZE_SECONDS.observe(time.perf_counter() - started)
        return encoded, announcement

    def _record_publish(self, encoded: EncodedPolicy) -> None:
        name = precision_name(encoded.precision)
        self.counters["publishes"] += 1
        metrics.QUANTIZER_PUBLISHES.labels(name).inc()
        metrics.QUANTIZER_POLICY_VERSION.set(encoded.version)
        metrics.QUANTIZER_BLOB_BYTES.labels(name).set(encoded.blob_bytes)
        metrics.QUANTIZER_FP32_EQUIVALENT_BYTES.set(encoded.fp32_equivalent_bytes)
        metrics.QUANTIZER_QUANT_ERROR.labels(name).set(encoded.quantization_error)

    def blob_chunks(self, version: int, base_version: int = 0) -> Iterator[ps_pb2.BlobChunk]:
        """The envelope of `version` (0 = latest) in chunks, as a delta when one from
        `base_version` is stored (it is only stored when smaller); counts bytes when done."""
        announcement = self.store.announcement(version)
        delta = self.store.load_delta(announcement, base_version)
        envelope = delta if delta is not None else self.store.load(announcement.version)
        kind = ps_pb2.BLOB_KIND_DELTA if delta is not None else ps_pb2.BLOB_KIND_FULL
        total = len(envelope)
        for offset in range(0, total, self.chunk_bytes):
            yield ps_pb2.BlobChunk(
                version=announcement.version,
                total_bytes=total,
                offset=offset,
                data=envelope[offset : offset + self.chunk_bytes],
                kind=kind,
                base_version=base_version if delta is not None else 0,
            )
        self._record_broadcast(announcement, total)
        self.deltas.record_broadcast(announcement, total, delta is not None)

    def _record_broadcast(self, announcement: Announcement, sent: int) -> None:
        name = precision_name(announcement.precision)
        fp32 = announcement.fp32_equivalent_bytes
        self.counters["blobs_served"] += 1
        self.bytes_sent += sent
        self.fp32_bytes_sent += fp32
        metrics.QUANTIZER_BROADCAST_BYTES.labels(name).inc(sent)
        metrics.QUANTIZER_BROADCAST_FP32_BYTES.labels(name).inc(fp32)
        metrics.QUANTIZER_BYTES_SAVED.labels(name).inc(max(fp32 - sent, 0))
        metrics.QUANTIZER_FANOUT_BYTES.labels(name).observe(sent)

    def watch(
        self, known: int, is_active: Callable[[], bool], poll_seconds: float = 0.5
    ) -> Iterator[Announcement]:
        """Yield each announcement newer than `known` until the caller goes away."""
        metrics.QUANTIZER_WATCHERS.inc()
        try:
            while is_active() and not self.board.closed:
                announcement = self.board.wait_newer(known, poll_seconds)
                if announcement is not None:
                    known = announcement.version
                    yield announcement
        finally:
            metrics.QUANTIZER_WATCHERS.dec()

    def close(self) -> None:
        self.board.close()


def _announcement_message(a: Announcement) -> ps_pb2.PolicyAnnouncement:
    return ps_pb2.PolicyAnnouncement(
        version=a.version,
        precision=a.precision,  # type: ignore[arg-type]
        blob_bytes=a.blob_bytes,
        sha256=a.sha256,
        learner_step=a.learner_step,
    )


class ParameterServerServicer(ps_grpc.ParameterServerServicer):
    """Converts messages and delegates to ParameterServer; errors map to gRPC status."""

    def __init__(self, server: ParameterServer, publishers: frozenset[str] = frozenset()) -> None:
        self._server = server
        self._publishers = publishers  # mTLS certificate names allowed to publish; empty = any

    def PublishWeights(
        self, request_iterator: Iterator[ps_pb2.PublishChunk], context: grpc.ServicerContext
    ) -> ps_pb2.PublishReply:
        if not check_peer_allowed(context, self._publishers, "PublishWeights"):
            peer = ", ".join(sorted(peer_names(context))) or "no name"
            self._server.count_rejection("permission_denied", PermissionError(peer))
            context.abort(
                grpc.StatusCode.PERMISSION_DENIED,
                "this client's certificate may not publish weights (allowed: "
                f"{', '.join(sorted(self._publishers))})",
            )
        with abort_on_error(context):
            encoded = self._server.publish(request_iterator)
            return ps_pb2.PublishReply(
                version=encoded.version,
                blob_bytes=encoded.blob_bytes,
                fp32_equivalent_bytes=encoded.fp32_equivalent_bytes,
                quantization_error=encoded.quantization_error,
            )
        raise AssertionError("unreachable")  # abort_on_error always raises on error

    def WatchPolicy(
        self, request: ps_pb2.WatchPolicyRequest, context: grpc.ServicerContext
    ) -> Iterator[ps_pb2.PolicyAnnouncement]:
        for announcement in self._server.watch(request.known_version, context.is_active):
            yield _announcement_message(announcement)

    def GetPolicy(
        self, request: ps_pb2.GetPolicyRequest, context: grpc.ServicerContext
    ) -> Iterator[ps_pb2.BlobChunk]:
        with abort_on_error(context):
            yield from self._server.blob_chunks(request.version, request.base_version)


def parameter_server_service(
    server: ParameterServer, publishers: frozenset[str] = frozenset()
) -> tuple[str, Callable[[grpc.Server], None]]:
    """(service name, registrar) for `GrpcServer`; `publishers` limits PublishWeights to
    clients whose (mutual TLS) certificate names one of them."""
    servicer = ParameterServerServicer(server, publishers)
    name = ps_pb2.DESCRIPTOR.services_by_name["ParameterServer"].full_name
    return name, lambda s: ps_grpc.add_ParameterServerServicer_to_server(servicer, s)
