"""Rules and dashboards against a real Prometheus backfilled with the demo fleet's DCGM history.

Every recording-rule expression, alert expression, Grafana panel query and variable query must parse
(HTTP 200, status success) in both label layouts; those over raw DCGM series must return data, and the
device-health alerts must select exactly the GPUs the simulated fleet broke (SPEC §5). The dashboards'
`cluster` variable changes nothing on a Prometheus without a cluster label, and on one holding two
clusters selects one cluster's series (or both, kept apart). promtool checks the rule files, the
generated PrometheusRule and runs the rule unit tests.
"""

import json
import re
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import requests
import yaml

from gpuwatch.core.model import Window
from gpuwatch.sim import SimulatedFleet, build_demo_fleet
from gpuwatch.sim.exposition import FAMILY_NAMES
from gpuwatch.sources import ownseries
from tests.integration.prom import (
    PROMTOOL,
    BackfilledPrometheus,
    PrometheusFactory,
    PrometheusServer,
    create_blocks,
    write_backfill_file,
)

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
ALERTS = ROOT / "alerts"
DASHBOARDS = ROOT / "dashboards"
DEMO_END = datetime(2026, 11, 20, tzinfo=UTC)
# What the device-health rules and the fleet-health dashboard read.
HEALTH_METRICS = (
    "DCGM_FI_DEV_GPU_TEMP",
    "DCGM_FI_DEV_POWER_USAGE",
    "DCGM_FI_DEV_GPU_UTIL",
    "DCGM_FI_DEV_XID_ERRORS",
    "DCGM_FI_DEV_FB_FREE",
    "DCGM_FI_DEV_FB_USED",
    "DCGM_FI_DEV_ROW_REMAP_FAILURE",
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
)
STEP_SECONDS = 120  # a coarser demo fleet keeps the backfill small; the rules look at 10 min and 1 h
LAYOUTS = ("servicemonitor", "honor_labels")
# Grafana's built-in variables, and every template variable as "All" (a regex matching anything).
VARIABLES = {
    "$__rate_interval": "5m",
    "$__interval": "1m",
    "$__range_s": "86400",
    "$__range": "1d",
    "$cluster": ".*",
    "$pool": ".*",
    "$team": ".*",
    "$node": ".*",
    "$hostname": ".*",
    "$model": ".*",
}

# The servicemonitor backfill carries gpuwatch's own history (the gpuwatch_* series `gpuwatch export`
# would have published, SPEC §4.3) beside the DCGM series: there queries over either must return data.
# Those series are the same whatever the DCGM labels' layout, so the honor_labels backfill holds the DCGM
# series alone, and queries over gpuwatch_* series need only parse on it.
GPUWATCH_SERIES_LAYOUT = "servicemonitor"


def needs_gpuwatch_series(expr: str) -> bool:
    """Queries over gpuwatch_* series (directly or through a gpuwatch recording rule)."""
    return "gpuwatch_" in expr


def must_return_data(expr: str, prom: BackfilledPrometheus) -> bool:
    return prom.layout == GPUWATCH_SERIES_LAYOUT or not needs_gpuwatch_series(expr)


def substitute(expr: str, **chosen: str) -> str:
    """Grafana's interpolation: the built-ins, and each template variable as `chosen` or else "All"."""
    values = {**VARIABLES, **{f"${name}": value for name, value in chosen.items()}}
    for name in sorted(values, key=len, reverse=True):
        expr = expr.replace(name, values[name])
    assert not re.search(r"\$[A-Za-z_]", expr), f"unsubstituted variable in {expr}"
    return expr


def instant(prom: BackfilledPrometheus | PrometheusServer, expr: str, at: datetime) -> list[dict[str, Any]]:
    """Like prom.query, but asserting HTTP 200 and status success with the error in the message."""
    reply = requests.get(
        f"{prom.url}/api/v1/query", params={"query": expr, "time": at.timestamp()}, timeout=120
    )
    body = reply.json()
    assert reply.status_code == 200 and body["status"] == "success", f"{body.get('error')}: {expr}"
    result: list[dict[str, Any]] = body["data"]["result"]
    return result


# -- what there is to run -----------------------------------------------------------------------


def rule_file_rules() -> list[dict[str, Any]]:
    out = []
    for path in sorted(ALERTS.glob("*.rules.yml")):
        for group in yaml.safe_load(path.read_text(encoding="utf-8"))["groups"]:
            out += group["rules"]
    return out


def recording_rules() -> dict[str, str]:
    return {r["record"]: r["expr"] for r in rule_file_rules() if "record" in r}


def alert_exprs() -> dict[str, str]:
    return {r["alert"]: r["expr"] for r in rule_file_rules() if "alert" in r}


def panel_queries() -> dict[str, str]:
    """'<dashboard> / <panel> / <refId>' -> expr, for every target of every panel."""
    out = {}
    for path in sorted(DASHBOARDS.glob("*.json")):
        board = json.loads(path.read_text(encoding="utf-8"))
        for panel in board["panels"]:
            for target in panel.get("targets", []):  # a row has none
                key = f"{path.stem} / {panel['title']} / {target['refId']}"
                assert key not in out, f"two panels titled {panel['title']!r} in {path.name}"
                out[key] = target["expr"]
    return out


def variable_queries() -> dict[str, str]:
    """'<dashboard> / $<name>' -> the PromQL a variable query sends (label_values as a series selector).

    label_values(SELECTOR, label) runs as `count by (label) (SELECTOR)`: one series per value, and one
    without labels when no series carries the label (Grafana then offers only "All").
    """
    out = {}
    for path in sorted(DASHBOARDS.glob("*.json")):
        for var in json.loads(path.read_text(encoding="utf-8"))["templating"]["list"]:
            if var["type"] != "query":
                continue
            definition = var["definition"]
            if m := re.fullmatch(r"label_values\((.+),\s*(\w+)\)", definition):
                out[f"{path.stem} / ${var['name']}"] = f"count by ({m.group(2)}) ({m.group(1)})"
            elif m := re.fullmatch(r"query_result\((.+)\)", definition):
                out[f"{path.stem} / ${var['name']}"] = m.group(1)
            else:
                raise AssertionError(f"{path.name}: variable {var['name']} has an unknown query {definition}")
    return out


def test_the_query_sets_are_what_the_files_hold() -> None:
    assert set(HEALTH_METRICS) <= set(FAMILY_NAMES)
    assert len(recording_rules()) >= 20 and len(panel_queries()) >= 30
    dcgm = [e for e in {**recording_rules(), **panel_queries()}.values() if not needs_gpuwatch_series(e)]
    assert len(dcgm) >= 15, "the DCGM queries, which must return data, are a real share of the set"


# -- the servers ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def health_fleet() -> SimulatedFleet:
    return build_demo_fleet(seed=42, end=DEMO_END, days=1, step_seconds=STEP_SECONDS)


@pytest.fixture(scope="module", params=LAYOUTS)
def health_prometheus(
    request: pytest.FixtureRequest, prometheus_factory: PrometheusFactory, health_fleet: SimulatedFleet
) -> Iterator[BackfilledPrometheus]:
    layout = request.param
    yield prometheus_factory(
        health_fleet, layout=layout, metrics=HEALTH_METRICS, gpuwatch_series=layout == GPUWATCH_SERIES_LAYOUT
    )


def day_fraction(fleet: SimulatedFleet, fraction: float) -> datetime:
    return fleet.window.start + (fleet.window.end - fleet.window.start) * fraction


def after_all_events(fleet: SimulatedFleet) -> datetime:
    """Inside the simulated day, after every health event started (the last, at 80 %, is the row remap)."""
    at = max(e.start for e in fleet.events) + timedelta(minutes=45)
    assert at < fleet.window.end
    return at


# -- every query parses; DCGM ones return data ------------------------------------------------------


NONZERO = {ownseries.rollup_name(metric, function) for metric, function in ownseries.NONZERO_ROLLUPS}
# Rules over the pods' hourly roll-ups, which exist at the hours they were evaluated alone.
OVER_ROLLUPS = {r["record"] for r in ownseries.namespace_rollup_rules()} - {ownseries.NAMESPACE_ROLLUP_MARKER}


@pytest.mark.parametrize("name", sorted(recording_rules()))
def test_recording_rule_expression_runs(health_prometheus: BackfilledPrometheus, name: str) -> None:
    expr = recording_rules()[name]
    at = after_all_events(health_prometheus.fleet)
    result = instant(health_prometheus, expr, at)
    if not must_return_data(expr, health_prometheus):
        return  # it parsed (instant() asserts so); the series it reads are not in this backfill
    if name in OVER_ROLLUPS:  # at the backfill's hours, the latest with data (a pod started in it)
        last_hour = at.replace(minute=0, second=0, microsecond=0)
        hours = (last_hour - timedelta(hours=h) for h in range(24))
        result = next((r for r in (instant(health_prometheus, expr, t) for t in hours) if r), [])
    if name in NONZERO:  # `(…) > 0`: the pods above zero of the whole expression, which returns data
        whole = instant(health_prometheus, expr.strip().removeprefix("(").removesuffix(") > 0"), at)
        assert whole and all(float(s["value"][1]) >= 0 for s in whole)
        above = {json.dumps(s["metric"], sort_keys=True) for s in whole if float(s["value"][1]) > 0}
        assert {json.dumps(s["metric"], sort_keys=True) for s in result} == above
    else:
        assert result, f"{name} returned no data over the {health_prometheus.layout} backfill"
        for sample in result:
            assert "__name__" not in sample["metric"]


@pytest.mark.parametrize("name", sorted(panel_queries()))
def test_dashboard_panel_query_runs(health_prometheus: BackfilledPrometheus, name: str) -> None:
    expr = panel_queries()[name]
    result = instant(health_prometheus, substitute(expr), after_all_events(health_prometheus.fleet))
    if must_return_data(expr, health_prometheus):
        assert result, f"{name} returned no data over the {health_prometheus.layout} backfill"


@pytest.mark.parametrize("name", sorted(variable_queries()))
def test_dashboard_variable_query_runs(health_prometheus: BackfilledPrometheus, name: str) -> None:
    expr = variable_queries()[name]
    result = instant(health_prometheus, substitute(expr), after_all_events(health_prometheus.fleet))
    if must_return_data(expr, health_prometheus):
        assert result, f"{name} returned no values over the {health_prometheus.layout} backfill"


def test_the_hostname_variable_lists_every_exporter_whichever_label_it_uses(
    health_prometheus: BackfilledPrometheus,
) -> None:
    fleet = health_prometheus.fleet
    board = json.loads((DASHBOARDS / "gpu-fleet-health.json").read_text(encoding="utf-8"))
    (var,) = [v for v in board["templating"]["list"] if v["name"] == "hostname"]
    regex = re.compile(var["regex"].strip("/"))
    at = after_all_events(fleet)
    lines = [
        "{" + ",".join(f'{k}="{v}"' for k, v in r["metric"].items()) + "}"
        for r in instant(
            health_prometheus, substitute(variable_queries()["gpu-fleet-health / $hostname"]), at
        )
    ]
    values = {m.group(1) for line in lines if (m := regex.search(line))}
    ready = {n.name for n in fleet.nodes if n.ready}
    # The dashboard is dcgm-exporter's: the demo's AMD nodes have their own exporter and no DCGM series.
    dcgm = [t for t in fleet.targets if t.vendor == "nvidia"]
    expected = {t.hostname_value for t in dcgm if t.node in ready}
    assert values == expected
    assert {t.hostname_label for t in dcgm} == {"Hostname", "hostname"}


def test_every_dcgm_recording_rule_sees_every_reporting_gpu(health_prometheus: BackfilledPrometheus) -> None:
    """The label fold loses no GPU and merges none: one series per physical GPU, whatever the layout."""
    at = after_all_events(health_prometheus.fleet)
    reporting = instant(health_prometheus, recording_rules()["fleet:dcgm_gpus_reporting:count"], at)
    (count,) = [int(float(r["value"][1])) for r in reporting]
    temps = instant(health_prometheus, recording_rules()["node_gpu:dcgm_gpu_temp_celsius:max"], at)
    assert len(temps) == count == len({r["metric"]["UUID"] for r in temps})
    assert all(r["metric"]["node"] and r["metric"]["instance"] for r in temps)
    physical = {g.uuid for g in health_prometheus.fleet.gpus}
    assert {r["metric"]["UUID"] for r in temps} <= physical


# -- the cluster variable -------------------------------------------------------------------------

# Two clusters behind one query backend, each series labelled with its own (as a Prometheus external
# label or the exporter's stamp would): two demo fleets with the same node names but different pods,
# sizes and samples.
CLUSTER_FLEETS = {"eu-1": {"seed": 42, "gpus": 32}, "us-1": {"seed": 7, "gpus": 48}}
# Per-row queries keep `cluster`; the rest add the clusters up, but for the ratios of two sums.
RATIOS = {
    "gpu-team-waste / Allocated GPU utilization / A",
    "gpu-team-waste / Team efficiency: used / allocated GPUs / A",
}
REL = 1e-9

Keyed = dict[tuple[tuple[str, str], ...], float]


def cluster_scoped_queries() -> dict[str, str]:
    """Every panel and variable query that reads $cluster: all of them but the cluster variable's own."""
    queries = {**panel_queries(), **variable_queries()}
    scoped = {name: expr for name, expr in queries.items() if "$cluster" in expr}
    assert set(queries) - set(scoped) == {"gpu-fleet-health / $cluster", "gpu-team-waste / $cluster"}
    return scoped


def without_cluster(expr: str) -> str:
    """The query as it was before the cluster variable: no cluster matcher, no cluster in label lists."""
    expr = expr.replace('{cluster=~"$cluster"}', "")
    expr = expr.replace('cluster=~"$cluster", ', "").replace(', cluster=~"$cluster"', "")
    expr = re.sub(r"\b(by|on) \(cluster, ", r"\1 (", expr)
    assert not re.search(r"\bcluster\b", expr), expr
    return expr


def keyed(result: list[dict[str, Any]], *, drop: str = "") -> Keyed:
    """Label set -> value of an instant query's series, the label `drop` left out of the label sets."""
    out = {
        tuple(sorted((k, v) for k, v in r["metric"].items() if k != drop)): float(r["value"][1])
        for r in result
    }
    assert len(out) == len(result), f"series differing only in {drop}"
    return out


@pytest.mark.parametrize("name", sorted(cluster_scoped_queries()))
def test_all_clusters_on_a_prometheus_without_a_cluster_label_change_nothing(
    health_prometheus: BackfilledPrometheus, name: str
) -> None:
    """One cluster, no `cluster` label: `cluster=~".*"` matches the absent label (the empty string), and
    `cluster` in a label list groups nothing apart: the series and values of the query without them."""
    expr = cluster_scoped_queries()[name]
    at = after_all_events(health_prometheus.fleet)
    got = keyed(instant(health_prometheus, substitute(expr), at))
    before = keyed(instant(health_prometheus, substitute(without_cluster(expr)), at))
    assert got == pytest.approx(before, rel=REL, nan_ok=True)
    if must_return_data(expr, health_prometheus):
        assert got


def with_cluster(line: str, cluster: str) -> str:
    """An OpenMetrics sample line with cluster="..." first among its labels."""
    name, brace, rest = line.partition("{")
    if brace and " " not in name:
        return f'{name}{{cluster="{cluster}"{"" if rest.startswith("}") else ","}{rest}'
    name, _, rest = line.partition(" ")
    return f'{name}{{cluster="{cluster}"}} {rest}'


def write_clusters(backfills: dict[str, Path], out: Path) -> None:
    """One OpenMetrics file of several clusters' backfills: each family once, holding every cluster's
    samples labelled with their cluster."""
    headers: dict[str, list[str]] = {}
    samples: dict[str, list[str]] = {}
    for cluster, path in backfills.items():
        family = ""
        with path.open(encoding="utf-8") as lines:
            for line in lines:
                if line.startswith("# EOF"):
                    continue
                if m := re.match(r"# (HELP|TYPE|UNIT) (\S+)", line):
                    if family != m.group(2):
                        family = m.group(2)
                        fresh = family not in headers
                        headers.setdefault(family, [])
                    if fresh:
                        headers[family].append(line)
                elif line.strip():
                    samples.setdefault(family, []).append(with_cluster(line, cluster))
    with out.open("w", encoding="utf-8") as merged:
        for family in dict.fromkeys([*headers, *samples]):
            merged.writelines(headers.get(family, []))
            merged.writelines(samples.get(family, []))
        merged.write("# EOF\n")


@dataclass(frozen=True)
class TwoClusters:
    both: PrometheusServer  # every cluster's series, labelled cluster="<name>"
    alone: dict[str, BackfilledPrometheus]  # each cluster's fleet by itself, without a cluster label

    @property
    def at(self) -> datetime:
        return after_all_events(next(iter(self.alone.values())).fleet)


@pytest.fixture(scope="module")
def two_clusters(
    prometheus_factory: PrometheusFactory, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[TwoClusters]:
    fleets = {
        name: build_demo_fleet(end=DEMO_END, days=0.25, step_seconds=STEP_SECONDS, **shape)
        for name, shape in CLUSTER_FLEETS.items()
    }
    alone = {
        name: prometheus_factory(fleet, metrics=HEALTH_METRICS, gpuwatch_series=True)
        for name, fleet in fleets.items()
    }
    workdir = tmp_path_factory.mktemp("two-clusters")
    backfills = {
        name: write_backfill_file(fleet, workdir / f"{name}.om", metrics=HEALTH_METRICS, gpuwatch_series=True)
        for name, fleet in fleets.items()
    }
    write_clusters({name: b.path for name, b in backfills.items()}, workdir / "clusters.om")
    create_blocks(workdir / "clusters.om", workdir / "tsdb")
    for path in (*(b.path for b in backfills.values()), workdir / "clusters.om"):
        path.unlink()
    with PrometheusServer(workdir / "tsdb") as both:
        yield TwoClusters(both=both, alone=alone)


def test_the_two_clusters_share_node_names_and_differ_in_what_the_dashboards_show(
    two_clusters: TwoClusters,
) -> None:
    eu, us = two_clusters.alone.values()
    assert {n.name for n in eu.fleet.nodes} & {n.name for n in us.fleet.nodes}, "same-named nodes"
    at = two_clusters.at
    queries = cluster_scoped_queries()
    differ = [
        name
        for name, expr in queries.items()
        if keyed(instant(eu, substitute(expr), at)) != keyed(instant(us, substitute(expr), at))
    ]
    assert len(differ) > len(queries) / 2, "choosing a cluster must make a difference"


def test_the_cluster_variable_lists_each_cluster_and_nothing_without_the_label(
    two_clusters: TwoClusters,
) -> None:
    for stem in ("gpu-fleet-health", "gpu-team-waste"):
        expr = variable_queries()[f"{stem} / $cluster"]
        listed = instant(two_clusters.both, substitute(expr), two_clusters.at)
        assert sorted(r["metric"]["cluster"] for r in listed) == sorted(CLUSTER_FLEETS)
        for prom in two_clusters.alone.values():
            assert [r["metric"] for r in instant(prom, substitute(expr), two_clusters.at)] == [{}]


@pytest.mark.parametrize("name", sorted(cluster_scoped_queries()))
def test_a_chosen_cluster_reads_its_own_series_and_all_keeps_clusters_apart_or_adds_them_up(
    two_clusters: TwoClusters, name: str
) -> None:
    """$cluster = one cluster: exactly what that cluster's fleet alone shows. $cluster = All: per-row
    queries show both clusters' rows (same-named nodes, pools, pods not merged); the others add the
    clusters up (counts, spend, GE), but for the ratios of two sums."""
    expr = cluster_scoped_queries()[name]
    at = two_clusters.at
    picked: dict[str, list[dict[str, Any]]] = {}
    for cluster, alone in two_clusters.alone.items():
        result = instant(two_clusters.both, substitute(expr, cluster=cluster), at)
        assert {r["metric"].get("cluster", cluster) for r in result} <= {cluster}, "another cluster's rows"
        own = keyed(instant(alone, substitute(expr), at))
        assert keyed(result, drop="cluster") == pytest.approx(own, rel=REL, nan_ok=True), cluster
        picked[cluster] = result
    every = keyed(instant(two_clusters.both, substitute(expr), at))
    rows = [r for result in picked.values() for r in result]
    union = {k: v for result in picked.values() for k, v in keyed(result).items()}
    if rows and all("cluster" in r["metric"] for r in rows):
        if "topk(" in expr:  # the top rows of both clusters together
            assert every.keys() <= union.keys()
            assert every == pytest.approx({k: union[k] for k in every}, rel=REL, nan_ok=True)
        else:
            assert every == pytest.approx(union, rel=REL, nan_ok=True)
    elif name not in RATIOS:
        assert not any("cluster" in r["metric"] for r in rows), "rows per cluster in some results only"
        eu, us = (keyed(result) for result in picked.values())
        added = {k: eu.get(k, 0.0) + us.get(k, 0.0) for k in eu.keys() | us.keys()}
        assert every == pytest.approx(added, rel=REL, nan_ok=True)


def test_the_ledger_of_all_clusters_holds_the_gpus_of_both(two_clusters: TwoClusters) -> None:
    expr = panel_queries()["gpu-team-waste / GPU-hour ledger: capacity by state / A"]
    ledger = keyed(instant(two_clusters.both, substitute(expr), two_clusters.at))
    gpus = sum(n.gpu_count for prom in two_clusters.alone.values() for n in prom.fleet.nodes)
    assert sum(ledger.values()) == pytest.approx(gpus)


# -- device-health alerts select the GPUs the fleet broke ---------------------------------------------


def selected(prom: BackfilledPrometheus, alert: str, at: datetime) -> dict[str, dict[str, str]]:
    """UUID -> labels of the series the alert's expression selects at `at`."""
    result = instant(prom, alert_exprs()[alert], at)
    out = {r["metric"]["UUID"]: r["metric"] for r in result}
    assert len(out) == len(result), f"{alert}: one series per GPU"
    return out


def event(fleet: SimulatedFleet, kind: str, value: float | None = None) -> Any:
    (found,) = [e for e in fleet.events if e.kind == kind and (value is None or e.value == value)]
    return found


def exporter_of(fleet: SimulatedFleet, node: str) -> Any:
    (target,) = [t for t in fleet.targets if t.node == node]
    return target


def test_critical_xid_pages_for_xid_79_not_for_application_xid_13(
    health_prometheus: BackfilledPrometheus,
) -> None:
    fleet = health_prometheus.fleet
    xid79, xid13 = event(fleet, "xid", 79), event(fleet, "xid", 13)
    assert day_fraction(fleet, 0.1) == xid79.start and day_fraction(fleet, 0.5) == xid13.start
    assert selected(health_prometheus, "GPUCriticalXidError", xid79.start - timedelta(minutes=10)) == {}
    hits = selected(health_prometheus, "GPUCriticalXidError", xid79.start + timedelta(minutes=30))
    assert set(hits) == {xid79.uuid}
    labels = hits[xid79.uuid]
    assert labels["xid"] == "79"
    # The node label is what the exporter calls its host (its own pod name on this old exporter);
    # the scrape target identifies the node.
    target = exporter_of(fleet, xid79.node)
    assert (labels["node"], labels["instance"]) == (target.hostname_value, target.instance)
    # Application XID 13 never pages, and the sticky 79 stops paging an hour after it appeared.
    assert selected(health_prometheus, "GPUCriticalXidError", xid13.start + timedelta(minutes=30)) == {}
    assert selected(health_prometheus, "GPUCriticalXidError", after_all_events(fleet)) == {}
    last = instant(
        health_prometheus,
        recording_rules()["node_gpu:dcgm_xid_last_code:max"] + " > 0",
        xid13.start + timedelta(minutes=30),
    )
    assert {r["metric"]["UUID"]: r["value"][1] for r in last} == {xid79.uuid: "79", xid13.uuid: "13"}


def test_row_remap_failure_selects_the_failed_gpu(health_prometheus: BackfilledPrometheus) -> None:
    fleet = health_prometheus.fleet
    remap = event(fleet, "row_remap_failure")
    assert day_fraction(fleet, 0.8) == remap.start
    assert selected(health_prometheus, "GPURowRemapFailure", remap.start - timedelta(minutes=10)) == {}
    for at in (remap.start + timedelta(minutes=30), fleet.window.end - timedelta(minutes=5)):
        hits = selected(health_prometheus, "GPURowRemapFailure", at)
        assert set(hits) == {remap.uuid}, "a state, not an event: it keeps selecting the GPU"
        assert hits[remap.uuid]["instance"] == exporter_of(fleet, remap.node).instance


def test_high_temperature_selects_the_hot_gpu_only(health_prometheus: BackfilledPrometheus) -> None:
    fleet = health_prometheus.fleet
    hot = event(fleet, "hot")
    assert day_fraction(fleet, 0.6) == hot.start
    assert selected(health_prometheus, "GPUHighTemperature", hot.start - timedelta(minutes=10)) == {}
    hits = selected(health_prometheus, "GPUHighTemperature", hot.start + timedelta(minutes=60))
    assert set(hits) == {hot.uuid}
    assert hits[hot.uuid]["node"] == exporter_of(fleet, hot.node).hostname_value


@pytest.mark.parametrize(
    ("alert", "threshold"), [("GPUMemoryHigh", "0.95"), ("GPUFramebufferNearFull", "0.99")]
)
def test_framebuffer_alerts_select_nothing_on_a_fleet_below_95_percent(
    health_prometheus: BackfilledPrometheus, alert: str, threshold: str
) -> None:
    at = after_all_events(health_prometheus.fleet)
    assert selected(health_prometheus, alert, at) == {}
    ratios = instant(health_prometheus, recording_rules()["node_gpu:dcgm_fb_used_ratio:max"], at)
    assert ratios and max(float(r["value"][1]) for r in ratios) < 0.95
    # The same expression with a threshold the busiest unit passes selects exactly that unit.
    busiest = max(ratios, key=lambda r: float(r["value"][1]))
    lowered = float(busiest["value"][1]) - 1e-9
    expr = alert_exprs()[alert].replace(f"> {threshold}", f"> {lowered!r}")
    assert expr != alert_exprs()[alert]
    hits = instant(health_prometheus, expr, at)
    assert [(r["metric"]["UUID"], r["metric"].get("GPU_I_ID")) for r in hits] == [
        (busiest["metric"]["UUID"], busiest["metric"].get("GPU_I_ID"))
    ]


def test_underutilized_selects_the_held_gpus_below_ten_percent(
    health_prometheus: BackfilledPrometheus,
) -> None:
    """The expression (before its `for: 1h`) selects exactly the held units the fleet ran below 10 %."""
    fleet = health_prometheus.fleet
    step = timedelta(seconds=fleet.window.step_seconds)
    sample = fleet.window.start + step * (int((after_all_events(fleet) - fleet.window.start) / step))
    at = sample + step * 0.75  # backfilled samples sit mid-interval: the instant read is this sample's
    telemetry = fleet.telemetry(
        Window(start=sample, end=sample + step, step_seconds=fleet.window.step_seconds)
    )
    held = {
        (a.uuid, a.gpu_instance_id)
        for a in fleet.allocations
        if a.start <= sample and (a.end is None or a.end > sample)
    }
    low = {
        (u, gi)
        for u, gi, util in telemetry[["uuid", "gpu_instance_id", "util_ratio"]].itertuples(index=False)
        if (u, gi) in held and util < 0.10
    }
    assert low, "the demo fleet has idle held GPUs (notebooks, stuck jobs)"
    hits = instant(health_prometheus, alert_exprs()["GPUUnderutilized"], at)
    got = {(r["metric"]["UUID"], r["metric"].get("GPU_I_ID", "")) for r in hits}
    assert got == low
    assert all(r["metric"]["workload"] for r in hits)


# -- promtool -------------------------------------------------------------------------------------


def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([PROMTOOL, *args], capture_output=True, text=True, timeout=300, check=False)


def test_promtool_accepts_every_rule_file_and_the_generated_prometheus_rule(tmp_path: Path) -> None:
    files = [*sorted(ALERTS.glob("*.rules.yml")), ALERTS / "budgets.example.yml"]
    done = promtool("check", "rules", *map(str, files))
    assert done.returncode == 0, done.stdout + done.stderr
    spec = yaml.safe_load((ROOT / "deploy" / "prometheusrule.yaml").read_text(encoding="utf-8"))["spec"]
    plain = tmp_path / "prometheusrule-groups.yml"
    plain.write_text(yaml.safe_dump(spec), encoding="utf-8")
    done = promtool("check", "rules", str(plain))
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"SUCCESS: {len(rule_file_rules())} rules found" in done.stdout


RULE_TESTS = sorted((ALERTS / "tests").glob("*.test.yml"))


def test_every_rule_test_file_is_run() -> None:
    assert {p.name for p in (ALERTS / "tests").glob("*.yml")} == {p.name for p in RULE_TESTS}
    assert {"recording.test.yml", "daily.test.yml", "clusters.test.yml"} <= {p.name for p in RULE_TESTS}


@pytest.mark.parametrize("test_file", RULE_TESTS, ids=lambda p: p.name)
def test_promtool_rule_unit_tests_pass(test_file: Path) -> None:
    done = promtool("test", "rules", str(test_file))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "FAILED" not in done.stdout + done.stderr
    assert "SUCCESS" in done.stdout
