"""Energy and carbon of a run: measured where the hardware tells, estimated where not.

Three sources, best first:
- RAPL (`/sys/class/powercap/intel-rapl:*/energy_uj`, Intel and recent AMD on bare
  metal): package energy of the whole machine between start and end of the run; it is
  shared out to services by their CPU seconds ("rapl").
- NVML (`libnvidia-ml.so.1`, read with ctypes, no Python package needed): total energy
  of each NVIDIA GPU since the driver loaded, differenced over the run ("nvml"), added to
  the CPU figure and charged to the learner (the only service that runs on a GPU).
- Otherwise an estimate from CPU seconds ("estimate"): each busy core draws
  `watts_per_core` (default 4.5 W: a 64-core, 280 W TDP AMD EPYC at full load, 280/64,
  the per-core TDP rule of the Green Algorithms calculator), idle cores draw nothing and
  memory, disks and network are left out. It ranks runs on one machine; it is not a
  measurement, and every figure it produces says "estimate".

Carbon: grams CO2e = kWh x grid intensity (`ACTORQ_GRID_G_PER_KWH`, default 475 g/kWh, the
IEA's 2019 world average). `ACTORQ_WATTS_PER_CORE` overrides the power model.
"""

from __future__ import annotations

import ctypes
import os
import resource
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from actorq.config import ConfigError

DEFAULT_WATTS_PER_CORE = 4.5
DEFAULT_GRID_G_PER_KWH = 475.0
POWERCAP = Path("/sys/class/powercap")
J_PER_KWH = 3.6e6


@dataclass(frozen=True)
class PowerModel:
    """Per-core power (W) and grid carbon intensity (g CO2e per kWh)."""

    watts_per_core: float = DEFAULT_WATTS_PER_CORE
    grid_g_per_kwh: float = DEFAULT_GRID_G_PER_KWH

    def __post_init__(self) -> None:
        if not self.watts_per_core > 0:
            raise ConfigError(f"watts per core must be > 0, got {self.watts_per_core}")
        if not self.grid_g_per_kwh >= 0:
            raise ConfigError(f"grid intensity must be >= 0 g/kWh, got {self.grid_g_per_kwh}")

    @classmethod
    def from_env(cls, env: Mapping[str, str] = os.environ) -> PowerModel:
        """From ACTORQ_WATTS_PER_CORE and ACTORQ_GRID_G_PER_KWH (defaults above)."""
        values = {}
        for field, name in (
            ("watts_per_core", "ACTORQ_WATTS_PER_CORE"),
            ("grid_g_per_kwh", "ACTORQ_GRID_G_PER_KWH"),
        ):
            if env.get(name):
                try:
                    values[field] = float(env[name])
                except ValueError:
                    raise ConfigError(f"{name}={env[name]!r}: expected a number") from None
        return cls(**values)

    def joules(self, cpu_seconds: float) -> float:
        return cpu_seconds * self.watts_per_core

    def grams(self, joules: float) -> float:
        return joules / J_PER_KWH * self.grid_g_per_kwh


# --- RAPL ------------------------------------------------------------------------------
def _rapl_zones(root: Path) -> list[Path]:
    """Top-level package zones (intel-rapl:0, intel-rapl:1, ...), not their subzones."""
    if not root.is_dir():
        return []
    return sorted(p for p in root.glob("intel-rapl:*") if p.name.count(":") == 1)


def read_rapl_uj(root: Path | None = None) -> dict[str, tuple[int, int]] | None:
    """{zone: (energy_uj, max_energy_range_uj)}, None where RAPL is absent or unreadable."""
    zones = {}
    for zone in _rapl_zones(POWERCAP if root is None else root):
        try:
            energy = int((zone / "energy_uj").read_text())
            wrap = int((zone / "max_energy_range_uj").read_text())
        except (OSError, ValueError):
            return None  # often root-only since 2020 (CVE-2020-8694)
        zones[zone.name] = (energy, wrap)
    return zones or None


def rapl_joules(start: dict[str, tuple[int, int]], end: dict[str, tuple[int, int]]) -> float:
    """Energy between two readings, counters that wrapped once included."""
    total = 0
    for zone, (before, wrap) in start.items():
        after = end.get(zone, (before, wrap))[0]
        total += after - before if after >= before else after + wrap - before
    return total / 1e6


# --- NVML ------------------------------------------------------------------------------
def read_nvml_mj() -> list[int] | None:
    """Total energy (mJ) of each NVIDIA GPU since driver load; None without NVML or GPUs."""
    try:
        nvml = ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        return None
    if nvml.nvmlInit_v2() != 0:
        return None
    try:
        count = ctypes.c_uint(0)
        if nvml.nvmlDeviceGetCount_v2(ctypes.byref(count)) != 0 or count.value == 0:
            return None
        readings = []
        for i in range(count.value):
            handle = ctypes.c_void_p()
            energy = ctypes.c_ulonglong(0)
            if nvml.nvmlDeviceGetHandleByIndex_v2(i, ctypes.byref(handle)) != 0:
                return None
            if nvml.nvmlDeviceGetTotalEnergyConsumption(handle, ctypes.byref(energy)) != 0:
                return None  # pre-Volta GPUs do not count energy
            readings.append(int(energy.value))
        return readings
    finally:
        nvml.nvmlShutdown()


# --- a run ---------------------------------------------------------------------------------
class EnergyMeter:
    """Reads RAPL and NVML at the start of a run; `report` shares the energy out."""

    def __init__(self, model: PowerModel | None = None) -> None:
        self.model = model or PowerModel.from_env()
        self._rapl = read_rapl_uj()
        self._nvml = read_nvml_mj()

    def report(self, cpu_seconds: Mapping[str, float], gpu_service: str = "learner") -> dict:
        """summary.json's `energy`: per service and total joules and grams CO2e."""
        cpu_total = sum(cpu_seconds.values())
        rapl_end = read_rapl_uj() if self._rapl else None
        measured_cpu = rapl_joules(self._rapl, rapl_end) if self._rapl and rapl_end else None
        nvml_end = read_nvml_mj() if self._nvml else None
        gpu = (
            sum(b - a for a, b in zip(self._nvml, nvml_end, strict=False)) / 1e3
            if self._nvml and nvml_end
            else None
        )
        per_service = {}
        for name, seconds in cpu_seconds.items():
            if measured_cpu is not None:  # whole-machine RAPL, shared out by CPU time
                joules = measured_cpu * seconds / cpu_total if cpu_total else 0.0
            else:
                joules = self.model.joules(seconds)
            if gpu is not None and name == gpu_service:
                joules += gpu
            per_service[name] = {
                "cpu_seconds": round(seconds, 3),
                "joules": round(joules, 3),
                "grams_co2": round(self.model.grams(joules), 6),
            }
        total = sum(s["joules"] for s in per_service.values())
        return {
            "method": "rapl" if measured_cpu is not None else "estimate",
            "gpu_method": "nvml" if gpu is not None else None,
            "watts_per_core": self.model.watts_per_core,
            "grid_g_per_kwh": self.model.grid_g_per_kwh,
            "cpu_seconds": round(cpu_total, 3),
            "joules": round(total, 3),
            "kwh": total / J_PER_KWH,
            "grams_co2": round(self.model.grams(total), 6),
            "gpu_joules": gpu,
            "per_service": per_service,
        }


class ProcessEnergyCollector(Collector):
    """Prometheus: this process's estimated energy and CO2 from its own CPU time.

    Computed at scrape time from getrusage, so it costs nothing between scrapes. Labelled
    `method="estimate"`; the run's RAPL/NVML figures (where present) are in summary.json.
    """

    def __init__(self, service: str, model: PowerModel | None = None) -> None:
        self.service = service
        self.model = model or PowerModel.from_env()

    def collect(self):
        usage = resource.getrusage(resource.RUSAGE_SELF)
        joules = self.model.joules(usage.ru_utime + usage.ru_stime)
        energy = CounterMetricFamily(
            "actorq_service_energy_joules",
            "Energy of this service process: CPU seconds x watts per core (an estimate).",
            labels=["service", "method"],
        )
        energy.add_metric([self.service, "estimate"], joules)
        carbon = CounterMetricFamily(
            "actorq_service_co2_grams",
            "Grams CO2e of this service's energy at the configured grid intensity.",
            labels=["service", "method"],
        )
        carbon.add_metric([self.service, "estimate"], self.model.grams(joules))
        watts = GaugeMetricFamily(
            "actorq_service_power_model_watts_per_core",
            "Per-core power assumed by the energy estimate.",
        )
        watts.add_metric([], self.model.watts_per_core)
        return [energy, carbon, watts]
