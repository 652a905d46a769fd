"""Delta broadcasts: version v' sent as its change from a version v the reader holds.

Every array of the policy (spec order: weight values, scales, biases) is sent as target
minus base, concatenated and compressed (zstd; xz and zlib deltas still apply): int8
codes subtract byte-wise modulo 256, floats XOR their bit patterns. The reader applies
the diff, rebuilds the target's payload and accepts it only if its SHA-256 (and HMAC,
with keys) verifies; any doubt raises BlobError and the caller fetches the full blob.
docs/BLOB_FORMAT.md section 9.
"""

from __future__ import annotations

import hashlib
import hmac
import lzma
import zlib
from typing import TYPE_CHECKING, cast

import numpy as np
import zstandard
from google.protobuf.message import DecodeError

from actorq.quant.arrays import PolicyArrays, policy_header, policy_payload
from actorq.quant.blob import EncodedPolicy, decode_payload, verified_payload
from actorq.quant.errors import BlobError
from actorq.quant.spec import spec_from_proto
from actorq.quant.tensors import TensorArrays
from actorq.v1 import policy_pb2

if TYPE_CHECKING:
    from actorq.security.signing import PolicyKeys

ZLIB_LEVEL = 6
"""zlib level of the diff: level 9 saved under 1% more on real policies, at 2-3x the time."""

XZ_PRESET = 6
"""xz preset of the diff: on TD3 Pendulum 256x256 deltas, 16% smaller than zlib level 6
(median 0.063 of the dense fp32 blob against 0.075) at ~18 ms per delta against ~4 ms;
preset 0 saved only 2% (BENCHMARKS.md 14)."""

ZSTD_LEVEL = 1
"""zstd level of the diff, the default codec. On consecutive int8 versions of a
512x512x512 CartPole DQN: ~1-2 ms of CPU per delta against ~107-196 ms for xz preset 6,
10-13% larger; levels 3 and 6 were larger than 1 on these diffs (BENCHMARKS.md 22c)."""

DEFAULT_CODEC = policy_pb2.DELTA_CODEC_ZSTD
"""What make_delta writes unless told otherwise. Until 22c it was xz up to 1 MiB of raw
diff and zlib above: xz ran at ~3 MB/s and limited how many versions/s the quantizer
stored on a loaded machine (BENCHMARKS.md 22)."""

XZ_MEMLIMIT = 64 << 20
"""Decoder memory cap: the xz header names its dictionary size, and a forged delta must
not make an actor allocate more than this (preset 6 needs ~9 MiB)."""

ZSTD_MAX_WINDOW = 64 << 20
"""Largest zstd window a delta may declare. The decoder's real bound is the frame's
declared content size, which must equal the diff length the held policy needs: it decodes
in one pass into a buffer of that size and allocates no window."""

_CODEC_NAMES = {
    policy_pb2.DELTA_CODEC_ZLIB: "zlib",
    policy_pb2.DELTA_CODEC_XZ: "xz",
    policy_pb2.DELTA_CODEC_ZSTD: "zstd",
}


def _parts(arrays: PolicyArrays) -> list[tuple[str, np.ndarray]]:
    """The arrays a diff covers, in diff order: per tensor its values, then its scales."""
    parts: list[tuple[str, np.ndarray]] = []
    for name in arrays.spec.weight_shapes():
        tensor = arrays.tensors[name]
        parts.append((name, tensor.values))
        if tensor.scales is not None:
            parts.append((f"{name}:scales", tensor.scales))
    return parts


def _as_bits(values: np.ndarray) -> np.ndarray:
    """Little-endian unsigned view of the elements (bit patterns for floats)."""
    unsigned = np.dtype(f"<u{values.dtype.itemsize}")
    return np.ascontiguousarray(values).astype(values.dtype.newbyteorder("<")).view(unsigned)


def _diff(base: np.ndarray, target: np.ndarray) -> np.ndarray:
    if target.dtype == np.int8:  # codes: (target - base) mod 256
        return (target.view(np.uint8) - base.view(np.uint8)).ravel()
    return (_as_bits(target) ^ _as_bits(base)).ravel()


def diff_parts(base: PolicyArrays, target: PolicyArrays) -> list[tuple[str, np.ndarray]]:
    """(name, difference) per array in diff order, uncompressed: uint8 for int8 codes
    (mod 256), the XORed bit patterns (uint32, uint16) for float values and scales."""
    pairs = zip(_parts(base), _parts(target), strict=True)
    return [(name, _diff(held, new)) for (name, held), (_, new) in pairs]


def _undiff(base: np.ndarray, diff: np.ndarray) -> np.ndarray:
    if base.dtype == np.int8:
        return (base.view(np.uint8) + diff.reshape(base.shape)).view(np.int8)
    bits = _as_bits(base) ^ diff.reshape(base.shape)
    return bits.view(base.dtype.newbyteorder("<")).astype(base.dtype)


def make_delta(
    base: PolicyArrays,
    target: EncodedPolicy,
    keys: PolicyKeys | None = None,
    codec: int | None = None,
) -> bytes | None:
    """Delta envelope from `base` to `target`, or None when they cannot be diffed
    (different spec or precision, base not newer, base digest unknown). `codec`: a
    DeltaCodec value, or None for DEFAULT_CODEC (zstd)."""
    new = target.arrays
    if (
        new.spec != base.spec
        or new.precision != base.precision
        or new.version <= base.version
        or not base.sha256
        or not _same_layout(base, new)
    ):
        return None
    raw = b"".join(diff.tobytes() for _, diff in diff_parts(base, new))
    if codec is None:
        codec = DEFAULT_CODEC
    delta = policy_pb2.PolicyDelta(
        base_version=base.version,
        base_sha256=base.sha256,
        header=policy_header(new),
        target_sha256=target.sha256,
        target_hmac_sha256=target.hmac_sha256,
        target_key_id=target.key_id,
        codec=cast(policy_pb2.DeltaCodec, codec),
        diff=_compress(raw, codec),
    )
    payload = delta.SerializeToString()
    envelope = policy_pb2.PolicyEnvelope(payload=payload, sha256=hashlib.sha256(payload).digest())
    if keys is not None and keys.enabled:
        envelope.key_id, envelope.hmac_sha256 = keys.sign(payload)
    return envelope.SerializeToString()


def _same_layout(base: PolicyArrays, new: PolicyArrays) -> bool:
    """Every tensor has the same element type and scales in both (a guard fallback layer,
    float inside a quantized policy, changes a layer's type: such versions go full)."""
    for name, tensor in new.tensors.items():
        held = base.tensors[name]
        if tensor.values.dtype != held.values.dtype or (tensor.scales is None) != (
            held.scales is None
        ):
            return False
    return True


def apply_delta(
    base: PolicyArrays,
    envelope: bytes,
    keys: PolicyKeys | None = None,
    expected_sha256: bytes | None = None,
) -> PolicyArrays:
    """The target version's arrays, checked exactly like a full blob; BlobError if the
    delta is corrupt, does not apply to `base`, or rebuilds anything but the target."""
    delta = _parse(verified_payload(envelope, keys))
    _check_applies(delta, base, expected_sha256)
    parts = _parts(base)
    expected_len = sum(values.nbytes for _, values in parts)
    raw = _decompress(delta.diff, expected_len, delta.codec)
    tensors: dict[str, TensorArrays] = {}
    offset = 0
    rebuilt: dict[str, np.ndarray] = {}
    for key, values in parts:
        diff = np.frombuffer(raw, np.dtype(f"<u{values.dtype.itemsize}"), values.size, offset)
        rebuilt[key] = _undiff(values, diff)
        offset += values.nbytes
    for name, tensor in base.tensors.items():
        scales = None if tensor.scales is None else rebuilt[f"{name}:scales"]
        tensors[name] = TensorArrays(rebuilt[name], scales)
    return _verified_target(delta, base, tensors, keys)


def _parse(payload: bytes) -> policy_pb2.PolicyDelta:
    try:
        return policy_pb2.PolicyDelta.FromString(payload)
    except DecodeError as err:
        raise BlobError(f"policy delta does not parse: {err}") from err


def _check_applies(
    delta: policy_pb2.PolicyDelta, base: PolicyArrays, expected_sha256: bytes | None
) -> None:
    header = delta.header
    if delta.base_version != base.version or not base.sha256:
        raise BlobError(f"delta applies to version {delta.base_version}, held is {base.version}")
    if not hmac.compare_digest(delta.base_sha256, base.sha256):
        raise BlobError(f"delta base sha256 differs from held version {base.version}'s")
    if header.version <= base.version:
        raise BlobError(f"delta target version {header.version} is not newer than {base.version}")
    if header.precision != base.precision or spec_from_proto(header.spec) != base.spec:
        raise BlobError("delta changes the model spec or precision; only full blobs may")
    if header.tensors:
        raise BlobError("delta header must carry no tensors")
    if delta.codec not in _CODEC_NAMES:
        raise BlobError(
            f"delta codec value {delta.codec} is not supported (1 = zlib, 2 = xz, 3 = zstd)"
        )
    if expected_sha256 is not None and delta.target_sha256 != expected_sha256:
        raise BlobError("delta target sha256 differs from the announced one")


def _compress(raw: bytes, codec: int) -> bytes:
    if codec == policy_pb2.DELTA_CODEC_ZSTD:  # the frame declares its content size
        return zstandard.ZstdCompressor(level=ZSTD_LEVEL).compress(raw)
    if codec == policy_pb2.DELTA_CODEC_XZ:
        return lzma.compress(raw, format=lzma.FORMAT_XZ, check=lzma.CHECK_NONE, preset=XZ_PRESET)
    if codec == policy_pb2.DELTA_CODEC_ZLIB:
        return zlib.compress(raw, ZLIB_LEVEL)
    raise ValueError(f"delta codec value {codec}: expected 1 (zlib), 2 (xz) or 3 (zstd)")


def _decompress(data: bytes, expected_len: int, codec: int) -> bytes:
    """The diff, exactly `expected_len` bytes from one complete stream; bounded, so a
    forged stream cannot inflate past what the held policy needs (no zip bomb)."""
    name = _CODEC_NAMES[codec]
    if codec == policy_pb2.DELTA_CODEC_ZSTD:
        return _decompress_zstd(data, expected_len)
    decoder: lzma.LZMADecompressor | zlib._Decompress
    if codec == policy_pb2.DELTA_CODEC_XZ:
        decoder, error = lzma.LZMADecompressor(lzma.FORMAT_XZ, XZ_MEMLIMIT), lzma.LZMAError
    else:
        decoder, error = zlib.decompressobj(), zlib.error
    try:
        raw = decoder.decompress(data, expected_len + 1)
    except error as err:
        raise BlobError(f"delta diff does not inflate ({name}): {err}") from err
    if len(raw) != expected_len or not decoder.eof or decoder.unused_data:
        raise BlobError(
            f"delta diff inflates to {len(raw)}{'+' if not decoder.eof else ''} bytes "
            f"({name}, complete stream: {decoder.eof}), the held policy needs exactly "
            f"{expected_len}"
        )
    return raw


def _decompress_zstd(data: bytes, expected_len: int) -> bytes:
    """One zstd frame that declares exactly `expected_len` bytes of content, checked before
    decoding: zstandard allocates the declared size whatever `max_output_size` says, so a
    frame declaring gigabytes is refused here, unread (no zip bomb)."""
    try:
        declared = zstandard.frame_content_size(data)
        if declared != expected_len:
            shown = "no" if declared == -1 else f"{declared}"
            raise BlobError(
                f"delta diff inflates to {shown} bytes (zstd frame header's content size), "
                f"the held policy needs exactly {expected_len}"
            )
        decoder = zstandard.ZstdDecompressor(max_window_size=ZSTD_MAX_WINDOW)
        raw = decoder.decompress(data, max_output_size=expected_len, allow_extra_data=False)
    except zstandard.ZstdError as err:
        raise BlobError(f"delta diff does not inflate (zstd): {err}") from err
    if len(raw) != expected_len:  # the frame's declared size binds the decoder; kept as a guard
        raise BlobError(f"delta diff inflates to {len(raw)} bytes (zstd), needs {expected_len}")
    return raw


def _verified_target(
    delta: policy_pb2.PolicyDelta,
    base: PolicyArrays,
    tensors: dict[str, TensorArrays],
    keys: PolicyKeys | None,
) -> PolicyArrays:
    header = delta.header
    target = PolicyArrays(
        version=header.version,
        learner_step=header.learner_step,
        precision=base.precision,
        spec=base.spec,
        created_unix_ms=header.created_unix_ms,
        fp32_equivalent_bytes=header.fp32_equivalent_bytes,
        tensors=tensors,
    )
    try:
        payload, _ = policy_payload(target)
    except ValueError as err:  # e.g. an int4 code the packer refuses
        raise BlobError(f"delta rebuilds an invalid policy: {err}") from err
    digest = hashlib.sha256(payload).digest()
    if not hmac.compare_digest(digest, delta.target_sha256):
        raise BlobError(
            f"delta rebuilds a payload hashing to {digest.hex()[:16]}..., target is "
            f"{delta.target_sha256.hex()[:16]}..."
        )
    if keys is not None and keys.enabled:
        keys.verify(payload, delta.target_key_id, delta.target_hmac_sha256)
    return decode_payload(payload, digest, base.spec)
