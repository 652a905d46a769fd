"""int8 vs fp32 convolution throughput: the Nature-CNN on one thread (BENCHMARKS.md 15c).

Rows: batch 1, 8, 32, 64 of uint8 [4, 84, 84] frames. Columns: ms per forward of
- conv fp32: the three convs + ReLU as actors' fp32/fp16 modules run them (F.conv2d),
- conv int8: `actorq.quant.conv.Int8ConvStack` (fbgemm static int8 conv + ReLU, 7-bit
  activations, built from a real blob),
- policy fp32 / int8: the whole actor module (convs + 512-unit head), fp32 blob vs int8
  blob through `quantized_policy_from_weights`.
int8 runs once per `--engines` entry: the torch quantized engine the convs are packed
under (ACTORQ_INT8_CONV_ENGINE; the Linear head keeps the process's engine).
Each contestant runs in turn, `--rounds` times (interleaved, so machine noise hits both
alike); the table gives medians and the fp32/int8 ratio. Weights: a randomly initialised
Nature-CNN whose activation ranges come from one training-mode forward on the same frames.

    make bench-conv            # or: python bench/bench_conv.py --rounds 7 --seconds 0.3
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time

import torch

from actorq.algos.base import fp32_weights
from actorq.models.cnn import CNNNetwork, cnn_spec_for
from actorq.quant.conv import CONV_ENGINE_ENV
from actorq.quant.policy_module import quantized_policy_from_weights


def per_call_ms(fn, x: torch.Tensor, seconds: float) -> float:
    with torch.inference_mode():
        fn(x)
        calls, started = 0, time.perf_counter()
        while time.perf_counter() - started < seconds:
            fn(x)
            calls += 1
    return (time.perf_counter() - started) / calls * 1e3


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", default="1,8,32,64")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=0.25, help="per contestant per round")
    parser.add_argument("--engines", default="x86,onednn", help="engines to pack int8 convs under")
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    spec = cnn_spec_for((4, 84, 84), 6)
    net = CNNNetwork(spec)
    frames = torch.randint(0, 256, (64, *spec.obs_shape), dtype=torch.uint8)
    with torch.no_grad():
        net(frames)  # training-mode forward: activation ranges for the int8 blob
    net.eval()
    weights = fp32_weights(net)
    fp32_policy = quantized_policy_from_weights(weights, spec, "fp32")
    contestants = {
        "conv fp32": torch.nn.Sequential(*fp32_policy.layers[: 1 + len(spec.convs)]),
        "policy fp32": fp32_policy,
    }
    engines = args.engines.split(",")
    for engine in engines:
        os.environ[CONV_ENGINE_ENV] = engine
        int8_policy = quantized_policy_from_weights(weights, spec, "int8")
        contestants[f"conv int8 {engine}"] = int8_policy.layers[0]
        contestants[f"policy int8 {engine}"] = int8_policy
    print(f"# Nature-CNN, 1 thread, torch {torch.__version__}, process engine "
          f"{torch.backends.quantized.engine}, CPU {cpu_model()}")  # fmt: skip
    print(f"# flags: {cpu_flags()}")
    header = ["batch", "conv fp32 ms"] + [f"conv int8 {e} ms (speedup)" for e in engines]
    header += ["policy fp32 ms"] + [f"policy int8 {e} ms (speedup)" for e in engines]
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for batch in (int(b) for b in args.batches.split(",")):
        x = frames[:batch]
        times: dict[str, list[float]] = {k: [] for k in contestants}
        for _ in range(args.rounds):
            for name, module in contestants.items():
                times[name].append(per_call_ms(module, x, args.seconds))
        med = {k: statistics.median(v) for k, v in times.items()}
        row = [str(batch)]
        for part in ("conv", "policy"):
            base = med[f"{part} fp32"]
            row.append(f"{base:.3f}")
            for engine in engines:
                ms = med[f"{part} int8 {engine}"]
                row.append(f"{ms:.3f} ({base / ms:.2f}x)")
        print("| " + " | ".join(row) + " |")


def cpu_flags() -> str:
    wanted = ("avx2", "fma", "avx512f", "avx512_vnni", "avx_vnni", "amx_int8")
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    present = set(line.split(":", 1)[1].split())
                    return (
                        " ".join(flag for flag in wanted if flag in present) or "none of interest"
                    )
    except OSError:
        pass
    return "unknown"


if __name__ == "__main__":
    main()
