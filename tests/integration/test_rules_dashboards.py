"""Rules and dashboards against a real Prometheus backfilled with the demo fleet's DCGM history.

Every recording-rule expression, alert expression, Grafana panel query and variable query must parse
(HTTP 200, status success) in both label layouts; those over raw DCGM series must return data, and the
device-health alerts must select exactly the GPUs the simulated fleet broke (SPEC §5). promtool checks
the rule files, the generated PrometheusRule and runs the rule unit tests.
"""

import json
import re
import subprocess
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import requests
import yaml

from gpuwatch.model import Window
from gpuwatch.sources import promql
from gpuwatch.sources.simulated import SimulatedFleet, build_demo_fleet
from gpuwatch.sources.simulated.exposition import FAMILY_NAMES
from tests.integration.prom import PROMTOOL, BackfilledPrometheus, PrometheusFactory

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
    "$pool": ".*",
    "$team": ".*",
    "$node": ".*",
    "$hostname": ".*",
    "$model": ".*",
}

# The backfill carries gpuwatch's own history (the gpuwatch_* series `gpuwatch export` would have
# published, SPEC §4.3) beside the DCGM series: queries over either must return data.
GPUWATCH_SERIES_IN_BACKFILL = True


def needs_gpuwatch_series(expr: str) -> bool:
    """Queries over gpuwatch_* series (directly or through a gpuwatch recording rule)."""
    return "gpuwatch_" in expr


def must_return_data(expr: str) -> bool:
    return GPUWATCH_SERIES_IN_BACKFILL or not needs_gpuwatch_series(expr)


def substitute(expr: str) -> str:
    for name in sorted(VARIABLES, key=len, reverse=True):
        expr = expr.replace(name, VARIABLES[name])
    assert not re.search(r"\$[A-Za-z_]", expr), f"unsubstituted variable in {expr}"
    return expr


def instant(prom: BackfilledPrometheus, expr: str, at: datetime) -> list[dict[str, Any]]:
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
    """'<dashboard> / $<name>' -> the PromQL a variable query sends (label_values as a series selector)."""
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
    yield prometheus_factory(health_fleet, layout=request.param, metrics=HEALTH_METRICS, gpuwatch_series=True)


def day_fraction(fleet: SimulatedFleet, fraction: float) -> datetime:
    return fleet.window.start + (fleet.window.end - fleet.window.start) * fraction


def after_all_events(fleet: SimulatedFleet) -> datetime:
    """Inside the simulated day, after every health event started (the last, at 80 %, is the row remap)."""
    at = max(e.start for e in fleet.events) + timedelta(minutes=45)
    assert at < fleet.window.end
    return at


# -- every query parses; DCGM ones return data ------------------------------------------------------


NONZERO = {promql.rollup_name(metric, function) for metric, function in promql.NONZERO_ROLLUPS}


@pytest.mark.parametrize("name", sorted(recording_rules()))
def test_recording_rule_expression_runs(health_prometheus: BackfilledPrometheus, name: str) -> None:
    expr = recording_rules()[name]
    at = after_all_events(health_prometheus.fleet)
    result = instant(health_prometheus, expr, at)
    if name in NONZERO:  # `(…) > 0`: the pods above zero of the whole expression, which returns data
        whole = instant(health_prometheus, expr.strip().removeprefix("(").removesuffix(") > 0"), at)
        assert whole and all(float(s["value"][1]) >= 0 for s in whole)
        above = {json.dumps(s["metric"], sort_keys=True) for s in whole if float(s["value"][1]) > 0}
        assert {json.dumps(s["metric"], sort_keys=True) for s in result} == above
    elif must_return_data(expr):
        assert result, f"{name} returned no data over the {health_prometheus.layout} backfill"
        for sample in result:
            assert "__name__" not in sample["metric"]


@pytest.mark.parametrize("name", sorted(panel_queries()))
def test_dashboard_panel_query_runs(health_prometheus: BackfilledPrometheus, name: str) -> None:
    expr = panel_queries()[name]
    result = instant(health_prometheus, substitute(expr), after_all_events(health_prometheus.fleet))
    if must_return_data(expr):
        assert result, f"{name} returned no data over the {health_prometheus.layout} backfill"


@pytest.mark.parametrize("name", sorted(variable_queries()))
def test_dashboard_variable_query_runs(health_prometheus: BackfilledPrometheus, name: str) -> None:
    expr = variable_queries()[name]
    result = instant(health_prometheus, substitute(expr), after_all_events(health_prometheus.fleet))
    if must_return_data(expr):
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
        for r in instant(health_prometheus, variable_queries()["gpu-fleet-health / $hostname"], at)
    ]
    values = {m.group(1) for line in lines if (m := regex.search(line))}
    ready = {n.name for n in fleet.nodes if n.ready}
    expected = {t.hostname_value for t in fleet.targets if t.node in ready}
    assert values == expected
    assert {t.hostname_label for t in fleet.targets} == {"Hostname", "hostname"}


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


def test_promtool_rule_unit_tests_pass() -> None:
    done = promtool("test", "rules", *map(str, sorted((ALERTS / "tests").glob("*.yml"))))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "FAILED" not in done.stdout + done.stderr
