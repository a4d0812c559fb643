"""The queues' usage read back from the gpuwatch_queue_* series a real Prometheus holds, worked out by hand:
each queue-grid sample the mean of the exporter's cycles in it, two publishers' copies one fact, a label
no series carries read as "", an hour nobody published no row."""

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from gpuwatch.core.model import Window
from gpuwatch.sources.historysums import queue_usage_history
from gpuwatch.sources.prometheus import PrometheusSource
from tests.integration.prom import PrometheusServer, create_blocks

pytestmark = pytest.mark.integration
T0 = datetime(2026, 11, 20, tzinfo=UTC)
FAMILIES = ("nominal", "used", "borrowed", "lent")


def _openmetrics(path: Path) -> None:
    """Queue "ml" in pool H100 (no cohort label at all) published every minute by two exporter replicas
    for hours 0 and 2 (nothing in hour 1): used 2 GE for the first half of hour 0 and 6 for the second,
    4 all through hour 2, on a nominal quota of 4."""
    lines = []
    for family in FAMILIES:
        name = f"gpuwatch_queue_{family}_gpus"
        lines.append(f"# TYPE {name} gauge")
        for instance in ("exporter-a", "exporter-b"):
            for minute in [*range(1, 61), *range(121, 181)]:
                used = (2.0 if minute <= 30 else 6.0) if minute <= 60 else 4.0
                value = {"nominal": 4.0, "used": used, "borrowed": max(0.0, used - 4.0), "lent": 0.0}[family]
                labels = f'cluster_queue="ml",team="ml",pool="H100",instance="{instance}"'
                at = (T0 + timedelta(minutes=minute)).timestamp()
                lines.append(f"{name}{{{labels}}} {value} {at:.0f}")
    lines.append("# EOF")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def test_queue_usage_is_read_back_per_sample_once_per_copy(tmp_path: Path) -> None:
    _openmetrics(tmp_path / "queues.om")
    create_blocks(tmp_path / "queues.om", tmp_path / "tsdb")
    with PrometheusServer(tmp_path / "tsdb") as prom:
        source = PrometheusSource(prom.url)
        try:
            window = Window(start=T0, end=T0 + timedelta(hours=3), step_seconds=60)
            usage = queue_usage_history(source, window, step_seconds=3600, resolution_seconds=60)
        finally:
            source.close()
    assert usage["timestamp"].tolist() == [T0, T0 + timedelta(hours=2)]  # hour 1: nobody published
    assert set(usage["cohort"]) == {""} and set(usage["cluster_queue"]) == {"ml"}
    assert usage["used_gpus"].tolist() == [4.0, 4.0]  # (30 × 2 + 30 × 6) / 60, not twice that
    assert usage["borrowed_gpus"].tolist() == [1.0, 0.0]  # 30 min of 2 borrowed GE in hour 0
    assert usage["nominal_gpus"].tolist() == [4.0, 4.0]
    assert usage["lent_gpus"].tolist() == [0.0, 0.0]
