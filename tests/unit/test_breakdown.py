"""actorq.breakdown: phase clock charges and the per-step / per-version summaries."""

from __future__ import annotations

import time

import pytest
from prometheus_client import CollectorRegistry, Histogram

from actorq.breakdown import PhaseClock, actor_breakdown, publish_breakdown


def test_phase_clock_charges_contiguous_intervals_and_observes_them() -> None:
    registry = CollectorRegistry()
    hist = Histogram("t_phase_seconds", "test", ["instance", "phase"], registry=registry)
    clock = PhaseClock(("a", "b"), hist, ("x",))
    started = time.perf_counter()
    clock.start()
    time.sleep(0.01)
    clock.mark("a")
    time.sleep(0.02)
    clock.mark("b")
    clock.mark("b")
    elapsed = time.perf_counter() - started
    assert clock.totals["a"] >= 0.01 and clock.totals["b"] >= 0.02
    assert clock.totals["a"] + clock.totals["b"] == pytest.approx(elapsed, abs=2e-3)
    assert registry.get_sample_value("t_phase_seconds_count", {"instance": "x", "phase": "b"}) == 2
    assert registry.get_sample_value(
        "t_phase_seconds_sum", {"instance": "x", "phase": "a"}
    ) == pytest.approx(clock.totals["a"])
    assert clock.counters("p") == {"p.a": clock.totals["a"], "p.b": clock.totals["b"]}


def test_actor_breakdown_sums_actors_per_step() -> None:
    one = {"loop_steps": 100, "loop_seconds": 1.0, "step_seconds.inference": 0.4}
    one |= {"step_seconds.env_step": 0.5, "policy_seconds.build": 0.1, "policy_loads": 2}
    two = {"loop_steps": 300, "loop_seconds": 3.0, "step_seconds.inference": 1.2}
    two |= {"step_seconds.env_step": 1.5, "policy_loads": 3}
    report = actor_breakdown([one, two])
    assert report["steps"] == 400 and report["step_seconds"] == pytest.approx(0.01)
    assert report["phases"]["inference"] == pytest.approx(1.6 / 400)
    assert report["phases"]["push"] == 0.0
    assert report["coverage"] == pytest.approx(0.9)
    assert report["background"]["build"] == pytest.approx(0.1 / 400)
    assert report["policy_loads"] == 5
    assert actor_breakdown([{"loop_steps": 0}]) == {}


def test_publish_breakdown_per_version() -> None:
    status = {"publishes": 4, "publish_seconds.quantize": 0.2, "broadcast_bytes_total": 4000}
    report = publish_breakdown(status)
    assert report["phases"]["quantize"] == pytest.approx(0.05)
    assert report["fanout_bytes_per_version"] == 1000
    assert publish_breakdown({}) == {}


def test_deferred_clock_observes_in_bulk_what_observe_would() -> None:
    registry = CollectorRegistry()
    hist = Histogram("t_bulk_seconds", "test", ["phase"], registry=registry)
    one_by_one = Histogram("t_each_seconds", "test", ["phase"], registry=registry)
    clock = PhaseClock(("a",), hist, deferred=True)
    values = [0.0, 0.005, 0.005000001, 0.01, 0.3, 2.0, 20.0, 1e9]  # on and around bounds
    for value in values:
        clock._last = time.perf_counter() - value  # the charge is `value` seconds
        clock.mark("a")
        one_by_one.labels("a").observe(clock._unobserved["a"][-1])
    assert registry.get_sample_value("t_bulk_seconds_count", {"phase": "a"}) == 0  # deferred
    clock.flush()
    clock.flush()  # nothing twice
    for bound in ("0.005", "0.01", "0.25", "2.5", "10.0", "+Inf"):
        labels = {"phase": "a", "le": bound}
        bulk = registry.get_sample_value("t_bulk_seconds_bucket", labels)
        assert bulk == registry.get_sample_value("t_each_seconds_bucket", labels), bound
    assert registry.get_sample_value("t_bulk_seconds_count", {"phase": "a"}) == len(values)
    assert registry.get_sample_value("t_bulk_seconds_sum", {"phase": "a"}) == pytest.approx(
        registry.get_sample_value("t_each_seconds_sum", {"phase": "a"})
    )
