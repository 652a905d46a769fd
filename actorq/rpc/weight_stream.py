"""The PublishWeights stream format, both sides: `weight_chunks` splits fp32 weights into a
header and tensor chunks (the learner), `assemble` reassembles them into numpy arrays (the
quantizer). One module, so the two sides cannot drift apart.

Checks happen as chunks arrive, before memory is committed: the header must come first,
every tensor must belong to the declared spec with the declared shape, slices must follow
each other without gaps, and the declared model may not exceed the size limit.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from actorq.models import MLPSpec
from actorq.quant import spec_from_proto
from actorq.v1 import parameter_server_pb2 as ps_pb2


class PublishError(ValueError):
    """A malformed weight stream; maps to INVALID_ARGUMENT."""


@dataclass
class AssembledWeights:
    header: ps_pb2.PublishHeader
    spec: MLPSpec
    weights: dict[str, np.ndarray]


def _spec_from_header(header: ps_pb2.PublishHeader, max_bytes: int) -> MLPSpec:
    try:
        spec = spec_from_proto(header.spec)
    except ValueError as exc:
        raise PublishError(f"bad model spec in header: {exc}") from None
    if spec.fp32_bytes() > max_bytes:
        raise PublishError(
            f"model declares {spec.fp32_bytes()} fp32 bytes, above the limit of {max_bytes}"
        )
    expected = len(spec.weight_shapes())
    if header.num_tensors != expected:
        raise PublishError(f"header says {header.num_tensors} tensors, spec has {expected}")
    return spec


class _TensorBuffer:
    """Bytes of one tensor, filled slice by slice in order."""

    def __init__(self, name: str, shape: tuple[int, ...]) -> None:
        self.name, self.shape = name, shape
        self.data = bytearray(4 * int(np.prod(shape)))
        self.filled = 0

    def add(self, chunk: ps_pb2.TensorChunk) -> None:
        if tuple(chunk.shape) != self.shape:
            raise PublishError(
                f"tensor {self.name!r}: shape {tuple(chunk.shape)} differs from {self.shape}"
            )
        if chunk.offset != self.filled:
            raise PublishError(
                f"tensor {self.name!r}: chunk at offset {chunk.offset}, expected {self.filled}"
            )
        end = self.filled + len(chunk.data)
        if end > len(self.data):
            raise PublishError(
                f"tensor {self.name!r}: {end} bytes sent, tensor holds {len(self.data)}"
            )
        self.data[self.filled : end] = chunk.data
        self.filled = end

    def array(self) -> np.ndarray:
        if self.filled != len(self.data):
            raise PublishError(
                f"tensor {self.name!r}: stream ended after {self.filled} of {len(self.data)} bytes"
            )
        return np.frombuffer(bytes(self.data), dtype="<f4").reshape(self.shape).copy()


def assemble(chunks: Iterable[ps_pb2.PublishChunk], max_bytes: int) -> AssembledWeights:
    """Consume a whole publish stream; raises PublishError on the first bad chunk."""
    iterator = iter(chunks)
    first = next(iterator, None)
    if first is None or first.WhichOneof("item") != "header":
        raise PublishError("publish stream must start with a header")
    header = first.header
    spec = _spec_from_header(header, max_bytes)
    expected = spec.weight_shapes()
    buffers: dict[str, _TensorBuffer] = {}
    for chunk in iterator:
        if chunk.WhichOneof("item") != "tensor":
            raise PublishError("only one header is allowed, at the start of the stream")
        tensor = chunk.tensor
        if tensor.name not in expected:
            raise PublishError(f"unexpected tensor {tensor.name!r}; spec has {', '.join(expected)}")
        if tensor.name not in buffers:
            buffers[tensor.name] = _TensorBuffer(tensor.name, expected[tensor.name])
        buffers[tensor.name].add(tensor)
    missing = [name for name in expected if name not in buffers]
    if missing:
        raise PublishError(f"stream ended without tensors {', '.join(missing)}")
    weights = {name: buffers[name].array() for name in expected}
    return AssembledWeights(header=header, spec=spec, weights=weights)


def weight_chunks(
    header: ps_pb2.PublishHeader, weights: dict[str, np.ndarray], chunk_bytes: int = 1 << 20
) -> Iterable[ps_pb2.PublishChunk]:
    """The learner's side: a header then each tensor in `chunk_bytes` slices."""
    yield ps_pb2.PublishChunk(header=header)
    for name, array in weights.items():
        data = np.ascontiguousarray(array, dtype="<f4").tobytes()
        shape = list(array.shape)
        for offset in range(0, max(len(data), 1), chunk_bytes):
            yield ps_pb2.PublishChunk(
                tensor=ps_pb2.TensorChunk(
                    name=name, shape=shape, offset=offset, data=data[offset : offset + chunk_bytes]
                )
            )
