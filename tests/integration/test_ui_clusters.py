"""A fleet of several clusters in the UI: a cluster filter in the URL, a Clusters table, and a banner for a
cluster whose API server cannot be read while the others' pages keep working."""

from datetime import UTC, datetime

import pytest

from gpuwatch.core.config import Settings
from gpuwatch.core.errors import KubernetesError
from gpuwatch.read.service import FleetService, MultiClusterSources
from gpuwatch.sim import build_demo_fleet
from gpuwatch.sim.demoservice import SimulatedSources, demo_settings
from gpuwatch.sources.kubernetes import ClusterState
from gpuwatch.ui import create_app
from tests.integration.browser import browser_page, choose, screenshot, settle, table_rows, wait_for_location
from tests.integration.ui_server import serve_app

pytestmark = pytest.mark.integration
END = datetime(2026, 11, 20, tzinfo=UTC)


class DownSources(SimulatedSources):
    """A cluster whose API server refuses every list (a fault a real test server is not made to give)."""

    def cluster_state(self) -> ClusterState:
        raise KubernetesError("kubernetes API at https://10.9.0.1:6443 unreachable: connection refused")

    def node_state(self, *, namespaces: bool = False) -> ClusterState:
        return self.cluster_state()


def test_the_cluster_filter_table_and_banner() -> None:
    fleets = {
        name: build_demo_fleet(seed=seed, end=END, days=2, gpus=40)
        for name, seed in (("eu-1", 3), ("us-1", 4))
    }
    sources = MultiClusterSources(
        {**{n: SimulatedSources(f) for n, f in fleets.items()}, "ap-1": DownSources(fleets["eu-1"])}
    )
    service = FleetService(settings=demo_settings(Settings(), end=END), sources=sources)
    gpus = {n: sum(node.gpu_count for node in f.nodes) for n, f in fleets.items()}
    with serve_app(create_app(service)) as url, browser_page(1440, 1000) as (page, errors):
        page.goto(url + "/capacity")
        page.wait_for_selector("#table-capacity-clusters", timeout=180_000)
        settle(page)
        rows = {r["cluster"]: r for r in table_rows(page, "capacity-clusters")}
        assert sorted(rows) == ["ap-1", "eu-1", "us-1"]
        assert rows["eu-1"]["gpus"] == str(gpus["eu-1"]) and rows["eu-1"]["status"] == "read"
        assert rows["ap-1"]["status"].startswith(
            "not read: kubernetes API at https://10.9.0.1:6443 unreachable"
        )
        banner = page.inner_text("#cluster-banner-ap-1")
        assert "Cluster ap-1 not read." in banner and "the other clusters' numbers are complete" in banner
        assert page.is_visible("#filter-cluster-box")
        screenshot(page, "ui-clusters-capacity")

        choose(page, "filter-cluster", "eu-1")
        wait_for_location(page, "/capacity?cluster=eu-1")
        page.click(".gw-nav a[href^='/?']")
        wait_for_location(page, "/?cluster=eu-1")
        page.wait_for_selector("#kpi-gpus", timeout=60_000)
        settle(page)
        assert page.inner_text("#kpi-gpus") == str(gpus["eu-1"])
        assert page.locator("#cluster-banner-ap-1").count() == 0  # not a cluster this page shows
        page.goto(url + "/?cluster=eu-1&cluster=us-1")
        page.wait_for_selector("#kpi-gpus", timeout=60_000)
        settle(page)
        assert page.inner_text("#kpi-gpus") == str(gpus["eu-1"] + gpus["us-1"])
        assert errors == []
