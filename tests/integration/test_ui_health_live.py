"""Device health for the /health page read live from a real Prometheus equals the simulated fleet's."""

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pandas as pd
import pytest

from gpuwatch.core.config import load_settings
from gpuwatch.read.devicehealth import gpu_health, health_events_now, health_samples, health_window
from gpuwatch.read.service import FleetService
from gpuwatch.sim import SimulatedFleet, build_demo_fleet
from gpuwatch.sim.demoservice import SimulatedSources
from gpuwatch.sim.kubeapi import KubeApiServer, write_kubeconfig
from tests.integration.prom import PrometheusFactory

pytestmark = pytest.mark.integration
END = datetime(2026, 11, 20, tzinfo=UTC)
TOKEN = "health-token"
METRICS = (
    "DCGM_FI_DEV_GPU_UTIL",
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
    "DCGM_FI_DEV_GPU_TEMP",
    "DCGM_FI_DEV_POWER_USAGE",
    "DCGM_FI_DEV_FB_USED",
    "DCGM_FI_DEV_FB_FREE",
    "DCGM_FI_DEV_XID_ERRORS",
    "DCGM_FI_DEV_ROW_REMAP_FAILURE",
)
VALUES = ["temp_celsius", "power_watts", "fb_used_bytes", "fb_free_bytes", "xid_last", "row_remap_failure"]


@pytest.fixture(scope="module")
def fleet() -> SimulatedFleet:
    return build_demo_fleet(seed=7, end=END, days=0.25)


@pytest.fixture(scope="module")
def api(
    fleet: SimulatedFleet, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[KubeApiServer, str]]:
    with KubeApiServer(fleet, token=TOKEN) as server:
        path: Path = tmp_path_factory.mktemp("kube") / "kubeconfig"
        write_kubeconfig(path, server_url=server.url, token=TOKEN, ca_pem=server.ca_pem)
        yield server, str(path)


@pytest.fixture(scope="module")
def kubeconfig(api: tuple[KubeApiServer, str]) -> str:
    return api[1]


def test_live_health_equals_the_simulated_fleets(
    fleet: SimulatedFleet, kubeconfig: str, prometheus_factory: PrometheusFactory
) -> None:
    prom = prometheus_factory(fleet, layout="servicemonitor", metrics=METRICS)
    settings = load_settings(flags={"prometheus_url": prom.url, "kubeconfig": kubeconfig}, env={})
    live = FleetService.live(settings)
    window = live.window(days=0.25, end=END)
    got = gpu_health(live, window)
    want = health_samples(SimulatedSources(fleet), health_window(window))
    key = ["node", "uuid", "gpu_instance_id"]
    assert len(want) == len(fleet.gpus) - 8  # the NotReady node's exporter serves nothing
    merged = want.merge(got, on=key, how="outer", suffixes=("_sim", "_live"), indicator=True)
    assert set(merged["_merge"]) == {"both"}
    for column in VALUES:
        pd.testing.assert_series_equal(
            merged[f"{column}_live"], merged[f"{column}_sim"], check_names=False, rtol=1e-9
        )
    assert (merged["ge_live"] == merged["ge_sim"]).all()
    assert set(merged.loc[merged["xid_last_live"] > 0, "xid_last_live"]) == {79.0, 13.0}


def test_health_events_list_the_cluster_once(
    fleet: SimulatedFleet, api: tuple[KubeApiServer, str], prometheus_factory: PrometheusFactory
) -> None:
    """The report's health events need the nodes and the exporter pods: one pass over the pod lists (a
    month's report of 50,000 pods spent seconds listing them twice)."""
    server, kubeconfig = api
    prom = prometheus_factory(fleet, layout="servicemonitor", metrics=METRICS)
    settings = load_settings(flags={"prometheus_url": prom.url, "kubeconfig": kubeconfig}, env={})
    live = FleetService.live(settings)
    window = live.window(days=0.25, end=END)
    mark = len(server.request_log)
    events = health_events_now(live, window)
    lists = [t for _, t, _ in server.request_log[mark:] if t.startswith("/api/v1/pods")]
    assert len(lists) == 2  # the running pods, then the pending ones
    assert {"XID 79", "XID 13"} <= set(events["event"])
    assert set(events.loc[events["kind"] == "node_not_ready", "node"]) == {
        n.name for n in fleet.nodes if not n.ready
    }


def test_health_events_without_dcgm_telemetry_list_the_nodes_and_no_pod(
    fleet: SimulatedFleet, api: tuple[KubeApiServer, str], prometheus_factory: PrometheusFactory
) -> None:
    """Pods are listed only to find where exporter pods run, which only DCGM series need: a month's report
    on a Prometheus without DCGM telemetry at the window's end lists the nodes alone."""
    server, kubeconfig = api
    prom = prometheus_factory(fleet, metrics=(), gpuwatch_series=True)
    settings = load_settings(flags={"prometheus_url": prom.url, "kubeconfig": kubeconfig}, env={})
    live = FleetService.live(settings)
    window = live.window(days=0.25, end=END)
    mark = len(server.request_log)
    events = health_events_now(live, window)
    listed = [t.split("?")[0] for _, t, _ in server.request_log[mark:]]
    assert listed == ["/api/v1/nodes"]
    assert set(events.loc[events["kind"] == "node_not_ready", "node"]) == {
        n.name for n in fleet.nodes if not n.ready
    }
    # Without telemetry every GPU node is said to have none: unknown, never healthy.
    assert set(events.loc[events["kind"] == "no_telemetry", "node"]) == {n.name for n in fleet.nodes}
    assert not events["kind"].str.startswith("xid").any()
