"""On a CUDA machine (`make gpu-check` runs these with `-m gpu`; skipped elsewhere): auto's
start-up measurement times both devices and puts a big network on the GPU, learners train
there and report it, and where the learner offers a captured path it matches the eager
one after 50 updates."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from actorq.algos import load_algorithm_config, make_algorithm
from actorq.algos.capture import apply_update_path as apply
from actorq.algos.capture import available_update_paths as available
from actorq.algos.capture import current_update_path as current
from actorq.learner.device import CudaInfo, resolve_device
from actorq.learner.device_probe import LearnerRecipe
from actorq.learner.update_path import setup_learner
from actorq.models import MLPSpec
from actorq.testing.batches import random_update_batches

pytestmark = pytest.mark.gpu


def _batches(algo: str, obs: int, out: int, batch: int, n: int = 4) -> list[dict]:
    return random_update_batches(algo, obs, out, batch, n)


def test_auto_measures_both_devices_and_puts_a_big_dqn_on_the_gpu(one_torch_thread) -> None:
    cuda = CudaInfo.probe()
    assert cuda.count >= 1 and cuda.names
    config = load_algorithm_config("dqn", {}, batch_size=256)
    big = resolve_device("auto", LearnerRecipe("dqn", MLPSpec(4, 2, (1024,) * 3), config))
    assert big.device == "cuda", big.reason  # ~50 ms per update on one CPU thread
    assert {"cpu/numpy-flat", "cpu/torch-eager"} <= set(big.timings), big.timings
    assert any(key.startswith("cuda/") for key in big.timings), big.timings
    assert big.timings[f"cuda/{big.update_path}"] == min(big.timings.values())


@pytest.mark.parametrize("algo", ["dqn", "td3", "sac"])
def test_learner_trains_on_cuda_and_says_so(algo: str) -> None:
    obs, out = (4, 2) if algo == "dqn" else (17, 6)
    learner = make_algorithm(algo, obs, out, (256, 256), device="cuda")
    info = setup_learner(learner, "cuda", "auto")
    assert info.device == "cuda" and info.dtype == "float32"
    assert info.update_path in ("cuda-graph", "compiled", "torch-eager")
    for batch in _batches(algo, obs, out, 256) * 5:
        result = learner.update(batch)
    assert np.isfinite(result.loss)


@pytest.mark.parametrize("algo", ["dqn", "td3", "sac"])
def test_captured_path_matches_eager_after_50_updates(algo: str) -> None:
    obs, out = (4, 2) if algo == "dqn" else (17, 6)
    eager = make_algorithm(algo, obs, out, (64, 64), device="cuda", seed=3)
    captured = make_algorithm(algo, obs, out, (64, 64), device="cuda", seed=3)
    if "cuda-graph" not in available(captured):
        pytest.skip(f"{algo}: no cuda-graph path offered yet ({available(captured)})")
    apply(eager, "torch-eager")
    apply(captured, "cuda-graph")
    assert (current(eager), current(captured)) == ("torch-eager", "cuda-graph")
    batches = _batches(algo, obs, out, 128)
    for i in range(50):
        eager.update(batches[i % len(batches)])
        captured.update(batches[i % len(batches)])
    torch.cuda.synchronize()
    a, b = eager.policy_weights(), captured.policy_weights()
    assert a.keys() == b.keys()
    for name in a:
        np.testing.assert_allclose(a[name], b[name], rtol=1e-4, atol=1e-5, err_msg=name)
