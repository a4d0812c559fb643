"""`gpuwatch export`: fresh gauges per scrape, golden exposition text, a failing source marked down."""

import io
import os
import re
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from gpuwatch.config import Settings
from gpuwatch.errors import PrometheusError
from gpuwatch.exporter import ExportLoop, GpuwatchCollector
from gpuwatch.model import Budgets, DatedPrice, PriceBook, Window
from gpuwatch.series import Family, published_series, write_openmetrics
from gpuwatch.service import FleetService, SimulatedSources
from gpuwatch.sources.kubernetes import ClusterState
from gpuwatch.sources.simulated import build_demo_fleet

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "exporter.txt"
# Self-monitoring values change every run; everything else is a pure function of the fleet.
VOLATILE = re.compile(
    r"^gpuwatch_(collect_duration_seconds|source_last_success_timestamp_seconds)\b.*$", re.M
)


class FlakySources(SimulatedSources):
    """The simulated fleet, with Prometheus failing once `broken` is set."""

    broken = False

    def gpu_samples(self, window: Window, state: ClusterState) -> pd.DataFrame:
        if self.broken:
            raise PrometheusError("prometheus at http://prometheus:9090 unreachable: connection refused")
        return super().gpu_samples(window, state)


@pytest.fixture(scope="module")
def sources() -> FlakySources:
    return FlakySources(build_demo_fleet(seed=7, end=datetime(2026, 11, 20, tzinfo=UTC), days=0.1, gpus=16))


def _scrape(loop: ExportLoop) -> str:
    registry = CollectorRegistry()
    registry.register(GpuwatchCollector(loop))
    return generate_latest(registry).decode()


def test_exposition_matches_the_golden_file(sources: FlakySources) -> None:
    sources.broken = False
    loop = ExportLoop(FleetService.demo(Settings(), sources.fleet))
    result = loop.run_once()
    assert result.error == ""
    text = VOLATILE.sub("", _scrape(loop))
    if os.environ.get("GPUWATCH_UPDATE_GOLDEN"):
        GOLDEN.write_text(text)
    assert text == GOLDEN.read_text()


def test_published_numbers_are_the_fleet_at_its_last_sample(sources: FlakySources) -> None:
    loop = ExportLoop(FleetService.demo(Settings(), sources.fleet))
    loop.run_once()
    families = {f.name: f for f in text_string_to_metric_families(_scrape(loop))}
    allocation = families["gpuwatch_pod_gpu_allocation"].samples
    running = [p for p in sources.cluster_state().gpu_pods() if p.phase == "Running"]
    assert {s.labels["pod"] for s in allocation} == {p.name for p in running}
    node_states = families["gpuwatch_node_gpus"].samples
    capacity = {s.labels["node"]: s.value for s in families["gpuwatch_node_gpu_capacity"].samples}
    for node, gpus in capacity.items():
        assert sum(s.value for s in node_states if s.labels["node"] == node) == pytest.approx(gpus)
    assert {s.labels["state"] for s in node_states} == {
        "unavailable",
        "stranded",
        "unallocated",
        "allocated_unknown",
        "allocated_idle",
        "allocated_active",
    }
    pending = families["gpuwatch_pending_pod_gpus"].samples
    assert {s.labels["pod"]: s.labels["blocked_by"] for s in pending} == {
        "pretrain-70b-0": "capacity",
        "reindex-embed-0": "capacity",
        "eval-b200-0": "affinity",
        "sweep-h100-0": "taint",
        "mig-7g-eval-0": "mig_profile",
        "rerank-batch-0": "quota",
    }
    info = {s.labels["pod"]: s.labels for s in families["gpuwatch_pending_pod_info"].samples}
    assert info["sweep-h100-0"]["reason"] == (
        "every GPU node it may use has a taint it does not tolerate (dedicated=llm-training:NoSchedule)"
    )
    assert info["sweep-h100-0"]["tolerations"] == "nvidia.com/gpu:NoSchedule op=Exists"
    assert (
        info["rerank-batch-0"]["scheduler_message"]
        == "Scheduling is blocked due to non-empty scheduling gates"
    )
    tainted = {
        (s.labels["pool"], s.labels["taint"]): s.value
        for s in families["gpuwatch_pool_tainted_nodes"].samples
    }
    assert (
        tainted[("NVIDIA-H100-80GB-HBM3", "dedicated=llm-training:NoSchedule")] == 1.0
    )  # the fixture's one node
    up = {s.labels["source"]: s.value for s in families["gpuwatch_source_up"].samples}
    assert up == {"prometheus": 1.0, "kubernetes": 1.0}
    assert families["gpuwatch_build_info"].samples[0].value == 1.0


def test_a_failing_source_is_marked_down_and_the_last_series_stay(sources: FlakySources) -> None:
    service = FleetService(settings=FleetService.demo().settings, sources=sources)
    loop = ExportLoop(service)
    sources.broken = False
    loop.run_once()
    before = _scrape(loop)
    sources.broken = True
    try:
        service._cache.clear()
        result = loop.run_once()
    finally:
        sources.broken = False
    assert result.error.startswith("prometheus at http://prometheus:9090 unreachable")
    after = _scrape(loop)
    up = {
        s.labels["source"]: s.value
        for f in text_string_to_metric_families(after)
        if f.name == "gpuwatch_source_up"
        for s in f.samples
    }
    assert up == {"prometheus": 0.0, "kubernetes": 1.0}
    # The previous cycle's series are still served (stale, not zero, not gone).
    assert (
        VOLATILE.sub("", before).split("# HELP gpuwatch_source_up")[0]
        == VOLATILE.sub("", after).split("# HELP gpuwatch_source_up")[0]
    )


def test_openmetrics_history_writes_each_series_whole_and_in_time_order() -> None:
    """Backfill text: one block per label set in first-seen order, its samples by time, values in
    shortest round-trip form, label values escaped; `end_of_file=False` leaves room for more."""
    t = pd.to_datetime(["2026-11-20T00:02:00Z", "2026-11-20T00:00:00Z", "2026-11-20T00:01:00Z"] * 2)
    samples = pd.DataFrame(
        {
            "timestamp": t,
            "pool": ['a"b', "c", 'a"b', "c", 'a"b', "c"],
            "value": [0.1 + 0.2, 1.0, 2.0, 3.0, 4.0, 5.0],
        }
    )
    out = io.StringIO()
    family = Family("gpuwatch_x", "An example.", ("pool",), samples)
    assert write_openmetrics([family], out, offset_seconds=30.0, end_of_file=False) == 6
    assert out.getvalue() == (
        "# HELP gpuwatch_x An example.\n# TYPE gpuwatch_x gauge\n"
        'gpuwatch_x{pool="a\\"b"} 4.0 1795132830.000\n'
        'gpuwatch_x{pool="a\\"b"} 2.0 1795132890.000\n'
        'gpuwatch_x{pool="a\\"b"} 0.30000000000000004 1795132950.000\n'
        'gpuwatch_x{pool="c"} 1.0 1795132830.000\n'
        'gpuwatch_x{pool="c"} 5.0 1795132890.000\n'
        'gpuwatch_x{pool="c"} 3.0 1795132950.000\n'
    )


def test_published_prices_and_team_costs_are_those_in_force_at_each_sample(sources: FlakySources) -> None:
    """A price change inside a backfilled window: each sample's price and team cost use the rate then."""
    window = Window(
        start=datetime(2026, 11, 19, 22, tzinfo=UTC), end=datetime(2026, 11, 20, tzinfo=UTC), step_seconds=600
    )
    change = datetime(2026, 11, 19, 23, tzinfo=UTC)
    pools = sorted(FleetService.demo(Settings(), sources.fleet).analysis(window).nodes["pool"].unique())
    dated = (
        DatedPrice(start=window.start, usd_per_gpu_hour=3.0),
        DatedPrice(start=change, usd_per_gpu_hour=1.0),
    )
    settings = Settings(pricing=PriceBook(products={pool: dated for pool in pools}))
    analysis = FleetService.demo(settings, sources.fleet).analysis(window)
    families = {f.name: f.samples for f in published_series(analysis, last_only=False)}
    prices = families["gpuwatch_pool_price_usd_per_gpu_hour"]
    before = prices["timestamp"] < pd.Timestamp(change)
    assert set(prices.loc[before, "value"]) == {3.0} and set(prices.loc[~before, "value"]) == {1.0}
    held = families["gpuwatch_team_gpus"]
    allocated = held[held["state"].str.startswith("allocated_")].groupby("timestamp")["value"].sum()
    cost = families["gpuwatch_team_cost_usd_per_hour"].groupby("timestamp")["value"].sum()
    rate = pd.Series(np.where(allocated.index < pd.Timestamp(change), 3.0, 1.0), index=allocated.index)
    assert allocated.min() > 0
    pd.testing.assert_series_equal(cost, allocated * rate, check_names=False)


def test_budgets_from_the_config_are_published_for_the_idle_spend_alert(sources: FlakySources) -> None:
    sources.broken = False
    budgets = Budgets(monthly_usd={"research": 20_000.0}, idle_usd_per_hour={"research": 5.0, "vision": 0.5})
    loop = ExportLoop(FleetService.demo(Settings(budgets=budgets), sources.fleet))
    loop.run_once()
    families = {f.name: f for f in text_string_to_metric_families(_scrape(loop))}
    monthly = families["gpuwatch_team_monthly_budget_usd"].samples
    idle = families["gpuwatch_team_idle_budget_usd_per_hour"].samples
    assert {s.labels["team"]: s.value for s in monthly} == {"research": 20_000.0}
    assert {s.labels["team"]: s.value for s in idle} == {"research": 5.0, "vision": 0.5}
