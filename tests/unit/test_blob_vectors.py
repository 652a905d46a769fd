"""docs/blob-vectors/ decoded by docs/blob-vectors/reader.py, a reader written from
docs/BLOB_FORMAT.md that imports nothing from actorq (nor the protobuf package)."""

from __future__ import annotations

import ast
import hashlib
import importlib.util
import io
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
VECTORS = ROOT / "docs" / "blob-vectors"
MANIFEST = json.loads((VECTORS / "manifest.json").read_text())
SECRET = MANIFEST["key_file_text"].strip().encode("ascii")  # section 1: text, stripped


def _load(name: str):
    spec = importlib.util.spec_from_file_location(f"blob_{name}", VECTORS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[f"blob_{name}"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


reader, network = _load("reader"), _load("network")
FULL = sorted(n for n, v in MANIFEST["vectors"].items() if v["kind"] == "full")
DELTAS = sorted(n for n, v in MANIFEST["vectors"].items() if v["kind"] == "delta")


def _blob(name: str) -> bytes:
    return (VECTORS / f"{name}.blob").read_bytes()


def _read(name: str):
    signed = MANIFEST["vectors"][name]["signed"]
    return reader.read_blob(_blob(name), SECRET if signed else None)


@pytest.mark.parametrize("name", ["reader", "network"])
def test_reader_imports_no_actorq_and_no_protobuf(name: str):
    tree = ast.parse((VECTORS / f"{name}.py").read_text())
    imported = {
        alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.Import | ast.ImportFrom)
        for alias in node.names
    } | {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    assert not {m for m in imported if m and m.startswith(("actorq", "google"))}, imported


def test_every_kind_has_a_vector():
    dtypes = {d for n in FULL for d in MANIFEST["vectors"][n]["dtypes"].values()}
    assert dtypes == {f"DTYPE_{d}" for d in ("FLOAT32", "FLOAT16", "INT8", "INT4", "SPARSE_INT8")}
    forms = {f for n in FULL for f in MANIFEST["vectors"][n]["sparse_positions"].values()}
    assert forms == {"bitmap", "index_gaps", "rice_gaps"}
    assert {MANIFEST["vectors"][n]["spec_kind"] for n in FULL} == {"mlp", "cnn"}
    assert {MANIFEST["vectors"][n]["codec"] for n in DELTAS} == {
        "DELTA_CODEC_XZ",
        "DELTA_CODEC_ZLIB",
        "DELTA_CODEC_ZSTD",
    }
    assert any(MANIFEST["vectors"][n]["signed"] for n in FULL + DELTAS)


DTYPES = {1: "DTYPE_FLOAT32", 2: "DTYPE_FLOAT16", 3: "DTYPE_INT8", 4: "DTYPE_INT4"}
DTYPES[5] = "DTYPE_SPARSE_INT8"


def _assert_matches(policy, name: str) -> None:
    entry = MANIFEST["vectors"][name]
    expected = np.load(VECTORS / f"{name}.npz")
    assert policy.sha256.hex() == entry["sha256"]
    assert {n: DTYPES[t.dtype] for n, t in policy.tensors.items()} == entry["dtypes"]
    for tname, tensor in policy.tensors.items():
        # bit for bit: compare the float32 bit patterns, not values within a tolerance
        assert tensor.values.dtype == np.float32
        assert np.array_equal(tensor.values.view(np.uint32), expected[tname].view(np.uint32)), tname
        if tensor.scales is not None:
            assert np.array_equal(tensor.held, expected[f"{tname}:codes"]), tname
            assert np.array_equal(tensor.scales, expected[f"{tname}:scales"]), tname
        if tensor.positions:
            assert entry["sparse_positions"][tname] == tensor.positions
    out = network.forward(policy, expected["__obs__"])
    np.testing.assert_allclose(out, expected["__out__"], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", FULL)
def test_full_blob_decodes_bit_for_bit(name: str):
    _assert_matches(_read(name), name)


@pytest.mark.parametrize("name", DELTAS)
def test_delta_rebuilds_the_target_payload(name: str):
    entry = MANIFEST["vectors"][name]
    secret = SECRET if entry["signed"] else None
    base = _read(entry["base"])
    target = reader.apply_delta(_blob(name), base, secret)
    assert target.sha256.hex() == entry["target_sha256"]
    assert target.payload == _read(entry["target"]).payload  # the full blob's bytes
    _assert_matches(target, entry["target"])


FULL_KEYS = {"version", "precision", "spec_kind", "sha256", "key_id", "dtypes"}
FULL_KEYS |= {"sparse_positions"}


@pytest.mark.parametrize("name", sorted(MANIFEST["vectors"]))
def test_manifest_entry_is_as_section_10_defines(name: str):
    """BLOB_FORMAT.md section 10: `kind` is full/delta (what the .blob holds),
    `blob_sha256` hashes the .blob file, `sha256` the payload; no other keys."""
    entry, blob = MANIFEST["vectors"][name], _blob(name)
    assert entry["blob_sha256"] == hashlib.sha256(blob).hexdigest()
    assert entry["signed"] == bool(reader._one(reader._fields(blob), 4, b""))
    common = {"kind", "blob_sha256", "signed"}
    if entry["kind"] == "full":
        assert set(entry) == common | FULL_KEYS
        _, digest = reader.verified_payload(blob)
        assert entry["sha256"] == digest.hex() != entry["blob_sha256"]
        assert (VECTORS / f"{name}.npz").exists()
    else:
        assert entry["kind"] == "delta"
        assert set(entry) == common | {"base", "target", "codec", "target_sha256"}
        target = MANIFEST["vectors"][entry["target"]]
        assert MANIFEST["vectors"][entry["base"]]["kind"] == target["kind"] == "full"
        assert entry["target_sha256"] == target["sha256"]
        assert not (VECTORS / f"{name}.npz").exists()


@pytest.mark.parametrize("name", FULL)
def test_fp32_equivalent_bytes_counts_every_tensor(name: str):
    """Sections 0 and 2: 4 x the elements of every tensor, input_norm and act_max too."""
    policy = _read(name)
    elements = sum(int(np.prod(shape)) for shape in reader.weight_shapes(policy.spec).values())
    assert policy.fp32_equivalent_bytes == 4 * elements


def test_cnn_head_weights_follow_the_sparse_rule_and_convs_stay_dense():
    """Section 3: the sparse rule covers a CNN's head (2-D) weights, never its convs."""
    entry = MANIFEST["vectors"]["cnn-sparse-head"]
    expected = np.load(VECTORS / "cnn-sparse-head.npz")
    assert entry["spec_kind"] == "cnn"
    assert entry["dtypes"]["convs.0.weight"] == "DTYPE_INT8"
    assert (expected["convs.0.weight:codes"] == 0).mean() > 0.9  # sparse would be smaller
    for head in ("head.0.weight", "head.2.weight"):
        assert entry["dtypes"][head] == "DTYPE_SPARSE_INT8"
    assert set(entry["sparse_positions"]) == {"head.0.weight", "head.2.weight"}


def test_signed_blob_needs_the_right_key():
    reader.read_blob(_blob("signed-int8"))  # readers without keys ignore fields 3 and 4
    with pytest.raises(reader.BlobError, match=r"HMAC|key"):
        reader.read_blob(_blob("signed-int8"), SECRET[:-1] + b"0")
    with pytest.raises(reader.BlobError, match="unsigned"):
        reader.read_blob(_blob("int8"), SECRET)


def test_a_changed_byte_is_refused():
    blob = bytearray(_blob("int8"))
    blob[len(blob) // 2] ^= 0x01
    with pytest.raises(reader.BlobError):
        reader.read_blob(bytes(blob))


def test_delta_on_the_wrong_base_is_refused():
    with pytest.raises(reader.BlobError, match="held version"):
        reader.apply_delta(_blob("delta-int8-xz"), _read("int8-fallback"))


def test_vectors_are_a_fresh_generation():
    script = ROOT / "scripts" / "gen_blob_vectors.py"
    done = subprocess.run(
        [sys.executable, str(script), "--check"], capture_output=True, text=True, timeout=240
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_check_allows_cpu_rounding_in_reference_outputs_only(tmp_path):
    """`--check` takes `__out__` (the fp32 reference forward, whose last bits depend on
    the CPU's sgemm) to the reader test's tolerance, and every other array bit for bit."""
    spec = importlib.util.spec_from_file_location(
        "gen_vectors", ROOT / "scripts" / "gen_blob_vectors.py"
    )
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    arrays = {
        "w": np.arange(6, dtype=np.float32),
        "__out__": np.linspace(-2, 3, 8, dtype=np.float32),
    }

    def npz(**changed) -> bytes:
        buf = io.BytesIO()
        np.savez(buf, **{**arrays, **changed})
        return buf.getvalue()

    committed = tmp_path / "v.npz"
    committed.write_bytes(npz())
    ulp = np.nextafter(arrays["__out__"], np.float32(np.inf))
    assert gen._up_to_date(committed, npz(__out__=ulp))
    assert not gen._up_to_date(committed, npz(__out__=arrays["__out__"] + np.float32(1e-3)))
    assert not gen._up_to_date(committed, npz(w=np.nextafter(arrays["w"], np.float32(9))))
    assert not gen._up_to_date(committed, npz(extra=np.zeros(1)))
    assert not gen._up_to_date(tmp_path / "missing.npz", npz())
