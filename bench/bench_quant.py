"""Benchmark the policy blob and int8 inference (plain prints, no extra dependencies).

(a) Blob bytes at fp32 / fp16 / int8 / int4 for several MLP sizes (obs_dim 64, 16 outputs),
    with encode and decode+build times and the int8 weight error.
(b) Inference throughput on one thread, 512x512x512 MLP: the learner's fp32 QNetwork vs
    the int8 and fp16 modules built from blobs, plus a hand-tuned fp32 forward (fp32-mm).
    Measurements are interleaved (each round times every model once, in turn) so machine
    noise hits all of them alike; the table shows the best round (least disturbed) and
    the median round.

Run: .venv/bin/python bench/bench_quant.py [--quick] [--ao-baseline]
"""

from __future__ import annotations

import argparse
import statistics
import time
import warnings
from collections.abc import Callable, Mapping

import torch
from torch import nn

from actorq.models.mlp import MLPSpec, QNetwork
from actorq.quant import (
    build_policy_module,
    decode_policy,
    encode_policy,
    parse_precision,
    quantized_policy_from_weights,
    weights_from_module,
)
from actorq.quant.codec import quantize_int8_per_channel

OBS_DIM = 64
NUM_OUTPUTS = 16
SIZE_HIDDEN = [(64, 64), (256, 256), (512, 512, 512), (2048, 2048, 2048)]
SPEED_HIDDEN = (512, 512, 512)
BATCHES = [1, 8, 32, 256]
PRECISIONS = ["fp32", "fp16", "int8", "int4"]


def _size_row(hidden: tuple[int, ...]) -> str:
    """One row of table (a): bytes per precision, int8 error, int8 encode/decode times."""
    spec = MLPSpec(OBS_DIM, NUM_OUTPUTS, hidden)
    weights = weights_from_module(QNetwork(spec))
    sizes: dict[str, int] = {}
    for name in PRECISIONS:
        start = time.perf_counter()
        current = encode_policy(weights, spec, parse_precision(name), 1, 1)
        if name == "int8":  # the timings and error columns are int8's
            enc_ms, encoded = 1e3 * (time.perf_counter() - start), current
        sizes[name] = current.blob_bytes
    start = time.perf_counter()
    build_policy_module(decode_policy(encoded.envelope, spec))
    dec_ms = 1e3 * (time.perf_counter() - start)
    return (
        f"{'x'.join(map(str, hidden)):<16}{spec.fp32_bytes() // 4:>10}{sizes['fp32']:>11}"
        f"{sizes['fp16']:>11}{sizes['int8']:>11}{sizes['int8'] / sizes['fp32']:>10.3f}"
        f"{sizes['int4']:>11}{sizes['int4'] / sizes['fp32']:>10.3f}"
        f"{encoded.quantization_error:>10.4f}{enc_ms:>8.1f}{dec_ms:>13.1f}"
    )


def bench_sizes() -> None:
    """Table (a): blob sizes and encode/decode costs per MLP size."""
    print(f"(a) blob size in bytes, obs_dim={OBS_DIM}, outputs={NUM_OUTPUTS}")
    header = (
        f"{'hidden':<16}{'params':>10}{'fp32':>11}{'fp16':>11}{'int8':>11}"
        f"{'int8/fp32':>10}{'int4':>11}{'int4/fp32':>10}{'int8 err':>10}{'enc ms':>8}"
        f"{'dec+build ms':>13}"
    )
    print(header)
    print("-" * len(header))
    for hidden in SIZE_HIDDEN:
        print(_size_row(hidden))
    print(
        "int8 err: max over weight matrices of ||W - deq(q(W))||_F / ||W||_F; enc ms and "
        "dec+build ms are for int8 (decode verifies sha256 and every tensor)"
    )


def _ao_baseline(net: QNetwork) -> nn.Module:
    """Same int8 weights through torch.ao's own DynamicQuantizedLinear modules."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*deprecat")
        from torch.ao.nn.quantized.dynamic import Linear as DynamicQuantizedLinear

        modules: list[nn.Module] = []
        for layer in net.layers:
            if not isinstance(layer, nn.Linear):
                modules.append(nn.ReLU())
                continue
            q, scales = quantize_int8_per_channel(layer.weight.detach().numpy())
            qweight = torch._make_per_channel_quantized_tensor(
                torch.from_numpy(q),
                torch.from_numpy(scales).double(),
                torch.zeros(len(scales), dtype=torch.int64),
                0,
            )
            linear = DynamicQuantizedLinear(layer.in_features, layer.out_features)
            linear.set_weight_bias(qweight, layer.bias.detach())
            modules.append(linear)
    return nn.Sequential(*modules).eval()


def _tuned_fp32(net: QNetwork) -> Callable[[torch.Tensor], torch.Tensor]:
    """The fastest fp32 forward found here: plain tensors, pre-transposed weights, addmm.

    A stricter baseline than QNetwork (nn.Linear with Parameters, transposed GEMM).
    """
    layers = [
        (m.weight.detach().t().contiguous(), m.bias.detach().clone())
        for m in net.layers
        if isinstance(m, nn.Linear)
    ]

    def forward(x: torch.Tensor) -> torch.Tensor:
        for w_t, b in layers[:-1]:
            x = torch.addmm(b, x, w_t).relu_()
        w_t, b = layers[-1]
        return torch.addmm(b, x, w_t)

    return forward


def _round_seconds(model: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor, n: int) -> float:
    start = time.perf_counter()
    for _ in range(n):
        model(x)
    return (time.perf_counter() - start) / n


def bench_speed(quick: bool, ao_baseline: bool) -> None:
    """Table (b): samples/s per model and batch, interleaved rounds, one thread."""
    torch.set_num_threads(1)
    torch.manual_seed(0)
    spec = MLPSpec(OBS_DIM, NUM_OUTPUTS, SPEED_HIDDEN)
    net = QNetwork(spec).eval().requires_grad_(False)
    weights = weights_from_module(net)
    models: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
        "fp32": net,
        "int8": quantized_policy_from_weights(weights, spec, "int8"),
        "fp16": quantized_policy_from_weights(weights, spec, "fp16"),
        # int4 codes run through the same int8 kernels: no 4-bit kernel on CPU here.
        "int4": quantized_policy_from_weights(weights, spec, "int4"),
    }
    models["fp32-mm"] = _tuned_fp32(net)
    if ao_baseline:
        models["ao-int8"] = _ao_baseline(net)
    rounds = 7 if quick else 25
    target_s = 0.01 if quick else 0.03
    print(
        f"\n(b) throughput, samples/s, 1 thread, MLP {OBS_DIM}->"
        f"{'x'.join(map(str, SPEED_HIDDEN))}->{NUM_OUTPUTS}, torch.inference_mode, "
        f"quantized engine {torch.backends.quantized.engine}, {rounds} interleaved rounds"
    )
    header = f"{'batch':>5}  {'stat':<6}" + "".join(f"{n:>10}" for n in models)
    header += "".join(f"{a + '/' + b:>{len(a + b) + 3}}" for a, b in _ratios(models))
    print(header)
    print("-" * len(header))
    with torch.inference_mode():
        for batch in BATCHES:
            _speed_rows(models, batch, rounds, target_s)


def _speed_rows(
    models: dict[str, Callable[[torch.Tensor], torch.Tensor]],
    batch: int,
    rounds: int,
    target_s: float,
) -> None:
    x = torch.randn(batch, OBS_DIM)
    calls = {}
    for name, model in models.items():
        model(x)  # warm up, then size each round to about target_s
        calls[name] = max(3, int(target_s / max(_round_seconds(model, x, 3), 1e-7)))
    times: dict[str, list[float]] = {name: [] for name in models}
    for _ in range(rounds):
        for name, model in models.items():
            times[name].append(_round_seconds(model, x, calls[name]))
    for stat, pick in (("best", min), ("median", statistics.median)):
        rate = {name: batch / pick(ts) for name, ts in times.items()}
        row = f"{batch:>5}  {stat:<6}" + "".join(f"{rate[n]:>10,.0f}" for n in models)
        row += "".join(f"{rate[a] / rate[b]:>{len(a + b) + 3}.2f}" for a, b in _ratios(models))
        print(row)


def _ratios(models: Mapping[str, object]) -> list[tuple[str, str]]:
    """Speed ratios to print: every model against fp32 QNetwork, int8 against fp32-mm."""
    pairs = [(name, "fp32") for name in models if name != "fp32"]
    return [*pairs, ("int8", "fp32-mm")]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer, shorter rounds")
    parser.add_argument(
        "--ao-baseline",
        action="store_true",
        help="add torch.ao DynamicQuantizedLinear modules as a column",
    )
    args = parser.parse_args()
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads available")
    bench_sizes()
    bench_speed(args.quick, args.ao_baseline)


if __name__ == "__main__":
    main()
