"""numpy's forward of MLP policies (actorq.quant.numpy_mlp): the torch module's outputs (int8
layers bit for bit, as the numba kernel's), which policies it takes, and an actor process
that acts through it without importing torch."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
import torch

from actorq.actor.fast_act import PolicyForward
from actorq.models.mlp import MLPSpec
from actorq.quant import (
    make_int8_linear,
    quantize_int8_per_channel,
)
from actorq.quant.fused_mlp import fuse_mlp
from actorq.quant.numpy_mlp import NUMPY_MAX_LAYER_WEIGHTS, _Int8Layer, numpy_mlp, numpy_runs
from actorq.quant.tensors import TensorArrays
from actorq.testing.policies import random_policy, torch_outputs
from actorq.v1 import policy_pb2


@pytest.mark.parametrize("kind", ["relu", "signed", "tiny", "zero"])
def test_int8_layer_equals_fbgemm_bit_for_bit(kind: str) -> None:
    """Activations of every shape the quantizer branches on (post-ReLU: zero point 0;
    signed: zero point > 0; tiny: the small-scale cut-off; all zero: scale 0.1), random
    layer sizes: numpy's int8 layer gives torch's `Int8Linear` outputs exactly."""
    rng = np.random.default_rng(11)
    for trial in range(40):
        k, n, rows = (int(v) for v in rng.integers(1, 130, size=3))
        w = rng.normal(size=(n, k)).astype(np.float32)
        q, scales = quantize_int8_per_channel(w)
        bias = rng.normal(size=n).astype(np.float32)
        relu = bool(trial % 2)
        layer = make_int8_linear(torch.from_numpy(q), torch.from_numpy(scales),
                                 torch.from_numpy(bias), relu=relu)  # fmt: skip
        x = rng.normal(size=(rows, k)).astype(np.float32) * np.float32(rng.uniform(0.05, 20))
        x = {"relu": np.maximum(x, 0), "tiny": x * np.float32(1e-6), "zero": 0 * x}.get(kind, x)
        ours = _Int8Layer(TensorArrays(q, scales), TensorArrays(bias), relu, layer.reduce_range)
        np.testing.assert_array_equal(ours(x), torch_outputs(layer, x), err_msg=f"trial {trial}")


@pytest.mark.parametrize(
    ("spec", "precision"),
    [
        (MLPSpec(4, 2, (64, 64)), "int8"),  # CartPole's DQN
        (MLPSpec(8, 4, (64, 128), input_norm=True), "int8"),
        (MLPSpec(3, 5, (16,)), "int8"),
        (MLPSpec(6, 3, (48, 40), input_norm=True), "int4"),
        (MLPSpec(3, 1, (64, 64), output_activation="tanh"), "int8"),  # a TD3 actor
    ],
    ids=["cartpole64", "norm128", "one-hidden", "int4-norm", "tanh"],
)
def test_forward_equals_the_module_and_the_fused_kernel(spec: MLPSpec, precision: str) -> None:
    """Whole forwards: numpy's equals numba's bit for bit where that runs (the same fp32
    first layer, the same int8 arithmetic), and torch's module to within 1e-5 of the
    output range (only the first layer's sum order may differ from torch's sgemm; a flip
    across an int8 rounding boundary moves a value ~1e-3 of it, so a wrong quantizer fails)."""
    policy = random_policy(spec, seed=spec.obs_dim, precision=precision)
    ours = numpy_mlp(policy.arrays)
    assert ours is not None
    fused = fuse_mlp(policy.arrays, max_layer_weights=None)  # None for tanh outputs
    rng = np.random.default_rng(spec.obs_dim)
    for rows in (1, 7, 32, 128):
        obs = (rng.normal(size=(rows, spec.obs_dim)) * 3).astype(np.float32)
        got, want = ours(obs), torch_outputs(policy.module, obs)
        assert got.dtype == np.float32 and got.shape == want.shape
        scale = max(float(np.ptp(want)), float(np.abs(want).max()), 1e-6)  # one row, one output
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-5 * scale)
        if fused is not None:
            np.testing.assert_array_equal(got, fused(obs))


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_float_policies_and_fallback_layers_follow_the_module(precision: str) -> None:
    """Float layers (fp32/fp16 policies; the guard's fp16 fallback inside an int8 one)."""
    spec = MLPSpec(5, 3, (64, 64), input_norm=True)
    obs = np.random.default_rng(1).normal(size=(16, 5)).astype(np.float32)
    fallback = {"layers.2.weight": policy_pb2.DTYPE_FLOAT16}
    for policy in (
        random_policy(spec, 2, precision),
        random_policy(spec, 3, fallback_layers=fallback),
    ):
        ours = numpy_mlp(policy.arrays)
        assert ours is not None
        want = torch_outputs(policy.module, obs)
        np.testing.assert_allclose(ours(obs), want, rtol=0, atol=1e-5 * float(np.ptp(want)))


def test_which_policies_numpy_takes() -> None:
    """MLPs up to NUMPY_MAX_LAYER_WEIGHTS per layer; not wider nets (torch is faster
    there), not int8 layers under qnnpack (another arithmetic), never CNN policies; an
    actor's PolicyForward then keeps torch's module, with the module's outputs."""
    small = random_policy(MLPSpec(4, 2, (64, 64)), 1)
    assert numpy_runs(small.arrays) and not numpy_runs(small.arrays, engine="qnnpack")
    assert numpy_runs(random_policy(MLPSpec(4, 2, (64, 64)), 1, "fp32").arrays, engine="qnnpack")
    wide = random_policy(MLPSpec(4, 2, (256, 256)), 1)
    assert NUMPY_MAX_LAYER_WEIGHTS < 256 * 256 and numpy_mlp(wide.arrays) is None
    assert numpy_mlp(wide.arrays, max_layer_weights=None) is not None
    forward = PolicyForward(fused=False)
    obs = np.ones((3, 4), np.float32)
    np.testing.assert_array_equal(forward(wide, obs), torch_outputs(wide.module, obs))
    assert forward.kind == "torch"
    from actorq.actor.fixed_policy import make_policy

    pixels = make_policy("minatar:breakout", (), "int8")
    assert not numpy_runs(pixels.arrays)


def test_nan_observations_do_not_raise() -> None:
    """A NaN in an observation (a broken env) gives outputs, not an exception in the
    quantizer's parameters (fbgemm's min/max skip NaN)."""
    ours = numpy_mlp(random_policy(MLPSpec(4, 2, (64, 64)), 1).arrays)
    assert ours is not None
    obs = np.ones((4, 4), np.float32)
    obs[1, 2] = np.nan
    assert ours(obs).shape == (4, 2)


def test_the_actor_service_decodes_and_acts_without_torch() -> None:
    """A fresh interpreter: the actor service's modules, a blob decoded and numpy's forward
    built and run, and the follower's and the loop's choice of path: torch never loaded;
    the quantized engine assumed without it is the one torch then reports."""
    probe = (
        "import sys, numpy as np\n"
        "import services.actor.main\n"
        "from actorq.actor.fast_act import PolicyForward\n"
        "from actorq.actor.policy_follower import LoadedPolicy\n"
        "from actorq.models import MLPSpec\n"
        "from actorq.quant import decode_blob, encode_policy, parse_precision\n"
        "from actorq.quant.fbgemm import quantized_engine\n"
        "from actorq.quant.numpy_mlp import numpy_mlp\n"
        "spec = MLPSpec(4, 2, (64, 64))\n"
        "w = {k: np.full(s, 0.1, np.float32) for k, s in spec.weight_shapes().items()}\n"
        "arrays = decode_blob(encode_policy(w, spec, parse_precision('int8'), 1, 0).envelope)\n"
        "policy = LoadedPolicy(1, 'int8', None, 0, arrays, 'full', numpy_mlp(arrays))\n"
        "forward = PolicyForward(fused=False)\n"
        "out = forward(policy, np.ones((8, 4), np.float32))\n"
        "engine = quantized_engine()\n"
        "print(forward.kind, out.shape, 'torch' in sys.modules)\n"
        "import torch\n"
        "print(engine == torch.backends.quantized.engine)\n"
    )
    run = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         timeout=120, check=False)  # fmt: skip
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.split("\n")[:2] == ["numpy (8, 2) False", "True"], run.stdout
