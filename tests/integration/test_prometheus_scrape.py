"""A real Prometheus scrapes the simulated dcgm-exporter /metrics endpoint like a production target."""

import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from gpuwatch.sim import build_demo_fleet
from gpuwatch.sim.exposition import serve_metrics
from tests.integration.prom import PrometheusServer, query

pytestmark = pytest.mark.integration


def test_prometheus_scrapes_the_simulated_exporter(tmp_path: Path) -> None:
    now = datetime.now(UTC).replace(microsecond=0)
    fleet = build_demo_fleet(seed=42, end=now + timedelta(hours=1), days=0.25)
    with serve_metrics(fleet) as metrics:
        node = next(t.node for t in fleet.targets if fleet.node(t.node).ready and "h100" in t.node)
        config = f"""
global: {{scrape_interval: 1s, evaluation_interval: 1s}}
scrape_configs:
  - job_name: dcgm
    static_configs: [{{targets: ["127.0.0.1:{metrics.port}"]}}]
    params: {{node: [{node}]}}
"""
        gpus = [g for g in fleet.gpus if g.node == node]
        (tmp_path / "tsdb").mkdir()
        with PrometheusServer(data_dir=tmp_path / "tsdb", config_text=config) as prom:
            deadline = time.monotonic() + 60
            series: list[dict[str, object]] = []
            while time.monotonic() < deadline and len(series) < len(gpus):
                time.sleep(1)
                series = query(prom.url, "DCGM_FI_DEV_GPU_UTIL", datetime.now(UTC))
            up = query(prom.url, 'up{job="dcgm"}', datetime.now(UTC))
            scraped = query(prom.url, "DCGM_FI_DEV_GPU_UTIL[10s]", datetime.now(UTC))
    assert [float(s["value"][1]) for s in up] == [1.0]
    assert len({s["metric"]["UUID"] for s in series}) == len(gpus)  # type: ignore[index]
    labels = series[0]["metric"]
    assert isinstance(labels, dict)
    assert labels["job"] == "dcgm" and labels["modelName"] == "NVIDIA H100 80GB HBM3"
    assert {g.uuid for g in gpus} == {s["metric"]["UUID"] for s in series}  # type: ignore[index]
    # The scraped value is the simulated utilization (in %) of the sample the scrape fell in.
    telemetry = fleet.telemetry().set_index(["uuid", "timestamp"])["util_ratio"]
    checked = 0
    for s in scraped:  # a range selector returns each sample with its own scrape timestamp
        for ts, value in s["values"]:
            sample = fleet.window.start + timedelta(
                seconds=(float(ts) - fleet.window.start.timestamp()) // 60 * 60
            )
            assert float(value) == pytest.approx(telemetry[(s["metric"]["UUID"], sample)] * 100, abs=1e-9)
            checked += 1
    assert checked >= len(gpus)
