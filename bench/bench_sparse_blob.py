"""Bytes per broadcast (full int8, sparse + int8, delta) against the dense fp32 blob, and
decode/build/forward time of sparse layers: dense int8 after scatter vs torch sparse.

    .venv/bin/python bench/bench_sparse_blob.py [--versions 20] [--quick] [--big]
        [--delta-case td3:HalfCheetah-v5:256x256:50 ...]

Table 1: one policy at several sparsities (pruned entries exactly 0, as the learner
publishes), with the position form the writer picked for the hidden layer. Table 1b: the
hidden layer's positions in each of the three forms (bitmap, varint gaps, Rice gaps):
bytes and decode time (`sparse_positions`). Table 2: forward time of the hidden layers at
90% sparsity, the actor's dense int8 kernels (codes scattered back) vs torch's sparse
CSR fp32 matmul. Table 3: delta sizes between consecutive versions of a real learner
(bench/blob_versions.py) publishing every 50 updates, the default, or the cases named
with --delta-case (algorithm, env, hidden sizes, publish interval; table 3 only). Its
"codes" and "floats" columns compress the two halves of the diff apart (xz): the int8
code changes, and the XOR of the fp32 scales and biases.
"""

from __future__ import annotations

import argparse
import lzma
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from blob_versions import policy_versions

from actorq.models.mlp import MLPSpec, QNetwork
from actorq.quant import build_policy_module, decode_blob, encode_policy
from actorq.quant.arrays import PolicyArrays
from actorq.quant.blob import dense_fp32_blob_bytes
from actorq.quant.delta import apply_delta, diff_parts, make_delta
from actorq.quant.policy_module import int8_layer
from actorq.quant.rice import best_rice_k, encode_rice_gaps
from actorq.quant.sparse import encode_bitmap, encode_varints, sparse_positions
from actorq.v1 import policy_pb2

INT8 = policy_pb2.PRECISION_INT8


def pruned(spec: MLPSpec, sparsity: float, seed: int = 0) -> dict[str, np.ndarray]:
    torch.manual_seed(seed)
    w = {k: v.detach().numpy().copy() for k, v in QNetwork(spec).state_dict().items()}
    rng = np.random.default_rng(seed)
    for v in w.values():
        if v.ndim == 2 and sparsity:
            v.reshape(-1)[rng.permutation(v.size)[: round(sparsity * v.size)]] = 0.0
    return w


def best_ms(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return 1e3 * min(times)


def sizes_table(spec: MLPSpec, repeats: int) -> None:
    print(f"\n1. bytes per full broadcast, MLP {spec.obs_dim}-{spec.hidden}-{spec.num_outputs}")
    head = ("blob", "bytes", "/ dense fp32", "positions", "decode+build ms")
    print(f"{head[0]:>18} | {head[1]:>9} | {head[2]:>12} | {head[3]:>10} | {head[4]:>15}")
    for label, sparsity in [
        ("dense int8", 0.0),
        *((f"{s:.0%} sparse int8", s) for s in SPARSITIES),
    ]:
        encoded = encode_policy(pruned(spec, sparsity), spec, INT8, 1, 0)
        ms = best_ms(lambda e=encoded: build_policy_module(decode_blob(e.envelope)), repeats)
        ratio = encoded.blob_bytes / dense_fp32_blob_bytes(encoded)
        form = hidden_tensor(encoded.envelope).WhichOneof("positions") or "dense"
        print(f"{label:>18} | {encoded.blob_bytes:>9,} | {ratio:>12.4f} | {form:>10} | {ms:>15.2f}")
    print(f"{'dense fp32':>18} | {dense_fp32_blob_bytes(encoded):>9,} | {1:>12.4f} |")


SPARSITIES = (0.8, 0.9, 0.95, 0.98)


def hidden_tensor(envelope: bytes) -> policy_pb2.Tensor:
    """layers.2.weight, the [hidden, hidden] layer, as it travels."""
    payload = policy_pb2.PolicyEnvelope.FromString(envelope).payload
    return next(
        t for t in policy_pb2.Policy.FromString(payload).tensors if t.name == "layers.2.weight"
    )


def positions_table(widths: list[int], repeats: int) -> None:
    """The same layer's positions in each form: bytes and `sparse_positions` time."""
    print("\n1b. positions of one hidden layer: bytes | decode ms (best of runs)")
    forms = ("bitmap", "index_gaps", "rice_gaps")
    print(f"{'layer':>11} | {'sparsity':>8} | " + " | ".join(f"{f:>18}" for f in forms))
    for width, sparsity in ((w, s) for w in widths for s in SPARSITIES):
        spec = MLPSpec(obs_dim=width, num_outputs=width, hidden=())
        codes = decode_blob(encode_policy(pruned(spec, sparsity), spec, INT8, 1, 0).envelope)
        flat = codes.tensors["layers.0.weight"].values.ravel()
        gaps = np.diff(np.flatnonzero(flat), prepend=-1) - 1
        tensor = policy_pb2.Tensor(name="w", data=flat[flat != 0].tobytes())
        cells = []
        for form, data in zip(
            forms, (encode_bitmap(flat != 0), encode_varints(gaps), rice_bytes(gaps)), strict=True
        ):
            setattr(tensor, form, data)
            ms = per_call_ms(lambda t=tensor, w=width: sparse_positions(t, (w, w)), repeats, 20)
            cells.append(f"{len(data):>8,} | {ms:>7.3f}")
        print(f"{width:>5}x{width:<5} | {sparsity:>8.0%} | " + " | ".join(cells))


def rice_bytes(gaps: np.ndarray) -> bytes:
    return encode_rice_gaps(gaps, best_rice_k(gaps))


def per_call_ms(fn, repeats: int, calls: int = 200) -> float:
    def many() -> None:
        for _ in range(calls):
            fn()

    return best_ms(many, repeats) / calls


def kernels_table(widths: list[int], repeats: int) -> None:
    print("\n2. forward of one hidden layer at 90% sparsity, ms per call (best of runs)")
    head = ("layer", "batch", "dense int8", "sparse CSR fp32", "dense fp32")
    print(f"{head[0]:>11} | {head[1]:>5} | {head[2]:>10} | {head[3]:>15} | {head[4]:>10}")
    for width in widths:
        spec = MLPSpec(obs_dim=width, num_outputs=width, hidden=())
        arrays = decode_blob(encode_policy(pruned(spec, 0.9), spec, INT8, 1, 0).envelope)
        weight, bias = arrays.tensors["layers.0.weight"], arrays.tensors["layers.0.bias"]
        int8 = int8_layer(weight, bias, relu=True)
        dense = torch.from_numpy(weight.to_float32())
        csr, b = dense.to_sparse_csr(), torch.from_numpy(bias.to_float32())
        for batch in (1, 8, 64):
            x = torch.randn(batch, width)
            xt = x.t().contiguous()
            with torch.inference_mode():
                t = (
                    per_call_ms(lambda x=x, m=int8: m(x), repeats),
                    per_call_ms(lambda c=csr, x=xt, b=b: torch.relu(c @ x).t() + b, repeats),
                    per_call_ms(
                        lambda x=x, w=dense, b=b: torch.relu(torch.addmm(b, x, w.t())), repeats
                    ),
                )
            print(
                f"{width:>5}x{width:<5} | {batch:>5} | "
                f"{t[0]:>10.4f} | {t[1]:>15.4f} | {t[2]:>10.4f}"
            )


DeltaCase = tuple[str, str, tuple[int, ...], int]  # env, algorithm, hidden sizes, publish every

CODECS = {"xz": policy_pb2.DELTA_CODEC_XZ, "zlib": policy_pb2.DELTA_CODEC_ZLIB}


def delta_table(cases: list[DeltaCase], versions: int) -> None:
    print(f"\n3. delta between consecutive versions ({versions} versions per run)")
    print(
        f"{'run':>34} | {'codec':>5} | {'full int8':>9} | {'delta p10':>9} | {'median':>7} | "
        f"{'p90':>7} | {'codes':>6} | {'floats':>6} | {'codes changed':>13} | {'make ms':>7} | "
        f"{'apply ms':>8}  (sizes / dense fp32 blob; codes, floats: xz medians)"
    )
    for env_id, algo, hidden, every in cases:
        previous, full, changed = None, 0.0, []
        ratios: dict[str, list[float]] = {name: [] for name in CODECS}
        make_ms: dict[str, list[float]] = {name: [] for name in CODECS}
        apply_ms: dict[str, list[float]] = {name: [] for name in CODECS}
        halves: dict[str, list[float]] = {"codes": [], "floats": []}
        stream = policy_versions(env_id, algo, hidden, versions, publish_every=every)
        for v, (spec, weights) in enumerate(stream, 1):
            encoded = encode_policy(weights, spec, INT8, v, v * every)
            dense = dense_fp32_blob_bytes(encoded)
            full = encoded.blob_bytes / dense
            if previous is not None:
                for name, codec in CODECS.items():
                    start = time.perf_counter()
                    delta = make_delta(previous.arrays, encoded, codec=codec) or b""
                    make_ms[name].append(1e3 * (time.perf_counter() - start))
                    ratios[name].append(len(delta) / dense)
                    start = time.perf_counter()
                    apply_delta(previous.arrays, delta, expected_sha256=encoded.sha256)
                    apply_ms[name].append(1e3 * (time.perf_counter() - start))
                for half, size in diff_halves(previous.arrays, encoded.arrays).items():
                    halves[half].append(size / dense)
                codes = [
                    (t.values != previous.arrays.tensors[n].values).mean()
                    for n, t in encoded.arrays.tensors.items()
                    if t.scales is not None
                ]
                changed.append(float(np.average(codes)))
            previous = encoded
        label = f"{algo} {env_id} {'x'.join(map(str, hidden))} /{every}"
        for name in CODECS:
            q = np.quantile(ratios[name], [0.1, 0.5, 0.9])
            print(
                f"{label:>34} | {name:>5} | {full:>9.4f} | {q[0]:>9.4f} | {q[1]:>7.4f} | "
                f"{q[2]:>7.4f} | {statistics.median(halves['codes']):>6.4f} | "
                f"{statistics.median(halves['floats']):>6.4f} | "
                f"{statistics.mean(changed):>13.3f} | "
                f"{statistics.median(make_ms[name]):>7.2f} | "
                f"{statistics.median(apply_ms[name]):>8.2f}"
            )


def diff_halves(base: PolicyArrays, target: PolicyArrays) -> dict[str, int]:
    """xz bytes of the delta's diff split in two: the int8 code changes (one byte each)
    and the float XORs (scales, biases), in the order the delta sends them."""
    parts = [diff for _, diff in diff_parts(base, target)]
    codes = b"".join(d.tobytes() for d in parts if d.dtype == np.uint8)
    floats = b"".join(d.tobytes() for d in parts if d.dtype != np.uint8)
    return {"codes": len(lzma.compress(codes)), "floats": len(lzma.compress(floats))}


def delta_case(text: str) -> DeltaCase:
    """`algo:env:WxH:every`, e.g. `sac:HalfCheetah-v5:256x256:50`."""
    try:
        algo, env_id, hidden, every = text.split(":")
        case = (env_id, algo, tuple(int(h) for h in hidden.split("x")), int(every))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"--delta-case {text!r}: expected algo:env:WxH:every, e.g. td3:Pendulum-v1:64x64:50"
        ) from None
    if case[3] < 1 or min(case[2]) < 1:
        raise argparse.ArgumentTypeError(f"--delta-case {text!r}: sizes and interval must be >= 1")
    return case


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--versions", type=int, default=20)
    parser.add_argument("--quick", action="store_true", help="small sizes, few versions")
    parser.add_argument("--big", action="store_true", help="also deltas of TD3 256x256 (slow)")
    parser.add_argument(
        "--delta-case",
        type=delta_case,
        action="append",
        help="algo:env:WxH:every; repeatable; runs table 3 on these cases only",
    )
    args = parser.parse_args()
    torch.set_num_threads(1)
    if args.delta_case:
        delta_table(args.delta_case, args.versions)
        return
    repeats = 3 if args.quick else 7
    sizes_table(MLPSpec(17, 6, (256, 256), output_activation="tanh"), repeats)
    if not args.quick:
        sizes_table(MLPSpec(17, 6, (1024, 1024), output_activation="tanh"), repeats)
    positions_table([256] if args.quick else [256, 1024], repeats)
    kernels_table([256] if args.quick else [256, 1024], repeats)
    versions = 4 if args.quick else args.versions
    cases = [("Pendulum-v1", "td3", (64, 64), 50), ("CartPole-v1", "dqn", (64, 64), 50)]
    if args.big:
        cases.append(("Pendulum-v1", "td3", (256, 256), 50))
    delta_table(cases, versions)


if __name__ == "__main__":
    main()
