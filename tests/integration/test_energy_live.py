"""Energy on the live path: DCGM's energy counter (or power) read from a real Prometheus, per pod."""

from datetime import UTC, datetime, timedelta
from typing import Any

import pandas as pd
import pytest

from gpuwatch.core.config import KubernetesSettings, PrometheusSettings, Settings
from gpuwatch.core.model import Window
from gpuwatch.read.series import published_series
from gpuwatch.read.service import FleetService, LiveSources
from gpuwatch.sim import SimulatedFleet, build_demo_fleet
from gpuwatch.sim.demoservice import demo_service, demo_settings
from gpuwatch.surfaces.exporter import PUBLISHED_FIELD_SECONDS
from gpuwatch.surfaces.report import build_report
from tests.integration.prom import PrometheusFactory

pytestmark = pytest.mark.integration
END = datetime(2026, 11, 20, tzinfo=UTC)
UTIL = ("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_PROF_GR_ENGINE_ACTIVE", "DCGM_FI_DEV_FB_USED")
ENERGY = "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"
POWER = "DCGM_FI_DEV_POWER_USAGE"


@pytest.fixture(scope="module")
def fleet() -> SimulatedFleet:
    # A quarter day: the first H100 node's driver reloads half way through (its counters restart).
    return build_demo_fleet(seed=13, end=END, days=0.25)


def _live(fleet: SimulatedFleet, url: str, kubeconfig: str) -> dict[str, Any]:
    base = Settings(
        prometheus=PrometheusSettings(url=url), kubernetes=KubernetesSettings(kubeconfig=kubeconfig)
    )
    service = FleetService(settings=demo_settings(base, end=fleet.window.end), sources=LiveSources(base))
    return build_report(service.analysis(fleet.window))


@pytest.fixture(scope="module")
def simulated(fleet: SimulatedFleet) -> dict[str, Any]:
    return build_report(demo_service(Settings(), fleet).analysis(fleet.window))


def test_energy_from_the_counter_through_prometheus_is_the_simulated_fleets(
    fleet: SimulatedFleet, prometheus_factory: PrometheusFactory, kubeconfig: str, simulated: dict[str, Any]
) -> None:
    prom = prometheus_factory(fleet, metrics=(*UTIL, ENERGY, POWER))
    live = _live(fleet, prom.url, kubeconfig)
    # The counter, read as the exporter wrote it (mJ, a reset on one node, repeated on MIG instances),
    # gives the energy the simulator integrated, fleet-wide and per team.
    assert live["fleet"]["energy_kwh"] == pytest.approx(simulated["fleet"]["energy_kwh"], rel=1e-9)
    assert live["fleet"]["energy_cost_usd"] == pytest.approx(simulated["fleet"]["energy_cost_usd"], rel=1e-9)
    # Per team, within 2 %: the live join also names a short-lived time-sliced pod DCGM labelled that the
    # simulated source does not list; on the minutes its GPU is over-claimed, the holders' shares of the
    # GPU's energy are scaled down together (the GPU's energy is conserved, never counted twice).
    want = {t["team"]: t["energy_kwh"] for t in simulated["teams"]}
    got = {t["team"]: t["energy_kwh"] for t in live["teams"] if t["team"] in want}
    assert got == pytest.approx(want, rel=0.02)
    held = sum(t["energy_kwh"] for t in live["teams"]) + live["fleet"]["unallocated_energy_kwh"]
    assert held == pytest.approx(live["fleet"]["energy_kwh"], rel=1e-9)
    assert not [w for w in live["coverage"]["warnings"] if w.startswith("energy")]


def test_without_the_counter_energy_is_power_times_time_and_coverage_says_so(
    fleet: SimulatedFleet, prometheus_factory: PrometheusFactory, kubeconfig: str, simulated: dict[str, Any]
) -> None:
    prom = prometheus_factory(fleet, metrics=(*UTIL, POWER))
    live = _live(fleet, prom.url, kubeconfig)
    gpus = fleet.telemetry()["uuid"].nunique()  # those reporting (a NotReady node's report nothing)
    assert (
        f"energy of {gpus} GPUs from power × time (they report no energy counter)"
        in live["coverage"]["warnings"]
    )
    # Power averaged over each minute × 60 s is the same energy, to the counter's rounding (whole joules).
    assert live["fleet"]["energy_kwh"] == pytest.approx(simulated["fleet"]["energy_kwh"], rel=1e-5)


def test_without_energy_or_power_energy_is_unknown_never_zero(
    fleet: SimulatedFleet, prometheus_factory: PrometheusFactory, kubeconfig: str
) -> None:
    prom = prometheus_factory(fleet, metrics=UTIL)
    live = _live(fleet, prom.url, kubeconfig)
    assert live["fleet"]["energy_kwh"] is None and live["fleet"]["energy_cost_usd"] is None
    assert all(t["energy_kwh"] is None for t in live["teams"])
    assert any(w.startswith("energy unknown for") for w in live["coverage"]["warnings"])


def test_the_exporter_reads_energy_and_memory_for_its_last_samples_alone_and_publishes_the_same(
    fleet: SimulatedFleet, prometheus_factory: PrometheusFactory, kubeconfig: str
) -> None:
    prom = prometheus_factory(fleet, metrics=(*UTIL, ENERGY, POWER))
    base = Settings(
        prometheus=PrometheusSettings(url=prom.url), kubernetes=KubernetesSettings(kubeconfig=kubeconfig)
    )
    settings = demo_settings(base, end=fleet.window.end)
    window = Window(start=fleet.window.end - timedelta(minutes=40), end=fleet.window.end, step_seconds=60)
    published = {}
    for seconds in (None, PUBLISHED_FIELD_SECONDS):
        sources = LiveSources(base, field_seconds=seconds)
        analysis = FleetService(settings=settings, sources=sources).analysis(window)
        published[seconds] = {f.name: f.samples for f in published_series(analysis)}
    whole, tail = published[None], published[PUBLISHED_FIELD_SECONDS]
    for name in (
        "gpuwatch_pod_gpu_power_watts",
        "gpuwatch_team_gpu_power_watts",
        "gpuwatch_pool_gpu_power_watts",
        "gpuwatch_team_energy_cost_usd_per_hour",
        "gpuwatch_pod_gpu_idle_held",
        "gpuwatch_pod_gpu_idle_abandoned",
    ):
        assert len(whole[name]) > 0, name
        pd.testing.assert_frame_equal(tail[name], whole[name], check_categorical=False, obj=name)
