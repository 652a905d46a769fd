"""Importance ratios caused by quantization alone (no lag): pi_fp32 / mu_quantized.

Loads a trained on-policy checkpoint (`actorq run --algo ppo` run folder), plays
`--steps` env steps with actions sampled from the quantized policy (as actors do), and
reports the ratio statistics the learner would see if the learner's policy were exactly
the broadcast one: mean |ratio - 1|, max ratio, normalised ESS, per precision
(BENCHMARKS.md 15). The learner's own figures (metrics.jsonl) add the policy lag.

    .venv/bin/python bench/bench_quant_ratio.py RUN_DIR [--steps 4096]
"""

from __future__ import annotations

import argparse

import numpy as np
import torch

from actorq.actor.trajectory import log_softmax, sample_actions
from actorq.algos.vtrace import ratio_stats
from actorq.envs import make_vector_env
from actorq.ptq import load_policy
from actorq.quant.policy_module import quantized_policy_from_weights


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir")
    parser.add_argument("--steps", type=int, default=4096)
    parser.add_argument("--envs", type=int, default=16)
    args = parser.parse_args()
    torch.set_num_threads(1)
    policy = load_policy(args.run_dir)
    fp32 = quantized_policy_from_weights(policy.weights, policy.spec, "fp32")
    print(f"# {policy.algo} on {policy.env_id}, {args.steps} steps sampled from each precision")
    print("| behaviour precision | mean ratio | mean abs(ratio - 1) | max ratio | ESS |")
    print("|---|---|---|---|---|")
    for precision in ("fp16", "int8", "int4"):
        behaviour = quantized_policy_from_weights(policy.weights, policy.spec, precision)
        env = make_vector_env(policy.env_id, args.envs, seed=0, native=False)
        obs, _ = env.reset(seed=0)
        rng = np.random.default_rng(0)
        log_ratios = []
        for _ in range(args.steps // args.envs):
            with torch.inference_mode():
                mu_logits = behaviour(torch.from_numpy(np.asarray(obs))).numpy()
                pi_logits = fp32(torch.from_numpy(np.asarray(obs))).numpy()
            actions, mu_logp = sample_actions(mu_logits, rng)
            pi_logp = log_softmax(pi_logits.astype(np.float64))[np.arange(len(actions)), actions]
            log_ratios.append(pi_logp - mu_logp)
            obs, *_ = env.step(actions)
        env.close()
        r = ratio_stats(torch.from_numpy(np.concatenate(log_ratios)), torch.zeros(1))
        print(
            f"| {precision} | {r.mean:.4f} | {r.mean_abs_deviation:.4f} | {r.max:.3f} | "
            f"{r.ess:.4f} |"
        )


if __name__ == "__main__":
    main()
