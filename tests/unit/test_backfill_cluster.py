"""`gpuwatch simulate backfill --cluster NAME`: every series of the history (DCGM, gpuwatch_*, the hourly and
daily roll-ups and their evaluation markers) carries cluster="NAME", with the samples of a run without it.
The TSDB path is checked against promtool in tests/integration/test_backfill_cluster.py."""

import io
import re
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pandas as pd
import pytest

from gpuwatch.core.errors import ConfigError
from gpuwatch.read.series import Family
from gpuwatch.sim import SimulatedFleet, build_demo_fleet
from gpuwatch.sim.backfill import cluster_labels, day_rollup_families, rollup_families, write_fleet_backfill
from gpuwatch.sources import ownseries

END = datetime(2026, 11, 20, tzinfo=UTC)  # 21:00-24:00: three hourly roll-ups and the day's (23:30)
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')

Sample = tuple[str, dict[str, str], str, str]  # name, labels, value, timestamp


@pytest.fixture(scope="module")
def fleet() -> SimulatedFleet:
    return build_demo_fleet(seed=3, end=END, days=0.125, step_seconds=300, gpus=16)


def _backfill(fleet: SimulatedFleet, cluster: str | None = None) -> str:
    out = io.StringIO()
    write_fleet_backfill(fleet, out, cluster=cluster)
    return out.getvalue()


@pytest.fixture(scope="module")
def plain(fleet: SimulatedFleet) -> str:
    """The fleet's backfill without a cluster."""
    return _backfill(fleet)


def _samples(text: str) -> list[Sample]:
    """The OpenMetrics text's samples in order, labels parsed (values may hold spaces, so from the right)."""
    samples = []
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        series, value, timestamp = line.rsplit(" ", 2)
        name, _, labels = series.partition("{")
        samples.append((name, dict(_LABEL.findall(labels)), value, timestamp))
    return samples


def _without_cluster(samples: list[Sample]) -> list[Sample]:
    return [(n, {k: v for k, v in labels.items() if k != "cluster"}, v, t) for n, labels, v, t in samples]


def test_every_series_carries_the_cluster_and_the_samples_are_unchanged(
    fleet: SimulatedFleet, plain: str
) -> None:
    labelled = _backfill(fleet, "eu-1")
    samples = _samples(labelled)
    assert {labels.get("cluster") for _, labels, _, _ in samples} == {"eu-1"}
    # One more label, nothing else: same samples in the same order, same HELP and TYPE lines.
    assert _without_cluster(samples) == _samples(plain)
    comments = [line for line in labelled.splitlines() if line.startswith("#")]
    assert comments == [line for line in plain.splitlines() if line.startswith("#")]
    names = {name for name, _, _, _ in samples}
    assert {"DCGM_FI_DEV_GPU_UTIL", "gpuwatch_pool_gpus", "gpuwatch_build_info"} <= names
    assert {ownseries.ROLLUP_MARKER, ownseries.DAY_ROLLUP_MARKER} <= names
    assert {"hour:gpuwatch_pool_gpus:sum_over_time", "day:gpuwatch_pool_gpus:sum_over_time"} <= names
    assert any(name.startswith("gpu_") for name in names)  # the AMD exporter's families too


def test_without_a_cluster_nothing_is_labelled(plain: str) -> None:
    assert "cluster=" not in plain


def test_roll_ups_keep_each_clusters_series_apart() -> None:
    """As the recording rules do (max by the family's labels and cluster): two clusters' pools of one name
    are two roll-ups, not the larger of them."""
    times = pd.date_range("2026-11-19 22:00", periods=12, freq="5min", tz="UTC")
    samples = pd.DataFrame(
        {
            "timestamp": times.repeat(2),
            "pool": "a100",
            "state": "allocated_active",
            "cluster": ["eu-1", "us-1"] * len(times),
            "value": [1.0, 3.0] * len(times),
        }
    )
    family = Family("gpuwatch_pool_gpus", "", ("pool", "state", "cluster"), samples)
    labels = (("cluster", "eu-1"),)
    hourly = rollup_families([family], offset_seconds=150, external_labels=labels)
    rolled = {f.name: f for f in [*hourly, *day_rollup_families(hourly, external_labels=labels)]}
    hour = rolled["hour:gpuwatch_pool_gpus:sum_over_time"]
    assert hour.labels == ("pool", "state", "cluster")
    # 12 five-minute samples in 22:00-23:00, each on one grid point of the hour evaluated at 23:00.
    assert hour.samples["timestamp"].unique().tolist() == [pd.Timestamp("2026-11-19 23:00", tz="UTC")]
    by_cluster = hour.samples.groupby("cluster")["value"].sum().to_dict()
    assert by_cluster == {"eu-1": 12.0, "us-1": 36.0}
    day = rolled["day:gpuwatch_pool_gpus:sum_over_time"]
    assert day.samples.groupby("cluster")["value"].sum().to_dict() == by_cluster
    # The markers carry the external labels of the Prometheus that evaluated the rules.
    for marker in (ownseries.ROLLUP_MARKER, ownseries.DAY_ROLLUP_MARKER):
        assert rolled[marker].labels == ("cluster",)
        assert set(rolled[marker].samples["cluster"]) == {"eu-1"}


def test_cluster_labels() -> None:
    assert cluster_labels(None) == ()
    assert cluster_labels("eu-1") == (("cluster", "eu-1"),)
    for bad in ("", "  ", "EU 1", "eu-1/"):  # names a clusters: list could not hold to read them back
        with pytest.raises(ConfigError, match="a cluster name is a-z, 0-9"):
            cluster_labels(bad)


def _gpuwatch(*args: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "gpuwatch", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)


SMALL = ("simulate", "backfill", "--days", "0.1", "--step", "300s", "--gpus", "16", "--end", END.isoformat())


def test_cli_labels_every_series(tmp_path: Path) -> None:
    out = tmp_path / "eu-1.om"
    done = _gpuwatch(*SMALL, "--cluster", "eu-1", "-o", str(out))
    assert done.returncode == 0, done.stderr
    samples = _samples(out.read_text(encoding="utf-8"))
    assert {labels.get("cluster") for _, labels, _, _ in samples} == {"eu-1"}
    names = {name for name, _, _, _ in samples}
    assert {
        "DCGM_FI_DEV_GPU_UTIL",
        "gpuwatch_pool_gpus",
        ownseries.ROLLUP_MARKER,
        ownseries.DAY_ROLLUP_MARKER,
    } <= names


@pytest.mark.parametrize("into", ["-o", "--tsdb"])
def test_cli_refuses_a_bad_cluster_name_in_one_line(tmp_path: Path, into: str) -> None:
    target = tmp_path / "out"
    done = _gpuwatch(*SMALL, "--cluster", "EU 1", into, str(target))
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        "gpuwatch: error: a cluster name is a-z, 0-9, '-', '.', '_' (as in clusters:), got 'EU 1'"
    ]
    assert not target.exists()
