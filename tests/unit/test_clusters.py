"""Several clusters as one fleet: names qualified by their cluster, each cluster read from its own sources,
one that cannot be read named and left out, the report's clusters[] worked out from the parts."""

from datetime import UTC, datetime
from pathlib import Path

import pandas as pd
import pytest

from gpuwatch.core.config import Settings, load_settings
from gpuwatch.core.errors import KubernetesError, PrometheusError
from gpuwatch.core.model import Window, cluster_of, qualified
from gpuwatch.read.service import FleetService, MultiClusterSources, member_state
from gpuwatch.sim import build_demo_fleet
from gpuwatch.sim.demoservice import SimulatedSources, demo_service, demo_settings
from gpuwatch.sources.kubernetes import ClusterState
from gpuwatch.surfaces.report import build_report, group_rows
from gpuwatch.views.base import Scope
from gpuwatch.views.raw import filter_analysis

END = datetime(2026, 11, 20, tzinfo=UTC)


class DownSources(SimulatedSources):
    """A cluster whose API server refuses every list (a fault a real test server is not made to give)."""

    def cluster_state(self) -> ClusterState:
        raise KubernetesError("kubernetes API at https://10.0.0.1:6443 unreachable: connection refused")


@pytest.fixture(scope="module")
def fleets() -> dict[str, SimulatedSources]:
    return {
        name: SimulatedSources(build_demo_fleet(seed=seed, end=END, days=0.1, gpus=16))
        for name, seed in (("eu-1", 1), ("us-1", 2))
    }


def test_names_are_qualified_by_their_cluster() -> None:
    assert qualified("eu-1", "gpu-h100-000") == "eu-1/gpu-h100-000"
    assert qualified("", "gpu-h100-000") == "gpu-h100-000" and qualified("eu-1", "") == ""
    assert cluster_of("eu-1/gpu-h100-000") == "eu-1"
    assert cluster_of("gpu-h100-000", "lab") == "lab"


def test_the_merged_state_keeps_two_clusters_nodes_of_one_name_apart(
    fleets: dict[str, SimulatedSources],
) -> None:
    sources = MultiClusterSources(fleets)
    state = sources.cluster_state()
    eu, us = (f.cluster_state() for f in fleets.values())
    assert {n.name for n in eu.nodes} == {n.name for n in us.nodes}  # one template, one set of names
    assert len(state.nodes) == len(eu.nodes) + len(us.nodes)
    assert {n.name for n in state.nodes} == {f"eu-1/{n.name}" for n in eu.nodes} | {
        f"us-1/{n.name}" for n in us.nodes
    }
    running = [p for p in state.pods if p.node]
    assert running and all(cluster_of(p.name) == cluster_of(p.node or "") for p in running)
    # Each cluster's part is its own state again, as its own sources know it.
    back = member_state(state, "us-1")
    assert back.nodes == us.nodes and back.pods == us.pods
    assert back.exporter_pod_nodes == us.exporter_pod_nodes


def test_the_fleet_report_is_the_sum_of_its_clusters(fleets: dict[str, SimulatedSources]) -> None:
    window = next(iter(fleets.values())).fleet.window
    service = FleetService(settings=demo_settings(Settings()), sources=MultiClusterSources(fleets))
    report = build_report(service.analysis(window))
    alone = {
        name: build_report(FleetService(settings=demo_settings(Settings()), sources=f).analysis(window))
        for name, f in fleets.items()
    }
    clusters = {c["cluster"]: c for c in report["clusters"]}
    for name, own in alone.items():
        fleet = own["fleet"]
        got = clusters[name]
        assert got["gpus"] == fleet["gpus"] == sum(n.gpu_count for n in fleets[name].fleet.nodes)
        for key in ("capacity_gpu_hours", "allocated_gpu_hours", "used_gpu_hours", "cost_usd", "waste_usd"):
            assert got[key] == pytest.approx(fleet[key], rel=1e-9), (name, key)
    assert report["fleet"]["gpus"] == sum(a["fleet"]["gpus"] for a in alone.values())
    assert report["fleet"]["cost_usd"] == pytest.approx(sum(a["fleet"]["cost_usd"] for a in alone.values()))
    rows = group_rows(report, "cluster")
    assert [r["cluster"] for r in rows] == ["eu-1", "us-1"]


def test_a_cluster_not_read_is_a_row_of_unknowns_and_a_warning(fleets: dict[str, SimulatedSources]) -> None:
    down = DownSources(next(iter(fleets.values())).fleet)
    sources = MultiClusterSources({"eu-1": fleets["eu-1"], "us-1": down})
    window = down.fleet.window
    report = build_report(FleetService(settings=demo_settings(Settings()), sources=sources).analysis(window))
    clusters = {c["cluster"]: c for c in report["clusters"]}
    assert (
        clusters["us-1"]["error"] == "kubernetes API at https://10.0.0.1:6443 unreachable: connection refused"
    )
    assert clusters["us-1"]["gpus"] is None and clusters["us-1"]["cost_usd"] is None
    eu_gpus = sum(n.gpu_count for n in fleets["eu-1"].fleet.nodes)
    assert (
        clusters["eu-1"]["error"] is None and report["fleet"]["gpus"] == clusters["eu-1"]["gpus"] == eu_gpus
    )
    assert (
        "cluster us-1: not read (kubernetes API at https://10.0.0.1:6443 unreachable: connection refused); "
        "its GPUs are left out of this view" in report["coverage"]["warnings"]
    )


def test_one_cluster_and_no_clusters_list_report_one_unnamed_cluster(
    fleets: dict[str, SimulatedSources],
) -> None:
    f = fleets["eu-1"]
    report = build_report(
        FleetService(settings=demo_settings(Settings()), sources=f).analysis(f.fleet.window)
    )
    (row,) = report["clusters"]
    assert row["cluster"] == "" and row["gpus"] == report["fleet"]["gpus"]
    assert row["capacity_gpu_hours"] == pytest.approx(report["fleet"]["capacity_gpu_hours"])
    assert pd.Series(row["ledger_gpu_hours"]).sum() == pytest.approx(row["capacity_gpu_hours"])


def test_a_cluster_filter_keeps_that_clusters_nodes_pods_and_banner(
    fleets: dict[str, SimulatedSources],
) -> None:
    down = DownSources(fleets["us-1"].fleet)
    sources = MultiClusterSources({**fleets, "ap-1": down})
    window = down.fleet.window
    analysis = FleetService(settings=demo_settings(Settings()), sources=sources).analysis(window)
    alone = build_report(
        FleetService(settings=demo_settings(Settings()), sources=fleets["eu-1"]).analysis(window)
    )
    eu = build_report(filter_analysis(analysis, Scope(clusters=("eu-1",))))
    assert [c["cluster"] for c in eu["clusters"]] == ["eu-1"]  # no banner for a cluster not shown
    for key in ("gpus", "capacity_gpu_hours", "allocated_gpu_hours", "cost_usd"):
        assert eu["fleet"][key] == pytest.approx(alone["fleet"][key], rel=1e-9), key
    assert {cluster_of(p["pod"]) for p in eu["pending"]} <= {"eu-1"}
    assert all(cluster_of(w["pod"]) == "eu-1" for w in eu["workloads"])
    ap = build_report(filter_analysis(analysis, Scope(clusters=("ap-1",))))
    assert [(c["cluster"], c["gpus"]) for c in ap["clusters"]] == [("ap-1", None)] and ap["fleet"][
        "gpus"
    ] == 0


def test_the_demo_with_a_clusters_list_simulates_one_cluster_per_name() -> None:
    settings = load_settings(
        config_path=str(Path(__file__).parents[2] / "docs/examples/two-clusters.yaml"), env={}
    )
    fleet = build_demo_fleet(seed=42, end=END, days=0.1)
    service = demo_service(settings, fleet, history_days=0.1)
    assert isinstance(service.sources, MultiClusterSources) and list(service.sources.members) == [
        "eu-1",
        "us-1",
    ]
    report = build_report(service.analysis(fleet.window))
    assert [(c["cluster"], c["gpus"]) for c in report["clusters"]] == [("eu-1", 96), ("us-1", 96)]
    assert report["fleet"]["gpus"] == 192


class StoreDownSources(SimulatedSources):
    """A cluster whose store refuses every query (the API server answers)."""

    def gpu_samples(self, window: Window, state: ClusterState) -> pd.DataFrame:
        raise PrometheusError("prometheus at http://10.0.0.2:9090 unreachable: connection refused")

    def allocation_history(self, window: Window) -> pd.DataFrame | None:
        raise PrometheusError("prometheus at http://10.0.0.2:9090 unreachable: connection refused")


def test_a_cluster_whose_store_fails_keeps_its_gpus_with_their_hours_unknown(
    fleets: dict[str, SimulatedSources],
) -> None:
    sources = MultiClusterSources({"eu-1": fleets["eu-1"], "us-1": StoreDownSources(fleets["us-1"].fleet)})
    window = fleets["eu-1"].fleet.window
    report = build_report(FleetService(settings=demo_settings(Settings()), sources=sources).analysis(window))
    us = next(c for c in report["clusters"] if c["cluster"] == "us-1")
    assert us["error"] is None and us["gpus"] == sum(n.gpu_count for n in fleets["us-1"].fleet.nodes)
    # Its pods hold GPUs the API server lists, with no telemetry: unknown, never idle or active.
    ledger = us["ledger_gpu_hours"]
    assert ledger["allocated_unknown"] > 0 and ledger["allocated_idle"] == ledger["allocated_active"] == 0
    assert any(w.startswith("cluster us-1: telemetry not read") for w in report["coverage"]["warnings"])
