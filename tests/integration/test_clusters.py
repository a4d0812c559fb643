"""Several clusters as one fleet, end to end: `gpuwatch report` over three simulated clusters, each with its
own Kubernetes API test server. Two share one real Prometheus, told apart by the `cluster` label each
cluster's Prometheus adds as an external label; the third has its own VictoriaMetrics. Every cluster's
node names are the same (gpu-h100-000, ...), as clusters built from one template have.
"""

import json
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from gpuwatch.core.config import ViewSettings, load_settings
from gpuwatch.core.model import LEDGER_STATES
from gpuwatch.read.service import FleetService
from gpuwatch.sim import SimulatedFleet, build_demo_fleet
from gpuwatch.sim.backfill import write_fleet_backfill
from gpuwatch.sim.exposition import with_counterparts
from gpuwatch.sim.kubeapi import KubeApiServer, write_kubeconfig
from gpuwatch.sources.dcgm import UTIL_FIELDS
from gpuwatch.sources.promql import field_aliases_selector
from gpuwatch.surfaces.check import check
from gpuwatch.views.base import STATE_COLUMNS, Scope
from gpuwatch.views.reader import open_view, trend_report
from gpuwatch.views.recorded import RecordedView
from tests.integration.prom import PrometheusServer, VictoriaMetricsServer, create_blocks, free_port, series

pytestmark = pytest.mark.integration
END = datetime(2026, 11, 20, tzinfo=UTC)
METRICS = with_counterparts(("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_PROF_GR_ENGINE_ACTIVE", "DCGM_FI_DEV_FB_USED"))
SHARED, OWN = ("eu-1", "us-1"), "ap-1"
TOKEN = "clusters-token"


@dataclass(frozen=True)
class Fleet:
    fleets: dict[str, SimulatedFleet]
    prometheus_url: str
    victoria_url: str
    kubeconfigs: dict[str, str]
    servers: dict[str, KubeApiServer]


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    fleets = {
        name: build_demo_fleet(seed=seed, end=END, days=0.25, gpus=48)
        for name, seed in (("eu-1", 31), ("us-1", 32), ("ap-1", 33))
    }
    work = tmp_path_factory.mktemp("clusters")
    # The exporter's settings are the report's (_config): it publishes the prices the raw path uses.
    (work / "exporter.yaml").write_text("teams: {namespaces: {notebooks: data-science}}\n")
    exporter = load_settings(config_path=str(work / "exporter.yaml"), env={})
    # Each shared cluster's history (DCGM series, gpuwatch_* series and their roll-ups), labelled as its
    # Prometheus and its exporter label what they send the shared store.
    for name in SHARED:
        om = work / f"{name}.om"
        with om.open("w", encoding="utf-8") as out:
            write_fleet_backfill(fleets[name], out, metrics=METRICS, settings=exporter, cluster=name)
        create_blocks(om, work / "tsdb")
    own = work / f"{OWN}.om"
    with own.open("w", encoding="utf-8") as out:
        write_fleet_backfill(fleets[OWN], out, metrics=METRICS, settings=exporter)
    with PrometheusServer(work / "tsdb") as prom, VictoriaMetricsServer(work / "victoria-metrics") as vm:
        vm.import_openmetrics(own)
        servers = {name: KubeApiServer(f, token=TOKEN).start() for name, f in fleets.items()}
        try:
            kubeconfigs = {}
            for name, server in servers.items():
                path = work / f"kubeconfig-{name}"
                write_kubeconfig(path, server_url=server.url, token=TOKEN, ca_pem=server.ca_pem)
                kubeconfigs[name] = str(path)
            yield Fleet(fleets, prom.url, vm.url, kubeconfigs, servers)
        finally:
            for server in servers.values():
                server.close()


def _config(fleet: Fleet, path: Path, kubeconfigs: dict[str, str] | None = None) -> Path:
    kubeconfigs = kubeconfigs or fleet.kubeconfigs
    lines = [
        f"prometheus: {{url: {fleet.prometheus_url}}}",
        "teams: {namespaces: {notebooks: data-science}}",
        "clusters:",
        *(f"  - {{name: {name}, kubeconfig: {kubeconfigs[name]}}}" for name in SHARED),
        f"  - {{name: {OWN}, kubeconfig: {kubeconfigs[OWN]}, prometheus: {{url: {fleet.victoria_url}}}}}",
    ]
    path.write_text("\n".join(lines) + "\n")
    return path


def _run(config: Path, window_fleet: SimulatedFleet, *extra: str) -> str:
    """`gpuwatch report` over the window of `window_fleet` with `config`: its standard output."""
    window = window_fleet.window
    span = ["--start", window.start.isoformat(), "--end", window.end.isoformat()]
    result = subprocess.run(
        [sys.executable, "-m", "gpuwatch", "report", "--config", str(config), "--step", "60s", *span, *extra],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def _report(config: Path, window_fleet: SimulatedFleet) -> dict[str, Any]:
    report: dict[str, Any] = json.loads(_run(config, window_fleet, "--format", "json"))
    return report


def _history_report(config: Path, window_fleet: SimulatedFleet) -> dict[str, Any]:
    """The report from the clusters' gpuwatch_* history (--source history fails rather than read raw)."""
    report: dict[str, Any] = json.loads(_run(config, window_fleet, "--source", "history", "--format", "json"))
    assert any(w.startswith("history path: ") for w in report["coverage"]["warnings"])
    return report


def _truth(fleet: SimulatedFleet) -> dict[str, float]:
    truth = fleet.truth()
    step_h = fleet.window.step_seconds / 3600
    return {
        "gpus": float(sum(n.gpu_count for n in fleet.nodes)),
        "capacity_gpu_hours": sum(n.gpu_count for n in fleet.nodes) * fleet.window.duration_seconds / 3600,
        "allocated_gpu_hours": float(truth["ge_share"].sum()) * step_h,
        "used_gpu_hours": float((truth["ge_share"] * truth["util_ratio"]).fillna(0.0).sum()) * step_h,
    }


def _namespace_truth(fleets: list[SimulatedFleet]) -> pd.Series:
    parts = []
    for f in fleets:
        truth = f.truth()
        parts.append((truth["ge_share"] * f.window.step_seconds / 3600).groupby(truth["namespace"]).sum())
    return pd.concat(parts).groupby(level=0).sum()


def test_each_cluster_and_the_fleet_equal_the_simulators_truth(fleet: Fleet, tmp_path: Path) -> None:
    report = _report(_config(fleet, tmp_path / "gpuwatch.yaml"), fleet.fleets["eu-1"])
    clusters = {c["cluster"]: c for c in report["clusters"]}
    assert sorted(clusters) == ["ap-1", "eu-1", "us-1"]
    for name, f in fleet.fleets.items():
        got, want = clusters[name], _truth(f)
        assert got["error"] is None and got["gpus"] == want["gpus"], name
        assert got["capacity_gpu_hours"] == pytest.approx(want["capacity_gpu_hours"], rel=1e-9), name
        for key in ("allocated_gpu_hours", "used_gpu_hours"):
            assert got[key] == pytest.approx(want[key], rel=0.01), (name, key)
        # The ledger sums to capacity in each cluster.
        assert sum(got["ledger_gpu_hours"].values()) == pytest.approx(got["capacity_gpu_hours"], rel=1e-9)
        assert set(got["ledger_gpu_hours"]) == set(LEDGER_STATES)
        assert got["cost_usd"] > 0 and 0 <= got["waste_usd"] <= got["cost_usd"]
    # The fleet is the sum of its clusters, and the ledger sums to capacity over all of them.
    totals = report["fleet"]
    assert totals["gpus"] == sum(c["gpus"] for c in clusters.values()) == 3 * 48
    for key in ("capacity_gpu_hours", "allocated_gpu_hours", "used_gpu_hours", "cost_usd", "waste_usd"):
        assert totals[key] == pytest.approx(sum(c[key] for c in clusters.values()), rel=1e-9), key
    assert sum(totals["ledger_gpu_hours"].values()) == pytest.approx(totals["capacity_gpu_hours"], rel=1e-9)
    want_allocated = sum(_truth(f)["allocated_gpu_hours"] for f in fleet.fleets.values())
    assert totals["allocated_gpu_hours"] == pytest.approx(want_allocated, rel=0.01)
    # A namespace present in every cluster is one row holding all of its GPU-hours.
    rows = pd.DataFrame(report["namespaces"])  # a row per namespace and team (pods label their own)
    got = rows.groupby("namespace")["allocated_gpu_hours"].sum()
    want = _namespace_truth(list(fleet.fleets.values()))
    assert sorted(got.index) == sorted(want.index)
    for namespace in want.index:
        assert got[namespace] == pytest.approx(want[namespace], rel=0.01), namespace
    # Nodes of the same name in two clusters stay two nodes: 3 clusters × 48 GPUs in the pools.
    assert sum(p["gpus"] for p in report["pools"]) == 3 * 48
    assert {p["vendor"] for p in report["pools"]} == {"nvidia", "amd"}


def test_group_by_cluster_is_one_row_per_cluster(fleet: Fleet, tmp_path: Path) -> None:
    csv = _run(
        _config(fleet, tmp_path / "gpuwatch.yaml"),
        fleet.fleets["eu-1"],
        "--group-by",
        "cluster",
        "--format",
        "csv",
    )
    lines = csv.strip().splitlines()
    header = lines[0].split(",")
    assert header[2:5] == ["cluster", "gpus", "capacity_gpu_hours"]
    assert [line.split(",")[2] for line in lines[1:]] == ["ap-1", "eu-1", "us-1"]


def test_a_cluster_whose_api_server_is_down_is_named_and_the_others_stay_whole(
    fleet: Fleet, tmp_path: Path
) -> None:
    whole = _report(_config(fleet, tmp_path / "all.yaml"), fleet.fleets["eu-1"])
    # us-1's API server stops answering: its kubeconfig now names a port nobody listens on.
    with KubeApiServer(fleet.fleets["us-1"], token=TOKEN) as gone:
        dead = tmp_path / "kubeconfig-dead"
        write_kubeconfig(dead, server_url=gone.url, token=TOKEN, ca_pem=gone.ca_pem)
    config = _config(fleet, tmp_path / "down.yaml", {**fleet.kubeconfigs, "us-1": str(dead)})
    report = _report(config, fleet.fleets["eu-1"])
    clusters = {c["cluster"]: c for c in report["clusters"]}
    down = clusters["us-1"]
    assert "unreachable" in down["error"]
    assert all(down[k] is None for k in ("gpus", "capacity_gpu_hours", "allocated_gpu_hours", "cost_usd"))
    assert any(w.startswith("cluster us-1: not read") for w in report["coverage"]["warnings"])
    before = {c["cluster"]: c for c in whole["clusters"]}
    # The clusters read are unchanged: what they have, hold, use and cost. (Their stranded GPU-hours may
    # move: a pool's fragmentation weighs free GPUs by the pod sizes the pool sees across the fleet.)
    kept = ("gpus", "capacity_gpu_hours", "allocated_gpu_hours", "used_gpu_hours", "cost_usd", "waste_usd")
    for name in ("eu-1", "ap-1"):
        assert {k: clusters[name][k] for k in kept} == {k: before[name][k] for k in kept}, name
    assert report["fleet"]["gpus"] == 2 * 48
    assert report["fleet"]["capacity_gpu_hours"] == pytest.approx(
        before["eu-1"]["capacity_gpu_hours"] + before["ap-1"]["capacity_gpu_hours"]
    )


def test_check_judges_each_cluster_on_its_own_series(fleet: Fleet, tmp_path: Path) -> None:
    settings = load_settings(config_path=str(_config(fleet, tmp_path / "gpuwatch.yaml")), env={})
    result = check(settings, clock=lambda: END)
    assert result.problems == [] and not result.unreachable
    for name, f in fleet.fleets.items():
        mine = [line for line in result.findings if line.startswith(f"cluster {name}: ")]
        # Each cluster's coverage counts its own GPU-samples only (the shared store holds two clusters').
        coverage = next(line for line in mine if "coverage (" in line)
        hour = 60 * sum(n.gpu_count for n in f.nodes if n.ready)
        found = re.search(r": ([\d,]+) of ([\d,]+) GPU-samples present", coverage)
        assert found is not None, coverage
        present, expected = (int(g.replace(",", "")) for g in found.groups())
        # Read without its matchers, a shared cluster would count the other's GPUs on its nodes too.
        assert expected == hour and 0.95 * hour <= present <= hour, coverage
        assert any(line.endswith("can list pods") for line in mine)
    # Discovery reads each shared cluster's series alone: its own utilization series, not the store's.
    util = field_aliases_selector(UTIL_FIELDS)
    everything = series(fleet.prometheus_url, util, END - timedelta(minutes=10), END)
    for name in SHARED:
        line = next(f for f in result.findings if f.startswith(f"cluster {name}: prometheus "))
        own = [s for s in everything if s.get("cluster") == name]
        assert f" {len(own)} utilization series in the last 10 minutes" in line, line
        assert 0 < len(own) < len(everything)


def test_history_path_reads_each_cluster_from_its_own_history(fleet: Fleet, tmp_path: Path) -> None:
    config = _config(fleet, tmp_path / "gpuwatch.yaml")
    raw = _report(config, fleet.fleets["eu-1"])
    history = _history_report(config, fleet.fleets["eu-1"])
    got = {c["cluster"]: c for c in history["clusters"]}
    want = {c["cluster"]: c for c in raw["clusters"]}
    assert sorted(got) == ["ap-1", "eu-1", "us-1"]
    for name in got:  # each cluster's own gpuwatch_* series, as the raw path recomputes them
        assert got[name]["error"] is None and got[name]["gpus"] == want[name]["gpus"] == 48, name
        assert got[name]["capacity_gpu_hours"] == pytest.approx(want[name]["capacity_gpu_hours"], rel=1e-6)
        for key in ("allocated_gpu_hours", "used_gpu_hours", "cost_usd", "waste_usd"):
            assert got[name][key] == pytest.approx(want[name][key], rel=0.01), (name, key)
        ledger = got[name]["ledger_gpu_hours"]
        assert sum(ledger.values()) == pytest.approx(got[name]["capacity_gpu_hours"], rel=1e-9), name
    totals = history["fleet"]
    for key in (
        "gpus",
        "capacity_gpu_hours",
        "allocated_gpu_hours",
        "used_gpu_hours",
        "cost_usd",
        "waste_usd",
    ):
        assert totals[key] == pytest.approx(sum(c[key] for c in got.values()), rel=1e-9), key
    assert sum(totals["ledger_gpu_hours"].values()) == pytest.approx(totals["capacity_gpu_hours"], rel=1e-9)
    # Each workload is its cluster's (qualified pod names), a namespace one row across the clusters.
    clusters = {w["pod"].partition("/")[0] for w in history["workloads"]}
    assert clusters == {"ap-1", "eu-1", "us-1"}
    rows = pd.DataFrame(history["namespaces"]).groupby("namespace")["allocated_gpu_hours"].sum()
    truth = _namespace_truth(list(fleet.fleets.values()))
    for namespace in truth.index:
        assert rows[namespace] == pytest.approx(truth[namespace], rel=0.01), namespace
    # Each cluster's queues from the quota and usage its exporter published, under their qualified names.
    queues = {q["cluster_queue"]: q for q in history["queues"]}
    expected = {q["cluster_queue"]: q for q in raw["queues"]}
    assert len(expected) > 0 and sorted(queues) == sorted(expected)
    assert {c.partition("/")[0] for c in queues} == set(got)
    for name, row in expected.items():
        assert queues[name]["nominal_gpus"] == pytest.approx(row["nominal_gpus"]), name
        assert queues[name]["used_gpu_hours"] == pytest.approx(row["used_gpu_hours"], rel=0.01, abs=0.05), (
            name
        )


def test_a_cluster_of_a_shared_store_reads_its_own_history_alone(fleet: Fleet, tmp_path: Path) -> None:
    whole = _history_report(_config(fleet, tmp_path / "all.yaml"), fleet.fleets["eu-1"])
    eu = next(c for c in whole["clusters"] if c["cluster"] == "eu-1")
    config = tmp_path / "eu-1.yaml"
    config.write_text(
        f"prometheus: {{url: {fleet.prometheus_url}}}\n"
        "teams: {namespaces: {notebooks: data-science}}\n"
        f"clusters:\n  - {{name: eu-1, kubeconfig: {fleet.kubeconfigs['eu-1']}}}\n"
    )
    alone = _history_report(config, fleet.fleets["eu-1"])
    # Under its cluster="eu-1" matcher: us-1's series in the same store count nowhere.
    assert alone["fleet"]["gpus"] == 48
    for key in ("capacity_gpu_hours", "allocated_gpu_hours", "used_gpu_hours", "cost_usd", "waste_usd"):
        assert alone["fleet"][key] == pytest.approx(eu[key], rel=1e-9), key
    assert not any("/" in w["pod"] for w in alone["workloads"])


def test_a_recorded_view_of_the_clusters_and_of_one_of_them(fleet: Fleet, tmp_path: Path) -> None:
    config = _config(fleet, tmp_path / "gpuwatch.yaml")
    settings = load_settings(config_path=str(config), env={})
    service = FleetService.live(replace(settings, views=ViewSettings(raw_max_gpu_samples=0)))
    window = fleet.fleets["eu-1"].window
    view = open_view(service, window, computed_at=END)
    assert isinstance(view, RecordedView)  # every GPU-sample is too many: the history path
    report = _history_report(config, fleet.fleets["eu-1"])
    keys = ("capacity_gpu_hours", "allocated_gpu_hours", "used_gpu_hours", "cost_usd", "waste_usd")
    for key in keys:
        assert view.headline["fleet"][key] == pytest.approx(report["fleet"][key], rel=1e-9), key
    rows = {c["cluster"]: c for c in report["clusters"]}
    drawn = {c["cluster"]: c for c in view.headline["clusters"]}
    assert sorted(drawn) == sorted(rows)
    for name, row in rows.items():
        assert drawn[name]["gpus"] == row["gpus"] == 48
        for key in keys:
            assert drawn[name][key] == pytest.approx(row[key], rel=1e-9), (name, key)
    # The ledger drawn over time: the three clusters' buckets summed, 3 × 48 GPUs in each.
    timeline = view.ledger_timeline()
    assert len(timeline) > 0 and timeline[STATE_COLUMNS].sum(axis=1).to_numpy() == pytest.approx(144.0)
    assert len(view.team_timeline()) > 0 and len(view.fragmentation_timeline()) > 0
    # One cluster: its own history alone, its nodes and its buckets.
    eu = view.scoped(Scope(clusters=("eu-1",)))
    for key in keys:
        assert eu.headline["fleet"][key] == pytest.approx(rows["eu-1"][key], rel=1e-9), key
    assert [c["cluster"] for c in eu.headline["clusters"]] == ["eu-1"]
    assert eu.ledger_timeline()[STATE_COLUMNS].sum(axis=1).to_numpy() == pytest.approx(48.0)
    nodes = eu.nodes_now()
    assert nodes["node"].str.startswith("eu-1/").all() and nodes["capacity_ge"].sum() == 48
    assert nodes[STATE_COLUMNS].sum(axis=1).sum() == pytest.approx(48.0)
    assert {w["pod"].partition("/")[0] for w in eu.report["workloads"]} == {"eu-1"}
    # The Teams page's trend of the cluster: its teams from its own team series.
    trend = {
        t["team"]: t
        for t in trend_report(service, window, Scope(clusters=("eu-1",)), computed_at=END)["teams"]
    }
    teams = {t["team"]: t for t in eu.report["teams"]}
    assert sorted(trend) == sorted(teams)
    for team, row in teams.items():
        for key in ("allocated_gpu_hours", "used_gpu_hours", "cost_usd", "waste_usd"):
            assert trend[team][key] == pytest.approx(row[key], rel=1e-9), (team, key)


def test_a_cluster_whose_store_is_down_is_named_and_the_others_history_stays_whole(
    fleet: Fleet, tmp_path: Path
) -> None:
    whole = {
        c["cluster"]: c
        for c in _history_report(_config(fleet, tmp_path / "all.yaml"), fleet.fleets["eu-1"])["clusters"]
    }
    # ap-1's own store stops answering: its URL names a port nobody listens on.
    down = replace(fleet, victoria_url=f"http://127.0.0.1:{free_port()}")
    report = _history_report(_config(down, tmp_path / "down.yaml"), fleet.fleets["eu-1"])
    clusters = {c["cluster"]: c for c in report["clusters"]}
    assert clusters["ap-1"]["error"] == "no gpuwatch_* history read for the window"
    assert all(clusters["ap-1"][k] is None for k in ("gpus", "capacity_gpu_hours", "allocated_gpu_hours"))
    assert any(
        w.startswith("cluster ap-1: gpuwatch_* history not read") for w in report["coverage"]["warnings"]
    )
    kept = ("gpus", "capacity_gpu_hours", "allocated_gpu_hours", "used_gpu_hours", "cost_usd", "waste_usd")
    for name in SHARED:
        for key in kept:
            assert clusters[name][key] == pytest.approx(whole[name][key], rel=1e-9), (name, key)
    assert report["fleet"]["capacity_gpu_hours"] == pytest.approx(
        sum(whole[name]["capacity_gpu_hours"] for name in SHARED), rel=1e-9
    )
    # Drawn on the recorded path: ap-1 is left out (its row says why), the others' buckets are whole.
    settings = load_settings(config_path=str(_config(down, tmp_path / "down.yaml")), env={})
    service = FleetService.live(replace(settings, views=ViewSettings(raw_max_gpu_samples=0)))
    view = open_view(service, fleet.fleets["eu-1"].window, computed_at=END)
    assert isinstance(view, RecordedView)
    assert {c["cluster"]: c["error"] for c in view.headline["clusters"]}["ap-1"] is not None
    timeline = view.ledger_timeline()
    assert len(timeline) > 0 and timeline[STATE_COLUMNS].sum(axis=1).to_numpy() == pytest.approx(96.0)


def test_a_recorded_view_keeps_the_history_of_a_cluster_whose_api_server_is_down(
    fleet: Fleet, tmp_path: Path
) -> None:
    with KubeApiServer(fleet.fleets["us-1"], token=TOKEN) as gone:
        dead = tmp_path / "kubeconfig-dead"
        write_kubeconfig(dead, server_url=gone.url, token=TOKEN, ca_pem=gone.ca_pem)
    config = _config(fleet, tmp_path / "down.yaml", {**fleet.kubeconfigs, "us-1": str(dead)})
    settings = load_settings(config_path=str(config), env={})
    service = FleetService.live(replace(settings, views=ViewSettings(raw_max_gpu_samples=0)))
    view = open_view(service, fleet.fleets["eu-1"].window, computed_at=END)
    assert isinstance(view, RecordedView)
    whole = {
        c["cluster"]: c
        for c in _history_report(_config(fleet, tmp_path / "all.yaml"), fleet.fleets["eu-1"])["clusters"]
    }
    rows = {c["cluster"]: c for c in view.headline["clusters"]}
    # us-1's history is whole (its store answers); what its API server says now is missing, and said so.
    for key in ("capacity_gpu_hours", "allocated_gpu_hours", "cost_usd"):
        assert rows["us-1"][key] == pytest.approx(whole["us-1"][key], rel=1e-9), key
    warnings = view.headline["coverage"]["warnings"]
    assert any(w.startswith("cluster us-1: API server not read") for w in warnings)
    assert not view.nodes()["node"].str.startswith("us-1/").any()
