"""Policy forward time in a service's worker thread, with and without the thread count
inherited (actorq.torch_threads). Services set `torch.set_num_threads(1)` in main() and
run their loops in threads; torch's count binds per thread, so a loop thread that does not
set it again runs each op on one OpenMP thread per core.

    .venv/bin/python bench/bench_threads.py [--rounds 5]

Prints microseconds per batched forward (median of rounds) in the main thread, in a fresh
worker thread as the services ran before the fix, and in one that inherits the count.
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time

import torch

from actorq.models.mlp import MLPSpec, QNetwork
from actorq.quant import build_policy_module, decode_policy, encode_policy, parse_precision
from actorq.quant.weights import weights_from_module
from actorq.torch_threads import inherit_torch_threads

CALLS = 500


def _policy(precision: str, hidden: tuple[int, ...]) -> torch.nn.Module:
    spec = MLPSpec(5, 1, hidden, output_activation="tanh")  # cartpole-swingup's shapes
    weights = weights_from_module(QNetwork(spec))
    encoded = encode_policy(weights, spec, parse_precision(precision), 1, 1)
    return build_policy_module(decode_policy(encoded.envelope, spec))


def _time_forward(module: torch.nn.Module, batch: int) -> float:
    """Microseconds per forward, after a warm-up."""
    obs = torch.randn(batch, 5)
    with torch.inference_mode():
        for _ in range(50):
            module(obs)
        start = time.perf_counter()
        for _ in range(CALLS):
            module(obs)
    return 1e6 * (time.perf_counter() - start) / CALLS


def _in_thread(module: torch.nn.Module, batch: int, inherit: bool) -> float:
    result: list[float] = []

    def body() -> None:
        if inherit:
            inherit_torch_threads()
        result.append(_time_forward(module, batch))

    worker = threading.Thread(target=body)
    worker.start()
    worker.join()
    return result[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--batch", type=int, default=4)
    args = parser.parse_args()
    torch.set_num_threads(1)  # what every actor's main() does
    print(f"torch {torch.__version__}, {torch.get_num_threads()} thread set in main, "
          f"{threading.active_count()} python thread(s), batch {args.batch}")  # fmt: skip
    print(f"{'precision':>9} {'hidden':>8} | {'main us':>8} | {'worker us':>9} | "
          f"{'inherited us':>12} | {'worker/inherited':>16}")  # fmt: skip
    for hidden in ((64, 64), (256, 256)):
        for precision in ("fp32", "int8"):
            module = _policy(precision, hidden)
            rows: dict[str, list[float]] = {"main": [], "worker": [], "inherited": []}
            for _ in range(args.rounds):  # interleaved, so load changes hit all three
                rows["main"].append(_time_forward(module, args.batch))
                rows["worker"].append(_in_thread(module, args.batch, inherit=False))
                rows["inherited"].append(_in_thread(module, args.batch, inherit=True))
            med = {k: statistics.median(v) for k, v in rows.items()}
            print(f"{precision:>9} {'x'.join(map(str, hidden)):>8} | {med['main']:>8.1f} | "
                  f"{med['worker']:>9.1f} | {med['inherited']:>12.1f} | "
                  f"{med['worker'] / med['inherited']:>15.1f}x", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
