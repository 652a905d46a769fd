"""actorq.launch.cores: which cores `actorq run --pin-learner on` gives the learner."""

from __future__ import annotations

import pytest

from actorq.config import ConfigError, RunSettings
from actorq.launch.cores import learner_on_cpu, pin, plan_cores
from actorq.launch.plan import _plan

ONE_THREAD = {"ACTORQ_TORCH_THREADS": "1"}
PIN = RunSettings(pin_learner="on")


def test_two_cores_give_the_learner_the_last_and_the_rest_the_first() -> None:
    layout = plan_cores(PIN, True, {0, 1}, ONE_THREAD)
    assert layout is not None
    assert layout.learners == ((1,),) and layout.others == (0,)
    assert layout.describe() == "learner on core(s) 1, other services on 0"


def test_torch_threads_and_ranks_each_get_cores_of_their_own() -> None:
    wide = plan_cores(PIN, True, set(range(16)), {"ACTORQ_TORCH_THREADS": "2"})
    assert wide is not None and wide.learners == ((14, 15),) and wide.others == tuple(range(14))
    ranks = plan_cores(RunSettings(learners=3, pin_learner="on"), True, set(range(16)), ONE_THREAD)
    assert ranks is not None and ranks.learners == ((13,), (14,), (15,))
    assert ranks.describe() == "learner on core(s) 13; 14; 15, other services on 0-12"


def test_cores_this_process_may_not_use_are_never_given() -> None:
    layout = plan_cores(PIN, True, {2, 5, 7}, ONE_THREAD)
    assert layout is not None and layout.learners == ((7,),) and layout.others == (2, 5)


@pytest.mark.parametrize(
    ("settings", "on_cpu", "cores", "why"),
    [
        (RunSettings(), True, {0, 1}, "off by default"),
        (PIN, False, {0, 1}, "a GPU learner: not measured"),
        (
            RunSettings(ingest="process", pin_learner="on"),
            True,
            {0, 1},
            "ingest would share the core",
        ),
        (PIN, True, {0}, "nothing left for the other services"),
        (
            RunSettings(learners=2, pin_learner="on"),
            True,
            {0, 1},
            "nothing left for the other services",
        ),
    ],
)
def test_no_pinning_where_it_does_not_apply(
    settings: RunSettings, on_cpu: bool, cores: set[int], why: str
) -> None:
    assert plan_cores(settings, on_cpu, cores, ONE_THREAD) is None, why


def test_bad_values_are_refused_with_what_is_expected() -> None:
    with pytest.raises(ConfigError, match=r"--pin-learner: expected on or off, got 'auto'"):
        RunSettings(pin_learner="auto")
    with pytest.raises(ConfigError, match=r"ACTORQ_TORCH_THREADS: expected .* got 'two'"):
        plan_cores(PIN, True, {0, 1}, {"ACTORQ_TORCH_THREADS": "two"})


def test_pin_puts_every_planned_service_on_its_cores(tmp_path) -> None:
    settings = RunSettings(actors=3, learners=2, pin_learner="on")
    cluster = _plan(settings, tmp_path, "redis://127.0.0.1:1/0", "p")
    layout = plan_cores(settings, True, set(range(8)), ONE_THREAD)
    pin(cluster, layout)
    assert [p.cpus for p in cluster.learners] == [(6,), (7,)]
    others = [p for p in cluster.all if p not in cluster.learners]
    assert len(others) == 5 and all(p.cpus == tuple(range(6)) for p in others)


def test_auto_device_counts_as_cpu_only_without_an_nvidia_device_node(tmp_path) -> None:
    assert learner_on_cpu(RunSettings(learner_device="cpu"), tmp_path)
    assert not learner_on_cpu(RunSettings(learner_device="cuda"), tmp_path)
    assert learner_on_cpu(RunSettings(learner_device="auto"), tmp_path)
    (tmp_path / "nvidiactl").touch()  # the control node alone is no GPU
    assert learner_on_cpu(RunSettings(learner_device="auto"), tmp_path)
    (tmp_path / "nvidia0").touch()
    assert not learner_on_cpu(RunSettings(learner_device="auto"), tmp_path)
    assert learner_on_cpu(RunSettings(learner_device="auto", learners=2), tmp_path)
