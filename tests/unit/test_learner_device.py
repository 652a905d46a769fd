"""The learner's device choice (actorq.learner.device, measured by
actorq.learner.device_probe) and update-path choice (actorq.learner.update_path): timings
in, choice out, and a real measurement on this machine's CPU."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import numpy as np
import pytest
import torch

from actorq.algos import DQNConfig, load_algorithm_config, make_algorithm
from actorq.config import ConfigError, LearnerSettings, RunSettings
from actorq.learner.device import (
    CudaInfo,
    DeviceChoice,
    check_available,
    choose_measured,
    format_timings,
    resolve_device,
    update_mflop,
)
from actorq.learner.device_probe import SECONDS, LearnerRecipe, _Trial, measure, wanted_paths
from actorq.learner.update_path import (
    LearnerInfo,
    choose_update_path,
    learner_dtype,
    set_update_path,
    setup_learner,
)
from actorq.models import MLPSpec
from actorq.models.cnn import cnn_spec_for
from actorq.torch_threads import inherit_torch_threads

NO_GPU = CudaInfo(0, (), "2.13.0+cpu")


@pytest.mark.parametrize("device", ["auto", "cpu", "cuda", "cuda:0", "cuda:12"])
def test_device_syntax_accepted(device: str) -> None:
    assert RunSettings(learner_device=device).learner_device == device
    assert LearnerSettings(device=device).device == device


@pytest.mark.parametrize("device", ["gpu", "CUDA", "cuda:", "cuda:x", "cuda:0,1", "", "mps"])
def test_bad_device_names_value_and_choices(device: str) -> None:
    with pytest.raises(ConfigError) as run_error:
        RunSettings(learner_device=device)
    assert repr(device) in str(run_error.value) and "auto, cpu, cuda, cuda:N" in str(
        run_error.value
    )
    with pytest.raises(ConfigError, match="ACTORQ_DEVICE"):
        LearnerSettings(device=device)


def test_bad_update_path_names_choices() -> None:
    with pytest.raises(
        ConfigError, match=r"numpy-flat, torch-eager, cuda-graph, compiled, got 'cuda_graph'"
    ):
        LearnerSettings(update_path="cuda_graph")


def test_dqn_mflop_counts_three_forwards_and_one_backward() -> None:
    weights = 4 * 64 + 64 * 64 + 64 * 2
    assert update_mflop("dqn", 4, 2, (64, 64), 128) == pytest.approx(10 * weights * 128 / 1e6)
    # twice the batch, twice the work; the 1024^3 network ~940x CartPole's
    assert update_mflop("dqn", 4, 2, (64, 64), 256) == pytest.approx(
        2 * update_mflop("dqn", 4, 2, (64, 64), 128)
    )
    big = update_mflop("dqn", 4, 2, (1024, 1024, 1024), 256)
    assert 900 < big / update_mflop("dqn", 4, 2, (64, 64), 128) < 1000


def test_actor_critic_mflop_orders() -> None:
    td3 = update_mflop("td3", 17, 6, (256, 256), 256)
    ddpg = update_mflop("ddpg", 17, 6, (256, 256), 256)
    sac = update_mflop("sac", 17, 6, (256, 256), 256)
    d4pg = update_mflop("d4pg", 17, 6, (256, 256), 256)
    assert ddpg < td3 < sac  # one critic < two critics < two critics and 2x actor passes
    assert d4pg > ddpg  # 51 atoms out of the critic
    assert update_mflop("ppo", 4, 2, (64, 64), 256) > 0


def _recipe(algo: str = "dqn", hidden: tuple[int, ...] = (64, 64), **overrides) -> LearnerRecipe:
    config = load_algorithm_config(algo, {}, **overrides)
    spec = MLPSpec(4, 2, hidden) if algo in ("dqn", "ppo", "appo", "a2c") else MLPSpec(3, 1, hidden)
    return LearnerRecipe(algo, spec, config, seed=0)


# --- the choice from timings -------------------------------------------------------------
def test_choice_takes_the_fastest_and_names_every_timing() -> None:
    timings = {"cpu/numpy-flat": 0.21, "cpu/torch-eager": 0.93, "cuda/cuda-graph": 0.35}
    choice = choose_measured(timings)
    assert (choice.device, choice.update_path) == ("cpu", "numpy-flat")
    assert choice.timings == timings
    assert choice.reason == (
        "auto: fastest of cpu/numpy-flat 0.21 ms, cuda/cuda-graph 0.35 ms, "
        "cpu/torch-eager 0.93 ms per update"
    )
    gpu = choose_measured({"cpu/torch-eager": 53.6, "cuda:1/cuda-graph": 0.9}, "cuda:1")
    assert (gpu.device, gpu.update_path) == ("cuda:1", "cuda-graph")
    assert gpu.reason.startswith("asked for: fastest of cuda:1/cuda-graph 0.9 ms")
    with pytest.raises(ValueError, match="at least one timing"):
        choose_measured({})


def test_timings_are_formatted_fastest_first() -> None:
    assert format_timings({"a/x": 1.2345, "b/y": 0.5}) == "b/y 0.5 ms, a/x 1.23 ms"
    assert format_timings({}) == ""


def test_auto_measures_compiled_only_when_named() -> None:
    offered = ("numpy-flat", "torch-eager", "compiled")
    assert wanted_paths(offered, "auto") == ["numpy-flat", "torch-eager"]
    assert wanted_paths(offered, "compiled") == ["compiled"]
    assert wanted_paths(("torch-eager",), "numpy-flat") == []


# --- a real measurement on this CPU ------------------------------------------------------
def test_measurement_times_every_cpu_path_dqn_offers_within_its_budget(one_torch_thread) -> None:
    started = time.perf_counter()
    measured = measure(_recipe(batch_size=128), ["cpu"])
    elapsed = time.perf_counter() - started
    assert set(measured.timings) == {"cpu/numpy-flat", "cpu/torch-eager"}, measured
    assert all(ms > 0 for ms in measured.timings.values()) and not measured.failed
    assert elapsed < SECONDS + 1.0, elapsed  # the budget, plus building the learners
    choice = resolve_device("auto", _recipe(batch_size=128), cuda=NO_GPU)
    assert choice.device == "cpu" and choice.update_path in ("numpy-flat", "torch-eager")
    assert choice.reason.startswith("auto: fastest of ") and "cpu/torch-eager" in choice.reason


def test_measurement_leaves_threads_and_rngs_as_they_were() -> None:
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        torch.manual_seed(5)
        np.random.seed(5)
        expected = (torch.rand(3), np.random.rand(3))
        torch.manual_seed(5)
        np.random.seed(5)
        measure(_recipe(batch_size=32), ["cpu"], torch_threads=1)
        assert torch.get_num_threads() == 2
        assert torch.equal(torch.rand(3), expected[0])
        assert np.array_equal(np.random.rand(3), expected[1])
    finally:
        torch.set_num_threads(threads)


def test_explicit_path_is_measured_alone(one_torch_thread) -> None:
    one = resolve_device("auto", _recipe(batch_size=32), "torch-eager", cuda=NO_GPU)
    assert (one.device, one.update_path, dict(one.timings)) == ("cpu", "torch-eager", {})
    assert "cpu/torch-eager is the only candidate (no CUDA device here)" in one.reason
    none = resolve_device("auto", _recipe("td3", (32, 32)), "numpy-flat", cuda=NO_GPU)
    assert none.device == "cpu" and "no candidate offers update path 'numpy-flat'" in none.reason


def test_explicit_device_is_kept_and_its_paths_measured(one_torch_thread) -> None:
    choice = resolve_device("cpu", _recipe(batch_size=32), cuda=NO_GPU)
    assert choice.device == "cpu" and choice.reason.startswith("asked for: fastest of ")
    assert set(choice.timings) == {"cpu/numpy-flat", "cpu/torch-eager"}


def test_parallel_learners_stay_on_cpu_unmeasured() -> None:
    gpus = CudaInfo(2, ("a", "b"))
    parallel = resolve_device("auto", _recipe(), world_size=2, cuda=gpus)
    assert parallel.device == "cpu" and "ACTORQ_DEVICE=cuda:N" in parallel.reason
    assert not parallel.timings
    asked = resolve_device("cuda:1", _recipe(), world_size=2, cuda=gpus)
    assert asked.device == "cuda:1" and not asked.timings


@pytest.mark.parametrize(
    ("algo", "spec"),
    [("dqn", cnn_spec_for((4, 10, 10), 3)), ("ppo", MLPSpec(4, 2, (16, 16))),
     ("a2c", cnn_spec_for((4, 10, 10), 3)), ("td3", MLPSpec(3, 1, (16, 16)))],
    ids=["dqn-pixels", "ppo", "a2c-pixels", "td3"],
)  # fmt: skip
def test_every_learner_kind_is_measured(one_torch_thread, algo, spec) -> None:
    """Pixel replay batches, time-major segments and continuous actions all reach an
    update (a lone candidate is timed only when asked)."""
    overrides = {} if algo in ("ppo", "a2c") else {"batch_size": 16}
    config = load_algorithm_config(algo, {}, **overrides)
    recipe = LearnerRecipe(algo, spec, config, seed=0)
    assert not measure(recipe, ["cpu"], "torch-eager").timings
    measured = measure(recipe, ["cpu"], "torch-eager", time_alone=True)
    assert not measured.failed, measured.failed
    assert measured.timings and all(ms > 0 for ms in measured.timings.values())


def test_cuda_asked_without_cuda_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="is_available"):
        resolve_device("cuda", _recipe(), cuda=NO_GPU)
    with pytest.raises(ConfigError, match=r"'cuda:1'.*available: cpu, cuda:0 \(NVIDIA H200\)"):
        resolve_device("cuda:1", _recipe(), cuda=CudaInfo(1, ("NVIDIA H200",)))


def test_cuda_asked_without_cuda_says_what_is_available() -> None:
    none = CudaInfo(0, (), "2.13.0+cpu")
    with pytest.raises(ConfigError) as error:
        check_available("cuda", none)
    text = str(error.value)
    assert "'cuda'" in text and "torch.cuda.is_available() is False" in text
    assert "available: cpu." in text and "2.13.0+cpu" in text
    one = CudaInfo(1, ("NVIDIA H200",))
    with pytest.raises(ConfigError, match=r"'cuda:1'.*available: cpu, cuda:0 \(NVIDIA H200\)"):
        check_available("cuda:1", one)
    check_available("cuda:0", one)  # present: no error
    check_available("cpu", none)


# --- update paths ------------------------------------------------------------------------
def test_update_path_preference() -> None:
    assert choose_update_path("auto", ("torch-eager", "numpy-flat"), "cpu") == "numpy-flat"
    cuda_paths = ("torch-eager", "compiled", "cuda-graph")
    assert choose_update_path("auto", cuda_paths, "cuda:0") == "cuda-graph"
    assert choose_update_path("auto", ("torch-eager", "compiled"), "cuda") == "compiled"
    assert choose_update_path("compiled", cuda_paths, "cuda") == "compiled"
    with pytest.raises(ConfigError, match=r"'cuda-graph'.*on cpu; available: torch-eager"):
        choose_update_path("cuda-graph", ("torch-eager",), "cpu")


def test_learners_report_their_path_and_dtype(one_torch_thread) -> None:
    dqn = make_algorithm("dqn", 4, 2, (64, 64))
    td3 = make_algorithm("td3", 3, 1, (32, 32))
    torch_dqn = make_algorithm("dqn", 4, 2, (64, 64), DQNConfig(flat=False))
    assert set_update_path(dqn, "auto", "cpu") == "numpy-flat"
    assert set_update_path(td3, "auto", "cpu") == "torch-eager"
    assert set_update_path(torch_dqn, "auto", "cpu") == "torch-eager"
    assert learner_dtype(dqn) == learner_dtype(td3) == "float32"
    info = setup_learner(dqn, "cpu", "auto", DeviceChoice("cpu", "asked for"))
    assert info == LearnerInfo("cpu", "numpy-flat", "float32", "asked for")
    assert info.line() == "device cpu, update path numpy-flat, dtype float32"
    with pytest.raises(ConfigError, match="'cuda-graph'"):
        set_update_path(dqn, "cuda-graph", "cpu")  # not offered on a CPU learner


@pytest.fixture
def restored_threads() -> Iterator[None]:
    """setup_learner(torch_threads=...) sets the process's count: put it back after."""
    from actorq import torch_threads

    threads, wanted = torch.get_num_threads(), torch_threads._wanted
    yield
    torch.set_num_threads(threads)
    torch_threads._wanted = wanted


def test_numpy_flat_runs_on_one_torch_thread_the_others_on_the_services(
    restored_threads,
) -> None:
    """ACTORQ_TORCH_THREADS=2 (compose's learner): numpy-flat's few torch ops would wake a
    second OpenMP thread for nothing, so its learner runs on one; torch's own paths get
    the two asked for. Worker threads started later (the training loop) inherit that."""
    dqn = setup_learner(make_algorithm("dqn", 4, 2, (64, 64)), "cpu", "auto", torch_threads=2)
    assert (dqn.update_path, dqn.torch_threads, torch.get_num_threads()) == ("numpy-flat", 1, 1)
    assert dqn.line() == "device cpu, update path numpy-flat, dtype float32, torch threads 1"
    td3 = setup_learner(make_algorithm("td3", 3, 1, (32, 32)), "cpu", "auto", torch_threads=2)
    assert (td3.update_path, td3.torch_threads, torch.get_num_threads()) == ("torch-eager", 2, 2)
    seen: list[int | None] = []
    loop = threading.Thread(target=lambda: seen.append(inherit_torch_threads()))
    loop.start()
    loop.join()
    assert seen == [2]
    # without a service's count nothing is set (tests, benches)
    plain = setup_learner(make_algorithm("dqn", 4, 2, (64, 64)), "cpu", "auto")
    assert plain.torch_threads == 0 and torch.get_num_threads() == 2


def test_measurement_times_each_path_on_its_own_thread_count(monkeypatch) -> None:
    """With 2 torch threads asked for, numpy-flat is timed on one (as the service will run
    it) and torch-eager on two; before, numpy-flat's trial ran torch's step on two threads
    (0.43 ms, not 0.14) and `auto` chose torch-eager by noise."""
    seen: dict[str, set[int]] = {}
    run = _Trial.run

    def spy(trial: _Trial, n: int) -> None:
        seen.setdefault(trial.key, set()).add(torch.get_num_threads())
        run(trial, n)

    monkeypatch.setattr(_Trial, "run", spy)
    threads = torch.get_num_threads()
    result = measure(_recipe(batch_size=128), ["cpu"], torch_threads=2)
    assert seen == {"cpu/numpy-flat": {1}, "cpu/torch-eager": {2}}
    assert torch.get_num_threads() == threads
    # numpy-flat on one thread is ~3x torch's step on two at this size (0.14 / 0.46 ms)
    assert result.timings["cpu/numpy-flat"] < result.timings["cpu/torch-eager"], result.timings


def test_auto_path_takes_the_measured_one_where_offered(one_torch_thread) -> None:
    timings = {"cpu/torch-eager": 0.5, "cpu/numpy-flat": 0.9}
    measured = DeviceChoice("cpu", "auto: fastest of ...", "torch-eager", timings)
    info = setup_learner(make_algorithm("dqn", 4, 2, (64, 64)), "cpu", "auto", measured)
    assert (info.update_path, dict(info.timings)) == ("torch-eager", timings)
    assert info.line() == (
        "device cpu, update path torch-eager, dtype float32, measured cpu/torch-eager 0.5 ms, "
        "cpu/numpy-flat 0.9 ms"
    )
    explicit = setup_learner(make_algorithm("dqn", 4, 2, (64, 64)), "cpu", "numpy-flat", measured)
    assert explicit.update_path == "numpy-flat"  # an explicit path wins over the measurement
    # A path the trained learner does not offer (RLx2's masks rule captured paths out):
    # PREFERENCE's instead.
    other = DeviceChoice("cpu", "auto: ...", "cuda-graph", {"cpu/cuda-graph": 0.1})
    td3 = setup_learner(make_algorithm("td3", 3, 1, (32, 32)), "cpu", "auto", other)
    assert td3.update_path == "torch-eager"
