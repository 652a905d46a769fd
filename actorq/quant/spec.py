"""ModelSpec <-> MLPSpec or CNNSpec: the architecture a blob carries (kind "mlp" or "cnn")."""

from __future__ import annotations

from actorq.models.specs import CNNSpec, MLPSpec
from actorq.quant.errors import BlobError
from actorq.v1 import policy_pb2

MLP_KIND = "mlp"
CNN_KIND = "cnn"


def spec_to_proto(spec: MLPSpec) -> policy_pb2.ModelSpec:
    """Wire form of an MLP spec (or of a CNNSpec, kind "cnn")."""
    if isinstance(spec, CNNSpec):
        return cnn_spec_to_proto(spec)
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
    """MLP (or CNN) spec from its wire form; BlobError if the kind or any field is
    unsupported. A CNNSpec is returned typed as MLPSpec: it has the same interface
    (weight_shapes, fp32_bytes, obs_dim, num_outputs) that readers use."""
    if proto.kind == CNN_KIND:
        return cnn_spec_from_proto(proto)  # type: ignore[return-value]
    if proto.kind != MLP_KIND:
        raise BlobError(
            f"model kind {proto.kind!r} is not supported; expected {MLP_KIND!r} or {CNN_KIND!r}"
        )
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


def cnn_spec_to_proto(spec: CNNSpec) -> policy_pb2.ModelSpec:
    """Wire form of a CNN spec: uint8 obs [C, H, W] x input_scale, conv layers, MLP head."""
    return policy_pb2.ModelSpec(
        kind=CNN_KIND,
        obs_dim=spec.obs_dim,
        num_outputs=spec.num_outputs,
        hidden=list(spec.hidden),
        activation=spec.activation,
        obs_shape=list(spec.obs_shape),
        conv=[policy_pb2.ConvLayer(out_channels=o, kernel=k, stride=s) for o, k, s in spec.convs],
        input_scale=spec.input_scale,
    )


def cnn_spec_from_proto(proto: policy_pb2.ModelSpec) -> CNNSpec:
    try:
        spec = CNNSpec(
            obs_shape=tuple(proto.obs_shape),  # type: ignore[arg-type]
            num_outputs=proto.num_outputs,
            convs=tuple((c.out_channels, c.kernel, c.stride) for c in proto.conv),
            hidden=tuple(proto.hidden),
            input_scale=proto.input_scale,
            activation=proto.activation,
            output_activation=proto.output_activation or "none",
            input_norm=proto.input_norm,
        )
    except ValueError as err:
        raise BlobError(f"invalid cnn model spec in blob: {err}") from err
    if proto.obs_dim != spec.obs_dim:
        raise BlobError(f"cnn spec obs_dim {proto.obs_dim} != prod(obs_shape) {spec.obs_dim}")
    return spec
