"""The demo dashboard in a real headless Chromium: it loads, shows the fleet's numbers, no errors."""

from datetime import UTC, datetime

import pytest

from gpuwatch.config import Settings
from gpuwatch.service import FleetService
from gpuwatch.sources.simulated import build_demo_fleet
from gpuwatch.ui import create_app
from tests.integration.browser import browser_page, screenshot
from tests.integration.ui_server import serve_app

pytestmark = pytest.mark.integration


def test_overview_shows_the_simulated_fleet() -> None:
    fleet = build_demo_fleet(seed=42, end=datetime(2026, 11, 20, tzinfo=UTC), days=1)
    service = FleetService.demo(Settings(), fleet)
    snap = service.snapshot()
    with serve_app(create_app(service)) as url, browser_page() as (page, errors):
        page.goto(url + "/")
        page.wait_for_selector("#kpi-gpus", timeout=30_000)
        assert page.inner_text(".gw-brand") == "gpuwatch"
        assert page.inner_text("#kpi-gpus") == "80"
        assert page.inner_text("#kpi-nodes") == str(len(fleet.nodes))
        assert page.inner_text("#kpi-allocated") == f"{snap.gpus_allocated_now:.2f}"
        assert page.inner_text("#kpi-pending") == "2"
        assert page.inner_text("#kpi-nodes-bad") == "1 / 1"
        page.wait_for_selector("#overview-pool-chart .main-svg", timeout=30_000)
        bars = page.locator("#overview-pool-chart g.point").count()
        assert bars == 8  # allocated + free for each of the four pools
        screenshot(page, "overview-demo")
        assert errors == []
