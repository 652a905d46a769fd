"""The fast path's numba kernels (actorq.quant.fused_mlp, actorq.actor.fast_act) against
what they replace: the torch/fbgemm module, `EpsilonGreedy` and `StepRecorder`."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numba  # noqa: F401  (a dev dependency: these tests run its kernels)
import numpy as np
import pytest
import torch

from actorq.actor.columns import EpsilonGreedy, StepColumns, StepRecorder
from actorq.actor.episodes import EpisodeTracker
from actorq.actor.fast_act import (
    FusedEpsilonGreedy,
    FusedRecorder,
    PolicyForward,
    fast_acting,
)
from actorq.actor.policy_follower import LoadedPolicy
from actorq.actor.stepper import VectorStep
from actorq.models.mlp import MLPSpec
from actorq.quant import (
    decode_blob,
    encode_policy,
    make_int8_linear,
    parse_precision,
    quantize_int8_per_channel,
)
from actorq.quant.fused_mlp import (
    MIN_MAX_BY_COLUMN,
    fuse_mlp,
    int8_linear,
    min_max,
    min_max_by_column,
    mlp_forward,
)
from actorq.testing.policies import random_policy, random_weights, torch_outputs
from actorq.v1 import policy_pb2


def _layer_input(rng: np.random.Generator, rows: int, k: int, kind: str) -> np.ndarray:
    """Activations of every shape the quantizer branches on: post-ReLU (zero point 0),
    signed (zero point > 0), tiny (the small-scale cut-off), all zero (scale 0.1)."""
    x = rng.normal(size=(rows, k)).astype(np.float32) * np.float32(rng.uniform(0.05, 20))
    if kind == "relu":
        return np.maximum(x, 0)
    if kind == "tiny":
        return x * np.float32(1e-6)
    if kind == "zero":
        return np.zeros_like(x)
    return x  # "signed"


@pytest.mark.parametrize("kind", ["relu", "signed", "tiny", "zero"])
def test_int8_layer_equals_fbgemm_bit_for_bit(kind: str) -> None:
    """Same float input: the same float32 outputs exactly (scale, zero point, rounding,
    exact integer sums, requantization all as fbgemm's `quantized::linear_dynamic`)."""
    rng = np.random.default_rng(7)
    for trial in range(40):
        k, n, rows = (int(v) for v in rng.integers(1, 130, size=3))
        w = rng.normal(size=(n, k)).astype(np.float32)
        q, scales = quantize_int8_per_channel(w)
        bias = rng.normal(size=n).astype(np.float32)
        relu = bool(trial % 2)
        layer = make_int8_linear(torch.from_numpy(q), torch.from_numpy(scales),
                                 torch.from_numpy(bias), relu=relu)  # fmt: skip
        x = _layer_input(rng, rows, k, kind)
        codes_t = np.ascontiguousarray(q.T, np.float32)
        got = int8_linear(x, codes_t, scales.astype(np.float32), bias, relu, layer.reduce_range)
        np.testing.assert_array_equal(got, torch_outputs(layer, x), err_msg=f"trial {trial}")


@pytest.mark.parametrize("kernel", [min_max, min_max_by_column], ids=["pairs", "by-column"])
def test_min_max_is_numpys_ignoring_nan(kernel) -> None:
    """Both of the quantizer's (min, max) passes (four running pairs over the flat array;
    per-column extremes) equal numpy's nanmin/nanmax for any size (remainders of 4 too),
    layout, sign and NaN."""
    rng = np.random.default_rng(3)
    for trial in range(60):
        rows, cols = (int(v) for v in rng.integers(1, 12, size=2))
        x = (rng.normal(size=(rows, cols)) * 10 ** rng.uniform(-3, 3)).astype(np.float32)
        if trial % 3 == 0:
            x.ravel()[rng.integers(0, x.size, size=max(1, x.size // 3))] = np.nan
        if trial % 4 == 1:
            x = x.T  # not C order
        if np.isnan(x).all():
            x.flat[0] = -1.5
        got = kernel(x)
        assert got == (np.nanmin(x), np.nanmax(x)), f"trial {trial}: {got}"


@pytest.mark.parametrize(
    ("spec", "precision"),
    [
        (MLPSpec(4, 2, (64, 64)), "int8"),  # CartPole's DQN
        (MLPSpec(8, 4, (256, 256), input_norm=True), "int8"),
        (MLPSpec(17, 6, (512, 512, 512)), "int8"),
        (MLPSpec(3, 5, (16,)), "int8"),
        (MLPSpec(6, 3, (48, 40), input_norm=True), "int4"),
    ],
    ids=["cartpole64", "norm256", "deep512", "one-hidden", "int4-norm"],
)
def test_forward_equals_the_policy_module(spec: MLPSpec, precision: str) -> None:
    """Whole forwards, random policies and inputs. The int8 layers are exact given their
    input; only the fp32 first layer's sum order may differ from torch's sgemm (an ulp),
    which can move an activation across an int8 rounding boundary. So: every row equal
    to within 1e-5 of the Q range (a boundary flip moves a Q value by about one activation
    step times one weight, ~1e-3 of it, so this bound still fails a wrong quantizer), and
    the same argmax on every row whose top two Q values are further apart than that."""
    policy = random_policy(spec, seed=spec.obs_dim, precision=precision)
    module = policy.module
    fused = fuse_mlp(policy.arrays, max_layer_weights=None)  # the kernel at every size
    assert fused is not None
    rng = np.random.default_rng(spec.obs_dim)
    for rows in (1, 7, 32, 128):
        obs = (rng.normal(size=(rows, spec.obs_dim)) * 3).astype(np.float32)
        want, got = torch_outputs(module, obs), fused(obs)
        assert got.dtype == np.float32 and got.shape == want.shape
        tol = 1e-5 * float(np.ptp(want) + 1e-6)
        np.testing.assert_allclose(got, want, rtol=0, atol=tol)
        top2 = np.sort(want, axis=1)[:, -2:] if spec.num_outputs > 1 else None
        clear = np.ones(rows, bool) if top2 is None else (top2[:, 1] - top2[:, 0]) > 2 * tol
        np.testing.assert_array_equal(got.argmax(1)[clear], want.argmax(1)[clear])


def test_forward_is_the_same_whichever_min_max_the_cpu_gets() -> None:
    """The layout's min/max flag (MIN_MAX_BY_COLUMN, chosen by the host CPU) changes
    speed, never outputs: both passes are exact."""
    fused = fuse_mlp(random_policy(MLPSpec(4, 2, (64, 64)), seed=2).arrays)
    assert fused is not None
    other = np.array(fused.layout)
    other[3] = 1 - other[3]
    obs = (np.random.default_rng(2).normal(size=(128, 4)) * 3).astype(np.float32)
    np.testing.assert_array_equal(mlp_forward(obs, fused.params, other), fused(obs))


def test_only_small_nets_are_fused_by_default() -> None:
    """Where the fused forward was measured slower than torch's (128 x 128 at batch 128,
    256 wide and up), the actor keeps the torch module; CartPole's 64x64 is fused."""
    assert fuse_mlp(random_policy(MLPSpec(4, 2, (64, 64)), seed=1).arrays) is not None
    big = random_policy(MLPSpec(4, 2, (256, 256)), seed=1)
    assert fuse_mlp(big.arrays) is None
    assert fuse_mlp(big.arrays, max_layer_weights=None) is not None
    forward = PolicyForward(fused=True)
    obs = np.ones((3, 4), np.float32)
    out = forward(big, obs)
    assert forward.kind == "torch"
    np.testing.assert_array_equal(out, torch_outputs(big.module, obs))


def test_int8_layers_of_another_engine_are_not_fused() -> None:
    """The kernel reproduces fbgemm's arithmetic (the x86 engines); qnnpack's differs."""
    arrays = random_policy(MLPSpec(4, 2, (64, 64)), seed=1).arrays
    assert fuse_mlp(arrays) is not None
    assert fuse_mlp(arrays, engine="x86") is not None
    assert fuse_mlp(arrays, engine="qnnpack") is None


def test_the_fused_forward_holds_the_decoded_codes() -> None:
    """Built from the blob's arrays, not by unpacking fbgemm's packed weights: the numbers
    it carries are those fbgemm's `Int8Linear`s hold (codes, float32 scales, biases)."""
    policy = random_policy(MLPSpec(5, 3, (24, 16)), seed=4)
    fused = fuse_mlp(policy.arrays)
    assert fused is not None
    int8_layers = [x for x in policy.module.layers if hasattr(x, "unpack")]
    assert len(int8_layers) == 2
    packed = []
    for layer in int8_layers:
        codes, scales, bias = layer.unpack()
        packed.append((codes.t().float().numpy().ravel(), scales.float().numpy(), bias.numpy()))
    tail = np.concatenate([p[0] for p in packed] + [p[1] for p in packed] + [p[2] for p in packed])
    assert fused.params[-tail.size :].tobytes() == tail.astype(np.float32).tobytes()


def test_policies_it_cannot_express_keep_the_torch_module() -> None:
    """fp32 and fp16 policies (no int8 layers), an int8 policy with a float fallback layer
    (the quantizer's guard) and tanh outputs are not fused."""
    spec = MLPSpec(4, 2, (32, 32))
    for precision in ("fp32", "fp16"):
        assert fuse_mlp(random_policy(spec, 1, precision).arrays) is None
    fallback = {"layers.2.weight": policy_pb2.DTYPE_FLOAT16}
    int8 = parse_precision("int8")
    encoded = encode_policy(random_weights(spec, 1), spec, int8, 1, 0, fallback_layers=fallback)
    assert fuse_mlp(decode_blob(encoded.envelope)) is None
    tanh = MLPSpec(4, 2, (32, 32), output_activation="tanh")
    assert fuse_mlp(random_policy(tanh, 1).arrays) is None
    policy = random_policy(spec, 1, "fp32")
    obs = np.ones((3, 4), np.float32)
    forward = PolicyForward(fused=True, numpy_act=False)
    np.testing.assert_array_equal(forward(policy, obs), torch_outputs(policy.module, obs))
    assert forward.kind == "torch"
    forward = PolicyForward(fused=True)  # numpy's forward, where it runs
    np.testing.assert_allclose(forward(policy, obs), torch_outputs(policy.module, obs), rtol=1e-5)
    assert forward.kind == "numpy"
    no_arrays = LoadedPolicy(1, "int8", random_policy(spec, 1).module, 0)  # nothing to fuse from
    forward = PolicyForward(fused=True)
    assert forward(no_arrays, obs).shape == (3, 2) and forward.kind == "torch"


def test_fused_epsilon_greedy_draws_like_the_numpy_one() -> None:
    """The same seed: the same taken actions, greedy actions and log-probs, including
    epsilon 0 and 1, ties (first maximum) and NaN rows (numpy's argmax: the first NaN)."""
    eps = np.array([0.0, 0.01, 0.3, 0.5, 1.0, 1.0, 0.2])
    fused, plain = FusedEpsilonGreedy(eps, 3), EpsilonGreedy(eps, 3)
    fused_rng, plain_rng, q_rng = (np.random.default_rng(s) for s in (11, 11, 0))
    for step in range(300):
        q = q_rng.normal(size=(7, 3)).astype(np.float32)
        if step % 3 == 0:
            q[step % 7] = 1.0  # a tie across the row
        if step % 5 == 0:
            q[(step + 1) % 7, 1 + step % 2] = np.nan
        got = [a.copy() for a in fused(q, fused_rng)]
        want = plain(q, plain_rng)
        for name, g, w in zip(("taken", "greedy", "logp"), got, want, strict=True):
            np.testing.assert_array_equal(g, w, err_msg=f"{name} at step {step}")
            assert g.dtype == np.asarray(w).dtype, name


def test_fused_epsilon_greedy_draws_from_the_generator_it_is_given() -> None:
    """Uniforms come in blocks of DRAW_STEPS steps; a call with another generator starts
    a block from that one, so its actions are that generator's, from its first draw."""
    eps = np.full(5, 0.5)
    fused, plain = FusedEpsilonGreedy(eps, 4), EpsilonGreedy(eps, 4)
    q = np.random.default_rng(1).normal(size=(5, 4)).astype(np.float32)
    first = np.random.default_rng(21)
    for _ in range(3):
        fused(q, first)
    second, again = np.random.default_rng(22), np.random.default_rng(22)
    for step in range(FusedEpsilonGreedy.DRAW_STEPS + 2):  # across a refill too
        got, want = fused(q, second)[0].copy(), plain(q, again)[0]
        np.testing.assert_array_equal(got, want, err_msg=f"step {step}")


def test_switched_on_the_actor_fast_path_runs_the_kernels() -> None:
    explore, forward = fast_acting(np.full(4, 0.1), 2, enabled=True)
    assert type(explore) is FusedEpsilonGreedy and forward.fused
    policy = random_policy(MLPSpec(4, 2, (64, 64)), seed=1)
    obs = np.ones((4, 4), np.float32)
    out = forward(policy, obs)
    assert forward.kind == "fused"
    np.testing.assert_allclose(out, torch_outputs(policy.module, obs), rtol=0, atol=1e-6)


def _random_step(rng: np.random.Generator, m: int, reward_dtype: type) -> VectorStep:
    obs = rng.normal(size=(m, 3)).astype(np.float32)
    terminated = rng.random(m) < 0.2
    valid = rng.random(m) < 0.8
    ended = (terminated | (rng.random(m) < 0.1)) & valid
    rewards = rng.normal(size=m).astype(reward_dtype)
    return VectorStep(obs, obs.T.copy().T, rewards, terminated, ended, valid)


@pytest.mark.parametrize("reward_dtype", [np.float32, np.float64])
def test_fused_recorder_records_what_the_numpy_one_records(reward_dtype: type) -> None:
    """Columns (past their preallocated capacity), valid counts, running returns and the
    finished episodes (returns, lengths, env steps), on steps with reset rows and endings;
    next_obs arrives Fortran-ordered, and rewards as float32 (CartPole's vector env) or
    float64 (SyncVectorEnv)."""
    m, rng = 5, np.random.default_rng(3)
    recorders = []
    for cls in (StepRecorder, FusedRecorder):
        pending, episodes = StepColumns(m, (3,), np.float32, steps=2), EpisodeTracker(m, "a", "t")
        recorders.append(cls(pending, episodes))
    env_steps = [0, 0]
    for t in range(40):
        step = _random_step(rng, m, reward_dtype)
        taken, greedy = rng.integers(0, 3, size=(2, m))
        logp = rng.normal(size=m).astype(np.float32)
        for k, record in enumerate(recorders):
            env_steps[k] += record(step.obs, taken, greedy, logp, step, t, env_steps[k])
    (plain, fused) = recorders
    assert env_steps[0] == env_steps[1] > 0 and plain.pending.count == fused.pending.count
    a, b = plain.pending.batch("a", 1, "int8"), fused.pending.batch("a", 1, "int8")
    for column in ("obs", "action", "reward", "next_obs", "done", "behaviour", "behaviour_logp"):
        np.testing.assert_array_equal(getattr(a, column), getattr(b, column), err_msg=column)
    np.testing.assert_array_equal(plain.episodes.returns, fused.episodes.returns)
    np.testing.assert_array_equal(plain.episodes.lengths, fused.episodes.lengths)
    pending = [(e.episode_return, e.length, e.policy_version, e.env_steps)
               for e in plain.episodes.pending]  # fmt: skip
    assert len(pending) > 10
    assert pending == [(e.episode_return, e.length, e.policy_version, e.env_steps)
                       for e in fused.episodes.pending]  # fmt: skip


def test_the_min_max_bench_times_both_forms_and_says_which_this_cpu_gets() -> None:
    """`bench/bench_fused_forward.py --min-max` (BENCHMARKS.md 23l) runs and prints a row
    of four positive timings per batch, and the host's choice."""
    bench = Path(__file__).resolve().parents[2] / "bench" / "bench_fused_forward.py"
    args = ["--min-max", "--widths", "64", "--batches", "3,8"]
    out = subprocess.run(
        [sys.executable, str(bench), *args], capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr
    assert f"MIN_MAX_BY_COLUMN on this CPU: {MIN_MAX_BY_COLUMN}" in out.stdout
    rows = [line for line in out.stdout.splitlines() if line.startswith("| 64 |")]
    assert [row.split("|")[2].strip() for row in rows] == ["3", "8"]
    for row in rows:
        timings = [float(cell) for cell in row.split("|")[3:7]]
        assert all(t > 0 for t in timings), row
