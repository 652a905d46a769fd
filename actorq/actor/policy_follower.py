"""Follow the quantizer's policy versions in a background thread.

The env loop reads `follower.current` once per step and never waits: a new version is
fetched, verified (sha256, shapes) and built off the loop's thread, then swapped in with
one reference assignment. A bad blob is refused and counted, and the previous policy is
kept. The follower asks for each version as a delta from the one it holds; a delta that
does not apply or verify is counted and the full blob fetched instead. When the
quantizer is away the thread reconnects with backoff while the actor keeps acting on
its last good policy.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

import grpc

from actorq import metrics
from actorq.breakdown import POLICY_PHASES, PhaseClock
from actorq.models import MLPSpec
from actorq.quant import BlobError, PolicyArrays, decode_blob, precision_name
from actorq.quant.delta import apply_delta
from actorq.quant.numpy_mlp import NumpyMLP, numpy_mlp
from actorq.rpc import make_channel
from actorq.security.signing import NO_KEYS, PolicyKeys
from actorq.security.tls import TlsConfig
from actorq.torch_threads import inherit_torch_threads
from actorq.v1 import parameter_server_pb2 as ps_pb2
from actorq.v1 import parameter_server_pb2_grpc as ps_grpc

if TYPE_CHECKING:
    import torch

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LoadedPolicy:
    """A verified policy ready for inference."""

    version: int
    precision: str
    module: torch.nn.Module | None
    """torch's module; None where the forward runs without torch (numpy or numba's, built
    by actorq.actor.fast_act), until `torch_module()` builds it."""
    blob_bytes: int
    """Bytes fetched for this version (a delta's size when it came as one)."""
    arrays: PolicyArrays | None = None
    """The decoded version: the base the next delta applies to."""
    kind: str = "full"
    """How it came: "full", "sparse" (a full blob with sparse layers) or "delta"."""

    numpy_forward: NumpyMLP | None = None
    """The forward in numpy (actorq.quant.numpy_mlp), built and checked by the follower."""

    def torch_module(self) -> torch.nn.Module:
        """The torch module, built (and torch imported) in the calling thread if the
        follower left it out."""
        if self.module is None:
            if self.arrays is None:
                raise ValueError(f"policy version {self.version} has neither module nor arrays")
            object.__setattr__(self, "module", build_module(self.arrays))
        assert self.module is not None
        return self.module


def build_module(arrays: PolicyArrays) -> torch.nn.Module:
    """`build_policy_module` with torch loaded and this thread's torch threads set."""
    inherit_torch_threads(load=True)
    from actorq.quant.policy_module import build_policy_module

    return build_policy_module(arrays)


class _Newest:
    """The newest announcement read from a WatchPolicy stream, kept by a reader thread;
    older unread ones are dropped. The stream's end, or its error, is handed over too."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._announcement: ps_pb2.PolicyAnnouncement | None = None
        self._error: grpc.RpcError | None = None
        self.ended = False

    def read(self, call: grpc.Future) -> None:
        try:
            for announcement in call:
                with self._cond:
                    held = self._announcement
                    if held is None or announcement.version > held.version:
                        self._announcement = announcement
                    self._cond.notify()
        except grpc.RpcError as exc:
            with self._cond:
                self._error = exc
        finally:
            with self._cond:
                self.ended = True
                self._cond.notify()

    def take(self, timeout: float) -> ps_pb2.PolicyAnnouncement | None:
        """The newest unread announcement (None if none came within `timeout`); the
        stream's error once it failed and nothing newer is left."""
        with self._cond:
            if self._announcement is None and not self.ended:
                self._cond.wait(timeout)
            announcement, self._announcement = self._announcement, None
            if announcement is None and self._error is not None:
                raise self._error
            return announcement


class PolicyFollower:
    """Keeps `current` at the newest valid version the quantizer announces."""

    def __init__(
        self,
        address: str,
        instance_id: str,
        expected_spec: MLPSpec | None = None,
        max_backoff: float = 2.0,
        keys: PolicyKeys = NO_KEYS,  # with keys, unsigned or badly signed blobs are refused
        tls: TlsConfig | None = None,  # None: as ACTORQ_TLS_* configure this process
        numpy_act: bool = True,  # build torch modules only for what numpy does not run
    ) -> None:
        self._numpy_act = numpy_act
        self._address = address
        self._keys = keys
        self._tls = tls
        self._instance = instance_id
        self._spec = expected_spec
        self._max_backoff = max_backoff
        self._stop = threading.Event()
        self._call: grpc.Future | None = None
        self._thread = threading.Thread(target=self._run, name="policy-follower", daemon=True)
        self.current: LoadedPolicy | None = None
        self.latest_announced = 0
        self.rejections = 0
        self.rejections_by_reason: dict[str, int] = {}
        self.loads = 0
        self.bytes_received = 0
        self.bytes_by_kind = {"full": 0, "sparse": 0, "delta": 0}
        self.delta_fallbacks = 0
        self._loaded_event = threading.Event()
        self.clock = PhaseClock(POLICY_PHASES, metrics.ACTOR_POLICY_PHASE_SECONDS, (instance_id,))

    def start(self) -> PolicyFollower:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._call is not None:
            self._call.cancel()
        self._thread.join(timeout=5.0)

    def wait_for_policy(self, timeout: float) -> bool:
        """True once any policy has been loaded (or already was)."""
        return self._loaded_event.wait(timeout)

    def _run(self) -> None:
        inherit_torch_threads()  # for the modules it builds, once torch is loaded
        backoff = 0.1
        while not self._stop.is_set():
            channel = make_channel(self._address, self._tls)
            try:
                self._follow(ps_grpc.ParameterServerStub(channel))
                backoff = 0.1
            except grpc.RpcError as exc:
                if self._stop.is_set():
                    break
                metrics.ACTOR_CONNECTION_ERRORS.labels(self._instance, "quantizer").inc()
                log.debug("quantizer %s unavailable (%s); retrying", self._address, exc.code())
                self._stop.wait(backoff)
                backoff = min(backoff * 2, self._max_backoff)
            finally:
                channel.close()

    def _follow(self, stub: ps_grpc.ParameterServerStub) -> None:
        """Load the newest announced version until the stream ends. A thread of its own
        reads announcements, so only the newest is fetched (BENCHMARKS.md 22)."""
        known = self.current.version if self.current else 0
        call = stub.WatchPolicy(
            ps_pb2.WatchPolicyRequest(actor_id=self._instance, known_version=known)
        )
        self._call = call
        newest = _Newest()
        reader = threading.Thread(
            target=newest.read, args=(call,), name="policy-announcements", daemon=True
        )
        reader.start()
        try:
            while not self._stop.is_set():
                announcement = newest.take(timeout=0.5)  # raises what ended the stream
                if announcement is None:
                    if newest.ended:
                        return
                    continue
                self.latest_announced = max(self.latest_announced, announcement.version)
                current = self.current.version if self.current else 0
                metrics.ACTOR_POLICY_LAG.labels(self._instance).set(self.latest_announced - current)
                if announcement.version > current:
                    self._load(stub, announcement)
        finally:
            call.cancel()
            reader.join(timeout=1.0)

    def _fetch(
        self, stub: ps_grpc.ParameterServerStub, version: int, base_version: int = 0
    ) -> tuple[bytes, bool]:
        request = ps_pb2.GetPolicyRequest(
            version=version, actor_id=self._instance, base_version=base_version
        )
        return fetch_blob(stub, request)

    def _load(
        self, stub: ps_grpc.ParameterServerStub, announcement: ps_pb2.PolicyAnnouncement
    ) -> None:
        started = time.perf_counter()
        self.clock.start()
        try:
            arrays, kind, size = self._receive(stub, announcement)
            if arrays.version != announcement.version:
                raise BlobError(
                    f"blob holds version {arrays.version}, expected {announcement.version}"
                )
            # Off the loop's thread: numpy's forward, or torch's module only where numpy's
            # cannot run (numba's, where it runs, is built by the loop: actorq.actor.fast_act).
            forward = numpy_mlp(arrays) if self._numpy_act else None
            module = build_module(arrays) if forward is None else None
            self.clock.mark("build")
        except grpc.RpcError as exc:
            if exc.code() == grpc.StatusCode.NOT_FOUND:  # already trimmed; a newer one is coming
                return
            raise
        except (BlobError, ValueError) as exc:
            self._reject(announcement.version, exc)
            return
        self.bytes_received += size
        self.bytes_by_kind[kind] += size
        metrics.ACTOR_POLICY_BYTES_RECEIVED.labels(self._instance, kind).inc(size)
        self.current = LoadedPolicy(
            arrays.version, precision_name(arrays.precision), module, size, arrays, kind, forward
        )
        self.loads += 1
        self._loaded_event.set()
        metrics.ACTOR_POLICY_LOAD_SECONDS.labels(self._instance).observe(
            time.perf_counter() - started
        )
        metrics.ACTOR_POLICY_VERSION.labels(self._instance).set(arrays.version)
        metrics.ACTOR_POLICY_LAG.labels(self._instance).set(self.latest_announced - arrays.version)

    def _receive(
        self, stub: ps_grpc.ParameterServerStub, announcement: ps_pb2.PolicyAnnouncement
    ) -> tuple[PolicyArrays, str, int]:
        """(decoded version, how it came, bytes fetched): a delta from the held version
        when the server has one, else (or when the delta fails) the full blob."""
        held = self.current.arrays if self.current else None
        version = announcement.version
        envelope, is_delta = self._fetch(stub, version, held.version if held else 0)
        self.clock.mark("policy_pull")
        if is_delta:
            arrays = self._delta_target(held, envelope, announcement)
            self.clock.mark("verify_deserialize")
            if arrays is not None:
                return arrays, "delta", len(envelope)
            envelope, _ = self._fetch(stub, version)
            self.clock.mark("policy_pull")
        arrays = decode_blob(envelope, self._spec, self._keys)
        self.clock.mark("verify_deserialize")
        return arrays, arrays.kind, len(envelope)

    def _delta_target(
        self,
        held: PolicyArrays | None,
        envelope: bytes,
        announcement: ps_pb2.PolicyAnnouncement,
    ) -> PolicyArrays | None:
        """The announced version rebuilt from a delta, or None (counted) if it fails."""
        try:
            if held is None:
                raise BlobError("a delta arrived but no version is held")
            return apply_delta(held, envelope, self._keys, expected_sha256=announcement.sha256)
        except BlobError as exc:
            self.delta_fallbacks += 1
            reason = type(exc).__name__
            metrics.ACTOR_POLICY_DELTA_FALLBACKS.labels(self._instance, reason).inc()
            log.info(
                "delta to version %d refused (%s); fetching the full blob",
                announcement.version,
                exc,
            )
            return None

    def _reject(self, version: int, exc: Exception) -> None:
        self.rejections += 1
        reason = type(exc).__name__
        seen = self.rejections_by_reason.get(reason, 0) + 1
        self.rejections_by_reason[reason] = seen
        metrics.ACTOR_POLICY_REJECTIONS.labels(self._instance, reason).inc()
        kept = self.current.version if self.current else 0
        # Logged once per reason: a forger or a corrupt store must not flood the logs; the
        # metric counts every refusal.
        level = logging.WARNING if seen == 1 else logging.DEBUG
        log.log(
            level,
            "refused policy version %d (%s: %s); keeping version %d%s",
            version,
            reason,
            exc,
            kept,
            "; further refusals for this reason are counted, not logged" if seen == 1 else "",
        )


def fetch_blob(
    stub: ps_grpc.ParameterServerStub, request: ps_pb2.GetPolicyRequest
) -> tuple[bytes, bool]:
    """(envelope bytes, whether they are a delta from request.base_version), the chunks of
    the GetPolicy stream checked for order, version, length and an unasked-for delta."""
    parts: list[bytes] = []
    expected_offset = 0
    total = 0
    kinds: set[int] = set()
    version = request.version
    for chunk in stub.GetPolicy(request, timeout=30.0):
        if chunk.offset != expected_offset or chunk.version != version:
            raise BlobError(
                f"chunk for version {chunk.version} at offset {chunk.offset} out of order"
            )
        parts.append(chunk.data)
        kinds.add(chunk.kind)
        expected_offset += len(chunk.data)
        total = chunk.total_bytes
    if expected_offset != total:
        raise BlobError(f"blob truncated: got {expected_offset} of {total} bytes")
    is_delta = ps_pb2.BLOB_KIND_DELTA in kinds
    if is_delta and (len(kinds) > 1 or not request.base_version):
        raise BlobError(f"server sent a delta for version {version} that was not asked for")
    return b"".join(parts), is_delta
