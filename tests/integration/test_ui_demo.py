"""The Dash UI on the demo fleet in a real headless Chromium: every page, filters in the URL, downloads."""

import io
import math
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pandas as pd
import pytest
from playwright.sync_api import Page

from gpuwatch.core.config import Settings
from gpuwatch.core.model import Window
from gpuwatch.read.service import FleetService
from gpuwatch.sim import build_demo_fleet
from gpuwatch.sim.demoservice import demo_service
from gpuwatch.surfaces.report import Report, build_report
from gpuwatch.ui import create_app
from gpuwatch.ui.components import change, points
from gpuwatch.views.base import team_changes
from tests.integration.browser import (
    browser_page,
    choose,
    screenshot,
    settle,
    table_rows,
    wait_for_location,
    wait_until,
)
from tests.integration.ui_server import serve_app

pytestmark = pytest.mark.integration

PAGES = {
    "/": "#overview-kpis .gw-kpi",
    "/health": "#health-heatmap .main-svg",
    "/capacity": "#capacity-holes .main-svg",
    "/waste": "#table-waste-teams",
    "/teams": "#table-teams",
    "/teams/data-science": "#table-team-workloads",
    "/rightsize": "#table-rightsize",
}


@dataclass
class Demo:
    service: FleetService
    url: str

    def report(self, days: float) -> Report:
        return build_report(self.service.analysis(self.service.window(days=days)))


@pytest.fixture(scope="module")
def demo() -> Iterator[Demo]:
    fleet = build_demo_fleet(seed=42, end=datetime(2026, 11, 20, tzinfo=UTC), days=8)
    service = demo_service(Settings(), fleet)
    with serve_app(create_app(service)) as url:
        yield Demo(service=service, url=url)


@pytest.fixture
def page() -> Iterator[tuple[Page, list[str]]]:
    with browser_page() as (p, errors):
        yield p, errors


def usd(value: float) -> str:
    return f"${value:,.2f}"


def hours(value: float | None) -> str:
    return "n/a" if value is None else f"{value:,.2f}"


def pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1%}"


def no_dash_errors(p: Page, errors: list[str]) -> None:
    assert p.locator(".dash-fe-error, .dash-error-card, .dash-debug-menu").count() == 0
    assert errors == []


def test_every_page_loads_without_errors(demo: Demo, page: tuple[Page, list[str]]) -> None:
    p, errors = page
    for path, ready in PAGES.items():
        p.goto(demo.url + path)
        p.wait_for_selector(ready, timeout=120_000)
        settle(p)
        assert "2026-11-19 00:00 – 2026-11-20 00:00 UTC" in p.inner_text(".gw-as-of")
        assert p.locator(".gw-banner").count() == 0
        no_dash_errors(p, errors)
        screenshot(p, "ui-" + (path.strip("/").replace("/", "-") or "overview"))
    p.goto(demo.url + "/")
    p.wait_for_selector("#kpi-gpus", timeout=60_000)
    settle(p)
    fleet = demo.report(1)["fleet"]
    assert p.inner_text("#kpi-gpus") == "96"
    assert p.inner_text("#kpi-waste") == usd(fleet["waste_usd"])
    assert p.inner_text("#kpi-cost") == usd(fleet["cost_usd"])
    assert p.inner_text("#kpi-efficiency") == pct(fleet["efficiency"])
    assert (
        p.inner_text("#kpi-pending") == "7"
    )  # two waiting for capacity, one for holes, one per other reason
    assert p.inner_text("#kpi-nodes-bad") == "1 / 1"
    # The ledger's six states are drawn in their colours, the waterfall ends on active spend.
    assert p.locator("#overview-ledger-chart .scatterlayer .trace").count() == 6
    assert p.locator("#overview-waterfall .bars .point").count() == 7
    no_dash_errors(p, errors)


def _check_usage_rows(shown: list[dict[str, str]], expected: list[dict[str, Any]], key: str) -> None:
    assert [r[key] for r in shown] == [e[key] for e in expected]
    for row, want in zip(shown, expected, strict=True):
        assert row["allocated_gpu_hours"] == hours(want["allocated_gpu_hours"])
        assert row["used_gpu_hours"] == hours(want["used_gpu_hours"])
        assert row["idle_gpu_hours"] == hours(want["idle_gpu_hours"])
        assert row["efficiency"] == pct(want["efficiency"])
        assert row["cost_usd"] == usd(want["cost_usd"])
        assert row["waste_usd"] == usd(want["waste_usd"])
        assert row["pods"] == str(want["pods"])


@pytest.mark.parametrize(("query", "days"), [("", 1), ("?window=7d", 7)])
def test_waste_and_teams_show_the_report_numbers(
    demo: Demo, page: tuple[Page, list[str]], query: str, days: float
) -> None:
    p, errors = page
    report = demo.report(days)
    p.goto(demo.url + "/waste" + query)
    p.wait_for_selector("#table-waste-teams", timeout=180_000)
    settle(p)
    assert p.inner_text("#kpi-waste") == usd(report["fleet"]["waste_usd"])
    assert p.inner_text("#kpi-stranded") == usd(report["fleet"]["stranded_cost_usd"])
    assert p.inner_text("#kpi-unallocated") == usd(report["fleet"]["unallocated_cost_usd"])
    _check_usage_rows(table_rows(p, "waste-teams"), report["teams"], "team")
    # The GPUs' energy and its cost (the demo's tariff, with PUE): the fleet's and each team's.
    assert p.inner_text("#kpi-energy") == f"{report['fleet']['energy_kwh']:,.1f} kWh"
    for row, want in zip(table_rows(p, "waste-teams"), report["teams"], strict=True):
        assert row["energy"] == f"{want['energy_kwh']:,.1f} kWh\n{usd(want['energy_cost_usd'])}"
    # Idle hours split by the framebuffer: a parked notebook's model (held), a hung job's (abandoned).
    for row, want in zip(table_rows(p, "waste-teams"), report["teams"], strict=True):
        assert row["held_idle_gpu_hours"] == hours(want["held_idle_gpu_hours"])
        assert row["abandoned_idle_gpu_hours"] == hours(want["abandoned_idle_gpu_hours"])
    idle_shown = table_rows(p, "waste-idle")
    by_pod = {(w["namespace"], w["pod"]): w for w in report["workloads"]}
    memory = {"held": 0, "abandoned": 0}
    for row in idle_shown:
        want = by_pod[(row["namespace"], row["pod"])]
        held, abandoned = want["held_idle_gpu_hours"], want["abandoned_idle_gpu_hours"]
        kind = (
            "held"
            if abandoned == 0
            else "abandoned"
            if held == 0
            else f"{held:,.2f} held · {abandoned:,.2f} abandoned"
        )
        assert row["idle_memory"] == f"{hours(want['idle_gpu_hours'])}\n{kind}"
        memory[kind] = memory.get(kind, 0) + 1
    assert memory["held"] > 0 and memory["abandoned"] > 0
    teams = {t["team"]: t for t in report["teams"]}
    assert teams["platform"]["abandoned_idle_gpu_hours"] > 0  # its stuck job keeps a bare CUDA context
    assert teams["data-science"]["held_idle_gpu_hours"] > 0  # its notebooks keep their models
    _check_usage_rows(table_rows(p, "waste-namespaces"), report["namespaces"][:25], "namespace")
    workloads = table_rows(p, "waste-workloads")
    for row, want in zip(workloads, report["workloads"][:25], strict=True):
        assert (row["namespace"], row["pod"], row["team"]) == (want["namespace"], want["pod"], want["team"])
        assert row["waste_usd"] == usd(want["waste_usd"])
        assert row["idle_gpu_hours"] == hours(want["idle_gpu_hours"])
    screenshot(p, f"ui-waste-{days:g}d")
    p.goto(demo.url + "/teams" + query)
    p.wait_for_selector("#table-teams", timeout=120_000)
    settle(p)
    teams = table_rows(p, "teams")
    _check_usage_rows(teams, report["teams"], "team")
    # Each team's month forecast over the share of its budget it spends (the demo's budgets).
    for row, want in zip(teams, report["teams"], strict=True):
        budget = want["budget_usd"]
        of_budget = "no budget"
        if budget is not None:
            of_budget = f"{want['forecast_month_usd'] / budget:.0%} of ${budget:,.0f}"
        assert row["budget"] == f"{usd(want['forecast_month_usd'])}\n{of_budget}"
    assert sum(not r["budget"].endswith("no budget") for r in teams) == 4
    # Each team's change since the window of the same length before: on screen and in the download.
    window = demo.service.window(days=days)
    earlier = Window(start=window.start - (window.end - window.start), end=window.start)
    expected = team_changes(report, build_report(demo.service.analysis(earlier)))
    allocated = expected["allocated_gpu_hours_change_ratio"].tolist()
    efficiency = expected["efficiency_change_ratio"].tolist()
    assert [r["allocated_gpu_hours_change_ratio"] for r in teams] == [change(v) for v in allocated]
    assert [r["efficiency_change_ratio"] for r in teams] == [points(v) for v in efficiency]
    # The day before is fully simulated; the week before (the fleet has 8 days) is mostly empty.
    assert any(not math.isnan(v) for v in efficiency) == (days == 1)
    csv = pd.read_csv(io.BytesIO(_download(p, "teams", "CSV")))
    # Downloads round ratios to 4 decimals (a hundredth of a percent).
    assert csv["allocated_gpu_hours_change_ratio"].tolist() == pytest.approx(
        [round(v, 4) for v in allocated], abs=1e-12, nan_ok=True
    )
    assert csv["efficiency_change_ratio"].tolist() == pytest.approx(
        [round(v, 4) for v in efficiency], abs=1e-12, nan_ok=True
    )
    no_dash_errors(p, errors)


def test_a_filter_changes_the_content_and_the_url_and_back_works(
    demo: Demo, page: tuple[Page, list[str]]
) -> None:
    p, errors = page
    p.goto(demo.url + "/waste")
    p.wait_for_selector("#table-waste-teams", timeout=120_000)
    settle(p)
    everyone = [r["team"] for r in table_rows(p, "waste-teams")]
    assert len(everyone) > 5
    choose(p, "filter-team", "robotics")
    wait_for_location(p, "/waste?team=robotics")
    settle(p)
    assert [r["team"] for r in table_rows(p, "waste-teams")] == ["robotics"]
    robotics = next(t for t in demo.report(1)["teams"] if t["team"] == "robotics")
    assert p.inner_text("#kpi-waste") == usd(robotics["waste_usd"])  # the ledger is the team's
    assert p.inner_text("#kpi-stranded") == "n/a"
    assert "team robotics" in p.inner_text(".gw-as-of")
    screenshot(p, "ui-waste-team-filter")
    # Navigation keeps the filter; back and forward restore the views.
    p.click(".gw-nav >> text=Teams")
    wait_for_location(p, "/teams?team=robotics")
    settle(p)
    assert [r["team"] for r in table_rows(p, "teams")] == ["robotics"]
    p.go_back()
    wait_for_location(p, "/waste?team=robotics")
    settle(p)
    assert [r["team"] for r in table_rows(p, "waste-teams")] == ["robotics"]
    p.go_back()
    wait_for_location(p, "/waste")
    settle(p)
    assert [r["team"] for r in table_rows(p, "waste-teams")] == everyone
    assert "all teams" in p.inner_text("#filter-team")
    p.go_forward()
    wait_for_location(p, "/waste?team=robotics")
    settle(p)
    assert [r["team"] for r in table_rows(p, "waste-teams")] == ["robotics"]
    # A window preset is a click; the page shows the 7-day window.
    p.click("#filter-window >> text=7d")
    wait_for_location(p, "/waste?window=7d&team=robotics")
    wait_until(
        p, "() => document.querySelector('.gw-as-of').innerText.includes('2026-11-13 00:00')", timeout=180_000
    )
    settle(p)
    no_dash_errors(p, errors)


def test_a_shared_link_restores_its_filters(demo: Demo, page: tuple[Page, list[str]]) -> None:
    p, errors = page
    p.goto(demo.url + "/capacity?pool=NVIDIA-L4&start=2026-11-19T12:00Z&end=2026-11-20T00:00Z")
    p.wait_for_selector("#capacity-holes .main-svg", timeout=120_000)
    # The as-of line is drawn by a callback of its own, which may come after the chart's.
    wait_until(
        p,
        "() => (document.querySelector('.gw-as-of')?.innerText || '').includes('2026-11-19 12:00')",
        timeout=120_000,
    )
    settle(p)
    assert "2026-11-19 12:00 – 2026-11-20 00:00 UTC" in p.inner_text(".gw-as-of")
    assert "pool NVIDIA-L4" in p.inner_text(".gw-as-of")
    assert p.is_checked("#filter-window input[value=custom]")
    assert p.input_value("#filter-start") == "2026-11-19T12:00Z"
    assert "NVIDIA-L4" in p.inner_text("#filter-pool")
    assert [r["pool"] for r in table_rows(p, "capacity-pools")] == ["NVIDIA-L4"]
    pending = table_rows(p, "capacity-pending")
    # Longest waiting first: the pod Kueue holds back (4 h), then the one no L4 node has room for (1.5 h).
    assert [(r["pod"], r["blocked_by"]) for r in pending] == [
        ("rerank-batch-0", "quota"),
        ("reindex-embed-0", "capacity"),
    ]
    screenshot(p, "ui-capacity-l4-custom-window")
    no_dash_errors(p, errors)


def _download(p: Page, table: str, label: str) -> bytes:
    with p.expect_download() as info:
        p.click(f"section:has(#table-{table}) button:has-text('{label}')")
    path = info.value.path()
    assert path is not None
    return path.read_bytes()


def test_csv_and_parquet_downloads_carry_the_report_rows(demo: Demo, page: tuple[Page, list[str]]) -> None:
    p, errors = page
    report = demo.report(1)
    p.goto(demo.url + "/waste")
    p.wait_for_selector("#table-waste-workloads", timeout=120_000)
    settle(p)
    csv = pd.read_csv(io.BytesIO(_download(p, "waste-workloads", "CSV")), keep_default_na=False)
    expected = report["workloads"]
    assert len(csv) == len(expected) > 25  # every row, not the 25 on screen
    assert list(csv["pod"]) == [w["pod"] for w in expected]
    assert list(csv["team"]) == [w["team"] for w in expected]
    # Showback rows: dollars to the cent, GPU-hours to 3 decimals, the window and price on each row.
    assert csv["waste_usd"].tolist() == pytest.approx([round(w["waste_usd"], 2) for w in expected], abs=1e-12)
    assert csv["idle_gpu_hours"].tolist() == pytest.approx(
        [round(w["idle_gpu_hours"], 3) for w in expected], abs=1e-12
    )
    assert set(csv["window_start"]) == {report["window"]["start"]} and set(csv["currency"]) == {"USD"}
    assert list(csv["idle_since"]) == [w["idle_since"] or "" for w in expected]
    teams = pd.read_parquet(io.BytesIO(_download(p, "waste-teams", "Parquet")))
    assert list(teams["team"]) == [t["team"] for t in report["teams"]]
    assert teams["cost_usd"].tolist() == pytest.approx(
        [round(t["cost_usd"], 2) for t in report["teams"]], abs=1e-12
    )
    p.goto(demo.url + "/health")
    p.wait_for_selector("#table-health-events", timeout=120_000)
    settle(p)
    events = pd.read_csv(io.BytesIO(_download(p, "health-events", "CSV")), keep_default_na=False)
    assert {"XID 79", "row-remap failure", "node NotReady", "GPUs not advertised"} <= set(events["event"])
    no_dash_errors(p, errors)


def test_the_heatmap_metric_and_a_team_drill_down(demo: Demo, page: tuple[Page, list[str]]) -> None:
    p, errors = page
    p.goto(demo.url + "/health")
    p.wait_for_selector("#health-heatmap .main-svg", timeout=120_000)
    settle(p)
    assert "utilization (%)" in p.inner_text("#health-heatmap")
    p.click("#health-metric >> text=temperature")
    wait_until(
        p,
        "() => document.querySelector('#health-heatmap').innerText.includes('temperature (°C)')",
        timeout=60_000,
    )
    settle(p)
    assert "XID 79" in p.inner_text("#health-heatmap")
    screenshot(p, "ui-health-temperature")
    p.goto(demo.url + "/teams")
    p.wait_for_selector("#table-teams", timeout=120_000)
    settle(p)
    p.click("#table-teams >> text=platform")
    wait_for_location(p, "/teams/platform")
    p.wait_for_selector("#table-team-workloads", timeout=60_000)
    settle(p)
    platform = next(t for t in demo.report(1)["teams"] if t["team"] == "platform")
    assert p.inner_text("#kpi-team-waste") == usd(platform["waste_usd"])
    assert {r["team"] for r in table_rows(p, "team-workloads")} == {"platform"}
    # Active, idle and unknown (no telemetry) held GPUs, and the used line.
    assert p.locator("#team-trend .scatterlayer .trace").count() == 4
    no_dash_errors(p, errors)


def test_the_right_size_page_shows_the_reports_recommendations(
    demo: Demo, page: tuple[Page, list[str]]
) -> None:
    p, errors = page
    report = demo.report(1)
    p.goto(demo.url + "/rightsize?window=24h")
    p.wait_for_selector("#table-rightsize", timeout=180_000)
    settle(p)
    assert p.inner_text("#kpi-rightsize-savings") == usd(report["rightsizing"]["monthly_savings_usd"])
    assert p.inner_text("#kpi-rightsize-freed") == f"{report['rightsizing']['gpus_freed']:,}"
    changes = ("gpus", "mig", "time_slice", "product")
    with_change = [w for w in report["workloads"] if w["recommendation"]["kind"] in changes]
    assert p.inner_text("#kpi-rightsize-changes") == f"{len(with_change):,}"
    # The biggest savings first, each row as the report has it.
    want = sorted(with_change, key=lambda w: -w["recommendation"]["monthly_savings_usd"])
    shown = table_rows(p, "rightsize")
    assert len(shown) == min(25, len(report["workloads"])) and len(want) > 5
    for row, w in zip(shown, want, strict=False):
        rec = w["recommendation"]
        assert (row["namespace"], row["pod"]) == (w["namespace"], w["pod"])
        assert (row["recommendation_kind"], row["recommendation_target"]) == (rec["kind"], rec["target"])
        assert row["monthly_savings_usd"] == usd(rec["monthly_savings_usd"])
        assert row["recommendation_reason"] == rec["reason"]
    packing = table_rows(p, "rightsize-packing")
    assert [(r["pool"], r["gpus_freed"]) for r in packing] == [
        (x["pool"], str(x["gpus_freed"])) for x in report["rightsizing"]["pools"]
    ]
    csv = pd.read_csv(io.BytesIO(_download(p, "rightsize", "CSV")))
    assert len(csv) == len(report["workloads"])
    assert csv["monthly_savings_usd"].sum() == pytest.approx(
        report["rightsizing"]["monthly_savings_usd"], abs=0.01 * len(csv)
    )
    no_dash_errors(p, errors)
