"""The policy blob: fp32 weights -> versioned, checksummed `PolicyEnvelope` bytes and back.

Writer (quantizer): `encode_policy`. Readers: `decode_blob` verifies the envelope (sha256,
optional HMAC) and decodes every tensor once into `PolicyArrays` (actorq.quant.arrays),
from which actors build their module; `decode_policy` returns the checked `Policy`
message instead. Deltas between versions: actorq.quant.delta.
Format reference: docs/BLOB_FORMAT.md.
"""

from __future__ import annotations

import hashlib
import hmac
import math
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

import numpy as np
from google.protobuf.message import DecodeError

from actorq.models.specs import MLPSpec
from actorq.quant.arrays import (
    PolicyArrays,
    parse_payload,
    policy_arrays,
    policy_header,
    policy_payload,
)
from actorq.quant.errors import BlobError, WeightsError
from actorq.quant.precision import precision_name
from actorq.quant.tensors import TensorArrays, quantize_weight
from actorq.quant.weights import validate_weights
from actorq.v1 import policy_pb2

if TYPE_CHECKING:  # a runtime import would be circular (security -> quant.errors)
    from actorq.security.signing import PolicyKeys

SHA256_BYTES = 32


@dataclass(frozen=True)
class EncodedPolicy:
    """One encoded policy version plus the numbers the quantizer reports about it."""

    envelope: bytes
    """PolicyEnvelope.SerializeToString(): what is stored and served."""
    sha256: bytes
    """SHA-256 of the payload (the serialized Policy), 32 bytes."""
    version: int
    precision: int
    """actorq.v1.Precision value."""
    learner_step: int
    blob_bytes: int
    """len(envelope)."""
    fp32_equivalent_bytes: int
    """Bytes of the same parameters as fp32 (spec.fp32_bytes())."""
    quantization_error: float
    """Max over weight matrices of ||W - W'||_F / ||W||_F; 0.0 for fp32."""
    arrays: PolicyArrays = field(compare=False, repr=False)
    """What a reader decodes from `envelope` (the base of the next version's delta)."""
    hmac_sha256: bytes = b""
    key_id: str = ""


def encode_policy(
    weights: Mapping[str, np.ndarray],
    spec: MLPSpec,
    precision: int,
    version: int,
    learner_step: int,
    *,
    created_unix_ms: int | None = None,
    keys: PolicyKeys | None = None,
    fallback_layers: Mapping[str, int] | None = None,
) -> EncodedPolicy:
    """Validate fp32 `weights`, encode them at `precision` and wrap them in an envelope.

    Weights (conv: per output channel) at `precision`; biases stay FLOAT32 (tiny, and int8
    would cost accuracy for no bandwidth). WeightsError on bad weights. With enabled `keys`
    the envelope carries an HMAC; `fallback_layers` ({weight name: FP16 or FP32}) stores
    those weights in float (the quantizer's guard), the policy's precision unchanged.
    """
    validate_weights(weights, spec)
    precision_name(precision)  # ValueError on an unknown precision
    if version < 0 or learner_step < 0:
        raise ValueError(f"version and learner_step must be >= 0, got {version}, {learner_step}")
    _check_fallbacks(fallback_layers or {}, spec)
    tensors, error = _quantize_tensors(weights, spec, precision, fallback_layers or {})
    arrays = PolicyArrays(
        version=version,
        learner_step=learner_step,
        precision=precision,
        spec=spec,
        created_unix_ms=int(time.time() * 1000) if created_unix_ms is None else created_unix_ms,
        fp32_equivalent_bytes=spec.fp32_bytes(),
        tensors=tensors,
    )
    payload, sparse = policy_payload(arrays)
    digest = hashlib.sha256(payload).digest()
    envelope_msg = policy_pb2.PolicyEnvelope(payload=payload, sha256=digest)
    if keys is not None and keys.enabled:
        envelope_msg.key_id, envelope_msg.hmac_sha256 = keys.sign(payload)
    envelope = envelope_msg.SerializeToString()
    return EncodedPolicy(
        envelope=envelope,
        sha256=digest,
        version=version,
        precision=precision,
        learner_step=learner_step,
        blob_bytes=len(envelope),
        fp32_equivalent_bytes=spec.fp32_bytes(),
        quantization_error=error,
        arrays=replace(arrays, sparse_layers=sparse, sha256=digest),
        hmac_sha256=envelope_msg.hmac_sha256,
        key_id=envelope_msg.key_id,
    )


FALLBACK_PRECISIONS = (policy_pb2.PRECISION_FP16, policy_pb2.PRECISION_FP32)


def _check_fallbacks(fallbacks: Mapping[str, int], spec: MLPSpec) -> None:
    shapes = spec.weight_shapes()
    for name, precision in fallbacks.items():
        if len(shapes.get(name, ())) < 2:  # Linear [out, in] or conv [out, in, k, k]
            raise ValueError(f"fallback layer {name!r} is not a weight of {spec}")
        if precision not in FALLBACK_PRECISIONS:
            raise ValueError(
                f"fallback precision for {name!r} must be fp16 or fp32, got {precision}"
            )


def _quantize_tensors(
    weights: Mapping[str, np.ndarray],
    spec: MLPSpec,
    precision: int,
    fallbacks: Mapping[str, int],
) -> tuple[dict[str, TensorArrays], float]:
    """Arrays in spec order, and the worst relative error over the weight matrices
    (a fallback layer counts at its own float precision)."""
    tensors: dict[str, TensorArrays] = {}
    worst = 0.0
    for name, shape in spec.weight_shapes().items():
        if len(shape) >= 2:  # Linear and conv weights
            try:
                layer_precision = fallbacks.get(name, precision)
                tensors[name], error = quantize_weight(weights[name], layer_precision)
            except ValueError as err:
                raise WeightsError(
                    f"cannot encode weight {name!r} as {precision_name(precision)}: {err}"
                ) from err
            worst = max(worst, error)
        else:
            tensors[name] = TensorArrays(np.asarray(weights[name], dtype=np.float32))
    return tensors, worst


def decode_policy(
    envelope: bytes, expected_spec: MLPSpec | None = None, keys: PolicyKeys | None = None
) -> policy_pb2.Policy:
    """`decode_blob`'s checks, returning the Policy message; BlobError on any problem."""
    payload = verified_payload(envelope, keys)
    policy = parse_payload(payload)
    _check_expected(policy_arrays(policy).spec, expected_spec)
    return policy


def decode_blob(
    envelope: bytes, expected_spec: MLPSpec | None = None, keys: PolicyKeys | None = None
) -> PolicyArrays:
    """Verify an envelope and decode its policy into arrays, in one pass: envelope,
    sha256, (with enabled `keys`) HMAC (SignatureError), payload, tensors, and the spec
    against `expected_spec`. BlobError on any failure."""
    payload = verified_payload(envelope, keys)
    return decode_payload(payload, hashlib.sha256(payload).digest(), expected_spec)


def decode_payload(
    payload: bytes, digest: bytes, expected_spec: MLPSpec | None = None
) -> PolicyArrays:
    """Arrays of an already verified payload whose SHA-256 is `digest`."""
    arrays = policy_arrays(parse_payload(payload), digest)
    _check_expected(arrays.spec, expected_spec)
    return arrays


def _check_expected(spec: MLPSpec, expected_spec: MLPSpec | None) -> None:
    if expected_spec is not None and spec != expected_spec:
        raise BlobError(f"blob holds model {spec}, this reader expects {expected_spec}")


def verified_payload(envelope: bytes, keys: PolicyKeys | None = None) -> bytes:
    """The payload of an envelope whose sha256 (and, with enabled `keys`, HMAC) holds."""
    try:
        parsed = policy_pb2.PolicyEnvelope.FromString(envelope)
    except DecodeError as err:
        raise BlobError(f"policy envelope does not parse ({len(envelope)} bytes): {err}") from err
    if len(parsed.sha256) != SHA256_BYTES:
        raise BlobError(
            f"policy envelope has a {len(parsed.sha256)}-byte sha256, expected {SHA256_BYTES} "
            "(truncated or not an envelope)"
        )
    actual = hashlib.sha256(parsed.payload).digest()
    if not hmac.compare_digest(actual, parsed.sha256):
        raise BlobError(
            f"policy checksum mismatch: envelope says {parsed.sha256.hex()[:16]}..., "
            f"payload hashes to {actual.hex()[:16]}..."
        )
    if keys is not None and keys.enabled:
        keys.verify(parsed.payload, parsed.key_id, parsed.hmac_sha256)
    return parsed.payload


def policy_to_weights(policy: policy_pb2.Policy | PolicyArrays) -> dict[str, np.ndarray]:
    """Float32 weights of a decoded policy (int8 and fp16 tensors dequantized)."""
    arrays = policy if isinstance(policy, PolicyArrays) else policy_arrays(policy)
    return {name: arrays.float32(name) for name in arrays.tensors}


def _varint_len(value: int) -> int:
    return max(1, (value.bit_length() + 6) // 7)


def dense_fp32_blob_bytes(encoded: EncodedPolicy) -> int:
    """Bytes of the same version as an unsigned dense FP32 blob: the baseline that
    broadcast sizes are compared with (computed, nothing is encoded)."""
    arrays = encoded.arrays
    payload = policy_header(arrays, policy_pb2.PRECISION_FP32).ByteSize()
    for name, shape in arrays.spec.weight_shapes().items():
        empty = policy_pb2.Tensor(name=name, shape=list(shape), dtype=policy_pb2.DTYPE_FLOAT32)
        data = 4 * math.prod(shape)
        tensor = empty.ByteSize() + 1 + _varint_len(data) + data  # + field 4 (data)
        payload += 1 + _varint_len(tensor) + tensor  # as field 5 of Policy
    return 1 + _varint_len(payload) + payload + 2 + SHA256_BYTES
