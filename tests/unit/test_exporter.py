"""`gpuwatch export`: fresh gauges per scrape, golden exposition text, a failing source marked down."""

import io
import os
import re
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

import gpuwatch.read.service as service_module
from gpuwatch.analytics.queuetables import QUEUE_STATE_COLUMNS, queue_states
from gpuwatch.core.config import ClusterSettings, Settings
from gpuwatch.core.errors import ConfigError, PrometheusError
from gpuwatch.core.model import Budgets, DatedPrice, PriceBook, Window
from gpuwatch.read.series import Family, published_series, write_openmetrics
from gpuwatch.read.service import FleetService
from gpuwatch.sim import build_demo_fleet
from gpuwatch.sim.demoservice import SimulatedSources, demo_service
from gpuwatch.sources import ownseries
from gpuwatch.sources.kubernetes import ClusterState
from gpuwatch.surfaces.exporter import ExportLoop, GpuwatchCollector, collector, serve_exporter

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
    loop = ExportLoop(demo_service(Settings(), sources.fleet))
    result = loop.run_once()
    assert result.error == ""
    text = VOLATILE.sub("", _scrape(loop))
    if os.environ.get("GPUWATCH_UPDATE_GOLDEN"):
        GOLDEN.write_text(text)
    assert text == GOLDEN.read_text()


def test_one_named_cluster_stamps_its_name_on_every_series(sources: FlakySources) -> None:
    sources.broken = False
    settings = replace(Settings(), clusters=(ClusterSettings(name="eu-1"),))
    service = demo_service(settings, sources.fleet)
    loop = ExportLoop(service)
    loop.run_once()
    registry = CollectorRegistry()
    registry.register(GpuwatchCollector(loop, cluster=service.settings.cluster_name))
    stamped = text_string_to_metric_families(generate_latest(registry).decode())
    plain = {f.name: f for f in text_string_to_metric_families(_scrape(loop))}
    count = 0
    for family in stamped:
        want = [(s.labels, s.value) for s in plain[family.name].samples]
        got = [(s.labels, s.value) for s in family.samples]
        assert all(labels.pop("cluster") == "eu-1" for labels, _ in got), family.name
        if family.name != "gpuwatch_collect_duration_seconds":
            assert got == want, family.name
        count += len(got)
    assert count > 400
    # An exporter runs in one cluster: a list of several is a one-line error, before any port is bound.
    several = replace(settings, clusters=(ClusterSettings(name="eu-1"), ClusterSettings(name="us-1")))
    with pytest.raises(ConfigError, match="run one exporter per cluster"):
        serve_exporter(demo_service(several, sources.fleet), port=1)


def test_published_numbers_are_the_fleet_at_its_last_sample(sources: FlakySources) -> None:
    loop = ExportLoop(demo_service(Settings(), sources.fleet))
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


def test_cycles_within_a_step_publish_the_same_series_and_a_new_kueue_read_makes_them_again(
    sources: FlakySources, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The exporter cycles more often than its step: a cycle whose window and Kueue read are the last
    one's serves the series it made (the same text, nothing made again); once Kueue is read again (every
    QUEUE_READ_SECONDS), the queue tables and series are made from the new read."""
    made: list[int] = []
    real = collector.published_series
    monkeypatch.setattr(collector, "published_series", lambda *a, **k: made.append(1) or real(*a, **k))
    loop = ExportLoop(
        FleetService(settings=demo_service(Settings(), sources.fleet).settings, sources=sources)
    )
    sources.broken = False
    loop.run_once()
    first = VOLATILE.sub("", _scrape(loop))
    assert "\ngpuwatch_queue_" in first
    loop.run_once()
    assert (len(made), VOLATILE.sub("", _scrape(loop))) == (1, first)
    monkeypatch.setattr(service_module, "QUEUE_READ_SECONDS", 0.0)
    loop.run_once()
    assert (len(made), VOLATILE.sub("", _scrape(loop))) == (2, first)


def test_a_failing_source_is_marked_down_and_the_last_series_stay(sources: FlakySources) -> None:
    service = FleetService(settings=demo_service(Settings(), sources.fleet).settings, sources=sources)
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
    # The previous cycle's series are still served (stale, not zero, not gone), at the time that cycle
    # computed them: a store never takes them as new values.
    good_at = loop.result.families_at
    assert good_at is not None and loop.result.stale
    kept = VOLATILE.sub("", before).split("# HELP gpuwatch_source_up")[0].splitlines()
    stale = VOLATILE.sub("", after).split("# HELP gpuwatch_source_up")[0].splitlines()
    stamp = f" {int(good_at * 1000)}"
    samples = [line for line in stale if line and not line.startswith("#")]
    assert samples and all(line.endswith(stamp) for line in samples)
    assert [line.removesuffix(stamp) for line in stale] == kept


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
    pools = sorted(demo_service(Settings(), sources.fleet).analysis(window).nodes["pool"].unique())
    dated = (
        DatedPrice(start=window.start, usd_per_gpu_hour=3.0),
        DatedPrice(start=change, usd_per_gpu_hour=1.0),
    )
    settings = Settings(pricing=PriceBook(products={pool: dated for pool in pools}))
    analysis = demo_service(settings, sources.fleet).analysis(window)
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
    loop = ExportLoop(demo_service(Settings(budgets=budgets), sources.fleet))
    loop.run_once()
    families = {f.name: f for f in text_string_to_metric_families(_scrape(loop))}
    monthly = families["gpuwatch_team_monthly_budget_usd"].samples
    idle = families["gpuwatch_team_idle_budget_usd_per_hour"].samples
    assert {s.labels["team"]: s.value for s in monthly} == {"research": 20_000.0}
    assert {s.labels["team"]: s.value for s in idle} == {"research": 5.0, "vision": 0.5}


# -- Kueue queues (gpuwatch_queue_*) ------------------------------------------------------------------


def test_queue_families_are_the_queue_tables_at_their_last_sample(sources: FlakySources) -> None:
    """The exporter publishes each queue family with its documented labels; the values are those of the
    window's queue tables at the last sample of their grid, the pending counts and oldest waits those of
    the queue table (the window's end)."""
    sources.broken = False
    service = demo_service(Settings(), sources.fleet)
    loop = ExportLoop(service)
    assert loop.run_once().error == ""
    scraped = {f.name: f for f in text_string_to_metric_families(_scrape(loop))}
    names = {n for n in ownseries.FAMILY_LABELS if n.startswith("gpuwatch_queue_")}
    assert len(names) == 7
    for name in names:
        samples = scraped[name].samples
        assert samples, name
        assert {tuple(sorted(s.labels)) for s in samples} == {tuple(sorted(ownseries.FAMILY_LABELS[name]))}, (
            name
        )

    window = Window(
        start=datetime(2026, 11, 19, 23, tzinfo=UTC), end=datetime(2026, 11, 20, tzinfo=UTC), step_seconds=60
    )
    analysis = service.analysis(window)
    queues = service.queues(analysis)
    assert queues is not None and queues.installed
    # Without Kueue (no tables, or tables of no Kueue) there is no queue family at all.
    for absent in (None, replace(queues, installed=False)):
        assert not names & {f.name for f in published_series(analysis, queues=absent)}
    families = {f.name: f.samples for f in published_series(analysis, queues=queues)}
    usage = queues.usage[queues.usage["timestamp"] == queues.usage["timestamp"].max()]
    keys = ["cluster_queue", "pool"]
    for column in ("nominal_gpus", "used_gpus", "borrowed_gpus", "lent_gpus"):
        got = families[f"gpuwatch_queue_{column}"].set_index(keys)["value"].sort_index()
        assert got.to_dict() == usage.set_index(keys)[column].sort_index().to_dict(), column
    reserved = families["gpuwatch_queue_reserved_unused_usd_per_hour"].set_index(keys)["value"]
    price = dict(zip(usage["pool"], analysis.rates.at(usage["pool"], usage["timestamp"]), strict=True))
    for (cq, pool), nominal, used in zip(
        zip(usage["cluster_queue"], usage["pool"], strict=True),
        usage["nominal_gpus"],
        usage["used_gpus"],
        strict=True,
    ):
        assert reserved[(cq, pool)] == pytest.approx(max(0.0, nominal - used) * price[pool]), cq

    workloads = families["gpuwatch_queue_workloads"]
    pending = workloads[workloads["state"] == "pending"].set_index(["namespace", "queue"])["value"]
    rows = queues.queues.set_index(["namespace", "queue"])
    assert pending.to_dict() == rows["pending_workloads"].astype(float).to_dict()
    waits = (
        queues.waits[queues.waits["state"] == "pending"].groupby(["namespace", "queue"])["wait_seconds"].max()
    )
    oldest = families["gpuwatch_queue_oldest_pending_seconds"].set_index(["namespace", "queue"])["value"]
    assert len(oldest) > 0 and oldest.to_dict() == waits.to_dict()
    # Admitted: the workloads holding quota at the window's end.
    held = queues_holding(service, window.end)
    admitted = workloads[workloads["state"] == "admitted"].set_index(["namespace", "queue"])["value"]
    assert {k: v for k, v in admitted.items() if v} == held


def queues_holding(service: FleetService, at: datetime) -> dict[tuple[str, str], float]:
    w = service.queue_setup().workloads
    at_ = pd.Timestamp(at)
    holding = (w["admitted_at"] < at_) & ~(w["finished_at"] < at_)
    return {k: float(n) for k, n in w[holding].groupby(["namespace", "queue"]).size().items()}


def test_queue_states_count_each_workload_at_the_end_of_each_sample() -> None:
    """Three samples a minute apart, each read at its interval's end (the last one capped at `end`)."""
    t0 = pd.Timestamp("2026-11-20T00:00:00Z")
    m = pd.Timedelta(minutes=1)
    nat = pd.NaT
    workloads = pd.DataFrame(
        {
            "namespace": ["ml", "ml", "ml", "cv"],
            "workload": ["a", "b", "c", "d"],
            "queue": ["q", "q", "q", "other"],
            "cluster_queue": ["ml-cq", "ml-cq", "ml-cq", "cv-cq"],
            "team": ["ml", "ml", "ml", "cv"],
            "pool": ["H100", "H100", "", ""],
            "gpus": [1.0, 2.0, 4.0, 1.0],
            # a: admitted at 00:00:30, finishes at 00:02:00; b: waits from 23:50, admitted at 00:01:30;
            # c: created at 00:00:30 and still waits; d: a queue only its workload names, waits from 00:02:10.
            "created_at": [t0 - 5 * m, t0 - 10 * m, t0 + m / 2, t0 + 2 * m + pd.Timedelta(seconds=10)],
            "admitted_at": [t0 + m / 2, t0 + 1.5 * m, nat, nat],
            "finished_at": [t0 + 2 * m, nat, nat, nat],
            "preemptions": [0, 0, 0, 0],
        }
    ).astype({"admitted_at": "datetime64[ns, UTC]", "finished_at": "datetime64[ns, UTC]"})
    listed = pd.DataFrame(
        {
            "namespace": ["ml", ""],
            "queue": ["q", "alone"],
            "cluster_queue": ["ml-cq", "alone"],
            "team": ["ml", "x"],
        }
    )
    grid = pd.date_range(t0, periods=3, freq="60s")
    states = queue_states(workloads, listed, grid, 60, end=t0 + 2.5 * m)
    assert list(states.columns) == list(QUEUE_STATE_COLUMNS)
    got = {
        (r.queue, r.timestamp.minute): (r.pending_workloads, r.admitted_workloads, r.oldest_pending_seconds)
        for r in states.itertuples()
    }
    assert got[("q", 0)] == (2, 1, 660.0)  # at 00:01: b (11 min) and c pending, a holding
    assert got[("q", 1)] == (1, 2, 90.0)  # at 00:02: b admitted, a still holding (finishes at 00:02 exactly)
    assert got[("q", 2)] == (1, 1, 120.0)  # at 00:02:30 (capped at end): a finished, c waits 2 min
    assert got[("other", 2)] == (1, 0, 20.0)
    assert np.isnan(got[("other", 0)][2]) and got[("other", 0)][:2] == (0, 0)
    assert {q for q, _ in got} == {"q", "other", "alone"}
    assert got[("alone", 1)][:2] == (0, 0)
