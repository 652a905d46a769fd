"""HMAC-SHA256 signatures on policy blobs, so Redis write access alone cannot steer actors.

The quantizer signs each envelope's payload with the current key; actors holding keys
accept a blob only if it names a key they know (current or previous, for rotation) and its
HMAC matches. A key file holds the secret (at least 32 bytes after stripping whitespace,
e.g. `openssl rand -hex 32`). The key id is derived from the secret, so the two can never
disagree: the first 16 hex digits of SHA-256("actorq-policy-key-id:" + secret).
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass, field
from pathlib import Path

from actorq.errors import ConfigError, SignatureError

MIN_KEY_BYTES = 32
MAC_BYTES = 32


def key_id_of(secret: bytes) -> str:
    return hashlib.sha256(b"actorq-policy-key-id:" + secret).hexdigest()[:16]


@dataclass(frozen=True)
class PolicyKey:
    secret: bytes = field(repr=False)
    key_id: str = ""

    def __post_init__(self) -> None:
        if len(self.secret) < MIN_KEY_BYTES:
            raise ConfigError(
                f"policy key: expected at least {MIN_KEY_BYTES} bytes of secret, "
                f"got {len(self.secret)} (make one with: openssl rand -hex 32)"
            )
        object.__setattr__(self, "key_id", key_id_of(self.secret))

    def mac(self, payload: bytes) -> bytes:
        return hmac.new(self.secret, payload, hashlib.sha256).digest()


@dataclass(frozen=True)
class PolicyKeys:
    """The signing key (current) and one more key still accepted (previous)."""

    current: PolicyKey | None = None
    previous: PolicyKey | None = None

    @property
    def enabled(self) -> bool:
        return self.current is not None

    def sign(self, payload: bytes) -> tuple[str, bytes]:
        """(key_id, hmac) of `payload` under the current key."""
        if self.current is None:
            raise ValueError("no policy key configured to sign with")
        return self.current.key_id, self.current.mac(payload)

    def verify(self, payload: bytes, key_id: str, mac: bytes) -> None:
        """Raise SignatureError unless `mac` is a valid HMAC of `payload` by a known key."""
        if not mac or not key_id:
            raise SignatureError("policy blob is not signed, and this reader requires a signature")
        known = {k.key_id: k for k in (self.current, self.previous) if k is not None}
        key = known.get(key_id)
        if key is None:
            raise SignatureError(
                f"policy blob is signed with unknown key id {key_id[:32]!r}; "
                f"known: {', '.join(sorted(known))}"
            )
        if len(mac) != MAC_BYTES or not hmac.compare_digest(key.mac(payload), mac):
            raise SignatureError(f"policy blob signature does not match (key id {key_id})")


NO_KEYS = PolicyKeys()


def read_key_file(path: str, setting: str) -> PolicyKey:
    try:
        secret = Path(path).read_bytes().strip()
    except OSError as exc:
        raise ConfigError(f"{setting}: cannot read {path!r}: {exc.strerror}") from None
    try:
        return PolicyKey(secret)
    except ConfigError as exc:
        raise ConfigError(f"{setting} {path!r}: {exc}") from None


def load_policy_keys(current_path: str, previous_path: str = "") -> PolicyKeys:
    """Keys from files (empty paths = none); ConfigError naming the setting on problems."""
    if previous_path and not current_path:
        raise ConfigError(
            "policy_previous_key_file: set only together with policy_key_file "
            "(the previous key is accepted during a rotation, never alone)"
        )
    if not current_path:
        return NO_KEYS
    current = read_key_file(current_path, "policy_key_file")
    previous = read_key_file(previous_path, "policy_previous_key_file") if previous_path else None
    return PolicyKeys(current, previous)
