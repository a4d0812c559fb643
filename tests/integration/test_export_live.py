"""`gpuwatch export` on the live path: real Prometheus and API test server; Prometheus down keeps serving."""

import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest
import requests
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from gpuwatch.core.config import KubernetesSettings, PrometheusSettings, Settings
from gpuwatch.read.service import FleetService, LiveSources
from gpuwatch.sim import SimulatedFleet, build_demo_fleet
from gpuwatch.sim.demoservice import demo_service, demo_settings
from gpuwatch.sources import ownseries
from gpuwatch.surfaces.exporter import ExportLoop, GpuwatchCollector
from tests.integration.prom import PROMTOOL, PrometheusFactory, die_with_parent, free_port

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def fleet() -> SimulatedFleet:
    return build_demo_fleet(seed=5, end=datetime(2026, 11, 20, tzinfo=UTC), days=0.25)


def _exposition(loop: ExportLoop) -> str:
    registry = CollectorRegistry()
    registry.register(GpuwatchCollector(loop))
    return generate_latest(registry).decode()


def _families(loop: ExportLoop) -> dict[str, list[tuple[dict[str, str], float]]]:
    text = _exposition(loop)
    return {f.name: [(s.labels, s.value) for s in f.samples] for f in text_string_to_metric_families(text)}


def test_live_exporter_publishes_what_the_demo_exporter_does(
    fleet: SimulatedFleet, kubeconfig: str, prometheus_factory: PrometheusFactory
) -> None:
    prom = prometheus_factory(fleet, metrics=("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_PROF_GR_ENGINE_ACTIVE"))
    settings = demo_settings(
        Settings(
            prometheus=PrometheusSettings(url=prom.url),
            kubernetes=KubernetesSettings(kubeconfig=kubeconfig),
        )
    )
    # As `gpuwatch export` runs: the cluster followed by watches.
    sources = LiveSources(settings, clock=lambda: fleet.now, watch_cluster=True)
    live = ExportLoop(FleetService(settings=settings, sources=sources))
    demo = ExportLoop(demo_service(Settings(), fleet))
    assert live.run_once().error == ""
    demo.run_once()
    got, expected = _families(live), _families(demo)
    for name in (
        "gpuwatch_pod_gpu_allocation",
        "gpuwatch_pod_gpu_idle",
        "gpuwatch_node_gpus",
        "gpuwatch_team_gpus",
    ):
        live_values = {tuple(sorted(labels.items())): value for labels, value in got[name]}
        demo_values = {tuple(sorted(labels.items())): value for labels, value in expected[name]}
        assert live_values.keys() == demo_values.keys(), name
        assert live_values == pytest.approx(demo_values), name
    assert {labels["source"]: value for labels, value in got["gpuwatch_source_up"]} == {
        "prometheus": 1.0,
        "kubernetes": 1.0,
    }
    # Both expositions pass Prometheus's own lint: the demo's holds every family (right-sizing's memory
    # and the energy ones included; this Prometheus holds no memory or power series for the live one).
    demo_text = _exposition(demo)
    assert "gpuwatch_pod_gpu_framebuffer_used_bytes{" in demo_text
    assert "gpuwatch_pod_gpu_power_watts{" in demo_text
    # ... and Kueue's queues (the demo has Kueue, borrowing in cohort "research"): every queue family.
    for name in ownseries.FAMILY_LABELS:
        if name.startswith("gpuwatch_queue_"):
            assert f"\n{name}{{" in demo_text, name
    for text in (_exposition(live), demo_text):
        lint = subprocess.run([PROMTOOL, "check", "metrics"], input=text, capture_output=True, text=True)
        assert (lint.returncode, lint.stdout + lint.stderr) == (0, "")
    # Later cycles publish the same from the watched cache, without listing anything again.
    assert live.run_once().error == ""
    assert _families(live)["gpuwatch_pod_gpu_allocation"] == got["gpuwatch_pod_gpu_allocation"]
    assert sources.cluster is not None
    assert {s.lists for s in sources.cluster.stats().values()} == {1}
    for cache in (sources.cluster, sources.kueue):  # the watches end with the test, not the worker
        if cache is not None:
            cache.stop()


def test_export_keeps_serving_with_prometheus_down(kubeconfig: str, tmp_path: Path) -> None:
    port = free_port()
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gpuwatch",
            "export",
            "--prometheus-url",
            "http://127.0.0.1:9",
            "--kubeconfig",
            kubeconfig,
            "--port",
            str(port),
            "--interval",
            "1s",
        ],
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=die_with_parent,
    )
    try:
        # Served from the first scrape (both sources 0 until a cycle has read them), then the first cycle
        # finds Prometheus refusing and the API server answering.
        deadline = time.monotonic() + 60
        up: dict[str, float] = {}
        while time.monotonic() < deadline and up != {"prometheus": 0.0, "kubernetes": 1.0}:
            try:
                body = requests.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
            except requests.ConnectionError:
                body = ""
            up = {
                s.labels["source"]: s.value
                for f in text_string_to_metric_families(body)
                if f.name == "gpuwatch_source_up"
                for s in f.samples
            }
            time.sleep(0.5)
        assert up == {"prometheus": 0.0, "kubernetes": 1.0}
        time.sleep(2.5)  # a few more failing cycles: the endpoint stays up
        assert requests.get(f"http://127.0.0.1:{port}/metrics", timeout=5).status_code == 200
        assert process.poll() is None
    finally:
        process.terminate()
        _, stderr = process.communicate(timeout=30)
    assert "Traceback" not in stderr
    # One line per fault, not one per cycle.
    assert stderr.count("gpuwatch export: prometheus at http://127.0.0.1:9 unreachable") == 1, stderr
