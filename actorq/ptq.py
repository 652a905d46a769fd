"""Post-training quantization study: one trained policy evaluated at several bit widths.

`actorq ptq CHECKPOINT --bits 32,16,8,6,4,2 --episodes N` rebuilds the learner from a
checkpoint (any algorithm), takes its fp32 policy weights and evaluates the policy at each
width on the same N seeded episodes:

- 32, 16, 8, 4: the real broadcast path: blob at fp32 / fp16 / int8 / int4 -> verified
  decode -> the actor's inference module (int8 and int4 run int8 kernels with dynamic
  activation quantization, exactly what actors run);
- other widths (2, 3, 5, 6, 7): simulated: weights through the same symmetric
  per-output-channel quantizer (actorq.quant.lowbit), dequantized, run in fp32.

It writes ptq.csv, ptq.md (mean and std of the return, relative drop vs fp32 with a 95%
confidence interval) and ptq.png next to the checkpoint (or into --out). Every width plays
the same seeded episodes, so the drop is a paired difference: its interval comes from the
per-episode differences, which is much tighter than comparing two independent means.
"""

from __future__ import annotations

import csv
import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from actorq.actor.stepper import VectorStepper
from actorq.algos.factory import config_from_dict, make_algorithm, policy_spec
from actorq.envs import make_vector_env
from actorq.extras import require
from actorq.learner.checkpoint import CHECKPOINT_FILE, META_FILE
from actorq.models.mlp import MLPSpec
from actorq.quant import quantized_policy_from_weights
from actorq.quant.lowbit import fake_quantize_array

BLOB_PRECISIONS = {32: "fp32", 16: "fp16", 8: "int8", 4: "int4"}
VALID_BITS = (2, 3, 4, 5, 6, 7, 8, 16, 32)


class PTQError(ValueError):
    """A checkpoint or option the study cannot use; the message names it."""


@dataclass(frozen=True)
class LoadedPolicy:
    algo: str
    env_id: str
    spec: MLPSpec
    weights: dict[str, np.ndarray]
    checkpoint: Path


@dataclass(frozen=True)
class PTQRow:
    bits: int
    path: str  # "blob fp32", "blob int8", "simulated", ...
    mean: float
    std: float
    relative_drop: float  # (fp32 mean - mean) / |fp32 mean|; positive = worse
    drop_ci95: float  # half-width of the 95% interval of relative_drop (paired episodes)


def parse_bits(text: str) -> tuple[int, ...]:
    try:
        bits = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise PTQError(
            f"--bits: expected comma-separated widths like 32,8,4, got {text!r}"
        ) from None
    bad = [b for b in bits if b not in VALID_BITS]
    if not bits or bad:
        raise PTQError(f"--bits: widths must be among {VALID_BITS}, got {text!r}")
    return bits


def _checkpoint_file(path: Path) -> Path:
    for candidate in (path, path / CHECKPOINT_FILE, path / "checkpoints" / CHECKPOINT_FILE):
        if candidate.is_file():
            return candidate
    raise PTQError(
        f"no checkpoint at {str(path)!r}: expected a {CHECKPOINT_FILE}, its folder, or a run "
        "folder with checkpoints/"
    )


def load_policy(path: str | Path, env_id: str | None = None) -> LoadedPolicy:
    """fp32 policy weights of a learner checkpoint (DQN, DDPG, TD3, SAC or D4PG)."""
    file = _checkpoint_file(Path(path))
    meta_path = file.parent / META_FILE
    meta: dict[str, Any] = json.loads(meta_path.read_text()) if meta_path.exists() else {}
    algo = meta.get("algo", "dqn")  # checkpoints from before ACTORQ_ALGO were all DQN
    env_id = env_id or meta.get("env_id")
    if not env_id:
        raise PTQError(f"{meta_path} does not name the env: pass --env")
    hidden = tuple(meta.get("hidden", ()))
    if not hidden:
        raise PTQError(f"{meta_path} does not give the hidden widths of the network")
    state = torch.load(file, map_location="cpu", weights_only=True)
    config = _algo_config(algo, meta, state)
    spec = policy_spec(env_id, algo, hidden, config)
    learner = make_algorithm(algo, spec.obs_dim, spec.num_outputs, hidden, config, spec=spec)
    try:
        learner.load_state_dict(state["dqn"])
    except (KeyError, RuntimeError) as exc:
        raise PTQError(f"{file} does not hold a {algo} learner for {env_id}: {exc}") from exc
    return LoadedPolicy(algo, env_id, learner.policy_spec, learner.policy_weights(), file)


def _algo_config(algo: str, meta: dict[str, Any], state: dict[str, Any]) -> Any:
    """The config the learner was trained with: recorded in the checkpoint's meta; older
    checkpoints only tell obs_norm, by holding normalisation statistics."""
    try:
        config = config_from_dict(algo, meta.get("algo_config", {}))
    except (TypeError, ValueError) as exc:
        raise PTQError(f"checkpoint records an unusable {algo} config: {exc}") from exc
    if "algo_config" not in meta and "obs_rms" in state.get("dqn", {}):
        config = dataclasses.replace(config, obs_norm=True)
    return config


def policy_at_bits(policy: LoadedPolicy, bits: int) -> tuple[torch.nn.Module, str]:
    """Inference module of the policy at `bits`, and how it was built."""
    if bits in BLOB_PRECISIONS:
        name = BLOB_PRECISIONS[bits]
        return quantized_policy_from_weights(policy.weights, policy.spec, name), f"blob {name}"
    simulated = {  # conv weights [out, in, k, k]: per output channel, like the blob
        k: fake_quantize_array(v.reshape(v.shape[0], -1), bits).reshape(v.shape)
        if v.ndim >= 2
        else v
        for k, v in policy.weights.items()
    }
    return quantized_policy_from_weights(simulated, policy.spec, "fp32"), "simulated"


def evaluate(
    module: torch.nn.Module, env_id: str, episodes: int, seed: int, continuous: bool
) -> np.ndarray:
    """Returns of `episodes` greedy episodes, run in seeded vector envs of up to 32."""
    chunks = [min(32, episodes - start) for start in range(0, episodes, 32)]
    return np.concatenate(
        [
            _evaluate_chunk(module, env_id, n, seed + 1000 * i, continuous)
            for i, n in enumerate(chunks)
        ]
    )


def _evaluate_chunk(
    module: torch.nn.Module, env_id: str, episodes: int, seed: int, continuous: bool
) -> np.ndarray:
    env = make_vector_env(env_id, episodes, seed)
    try:
        stepper = VectorStepper(env)
        obs = stepper.reset(seed=seed)
        returns = np.zeros(episodes)
        active = np.ones(episodes, bool)
        while active.any():
            with torch.inference_mode():
                out = module(torch.from_numpy(obs)).numpy()
            step = stepper.step(out if continuous else out.argmax(axis=1))
            returns += np.where(active & step.valid, step.rewards, 0.0)
            active &= ~step.ended
            obs = step.obs
        return returns
    finally:
        env.close()


def paired_drop(reference: np.ndarray, returns: np.ndarray) -> tuple[float, float]:
    """Relative drop of `returns` vs `reference` (same episodes, same order) and the
    half-width of its 95% confidence interval, both as fractions of |reference mean|.

    Normal approximation on the per-episode differences; 0 half-width with one episode.
    """
    if reference.shape != returns.shape:
        raise ValueError(f"paired returns differ in shape: {reference.shape} vs {returns.shape}")
    scale = abs(float(reference.mean())) or 1.0
    diff = reference - returns
    half = 1.96 * float(diff.std(ddof=1)) / np.sqrt(diff.size) if diff.size > 1 else 0.0
    return float(diff.mean()) / scale, float(half) / scale


def run_study(
    policy: LoadedPolicy, bits: tuple[int, ...], episodes: int, seed: int = 12345
) -> list[PTQRow]:
    continuous = policy.spec.output_activation == "tanh"
    results: dict[int, tuple[str, np.ndarray]] = {}
    for b in sorted(set(bits) | {32}, reverse=True):
        module, path = policy_at_bits(policy, b)
        results[b] = (path, evaluate(module, policy.env_id, episodes, seed, continuous))
    reference = results[32][1]
    return [
        PTQRow(b, path, float(r.mean()), float(r.std()), *paired_drop(reference, r))
        for b, (path, r) in sorted(results.items(), reverse=True)
        if b in bits or b == 32
    ]


def markdown_table(policy: LoadedPolicy, rows: list[PTQRow], episodes: int) -> str:
    lines = [
        f"PTQ of {policy.algo.upper()} on {policy.env_id} ({policy.checkpoint}), "
        f"{episodes} episodes per width, same seeds; drop vs fp32 with its paired 95% "
        "interval (positive = worse)",
        "",
        "| bits | path | mean return | std | drop vs fp32 |",
        "|---:|---|---:|---:|---:|",
    ]
    lines += [
        f"| {r.bits} | {r.path} | {r.mean:.1f} | {r.std:.1f} | "
        f"{100 * r.relative_drop:+.2f}% ± {100 * r.drop_ci95:.2f}% |"
        for r in rows
    ]
    return "\n".join(lines) + "\n"


def write_outputs(
    out_dir: Path, policy: LoadedPolicy, rows: list[PTQRow], episodes: int
) -> dict[str, Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {"csv": out_dir / "ptq.csv", "md": out_dir / "ptq.md", "png": out_dir / "ptq.png"}
    with paths["csv"].open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["bits", "path", "mean_return", "std_return", "relative_drop", "drop_ci95"])
        for r in rows:
            writer.writerow(
                [
                    *(r.bits, r.path, f"{r.mean:.4f}", f"{r.std:.4f}"),
                    *(f"{r.relative_drop:.6f}", f"{r.drop_ci95:.6f}"),
                ]
            )
    paths["md"].write_text(markdown_table(policy, rows, episodes))
    _plot(paths["png"], policy, rows)
    return paths


def _plot(path: Path, policy: LoadedPolicy, rows: list[PTQRow]) -> None:
    matplotlib = require("matplotlib", "plots", "plots")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.5))
    labels = [str(r.bits) for r in rows]
    ax.bar(labels, [r.mean for r in rows], yerr=[r.std for r in rows], capsize=4, color="tab:blue")
    ax.set_xlabel("weight bits")
    ax.set_ylabel("mean return")
    ax.set_title(f"PTQ: {policy.algo.upper()} on {policy.env_id}")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(checkpoint: str, env_id: str | None, bits_text: str, episodes: int, out: str) -> int:
    if episodes < 1:
        raise PTQError(f"--episodes: expected >= 1, got {episodes}")
    bits = parse_bits(bits_text)
    torch.set_num_threads(1)
    policy = load_policy(checkpoint, env_id)
    rows = run_study(policy, bits, episodes)
    out_dir = Path(out) if out else policy.checkpoint.parent.parent / "ptq"
    paths = write_outputs(out_dir, policy, rows, episodes)
    print(markdown_table(policy, rows, episodes))
    print(f"wrote {paths['csv']}, {paths['md']}, {paths['png']}")
    return 0
