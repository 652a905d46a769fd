"""Stream fp32 weights to the quantizer from a background thread.

The training loop hands over a snapshot and goes on; if a newer snapshot arrives before
the previous one was sent, the older one is dropped (actors only want the newest).
Versions are assigned here and only advance on a successful publication, so they stay
strictly increasing across learner restarts (the start version comes from Redis and the
checkpoint, whichever is newer).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

import grpc
import numpy as np

from actorq import metrics
from actorq.config import LearnerSettings
from actorq.models import MLPSpec
from actorq.quant import parse_precision, spec_to_proto
from actorq.quantizer.store import PolicyStore
from actorq.redis_keys import RedisKeys
from actorq.rpc import make_channel
from actorq.rpc.weight_stream import weight_chunks
from actorq.security.tls import TlsConfig
from actorq.v1 import parameter_server_pb2 as ps_pb2
from actorq.v1 import parameter_server_pb2_grpc as ps_grpc

log = logging.getLogger(__name__)


@dataclass
class Snapshot:
    learner_step: int
    weights: dict[str, np.ndarray]


class PublishPacer:
    """At most one publication per `min_seconds` of wall clock (0: no floor). A fast
    learner would otherwise make dozens of versions a second, each one quantized, stored,
    fetched and rebuilt by every actor, CPU the learner's own updates then lack."""

    def __init__(self, min_seconds: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.min_seconds = min_seconds
        self._clock = clock
        self._last = -float("inf")

    def ready(self) -> bool:
        """True (and the clock restarts) when `min_seconds` passed since the last True."""
        now = self._clock()
        if now - self._last < self.min_seconds:
            return False
        self._last = now
        return True


class WeightsPublisher:
    """Publishes the newest snapshot; `version` is the last version the quantizer took."""

    def __init__(
        self,
        address: str,
        spec: MLPSpec,
        precision: int,
        start_version: int,
        latest_stored: Callable[[], int],  # reads Redis's `latest` after a refusal
        tls: TlsConfig | None = None,  # None: as ACTORQ_TLS_* configure this process
    ) -> None:
        self._stub = ps_grpc.ParameterServerStub(make_channel(address, tls))
        self._spec = spec
        self.precision = precision  # what the quantizer encodes; settling certifies at it
        self._latest_stored = latest_stored
        self.version = start_version
        self.failures = 0
        self.blob_bytes = 0
        # Weights of the newest published versions, kept while they fit in this many bytes
        # (0 = none): settling once solved rolls back to the version the evaluator measured.
        self.keep_weights_bytes = 0
        self._recent: OrderedDict[int, dict[str, np.ndarray]] = OrderedDict()
        self._recent_lock = threading.Lock()
        self._slot: Snapshot | None = None
        self._cond = threading.Condition()
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="publisher", daemon=True)
        self._thread.start()

    def submit(self, snapshot: Snapshot) -> None:
        with self._cond:
            self._slot = snapshot
            self._cond.notify()

    def publish_now(self, snapshot: Snapshot, timeout: float = 30.0) -> bool:
        """Synchronous publication (start-up and shutdown)."""
        return self._publish(snapshot, timeout)

    def publish_first(self, snapshot: Callable[[], Snapshot], stop: threading.Event) -> None:
        """Publish the first version, retrying with backoff until the quantizer takes it
        (it may start after the learner) or `stop` is set."""
        backoff = 0.1
        while not stop.is_set() and not self.publish_now(snapshot()):
            log.warning("quantizer not ready; retrying the first publication in %.1fs", backoff)
            stop.wait(backoff)
            backoff = min(backoff * 2, 2.0)

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify()
        self._thread.join(timeout=10.0)

    def _run(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._closed or self._slot is not None)
                if self._closed:
                    return
                snapshot, self._slot = self._slot, None
            assert snapshot is not None
            self._publish(snapshot, timeout=30.0)

    def _publish(self, snapshot: Snapshot, timeout: float) -> bool:
        version = self.version + 1
        header = ps_pb2.PublishHeader(
            version=version,
            learner_step=snapshot.learner_step,
            precision=self.precision,  # type: ignore[arg-type]
            spec=spec_to_proto(self._spec),
            num_tensors=len(snapshot.weights),
        )
        started = time.perf_counter()
        try:
            reply = self._stub.PublishWeights(
                weight_chunks(header, snapshot.weights), timeout=timeout
            )
        except grpc.RpcError as exc:
            return self._on_error(exc, version)
        self.version = reply.version
        self.blob_bytes = reply.blob_bytes
        self._remember(reply.version, snapshot.weights)
        metrics.LEARNER_PUBLISH_SECONDS.observe(time.perf_counter() - started)
        metrics.LEARNER_POLICY_VERSION.set(reply.version)
        return True

    def weights_of(self, version: int) -> dict[str, np.ndarray] | None:
        """The fp32 weights published as `version`, if still kept (see keep_weights_bytes)."""
        with self._recent_lock:
            return self._recent.get(version)

    def hold(self, version: int, weights: dict[str, np.ndarray]) -> None:
        """Keep `version`'s weights as if just published (a checkpoint's candidates)."""
        self._remember(version, weights)

    def _remember(self, version: int, weights: dict[str, np.ndarray]) -> None:
        size = sum(w.nbytes for w in weights.values())
        if size > self.keep_weights_bytes:
            return
        with self._recent_lock:
            self._recent[version] = weights  # snapshots are copies, never reused
            while len(self._recent) * size > self.keep_weights_bytes:
                self._recent.popitem(last=False)

    def _on_error(self, exc: grpc.RpcError, version: int) -> bool:
        self.failures += 1
        if exc.code() == grpc.StatusCode.FAILED_PRECONDITION:
            # Someone stored a newer version (e.g. before our restart): skip past it.
            self.version = max(self.version, self._latest_stored())
            log.warning(
                "version %d refused (%s); continuing after %d", version, exc.details(), self.version
            )
        else:
            log.warning("publishing version %d failed: %s %s", version, exc.code(), exc.details())
        return False


def learner_publisher(
    settings: LearnerSettings, spec: MLPSpec, client, keys: RedisKeys
) -> WeightsPublisher:
    """The publisher of a learner service (off- or on-policy): its quantizer, precision and
    TLS from the settings, numbering versions after the newest one Redis holds."""
    store = PolicyStore(client, keys)
    return WeightsPublisher(
        settings.quantizer_addr,
        spec,
        parse_precision(settings.precision),
        start_version=store.latest_version(),
        latest_stored=store.latest_version,
        tls=TlsConfig.from_settings(settings),
    )
