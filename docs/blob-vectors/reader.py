"""A complete policy-blob reader written from docs/BLOB_FORMAT.md alone.

Standard library + numpy (+ the zstandard package for zstd deltas only); no protobuf
package and no actorq code: the protobuf wire format is parsed by hand (varints,
length-delimited fields, fixed32, packed repeated scalars). It covers every kind:
FP32/FP16/INT8/INT4 MLPs and CNNs, sparse int8 in its three position forms, float
fallback layers, HMAC-signed envelopes, and zlib/xz/zstd deltas
(including the canonical payload rebuild whose SHA-256 must match). It is the reference
for ports; tests/unit/test_blob_vectors.py runs it on docs/blob-vectors/.

    policy = read_blob(envelope_bytes, secret=None)      # -> Policy (arrays + header)
    target = apply_delta(delta_envelope_bytes, policy)   # -> Policy of the new version

The network itself (sections 2 and 3) is in network.py beside this file.
"""

from __future__ import annotations

import hashlib
import hmac
import lzma
import math
import zlib
from dataclasses import dataclass

import numpy as np

FLOAT32, FLOAT16, INT8, INT4, SPARSE_INT8 = 1, 2, 3, 4, 5
FP32, FP16, P_INT8, P_INT4 = 1, 2, 3, 4
CODEC_ZLIB, CODEC_XZ, CODEC_ZSTD = 1, 2, 3


class BlobError(ValueError):
    """The blob breaks a rule of the format: keep the previous policy."""


# --- protobuf wire format ---------------------------------------------------------------


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= len(buf) or shift > 63:
            raise BlobError("varint cut off or too long")
        byte = buf[pos]
        value |= (byte & 0x7F) << shift
        pos, shift = pos + 1, shift + 7
        if not byte & 0x80:
            return value, pos


def parse(buf: bytes) -> list[tuple[int, int, object, bytes]]:
    """(field number, wire type, value, raw bytes of the whole field) in stored order."""
    out, pos = [], 0
    while pos < len(buf):
        start = pos
        key, pos = _varint(buf, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _varint(buf, pos)
        elif wire == 2:
            length, pos = _varint(buf, pos)
            if pos + length > len(buf):
                raise BlobError(f"field {number} runs past the end")
            value, pos = bytes(buf[pos : pos + length]), pos + length
        elif wire == 5:
            value, pos = bytes(buf[pos : pos + 4]), pos + 4
        elif wire == 1:
            value, pos = bytes(buf[pos : pos + 8]), pos + 8
        else:
            raise BlobError(f"unsupported wire type {wire}")
        out.append((number, wire, value, bytes(buf[start:pos])))
    return out


def _fields(buf: bytes) -> dict[int, list]:
    by_number: dict[int, list] = {}
    for number, wire, value, _ in parse(buf):
        by_number.setdefault(number, []).append((wire, value))
    return by_number


def _one(f: dict, number: int, default=None):
    return f[number][-1][1] if number in f else default  # proto3: the last one wins


def _packed_varints(f: dict, number: int) -> list[int]:
    out: list[int] = []
    for wire, value in f.get(number, []):
        if wire == 0:
            out.append(value)
            continue
        pos = 0
        while pos < len(value):
            v, pos = _varint(value, pos)
            out.append(v)
    return out


def _packed_floats(f: dict, number: int) -> np.ndarray:
    raw = b"".join(v for _, v in f.get(number, []))
    return np.frombuffer(raw, "<f4").astype(np.float32)


def _key(number: int, wire: int) -> bytes:
    return _enc_varint(number << 3 | wire)


def _enc_varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _len_field(number: int, data: bytes) -> bytes:
    return _key(number, 2) + _enc_varint(len(data)) + data


# --- the policy -------------------------------------------------------------------------


@dataclass
class Tensor:
    """A decoded tensor: `values` float32 (dequantized), plus the wire-typed `held`
    (int8 codes, float16 or float32 values) and `scales` for quantized ones."""

    dtype: int
    values: np.ndarray
    held: np.ndarray
    scales: np.ndarray | None = None
    positions: str = ""  # sparse only: bitmap / index_gaps / rice_gaps


@dataclass
class Policy:
    version: int
    precision: int
    spec: dict
    tensors: dict[str, Tensor]
    payload: bytes
    sha256: bytes
    fp32_equivalent_bytes: int = 0  # field 7, informational: readers do not check it


def weight_shapes(spec: dict) -> dict[str, tuple[int, ...]]:
    """Tensor names and shapes the spec implies, in spec (= writer and diff) order."""
    shapes: dict[str, tuple[int, ...]] = {}
    if spec["kind"] == "cnn":
        c, h, w = spec["obs_shape"]
        for i, (out, k, s) in enumerate(spec["conv"]):
            shapes[f"convs.{2 * i}.weight"] = (out, c, k, k)
            shapes[f"convs.{2 * i}.bias"] = (out,)
            c, h, w = out, (h - k) // s + 1, (w - k) // s + 1  # no padding
        widths, prefix = [c * h * w, *spec["hidden"], spec["num_outputs"]], "head"
    else:
        if spec["input_norm"]:
            shapes["input_norm.shift"] = (spec["obs_dim"],)
            shapes["input_norm.scale"] = (spec["obs_dim"],)
        widths, prefix = [spec["obs_dim"], *spec["hidden"], spec["num_outputs"]], "layers"
    for j in range(len(widths) - 1):
        shapes[f"{prefix}.{2 * j}.weight"] = (widths[j + 1], widths[j])
        shapes[f"{prefix}.{2 * j}.bias"] = (widths[j + 1],)
    if spec["kind"] == "cnn":
        shapes["act_max"] = (1 + len(spec["conv"]),)
    return shapes


def _spec(buf: bytes) -> dict:
    f = _fields(buf)
    scale = _one(f, 10)
    return {
        "kind": _one(f, 1, b"").decode(),
        "obs_dim": _one(f, 2, 0),
        "num_outputs": _one(f, 3, 0),
        "hidden": _packed_varints(f, 4),
        "activation": _one(f, 5, b"").decode(),
        "output_activation": _one(f, 6, b"").decode(),
        "input_norm": bool(_one(f, 7, 0)),
        "obs_shape": _packed_varints(f, 8),
        "conv": [
            (_one(c, 1, 0), _one(c, 2, 0), _one(c, 3, 0))
            for c in (_fields(v) for _, v in f.get(9, []))
        ],
        "input_scale": float(np.frombuffer(scale, "<f4")[0]) if scale else 0.0,
    }


def check_spec(spec: dict) -> None:
    """Section 4, check 3: the spec describes a network this reader can build."""
    dims = [spec["obs_dim"], spec["num_outputs"], *spec["hidden"]]
    if min(dims) < 1 or spec["activation"] != "relu":
        raise BlobError(f"spec needs dims >= 1 and activation relu: {spec}")
    if spec["kind"] == "mlp":
        if spec["output_activation"] not in ("", "none", "tanh"):  # "none" reads as ""
            raise BlobError(f"unknown output_activation {spec['output_activation']!r}")
        return
    if spec["output_activation"] not in ("", "none") or spec["input_norm"]:
        raise BlobError("cnn spec: no output activation and no input_norm")
    scale = spec["input_scale"]
    if not (math.isfinite(scale) and scale > 0) or len(spec["obs_shape"]) != 3:
        raise BlobError("cnn spec: input_scale finite > 0 and obs_shape [C, H, W]")
    if min(spec["obs_shape"]) < 1 or spec["obs_dim"] != math.prod(spec["obs_shape"]):
        raise BlobError("cnn spec: obs_shape entries >= 1, obs_dim = their product")
    _, h, w = spec["obs_shape"]
    if not spec["conv"]:
        raise BlobError("cnn spec: at least one conv")
    for out, k, s in spec["conv"]:
        h, w = (h - k) // s + 1 if s else 0, (w - k) // s + 1 if s else 0
        if min(out, k, s) < 1 or h < 1 or w < 1:
            raise BlobError("cnn spec: conv sizes >= 1 that fit the frame")


def verified_payload(envelope: bytes, secret: bytes | None = None) -> tuple[bytes, bytes]:
    """(payload, sha256) of a checked PolicyEnvelope; with `secret` (the key file's text,
    whitespace stripped) the HMAC and key id must verify too."""
    f = _fields(envelope)
    payload, digest = _one(f, 1, b""), _one(f, 2, b"")
    if len(digest) != 32 or hashlib.sha256(payload).digest() != digest:
        raise BlobError("sha256 missing or different: keep the previous policy")
    if secret is not None:
        key_id = hashlib.sha256(b"actorq-policy-key-id:" + secret).hexdigest()[:16]
        mac = _one(f, 3, b"")
        if _one(f, 4, b"").decode() != key_id:
            raise BlobError("unsigned, or signed with a key this reader does not hold")
        if not hmac.compare_digest(mac, hmac.new(secret, payload, hashlib.sha256).digest()):
            raise BlobError("HMAC differs")
    return payload, digest


def read_blob(envelope: bytes, secret: bytes | None = None) -> Policy:
    payload, digest = verified_payload(envelope, secret)
    return read_payload(payload, digest)


def read_payload(payload: bytes, digest: bytes) -> Policy:
    f = _fields(payload)
    spec = _spec(_one(f, 4, b""))
    precision = _one(f, 3, 0)
    if precision not in (FP32, FP16, P_INT8, P_INT4) or spec["kind"] not in ("mlp", "cnn"):
        raise BlobError(f"unknown precision {precision} or spec kind {spec['kind']!r}")
    check_spec(spec)
    shapes = weight_shapes(spec)
    tensors: dict[str, Tensor] = {}
    for _, t in f.get(5, []):
        name, tensor = _tensor(t, precision)
        if name not in shapes or name in tensors or tuple(tensor.held.shape) != shapes[name]:
            raise BlobError(f"tensor {name!r}: unexpected, repeated or of the wrong shape")
        tensors[name] = tensor
    if set(tensors) != set(shapes):
        raise BlobError(f"missing tensors: {sorted(set(shapes) - set(tensors))}")
    return Policy(_one(f, 1, 0), precision, spec, tensors, payload, digest, _one(f, 7, 0))


def _tensor(buf: bytes, precision: int) -> tuple[str, Tensor]:
    f = _fields(buf)
    name = _one(f, 1, b"").decode()
    shape = tuple(_packed_varints(f, 2))
    dtype, data = _one(f, 3, 0), _one(f, 4, b"")
    scales = _packed_floats(f, 5)
    zero_points = _packed_varints(f, 6)
    count = math.prod(shape)
    if dtype != SPARSE_INT8 and any(n in f for n in (8, 9, 10)):
        raise BlobError(f"{name}: a dense tensor must not carry positions")
    if dtype in (FLOAT32, FLOAT16):
        wire = "<f4" if dtype == FLOAT32 else "<f2"
        held = np.frombuffer(data, wire).reshape(shape)
        # `axis` (field 7) means nothing on a float tensor and is ignored (section 3)
        bad = len(data) != count * held.itemsize or scales.size or zero_points
        if bad or not np.isfinite(held).all():
            raise BlobError(f"{name}: bad float tensor")
        return name, Tensor(
            dtype, held.astype(np.float32), held.astype(held.dtype.newbyteorder("="))
        )
    if precision not in (P_INT8, P_INT4) or len(scales) != shape[0] or not (scales > 0).all():
        raise BlobError(f"{name}: quantized tensor needs an int policy and one scale > 0 per row")
    if _one(f, 7, 0) != 0 or any(zero_points) or len(zero_points) not in (0, shape[0]):
        raise BlobError(f"{name}: only axis 0 and zero points 0 (none or one per row) are read")
    positions = ""
    if dtype == INT8:
        codes = np.frombuffer(data, np.int8).reshape(shape).copy()
        if len(data) != count:
            raise BlobError(f"{name}: {len(data)} bytes for {count} codes")
    elif dtype == INT4:
        if len(data) != (count + 1) // 2:
            raise BlobError(f"{name}: {len(data)} bytes for {count} int4 codes")
        raw = np.frombuffer(data, np.uint8)
        nibbles = np.stack([raw & 0x0F, raw >> 4], axis=1).ravel()[:count].astype(np.int8)
        codes = np.where(nibbles > 7, nibbles - 16, nibbles).astype(np.int8).reshape(shape)
        if codes.size and codes.min() < -7:
            raise BlobError(f"{name}: int4 code -8")
    elif dtype == SPARSE_INT8:
        positions = next((p for p in ("bitmap", "index_gaps", "rice_gaps") if _pnum(p) in f), "")
        codes = _sparse_codes(f, shape, data, positions)
    else:
        raise BlobError(f"{name}: unknown dtype {dtype}")
    if codes.size and codes.min() < -127:
        raise BlobError(f"{name}: int8 code -128")
    values = (codes.reshape(shape[0], -1).astype(np.float32) * scales[:, None]).reshape(shape)
    return name, Tensor(dtype, values, codes, scales, positions)


def _pnum(form: str) -> int:
    return {"bitmap": 8, "index_gaps": 9, "rice_gaps": 10}[form]


def _sparse_codes(f: dict, shape: tuple, data: bytes, form: str) -> np.ndarray:
    size, n = math.prod(shape), len(data)
    if len(shape) != 2 or not form:
        raise BlobError("sparse tensor: 2-D with exactly one position form")
    stored = np.frombuffer(data, np.int8)
    if (stored == 0).any():
        raise BlobError("sparse tensor stores a code 0")
    raw = _one(f, _pnum(form), b"")
    if form == "bitmap":
        if len(raw) != math.ceil(size / 8):
            raise BlobError("bitmap of the wrong length")
        bits = np.unpackbits(np.frombuffer(raw, np.uint8), bitorder="little")
        if bits[size:].any():
            raise BlobError("bitmap bits past the end")
        indices = np.flatnonzero(bits[:size])
    else:
        gaps = _varint_gaps(raw) if form == "index_gaps" else _rice_gaps(raw, n)
        indices = np.cumsum(np.asarray(gaps, np.int64) + 1) - 1
    if indices.size != n or (indices.size and indices[-1] >= size):
        raise BlobError("positions do not match the codes or pass the end")
    codes = np.zeros(size, np.int8)
    codes[indices] = stored
    return codes.reshape(shape)


def _varint_gaps(raw: bytes) -> list[int]:
    gaps, pos = [], 0
    while pos < len(raw):
        start = pos
        value, pos = _varint(raw, pos)
        if pos - start > 9:
            raise BlobError("varint longer than 9 bytes")
        gaps.append(value)
    return gaps


def _rice_gaps(raw: bytes, n: int) -> list[int]:
    if not raw or raw[0] > 31:
        raise BlobError("rice_gaps empty or R > 31")
    r = raw[0]
    bits = np.unpackbits(np.frombuffer(raw[1:], np.uint8), bitorder="little")
    if bits.size < n * r:
        raise BlobError("rice_gaps: low parts cut off")
    low = bits[: n * r].reshape(n, r) if r else np.zeros((n, 0), np.uint8)
    low_values = (low.astype(np.int64) << np.arange(r, dtype=np.int64)).sum(axis=1)
    ones = np.flatnonzero(bits[n * r :])
    if ones.size != n or (n and (ones[-1] + n * r) // 8 != bits.size // 8 - 1):
        raise BlobError("rice_gaps: wrong number of 1 bits or bytes after the stream")
    if not n and len(raw) != 1:
        raise BlobError("rice_gaps: bytes after an empty stream")
    high = np.diff(ones, prepend=-1) - 1
    return list((high << r) + low_values)


# --- deltas (section 9) ------------------------------------------------------------------


def _zstd(diff: bytes, size: int) -> bytes:
    """One zstd frame whose header declares exactly `size` content bytes (checked before
    decoding, which allocates the declared size), nothing after it."""
    import zstandard  # only zstd deltas need it

    try:
        declared = zstandard.frame_content_size(diff)
        if declared != size:
            raise BlobError(f"zstd frame declares {declared} bytes, the spec implies {size}")
        return zstandard.ZstdDecompressor().decompress(
            diff, max_output_size=size, allow_extra_data=False
        )
    except zstandard.ZstdError as err:
        raise BlobError(f"zstd diff does not decompress: {err}") from err


def _inflate(decoder, error: type[Exception], diff: bytes, size: int) -> bytes:
    """One complete zlib or xz stream of at most `size` + 1 bytes, nothing after it."""
    try:
        raw = decoder.decompress(diff, size + 1)
    except error as err:
        raise BlobError(f"diff does not decompress: {err}") from err
    if not decoder.eof or decoder.unused_data:
        raise BlobError("diff stream cut off, too long, or followed by other bytes")
    return raw


def apply_delta(envelope: bytes, base: Policy, secret: bytes | None = None) -> Policy:
    """The target version from a delta envelope and the held `base`, bit for bit."""
    payload, _ = verified_payload(envelope, secret)
    f = _fields(payload)
    if _one(f, 1, 0) != base.version or _one(f, 2, b"") != base.sha256:
        raise BlobError("delta does not apply to the held version")
    header = _one(f, 3, b"")
    target_sha = _one(f, 4, b"")
    codec, diff = _one(f, 7, 0), _one(f, 8, b"")
    held = [(name, base.tensors[name]) for name in weight_shapes(base.spec)]
    size = sum(t.held.nbytes + (t.scales.nbytes if t.scales is not None else 0) for _, t in held)
    if codec == CODEC_ZLIB:
        raw = _inflate(zlib.decompressobj(), zlib.error, diff, size)
    elif codec == CODEC_XZ:  # 64 MiB decoder memory: dictionaries up to 48 MiB
        raw = _inflate(lzma.LZMADecompressor(lzma.FORMAT_XZ, 64 << 20), lzma.LZMAError, diff, size)
    elif codec == CODEC_ZSTD:
        raw = _zstd(diff, size)
    else:
        raise BlobError(f"unknown delta codec {codec}")
    if len(raw) != size:
        raise BlobError(f"diff has {len(raw)} bytes, the spec implies {size}")
    pos, tensors = 0, []
    for name, t in held:
        values, pos = _undiff(t.held, raw, pos)
        scales = None
        if t.scales is not None:
            scales, pos = _undiff(t.scales, raw, pos)
        tensors.append((name, values, scales))
    # Header fields 1-4 before the tensors (field 5), 6-7 after: number order.
    fields = [(n, raw) for n, _, _, raw in parse(header) if n != 5]
    before = b"".join(raw for n, raw in fields if n < 5)
    after = b"".join(raw for n, raw in fields if n > 5)
    precision = _fields(header).get(3, [(0, 0)])[-1][1]
    body = b"".join(_len_field(5, encode_tensor(n, v, s, precision)) for n, v, s in tensors)
    rebuilt = before + body + after
    if hashlib.sha256(rebuilt).digest() != target_sha:
        raise BlobError("rebuilt payload's SHA-256 is not the target's: fetch the full blob")
    if secret is not None:
        mac = hmac.new(secret, rebuilt, hashlib.sha256).digest()
        if not hmac.compare_digest(mac, _one(f, 5, b"")):
            raise BlobError("target HMAC differs")
    return read_payload(rebuilt, target_sha)


def _undiff(base: np.ndarray, raw: bytes, pos: int) -> tuple[np.ndarray, int]:
    n = base.nbytes
    chunk = raw[pos : pos + n]
    if base.dtype == np.int8:  # codes: target = base + diff (mod 256)
        d = np.frombuffer(chunk, np.uint8).reshape(base.shape)
        return (base.view(np.uint8) + d).view(np.int8), pos + n
    u = np.dtype(f"<u{base.itemsize}")  # floats: XOR of little-endian bit patterns
    bits = np.ascontiguousarray(base).astype(base.dtype.newbyteorder("<")).view(u)
    out = (bits ^ np.frombuffer(chunk, u).reshape(base.shape)).view(base.dtype.newbyteorder("<"))
    return out.astype(base.dtype), pos + n


def encode_tensor(
    name: str, values: np.ndarray, scales: np.ndarray | None, precision: int
) -> bytes:
    """The writer's canonical Tensor bytes: fields in number order, defaults omitted, the
    positions oneof written even when empty (an all-zero sparse layer: `4A 00`)."""
    out = _len_field(1, name.encode()) + _len_field(
        2, b"".join(_enc_varint(d) for d in values.shape)
    )
    if scales is None:
        dtype = FLOAT32 if values.dtype == np.float32 else FLOAT16
        data = values.astype("<f4" if dtype == FLOAT32 else "<f2").tobytes()
        return out + _key(3, 0) + _enc_varint(dtype) + (_len_field(4, data) if data else b"")
    scale_bytes = _len_field(5, scales.astype("<f4").tobytes())
    zeros = _len_field(6, b"\x00" * values.shape[0])
    if precision == P_INT4:
        nib = (values.ravel().astype(np.int16) & 0x0F).astype(np.uint8)
        nib = np.append(nib, np.uint8(0)) if nib.size % 2 else nib
        data = (nib[0::2] | (nib[1::2] << 4)).astype(np.uint8).tobytes()
        return out + _key(3, 0) + _enc_varint(INT4) + _len_field(4, data) + scale_bytes + zeros
    if values.ndim == 2:
        sparse = _sparse_fields(values)
        if sparse is not None:
            data, number, positions = sparse
            head = out + _key(3, 0) + _enc_varint(SPARSE_INT8)
            body = _len_field(4, data) if data else b""  # an all-zero layer has no codes
            return head + body + scale_bytes + _len_field(number, positions)
    data = values.astype(np.int8).tobytes()
    return out + _key(3, 0) + _enc_varint(INT8) + _len_field(4, data) + scale_bytes + zeros


def _sparse_fields(codes: np.ndarray) -> tuple[bytes, int, bytes] | None:
    """(non-zero codes, field number, positions) when sparse is smaller, else None."""
    flat = codes.ravel()
    idx = np.flatnonzero(flat)
    gaps = np.diff(idx, prepend=-1) - 1
    bitmap = np.packbits(flat != 0, bitorder="little").tobytes()
    varints = b"".join(_enc_varint(int(g)) for g in gaps)
    bits = [gaps.size * (r + 1) + int(np.sum(gaps >> r)) for r in range(32)]
    r = int(np.argmin(bits))  # the smallest R with the fewest bits
    low = [(int(g) >> t) & 1 for g in gaps for t in range(r)]
    unary: list[int] = []
    for g in gaps:
        unary += [0] * (int(g) >> r) + [1]
    rice = bytes([r]) + np.packbits(np.array(low + unary, np.uint8), bitorder="little").tobytes()
    forms = [(8, bitmap), (9, varints), (10, rice)]  # ties go to the earlier form
    number, positions = min(forms, key=lambda form: len(form[1]))
    if idx.size + len(positions) >= flat.size:
        return None
    return flat[idx].astype(np.int8).tobytes(), number, positions
