"""Where do int8 actors pay on this machine? Throughput of `actorq run` by policy size,
replay ratio and precision, interleaved.

For each (hidden sizes, samples per insert) the same short `actorq run` is made once per
precision, one after the other (fp32, int8, fp32, int8, ... over --rounds), and the
steady-state env steps/s and learner updates/s are read from the run's metrics.jsonl
between --skip seconds and the end (start-up and replay warm-up left out). A regime where
int8 gives more env steps and more updates per second is one where quantized actors can
reach a return sooner; where both arms run the same rates, the learner (or something
other than inference) is the bottleneck and int8 cannot pay in wall time.

    .venv/bin/python bench/bench_regimes.py --hidden 64,64 --hidden 512,512,512 \\
        --spi 16 --spi 1 --seconds 45

Learning is not measured here (returns after 45 s mean little): see `actorq study`.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

from arms import cpu_label, run_quietly, steady_rates


def run_one(args, hidden: str, spi: str, precision: str, seed: int, out: Path) -> dict:
    run_dir = out / f"h{hidden.replace(',', 'x')}-spi{spi}-{precision}-s{seed}"
    cmd = [
        str(Path(sys.executable).parent / "actorq"), "run", "--env", args.env,
        "--hidden", hidden, "--samples-per-insert", spi, "--precision", precision,
        "--seed", str(seed), "--actors", str(args.actors),
        "--envs-per-actor", str(args.envs_per_actor), "--target-return", "none",
        "--settle-at", "none", "--max-env-steps", "100000000",
        "--max-seconds", str(args.seconds), "--run-dir", str(run_dir),
    ]  # fmt: skip
    code = run_quietly(cmd, {})
    if code != 0:
        raise SystemExit(f"run failed (exit {code}): see {run_dir}/logs")
    return steady_rates(run_dir, args.skip)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--hidden", action="append", help="hidden sizes, e.g. 512,512,512 (repeat)")
    p.add_argument("--spi", action="append", help="samples per insert (repeat)")
    p.add_argument("--precisions", default="fp32,int8")
    p.add_argument("--env", default="CartPole-v1")
    p.add_argument("--actors", type=int, default=2)
    p.add_argument("--envs-per-actor", type=int, default=16)
    p.add_argument("--seconds", type=float, default=45.0)
    p.add_argument("--skip", type=float, default=15.0, help="seconds left out at the start")
    p.add_argument("--rounds", type=int, default=1, help="interleaved repeats (seeds 1..N)")
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="actorq-regimes-"))
    precisions = args.precisions.split(",")
    print(f"# {cpu_label()}; {args.env}, {args.actors} actors x {args.envs_per_actor} envs, "
          f"{args.seconds:g} s runs, rates after {args.skip:g} s; runs in {out}")  # fmt: skip
    print("| hidden | samples/insert | precision | env steps/s | updates/s | "
          "env steps/s vs fp32 | updates/s vs fp32 |")  # fmt: skip
    print("|---|---|---|---|---|---|---|")
    for hidden in args.hidden or ["64,64"]:
        for spi in args.spi or ["16"]:
            rates: dict[str, list[dict]] = {pr: [] for pr in precisions}
            for seed in range(1, args.rounds + 1):
                for precision in precisions:
                    rates[precision].append(run_one(args, hidden, spi, precision, seed, out))
            keys = ("env_steps_per_s", "updates_per_s")
            med = {
                pr: {k: statistics.median(r[k] for r in rs) for k in keys}
                for pr, rs in rates.items()
            }
            base = med.get("fp32", med[precisions[0]])
            for precision in precisions:
                m = med[precision]
                print(
                    f"| {hidden.replace(',', 'x')} | {spi} | {precision} | "
                    f"{m['env_steps_per_s']:,.0f} | {m['updates_per_s']:,.1f} | "
                    f"{m['env_steps_per_s'] / base['env_steps_per_s']:.2f}x | "
                    f"{m['updates_per_s'] / max(base['updates_per_s'], 1e-9):.2f}x |",
                    flush=True,
                )
    return 0


if __name__ == "__main__":
    sys.exit(main())
