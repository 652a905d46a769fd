"""Quantization for actors: int8/fp16 codecs, the policy blob format, inference modules.

Weight path: learner fp32 weights -> `encode_policy` (quantizer) -> envelope bytes ->
`decode_blob` (actor, verifies sha256 and decodes every tensor once into `PolicyArrays`)
-> `build_policy_module` -> forward. A newer version may come as a delta applied to the
arrays the actor holds (actorq.quant.delta).

Decoding needs numpy alone; the torch modules (`build_policy_module`, `Int8Linear`, ...)
load torch when first asked for, so that an actor acting through numpy
(actorq.quant.numpy_mlp) never imports it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from actorq.quant.arrays import PolicyArrays
from actorq.quant.blob import (
    EncodedPolicy,
    decode_blob,
    decode_policy,
    encode_policy,
    policy_to_weights,
)
from actorq.quant.codec import (
    dequantize_fp16,
    dequantize_int8,
    quantize_fp16,
    quantize_int8_per_channel,
    relative_error,
)
from actorq.quant.errors import BlobError, WeightsError
from actorq.quant.precision import PRECISION_NAMES, parse_precision, precision_name
from actorq.quant.spec import spec_from_proto, spec_to_proto
from actorq.quant.weights import validate_weights, weights_from_module

if TYPE_CHECKING:
    from actorq.quant.int8 import Int8Linear, make_int8_linear
    from actorq.quant.policy_module import (
        PolicyModule,
        build_policy_module,
        quantized_policy_from_weights,
    )

_TORCH_NAMES = {
    "Int8Linear": "actorq.quant.int8",
    "make_int8_linear": "actorq.quant.int8",
    "PolicyModule": "actorq.quant.policy_module",
    "build_policy_module": "actorq.quant.policy_module",
    "quantized_policy_from_weights": "actorq.quant.policy_module",
}

__all__ = [
    "PRECISION_NAMES",
    "BlobError",
    "EncodedPolicy",
    "Int8Linear",
    "PolicyArrays",
    "PolicyModule",
    "WeightsError",
    "build_policy_module",
    "decode_blob",
    "decode_policy",
    "dequantize_fp16",
    "dequantize_int8",
    "encode_policy",
    "make_int8_linear",
    "parse_precision",
    "policy_to_weights",
    "precision_name",
    "quantize_fp16",
    "quantize_int8_per_channel",
    "quantized_policy_from_weights",
    "relative_error",
    "spec_from_proto",
    "spec_to_proto",
    "validate_weights",
    "weights_from_module",
]


def __getattr__(name: str) -> object:
    """The torch modules' names, imported (with torch) when first asked for."""
    module = _TORCH_NAMES.get(name)
    if module is None:
        raise AttributeError(f"module 'actorq.quant' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)
