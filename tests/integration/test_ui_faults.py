"""A source that accepts connections and never answers, while the dashboard is open (SPEC §7): within
seconds every card says what it waits for (the source's URL and the seconds waited), at the dashboard's
deadline a banner names the source, and once it answers again the next load shows the numbers, with no
restart. Prometheus and the Kubernetes API server are real (a backfilled Prometheus, the simulated API
server) behind the fault-injection proxy; the dashboard is the one `gpuwatch serve` builds."""

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from playwright.sync_api import Page

from gpuwatch.core.config import Settings, UiSettings, load_settings
from gpuwatch.core.errors import KubernetesError
from gpuwatch.core.model import SourceWait
from gpuwatch.read.service import FleetService, LiveSources, MultiClusterSources
from gpuwatch.sim import SimulatedFleet, build_demo_fleet
from gpuwatch.sim.demoservice import SimulatedSources, demo_settings
from gpuwatch.sim.kubeapi import KubeApiServer, write_kubeconfig
from gpuwatch.sources.kubernetes import ClusterState
from gpuwatch.ui import create_app
from gpuwatch.ui.filters import format_time
from tests.integration.browser import browser_page, screenshot, wait_until
from tests.integration.conftest import DEMO_METRICS
from tests.integration.faultproxy import FaultProxy
from tests.integration.prom import BackfilledPrometheus, PrometheusFactory
from tests.integration.ui_server import serve_app

pytestmark = pytest.mark.integration
END = datetime(2026, 11, 20, tzinfo=UTC)
TOKEN = "faults-token"
DEADLINE = 6  # the dashboard's (ui.deadline), short to keep the test fast
# Each read's own deadline is longer: from the dashboard's on, the source is still being waited for.
CONFIG = f"prometheus: {{timeout: 20s}}\nkubernetes: {{timeout: 20s}}\nui: {{deadline: {DEADLINE}s}}\n"
HAS_TEXT = "text => document.body.innerText.includes(text)"


@pytest.fixture(scope="module")
def fleet() -> SimulatedFleet:
    return build_demo_fleet(seed=5, end=END, days=0.25, gpus=24)


@pytest.fixture(scope="module")
def prom(fleet: SimulatedFleet, prometheus_factory: PrometheusFactory) -> BackfilledPrometheus:
    return prometheus_factory(fleet, layout="servicemonitor", metrics=DEMO_METRICS)


@pytest.fixture(scope="module")
def kube(fleet: SimulatedFleet) -> Iterator[KubeApiServer]:
    with KubeApiServer(fleet, token=TOKEN) as server:
        yield server


def port_of(url: str) -> int:
    port = urlsplit(url).port
    assert port is not None
    return port


@contextmanager
def dashboard(tmp_path: Path, prometheus_url: str, kube: KubeApiServer, kube_url: str) -> Iterator[str]:
    """`gpuwatch serve` over the Prometheus and the API server at these URLs (CONFIG's deadlines):
    the live service following the cluster by watches, its default view warming at once."""
    kubeconfig = tmp_path / "kubeconfig"
    write_kubeconfig(kubeconfig, server_url=kube_url, token=TOKEN, ca_pem=kube.ca_pem)
    config = tmp_path / "gpuwatch.yaml"
    config.write_text(CONFIG)
    settings = load_settings(
        config_path=str(config),
        flags={"prometheus_url": prometheus_url, "kubeconfig": str(kubeconfig)},
        env={},
    )
    service = FleetService.live(settings, watch_cluster=True)
    try:
        with serve_app(create_app(service)) as url:
            yield url
    finally:
        sources = service.sources
        assert isinstance(sources, LiveSources)
        for cache in (sources.cluster, sources.kueue):
            if cache is not None:
                cache.stop()


def fleet_query(fleet: SimulatedFleet) -> str:
    """The Overview of the simulated fleet's window (a custom window: the fleet is not of today)."""
    w = fleet.window
    return f"/?window=custom&start={format_time(w.start)}&end={format_time(w.end)}"


def hang_then_answer(page: Page, base: str, query: str, proxy: FaultProxy, what: str, name: str) -> None:
    """With `proxy` hanging: the Overview says it waits for `what` within 10 s, and names it in a banner
    at the deadline; then the proxy relays, and the page reloaded shows the fleet's dollars."""
    opened = time.monotonic()
    page.goto(base + query)
    wait_until(page, HAS_TEXT, arg=f"waiting for {what} · ", timeout=10_000)
    assert time.monotonic() - opened < 10
    kpis = page.inner_text("#overview-kpis")
    assert kpis.startswith(f"waiting for {what} · ") and kpis.endswith(" s")
    for chart in ("#overview-ledger-chart", "#overview-waterfall"):  # a figure saying so, never bare axes
        assert "waiting for" in page.inner_text(chart)
        assert page.locator(f"{chart} .xtick").count() == 0
    assert f"waiting for {what}" in page.inner_text("#overview-top-waste")
    screenshot(page, f"ui-faults-{name}-waiting")

    wait_until(page, HAS_TEXT, arg=f"{what}: no answer within {DEADLINE}s", timeout=(DEADLINE + 15) * 1000)
    banner = page.inner_text(".gw-banner")
    assert banner.startswith("Still waiting since ") and "Nothing was fetched yet" in banner
    assert proxy.url("https" if what.startswith("the Kubernetes") else "http") in banner
    screenshot(page, f"ui-faults-{name}-deadline")

    proxy.mode = "relay"
    page.reload()
    wait_until(
        page, "() => (document.getElementById('kpi-cost')?.innerText || '').startsWith('$')", timeout=60_000
    )
    assert "no answer within" not in page.inner_text("body")
    screenshot(page, f"ui-faults-{name}-answered")


def test_a_hung_prometheus_is_named_then_its_numbers_come_back(
    fleet: SimulatedFleet, prom: BackfilledPrometheus, kube: KubeApiServer, tmp_path: Path
) -> None:
    with (
        FaultProxy("127.0.0.1", port_of(prom.url), mode="hang") as proxy,
        dashboard(tmp_path, proxy.url(), kube, kube.url) as base,
        browser_page(1280, 900) as (page, errors),
    ):
        hang_then_answer(page, base, fleet_query(fleet), proxy, f"Prometheus at {proxy.url()}", "prometheus")
        assert errors == []


def test_a_hung_kubernetes_api_is_named_then_its_numbers_come_back(
    fleet: SimulatedFleet, prom: BackfilledPrometheus, kube: KubeApiServer, tmp_path: Path
) -> None:
    with (
        FaultProxy(kube.host, kube.port, mode="hang") as proxy,
        dashboard(tmp_path, prom.url, kube, proxy.url("https")) as base,
        browser_page(1280, 900) as (page, errors),
    ):
        what = f"the Kubernetes API at {proxy.url('https')}"
        hang_then_answer(page, base, fleet_query(fleet), proxy, what, "kubernetes")
        assert errors == []


class SilentCluster(SimulatedSources):
    """A cluster whose API server accepts every list and answers none: each list is under way (named by
    waiting(), as LiveSources name theirs) until its deadline, then fails."""

    URL = "https://10.9.0.1:6443"

    def __init__(self, fleet: SimulatedFleet, *, deadline_seconds: float) -> None:
        super().__init__(fleet)
        self.deadline_seconds = deadline_seconds
        self.stop = threading.Event()
        self._since: float | None = None

    def cluster_state(self) -> ClusterState:
        self._since = time.monotonic()
        try:
            self.stop.wait(self.deadline_seconds)
        finally:
            self._since = None
        raise KubernetesError(
            f"kubernetes API at {self.URL} unreachable: no answer within {self.deadline_seconds:g}s"
        )

    def node_state(self, *, namespaces: bool = False) -> ClusterState:
        return self.cluster_state()

    def waiting(self) -> list[SourceWait]:
        since = self._since
        if since is None:
            return []
        return [
            SourceWait(source="kubernetes", url=self.URL, seconds=time.monotonic() - since, cluster="ap-1")
        ]


def test_one_cluster_of_several_not_answering_gets_its_own_banner() -> None:
    fleets = {n: build_demo_fleet(seed=s, end=END, days=1, gpus=16) for n, s in (("eu-1", 3), ("us-1", 4))}
    silent = SilentCluster(fleets["eu-1"], deadline_seconds=DEADLINE + 6)
    sources = MultiClusterSources({**{n: SimulatedSources(f) for n, f in fleets.items()}, "ap-1": silent})
    settings = replace(demo_settings(Settings(), end=END), ui=UiSettings(deadline_seconds=DEADLINE))
    service = FleetService(settings=settings, sources=sources)
    what = f"the Kubernetes API at {SilentCluster.URL} (cluster ap-1)"
    try:
        with serve_app(create_app(service)) as base, browser_page(1280, 900) as (page, errors):
            page.goto(base + "/capacity")
            wait_until(page, HAS_TEXT, arg=f"waiting for {what} · ", timeout=10_000)
            page.wait_for_selector("#cluster-late-ap-1", timeout=(DEADLINE + 10) * 1000)
            banner = page.inner_text("#cluster-late-ap-1")
            assert banner.startswith("Cluster ap-1 not answering.")
            assert f"{what}: no answer within {DEADLINE}s" in banner
            assert "Data source" not in page.inner_text("body")  # the fleet's other clusters are not blamed
            screenshot(page, "ui-faults-cluster-deadline")
            # Given up at its own deadline: the other clusters' numbers, and the cluster not read.
            page.wait_for_selector("#cluster-banner-ap-1", timeout=60_000)
            page.wait_for_selector("#table-capacity-clusters", timeout=60_000)
            assert page.locator("#cluster-late-ap-1").count() == 0
            assert errors == []
    finally:
        silent.stop.set()


# What the page says within 15 s of each other fault (docs/faults.md): a dripping Prometheus is waited for
# as a silent one is; one that resets, cuts its answer short or answers garbage fails at once, in the
# banner. The Kubernetes API is followed by watches, which say it fails once they have failed for 10 s.
OTHER_FAULTS = {"drip": "waiting for {what}", "reset": "{url}", "truncate": "{url}", "garbage": "{url}"}


@pytest.mark.parametrize("source", ["prometheus", "kubernetes"])
def test_each_other_fault_is_named_on_the_page_and_the_numbers_come_back(
    fleet: SimulatedFleet, prom: BackfilledPrometheus, kube: KubeApiServer, tmp_path: Path, source: str
) -> None:
    target = urlsplit(prom.url) if source == "prometheus" else urlsplit(kube.url)
    with FaultProxy("127.0.0.1", port_of(target.geturl())) as proxy:
        url = proxy.url() if source == "prometheus" else proxy.url("https")
        what = f"Prometheus at {url}" if source == "prometheus" else f"the Kubernetes API at {url}"
        urls = (url, kube.url) if source == "prometheus" else (prom.url, url)
        with dashboard(tmp_path, urls[0], kube, urls[1]) as base, browser_page(1280, 900) as (page, errors):
            w = fleet.window
            for k, (fault, said) in enumerate(OTHER_FAULTS.items()):
                proxy.mode = fault
                if source == "kubernetes":  # the watches serve what they hold until it fails for 10 s
                    time.sleep(11)
                # A window of its own per fault: a view computed before is not read again.
                end = w.end - (k + 1) * (w.end - w.start) / 8
                page.goto(f"{base}/?window=custom&start={format_time(w.start)}&end={format_time(end)}")
                expected = said.format(what=what, url=url) if source == "prometheus" else url
                wait_until(page, HAS_TEXT, arg=expected, timeout=15_000)
                if expected == url:
                    assert url in page.inner_text(".gw-banner"), fault
                screenshot(page, f"ui-faults-{source}-{fault}")
                proxy.mode = "relay"
                page.reload()
                wait_until(
                    page,
                    "() => (document.getElementById('kpi-cost')?.innerText || '').startsWith('$')",
                    timeout=60_000,
                )
            assert errors == []
