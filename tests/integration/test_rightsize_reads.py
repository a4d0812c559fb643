"""The Right-size page reads what it needs (issue 35): on the recorded path over the whole fleet its rows
and summary come from right-sizing's seven per-pod families alone, and equal the whole report's.

One simulated day is backfilled into a real Prometheus (then a real VictoriaMetrics) with the gpuwatch_*
series and their roll-ups; the Kubernetes API test server serves the fleet. Which families were read is
what Prometheus was asked: every query the recorded source sends is named by the pod family it reads.
"""

import math
import re
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import pytest

from gpuwatch.core.config import KubernetesSettings, PrometheusSettings, Settings, ViewSettings
from gpuwatch.read.historytables import RIGHTSIZE_FAMILIES
from gpuwatch.read.service import FleetService, LiveSources
from gpuwatch.sim import SimulatedFleet
from gpuwatch.sim.demoservice import demo_settings
from gpuwatch.sources.historystore import PrometheusHistory
from gpuwatch.sources.historysums import POD_FAMILIES
from gpuwatch.surfaces.report import RIGHTSIZE_CHANGES, RIGHTSIZE_COLUMNS, Rightsizing, rightsizing_of
from gpuwatch.views.base import FleetView, Scope
from gpuwatch.views.reader import open_view
from gpuwatch.views.recorded import RecordedView
from tests.integration.prom import RAW_PATH_METRICS, Backend, BackfilledPrometheus, PrometheusFactory

pytestmark = pytest.mark.integration
END = datetime(2026, 11, 20, tzinfo=UTC)
NOW = datetime(2026, 11, 20, 1, tzinfo=UTC)
POD_METRIC = re.compile(r"gpuwatch_pod_gpu_[a-z_]+")


@pytest.fixture(scope="module")
def fleet(day_fleet: SimulatedFleet) -> SimulatedFleet:
    return day_fleet  # seed 5, a day to END: its servers are shared with the other modules reading it


@pytest.fixture(scope="module")
def prom(
    fleet: SimulatedFleet, prometheus_factory: PrometheusFactory, backend: Backend
) -> BackfilledPrometheus:
    """Prometheus, then VictoriaMetrics: every test of the module runs against each."""
    return prometheus_factory(
        fleet,
        layout="servicemonitor",
        metrics=RAW_PATH_METRICS,
        gpuwatch_series=True,
        backend=backend,
        world="seed5-day",
    )


def _service(prom: BackfilledPrometheus, kubeconfig: str) -> FleetService:
    """A service on the recorded path for any window (a GPU-sample limit of 0)."""
    settings = demo_settings(
        Settings(
            prometheus=PrometheusSettings(url=prom.url), kubernetes=KubernetesSettings(kubeconfig=kubeconfig)
        )
    )
    settings = replace(settings, views=ViewSettings(raw_max_gpu_samples=0))
    return FleetService(settings=settings, sources=LiveSources(settings))


def _queries(service: FleetService) -> list[str]:
    """The queries (instant and range) the service's recorded source sends from now on."""
    store = service.sources.recorded()
    assert isinstance(store, PrometheusHistory)
    source = store.source
    sent: list[str] = []
    query, points = source.query, source.range_points
    source.query = lambda q, **kw: sent.append(q) or query(q, **kw)  # type: ignore[method-assign]
    source.range_points = lambda q, **kw: sent.append(q) or points(q, **kw)  # type: ignore[method-assign]
    return sent


def _family(query: str) -> str | None:
    """The per-pod family (of POD_FAMILIES) a query reads, from its metric and how it is taken over time
    (raw, or a roll-up hour:<metric>:<function>); None for a query of no pod family."""
    metrics = set(POD_METRIC.findall(query))
    if not metrics:
        return None
    (metric,) = metrics
    last = "last_over_time" in query
    family = {
        "gpuwatch_pod_gpu_allocation": "pod_last_allocated" if last else "pod_allocated",
        "gpuwatch_pod_gpu_idle": "pod_last_idle" if last else "pod_idle",
        "gpuwatch_pod_gpu_used": "pod_busy_p95" if re.search("p95|quantile", query) else "pod_used",
        "gpuwatch_pod_gpu_unknown": "pod_unknown",
        "gpuwatch_pod_gpu_idle_since_timestamp_seconds": "pod_idle_since",
        "gpuwatch_pod_gpu_idle_held": "pod_idle_held",
        "gpuwatch_pod_gpu_idle_abandoned": "pod_idle_abandoned",
        "gpuwatch_pod_gpu_power_watts": "pod_power",
        "gpuwatch_pod_gpu_framebuffer_used_bytes": "pod_memory_peak",
    }[metric]
    assert family in POD_FAMILIES
    return family


def test_the_right_size_page_reads_seven_pod_families_and_shows_the_whole_reports_numbers(
    fleet: SimulatedFleet, prom: BackfilledPrometheus, kubeconfig: str
) -> None:
    service = _service(prom, kubeconfig)
    view = open_view(service, fleet.window, computed_at=NOW)
    assert isinstance(view, RecordedView)
    sent = _queries(service)
    own = view.rightsizing()
    read = {f for f in map(_family, sent) if f is not None}
    # pod_idle started reading as the view opened (the default page's): it may have been sent before.
    assert set(RIGHTSIZE_FAMILIES) - {"pod_idle"} <= read <= set(RIGHTSIZE_FAMILIES)
    assert not read & {"pod_last_idle", "pod_idle_since", "pod_idle_held", "pod_idle_abandoned", "pod_power"}
    # A fresh view's whole report (every pod family): the same rows in the same order, field by field.
    whole = open_view(_service(prom, kubeconfig), fleet.window, computed_at=NOW)
    expected = rightsizing_of(whole.report)
    _same(own, expected)
    changes = [r for r in own.rows() if r["recommendation_kind"] in RIGHTSIZE_CHANGES]
    assert len(changes) > 5 and own.summary["monthly_savings_usd"] > 0 and own.summary["pools"]
    assert len(own.rows()) == len(whole.report["workloads"]) == view.workload_count()
    # Once the report is read, right-sizing is derived from it (nothing more is sent), and is the same.
    assert whole.rightsizing() == expected
    before = len(sent)
    assert rightsizing_of(view.report) == view.rightsizing() == own
    after_report = len(sent)
    assert after_report > before  # the report read the rest of the pod families
    assert view.rightsizing() is own and len(sent) == after_report


@pytest.mark.parametrize(
    "scope", [Scope(teams=("genai",)), Scope(pools=("NVIDIA-H100-80GB-HBM3",))], ids=["team", "pool"]
)
def test_a_scoped_views_right_sizing_is_its_reports(
    fleet: SimulatedFleet, prom: BackfilledPrometheus, kubeconfig: str, scope: Scope
) -> None:
    """A scoped view reads its pods' families whole: its right-sizing is its report's rows."""
    view: FleetView = open_view(_service(prom, kubeconfig), fleet.window, computed_at=NOW).scoped(scope)
    own = view.rightsizing()
    assert own == rightsizing_of(view.report)
    assert own.rows() and all(tuple(r) == RIGHTSIZE_COLUMNS for r in own.rows())
    if scope.teams:
        assert {r["team"] for r in own.rows()} == set(scope.teams)
    else:
        assert {r["pool"] for r in own.rows()} == set(scope.pools)


def _same(got: Rightsizing, expected: Rightsizing) -> None:
    """The same rows in the same order and the same summary: numbers to 1e-9 (relative), else exactly."""
    assert [(r["namespace"], r["pod"]) for r in got.rows()] == [
        (r["namespace"], r["pod"]) for r in expected.rows()
    ]
    for g, e in zip(got.rows(), expected.rows(), strict=True):
        _same_row(g, e)
    assert got.summary.keys() == expected.summary.keys()
    assert got.summary["gpus_freed"] == expected.summary["gpus_freed"]
    assert got.summary["pools"] == expected.summary["pools"]
    assert got.summary["monthly_savings_usd"] == pytest.approx(
        expected.summary["monthly_savings_usd"], rel=1e-9
    )


def _same_row(got: dict[str, Any], expected: dict[str, Any]) -> None:
    assert got.keys() == expected.keys()
    for key, value in got.items():
        want = expected[key]
        if isinstance(value, float) and isinstance(want, float) and not math.isnan(want):
            assert value == pytest.approx(want, rel=1e-9, abs=1e-12), (got, key)
        else:
            assert value == want, (got, key)
