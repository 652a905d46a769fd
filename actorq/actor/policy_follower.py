"""Follow the quantizer's policy versions in a background thread.

The env loop reads `follower.current` once per step and never waits: a new version is
fetched, verified (sha256, shapes) and built off the loop's thread, then swapped in with
one reference assignment. A bad blob is refused and counted, and the previous policy is
kept. When the quantizer is away the thread reconnects with backoff while the actor keeps
acting on its last good policy.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass

import grpc
import torch

from actorq import metrics
from actorq.models import MLPSpec
from actorq.quant import BlobError, build_policy_module, decode_policy, precision_name
from actorq.rpc import make_channel
from actorq.security.signing import NO_KEYS, PolicyKeys
from actorq.security.tls import TlsConfig
from actorq.torch_threads import inherit_torch_threads
from actorq.v1 import parameter_server_pb2 as ps_pb2
from actorq.v1 import parameter_server_pb2_grpc as ps_grpc

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LoadedPolicy:
    """A verified policy ready for inference."""

    version: int
    precision: str
    module: torch.nn.Module
    blob_bytes: int


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
    ) -> None:
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
        self._loaded_event = threading.Event()

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
        inherit_torch_threads()  # it builds each policy's modules
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
        known = self.current.version if self.current else 0
        call = stub.WatchPolicy(
            ps_pb2.WatchPolicyRequest(actor_id=self._instance, known_version=known)
        )
        self._call = call
        for announcement in call:
            self.latest_announced = max(self.latest_announced, announcement.version)
            current = self.current.version if self.current else 0
            metrics.ACTOR_POLICY_LAG.labels(self._instance).set(self.latest_announced - current)
            if announcement.version > current:
                self._load(stub, announcement)
            if self._stop.is_set():
                call.cancel()
                return

    def _fetch(self, stub: ps_grpc.ParameterServerStub, version: int) -> bytes:
        parts: list[bytes] = []
        expected_offset = 0
        total = 0
        for chunk in stub.GetPolicy(
            ps_pb2.GetPolicyRequest(version=version, actor_id=self._instance), timeout=30.0
        ):
            if chunk.offset != expected_offset or chunk.version != version:
                raise BlobError(
                    f"chunk for version {chunk.version} at offset {chunk.offset} out of order"
                )
            parts.append(chunk.data)
            expected_offset += len(chunk.data)
            total = chunk.total_bytes
        if expected_offset != total:
            raise BlobError(f"blob truncated: got {expected_offset} of {total} bytes")
        return b"".join(parts)

    def _load(
        self, stub: ps_grpc.ParameterServerStub, announcement: ps_pb2.PolicyAnnouncement
    ) -> None:
        started = time.perf_counter()
        try:
            envelope = self._fetch(stub, announcement.version)
        except grpc.RpcError as exc:
            if exc.code() == grpc.StatusCode.NOT_FOUND:  # already trimmed; a newer one is coming
                return
            raise
        try:
            policy = decode_policy(envelope, self._spec, self._keys)
            if policy.version != announcement.version:
                raise BlobError(
                    f"blob holds version {policy.version}, expected {announcement.version}"
                )
            module = build_policy_module(policy)
        except (BlobError, ValueError) as exc:
            self._reject(announcement.version, exc)
            return
        self.bytes_received += len(envelope)
        self.current = LoadedPolicy(
            policy.version, precision_name(policy.precision), module, len(envelope)
        )
        self.loads += 1
        self._loaded_event.set()
        metrics.ACTOR_POLICY_LOAD_SECONDS.labels(self._instance).observe(
            time.perf_counter() - started
        )
        metrics.ACTOR_POLICY_VERSION.labels(self._instance).set(policy.version)
        metrics.ACTOR_POLICY_LAG.labels(self._instance).set(self.latest_announced - policy.version)

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
