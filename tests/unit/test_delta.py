"""Delta broadcasts: applying a delta gives exactly the full blob's policy, or BlobError."""

from __future__ import annotations

import hashlib
import json
import lzma
import tracemalloc
import zlib
from pathlib import Path

import numpy as np
import pytest
import torch
import zstandard

from actorq.models.mlp import MLPSpec, QNetwork
from actorq.quant import BlobError, build_policy_module, decode_blob, encode_policy
from actorq.quant import delta as delta_module
from actorq.quant.delta import apply_delta, make_delta
from actorq.quant.errors import SignatureError
from actorq.quantizer.deltas import DeltaMaker
from actorq.quantizer.store import Announcement
from actorq.security.signing import PolicyKey, PolicyKeys
from actorq.v1 import policy_pb2

SPEC = MLPSpec(obs_dim=5, num_outputs=2, hidden=(48, 40), output_activation="tanh")
NORM_SPEC = MLPSpec(obs_dim=5, num_outputs=3, hidden=(32,), input_norm=True)
P = policy_pb2


def weights(spec: MLPSpec, seed: int, sparsity: float = 0.0) -> dict[str, np.ndarray]:
    torch.manual_seed(seed)
    out = {k: v.detach().numpy().copy() for k, v in QNetwork(spec).state_dict().items()}
    for name in spec.weight_shapes():
        if name.startswith("input_norm"):
            out[name] = np.linspace(0.5, 2.0, spec.obs_dim, dtype=np.float32)
    rng = np.random.default_rng(seed)
    for w in out.values():
        if w.ndim == 2 and sparsity:
            w.reshape(-1)[rng.random(w.size) < sparsity] = 0.0
    return out


def nudged(w: dict[str, np.ndarray], seed: int, size: float = 3e-3) -> dict[str, np.ndarray]:
    """The next version: every weight moved a little, as a few optimizer steps would."""
    rng = np.random.default_rng(seed)
    return {
        k: (v + rng.normal(0, size, v.shape) * (v != 0)).astype(np.float32) for k, v in w.items()
    }


def versions(spec: MLPSpec, precision: int, sparsity: float = 0.0, keys: PolicyKeys | None = None):
    first = weights(spec, 0, sparsity)
    second = nudged(first, 1)
    if sparsity:  # the topology changes too: one weight dropped, one grown
        w = second["layers.2.weight"]
        on = np.flatnonzero(w.ravel() != 0)[0]
        w.ravel()[on] = 0.0
        off = np.flatnonzero(w.ravel() == 0)[-1]
        w.ravel()[off] = 0.01
    a = encode_policy(first, spec, precision, 1, 10, keys=keys)
    b = encode_policy(second, spec, precision, 2, 60, keys=keys)
    return a, b


def assert_same(got, full) -> None:
    assert got.version == full.version and got.learner_step == full.learner_step
    assert got.sha256 == full.sha256 and got.sparse_layers == full.sparse_layers
    for name, tensor in full.tensors.items():
        assert got.tensors[name].values.dtype == tensor.values.dtype
        np.testing.assert_array_equal(got.tensors[name].values, tensor.values)
        if tensor.scales is None:
            assert got.tensors[name].scales is None
        else:
            np.testing.assert_array_equal(got.tensors[name].scales, tensor.scales)


@pytest.mark.parametrize(
    ("spec", "precision", "sparsity"),
    [
        (SPEC, P.PRECISION_INT8, 0.0),
        (SPEC, P.PRECISION_INT8, 0.9),
        (SPEC, P.PRECISION_INT4, 0.0),
        (SPEC, P.PRECISION_FP16, 0.0),
        (SPEC, P.PRECISION_FP32, 0.0),
        (NORM_SPEC, P.PRECISION_INT8, 0.0),
    ],
)
def test_delta_apply_equals_full_decode_bit_for_bit(
    spec: MLPSpec, precision: int, sparsity: float
) -> None:
    a, b = versions(spec, precision, sparsity)
    delta = make_delta(a.arrays, b)
    assert delta is not None
    got = apply_delta(decode_blob(a.envelope), delta, expected_sha256=b.sha256)
    full = decode_blob(b.envelope)
    assert_same(got, full)
    obs = torch.randn(16, spec.obs_dim)
    with torch.inference_mode():
        assert torch.equal(build_policy_module(got)(obs), build_policy_module(full)(obs))


def test_default_codec_is_zstd_and_every_codec_round_trips() -> None:
    a, b = versions(SPEC, P.PRECISION_INT8)
    base, full = decode_blob(a.envelope), decode_blob(b.envelope)
    envelope = make_delta(a.arrays, b) or b""
    assert _codec_of(envelope) == P.DELTA_CODEC_ZSTD == delta_module.DEFAULT_CODEC
    assert_same(apply_delta(base, envelope, expected_sha256=b.sha256), full)
    sizes = {}
    for codec in (P.DELTA_CODEC_ZLIB, P.DELTA_CODEC_XZ, P.DELTA_CODEC_ZSTD):
        envelope = make_delta(a.arrays, b, codec=codec) or b""
        assert _codec_of(envelope) == codec
        assert_same(apply_delta(base, envelope, expected_sha256=b.sha256), full)
        sizes[codec] = len(envelope)
    assert len(set(sizes.values())) > 1  # three different streams, not one codec thrice


def _codec_of(envelope: bytes) -> int:
    return P.PolicyDelta.FromString(P.PolicyEnvelope.FromString(envelope).payload).codec


VECTORS = Path(__file__).resolve().parents[2] / "docs" / "blob-vectors"


@pytest.mark.parametrize("name", ["delta-int8-xz", "delta-int8-zlib"])
def test_stored_xz_and_zlib_deltas_of_earlier_quantizers_still_apply(name: str) -> None:
    """docs/blob-vectors holds deltas written before zstd became the default."""
    entry = json.loads((VECTORS / "manifest.json").read_text())["vectors"][name]
    base = decode_blob((VECTORS / f"{entry['base']}.blob").read_bytes())
    envelope = (VECTORS / f"{name}.blob").read_bytes()
    assert P.DeltaCodec.Name(_codec_of(envelope)) == entry["codec"] != "DELTA_CODEC_ZSTD"
    got = apply_delta(base, envelope, expected_sha256=bytes.fromhex(entry["target_sha256"]))
    assert_same(got, decode_blob((VECTORS / f"{entry['target']}.blob").read_bytes()))


def _zstd_delta() -> tuple[P.PolicyDelta, bytes, object]:
    a, b = versions(SPEC, P.PRECISION_INT8)
    envelope = P.PolicyEnvelope.FromString(make_delta(a.arrays, b) or b"")
    delta = P.PolicyDelta.FromString(envelope.payload)
    assert delta.codec == P.DELTA_CODEC_ZSTD
    return delta, zstandard.ZstdDecompressor().decompress(delta.diff), decode_blob(a.envelope)


def test_zstd_frame_declaring_a_gigabyte_is_refused_before_allocating() -> None:
    delta, raw, base = _zstd_delta()
    # A forger's frame: 1 GiB of zeros, a few kB on the wire, its header declaring the size.
    chunk = zstandard.ZstdCompressor(level=1).compressobj(size=1 << 30)
    zeros = bytes(1 << 20)
    delta.diff = b"".join(chunk.compress(zeros) for _ in range(1024)) + chunk.flush()
    assert len(delta.diff) < 1 << 20
    assert zstandard.frame_content_size(delta.diff) == 1 << 30
    tracemalloc.start()
    try:
        with pytest.raises(BlobError, match=rf"inflates to {1 << 30} bytes .*exactly {len(raw)}"):
            apply_delta(base, _reseal(delta))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 16 << 20, peak


def test_zstd_frame_without_a_declared_size_or_with_extra_content_is_refused() -> None:
    delta, raw, base = _zstd_delta()
    unsized = zstandard.ZstdCompressor(write_content_size=False).compressobj()
    delta.diff = unsized.compress(raw) + unsized.flush()
    with pytest.raises(BlobError, match=r"inflates to no bytes \(zstd frame header"):
        apply_delta(base, _reseal(delta))
    # the right declared size, then a second frame appended
    delta.diff = zstandard.ZstdCompressor().compress(raw) * 2
    with pytest.raises(BlobError, match=r"does not inflate \(zstd\).*unused data"):
        apply_delta(base, _reseal(delta))


def test_xz_decoder_refuses_a_stream_that_needs_more_memory_than_the_cap() -> None:
    a, b = versions(SPEC, P.PRECISION_INT8)
    envelope = P.PolicyEnvelope.FromString(make_delta(a.arrays, b) or b"")
    delta = P.PolicyDelta.FromString(envelope.payload)
    # A valid stream whose header asks for a 1 GiB dictionary (a forger's memory bomb).
    filters = [{"id": lzma.FILTER_LZMA2, "dict_size": 1 << 30}]
    delta.diff = lzma.compress(_inflate(delta), format=lzma.FORMAT_XZ, filters=filters)
    with pytest.raises(BlobError, match="inflate"):
        apply_delta(decode_blob(a.envelope), _reseal(delta))


def test_int8_delta_is_smaller_than_the_full_blob() -> None:
    a, b = versions(SPEC, P.PRECISION_INT8)
    delta = make_delta(a.arrays, b)
    assert delta is not None and len(delta) < b.blob_bytes


def test_no_delta_across_specs_or_backwards() -> None:
    a, b = versions(SPEC, P.PRECISION_INT8)
    other = encode_policy(weights(NORM_SPEC, 0), NORM_SPEC, P.PRECISION_INT8, 3, 0)
    assert make_delta(a.arrays, other) is None
    assert make_delta(b.arrays, a) is None


def _reseal(delta: P.PolicyDelta) -> bytes:
    payload = delta.SerializeToString()
    return P.PolicyEnvelope(
        payload=payload, sha256=hashlib.sha256(payload).digest()
    ).SerializeToString()


def _inflate(d: P.PolicyDelta) -> bytes:
    if d.codec == P.DELTA_CODEC_ZSTD:
        return zstandard.ZstdDecompressor().decompress(d.diff)
    return lzma.decompress(d.diff) if d.codec == P.DELTA_CODEC_XZ else zlib.decompress(d.diff)


def _deflate(d: P.PolicyDelta, raw: bytes) -> bytes:
    if d.codec == P.DELTA_CODEC_ZSTD:
        return zstandard.ZstdCompressor().compress(raw)
    return lzma.compress(raw) if d.codec == P.DELTA_CODEC_XZ else zlib.compress(raw)


def _flip_diff_byte(d: P.PolicyDelta) -> None:
    raw = bytearray(_inflate(d))
    raw[len(raw) // 2] ^= 1
    d.diff = _deflate(d, bytes(raw))


def _other_base(d: P.PolicyDelta) -> None:
    d.base_version = 7


def _other_base_sha(d: P.PolicyDelta) -> None:
    d.base_sha256 = bytes(32)


def _truncated_diff(d: P.PolicyDelta) -> None:
    d.diff = d.diff[:-3]


def _oversized_diff(d: P.PolicyDelta) -> None:
    d.diff = _deflate(d, _inflate(d) + bytes(10_000_000))


def _trailing_bytes(d: P.PolicyDelta) -> None:
    d.diff = d.diff + b"\x00junk"


def _other_codec(d: P.PolicyDelta) -> None:  # a valid stream, labelled as another codec
    others = {
        P.DELTA_CODEC_XZ: P.DELTA_CODEC_ZSTD,
        P.DELTA_CODEC_ZSTD: P.DELTA_CODEC_ZLIB,
        P.DELTA_CODEC_ZLIB: P.DELTA_CODEC_XZ,
    }
    d.codec = others[d.codec]


def _unknown_codec(d: P.PolicyDelta) -> None:
    d.codec = 9  # type: ignore[assignment]


def _changed_spec(d: P.PolicyDelta) -> None:
    d.header.spec.hidden[0] = 49


def _not_newer(d: P.PolicyDelta) -> None:
    d.header.version = 1


def _wrong_learner_step(d: P.PolicyDelta) -> None:
    d.header.learner_step += 1  # rebuilds a payload with another sha256


@pytest.mark.parametrize(
    ("mutate", "pattern"),
    [
        (_flip_diff_byte, r"rebuilds a payload hashing to"),
        (_other_base, r"applies to version 7, held is 1"),
        (_other_base_sha, r"base sha256 differs"),
        (_truncated_diff, r"inflate"),
        (_oversized_diff, r"inflates to \d+\+? bytes"),
        (_unknown_codec, r"codec value 9"),
        (_trailing_bytes, r"inflate"),
        (_other_codec, r"inflate"),
        (_changed_spec, r"changes the model spec"),
        (_not_newer, r"not newer"),
        (_wrong_learner_step, r"rebuilds a payload hashing to"),
    ],
)
@pytest.mark.parametrize("codec", [P.DELTA_CODEC_XZ, P.DELTA_CODEC_ZLIB, P.DELTA_CODEC_ZSTD])
def test_corrupted_delta_is_refused(mutate, pattern: str, codec: int) -> None:
    a, b = versions(SPEC, P.PRECISION_INT8)
    envelope = P.PolicyEnvelope.FromString(make_delta(a.arrays, b, codec=codec) or b"")
    delta = P.PolicyDelta.FromString(envelope.payload)
    assert delta.codec == codec
    mutate(delta)
    with pytest.raises(BlobError, match=pattern):
        apply_delta(decode_blob(a.envelope), _reseal(delta))


def test_delta_checksum_and_announced_sha256_are_checked() -> None:
    a, b = versions(SPEC, P.PRECISION_INT8)
    delta = make_delta(a.arrays, b) or b""
    with pytest.raises(BlobError, match="checksum mismatch"):
        apply_delta(decode_blob(a.envelope), delta[:-40] + bytes([delta[-40] ^ 1]) + delta[-39:])
    with pytest.raises(BlobError, match="differs from the announced"):
        apply_delta(decode_blob(a.envelope), delta, expected_sha256=bytes(32))


def test_signed_delta_needs_the_quantizer_key() -> None:
    keys = PolicyKeys(PolicyKey(b"q" * 32))
    a, b = versions(SPEC, P.PRECISION_INT8, keys=keys)
    base = decode_blob(a.envelope, SPEC, keys)
    got = apply_delta(base, make_delta(a.arrays, b, keys) or b"", keys)
    assert_same(got, decode_blob(b.envelope, SPEC, keys))
    with pytest.raises(SignatureError):  # an unsigned delta (e.g. written into Redis)
        apply_delta(base, make_delta(a.arrays, b) or b"", keys)
    forger = PolicyKeys(PolicyKey(b"f" * 32))
    with pytest.raises(SignatureError):
        apply_delta(base, make_delta(a.arrays, b, forger) or b"", keys)


def _announcement(version: int, delta_bytes: int) -> Announcement:
    return Announcement(
        version=version,
        precision=policy_pb2.PRECISION_INT8,
        blob_bytes=1_000,
        sha256=bytes(32),
        learner_step=version,
        fp32_equivalent_bytes=4_000,
        quantization_error=0.0,
        delta_base=version - 1 if delta_bytes else 0,
        delta_bytes=delta_bytes,
        dense_fp32_bytes=4_100,
    )


def test_delta_size_quantiles_count_stored_deltas_only() -> None:
    maker = DeltaMaker(store=None, keys=PolicyKeys())  # type: ignore[arg-type]
    assert maker.delta_bytes_quantiles() == {"p10": 0.0, "median": 0.0, "p90": 0.0}
    maker.record(_announcement(1, 0))  # the first version: no delta
    for version, size in enumerate([50, 10, 40, 20, 30, 90, 60, 80, 70, 100], start=2):
        maker.record(_announcement(version, size))
    maker.record(_announcement(12, 0))  # a version whose delta was larger than its blob
    assert maker.delta_bytes_quantiles() == {"p10": 10.0, "median": 55.0, "p90": 90.0}
