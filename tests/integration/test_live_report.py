"""The live path end to end: `gpuwatch report` against a real Prometheus and the Kubernetes API test server.

Per label layout of SPEC §2, the per-team allocated and used GPU-hours equal the simulator's ground truth.
"""

import json
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pandas as pd
import pytest

from gpuwatch.sim import SimulatedFleet, build_demo_fleet
from gpuwatch.sim.kubeapi import KubeApiServer, write_kubeconfig
from tests.integration.prom import BackfilledPrometheus, PrometheusFactory

pytestmark = pytest.mark.integration
END = datetime(2026, 11, 20, tzinfo=UTC)
UTIL = ("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_PROF_GR_ENGINE_ACTIVE")


@pytest.fixture(scope="module")
def fleet() -> SimulatedFleet:
    return build_demo_fleet(seed=11, end=END, days=0.5)


def _report(prom: BackfilledPrometheus, kubeconfig: str, fleet: SimulatedFleet, *extra: str) -> dict:  # type: ignore[type-arg]
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "gpuwatch",
            "report",
            "--prometheus-url",
            prom.url,
            "--kubeconfig",
            kubeconfig,
            "--start",
            fleet.window.start.isoformat(),
            "--end",
            fleet.window.end.isoformat(),
            "--step",
            "60s",
            "--format",
            "json",
            *extra,
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr
    report: dict = json.loads(result.stdout)  # type: ignore[type-arg]
    return report


def _truth_per_team(fleet: SimulatedFleet) -> pd.DataFrame:
    truth = fleet.truth()
    step_h = fleet.window.step_seconds / 3600
    return (
        truth.assign(
            allocated=truth["ge_share"] * step_h,
            used=(truth["ge_share"] * truth["util_ratio"]).fillna(0.0) * step_h,
        )
        .groupby("team")[["allocated", "used"]]
        .sum()
    )


@pytest.mark.parametrize("layout", ["servicemonitor", "honor_labels"])
def test_report_per_team_equals_ground_truth(
    layout: str, fleet: SimulatedFleet, kubeconfig: str, prometheus_factory: PrometheusFactory, tmp_path: Path
) -> None:
    prom = prometheus_factory(fleet, layout=layout, metrics=UTIL, gpuwatch_series=True)
    config = tmp_path / "gpuwatch.yaml"
    config.write_text("teams: {namespaces: {notebooks: data-science}}\n")
    report = _report(prom, kubeconfig, fleet, "--config", str(config))
    got = pd.DataFrame(report["teams"]).set_index("team")[["allocated_gpu_hours", "used_gpu_hours"]]
    expected = _truth_per_team(fleet)
    assert sorted(got.index) == sorted(expected.index)
    for team, row in expected.iterrows():
        assert got.loc[team, "allocated_gpu_hours"] == pytest.approx(row["allocated"], rel=0.01), team
        assert got.loc[team, "used_gpu_hours"] == pytest.approx(row["used"], rel=0.01, abs=1e-6), team
    assert report["coverage"]["util_source"]["DCGM_FI_DEV_GPU_UTIL"] > 0  # the T4s have no PROF fields
    assert report["coverage"]["util_source"]["DCGM_FI_PROF_GR_ENGINE_ACTIVE"] > 0
    assert {(p["pod"], p["blocked_by"]) for p in report["pending"]} == {
        ("pretrain-70b-0", "capacity"),
        ("reindex-embed-0", "capacity"),
        ("finetune-vit-0", "fragmentation"),
        ("eval-b200-0", "affinity"),
        ("sweep-h100-0", "taint"),
        ("mig-7g-eval-0", "mig_profile"),
        ("rerank-batch-0", "quota"),
    }


def test_prometheus_down_exits_3_with_one_line(fleet: SimulatedFleet, kubeconfig: str) -> None:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "gpuwatch",
            "report",
            "--prometheus-url",
            "http://127.0.0.1:9",
            "--kubeconfig",
            kubeconfig,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 3
    assert result.stderr.count("\n") == 1
    assert result.stderr.startswith("gpuwatch: error: prometheus at http://127.0.0.1:9 unreachable")


@pytest.mark.parametrize("kueue", ["absent", "forbidden"])
def test_a_cluster_without_readable_kueue_reports_everything_else(
    kueue: str, fleet: SimulatedFleet, prometheus_factory: PrometheusFactory, tmp_path: Path
) -> None:
    """No Kueue: the report says so (kueue.installed false, no queue rows) and nothing else changes, no
    warning. Kueue there but forbidden: the same report, and one coverage warning naming the RBAC."""
    prom = prometheus_factory(fleet, layout="servicemonitor", metrics=UTIL, gpuwatch_series=True)
    token = "integration-token"
    options = {"kueue_versions": ()} if kueue == "absent" else {"forbidden": ["clusterqueues"]}
    with KubeApiServer(fleet, token=token, **options) as server:
        path = tmp_path / "kubeconfig"
        write_kubeconfig(path, server_url=server.url, token=token, ca_pem=server.ca_pem)
        report = _report(prom, str(path), fleet, "--source", "raw")
    assert report["kueue"] == {"installed": False}
    assert report["queues"] == [] and report["fairness"] == []
    # Pending demand beside idle GPUs needs no Kueue; the gated pod still shows as waiting for quota.
    assert any(b["pending_gpus"] > 0 for b in report["blocked_vs_idle"])
    assert any(p["blocked_by"] == "quota" for p in report["pending"])
    about_kueue = [w for w in report["coverage"]["warnings"] if "Kueue" in w or "kueue" in w]
    if kueue == "absent":
        assert about_kueue == []
    else:
        (warning,) = about_kueue
        assert warning.startswith("Kueue not read: kubernetes: forbidden (403)")
        assert "get/list/watch on clusterqueues" in warning
