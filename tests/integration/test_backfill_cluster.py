"""`gpuwatch simulate backfill --cluster NAME` against promtool and a real Prometheus: TSDB blocks whose every
series carries the cluster label beside the samples of a run without it, and two clusters' histories in one
Prometheus, told apart by `count by (cluster)` as the recording rules' series are."""

import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from gpuwatch.sim import build_demo_fleet
from gpuwatch.sim.backfill import write_simulated_backfill, write_tsdb
from gpuwatch.sim.systems import SimulationParams
from gpuwatch.sources import ownseries
from tests.integration.prom import PROMTOOL, PrometheusServer, create_blocks, query

pytestmark = pytest.mark.integration
END = datetime(2026, 11, 20, tzinfo=UTC)  # 21:00-24:00: hourly roll-ups at 22-24 h, the day's at 23:30
UTIL = ["DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_PROF_GR_ENGINE_ACTIVE"]
CLUSTERS = {"eu-1": 1, "us-1": 2}  # cluster: seed


def _dump(tsdb: Path) -> list[str]:
    """Every sample the TSDB holds, one `{labels} value timestamp` line each, sorted."""
    (tsdb / "wal").mkdir(exist_ok=True)  # dump opens the DB as Prometheus would: it wants a WAL
    done = subprocess.run(
        [PROMTOOL, "tsdb", "dump", str(tsdb)], capture_output=True, text=True, check=True, timeout=300
    )
    return sorted(done.stdout.splitlines())


def test_tsdb_blocks_carry_the_cluster_on_every_series(tmp_path: Path) -> None:
    """DCGM series (through promtool), gpuwatch_* series, roll-ups and markers (blocks written directly)."""
    fleet = build_demo_fleet(seed=3, end=END, days=0.125, step_seconds=300, gpus=16)
    write_tsdb(fleet, tmp_path / "plain", metrics=UTIL, workers=2)
    done = write_tsdb(fleet, tmp_path / "eu-1", metrics=UTIL, workers=2, cluster="eu-1")
    labelled = _dump(tmp_path / "eu-1")
    assert len(labelled) == done.samples
    # promtool prints labels sorted: cluster="eu-1" sits between them, or alone after __name__.
    assert all(', cluster="eu-1"' in line for line in labelled)
    unlabelled = sorted(line.replace(', cluster="eu-1"', "") for line in labelled)
    assert unlabelled == _dump(tmp_path / "plain")
    names = {line.split('__name__="', 1)[1].split('"', 1)[0] for line in labelled}
    assert {
        "DCGM_FI_DEV_GPU_UTIL",
        "gpuwatch_pool_gpus",
        "hour:gpuwatch_pool_gpus:sum_over_time",
        "day:gpuwatch_pool_gpus:sum_over_time",
        ownseries.ROLLUP_MARKER,
        ownseries.DAY_ROLLUP_MARKER,
    } <= names


def _sums(text: str, name: str, at: datetime) -> float:
    """The sum of a family's samples at one time in OpenMetrics text."""
    stamp = f" {at.timestamp():.3f}"
    lines = [line for line in text.splitlines() if line.startswith(f"{name}{{") and line.endswith(stamp)]
    return sum(float(line.rsplit(" ", 2)[1]) for line in lines)


def _by_cluster(url: str, expr: str, at: datetime) -> dict[str, float]:
    return {r["metric"].get("cluster", ""): float(r["value"][1]) for r in query(url, expr, at)}


def test_two_clusters_in_one_prometheus(tmp_path: Path) -> None:
    texts = {}
    for cluster, seed in CLUSTERS.items():
        path = tmp_path / f"{cluster}.om"
        params = SimulationParams(seed=seed, end=END, days=0.125, step_seconds=300, gpus=16)
        write_simulated_backfill(str(path), params, layout="servicemonitor", metrics=UTIL, cluster=cluster)
        create_blocks(path, tmp_path / "tsdb")
        texts[cluster] = path.read_text(encoding="utf-8")
    day = END - timedelta(minutes=30)  # the daily roll-ups' evaluation, 23:30
    with PrometheusServer(tmp_path / "tsdb") as prometheus:
        url = prometheus.url
        for expr, at in (
            ("gpuwatch_pool_gpus", END),
            ("DCGM_FI_DEV_GPU_UTIL", END),
            ("hour:gpuwatch_pool_gpus:sum_over_time", END),
            ("day:gpuwatch_pool_gpus:sum_over_time", day),
            (ownseries.ROLLUP_MARKER, END),
            (ownseries.DAY_ROLLUP_MARKER, day),
        ):
            counts = _by_cluster(url, f"count by (cluster) ({expr})", at)
            assert set(counts) == set(CLUSTERS), expr
        # Each cluster's roll-ups are its own fleet's, not the other's or both.
        for name, at in (
            ("hour:gpuwatch_team_used_gpus:sum_over_time", END),
            ("day:gpuwatch_team_used_gpus:sum_over_time", day),
        ):
            sums = _by_cluster(url, f"sum by (cluster) ({name})", at)
            assert sums == pytest.approx({c: _sums(texts[c], name, at) for c in CLUSTERS}), name
        assert sums["eu-1"] != sums["us-1"]
