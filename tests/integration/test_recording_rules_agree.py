"""Recording rules over a window agree with `gpuwatch report` for the same window (within 2%)."""

import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuwatch.sim import SimulatedFleet, build_demo_fleet
from gpuwatch.sim.systems import history_service
from gpuwatch.surfaces.report import build_report
from tests.integration.prom import BackfilledPrometheus, PrometheusFactory, query

pytestmark = pytest.mark.integration
RULES = Path(__file__).resolve().parents[2] / "alerts" / "gpuwatch-recording.rules.yml"


def _rules() -> dict[str, str]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return {r["record"]: r["expr"] for g in groups for r in g["rules"] if "record" in r}


@pytest.fixture(scope="module")
def fleet() -> SimulatedFleet:
    return build_demo_fleet(seed=23, end=datetime(2026, 11, 20, tzinfo=UTC), days=0.5, step_seconds=120)


@pytest.fixture(scope="module")
def prom(fleet: SimulatedFleet, prometheus_factory: PrometheusFactory) -> BackfilledPrometheus:
    return prometheus_factory(fleet, metrics=("DCGM_FI_DEV_GPU_UTIL",), gpuwatch_series=True)


@pytest.fixture(scope="module")
def report(fleet: SimulatedFleet) -> dict[str, Any]:
    # The settings the backfilled gpuwatch_* series were computed with (the demo's, one price for all time).
    return build_report(history_service(fleet).analysis(fleet.window))


def _integrated(prom: BackfilledPrometheus, fleet: SimulatedFleet, rule: str) -> list[dict[str, Any]]:
    """The rule's expression summed over the window's samples, in (GE or USD/h) × hours.

    The rules are sums of gpuwatch_* gauges, so summing each gauge's samples over the window first
    (sum_over_time) and then applying the rule integrates the recorded series over the window.
    """
    window_s = int((fleet.window.end - fleet.window.start).total_seconds())
    expr = re.sub(r"\b(gpuwatch_[a-z_]+)\b", rf"sum_over_time(\1[{window_s}s])", _rules()[rule])
    # Samples sit mid-interval: evaluated at the end, the range covers exactly the window's samples.
    result = query(prom.url, expr, fleet.window.end)
    step_h = fleet.window.step_seconds / 3600
    return [{**r["metric"], "value": float(r["value"][1]) * step_h} for r in result]


def test_fleet_ledger_by_state(
    prom: BackfilledPrometheus, fleet: SimulatedFleet, report: dict[str, Any]
) -> None:
    got = {r["state"]: r["value"] for r in _integrated(prom, fleet, "fleet_state:gpuwatch_gpus:sum")}
    assert got == pytest.approx(report["fleet"]["ledger_gpu_hours"], rel=0.02)


def test_team_states_costs_and_waste(
    prom: BackfilledPrometheus, fleet: SimulatedFleet, report: dict[str, Any]
) -> None:
    states = _integrated(prom, fleet, "team_state:gpuwatch_gpus:sum")
    cost = {r["team"]: r["value"] for r in _integrated(prom, fleet, "team:gpuwatch_cost_usd_per_hour:sum")}
    waste = {
        r["team"]: r["value"] for r in _integrated(prom, fleet, "team:gpuwatch_idle_cost_usd_per_hour:sum")
    }
    teams = {t["team"]: t for t in report["teams"]}
    assert set(cost) == set(teams)
    for name, team in teams.items():
        held = {r["state"]: r["value"] for r in states if r["team"] == name}
        assert held.get("allocated_idle", 0.0) == pytest.approx(team["idle_gpu_hours"], rel=0.02, abs=1e-6), (
            name
        )
        assert held.get("allocated_unknown", 0.0) == pytest.approx(
            team["unknown_gpu_hours"], rel=0.02, abs=1e-6
        ), name
        assert sum(held.values()) == pytest.approx(team["allocated_gpu_hours"], rel=0.02), name
        assert cost[name] == pytest.approx(team["cost_usd"], rel=0.02), name
        assert waste.get(name, 0.0) == pytest.approx(team["waste_usd"], rel=0.02, abs=1e-6), name


def test_namespace_allocation(
    prom: BackfilledPrometheus, fleet: SimulatedFleet, report: dict[str, Any]
) -> None:
    got = {
        (r["namespace"], r["team"]): r["value"]
        for r in _integrated(prom, fleet, "namespace:gpuwatch_pod_gpu_allocation:sum")
    }
    expected = {(n["namespace"], n["team"]): n["allocated_gpu_hours"] for n in report["namespaces"]}
    assert got.keys() == expected.keys()
    assert got == pytest.approx(expected, rel=0.02)
