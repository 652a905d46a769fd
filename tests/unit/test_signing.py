"""HMAC signatures on policy blobs: who can sign, who is accepted, what is refused."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from actorq.config import ActorSettings, ConfigError, load_settings
from actorq.models import MLPSpec, QNetwork
from actorq.quant import BlobError, decode_policy, encode_policy
from actorq.quant.errors import SignatureError
from actorq.security.signing import PolicyKey, PolicyKeys, key_id_of, load_policy_keys
from actorq.v1 import policy_pb2

SPEC = MLPSpec(obs_dim=4, num_outputs=2, hidden=(16,))
OLD = PolicyKey(b"o" * 32)
NEW = PolicyKey(b"n" * 40)


def _weights() -> dict[str, np.ndarray]:
    torch.manual_seed(0)
    return {k: v.detach().numpy().copy() for k, v in QNetwork(SPEC).state_dict().items()}


def _blob(keys: PolicyKeys | None, version: int = 1) -> bytes:
    encoded = encode_policy(
        _weights(), SPEC, policy_pb2.PRECISION_INT8, version, 0, created_unix_ms=1, keys=keys
    )
    return encoded.envelope


def test_signed_blob_verifies_under_its_key() -> None:
    keys = PolicyKeys(NEW)
    envelope = policy_pb2.PolicyEnvelope.FromString(_blob(keys))
    assert envelope.key_id == NEW.key_id and len(envelope.hmac_sha256) == 32
    assert decode_policy(_blob(keys), SPEC, keys).version == 1


def test_unsigned_envelope_is_byte_identical_to_the_old_format() -> None:
    envelope = policy_pb2.PolicyEnvelope.FromString(_blob(None))
    old = policy_pb2.PolicyEnvelope(payload=envelope.payload, sha256=envelope.sha256)
    assert _blob(None) == old.SerializeToString()
    assert decode_policy(_blob(PolicyKeys(NEW)), SPEC).version == 1  # keyless readers still read


@pytest.mark.parametrize(
    ("writer", "reader", "message"),
    [
        (None, PolicyKeys(NEW), "not signed"),
        (PolicyKeys(OLD), PolicyKeys(NEW), "unknown key id"),
        (PolicyKeys(PolicyKey(b"x" * 32)), PolicyKeys(NEW, OLD), "unknown key id"),
    ],
)
def test_reader_with_keys_refuses_unsigned_or_foreign_blobs(writer, reader, message) -> None:
    with pytest.raises(SignatureError, match=message):
        decode_policy(_blob(writer), SPEC, reader)


def test_forged_mac_under_a_known_key_id_is_refused() -> None:
    """A forger can copy a key id (it is public) but cannot compute the HMAC."""
    envelope = policy_pb2.PolicyEnvelope.FromString(_blob(PolicyKeys(NEW)))
    forged_payload = policy_pb2.PolicyEnvelope.FromString(_blob(None, version=9)).payload
    forged = policy_pb2.PolicyEnvelope(
        payload=forged_payload,
        sha256=policy_pb2.PolicyEnvelope.FromString(_blob(None, version=9)).sha256,
        key_id=envelope.key_id,
        hmac_sha256=envelope.hmac_sha256,  # a valid mac, but of another payload
    ).SerializeToString()
    with pytest.raises(SignatureError, match="does not match"):
        decode_policy(forged, SPEC, PolicyKeys(NEW))
    assert issubclass(SignatureError, BlobError)  # counted and handled like any bad blob


def test_rotation_accepts_current_and_previous_keys_only() -> None:
    rotating = PolicyKeys(current=NEW, previous=OLD)
    assert decode_policy(_blob(PolicyKeys(OLD)), SPEC, rotating).version == 1
    assert decode_policy(_blob(PolicyKeys(NEW)), SPEC, rotating).version == 1
    with pytest.raises(SignatureError):
        decode_policy(_blob(PolicyKeys(OLD)), SPEC, PolicyKeys(NEW))  # rotation finished


def test_key_id_is_derived_and_reveals_nothing_obvious() -> None:
    assert NEW.key_id == key_id_of(b"n" * 40) and len(NEW.key_id) == 16
    assert b"n".hex() * 4 not in NEW.key_id
    assert "n" * 8 not in repr(NEW)  # secret kept out of reprs and logs


def test_key_files_load_and_bad_ones_name_the_setting(tmp_path: Path) -> None:
    good, short = tmp_path / "key", tmp_path / "short"
    good.write_text("a" * 64 + "\n")
    short.write_text("abc")
    keys = load_policy_keys(str(good))
    assert keys.enabled and keys.current.secret == b"a" * 64 and keys.previous is None
    with pytest.raises(ConfigError, match=r"policy_key_file .*at least 32 bytes"):
        load_policy_keys(str(short))
    with pytest.raises(ConfigError, match="policy_key_file: cannot read"):
        load_policy_keys(str(tmp_path / "missing"))
    with pytest.raises(ConfigError, match="policy_previous_key_file: set only together"):
        load_policy_keys("", str(good))
    with pytest.raises(ConfigError, match=r"policy_previous_key_file .*at least 32"):
        load_settings(
            ActorSettings,
            {"ACTORQ_POLICY_KEY_FILE": str(good), "ACTORQ_POLICY_PREVIOUS_KEY_FILE": str(short)},
        )
