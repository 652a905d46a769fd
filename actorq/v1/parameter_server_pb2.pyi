from actorq.v1 import policy_pb2 as _policy_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class BlobKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    BLOB_KIND_FULL: _ClassVar[BlobKind]
    BLOB_KIND_DELTA: _ClassVar[BlobKind]
BLOB_KIND_FULL: BlobKind
BLOB_KIND_DELTA: BlobKind

class PublishHeader(_message.Message):
    __slots__ = ("version", "learner_step", "precision", "spec", "num_tensors")
    VERSION_FIELD_NUMBER: _ClassVar[int]
    LEARNER_STEP_FIELD_NUMBER: _ClassVar[int]
    PRECISION_FIELD_NUMBER: _ClassVar[int]
    SPEC_FIELD_NUMBER: _ClassVar[int]
    NUM_TENSORS_FIELD_NUMBER: _ClassVar[int]
    version: int
    learner_step: int
    precision: _policy_pb2.Precision
    spec: _policy_pb2.ModelSpec
    num_tensors: int
    def __init__(self, version: _Optional[int] = ..., learner_step: _Optional[int] = ..., precision: _Optional[_Union[_policy_pb2.Precision, str]] = ..., spec: _Optional[_Union[_policy_pb2.ModelSpec, _Mapping]] = ..., num_tensors: _Optional[int] = ...) -> None: ...

class TensorChunk(_message.Message):
    __slots__ = ("name", "shape", "offset", "data")
    NAME_FIELD_NUMBER: _ClassVar[int]
    SHAPE_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    name: str
    shape: _containers.RepeatedScalarFieldContainer[int]
    offset: int
    data: bytes
    def __init__(self, name: _Optional[str] = ..., shape: _Optional[_Iterable[int]] = ..., offset: _Optional[int] = ..., data: _Optional[bytes] = ...) -> None: ...

class PublishChunk(_message.Message):
    __slots__ = ("header", "tensor")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    TENSOR_FIELD_NUMBER: _ClassVar[int]
    header: PublishHeader
    tensor: TensorChunk
    def __init__(self, header: _Optional[_Union[PublishHeader, _Mapping]] = ..., tensor: _Optional[_Union[TensorChunk, _Mapping]] = ...) -> None: ...

class PublishReply(_message.Message):
    __slots__ = ("version", "blob_bytes", "fp32_equivalent_bytes", "quantization_error")
    VERSION_FIELD_NUMBER: _ClassVar[int]
    BLOB_BYTES_FIELD_NUMBER: _ClassVar[int]
    FP32_EQUIVALENT_BYTES_FIELD_NUMBER: _ClassVar[int]
    QUANTIZATION_ERROR_FIELD_NUMBER: _ClassVar[int]
    version: int
    blob_bytes: int
    fp32_equivalent_bytes: int
    quantization_error: float
    def __init__(self, version: _Optional[int] = ..., blob_bytes: _Optional[int] = ..., fp32_equivalent_bytes: _Optional[int] = ..., quantization_error: _Optional[float] = ...) -> None: ...

class WatchPolicyRequest(_message.Message):
    __slots__ = ("actor_id", "known_version")
    ACTOR_ID_FIELD_NUMBER: _ClassVar[int]
    KNOWN_VERSION_FIELD_NUMBER: _ClassVar[int]
    actor_id: str
    known_version: int
    def __init__(self, actor_id: _Optional[str] = ..., known_version: _Optional[int] = ...) -> None: ...

class PolicyAnnouncement(_message.Message):
    __slots__ = ("version", "precision", "blob_bytes", "sha256", "learner_step")
    VERSION_FIELD_NUMBER: _ClassVar[int]
    PRECISION_FIELD_NUMBER: _ClassVar[int]
    BLOB_BYTES_FIELD_NUMBER: _ClassVar[int]
    SHA256_FIELD_NUMBER: _ClassVar[int]
    LEARNER_STEP_FIELD_NUMBER: _ClassVar[int]
    version: int
    precision: _policy_pb2.Precision
    blob_bytes: int
    sha256: bytes
    learner_step: int
    def __init__(self, version: _Optional[int] = ..., precision: _Optional[_Union[_policy_pb2.Precision, str]] = ..., blob_bytes: _Optional[int] = ..., sha256: _Optional[bytes] = ..., learner_step: _Optional[int] = ...) -> None: ...

class GetPolicyRequest(_message.Message):
    __slots__ = ("version", "actor_id", "base_version")
    VERSION_FIELD_NUMBER: _ClassVar[int]
    ACTOR_ID_FIELD_NUMBER: _ClassVar[int]
    BASE_VERSION_FIELD_NUMBER: _ClassVar[int]
    version: int
    actor_id: str
    base_version: int
    def __init__(self, version: _Optional[int] = ..., actor_id: _Optional[str] = ..., base_version: _Optional[int] = ...) -> None: ...

class BlobChunk(_message.Message):
    __slots__ = ("version", "total_bytes", "offset", "data", "kind", "base_version")
    VERSION_FIELD_NUMBER: _ClassVar[int]
    TOTAL_BYTES_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    BASE_VERSION_FIELD_NUMBER: _ClassVar[int]
    version: int
    total_bytes: int
    offset: int
    data: bytes
    kind: BlobKind
    base_version: int
    def __init__(self, version: _Optional[int] = ..., total_bytes: _Optional[int] = ..., offset: _Optional[int] = ..., data: _Optional[bytes] = ..., kind: _Optional[_Union[BlobKind, str]] = ..., base_version: _Optional[int] = ...) -> None: ...
