"""The actor's fast path without its numba kernels: switched off, or numba not installed,
it acts with `EpsilonGreedy` and numpy's forward or torch's module (actorq.actor.fast_act)."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from actorq.actor.columns import EpsilonGreedy
from actorq.actor.fast_act import fast_acting
from actorq.actor.fixed_policy import make_policy


def test_disabled_switch_keeps_numpy_exploration_and_forward() -> None:
    """Switched off: `EpsilonGreedy` and numpy's forward (actorq.quant.numpy_mlp), or
    torch's module with ACTORQ_NUMPY_ACT=0; both give the module's int8 outputs."""
    eps = np.full(4, 0.1)
    policy = make_policy("CartPole-v1", (64, 64), "int8")
    obs = np.random.default_rng(0).normal(size=(4, 4)).astype(np.float32)
    outputs = {}
    for numpy_act, kind in ((True, "numpy"), (False, "torch")):
        explore, forward = fast_acting(eps, 2, enabled=False, numpy_act=numpy_act)
        assert type(explore) is EpsilonGreedy and not forward.fused
        outputs[kind] = forward(policy, obs)
        assert forward.kind == kind
    np.testing.assert_array_equal(outputs["numpy"], outputs["torch"])


@pytest.mark.parametrize("missing", ["numba", "scipy"])
def test_without_numba_or_scipy_the_fast_path_falls_back(missing: str) -> None:
    """A fresh interpreter where `import numba` (or scipy, which numba's np.dot needs)
    fails: the switch on, the plain kernels."""
    probe = (
        f"import sys; sys.modules[{missing!r}] = None\n"
        "import numpy as np\n"
        "from actorq.actor.fast_act import fast_acting, fused_available\n"
        "explore, forward = fast_acting(np.full(3, 0.1), 2, enabled=True)\n"
        "print(fused_available(True), type(explore).__name__, forward.fused)\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         check=True, timeout=120)  # fmt: skip
    assert out.stdout.split() == ["False", "EpsilonGreedy", "False"]


def test_scipy_openblas_loads_with_one_thread_and_the_environment_stays_as_it_was() -> None:
    """Switched on, the fast path loads scipy's OpenBLAS with a pool of one (an actor is
    one thread), and leaves OPENBLAS_NUM_THREADS unset afterwards: what the process
    starts later does not inherit it. A value the user set is kept."""
    probe = (
        "import ctypes, glob, os, pathlib\n"
        "from actorq.actor.fast_act import fused_available\n"
        "import scipy\n"
        "assert fused_available(True)\n"
        "libs = pathlib.Path(scipy.__file__).resolve().parent.parent / 'scipy.libs'\n"
        "lib = ctypes.CDLL(glob.glob(str(libs / '*openblas*'))[0])\n"
        "names = ('scipy_openblas_get_num_threads', 'openblas_get_num_threads')\n"
        "get = next(getattr(lib, n) for n in names if hasattr(lib, n))\n"
        "print(get(), os.environ.get('OPENBLAS_NUM_THREADS', 'unset'))\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    run = [sys.executable, "-c", probe]
    out = subprocess.run(run, capture_output=True, text=True, check=True, timeout=120, env=env)
    assert out.stdout.split() == ["1", "unset"], out.stdout + out.stderr
    env["OPENBLAS_NUM_THREADS"] = "2"
    out = subprocess.run(run, capture_output=True, text=True, check=True, timeout=120, env=env)
    assert out.stdout.split() == ["2", "2"], out.stdout + out.stderr
