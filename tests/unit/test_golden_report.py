"""The demo's report JSON for a fixed window, byte for byte: what a refactoring must leave unchanged
(the exporter's golden exposition: test_exporter.py). GPUWATCH_UPDATE_GOLDEN=1 rewrites the file after a
change that means to alter the numbers."""

import os
from datetime import UTC, datetime, timedelta
from pathlib import Path

from gpuwatch.core.config import Settings
from gpuwatch.core.model import Window
from gpuwatch.sim import build_demo_fleet
from gpuwatch.sim.demoservice import demo_service
from gpuwatch.surfaces.exports import report_bytes

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "demo-report.json"
END = datetime(2026, 11, 20, tzinfo=UTC)


def test_the_two_cluster_demo_s_day_is_the_golden_report() -> None:
    fleet = build_demo_fleet(end=END, days=1.5)
    service = demo_service(Settings(), fleet, clusters=2, history_days=1.5)
    window = Window(start=END - timedelta(days=1), end=END)
    data = report_bytes(service, window, source="raw", fmt="json", group_by="team")
    if os.environ.get("GPUWATCH_UPDATE_GOLDEN"):
        GOLDEN.write_bytes(data)
    assert data == GOLDEN.read_bytes()
