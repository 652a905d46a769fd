"""The policy blob: fp32 weights -> versioned, checksummed `PolicyEnvelope` bytes and back.

Writer (quantizer): `encode_policy`. Reader (actor): `decode_policy`, which verifies the
sha256 and every tensor against the blob's own spec before anything is built from it.
Format reference: docs/BLOB_FORMAT.md.
"""

from __future__ import annotations

import hashlib
import hmac
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, cast

import numpy as np
from google.protobuf.message import DecodeError

from actorq.models.mlp import MLPSpec
from actorq.quant.errors import BlobError, WeightsError
from actorq.quant.precision import precision_name
from actorq.quant.tensors import (
    WEIGHT_DTYPE,
    check_tensor,
    encode_float32,
    encode_weight,
    tensor_to_float32,
)
from actorq.quant.weights import validate_weights
from actorq.v1 import policy_pb2

if TYPE_CHECKING:  # a runtime import would be circular (security -> quant.errors)
    from actorq.security.signing import PolicyKeys

SHA256_BYTES = 32
MLP_KIND = "mlp"


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


def spec_to_proto(spec: MLPSpec) -> policy_pb2.ModelSpec:
    """Wire form of an MLP spec."""
    return policy_pb2.ModelSpec(
        kind=MLP_KIND,
        obs_dim=spec.obs_dim,
        num_outputs=spec.num_outputs,
        hidden=list(spec.hidden),
        activation=spec.activation,
        # "" for identity keeps Q-network blobs byte-identical to those of older writers.
        output_activation="" if spec.output_activation == "none" else spec.output_activation,
        input_norm=spec.input_norm,
    )


def spec_from_proto(proto: policy_pb2.ModelSpec) -> MLPSpec:
    """MLP spec from its wire form; BlobError if the kind or any field is unsupported."""
    if proto.kind != MLP_KIND:
        raise BlobError(f"model kind {proto.kind!r} is not supported; expected {MLP_KIND!r}")
    try:
        return MLPSpec(
            obs_dim=proto.obs_dim,
            num_outputs=proto.num_outputs,
            hidden=tuple(proto.hidden),
            activation=proto.activation,
            output_activation=proto.output_activation or "none",
            input_norm=proto.input_norm,
        )
    except ValueError as err:
        raise BlobError(f"invalid model spec in blob: {err}") from err


def encode_policy(
    weights: Mapping[str, np.ndarray],
    spec: MLPSpec,
    precision: int,
    version: int,
    learner_step: int,
    *,
    created_unix_ms: int | None = None,
    keys: PolicyKeys | None = None,
) -> EncodedPolicy:
    """Validate fp32 `weights`, encode them at `precision` and wrap them in an envelope.

    2-D weights are stored at `precision`; biases always stay FLOAT32 (they are tiny and
    int8 biases would cost accuracy for no bandwidth). Raises WeightsError on bad weights.
    With enabled `keys` the envelope carries an HMAC of the payload under the current key.
    """
    validate_weights(weights, spec)
    precision_name(precision)  # ValueError on an unknown precision
    if version < 0 or learner_step < 0:
        raise ValueError(f"version and learner_step must be >= 0, got {version}, {learner_step}")
    tensors, error = _encode_tensors(weights, spec, precision)
    policy = policy_pb2.Policy(
        version=version,
        learner_step=learner_step,
        precision=cast(policy_pb2.Precision, precision),
        spec=spec_to_proto(spec),
        tensors=tensors,
        created_unix_ms=int(time.time() * 1000) if created_unix_ms is None else created_unix_ms,
        fp32_equivalent_bytes=spec.fp32_bytes(),
    )
    payload = policy.SerializeToString()
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
    )


def _encode_tensors(
    weights: Mapping[str, np.ndarray], spec: MLPSpec, precision: int
) -> tuple[list[policy_pb2.Tensor], float]:
    """Tensors in spec order, and the worst relative error over the weight matrices."""
    tensors: list[policy_pb2.Tensor] = []
    worst = 0.0
    for name, shape in spec.weight_shapes().items():
        if len(shape) == 2:
            try:
                tensor, error = encode_weight(name, weights[name], precision)
            except ValueError as err:
                raise WeightsError(
                    f"cannot encode weight {name!r} as {precision_name(precision)}: {err}"
                ) from err
            worst = max(worst, error)
        else:
            tensor = encode_float32(name, weights[name])
        tensors.append(tensor)
    return tensors, worst


def decode_policy(
    envelope: bytes, expected_spec: MLPSpec | None = None, keys: PolicyKeys | None = None
) -> policy_pb2.Policy:
    """Verify and parse an envelope; BlobError (keep the old policy) on any problem.

    Checks, in order: envelope parses, sha256 matches the payload, (with enabled `keys`)
    the HMAC is valid under a known key (SignatureError otherwise), payload parses, the
    policy is self-consistent (`validate_policy`), and its spec equals `expected_spec`.
    """
    payload = _verified_payload(envelope, keys)
    try:
        policy = policy_pb2.Policy.FromString(payload)
    except DecodeError as err:
        raise BlobError(f"policy payload does not parse: {err}") from err
    spec = validate_policy(policy)
    if expected_spec is not None and spec != expected_spec:
        raise BlobError(f"blob holds model {spec}, this reader expects {expected_spec}")
    return policy


def _verified_payload(envelope: bytes, keys: PolicyKeys | None = None) -> bytes:
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


def validate_policy(policy: policy_pb2.Policy) -> MLPSpec:
    """Check a parsed Policy against its own spec; return that spec or raise BlobError."""
    if policy.precision not in WEIGHT_DTYPE:
        raise BlobError(f"policy has unknown precision value {policy.precision}")
    spec = spec_from_proto(policy.spec)
    expected = spec.weight_shapes()
    names = [tensor.name for tensor in policy.tensors]
    if sorted(names) != sorted(expected):
        missing = [name for name in expected if name not in names]
        unexpected = sorted({name for name in names if name not in expected})
        repeated = sorted({name for name in names if names.count(name) > 1})
        raise BlobError(
            f"policy tensors do not match its spec: missing {missing}, "
            f"unexpected {unexpected}, repeated {repeated}"
        )
    for tensor in policy.tensors:
        shape = expected[tensor.name]
        dtype = WEIGHT_DTYPE[policy.precision] if len(shape) == 2 else policy_pb2.DTYPE_FLOAT32
        check_tensor(tensor, shape, dtype)
    return spec


def policy_to_weights(policy: policy_pb2.Policy) -> dict[str, np.ndarray]:
    """Float32 weights of a decoded policy (int8 and fp16 tensors dequantized)."""
    return {tensor.name: tensor_to_float32(tensor) for tensor in policy.tensors}
