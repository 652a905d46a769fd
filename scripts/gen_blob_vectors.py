"""Write docs/blob-vectors/: one small policy blob of each kind and its decoded arrays.

Each vector is `<name>.blob` (the PolicyEnvelope bytes exactly as stored in Redis and
served to actors) plus `<name>.npz` (per tensor: `<tensor>` the float32 values a reader
must decode, and for quantized tensors `<tensor>:codes` (int8) and `<tensor>:scales`
(float32)); `manifest.json` lists every vector with its header fields, the payload
SHA-256, the position form of each sparse tensor and, for deltas, the base vector.
tests/unit/test_blob_vectors.py decodes them with its own reader (no actorq code).

    .venv/bin/python scripts/gen_blob_vectors.py [--check]

Deterministic: fixed seeds and created_unix_ms, so a fresh run writes the same bytes
(`--check` fails when the committed files differ).
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import sys
from pathlib import Path

import numpy as np

from actorq.models.cnn import CNNSpec
from actorq.models.mlp import MLPSpec
from actorq.quant.blob import EncodedPolicy, decode_policy, encode_policy
from actorq.quant.delta import make_delta
from actorq.security.signing import PolicyKey, PolicyKeys
from actorq.v1 import policy_pb2

OUT = Path(__file__).resolve().parent.parent / "docs" / "blob-vectors"
CREATED_MS = 1_764_115_200_000  # 2025-11-26 00:00 UTC: fixed so the bytes are too
# The key file's text (section 1): its bytes, whitespace stripped, are the HMAC secret.
# Tolerance for the reference outputs (`__out__`), as tests/unit/test_blob_vectors.py
# compares its own forward with them.
REFERENCE_RTOL = 1e-5
KEY_FILE_TEXT = "3f1c0a7e9b2d4c6e8f0a1b3c5d7e9f1a2b4c6d8e0f1a3b5c7d9e1f3a5b7c9d1e\n"
P = policy_pb2


def _weights(spec, seed: int, sparsity: float = 0.0, zero: tuple[str, ...] = ()) -> dict:
    rng = np.random.default_rng(seed)
    out: dict[str, np.ndarray] = {}
    for name, shape in spec.weight_shapes().items():
        if name == "input_norm.scale" or name == "act_max":
            out[name] = rng.uniform(0.5, 2.0, size=shape).astype(np.float32)
        else:
            out[name] = rng.normal(0, 0.5, size=shape).astype(np.float32)
        if len(shape) == 2 and sparsity:
            out[name][rng.random(shape) < sparsity] = 0.0
        if name in zero:
            out[name][:] = 0.0
    return out


def _tweak(weights: dict, seed: int, scale: float = 0.01) -> dict:
    """The next version: small changes, as after a few learner updates."""
    rng = np.random.default_rng(seed)
    return {
        k: (v + (v != 0) * rng.normal(0, scale, v.shape)).astype(np.float32)
        for k, v in weights.items()
    }


def _encode(weights, spec, precision, version, **kw) -> EncodedPolicy:
    return encode_policy(
        weights, spec, precision, version, 100 * version, created_unix_ms=CREATED_MS, **kw
    )


def build() -> dict[str, tuple[bytes, dict, dict]]:
    """name -> (envelope bytes, expected arrays, manifest entry)."""
    mlp = MLPSpec(
        obs_dim=3, num_outputs=2, hidden=(5, 4), output_activation="tanh", input_norm=True
    )
    q = MLPSpec(obs_dim=5, num_outputs=3, hidden=(3,))
    wide = MLPSpec(obs_dim=40, num_outputs=2, hidden=(48, 40))
    cnn = CNNSpec((2, 7, 7), 3, ((3, 3, 2),), (5,), input_scale=1 / 255)
    keys = PolicyKeys(PolicyKey(KEY_FILE_TEXT.strip().encode("ascii")))
    w_mlp, w_wide = _weights(mlp, 1), _weights(wide, 4, sparsity=0.9, zero=("layers.2.weight",))
    vectors: dict[str, tuple[EncodedPolicy | bytes, str | None]] = {}
    vectors["fp32"] = (_encode(w_mlp, mlp, P.PRECISION_FP32, 1), None)
    vectors["fp16"] = (_encode(w_mlp, mlp, P.PRECISION_FP16, 1), None)
    vectors["int8"] = (_encode(w_mlp, mlp, P.PRECISION_INT8, 1), None)
    # int4: 3x5 = 15 and 3x3 = 9 codes (odd: the last high nibble is padding), Q-network
    vectors["int4"] = (_encode(_weights(q, 2), q, P.PRECISION_INT4, 1), None)
    # a row of tiny weights (one subnormal) and an all-zero row: scale rule of section 3
    w_tiny = _weights(q, 3)
    w_tiny["layers.0.weight"][0, :] = [1e-45, 0.0, -1e-45, 0.0, 0.0]
    w_tiny["layers.0.weight"][1, :] = 0.0
    vectors["int8-tiny-rows"] = (_encode(w_tiny, q, P.PRECISION_INT8, 1), None)
    # 90% pruned 40 -> 48 -> 40 -> 2 with layer 1 (48x40) all zero: empty index_gaps
    vectors["sparse"] = (_encode(w_wide, wide, P.PRECISION_INT8, 1), None)
    vectors["cnn-int8"] = (_encode(_weights(cnn, 5), cnn, P.PRECISION_INT8, 1), None)
    # 90% pruned head (2-D: the sparse rule applies) and a 90%-zero conv (4-D: stays dense)
    w_cnn_sparse = _weights(cnn, 6, sparsity=0.9)
    w_cnn_sparse["convs.0.weight"][np.random.default_rng(7).random((3, 2, 3, 3)) < 0.9] = 0.0
    vectors["cnn-sparse-head"] = (_encode(w_cnn_sparse, cnn, P.PRECISION_INT8, 1), None)
    vectors["signed-int8"] = (_encode(w_mlp, mlp, P.PRECISION_INT8, 1, keys=keys), None)
    fallback = {"layers.2.weight": P.PRECISION_FP16}
    vectors["int8-fallback"] = (
        _encode(w_mlp, mlp, P.PRECISION_INT8, 1, fallback_layers=fallback),
        None,
    )
    # delta pairs: base version 1, target version 2
    for name, spec, w, precision, codec, kw in (
        ("delta-int8-xz", mlp, w_mlp, P.PRECISION_INT8, P.DELTA_CODEC_XZ, {}),
        ("delta-int8-zlib", mlp, w_mlp, P.PRECISION_INT8, P.DELTA_CODEC_ZLIB, {}),
        ("delta-int8-zstd", mlp, w_mlp, P.PRECISION_INT8, P.DELTA_CODEC_ZSTD, {}),
        ("delta-fp16-xz", mlp, w_mlp, P.PRECISION_FP16, P.DELTA_CODEC_XZ, {}),
        ("delta-sparse-xz", wide, w_wide, P.PRECISION_INT8, P.DELTA_CODEC_XZ, {}),
        ("delta-cnn-xz", cnn, _weights(cnn, 5), P.PRECISION_INT8, P.DELTA_CODEC_XZ, {}),
        ("delta-signed-xz", mlp, w_mlp, P.PRECISION_INT8, P.DELTA_CODEC_XZ, {"keys": keys}),
    ):
        base = _encode(w, spec, precision, 1, **kw)
        target = _encode(_tweak(w, 9), spec, precision, 2, **kw)
        delta = make_delta(base.arrays, target, kw.get("keys"), codec=codec)
        assert delta is not None, name
        vectors[f"{name}.base"] = (base, None)
        vectors[f"{name}.target"] = (target, None)
        vectors[name] = (delta, f"{name}.base")
    return {name: _describe(name, blob, base) for name, (blob, base) in vectors.items()}


def _describe(name: str, blob, base: str | None) -> tuple[bytes, dict, dict]:
    if isinstance(blob, bytes):  # a delta: its expected arrays are the target's
        env = P.PolicyEnvelope.FromString(blob)
        delta = P.PolicyDelta.FromString(env.payload)
        entry = {
            "kind": "delta",
            "base": base,
            "target": f"{name}.target",
            "codec": P.DeltaCodec.Name(delta.codec),
            "target_sha256": delta.target_sha256.hex(),
            "signed": bool(env.key_id),
        }
        return blob, {}, entry
    policy = decode_policy(blob.envelope)
    arrays: dict[str, np.ndarray] = {}
    forms: dict[str, str] = {}
    for t in policy.tensors:
        arrays[t.name] = blob.arrays.float32(t.name)
        held = blob.arrays.tensors[t.name]
        if held.scales is not None:
            arrays[f"{t.name}:codes"] = held.values.astype(np.int8)
            arrays[f"{t.name}:scales"] = held.scales.astype(np.float32)
        if t.dtype == P.DTYPE_SPARSE_INT8:
            forms[t.name] = t.WhichOneof("positions")
    arrays.update(_reference_forward(blob, policy.spec.kind))
    entry = {
        "kind": "full",
        "version": policy.version,
        "precision": P.Precision.Name(policy.precision),
        "spec_kind": policy.spec.kind,
        "sha256": blob.sha256.hex(),
        "signed": bool(blob.key_id),
        "key_id": blob.key_id,
        "dtypes": {t.name: P.DType.Name(t.dtype) for t in policy.tensors},
        "sparse_positions": forms,
    }
    return blob.envelope, arrays, entry


def _reference_forward(blob: EncodedPolicy, kind: str) -> dict[str, np.ndarray]:
    """`__obs__` and `__out__`: the fp32 network (actorq.models) over the dequantized
    weights, on a fixed batch of observations (uint8 frames for a CNN)."""
    import torch

    from actorq.models.cnn import CNNNetwork
    from actorq.models.mlp import QNetwork

    spec = blob.arrays.spec
    rng = np.random.default_rng(11)
    if kind == "cnn":
        net, obs = CNNNetwork(spec), rng.integers(0, 256, (4, *spec.obs_shape), dtype=np.uint8)
    else:
        net, obs = QNetwork(spec), rng.normal(0, 1, (4, spec.obs_dim)).astype(np.float32)
    state = {k: torch.from_numpy(blob.arrays.float32(k)) for k in blob.arrays.tensors}
    x = torch.from_numpy(obs)
    if "input_norm.shift" in state:  # QNetwork takes normalised observations (MLPSpec)
        x = (x - state.pop("input_norm.shift")) * state.pop("input_norm.scale")
    net.load_state_dict(state)
    with torch.no_grad():
        out = net.eval()(x).numpy()
    return {"__obs__": obs, "__out__": out.astype(np.float32)}


def _npz_bytes(arrays: dict) -> bytes:
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    return buf.getvalue()


def files() -> dict[str, bytes]:
    out: dict[str, bytes] = {}
    manifest: dict[str, dict] = {}
    for name, (blob, arrays, entry) in build().items():
        out[f"{name}.blob"] = blob
        entry["blob_sha256"] = hashlib.sha256(blob).hexdigest()
        if arrays:
            out[f"{name}.npz"] = _npz_bytes(arrays)
        manifest[name] = entry
    doc = {"key_file_text": KEY_FILE_TEXT, "vectors": manifest}
    out["manifest.json"] = (json.dumps(doc, indent=1, sort_keys=True) + "\n").encode()
    return out


def _up_to_date(path: Path, fresh: bytes) -> bool:
    """Byte for byte, except `__out__` in an .npz: the fp32 reference forward's last bits
    depend on the CPU's matrix kernels (the AVX2-only EPYC's sgemm sums in another order
    than an AVX-512 Xeon's), so it is compared to the tolerance the reader's test uses."""
    if not path.exists():
        return False
    committed = path.read_bytes()
    if committed == fresh or path.suffix != ".npz":
        return committed == fresh
    with np.load(io.BytesIO(committed)) as old, np.load(io.BytesIO(fresh)) as new:
        if sorted(old.files) != sorted(new.files):
            return False
        for key in old.files:
            a, b = old[key], new[key]
            if a.dtype != b.dtype or a.shape != b.shape:
                return False
            if key == "__out__":
                if not np.allclose(a, b, rtol=REFERENCE_RTOL, atol=REFERENCE_RTOL):
                    return False
            elif a.tobytes() != b.tobytes():
                return False
    return True


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail if committed files differ")
    args = parser.parse_args()
    fresh = files()
    if args.check:
        stale = [n for n, b in fresh.items() if not _up_to_date(OUT / n, b)]
        if stale:
            print(f"blob vectors differ from a fresh generation: {', '.join(stale)}")
            return 1
        print(f"{len(fresh)} blob vector files up to date")
        return 0
    OUT.mkdir(parents=True, exist_ok=True)
    for name, data in fresh.items():
        (OUT / name).write_bytes(data)
    print(f"wrote {len(fresh)} files to {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
