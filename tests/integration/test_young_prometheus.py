"""A live simulated fleet whose Prometheus is a minute old: unknown is never drawn or counted as active.

A real Prometheus scrapes the simulated dcgm-exporter from the moment the test starts, while the
Kubernetes API test server says the fleet's pods have run for hours. Most of every window then has no
telemetry: its allocated GPU-hours are allocated_unknown in the report and on every chart, the report
and the Overview say how little telemetry there is, and `gpuwatch check` says "not enough history yet"
without contradicting itself.
"""

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from gpuwatch.core.config import load_settings
from gpuwatch.read.service import FleetService
from gpuwatch.sim import SimulatedFleet, build_demo_fleet
from gpuwatch.sim.exposition import serve_metrics
from gpuwatch.ui import create_app
from gpuwatch.ui import ids as ui_ids
from tests.integration.browser import browser_page, screenshot, settle
from tests.integration.prom import PrometheusServer
from tests.integration.ui_server import serve_app

pytestmark = pytest.mark.integration
AGE_SECONDS = 80  # over a minute: the window's last 60 s sample (to a whole minute) holds telemetry


@dataclass(frozen=True, slots=True)
class Young:
    prometheus_url: str
    kubeconfig: str
    started: datetime  # when Prometheus began scraping


@pytest.fixture(scope="module")
def fleet() -> SimulatedFleet:
    # The fleet's history reaches a little past now, so the simulated exporter serves current values.
    now = datetime.now(UTC).replace(second=0, microsecond=0)
    return build_demo_fleet(seed=42, end=now + timedelta(minutes=15), days=1)


@pytest.fixture(scope="module")
def young(
    fleet: SimulatedFleet, kubeconfig: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Young]:
    workdir = tmp_path_factory.mktemp("young")
    with serve_metrics(fleet) as metrics:
        config = f"""
global: {{scrape_interval: 5s, evaluation_interval: 5s}}
scrape_configs:
  - job_name: dcgm-exporter
    static_configs: [{{targets: ["127.0.0.1:{metrics.port}"]}}]
"""
        (workdir / "tsdb").mkdir()
        with PrometheusServer(data_dir=workdir / "tsdb", config_text=config) as prom:
            started = datetime.now(UTC)
            time.sleep(AGE_SECONDS)
            yield Young(prometheus_url=prom.url, kubeconfig=kubeconfig, started=started)


def _gpuwatch(young: Young, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "gpuwatch",
            *args,
            "--prometheus-url",
            young.prometheus_url,
            "--kubeconfig",
            young.kubeconfig,
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )


def _telemetry_gpu_hours_bound(young: Young, gpus: float) -> float:
    """The most GPU-hours telemetry can describe: every GPU since Prometheus started (plus a sample)."""
    return gpus * ((datetime.now(UTC) - young.started).total_seconds() + 120) / 3600


def test_report_counts_the_untelemetered_hours_as_unknown_and_warns(young: Young) -> None:
    result = _gpuwatch(young, "report", "--format", "json", "--source", "raw")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    ledger = report["fleet"]["ledger_gpu_hours"]
    allocated = report["fleet"]["allocated_gpu_hours"]
    bound = _telemetry_gpu_hours_bound(young, report["fleet"]["gpus"])
    # A day of pods the API server knows, a minute of telemetry: active and idle fit in those minutes.
    assert allocated > 100 * bound
    assert ledger["allocated_active"] + ledger["allocated_idle"] <= bound
    assert ledger["allocated_unknown"] >= allocated - bound
    assert sum(t["unknown_gpu_hours"] for t in report["teams"]) == pytest.approx(ledger["allocated_unknown"])
    coverage = report["coverage"]
    share = coverage["gpu_samples_present"] / coverage["gpu_samples_expected"]
    assert share < 0.01
    assert coverage["warnings"][0].startswith(f"telemetry covers only {share:.1%} of the window (")
    assert "the first DCGM sample is at" in coverage["warnings"][0]
    table = _gpuwatch(young, "report", "--format", "table", "--source", "raw")
    assert table.returncode == 0, table.stderr
    assert "\nwarning: telemetry covers only 0." in table.stdout
    assert "\nallocated_unknown " in table.stdout


def test_check_says_not_enough_history_yet_and_does_not_contradict_itself(young: Young) -> None:
    result = _gpuwatch(young, "check")
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert not any(line.startswith("ok: coverage") for line in lines)
    coverage = [line for line in lines if line.startswith("warning: coverage")]
    assert len(coverage) == 1 and "not enough history yet" in coverage[0]
    assert "has 8 GPUs but no DCGM series" not in result.stdout + result.stderr
    assert "no DCGM utilization series" not in result.stdout + result.stderr
    assert result.stderr == ""


def _traces(page: Any, graph_id: str) -> dict[str, list[float]]:
    """The y values of each named trace of a dcc.Graph, as plotly drew them."""
    data: list[dict[str, Any]] = page.evaluate(
        "id => document.querySelector(`#${id} .js-plotly-plot`)._fullData"
        ".map(t => ({name: t.name, y: Array.from(t.y || t.x || [])}))",
        graph_id,
    )
    return {str(t["name"]): [float(v) for v in t["y"] if v is not None] for t in data}


def test_no_page_draws_unknown_as_active_and_the_overview_warns(young: Young, tmp_path: Path) -> None:
    settings = load_settings(
        flags={"prometheus_url": young.prometheus_url, "kubeconfig": young.kubeconfig}, env={}
    )
    app = create_app(FleetService.live(settings), warm=False)
    with serve_app(app) as base, browser_page(1440, 1000) as (page, errors):
        page.goto(f"{base}/?window=24h")
        page.wait_for_selector("#kpi-gpus", timeout=180_000)
        settle(page)
        banner = page.locator("#coverage-banner")
        assert banner.is_visible()
        assert banner.inner_text().startswith("Low telemetry coverage. Telemetry covers only 0.")
        ledger = _traces(page, ui_ids.OVERVIEW_LEDGER_CHART)
        unknown, active = ledger["allocated · unknown"], ledger["allocated · active"]
        # Buckets of the 24 h chart: GE per state. Pods hold GPUs all day; telemetry is a minute old.
        assert sum(unknown) > 50 * sum(active)
        assert max(unknown) >= 10
        screenshot(page, "young-prometheus-overview")
        page.goto(f"{base}/waste?window=24h")
        page.wait_for_selector("#kpi-idle-hours", timeout=180_000)
        settle(page)
        assert page.locator("#coverage-banner").is_visible()
        bars: dict[str, float] = page.evaluate(
            "id => { const t = document.querySelector(`#${id} .js-plotly-plot`)._fullData[0];"
            " return Object.fromEntries(Array.from(t.y).map((label, i) => [label, t.x[i]])); }",
            ui_ids.WASTE_LEDGER,
        )
        assert bars["allocated · unknown"] > 50 * bars["allocated · active"]
        screenshot(page, "young-prometheus-waste")
        page.goto(f"{base}/teams/llm-research?window=24h")
        page.wait_for_selector("#kpi-team-efficiency", timeout=180_000)
        settle(page)
        trend = _traces(page, ui_ids.TEAM_TREND)
        assert sum(trend["allocated · unknown"]) > 50 * sum(trend["allocated · active"])
        assert page.locator("#coverage-banner").is_visible()
        assert not errors, errors
