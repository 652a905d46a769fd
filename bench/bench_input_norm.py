"""How far int8 / int4 actors' actions are from fp32, for three ways of running them:

- now: normalisation carried by the policy (MLPSpec.input_norm), first layer in fp32 over
  its dequantized codes, the other layers int8 kernels (what actorq does);
- all-int8: normalisation carried, every layer an int8 kernel (the observation itself
  quantized to 7 bits per tensor);
- folded: normalisation folded into the first layer's weights, every layer int8 (the
  original design).

For each env: a TD3 actor network (fresh, or trained from --runs), observation statistics
from rollouts, then every observation of those rollouts through the fp32 policy and the
quantized one, in batches of 8 like an actor's envs. Prints mean and p99 of |action
difference| (actions in [-1, 1]) for each way.

    .venv/bin/python bench/bench_input_norm.py --envs HalfCheetah-v5,dmc:cartpole-swingup
    .venv/bin/python bench/bench_input_norm.py --runs RUN_DIR,RUN_DIR   # trained checkpoints
    .venv/bin/python bench/bench_input_norm.py --speed   # what the fp32 first layer costs

--speed: samples/s of fp32, int8 now and all-int8 modules, 1 thread, on the process CPU
clock (robust to other load on a shared machine), median of 11 interleaved rounds.
"""

from __future__ import annotations

import argparse
import dataclasses
import time

import numpy as np
import torch

from actorq.actor.stepper import VectorStepper
from actorq.algos import TD3Config
from actorq.algos.factory import make_algorithm, policy_spec
from actorq.envs import make_vector_env
from actorq.models.mlp import INPUT_SCALE, INPUT_SHIFT, MLPSpec, QNetwork, linear_layer_names
from actorq.ptq import load_policy
from actorq.quant import decode_blob, encode_policy, parse_precision, weights_from_module
from actorq.quant.policy_module import build_policy_module, int8_layer


def folded(weights: dict[str, np.ndarray], spec: MLPSpec) -> tuple[dict, MLPSpec]:
    """The same policy with (x - shift) * scale folded into layer 0: W*scale, b - W*scale*shift."""
    first = linear_layer_names(1)[0]
    w = weights[f"{first}.weight"].astype(np.float64)
    b = weights[f"{first}.bias"].astype(np.float64)
    shift = weights[INPUT_SHIFT].astype(np.float64)
    scale = weights[INPUT_SCALE].astype(np.float64)
    out = {k: v for k, v in weights.items() if k not in (INPUT_SHIFT, INPUT_SCALE)}
    out[f"{first}.weight"] = np.ascontiguousarray((w * scale[None, :]).astype(np.float32))
    out[f"{first}.bias"] = (b - (w * scale[None, :]) @ shift).astype(np.float32)
    return out, dataclasses.replace(spec, input_norm=False)


def rollout_obs(
    env_id: str, policy: torch.nn.Module | None, act_dim: int, steps: int
) -> np.ndarray:
    """Observations of `steps` steps of 8 envs (policy actions, or uniform random ones)."""
    env = make_vector_env(env_id, 8, seed=0)
    rng = np.random.default_rng(0)
    try:
        stepper = VectorStepper(env)
        obs, seen = stepper.reset(seed=0), []
        for _ in range(steps):
            seen.append(obs.copy())
            if policy is None:
                action = rng.uniform(-1, 1, (8, act_dim)).astype(np.float32)
            else:
                with torch.inference_mode():
                    action = policy(torch.from_numpy(obs)).numpy()
            obs = stepper.step(action).obs
        return np.concatenate(seen).astype(np.float32)
    finally:
        env.close()


def fresh_policy(env_id: str, hidden: tuple[int, ...], steps: int):
    config = TD3Config(obs_norm=True)
    spec = policy_spec(env_id, "td3", hidden, config)
    learner = make_algorithm("td3", spec.obs_dim, spec.num_outputs, hidden, config)
    obs = rollout_obs(env_id, None, spec.num_outputs, steps)
    learner.obs_rms.update(obs)
    return learner.policy_weights(), learner.policy_spec, obs


def policy_module(weights: dict, spec: MLPSpec, precision: str, all_int8: bool = False):
    """The actor's module (fp32 reference when precision is fp32); `all_int8` swaps its
    fp32 first layer for an int8 kernel over the same codes."""
    blob = encode_policy(weights, spec, parse_precision(precision), 0, 0).envelope
    policy = decode_blob(blob)
    module = build_policy_module(policy)
    if not all_int8:
        return module
    tensors = policy.tensors
    first = linear_layer_names(1)[0]
    at = 1 if spec.input_norm else 0  # position of the first Linear (InputNorm before it)
    layers = list(module.layers)
    layers[at] = int8_layer(tensors[f"{first}.weight"], tensors[f"{first}.bias"], True)
    return torch.nn.Sequential(*layers)


def action_errors(module: torch.nn.Module, reference: np.ndarray, obs: np.ndarray) -> np.ndarray:
    x = torch.from_numpy(obs)
    with torch.inference_mode():
        got = np.concatenate([module(x[i : i + 8]).numpy() for i in range(0, len(x), 8)])
    return np.abs(got - reference)


SPEED_CASES = ((17, (64, 64), 6), (17, (256, 256), 6), (64, (512, 512, 512), 16))


def speed_table() -> None:
    print(
        f"{'net':>22} | {'batch':>5} | {'fp32':>10} | {'int8 now':>10} | {'all-int8':>10} | now/all"
    )
    for obs_dim, hidden, outputs in SPEED_CASES:
        spec = MLPSpec(obs_dim, outputs, hidden, output_activation="tanh")
        torch.manual_seed(0)
        weights = weights_from_module(QNetwork(spec))
        modules = {
            "fp32": policy_module(weights, spec, "fp32"),
            "now": policy_module(weights, spec, "int8"),
            "all": policy_module(weights, spec, "int8", all_int8=True),
        }
        for batch, calls in ((8, 2000), (64, 400)):
            x = torch.randn(batch, obs_dim)
            rates: dict[str, list[float]] = {name: [] for name in modules}
            with torch.inference_mode():
                for _ in range(11):
                    for name, module in modules.items():
                        started = time.process_time()
                        for _ in range(calls):
                            module(x)
                        rates[name].append(calls * batch / (time.process_time() - started))
            med = {name: float(np.median(r)) for name, r in rates.items()}
            net = f"{obs_dim}->{'x'.join(map(str, hidden))}->{outputs}"
            print(
                f"{net:>22} | {batch:>5} | {med['fp32']:>10,.0f} | {med['now']:>10,.0f} | "
                f"{med['all']:>10,.0f} | {med['now'] / med['all']:>7.2f}",
                flush=True,
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--envs", default="HalfCheetah-v5,dmc:cartpole-swingup,dmc:walker-stand")
    parser.add_argument("--runs", default="", help="trained run folders instead of fresh nets")
    parser.add_argument("--hidden", default="64,64")
    parser.add_argument("--steps", type=int, default=250, help="rollout steps of 8 envs")
    parser.add_argument("--speed", action="store_true", help="inference speed table only")
    args = parser.parse_args()
    torch.set_num_threads(1)
    if args.speed:
        speed_table()
        return
    hidden = tuple(int(h) for h in args.hidden.split(","))
    cases = []
    if args.runs:
        for run in args.runs.split(","):
            policy = load_policy(run)
            if not policy.spec.input_norm:
                raise SystemExit(f"{run}: trained without obs_norm, nothing to compare")
            fp32 = policy_module(policy.weights, policy.spec, "fp32")
            obs = rollout_obs(policy.env_id, fp32, policy.spec.num_outputs, args.steps)
            cases.append(
                (
                    f"{policy.env_id} ({run.rstrip('/').split('/')[-1]})",
                    policy.weights,
                    policy.spec,
                    obs,
                )
            )
    else:
        for env_id in args.envs.split(","):
            cases.append((f"{env_id} (fresh)", *fresh_policy(env_id, hidden, args.steps)))
    print(
        f"{'policy':>40} | {'prec':>4} | {'now mean':>8} | {'p99':>6} | "
        f"{'all-int8 mean':>13} | {'p99':>6} | {'folded mean':>11} | {'p99':>6}"
    )
    for name, weights, spec, obs in cases:
        with torch.inference_mode():
            reference = policy_module(weights, spec, "fp32")(torch.from_numpy(obs)).numpy()
        fold_w, fold_spec = folded(weights, spec)
        for precision in ("int8", "int4"):
            errors = [
                action_errors(policy_module(weights, spec, precision), reference, obs),
                action_errors(policy_module(weights, spec, precision, True), reference, obs),
                action_errors(policy_module(fold_w, fold_spec, precision, True), reference, obs),
            ]
            cells = [
                f"{e.mean():>{w}.4f} | {np.quantile(e, 0.99):>6.3f}"
                for e, w in zip(errors, (8, 13, 11), strict=True)
            ]
            print(f"{name:>40} | {precision:>4} | " + " | ".join(cells), flush=True)


if __name__ == "__main__":
    main()
