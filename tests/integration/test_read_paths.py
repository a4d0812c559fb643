"""The dashboard's two read paths agree (ARCHITECTURE: read paths): a view recorded in gpuwatch_* series and
aggregated by a real Prometheus draws the numbers the raw recomputation from DCGM samples draws.

One simulated day is backfilled with both the DCGM series and the gpuwatch_* series the exporter would
have published; the Kubernetes API test server serves the fleet. Each whole-fleet, team and pool view
is opened on both paths (views.raw_max_gpu_samples decides: a huge limit keeps the raw path, 0 asks for
history) and compared within the issue's 1 %. Not compared: fragmentation over the window (history
keeps each pool's ratio, not the free and fragmented GPUs it came from). Every test runs on a real
Prometheus and on a real VictoriaMetrics holding the same history.
"""

import math
import re
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pandas as pd
import pytest

from gpuwatch.core.config import KubernetesSettings, PrometheusSettings, Settings, ViewSettings
from gpuwatch.core.model import LEDGER_STATES, Window
from gpuwatch.read.service import FleetService, LiveSources
from gpuwatch.sim import SimulatedFleet
from gpuwatch.sim.demoservice import demo_settings
from gpuwatch.sources.historystore import PrometheusHistory
from gpuwatch.ui import components, create_app, ids
from gpuwatch.ui.filters import format_time
from gpuwatch.views.base import STATE_COLUMNS, FleetView, Scope
from gpuwatch.views.raw import RawView
from gpuwatch.views.reader import open_view, trend_report
from gpuwatch.views.recorded import RecordedView
from tests.integration.browser import browser_page, screenshot, settle, wait_until
from tests.integration.prom import RAW_PATH_METRICS, Backend, BackfilledPrometheus, PrometheusFactory
from tests.integration.ui_server import serve_app

pytestmark = pytest.mark.integration
END = datetime(2026, 11, 20, tzinfo=UTC)
UTIL = RAW_PATH_METRICS
REL = 0.01
NOW = datetime(2026, 11, 20, 1, tzinfo=UTC)


@pytest.fixture(scope="module")
def fleet(day_fleet: SimulatedFleet) -> SimulatedFleet:
    return day_fleet  # seed 5, a day to END: its servers are shared with the other modules reading it


@pytest.fixture(scope="module")
def prom(
    fleet: SimulatedFleet, prometheus_factory: PrometheusFactory, backend: Backend
) -> BackfilledPrometheus:
    """Prometheus, then VictoriaMetrics: every test of the module runs against each."""
    return prometheus_factory(
        fleet, layout="servicemonitor", metrics=UTIL, gpuwatch_series=True, backend=backend, world="seed5-day"
    )


def _service(prom: BackfilledPrometheus, kubeconfig: str, raw_max_gpu_samples: int) -> FleetService:
    settings = demo_settings(
        Settings(
            prometheus=PrometheusSettings(url=prom.url), kubernetes=KubernetesSettings(kubeconfig=kubeconfig)
        )
    )
    settings = replace(settings, views=ViewSettings(raw_max_gpu_samples=raw_max_gpu_samples))
    return FleetService(settings=settings, sources=LiveSources(settings))


@pytest.fixture(scope="module")
def raw(fleet: SimulatedFleet, prom: BackfilledPrometheus, kubeconfig: str) -> FleetView:
    return open_view(_service(prom, kubeconfig, 10**12), fleet.window, computed_at=NOW)


@pytest.fixture(scope="module")
def recorded(fleet: SimulatedFleet, prom: BackfilledPrometheus, kubeconfig: str) -> FleetView:
    return open_view(_service(prom, kubeconfig, 0), fleet.window, computed_at=NOW)


def test_the_path_follows_the_windows_gpu_samples(raw: FleetView, recorded: FleetView) -> None:
    # 96 GPUs × 1440 samples = 138,240 GPU-samples: raw under a limit above that, history under 0.
    assert isinstance(raw, RawView) and isinstance(recorded, RecordedView)
    assert raw.read_path.describe() == "recomputed from DCGM samples, 1 min resolution"
    assert recorded.read_path.describe() == "from recorded history, 3 min resolution"  # 1440 / 480 samples


SCOPES = [
    Scope(),
    Scope(teams=("vision",)),
    Scope(teams=("genai", "search")),
    Scope(pools=("NVIDIA-L4",)),
    Scope(pools=("NVIDIA-A100-SXM4-80GB",), teams=("data-science",)),
    Scope(products=("NVIDIA-H100-80GB-HBM3",)),
]


@pytest.mark.parametrize("scope", SCOPES, ids=lambda s: repr(s).replace(" ", ""))
def test_report_numbers_agree_for_the_fleet_each_team_and_pool(
    raw: FleetView, recorded: FleetView, scope: Scope
) -> None:
    a, b = raw.scoped(scope).report, recorded.scoped(scope).report
    for state in LEDGER_STATES:
        assert b["fleet"]["ledger_gpu_hours"][state] == _near(a["fleet"]["ledger_gpu_hours"][state]), state
    for key in ("capacity_gpu_hours", "allocated_gpu_hours", "used_gpu_hours", "cost_usd", "waste_usd"):
        assert b["fleet"][key] == _near(a["fleet"][key]), key
    assert a["fleet"]["allocated_gpu_hours"] > 0  # every scope holds something to compare
    for section, key, fields in (
        (
            "teams",
            "team",
            ("allocated_gpu_hours", "idle_gpu_hours", "used_gpu_hours", "cost_usd", "waste_usd", "pods"),
        ),
        (
            "namespaces",
            "namespace",
            ("allocated_gpu_hours", "idle_gpu_hours", "used_gpu_hours", "cost_usd", "waste_usd", "pods"),
        ),
        ("pools", "pool", ("stranded_gpu_hours", "usd_per_gpu_hour", "utilization")),
    ):
        got, expected = _rows(b, section, key), _rows(a, section, key)
        assert got.keys() == expected.keys(), section
        for name, row in expected.items():
            for field in fields:
                assert got[name][field] == _near(row[field]), (section, name, field)


@pytest.mark.parametrize("scope", SCOPES, ids=lambda s: repr(s).replace(" ", ""))
def test_drawn_frames_agree(raw: FleetView, recorded: FleetView, scope: Scope) -> None:
    a, b = raw.scoped(scope), recorded.scoped(scope)
    for state, usd in a.state_usd().items():
        assert b.state_usd()[state] == _near(usd), state
    pools_a = {p["pool"]: p for p in a.pool_rows()}
    for pool in b.pool_rows():  # stranded dollars, each GPU-hour at its price
        assert pool["stranded_cost_usd"] == _near(pools_a[pool["pool"]]["stranded_cost_usd"]), pool["pool"]
    # The ledger over time: same buckets, same mean GE per state in each (1 % of the scope's GE).
    la, lb = a.ledger_timeline(), b.ledger_timeline()
    assert len(la) == len(lb) == 480
    assert (la["timestamp"].to_numpy() == lb["timestamp"].to_numpy()).all()
    scale = float(la[STATE_COLUMNS].sum(axis=1).max())
    assert scale > 0
    assert (la[STATE_COLUMNS] - lb[STATE_COLUMNS]).abs().to_numpy().max() <= REL * scale
    # Per team over time: each team's mean held, idle and used GE over the window.
    ta, tb = (
        t.groupby("team")[["held_ge", "idle_ge", "unknown_ge", "used_ge"]].sum() / 480
        for t in (
            a.team_timeline(),
            b.team_timeline(),
        )
    )
    assert list(ta.index) == list(tb.index)
    assert (ta - tb).abs().to_numpy().max() <= REL * max(1.0, float(ta["held_ge"].max()))
    # The present: each node's GE per ledger state at the end, and each team's holding.
    na, nb = a.nodes_now(), b.nodes_now()
    assert list(na["node"]) == list(nb["node"])
    assert nb[STATE_COLUMNS].to_numpy() == pytest.approx(na[STATE_COLUMNS].to_numpy(), abs=1e-9)
    assert b.held_now() == pytest.approx(a.held_now())
    assert b.held_at_end() == a.held_at_end()
    ca = a.node_coverage().set_index("node")["coverage_ratio"]
    cb = b.node_coverage().set_index("node")["coverage_ratio"].reindex(ca.index)
    assert (ca - cb).abs().max() <= 1 / 480  # history counts per piece, raw per sample


def test_fragmentation_is_drawn_per_pool_on_the_same_buckets(raw: FleetView, recorded: FleetView) -> None:
    fa, fb = raw.fragmentation_timeline(), recorded.fragmentation_timeline()
    assert set(fb["pool"]) == set(fa["pool"])
    merged = fa.merge(fb, on=["timestamp", "pool"], suffixes=("_raw", "_recorded"))
    assert len(merged) == len(fa)
    # A bucket's mean ratio (history) against the ratio of its summed GE (raw): equal where steady.
    steady = merged[merged["fragmentation_ratio_raw"].isin([0.0])]
    assert (steady["fragmentation_ratio_recorded"] == 0.0).all()


def test_history_missing_for_part_of_the_window_is_said_and_never_unallocated(
    fleet: SimulatedFleet, prom: BackfilledPrometheus, kubeconfig: str
) -> None:
    """A window reaching 12 h before the backfilled day: those hours are a gap, in no ledger state."""
    day = fleet.window
    longer = Window(start=day.start - timedelta(hours=12), end=day.end, step_seconds=day.step_seconds)
    view = open_view(_service(prom, kubeconfig, 0), longer, computed_at=NOW)
    assert isinstance(view, RecordedView)
    report = view.report
    assert report["fleet"]["capacity_gpu_hours"] == pytest.approx(96 * 24, rel=1e-6)  # the day, not 36 h
    warnings = report["coverage"]["warnings"]
    assert any(
        w.startswith("no gpuwatch_* samples from 2026-11-18T12:00:00Z to 2026-11-19T00:00:00Z")
        for w in warnings
    )
    timeline = view.ledger_timeline()
    before = timeline[timeline["timestamp"] < pd.Timestamp(day.start)]
    assert len(before) > 0 and before[STATE_COLUMNS].isna().all().all()  # drawn as a gap, not as zeros
    after = timeline[timeline["timestamp"] >= pd.Timestamp(day.start)]
    assert after[STATE_COLUMNS].notna().all().all()
    assert after[STATE_COLUMNS].sum(axis=1).to_numpy() == pytest.approx(96.0)


def test_a_costly_window_without_any_history_shows_the_gap_not_a_raw_recompute(
    fleet: SimulatedFleet, prom: BackfilledPrometheus, kubeconfig: str, recorded: FleetView
) -> None:
    """The day before the backfilled one (the Teams page's previous period): no gpuwatch_* samples at
    all. The view stays recorded, counts no GPU-hour in any state, draws one gap, and gives no trend."""
    day = fleet.window
    before = Window(start=day.start - timedelta(days=1), end=day.start, step_seconds=day.step_seconds)
    view = open_view(_service(prom, kubeconfig, 0), before, computed_at=NOW)
    assert isinstance(view, RecordedView)
    fleet_row = view.report["fleet"]
    assert fleet_row["capacity_gpu_hours"] == 0.0 and fleet_row["allocated_gpu_hours"] == 0.0
    assert view.report["coverage"]["gpu_samples_present"] == 0
    assert view.history_gaps() == [
        "no gpuwatch_* samples from 2026-11-18T00:00:00Z to 2026-11-19T00:00:00Z (24 h): those hours are "
        "in no sum of this report"
    ]
    timeline = view.ledger_timeline()
    assert len(timeline) > 0 and timeline[STATE_COLUMNS].isna().all().all()
    changes = recorded.team_changes(view.report)
    assert len(changes) == len(recorded.report["teams"]) > 0
    assert changes[["allocated_gpu_hours_change_ratio", "efficiency_change_ratio"]].isna().all().all()


@pytest.mark.parametrize("teams", [(), ("genai",)])
def test_a_trend_reads_the_teams_and_coverage_of_the_whole_report_without_per_pod_series(
    fleet: SimulatedFleet, prom: BackfilledPrometheus, kubeconfig: str, teams: tuple[str, ...]
) -> None:
    """The Teams page's previous period on the recorded path reads no per-pod family, yet its teams and
    coverage are the whole report's, under a team filter too."""
    service = _service(prom, kubeconfig, 0)
    scope = Scope(teams=teams)
    whole = open_view(service, fleet.window, computed_at=NOW).scoped(scope).report
    store = service.sources.recorded()
    assert isinstance(store, PrometheusHistory)
    source = store.source
    sent: list[str] = []
    query, points = source.query, source.range_points
    source.query = lambda q, **kw: sent.append(q) or query(q, **kw)  # type: ignore[method-assign]
    source.range_points = lambda q, **kw: sent.append(q) or points(q, **kw)  # type: ignore[method-assign]
    trend = trend_report(service, fleet.window, scope, computed_at=NOW)
    assert sent and not [q for q in sent if "gpuwatch_pod_" in q]
    assert trend["coverage"] == whole["coverage"]
    assert len(whole["teams"]) == (1 if teams else len({t["team"] for t in whole["teams"]})) > 0
    for got, expected in zip(trend["teams"], whole["teams"], strict=True):
        assert got["team"] == expected["team"]
        for key in ("allocated_gpu_hours", "used_gpu_hours", "efficiency", "cost_usd", "waste_usd"):
            assert got[key] == pytest.approx(expected[key], rel=1e-9), (got["team"], key)


def _instant_queries(service: FleetService) -> list[str]:
    """The instant queries the service's recorded source sends from now on, as it sends them."""
    store = service.sources.recorded()
    assert isinstance(store, PrometheusHistory)
    source = store.source
    sent: list[str] = []
    query = source.query
    source.query = lambda q, **kw: sent.append(q) or query(q, **kw)  # type: ignore[method-assign]
    return sent


def test_the_pages_cheap_reads_are_the_whole_reports_rows(
    fleet: SimulatedFleet, prom: BackfilledPrometheus, kubeconfig: str
) -> None:
    """On the recorded path over the whole fleet, what pages draw before (or instead of) every pod's
    series is the whole report's: the headline, the summary's teams, namespaces and pools (from sums per
    namespace and pool), the pool rows, the most wasteful workloads, the idle ones, those idle now and the
    count of workloads. None of it asks Prometheus for every pod's allocated or busy GE: the namespaces'
    sums and their pods come from the namespace roll-ups (and the raw ends summed per namespace)."""
    service = _service(prom, kubeconfig, 0)
    view = open_view(service, fleet.window, computed_at=NOW)
    sent = _instant_queries(service)
    cheap = {
        "pools": view.pool_rows(),
        "top": view.top_workloads(5),
        "top_idle": view.top_idle_workloads(3),
        "idle_now": view.idle_now(),
        "idle_waste": view.idle_waste(),
        "idle": view.idle_workloads(),
        "summary": view.summary,
        "count": view.workload_count(),
    }
    summed = [q for q in sent if "sum_over_time" in q and re.search("gpuwatch_pod_gpu_(allocation|used)", q)]
    per_namespace = "sum by (\n  namespace, team, pool\n)"
    assert all(q.startswith(per_namespace) or "pod=~" in q for q in summed)
    namespaces = [q for q in sent if "hour:gpuwatch_namespace_" in q or "day:gpuwatch_namespace_" in q]
    assert any("gpuwatch_namespace_gpu_allocation" in q for q in namespaces)
    assert any("pods:count" in q for q in namespaces)
    whole_view = open_view(_service(prom, kubeconfig, 0), fleet.window, computed_at=NOW)
    whole = whole_view.report
    summary = cheap["summary"]
    assert summary["fleet"] == whole["fleet"] == view.headline["fleet"]
    _same_rows(summary["teams"], whole["teams"], ("team",))
    _same_rows(summary["namespaces"], whole["namespaces"], ("namespace", "team"))
    _same_rows(summary["pools"], whole["pools"], ("pool",))
    _same_rows(cheap["pools"], whole["pools"], ("pool",))
    assert cheap["count"] == len(whole["workloads"]) == sum(t["pods"] for t in whole["teams"]) > 0
    wasteful = [w for w in whole["workloads"] if w["waste_usd"] > 0]
    assert len(wasteful) >= 5  # the top rows come from the idle pods' series
    # The top rows carry no recommendation (right-sizing's series are not read for a waste list).
    assert all(w["recommendation"] is None for w in cheap["top"])
    drawn = [{**w, "recommendation": None} for w in whole["workloads"][:5]]
    _same_rows(cheap["top"], drawn, ("namespace", "pod"))
    assert cheap["top"][0].keys() == whole["workloads"][0].keys()
    idle = [w for w in whole["workloads"] if w["idle_gpu_hours"] > 0]
    _same_rows(cheap["top_idle"], wasteful[:3], ("namespace", "pod"))
    _same_rows(_by_pod(cheap["idle"]), _by_pod(idle), ("namespace", "pod"))  # (ties in waste differ)
    held = whole_view.held_at_end()
    now = [w for w in idle if w["idle_since"] and (w["namespace"], w["pod"]) in held]
    assert 0 < len(now) < len(idle)
    _same_rows(_by_pod(cheap["idle_now"]), _by_pod(now), ("namespace", "pod"))
    _same_rows(_by_pod(cheap["idle_waste"]), _by_pod(idle), ("namespace", "pod"))
    assert any(w["idle_since"] for w in cheap["idle"])


def test_the_queue_page_reads_the_teams_pools_and_idle_pods_not_every_pods_series(
    fleet: SimulatedFleet, prom: BackfilledPrometheus, kubeconfig: str, raw: FleetView
) -> None:
    """On the recorded path the Queues page's tables come from the teams' allocation per pool (the
    namespace roll-ups) and the pods idle at the end: never every pod's allocation. They equal the whole
    report's (which reads every pod's series) and the raw path's."""
    service = _service(prom, kubeconfig, 0)
    view = open_view(service, fleet.window, computed_at=NOW)
    sent = _instant_queries(service)
    cheap = view.queue_report()
    per_pod = [
        q for q in sent if "sum_over_time" in q and q.startswith("sum by (\n  namespace, pod, team, pool\n)")
    ]
    assert per_pod == []
    assert any("gpuwatch_namespace_gpu_allocation" in q for q in sent)
    whole = open_view(_service(prom, kubeconfig, 0), fleet.window, computed_at=NOW).report
    assert cheap["kueue"] == whole["kueue"] == raw.report["kueue"] == {"installed": True}
    for section, keys in (
        ("queues", ("namespace", "queue")),
        ("fairness", ("team",)),
        ("blocked_vs_idle", ("pool",)),
        ("reclaim_candidates", ("namespace", "pod")),
    ):
        assert cheap[section], section
        _same_rows(cheap[section], whole[section], keys)
        expected = {tuple(r[k] for k in keys): r for r in raw.report[section]}
        assert expected.keys() == {tuple(r[k] for k in keys) for r in cheap[section]}, section
        for row in cheap[section]:
            want = expected[tuple(row[k] for k in keys)]
            for key, value in row.items():
                assert value == (_near(want[key]) if isinstance(want[key], float) else want[key]), (row, key)


FILLED = "id => (document.getElementById(id)?.innerText || '').includes('resolution')"
PAGES = {  # path: (as-of line, KPI tiles or "")
    "/": (ids.OVERVIEW_AS_OF, ids.OVERVIEW_KPIS),
    "/capacity": (ids.CAPACITY_AS_OF, ids.CAPACITY_KPIS),
    "/waste": (ids.WASTE_AS_OF, ids.WASTE_KPIS),
    "/teams": (ids.TEAMS_AS_OF, ""),
    "/teams/genai": (ids.TEAM_AS_OF, ids.TEAM_KPIS),
    "/health": (ids.HEALTH_AS_OF, ""),
    "/rightsize": (ids.RIGHTSIZE_AS_OF, ""),  # its p95 is the busiest hour's here: KPIs checked below
}


# The raw path's KPI tiles as the first store's pages drew them, by page: both stores hold the same DCGM
# samples, so the second store's recorded pages are compared with them rather than drawn raw again.
_RAW_PAGES: dict[str, str] = {}


def test_every_page_draws_the_recorded_view_and_says_so(
    fleet: SimulatedFleet, prom: BackfilledPrometheus, kubeconfig: str, raw: FleetView, recorded: FleetView
) -> None:
    """In Chromium: each page on the recorded path names it, shows the raw path's KPI figures, and a
    window reaching before the history carries the history banner."""
    day = fleet.window
    query = f"?window=custom&start={format_time(day.start)}&end={format_time(day.end)}"
    earlier = (
        f"?window=custom&start={format_time(day.start - timedelta(hours=12))}&end={format_time(day.end)}"
    )
    kpis: dict[str, dict[str, str]] = {path: {"raw": text} for path, text in _RAW_PAGES.items()}
    paths = (("recorded", 0),) if _RAW_PAGES else (("raw", 10**12), ("recorded", 0))
    for name, limit in paths:
        app = create_app(_service(prom, kubeconfig, limit), warm=False)
        with serve_app(app) as base, browser_page(1440, 1000) as (page, errors):
            for path, (as_of_id, kpis_id) in PAGES.items():
                page.goto(f"{base}{path}{query}")
                wait_until(page, FILLED, arg=as_of_id, timeout=180_000)
                settle(page)
                as_of = page.locator(f"#{as_of_id}").inner_text()
                wanted = (
                    "from recorded history, 3 min resolution" if name == "recorded" else "from DCGM samples"
                )
                assert wanted in as_of, (path, as_of)
                if kpis_id:
                    kpis.setdefault(path, {})[name] = page.locator(f"#{kpis_id}").inner_text()
                if path == "/rightsize":
                    kpis.setdefault(path, {})[name] = page.locator("#kpi-rightsize-savings").inner_text()
                screenshot(page, f"read-path-{name}{path.replace('/', '-')}")
            if name == "recorded":
                page.goto(f"{base}/{earlier}")
                page.wait_for_selector("#history-banner", timeout=180_000)
                settle(page)
                banner = page.locator("#history-banner").inner_text()
                assert "History missing for part of the window" in banner
                assert "2026-11-18T12:00:00Z to 2026-11-19T00:00:00Z" in banner
            assert errors == []
    _RAW_PAGES.update({path: seen["raw"] for path, seen in kpis.items()})
    saved = kpis.pop("/rightsize")
    for path, seen in kpis.items():
        assert seen["recorded"] == seen["raw"], path
    # The Right-size page shows each path's own report: on the recorded one, recommendations from the
    # hourly roll-ups of each pod's p95 and peak memory.
    for name, view in (("raw", raw), ("recorded", recorded)):
        report = view.report
        assert saved[name] == components.usd(report["rightsizing"]["monthly_savings_usd"]), name


def _near(value: float | None) -> Any:
    return value if value is None or math.isnan(value) else pytest.approx(value, rel=REL, abs=1e-6)


def _by_pod(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(rows, key=lambda w: (w["namespace"], w["pod"]))


def _same_rows(got: list[dict[str, Any]], expected: list[dict[str, Any]], keys: tuple[str, ...]) -> None:
    """The same rows in the same order, numbers equal to 1e-9 (relative)."""
    assert [tuple(r[k] for k in keys) for r in got] == [tuple(r[k] for k in keys) for r in expected]
    for g, e in zip(got, expected, strict=True):
        _same_row(g, e)


def _same_row(got: dict[str, Any], expected: dict[str, Any]) -> None:
    """got's fields equal expected's: numbers to 1e-9 (relative), anything else exactly."""
    for key, value in got.items():
        want = expected[key]
        if isinstance(value, float) and isinstance(want, float):
            assert value == pytest.approx(want, rel=1e-9, abs=1e-12), (got, key)
        else:
            assert value == want, (got, key)


def _rows(report: dict[str, Any], section: str, key: str) -> dict[str, dict[str, Any]]:
    return {r[key]: r for r in report[section]}
