"""Versioned policy blobs in Redis, with an atomically moved `latest` pointer.

Write order: blob and its metadata first, then one Lua script that moves `latest` only
if the new version is greater and records it in the version set. A reader that follows
`latest` therefore never sees a version whose blob is not complete, and a rejected or
crashed write leaves no pointer to a partial version.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import redis

from actorq.quant import EncodedPolicy
from actorq.quant.blob import dense_fp32_blob_bytes
from actorq.redis_keys import RedisKeys
from actorq.rpc.errors import DataLoss, FailedPrecondition

# Lua numbers and sorted-set scores are doubles: versions above 2**53 - 1 would compare
# wrongly and come back from the script as overflowed integers, so they are refused.
MAX_VERSION = (1 << 53) - 1

# KEYS[1] = latest, KEYS[2] = versions zset; ARGV[1] = version.
_MOVE_LATEST = """
local current = tonumber(redis.call('GET', KEYS[1]) or '0')
local version = tonumber(ARGV[1])
if version <= current then return current end
redis.call('SET', KEYS[1], ARGV[1])
redis.call('ZADD', KEYS[2], version, ARGV[1])
return version
"""


@dataclass(frozen=True)
class Announcement:
    """What actors learn about a version before fetching it."""

    version: int
    precision: int
    blob_bytes: int
    sha256: bytes
    learner_step: int
    fp32_equivalent_bytes: int
    quantization_error: float
    kind: str = "full"
    """"sparse" when a layer travels sparse, else "full"."""
    delta_base: int = 0
    """Version the stored delta applies to (0: no delta stored)."""
    delta_bytes: int = 0
    dense_fp32_bytes: int = 0
    """Bytes of the same policy as a dense fp32 blob (the baseline of size ratios)."""

    @classmethod
    def of(cls, encoded: EncodedPolicy, delta: StoredDelta | None = None) -> Announcement:
        return cls(
            version=encoded.version,
            precision=encoded.precision,
            blob_bytes=encoded.blob_bytes,
            sha256=encoded.sha256,
            learner_step=encoded.learner_step,
            fp32_equivalent_bytes=encoded.fp32_equivalent_bytes,
            quantization_error=float(encoded.quantization_error),
            kind=encoded.arrays.kind,
            delta_base=delta.base_version if delta else 0,
            delta_bytes=len(delta.envelope) if delta else 0,
            dense_fp32_bytes=dense_fp32_blob_bytes(encoded),
        )


@dataclass(frozen=True)
class StoredDelta:
    """A delta envelope to a version from `base_version`."""

    base_version: int
    envelope: bytes


def check_version(version: int) -> None:
    """ValueError (INVALID_ARGUMENT) unless 1 <= version <= MAX_VERSION."""
    if not 1 <= version <= MAX_VERSION:
        raise ValueError(f"policy version must be in 1..{MAX_VERSION} (2**53 - 1), got {version}")


class PolicyStore:
    """Stores the last `keep_versions` policy versions under `keys`."""

    def __init__(self, client: redis.Redis, keys: RedisKeys, keep_versions: int = 5) -> None:
        if keep_versions < 1:
            raise ValueError(f"keep_versions must be >= 1, got {keep_versions}")
        self._redis = client
        self._keys = keys
        self._keep = keep_versions
        self._move_latest = client.register_script(_MOVE_LATEST)

    def latest_version(self) -> int:
        value = self._redis.get(self._keys.policy_latest)
        if value is None:
            return 0
        try:
            return int(value)
        except ValueError:
            raise DataLoss(
                f"{self._keys.policy_latest} holds {bytes(value)[:40]!r}, expected an integer "
                "version; fix or delete it (OPERATIONS.md)"
            ) from None

    def save(
        self,
        encoded: EncodedPolicy,
        delta: StoredDelta | None = None,
        extra_meta: Mapping[str, str] | None = None,
    ) -> Announcement:
        """Store one version (and its delta from an older one); FailedPrecondition if it
        is not newer than `latest`. Returns what actors will be told about it.

        `extra_meta` (e.g. the guard's divergence, actorq.guard) joins the metadata hash."""
        check_version(encoded.version)
        latest = self.latest_version()
        if encoded.version <= latest:
            raise FailedPrecondition(
                f"version {encoded.version} is not newer than the stored version {latest}"
            )
        announcement = Announcement.of(encoded, delta)
        self._write_blob(encoded, announcement, delta, extra_meta or {})
        moved_to = int(
            self._move_latest(
                keys=[self._keys.policy_latest, self._keys.policy_versions],
                args=[encoded.version],
            )
        )
        if moved_to != encoded.version:
            # Another writer got a newer version in first: drop ours, leave no trace.
            self._delete_versions([encoded.version])
            raise FailedPrecondition(
                f"version {encoded.version} lost to the stored version {moved_to}"
            )
        self._trim()
        return announcement

    def _write_blob(
        self,
        encoded: EncodedPolicy,
        announcement: Announcement,
        delta: StoredDelta | None,
        extra_meta: Mapping[str, str],
    ) -> None:
        pipe = self._redis.pipeline(transaction=True)
        pipe.set(self._keys.policy_blob(encoded.version), encoded.envelope)
        if delta is not None:
            pipe.set(self._keys.policy_delta(encoded.version), delta.envelope)
        pipe.hset(
            self._keys.policy_meta(encoded.version),
            mapping={
                "precision": encoded.precision,
                "blob_bytes": encoded.blob_bytes,
                "sha256": encoded.sha256.hex(),
                "learner_step": encoded.learner_step,
                "fp32_equivalent_bytes": encoded.fp32_equivalent_bytes,
                "quantization_error": repr(float(encoded.quantization_error)),
                "kind": announcement.kind,
                "delta_base": announcement.delta_base,
                "delta_bytes": announcement.delta_bytes,
                "dense_fp32_bytes": announcement.dense_fp32_bytes,
                **extra_meta,
            },
        )
        pipe.execute()

    def _trim(self) -> None:
        old = self._redis.zrange(self._keys.policy_versions, 0, -(self._keep + 1))
        if old:
            self._delete_versions([int(v) for v in old])

    def _delete_versions(self, versions: list[int]) -> None:
        pipe = self._redis.pipeline(transaction=True)
        for version in versions:
            pipe.delete(
                self._keys.policy_blob(version),
                self._keys.policy_meta(version),
                self._keys.policy_delta(version),
            )
            pipe.zrem(self._keys.policy_versions, version)
        pipe.execute()

    def stored_versions(self) -> list[int]:
        return [int(v) for v in self._redis.zrange(self._keys.policy_versions, 0, -1)]

    def resolve(self, version: int) -> int:
        """0 means latest; LookupError when there is nothing (yet) to serve."""
        resolved = version or self.latest_version()
        if resolved == 0:
            raise LookupError("no policy has been published yet")
        return resolved

    def load(self, version: int) -> bytes:
        """Envelope bytes of `version` (0 = latest)."""
        resolved = self.resolve(version)
        blob = self._redis.get(self._keys.policy_blob(resolved))
        if blob is None:
            raise LookupError(
                f"policy version {resolved} is not stored (kept: {self.stored_versions()})"
            )
        return bytes(blob)

    def load_delta(self, announcement: Announcement, base_version: int) -> bytes | None:
        """The stored delta to `announcement.version` if it applies to `base_version`."""
        if not base_version or announcement.delta_base != base_version:
            return None
        delta = self._redis.get(self._keys.policy_delta(announcement.version))
        return None if delta is None else bytes(delta)

    def announcement(self, version: int) -> Announcement:
        """Metadata of `version` (0 = latest)."""
        resolved = self.resolve(version)
        meta = self._redis.hgetall(self._keys.policy_meta(resolved))
        if not meta:
            raise LookupError(f"policy version {resolved} has no metadata")
        try:
            get = {k.decode(): v.decode() for k, v in meta.items()}
            return Announcement(
                version=resolved,
                precision=int(get["precision"]),
                blob_bytes=int(get["blob_bytes"]),
                sha256=bytes.fromhex(get["sha256"]),
                learner_step=int(get["learner_step"]),
                fp32_equivalent_bytes=int(get["fp32_equivalent_bytes"]),
                quantization_error=float(get["quantization_error"]),
                # Versions stored by an older quantizer lack these: no delta, kind full.
                kind=get.get("kind", "full"),
                delta_base=int(get.get("delta_base", 0)),
                delta_bytes=int(get.get("delta_bytes", 0)),
                dense_fp32_bytes=int(get.get("dense_fp32_bytes", 0)),
            )
        except (KeyError, ValueError) as exc:  # UnicodeDecodeError is a ValueError
            raise DataLoss(
                f"{self._keys.policy_meta(resolved)} is corrupt ({type(exc).__name__}: {exc})"
            ) from None
