"""A policy version as validated arrays: what every blob kind decodes to.

Readers decode a full blob (dense or sparse) or apply a delta to the version they hold,
and both give a `PolicyArrays`; the module builder (actorq.quant.policy_module) reads
nothing else. The writer goes the other way: fp32 weights -> `PolicyArrays` ->
`policy_payload`, whose bytes are a function of the arrays alone, so a reader that
rebuilt the arrays from a delta can rebuild the payload and check the writer's sha256.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import cast

import numpy as np
from google.protobuf.message import DecodeError

from actorq.models.specs import MLPSpec, linear_layer_names
from actorq.quant.errors import BlobError
from actorq.quant.spec import spec_from_proto, spec_to_proto
from actorq.quant.tensors import (
    FLOAT32,
    SPARSE_INT8,
    WEIGHT_DTYPES,
    TensorArrays,
    allowed_weight_dtypes,
    decode_tensor,
    encode_float32,
    weight_tensor,
)
from actorq.v1 import policy_pb2


@dataclass(frozen=True, eq=False)
class PolicyArrays:
    """One policy version: header fields and every tensor as dense arrays, spec order."""

    version: int
    learner_step: int
    precision: int
    spec: MLPSpec
    created_unix_ms: int
    fp32_equivalent_bytes: int
    tensors: Mapping[str, TensorArrays]
    sparse_layers: tuple[str, ...] = ()
    """Weights stored as DTYPE_SPARSE_INT8 in the payload (informational)."""
    sha256: bytes = field(default=b"", compare=False)
    """SHA-256 of the payload these arrays came from (or serialize to); b"" if unknown."""

    @property
    def kind(self) -> str:
        """ "sparse" when any layer travels sparse, else "full" (metric label)."""
        return "sparse" if self.sparse_layers else "full"

    def float32(self, name: str) -> np.ndarray:
        return self.tensors[name].to_float32()

    def linear_layers(self) -> list[tuple[TensorArrays, TensorArrays]]:
        """(weight, bias) of every Linear layer of an MLP policy, input to output."""
        names = linear_layer_names(len(self.spec.widths) - 1)
        return [(self.tensors[f"{n}.weight"], self.tensors[f"{n}.bias"]) for n in names]


def policy_header(arrays: PolicyArrays, precision: int | None = None) -> policy_pb2.Policy:
    """The Policy message of `arrays` without its tensors (`precision` overrides theirs)."""
    return policy_pb2.Policy(
        version=arrays.version,
        learner_step=arrays.learner_step,
        precision=cast(policy_pb2.Precision, arrays.precision if precision is None else precision),
        spec=spec_to_proto(arrays.spec),
        created_unix_ms=arrays.created_unix_ms,
        fp32_equivalent_bytes=arrays.fp32_equivalent_bytes,
    )


def policy_proto(arrays: PolicyArrays) -> policy_pb2.Policy:
    """The canonical Policy message of `arrays` (tensors in spec order)."""
    policy = policy_header(arrays)
    for name, shape in arrays.spec.weight_shapes().items():
        tensor = arrays.tensors[name]
        if len(shape) >= 2:  # Linear [out, in] and conv [out, in, k, k] weights
            policy.tensors.append(weight_tensor(name, tensor, arrays.precision))
        else:
            policy.tensors.append(encode_float32(name, tensor.values))
    return policy


def policy_payload(arrays: PolicyArrays) -> tuple[bytes, tuple[str, ...]]:
    """(serialized Policy, names of the weights it stores sparse)."""
    policy = policy_proto(arrays)
    sparse = tuple(t.name for t in policy.tensors if t.dtype == SPARSE_INT8)
    return policy.SerializeToString(), sparse


def parse_payload(payload: bytes) -> policy_pb2.Policy:
    try:
        return policy_pb2.Policy.FromString(payload)
    except DecodeError as err:
        raise BlobError(f"policy payload does not parse: {err}") from err


def policy_arrays(policy: policy_pb2.Policy, sha256: bytes = b"") -> PolicyArrays:
    """Check a parsed Policy against its own spec and decode every tensor, once."""
    if policy.precision not in WEIGHT_DTYPES:
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
    decoded: dict[str, TensorArrays] = {}
    for tensor in policy.tensors:
        shape = expected[tensor.name]
        allowed = allowed_weight_dtypes(policy.precision) if len(shape) >= 2 else (FLOAT32,)
        decoded[tensor.name] = decode_tensor(tensor, shape, allowed)
    return PolicyArrays(
        version=policy.version,
        learner_step=policy.learner_step,
        precision=policy.precision,
        spec=spec,
        created_unix_ms=policy.created_unix_ms,
        fp32_equivalent_bytes=policy.fp32_equivalent_bytes,
        tensors={name: decoded[name] for name in expected},
        sparse_layers=tuple(t.name for t in policy.tensors if t.dtype == SPARSE_INT8),
        sha256=sha256,
    )
