"""`gpuwatch check`: connectivity, RBAC, DCGM discovery and coverage, one line per finding or problem."""

import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest

from gpuwatch.core.config import KubernetesSettings, PrometheusSettings, Settings
from gpuwatch.sim import SimulatedFleet, build_demo_fleet
from gpuwatch.sim.demoservice import demo_settings
from gpuwatch.sim.kubeapi import KubeApiServer, write_kubeconfig
from gpuwatch.surfaces.check import check
from tests.integration.prom import PrometheusFactory

pytestmark = pytest.mark.integration
TOKEN = "check-token"


@pytest.fixture(scope="module")
def fleet() -> SimulatedFleet:
    return build_demo_fleet(seed=9, end=datetime(2026, 11, 20, tzinfo=UTC), days=0.25)


def test_check_reports_discovery_rbac_and_coverage(
    fleet: SimulatedFleet, kubeconfig: str, prometheus_factory: PrometheusFactory
) -> None:
    prom = prometheus_factory(fleet, metrics=("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_PROF_GR_ENGINE_ACTIVE"))
    settings = demo_settings(
        Settings(
            prometheus=PrometheusSettings(url=prom.url), kubernetes=KubernetesSettings(kubeconfig=kubeconfig)
        )
    )
    result = check(settings, clock=lambda: fleet.now)
    assert result.problems == [] and not result.unreachable
    assert any("DCGM_FI_PROF_GR_ENGINE_ACTIVE" in f and "DCGM_FI_DEV_GPU_UTIL" in f for f in result.findings)
    assert [f.split(": ")[-1] for f in result.findings if f.startswith("kubernetes")] == [
        "can list pods",
        "can list nodes",
        "can list namespaces",
        "can list resourcequotas",
    ]
    coverage = next(f for f in result.findings if f.startswith("coverage"))
    assert "GPU-samples present" in coverage


def test_check_exits_nonzero_with_one_line_per_problem(fleet: SimulatedFleet, tmp_path: Path) -> None:
    with KubeApiServer(fleet, token=TOKEN, forbidden=["nodes", "resourcequotas"]) as server:
        path = tmp_path / "kubeconfig"
        write_kubeconfig(path, server_url=server.url, token=TOKEN, ca_pem=server.ca_pem)
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                "gpuwatch",
                "check",
                "--prometheus-url",
                "http://127.0.0.1:9",
                "--kubeconfig",
                str(path),
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert result.returncode == 3  # Prometheus unreachable
    problems = result.stderr.strip().splitlines()
    assert (
        problems[0] == "gpuwatch: problem: prometheus at http://127.0.0.1:9 unreachable: connection refused"
    )
    assert [p for p in problems[1:] if "403" in p] == problems[1:] and len(problems) == 3
    assert "ok: kubernetes" in result.stdout and "can list pods" in result.stdout
    assert "Traceback" not in result.stderr
