"""actorq.energy: power model, RAPL differencing (wrap-around), the per-run report, the
Prometheus collector; NVML only where a GPU with its driver is present."""

from __future__ import annotations

from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from actorq.config import ConfigError
from actorq.energy import (
    EnergyMeter,
    PowerModel,
    ProcessEnergyCollector,
    rapl_joules,
    read_nvml_mj,
    read_rapl_uj,
)


def test_power_model_from_env_and_bad_values() -> None:
    model = PowerModel.from_env({"ACTORQ_WATTS_PER_CORE": "10", "ACTORQ_GRID_G_PER_KWH": "360"})
    assert model.joules(36.0) == 360.0
    assert model.grams(3.6e6) == pytest.approx(360.0)  # 1 kWh
    assert PowerModel.from_env({}).watts_per_core == 4.5
    with pytest.raises(ConfigError, match="ACTORQ_WATTS_PER_CORE='abc'"):
        PowerModel.from_env({"ACTORQ_WATTS_PER_CORE": "abc"})
    with pytest.raises(ConfigError, match="watts per core must be > 0"):
        PowerModel(watts_per_core=0)


def _zone(root: Path, name: str, energy: int, wrap: int) -> None:
    (root / name).mkdir(parents=True, exist_ok=True)
    (root / name / "energy_uj").write_text(f"{energy}\n")
    (root / name / "max_energy_range_uj").write_text(f"{wrap}\n")


def test_rapl_reads_package_zones_and_handles_a_wrap(tmp_path: Path) -> None:
    _zone(tmp_path, "intel-rapl:0", 1_000_000, 10_000_000)
    _zone(tmp_path, "intel-rapl:0:0", 5, 10)  # a subzone (core): not counted twice
    _zone(tmp_path, "intel-rapl:1", 9_000_000, 10_000_000)
    start = read_rapl_uj(tmp_path)
    assert start is not None and set(start) == {"intel-rapl:0", "intel-rapl:1"}
    _zone(tmp_path, "intel-rapl:0", 3_000_000, 10_000_000)  # +2 J
    _zone(tmp_path, "intel-rapl:1", 500_000, 10_000_000)  # wrapped: +1.5 J
    assert rapl_joules(start, read_rapl_uj(tmp_path)) == pytest.approx(3.5)
    assert read_rapl_uj(tmp_path / "absent") is None


def test_report_estimates_per_service_without_rapl() -> None:
    meter = EnergyMeter(PowerModel(watts_per_core=5.0, grid_g_per_kwh=400.0))
    meter._rapl = meter._nvml = None  # as on this project's machines
    report = meter.report({"learner": 100.0, "actor-0": 20.0})
    assert report["method"] == "estimate" and report["gpu_method"] is None
    assert report["per_service"]["learner"]["joules"] == 500.0
    assert report["joules"] == 600.0 and report["cpu_seconds"] == 120.0
    assert report["grams_co2"] == pytest.approx(600 / 3.6e6 * 400, rel=1e-4)


def test_report_shares_measured_rapl_energy_by_cpu_time(tmp_path: Path, monkeypatch) -> None:
    _zone(tmp_path, "intel-rapl:0", 0, 10**12)
    monkeypatch.setattr("actorq.energy.POWERCAP", tmp_path)
    meter = EnergyMeter(PowerModel())
    meter._nvml = None
    assert meter._rapl is not None
    _zone(tmp_path, "intel-rapl:0", 90_000_000, 10**12)  # 90 J over the run
    report = meter.report({"learner": 2.0, "actor-0": 1.0})
    assert report["method"] == "rapl"
    assert report["per_service"]["learner"]["joules"] == pytest.approx(60.0)
    assert report["joules"] == pytest.approx(90.0)


def test_collector_exports_this_process_energy() -> None:
    registry = CollectorRegistry()
    registry.register(ProcessEnergyCollector("actor-3", PowerModel(watts_per_core=4.0)))
    sum(range(200_000))  # some CPU time
    labels = {"service": "actor-3", "method": "estimate"}
    joules = registry.get_sample_value("actorq_service_energy_joules_total", labels)
    grams = registry.get_sample_value("actorq_service_co2_grams_total", labels)
    assert (
        joules is not None and joules > 0 and grams == pytest.approx(joules / 3.6e6 * 475, rel=0.05)
    )


def test_nvml_reads_gpus_where_present() -> None:
    readings = read_nvml_mj()
    if readings is None:
        reason = "no NVIDIA driver/GPU here (libnvidia-ml.so.1 absent or no device)"
        print(f"SKIP: {reason}")
        pytest.skip(reason)
    assert readings and all(r > 0 for r in readings)
