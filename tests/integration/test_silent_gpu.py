"""One GPU of an 8-GPU pod silent for 30 min while its siblings report (XID 79, fell off the bus): both
read paths count its share allocated_unknown (SPEC §3: per GPU, not per pod), on a real Prometheus.

A four-hour fleet of one H100 node whose one pod holds all 8 GPUs is backfilled as DCGM series and as
the gpuwatch_* series the exporter would have published; the raw path recomputes from the DCGM series
and the Kubernetes API test server, the history path reads the gpuwatch_* series alone. By hand: GPU 7
has no sample at 30 one-minute steps, so 30 × 1 GE × 1/60 h = 0.5 GE-hours are allocated_unknown and
the other 32 − 0.5 = 31.5 GE-hours allocated_active; the pod's efficiency is its used GE-hours over
those 31.5 (the unknown half hour counts on neither side).
"""

import json
import os
import subprocess
import sys
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from gpuwatch.core.config import KubernetesSettings, PrometheusSettings, Settings
from gpuwatch.core.model import LEDGER_STATES, Window
from gpuwatch.read.history import TEAM, read_history
from gpuwatch.read.service import FleetService, LiveSources
from gpuwatch.sim import SimulatedFleet
from gpuwatch.sim.demo import DEMO_NAMESPACES, DEMO_POOLS, DEMO_STREAMS, simulate
from gpuwatch.sim.demoservice import demo_settings
from gpuwatch.sim.fleet import TelemetryGap
from gpuwatch.surfaces.report import build_history_report, build_report
from tests.integration.prom import RAW_PATH_METRICS, BackfilledPrometheus, PrometheusFactory

pytestmark = pytest.mark.integration
END = datetime(2026, 11, 20, tzinfo=UTC)
NODE = "gpu-h100-000"
SILENT = "gpu-h100-000 GPU 7: no telemetry for 30 min while allocated"
Report = dict[str, Any]


@pytest.fixture(scope="module")
def fleet() -> SimulatedFleet:
    """One H100 node, one 8-GPU training pod all along (the demo's llm-research stream), GPU 7 silent
    from the window's second hour for 30 min."""
    window = Window(start=END - timedelta(hours=4), end=END, step_seconds=60)
    h100 = replace(next(p for p in DEMO_POOLS if p.name_prefix == "h100"), nodes=1)
    stream = next(s for s in DEMO_STREAMS if s.namespace == "llm-research" and s.qty == 8)
    fleet = simulate(seed=7, window=window, pools=(h100,), streams=(stream,), namespaces=DEMO_NAMESPACES)
    gap_start = window.start + timedelta(hours=1)
    return fleet.with_gaps(
        TelemetryGap(node=NODE, gpu_index=7, start=gap_start, end=gap_start + timedelta(minutes=30))
    )


@pytest.fixture(scope="module")
def prom(fleet: SimulatedFleet, prometheus_factory: PrometheusFactory) -> BackfilledPrometheus:
    return prometheus_factory(fleet, layout="servicemonitor", metrics=RAW_PATH_METRICS, gpuwatch_series=True)


@pytest.fixture(scope="module")
def settings(prom: BackfilledPrometheus, kubeconfig: str) -> Settings:
    # The backfilled gpuwatch_* series were computed with the demo's team map and prices: use the same.
    return demo_settings(
        Settings(
            prometheus=PrometheusSettings(url=prom.url), kubernetes=KubernetesSettings(kubeconfig=kubeconfig)
        )
    )


@pytest.fixture(scope="module")
def raw(fleet: SimulatedFleet, settings: Settings) -> Report:
    return build_report(FleetService(settings=settings, sources=LiveSources(settings)).analysis(fleet.window))


@pytest.fixture(scope="module")
def history(fleet: SimulatedFleet, settings: Settings) -> Report:
    return build_history_report(read_history(settings, fleet.window))


def test_the_fleet_is_what_the_test_says(fleet: SimulatedFleet) -> None:
    running = [p for p in fleet.pods if p.phase == "Running" and p.gpu_requests]
    assert [p.gpu_requests for p in running] == [{"nvidia.com/gpu": 8.0}]
    assert running[0].started_at is not None and running[0].started_at < fleet.window.start
    assert int(fleet.missing_mask().sum()) == 30  # GPU 7's 30 samples, nothing else


@pytest.mark.parametrize("path", ["raw", "history"])
def test_the_silent_gpus_share_is_allocated_unknown_on_both_paths(
    raw: Report, history: Report, path: str
) -> None:
    report = {"raw": raw, "history": history}[path]
    ledger = report["fleet"]["ledger_gpu_hours"]
    assert ledger["allocated_unknown"] == pytest.approx(0.5, abs=1e-9)
    assert ledger["allocated_active"] == pytest.approx(31.5, abs=1e-9)
    for state in ("unavailable", "stranded", "unallocated", "allocated_idle"):
        assert ledger[state] == pytest.approx(0.0, abs=1e-9), state
    fleet = report["fleet"]
    assert fleet["allocated_gpu_hours"] == pytest.approx(32.0, abs=1e-9)
    # Efficiency over the hours whose utilization is known: used / (32 - 0.5).
    assert fleet["efficiency"] == pytest.approx(fleet["used_gpu_hours"] / 31.5, rel=1e-9)
    (workload,) = report["workloads"]
    assert workload["gpus"] == 8.0
    assert workload["allocated_gpu_hours"] == pytest.approx(32.0, abs=1e-9)
    assert workload["idle_gpu_hours"] == 0.0


def test_both_paths_agree(raw: Report, history: Report) -> None:
    for state in LEDGER_STATES:
        assert history["fleet"]["ledger_gpu_hours"][state] == pytest.approx(
            raw["fleet"]["ledger_gpu_hours"][state], rel=1e-9, abs=1e-9
        ), state
    for key in ("allocated_gpu_hours", "used_gpu_hours", "efficiency", "cost_usd", "waste_usd"):
        assert history["fleet"][key] == pytest.approx(raw["fleet"][key], rel=1e-9), key
    for section, key in (("teams", "team"), ("workloads", "pod")):
        got = {r[key]: r for r in history[section]}
        expected = {r[key]: r for r in raw[section]}
        assert got.keys() == expected.keys(), section
        for name, row in expected.items():
            for field in ("allocated_gpu_hours", "used_gpu_hours", "idle_gpu_hours"):
                assert got[name][field] == pytest.approx(row[field], rel=1e-9), (section, name, field)
    (team,) = raw["teams"]
    assert team["efficiency"] == pytest.approx(team["used_gpu_hours"] / 31.5, rel=1e-9)
    assert history["teams"][0]["efficiency"] == pytest.approx(team["efficiency"], rel=1e-9)


def test_the_raw_reports_coverage_names_the_silent_gpu(raw: Report) -> None:
    coverage = raw["coverage"]
    assert coverage["gpu_samples_expected"] == 8 * 240
    assert coverage["gpu_samples_present"] == 8 * 240 - 30
    assert [w for w in coverage["warnings"] if "no telemetry for" in w] == [SILENT]


@pytest.mark.parametrize("source", ["raw", "history"])
def test_gpuwatch_report_source_says_the_same(
    fleet: SimulatedFleet, prom: BackfilledPrometheus, kubeconfig: str, source: str
) -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "gpuwatch",
            "report",
            "--prometheus-url",
            prom.url,
            "--kubeconfig",
            kubeconfig,
            "--start",
            fleet.window.start.isoformat(),
            "--end",
            fleet.window.end.isoformat(),
            "--source",
            source,
            "--format",
            "json",
        ],
        capture_output=True,
        text=True,
        timeout=600,
        env=dict(os.environ),
        check=False,
    )
    assert done.returncode == 0, done.stderr
    ledger = json.loads(done.stdout)["fleet"]["ledger_gpu_hours"]
    assert ledger["allocated_unknown"] == pytest.approx(0.5, abs=1e-9)
    assert ledger["allocated_active"] == pytest.approx(31.5, abs=1e-9)


def test_the_history_reports_coverage_names_the_team_holding_the_silent_gpu(
    history: Report, fleet: SimulatedFleet, settings: Settings
) -> None:
    """The gpuwatch_* series say which pod held the GPU-hours without telemetry, not which GPU: the
    history path names the team, the same whether the pods are read or not (a trend reads none)."""
    team = history["teams"][0]["team"]
    line = f"team {team}: 0.50 GPU-hours allocated without telemetry"
    assert [w for w in history["coverage"]["warnings"] if "without telemetry" in w] == [line]
    summary = build_history_report(read_history(settings, fleet.window, detail=TEAM))
    assert summary["coverage"] == history["coverage"]
