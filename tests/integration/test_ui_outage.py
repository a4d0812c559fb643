"""A source failing while the UI is open: a banner with the last good time, and the pages keep working."""

from datetime import UTC, datetime

import pandas as pd
import pytest

from gpuwatch.core.config import Settings
from gpuwatch.core.errors import PrometheusError
from gpuwatch.core.model import KueueState, SourceWait, Window
from gpuwatch.read.devicehealth import health_samples
from gpuwatch.read.service import FleetService
from gpuwatch.sim import build_demo_fleet
from gpuwatch.sim.demoservice import SimulatedSources, demo_settings
from gpuwatch.sources.kubernetes import ClusterState
from gpuwatch.ui import create_app
from tests.integration.browser import (
    browser_page,
    screenshot,
    settle,
    table_rows,
    wait_for_location,
    wait_until,
)
from tests.integration.ui_server import serve_app

pytestmark = pytest.mark.integration


class FlakySources:
    """The demo fleet's sources, failing like an unreachable Prometheus while `failing` is set."""

    simulated = False  # read as a live Prometheus is

    def __init__(self, inner: SimulatedSources) -> None:
        self.inner = inner
        self.failing = False

    def _check(self) -> None:
        if self.failing:
            raise PrometheusError("prometheus at http://prometheus:9090 is unreachable (simulated outage)")

    def cluster_state(self) -> ClusterState:
        self._check()
        return self.inner.cluster_state()

    def gpu_samples(self, window: Window, state: ClusterState) -> pd.DataFrame:
        self._check()
        return self.inner.gpu_samples(window, state)

    def allocation_history(self, window: Window) -> pd.DataFrame | None:
        self._check()
        return self.inner.allocation_history(window)

    def take_warnings(self) -> list[str]:
        return self.inner.take_warnings()

    def node_state(self, *, namespaces: bool = False) -> ClusterState:
        self._check()
        return self.inner.node_state(namespaces=namespaces)

    def kueue_state(self) -> KueueState:
        return self.inner.kueue_state()

    def now(self) -> datetime:
        return self.inner.now()

    def history_start(self) -> datetime | None:
        return self.inner.history_start()

    def recorded(self) -> None:
        return None

    def waiting(self) -> list[SourceWait]:
        return []

    def gpu_health(self, window: Window) -> pd.DataFrame:
        self._check()
        return health_samples(self.inner, window)


def _figures(rows: list[dict[str, str]]) -> list[dict[str, str]]:
    """The cells' text without its whitespace: a two-line cell ("4.0 kWh", "$0.63") reads with or without
    the line break, as Chromium happens to have laid it out when it is read."""
    return [{column: "".join(text.split()) for column, text in row.items()} for row in rows]


def test_a_failing_source_shows_the_stale_banner_and_the_pages_keep_working() -> None:
    fleet = build_demo_fleet(seed=42, end=datetime(2026, 11, 20, tzinfo=UTC), days=8)
    sources = FlakySources(SimulatedSources(fleet))
    service = FleetService(settings=demo_settings(Settings()), sources=sources)
    app = create_app(service, refresh_seconds=2)
    with serve_app(app) as url, browser_page() as (page, errors):
        page.goto(url + "/waste")
        page.wait_for_selector("#table-waste-teams", timeout=120_000)
        settle(page)
        assert page.locator(".gw-banner").count() == 0
        before = _figures(table_rows(page, "waste-teams"))

        sources.failing = True
        # A window nobody computed yet needs the source: the banner, and the last good data meanwhile.
        page.click("#filter-window >> text=7d")
        wait_for_location(page, "/waste?window=7d")
        page.wait_for_selector(".gw-banner", timeout=60_000)
        settle(page)
        banner = page.inner_text(".gw-banner")
        assert "Data source failing since" in banner
        assert "unreachable (simulated outage)" in banner
        assert "Showing the last good data, fetched" in banner
        assert "2026-11-19 00:00 – 2026-11-20 00:00 UTC" in banner
        assert _figures(table_rows(page, "waste-teams")) == before
        screenshot(page, "ui-outage-waste")

        # Every page renders with the banner; device health (refetched after 2 s) shows its last values.
        for path, ready in (
            ("/health", "#health-heatmap .main-svg"),
            ("/teams", "#table-teams"),
            ("/capacity", "#capacity-holes .main-svg"),
            ("/", "#overview-ledger-chart .main-svg"),
        ):
            page.wait_for_timeout(2_100)
            if path == "/":
                page.goto(url + "/?window=7d")
            else:
                page.click(f".gw-nav a[href^='{path}']")
            page.wait_for_selector(ready, timeout=60_000)
            page.wait_for_selector(".gw-banner", timeout=60_000)
            settle(page)
            assert "Data source failing" in page.inner_text(".gw-banner")
        assert page.inner_text("#kpi-gpus") == "96"
        screenshot(page, "ui-outage-overview")
        # Filters still work on the data at hand.
        page.goto(url + "/teams?window=7d&team=vision")
        page.wait_for_selector("#table-teams", timeout=60_000)
        settle(page)
        assert [r["team"] for r in table_rows(page, "teams")] == ["vision"]

        sources.failing = False
        page.wait_for_timeout(2_100)
        page.goto(url + "/health?window=7d")
        page.wait_for_selector("#health-heatmap .main-svg", timeout=120_000)
        settle(page)
        # The 7-day view comes in and device health refreshes: the banner is gone.
        wait_until(
            page,
            "() => document.querySelector('.gw-as-of').innerText.includes('2026-11-13 00:00')"
            " && !document.querySelector('.gw-banner')",
            timeout=120_000,
        )
        assert errors == []
