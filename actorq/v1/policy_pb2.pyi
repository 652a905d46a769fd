from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Precision(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    PRECISION_UNSPECIFIED: _ClassVar[Precision]
    PRECISION_FP32: _ClassVar[Precision]
    PRECISION_FP16: _ClassVar[Precision]
    PRECISION_INT8: _ClassVar[Precision]
    PRECISION_INT4: _ClassVar[Precision]

class DType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    DTYPE_UNSPECIFIED: _ClassVar[DType]
    DTYPE_FLOAT32: _ClassVar[DType]
    DTYPE_FLOAT16: _ClassVar[DType]
    DTYPE_INT8: _ClassVar[DType]
    DTYPE_INT4: _ClassVar[DType]
    DTYPE_SPARSE_INT8: _ClassVar[DType]

class DeltaCodec(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    DELTA_CODEC_UNSPECIFIED: _ClassVar[DeltaCodec]
    DELTA_CODEC_ZLIB: _ClassVar[DeltaCodec]
    DELTA_CODEC_XZ: _ClassVar[DeltaCodec]
    DELTA_CODEC_ZSTD: _ClassVar[DeltaCodec]
PRECISION_UNSPECIFIED: Precision
PRECISION_FP32: Precision
PRECISION_FP16: Precision
PRECISION_INT8: Precision
PRECISION_INT4: Precision
DTYPE_UNSPECIFIED: DType
DTYPE_FLOAT32: DType
DTYPE_FLOAT16: DType
DTYPE_INT8: DType
DTYPE_INT4: DType
DTYPE_SPARSE_INT8: DType
DELTA_CODEC_UNSPECIFIED: DeltaCodec
DELTA_CODEC_ZLIB: DeltaCodec
DELTA_CODEC_XZ: DeltaCodec
DELTA_CODEC_ZSTD: DeltaCodec

class ModelSpec(_message.Message):
    __slots__ = ("kind", "obs_dim", "num_outputs", "hidden", "activation", "output_activation", "input_norm", "obs_shape", "conv", "input_scale")
    KIND_FIELD_NUMBER: _ClassVar[int]
    OBS_DIM_FIELD_NUMBER: _ClassVar[int]
    NUM_OUTPUTS_FIELD_NUMBER: _ClassVar[int]
    HIDDEN_FIELD_NUMBER: _ClassVar[int]
    ACTIVATION_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_ACTIVATION_FIELD_NUMBER: _ClassVar[int]
    INPUT_NORM_FIELD_NUMBER: _ClassVar[int]
    OBS_SHAPE_FIELD_NUMBER: _ClassVar[int]
    CONV_FIELD_NUMBER: _ClassVar[int]
    INPUT_SCALE_FIELD_NUMBER: _ClassVar[int]
    kind: str
    obs_dim: int
    num_outputs: int
    hidden: _containers.RepeatedScalarFieldContainer[int]
    activation: str
    output_activation: str
    input_norm: bool
    obs_shape: _containers.RepeatedScalarFieldContainer[int]
    conv: _containers.RepeatedCompositeFieldContainer[ConvLayer]
    input_scale: float
    def __init__(self, kind: _Optional[str] = ..., obs_dim: _Optional[int] = ..., num_outputs: _Optional[int] = ..., hidden: _Optional[_Iterable[int]] = ..., activation: _Optional[str] = ..., output_activation: _Optional[str] = ..., input_norm: _Optional[bool] = ..., obs_shape: _Optional[_Iterable[int]] = ..., conv: _Optional[_Iterable[_Union[ConvLayer, _Mapping]]] = ..., input_scale: _Optional[float] = ...) -> None: ...

class ConvLayer(_message.Message):
    __slots__ = ("out_channels", "kernel", "stride")
    OUT_CHANNELS_FIELD_NUMBER: _ClassVar[int]
    KERNEL_FIELD_NUMBER: _ClassVar[int]
    STRIDE_FIELD_NUMBER: _ClassVar[int]
    out_channels: int
    kernel: int
    stride: int
    def __init__(self, out_channels: _Optional[int] = ..., kernel: _Optional[int] = ..., stride: _Optional[int] = ...) -> None: ...

class Tensor(_message.Message):
    __slots__ = ("name", "shape", "dtype", "data", "scales", "zero_points", "axis", "bitmap", "index_gaps", "rice_gaps")
    NAME_FIELD_NUMBER: _ClassVar[int]
    SHAPE_FIELD_NUMBER: _ClassVar[int]
    DTYPE_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    SCALES_FIELD_NUMBER: _ClassVar[int]
    ZERO_POINTS_FIELD_NUMBER: _ClassVar[int]
    AXIS_FIELD_NUMBER: _ClassVar[int]
    BITMAP_FIELD_NUMBER: _ClassVar[int]
    INDEX_GAPS_FIELD_NUMBER: _ClassVar[int]
    RICE_GAPS_FIELD_NUMBER: _ClassVar[int]
    name: str
    shape: _containers.RepeatedScalarFieldContainer[int]
    dtype: DType
    data: bytes
    scales: _containers.RepeatedScalarFieldContainer[float]
    zero_points: _containers.RepeatedScalarFieldContainer[int]
    axis: int
    bitmap: bytes
    index_gaps: bytes
    rice_gaps: bytes
    def __init__(self, name: _Optional[str] = ..., shape: _Optional[_Iterable[int]] = ..., dtype: _Optional[_Union[DType, str]] = ..., data: _Optional[bytes] = ..., scales: _Optional[_Iterable[float]] = ..., zero_points: _Optional[_Iterable[int]] = ..., axis: _Optional[int] = ..., bitmap: _Optional[bytes] = ..., index_gaps: _Optional[bytes] = ..., rice_gaps: _Optional[bytes] = ...) -> None: ...

class Policy(_message.Message):
    __slots__ = ("version", "learner_step", "precision", "spec", "tensors", "created_unix_ms", "fp32_equivalent_bytes")
    VERSION_FIELD_NUMBER: _ClassVar[int]
    LEARNER_STEP_FIELD_NUMBER: _ClassVar[int]
    PRECISION_FIELD_NUMBER: _ClassVar[int]
    SPEC_FIELD_NUMBER: _ClassVar[int]
    TENSORS_FIELD_NUMBER: _ClassVar[int]
    CREATED_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    FP32_EQUIVALENT_BYTES_FIELD_NUMBER: _ClassVar[int]
    version: int
    learner_step: int
    precision: Precision
    spec: ModelSpec
    tensors: _containers.RepeatedCompositeFieldContainer[Tensor]
    created_unix_ms: int
    fp32_equivalent_bytes: int
    def __init__(self, version: _Optional[int] = ..., learner_step: _Optional[int] = ..., precision: _Optional[_Union[Precision, str]] = ..., spec: _Optional[_Union[ModelSpec, _Mapping]] = ..., tensors: _Optional[_Iterable[_Union[Tensor, _Mapping]]] = ..., created_unix_ms: _Optional[int] = ..., fp32_equivalent_bytes: _Optional[int] = ...) -> None: ...

class PolicyEnvelope(_message.Message):
    __slots__ = ("payload", "sha256", "hmac_sha256", "key_id")
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    SHA256_FIELD_NUMBER: _ClassVar[int]
    HMAC_SHA256_FIELD_NUMBER: _ClassVar[int]
    KEY_ID_FIELD_NUMBER: _ClassVar[int]
    payload: bytes
    sha256: bytes
    hmac_sha256: bytes
    key_id: str
    def __init__(self, payload: _Optional[bytes] = ..., sha256: _Optional[bytes] = ..., hmac_sha256: _Optional[bytes] = ..., key_id: _Optional[str] = ...) -> None: ...

class PolicyDelta(_message.Message):
    __slots__ = ("base_version", "base_sha256", "header", "target_sha256", "target_hmac_sha256", "target_key_id", "codec", "diff")
    BASE_VERSION_FIELD_NUMBER: _ClassVar[int]
    BASE_SHA256_FIELD_NUMBER: _ClassVar[int]
    HEADER_FIELD_NUMBER: _ClassVar[int]
    TARGET_SHA256_FIELD_NUMBER: _ClassVar[int]
    TARGET_HMAC_SHA256_FIELD_NUMBER: _ClassVar[int]
    TARGET_KEY_ID_FIELD_NUMBER: _ClassVar[int]
    CODEC_FIELD_NUMBER: _ClassVar[int]
    DIFF_FIELD_NUMBER: _ClassVar[int]
    base_version: int
    base_sha256: bytes
    header: Policy
    target_sha256: bytes
    target_hmac_sha256: bytes
    target_key_id: str
    codec: DeltaCodec
    diff: bytes
    def __init__(self, base_version: _Optional[int] = ..., base_sha256: _Optional[bytes] = ..., header: _Optional[_Union[Policy, _Mapping]] = ..., target_sha256: _Optional[bytes] = ..., target_hmac_sha256: _Optional[bytes] = ..., target_key_id: _Optional[str] = ..., codec: _Optional[_Union[DeltaCodec, str]] = ..., diff: _Optional[bytes] = ...) -> None: ...
