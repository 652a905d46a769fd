"""Rules of docs/BLOB_FORMAT.md that define behaviour, pinned on both readers: the Python
one (actorq.quant) and docs/blob-vectors/reader.py, which is written from the spec alone.

Each test names the section whose text it holds to the code (issue 43, item 5).
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import lzma
import re
import struct
import sys
import zlib
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import zstandard

from actorq.models.mlp import MLPSpec
from actorq.quant import BlobError, decode_blob, encode_policy
from actorq.quant.delta import apply_delta
from actorq.v1 import policy_pb2

P = policy_pb2
ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "BLOB_FORMAT.md"
VECTORS = ROOT / "docs" / "blob-vectors"
MANIFEST = json.loads((VECTORS / "manifest.json").read_text())["vectors"]


def _load_reader():
    spec = importlib.util.spec_from_file_location("blob_spec_reader", VECTORS / "reader.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["blob_spec_reader"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


reader = _load_reader()


def _blob(name: str) -> bytes:
    return (VECTORS / f"{name}.blob").read_bytes()


def _seal(payload: bytes) -> bytes:
    digest = hashlib.sha256(payload).digest()
    return P.PolicyEnvelope(payload=payload, sha256=digest).SerializeToString()


def _mutated(name: str, change: Callable[[P.Policy], None]) -> bytes:
    """Vector `name` with its Policy changed by `change`, resealed (unsigned)."""
    policy = P.Policy.FromString(P.PolicyEnvelope.FromString(_blob(name)).payload)
    change(policy)
    return _seal(policy.SerializeToString())


def _both_read(envelope: bytes) -> tuple[bool, bool]:
    """(actorq accepts, reader.py accepts) for a full blob."""
    return _accepts(decode_blob, envelope), _accepts(reader.read_blob, envelope)


def _accepts(read: Callable[[bytes], object], envelope: bytes) -> bool:
    try:
        read(envelope)
    except BlobError:
        return False
    except reader.BlobError:
        return False
    return True


# --- section 6: the sketch applies input_norm ----------------------------------------


def _sketch() -> dict:
    """Section 6's Python code block, executed as it stands in the document."""
    text = DOC.read_text()
    section = text[text.index("## 6. ") : text.index("## 7. ")]
    found = re.search(r"```python\n(.*?)```", section, re.S)
    assert found is not None
    namespace: dict = {}
    exec(compile(found.group(1), "BLOB_FORMAT.md section 6", "exec"), namespace)
    return namespace


DENSE_MLP = sorted(
    n
    for n, v in MANIFEST.items()
    if v["kind"] == "full" and v["spec_kind"] == "mlp" and not v["sparse_positions"]
)


@pytest.mark.parametrize("name", DENSE_MLP)
def test_section_6_sketch_reproduces_the_reference_outputs(name: str) -> None:
    sketch = _sketch()
    version, norm, layers, activation = sketch["read_policy"](_blob(name))
    expected = np.load(VECTORS / f"{name}.npz")
    out = sketch["forward"](norm, layers, activation, expected["__obs__"])
    np.testing.assert_allclose(out, expected["__out__"], rtol=1e-5, atol=1e-5)
    assert version == MANIFEST[name]["version"]
    assert (norm is not None) == ("input_norm.shift" in MANIFEST[name]["dtypes"])


def test_section_6_sketch_covers_the_input_norm_vectors_and_refuses_the_rest() -> None:
    with_norm = [n for n in DENSE_MLP if "input_norm.shift" in MANIFEST[n]["dtypes"]]
    assert {"fp32", "fp16", "int8", "int8-fallback", "signed-int8"} <= set(with_norm)
    sketch = _sketch()
    for name in ("sparse", "int8-tiny-rows", "cnn-int8"):
        with pytest.raises(ValueError, match=r"sparse|dense MLPs"):
            sketch["read_policy"](_blob(name))


# --- section 9: what a reader accepts in a delta's diff -------------------------------


def _delta_with_diff(name: str, diff: bytes) -> bytes:
    delta = P.PolicyDelta.FromString(P.PolicyEnvelope.FromString(_blob(name)).payload)
    delta.diff = diff
    return _seal(delta.SerializeToString())


def _raw_diff(name: str) -> bytes:
    delta = P.PolicyDelta.FromString(P.PolicyEnvelope.FromString(_blob(name)).payload)
    if delta.codec == P.DELTA_CODEC_ZSTD:
        return zstandard.ZstdDecompressor().decompress(delta.diff)
    return (
        lzma.decompress(delta.diff)
        if delta.codec == P.DELTA_CODEC_XZ
        else zlib.decompress(delta.diff)
    )


def _both_apply(name: str, envelope: bytes) -> tuple[bool, bool]:
    """(actorq applies it, reader.py applies it), each checked against the target."""
    entry = MANIFEST[name]
    target = bytes.fromhex(entry["target_sha256"])
    base = _blob(entry["base"])

    def actorq(env: bytes) -> object:
        return apply_delta(decode_blob(base), env, expected_sha256=target)

    def own(env: bytes) -> object:
        assert reader.apply_delta(env, reader.read_blob(base)).sha256 == target
        return None

    return _accepts(actorq, envelope), _accepts(own, envelope)


ZSTD = "delta-int8-zstd"


def _zstd_with_dictionary_id(dict_id: bytes) -> bytes:
    """The writer's single-segment frame with a Dictionary_ID field of 1, 2 or 4 bytes."""
    frame = zstandard.ZstdCompressor(level=1).compress(_raw_diff(ZSTD))
    descriptor = frame[4]
    assert descriptor & 0x20 and not descriptor & 0x03  # single segment: no Window_Descriptor
    flag = {1: 1, 2: 2, 4: 3}[len(dict_id)]
    return frame[:4] + bytes([descriptor | flag]) + dict_id + frame[5:]


@pytest.mark.parametrize("dict_id", [b"\x07", b"\x07\x00", b"\x07\x00\x00\x00"])
def test_zstd_frame_naming_a_dictionary_is_refused(dict_id: bytes) -> None:
    diff = _zstd_with_dictionary_id(dict_id)
    assert zstandard.get_frame_parameters(diff).dict_id == 7
    assert _both_apply(ZSTD, _delta_with_diff(ZSTD, diff)) == (False, False)
    entry = MANIFEST[ZSTD]
    with pytest.raises(BlobError, match="Dictionary mismatch"):
        apply_delta(decode_blob(_blob(entry["base"])), _delta_with_diff(ZSTD, diff))


def test_zstd_dictionary_id_field_of_zero_means_none_and_is_read() -> None:
    diff = _zstd_with_dictionary_id(b"\x00")
    assert _both_apply(ZSTD, _delta_with_diff(ZSTD, diff)) == (True, True)


def test_zstd_content_checksum_is_verified_when_present() -> None:
    diff = zstandard.ZstdCompressor(level=1, write_checksum=True).compress(_raw_diff(ZSTD))
    assert zstandard.get_frame_parameters(diff).has_checksum
    assert _both_apply(ZSTD, _delta_with_diff(ZSTD, diff)) == (True, True)
    broken = diff[:-1] + bytes([diff[-1] ^ 1])  # the checksum is the frame's last 4 bytes
    assert _both_apply(ZSTD, _delta_with_diff(ZSTD, broken)) == (False, False)


@pytest.mark.parametrize(
    ("descriptor", "applies"),
    [(0x80, True), (0x88, True), (0xA8, True), (0xAF, True), (0xB0, False)],
    ids=["64MiB", "128MiB", "log31", "log31-mantissa7", "log32"],
)
def test_zstd_window_descriptor_has_no_limit_below_window_log_32(descriptor, applies) -> None:
    """Section 9: one-pass decoding into the declared size allocates no window, so any
    Window_Descriptor libzstd parses is read, over a few kB of content."""
    raw = _raw_diff(ZSTD)
    frame = zstandard.ZstdCompressor(level=1).compress(raw)
    assert frame[4] == 0x20  # single segment, 1-byte Frame_Content_Size, no checksum
    blocks = frame[zstandard.frame_header_size(frame) :]
    # Frame_Header_Descriptor 0x80: 4-byte content size, not single segment, so a
    # Window_Descriptor byte follows it (RFC 8878 3.1.1.1)
    header = frame[:4] + bytes([0x80, descriptor]) + struct.pack("<I", len(raw))
    diff = header + blocks
    assert _both_apply(ZSTD, _delta_with_diff(ZSTD, diff)) == (applies, applies)
    if applies:
        assert zstandard.get_frame_parameters(diff).window_size >= 64 << 20


XZ = "delta-int8-xz"


def _xz_with_dictionary_property(prop: int) -> bytes:
    """A 4 KiB-dictionary stream whose LZMA2 header then claims dictionary property `prop`
    (decoding with a larger dictionary than the encoder used is valid)."""
    filters = [{"id": lzma.FILTER_LZMA2, "dict_size": 4096}]
    raw = _raw_diff(XZ)
    stream = lzma.compress(raw, format=lzma.FORMAT_XZ, check=lzma.CHECK_NONE, filters=filters)
    size = (stream[12] + 1) * 4  # the block header follows the 12-byte stream header
    header = bytearray(stream[12 : 12 + size])
    at = header.index(b"\x21\x01") + 2  # filter id LZMA2, one property byte
    header[at] = prop
    header[-4:] = struct.pack("<I", zlib.crc32(bytes(header[:-4])))
    return stream[:12] + bytes(header) + stream[12 + size :]


@pytest.mark.parametrize(
    ("prop", "applies"),
    [(26, True), (27, True), (28, False), (40, False)],
    ids=["32MiB", "48MiB", "64MiB", "4GiB"],
)
def test_xz_dictionary_limit_is_48_mib_accepted_64_mib_refused(prop: int, applies: bool) -> None:
    diff = _xz_with_dictionary_property(prop)
    assert _both_apply(XZ, _delta_with_diff(XZ, diff)) == (applies, applies)
    if not applies:
        entry = MANIFEST[XZ]
        with pytest.raises(BlobError, match="Memory usage limit"):
            apply_delta(decode_blob(_blob(entry["base"])), _delta_with_diff(XZ, diff))


def test_xz_filter_chains_before_lzma2_are_read_by_the_python_reader() -> None:
    """Section 9: LZMA2 alone is what writers use; the Python reader also takes Delta and
    BCJ filters before it (a port may refuse them)."""
    for first in ({"id": lzma.FILTER_DELTA, "dist": 4}, {"id": lzma.FILTER_X86}):
        chain = [first, {"id": lzma.FILTER_LZMA2, "preset": 6}]
        diff = lzma.compress(_raw_diff(XZ), format=lzma.FORMAT_XZ, filters=chain)
        assert _both_apply(XZ, _delta_with_diff(XZ, diff))[0]


@pytest.mark.parametrize("check", [lzma.CHECK_CRC32, lzma.CHECK_CRC64, lzma.CHECK_SHA256])
def test_xz_integrity_check_is_verified_when_present(check: int) -> None:
    stream = bytearray(lzma.compress(_raw_diff(XZ), format=lzma.FORMAT_XZ, check=check))
    assert _both_apply(XZ, _delta_with_diff(XZ, bytes(stream))) == (True, True)
    index_size = (struct.unpack("<I", stream[-8:-4])[0] + 1) * 4  # footer: backward size
    stream[len(stream) - 12 - index_size - 1] ^= 1  # the check's last byte, before the index
    assert _both_apply(XZ, _delta_with_diff(XZ, bytes(stream))) == (False, False)


@pytest.mark.parametrize("name", [XZ, "delta-int8-zlib"])
def test_zlib_and_xz_diffs_refuse_bytes_after_the_stream(name: str) -> None:
    codec = MANIFEST[name]["codec"]
    raw = _raw_diff(name)
    if codec == "DELTA_CODEC_XZ":
        stream = lzma.compress(raw, format=lzma.FORMAT_XZ)
        variants = [stream + bytes(4), stream + lzma.compress(b"", format=lzma.FORMAT_XZ)]
    else:
        stream = zlib.compress(raw)
        variants = [stream + b"\x00"]
    assert _both_apply(name, _delta_with_diff(name, stream)) == (True, True)
    for diff in variants:
        assert _both_apply(name, _delta_with_diff(name, diff)) == (False, False)


# --- section 3 / 4: CNN spec rules, float axis, int4 scales, fp32_equivalent_bytes ----


def _spec_field(**values) -> Callable[[P.Policy], None]:
    def change(policy: P.Policy) -> None:
        for key, value in values.items():
            setattr(policy.spec, key, value)

    return change


def _conv(**values) -> Callable[[P.Policy], None]:
    def change(policy: P.Policy) -> None:
        for key, value in values.items():
            setattr(policy.spec.conv[0], key, value)

    return change


CNN_REFUSALS = {
    "input_norm": _spec_field(input_norm=True),
    "tanh": _spec_field(output_activation="tanh"),
    "activation": _spec_field(activation="tanh"),
    "scale-zero": _spec_field(input_scale=0.0),
    "scale-negative": _spec_field(input_scale=-1.0),
    "scale-nan": _spec_field(input_scale=float("nan")),
    "scale-inf": _spec_field(input_scale=float("inf")),
    "obs_dim": _spec_field(obs_dim=97),
    "obs_shape-2d": lambda p: p.spec.obs_shape.pop(),
    "no-conv": lambda p: p.spec.ClearField("conv"),
    "kernel-too-big": _conv(kernel=9),
    "stride-zero": _conv(stride=0),
    "num_outputs-zero": _spec_field(num_outputs=0),
}


@pytest.mark.parametrize("rule", sorted(CNN_REFUSALS))
def test_section_4_cnn_spec_rules_are_refused_by_both_readers(rule: str) -> None:
    assert _both_read(_mutated("cnn-int8", CNN_REFUSALS[rule])) == (False, False)


def test_output_activation_none_reads_as_empty() -> None:
    for name in ("cnn-int8", "int4"):
        assert _both_read(_mutated(name, _spec_field(output_activation="none"))) == (True, True)


def _float_axis(policy: P.Policy) -> None:
    for tensor in policy.tensors:
        if tensor.dtype in (P.DTYPE_FLOAT32, P.DTYPE_FLOAT16):
            tensor.axis = 3


@pytest.mark.parametrize("name", ["fp32", "int8-fallback"])
def test_axis_is_ignored_on_float_tensors(name: str) -> None:
    """Section 3: `axis` means nothing on a float tensor; both readers decode the same."""
    envelope = _mutated(name, _float_axis)
    assert envelope != _blob(name)
    got, want = decode_blob(envelope), decode_blob(_blob(name))
    for tensor, arrays in want.tensors.items():
        assert got.tensors[tensor].to_float32().tobytes() == arrays.to_float32().tobytes()
    mine, theirs = reader.read_blob(envelope), reader.read_blob(_blob(name))
    for tensor, arrays in theirs.tensors.items():
        assert mine.tensors[tensor].values.tobytes() == arrays.values.tobytes()


def test_axis_on_quantized_and_zero_points_on_float_tensors_are_refused() -> None:
    def int8_axis(policy: P.Policy) -> None:
        next(t for t in policy.tensors if t.dtype == P.DTYPE_INT8).axis = 1

    def float_zero_points(policy: P.Policy) -> None:
        bias = next(t for t in policy.tensors if t.name == "layers.0.bias")
        bias.zero_points.extend([0] * bias.shape[0])

    assert _both_read(_mutated("int8", int8_axis)) == (False, False)
    assert _both_read(_mutated("int8", float_zero_points)) == (False, False)


def test_fp32_equivalent_bytes_is_not_checked_by_readers() -> None:
    def wrong(policy: P.Policy) -> None:
        policy.fp32_equivalent_bytes = 5

    assert _both_read(_mutated("cnn-int8", wrong)) == (True, True)


def _int4_as_specified(w: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """Section 3's int4 steps, as written; also how many rows step 2 raised."""
    m = np.abs(w.astype(np.float64)).max(axis=1)
    s = (m / 7).astype(np.float32)  # step 1
    low = s.astype(np.float64) * 7 < m  # step 2
    s[low] = np.nextafter(s[low], np.float32(np.inf))
    s[s == 0] = np.float32(1.0)  # step 3
    q = np.clip(np.rint(w.astype(np.float64) / s.astype(np.float64)[:, None]), -7, 7)
    return q.astype(np.int8), s, int(low.sum())


def test_int4_scale_is_the_float64_quotient_rounded_then_raised() -> None:
    """Section 3's int4 example rows and 400 random rows, through the blob writer."""
    example = np.array([[0.3, -0.15, 0.1], [1e-45, 0, -1e-45], [0, 0, 0]], np.float32)
    rows = np.random.default_rng(43).normal(0, 0.5, (400, 3)).astype(np.float32)
    spec = MLPSpec(obs_dim=3, num_outputs=400, hidden=(3,))
    weights = {
        "layers.0.weight": example,
        "layers.0.bias": np.zeros(3, np.float32),
        "layers.2.weight": rows,
        "layers.2.bias": np.zeros(400, np.float32),
    }
    blob = decode_blob(encode_policy(weights, spec, P.PRECISION_INT4, 1, 0).envelope)
    first = blob.tensors["layers.0.weight"]
    assert [hex(b) for b in first.scales.view(np.uint32)] == ["0x3d2f8afa", "0x1", "0x3f800000"]
    assert first.values.tolist() == [[7, -3, 2], [1, 0, -1], [0, 0, 0]]
    for name, w in (("layers.0.weight", example), ("layers.2.weight", rows)):
        want_q, want_scales, _ = _int4_as_specified(w)
        got = blob.tensors[name]
        assert got.scales.tobytes() == want_scales.tobytes(), name
        assert np.array_equal(got.values, want_q), name
    assert _int4_as_specified(rows)[2] > 10  # step 2 is exercised, not vacuous
