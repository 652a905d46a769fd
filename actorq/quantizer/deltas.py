"""The quantizer's side of delta broadcasts, and the byte counts by broadcast kind.

At each publish the new version is diffed against the previous stored one (kept in
memory; read back from Redis after a restart) and the delta is stored next to the full
blob when it is smaller. Actors that hold the previous version get the delta; any other
actor, or one whose delta fails, gets the full blob.
"""

from __future__ import annotations

import logging
import math
import statistics
from collections import deque

from actorq import metrics
from actorq.quant import BlobError, EncodedPolicy, PolicyArrays, decode_blob
from actorq.quant.delta import make_delta
from actorq.quantizer.store import Announcement, PolicyStore, StoredDelta
from actorq.security.signing import PolicyKeys

log = logging.getLogger(__name__)

KINDS = ("full", "sparse", "delta")
"""Broadcast kinds: a full dense blob, a full blob with sparse layers, a delta."""


class DeltaMaker:
    """Diffs each new version against the previous one; keeps the size statistics."""

    def __init__(
        self, store: PolicyStore, keys: PolicyKeys, history: int = 10_000, enabled: bool = True
    ) -> None:
        self._store = store
        self.enabled = enabled  # False: every version goes out as a full blob
        self._keys = keys
        self._previous: PolicyArrays | None = None
        self.delta_bytes: deque[int] = deque(maxlen=history)
        """Stored delta sizes, newest last (for the quantiles in summaries)."""
        self.dense_fp32_bytes = 0
        self.sent_by_kind = dict.fromkeys(KINDS, 0)

    def delta_to(self, encoded: EncodedPolicy, latest: int) -> StoredDelta | None:
        """The delta from stored version `latest` to `encoded`, if smaller than its blob."""
        base = self._base(latest) if self.enabled else None
        if base is None:
            return None
        envelope = make_delta(base, encoded, self._keys)
        if envelope is None or len(envelope) >= encoded.blob_bytes:
            return None
        return StoredDelta(base.version, envelope)

    def _base(self, latest: int) -> PolicyArrays | None:
        if latest == 0:
            return None
        if self._previous is not None and self._previous.version == latest:
            return self._previous
        try:  # a restarted quantizer: diff against what Redis holds
            self._previous = decode_blob(self._store.load(latest))
        except (LookupError, BlobError) as exc:
            log.info("no delta base: stored version %d unreadable (%s)", latest, exc)
            return None
        return self._previous

    def stored(self, encoded: EncodedPolicy) -> None:
        self._previous = encoded.arrays

    def record(self, announcement: Announcement) -> None:
        """Metrics of a stored version: dense fp32 size, delta size and ratio."""
        self.dense_fp32_bytes = announcement.dense_fp32_bytes
        metrics.QUANTIZER_DENSE_FP32_BLOB_BYTES.set(announcement.dense_fp32_bytes)
        metrics.QUANTIZER_DELTA_BYTES.set(announcement.delta_bytes)
        if announcement.delta_bytes and announcement.dense_fp32_bytes:
            self.delta_bytes.append(announcement.delta_bytes)
            ratio = announcement.delta_bytes / announcement.dense_fp32_bytes
            metrics.QUANTIZER_DELTA_RATIO.observe(ratio)

    def record_broadcast(self, announcement: Announcement, sent: int, delta: bool) -> None:
        kind = "delta" if delta else announcement.kind
        self.sent_by_kind[kind] += sent
        metrics.QUANTIZER_BROADCASTS_BY_KIND.labels(kind).inc()
        metrics.QUANTIZER_BROADCAST_BYTES_BY_KIND.labels(kind).inc(sent)
        metrics.QUANTIZER_BROADCAST_DENSE_FP32_BYTES.labels(kind).inc(announcement.dense_fp32_bytes)

    def delta_bytes_quantiles(self) -> dict[str, float]:
        """10th percentile, median and 90th percentile of the stored delta sizes (0: none)."""
        sizes = sorted(self.delta_bytes)
        if not sizes:
            return {"p10": 0.0, "median": 0.0, "p90": 0.0}
        return {
            "p10": _nearest_rank(sizes, 0.1),
            "median": float(statistics.median(sizes)),
            "p90": _nearest_rank(sizes, 0.9),
        }


def _nearest_rank(sorted_values: list[int], q: float) -> float:
    """The q-quantile by the nearest-rank rule: a size that was actually stored."""
    rank = max(1, math.ceil(q * len(sorted_values)))
    return float(sorted_values[rank - 1])
