"""Versioned policy blobs in Redis, with an atomically moved `latest` pointer.

Write order: blob and its metadata first, then one Lua script that moves `latest` only
if the new version is greater and records it in the version set. A reader that follows
`latest` therefore never sees a version whose blob is not complete, and a rejected or
crashed write leaves no pointer to a partial version.
"""

from __future__ import annotations

from dataclasses import dataclass

import redis

from actorq.quant import EncodedPolicy
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

    @classmethod
    def of(cls, encoded: EncodedPolicy) -> Announcement:
        return cls(
            version=encoded.version,
            precision=encoded.precision,
            blob_bytes=encoded.blob_bytes,
            sha256=encoded.sha256,
            learner_step=encoded.learner_step,
            fp32_equivalent_bytes=encoded.fp32_equivalent_bytes,
            quantization_error=float(encoded.quantization_error),
        )


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

    def save(self, encoded: EncodedPolicy) -> None:
        """Store one version; FailedPrecondition if it is not newer than `latest`."""
        check_version(encoded.version)
        latest = self.latest_version()
        if encoded.version <= latest:
            raise FailedPrecondition(
                f"version {encoded.version} is not newer than the stored version {latest}"
            )
        self._write_blob(encoded)
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

    def _write_blob(self, encoded: EncodedPolicy) -> None:
        pipe = self._redis.pipeline(transaction=True)
        pipe.set(self._keys.policy_blob(encoded.version), encoded.envelope)
        pipe.hset(
            self._keys.policy_meta(encoded.version),
            mapping={
                "precision": encoded.precision,
                "blob_bytes": encoded.blob_bytes,
                "sha256": encoded.sha256.hex(),
                "learner_step": encoded.learner_step,
                "fp32_equivalent_bytes": encoded.fp32_equivalent_bytes,
                "quantization_error": repr(float(encoded.quantization_error)),
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
            pipe.delete(self._keys.policy_blob(version), self._keys.policy_meta(version))
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
            )
        except (KeyError, ValueError) as exc:  # UnicodeDecodeError is a ValueError
            raise DataLoss(
                f"{self._keys.policy_meta(resolved)} is corrupt ({type(exc).__name__}: {exc})"
            ) from None
