"""The hourly roll-ups (alerts/gpuwatch-recording.rules.yml, group gpuwatch.rollup) on a real Prometheus.

A window is read from whole roll-up hours in the middle and raw part-hours at its ends; the report equals
the one read raw piece by piece (a Prometheus holding no roll-ups), and hours whose roll-ups are missing
are found and read raw, never counted as nothing.
"""

import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from gpuwatch.core.config import PrometheusSettings, Settings
from gpuwatch.core.model import Window
from gpuwatch.read.history import read_history
from gpuwatch.sim import SimulatedFleet, build_demo_fleet
from gpuwatch.sim.demoservice import demo_settings
from gpuwatch.sources.historystore import PrometheusHistory
from gpuwatch.sources.prometheus import PrometheusSource
from gpuwatch.sources.windowpieces import history_pieces
from gpuwatch.surfaces.report import build_history_report
from tests.integration.prom import Keep, rollup_variants

pytestmark = pytest.mark.integration
END = datetime(2026, 11, 20, tzinfo=UTC)
# Ends off the hour: 43 min raw, 18 whole roll-up hours, 44 min raw.
WINDOW = Window(start=END - timedelta(hours=21, minutes=43), end=END - timedelta(hours=2, minutes=16))
HOLE = (END - timedelta(hours=18), END - timedelta(hours=15))  # roll-ups evaluated in (a, b] are lost
Report = dict[str, Any]


@pytest.fixture(scope="module")
def fleet() -> SimulatedFleet:
    return build_demo_fleet(seed=11, end=END, days=1, step_seconds=60)


def _in_hole(line: str) -> bool:
    """A roll-up sample (not the evaluation marker) evaluated inside HOLE."""
    if not line.startswith("hour:") or line.startswith("hour:gpuwatch_rollup_evaluation"):
        return False
    at = datetime.fromtimestamp(float(line.rsplit(" ", 1)[1]), UTC)
    return HOLE[0] < at <= HOLE[1]


@pytest.fixture(scope="module")
def servers(fleet: SimulatedFleet, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """complete: history and roll-ups; raw: history only (no rule group); holed: roll-ups missing in HOLE."""
    root = tmp_path_factory.mktemp("rollups")
    keeps: dict[str, Keep] = {
        "complete": lambda line: True,
        "raw": lambda line: not line.startswith(("hour:", "day:")),
        "holed": lambda line: not _in_hole(line),
    }
    with rollup_variants(fleet, keeps, root) as urls:
        yield urls


def _pieces(url: str, *, piece_seconds: int) -> list[tuple[float, str]]:
    source = PrometheusSource.from_settings(PrometheusSettings(url=url))
    try:
        pieces = history_pieces(source, WINDOW, piece_seconds=piece_seconds)
    finally:
        source.close()
    return list(zip(pieces["seconds"].tolist(), pieces["rollup"].tolist(), strict=True))


def _report(url: str, *, piece_seconds: int = 86_400) -> Report:
    settings = demo_settings(Settings(prometheus=PrometheusSettings(url=url)))
    return build_history_report(read_history(settings, WINDOW, piece_seconds=piece_seconds))


def _numbers(report: Report) -> dict[str, float]:
    """Every number of the fleet, team, pool, namespace and workload rows, flat (None stays unknown)."""
    flat: dict[str, float] = {}

    def walk(prefix: str, value: Any) -> None:
        if isinstance(value, dict):
            for k, v in value.items():
                walk(f"{prefix}.{k}", v)
        elif isinstance(value, list):
            for row in value:
                key = "/".join(str(row[k]) for k in ("team", "pool", "namespace", "pod") if k in row)
                walk(f"{prefix}[{key}]", row)
        elif isinstance(value, int | float) or value is None:
            flat[prefix] = float("nan") if value is None else float(value)

    for section in ("fleet", "teams", "pools", "namespaces", "workloads"):
        walk(section, report[section])
    return flat


def _same(got: Report, expected: Report, *, same_p95: bool = True) -> None:
    """Every number the same. Right-sizing's p95 is the busiest piece's, so its recommendations are the
    same only where both reads hold the same pieces (`same_p95`): roll-up hours, not a stretch read raw."""
    a, b = _numbers(got), _numbers(expected)
    if not same_p95:
        a, b = ({k: v for k, v in n.items() if ".recommendation." not in k} for n in (a, b))
    assert a.keys() == b.keys()
    assert len(b) > 1000  # every workload of the day is compared
    for key, value in b.items():
        assert a[key] == pytest.approx(value, rel=1e-9, abs=1e-9, nan_ok=True), key


def test_whole_hours_come_from_rollups_and_the_ends_raw(servers: dict[str, str]) -> None:
    assert _pieces(servers["complete"], piece_seconds=86_400) == [
        (43 * 60, ""),
        (18 * 3600, "hour"),
        (44 * 60, ""),
    ]
    assert _pieces(servers["raw"], piece_seconds=86_400) == [(WINDOW.duration_seconds, "")]


def test_a_report_from_rollups_equals_the_raw_read(servers: dict[str, str]) -> None:
    complete, raw = _report(servers["complete"]), _report(servers["raw"])
    assert raw["fleet"]["allocated_gpu_hours"] > 100
    _same(complete, raw, same_p95=False)
    assert complete["coverage"] == raw["coverage"]


def test_hours_without_rollups_are_read_raw(servers: dict[str, str]) -> None:
    six_hours = 6 * 3600
    # The first 6 h roll-up piece lost its roll-ups in HOLE: it alone is read raw.
    assert _pieces(servers["holed"], piece_seconds=six_hours) == [
        (43 * 60, ""),
        (six_hours, ""),
        (six_hours, "hour"),
        (six_hours, "hour"),
        (44 * 60, ""),
    ]
    _same(_report(servers["holed"], piece_seconds=six_hours), _report(servers["raw"]), same_p95=False)


def test_the_rollup_read_sends_ranges_over_recorded_hours(servers: dict[str, str]) -> None:
    """What makes a month cheap: the pods' sums read hour:* series with plain range functions."""
    source = PrometheusSource.from_settings(PrometheusSettings(url=servers["complete"]))
    sent: list[str] = []
    query = source.query

    def spy(q: str, **kwargs: Any) -> Any:
        sent.append(q)
        return query(q, **kwargs)

    source.query = spy  # type: ignore[method-assign]
    try:
        read_history(demo_settings(Settings()), WINDOW, store=PrometheusHistory(source))
    finally:
        source.close()
    pods = [q for q in sent if "gpuwatch_pod_gpu_allocation" in q and "sum_over_time" in q]
    assert any(re.search(r"sum_over_time\(hour:gpuwatch_pod_gpu_allocation:sum_over_time\[", q) for q in pods)
    assert all(":60s]" not in q for q in pods if "hour:" in q)


def test_a_bucket_shorter_than_the_exporters_interval_is_widened_to_it(tmp_path: Path) -> None:
    """An exporter scraped every 5 min, drawn in 3-min buckets (a day's default): buckets of 5 min, each
    with its cycle, none reported as missing history."""
    fleet = build_demo_fleet(seed=3, end=END, days=0.25, step_seconds=300)
    with rollup_variants(fleet, {"all": lambda line: True}, tmp_path / "five") as urls:
        source = PrometheusSource.from_settings(PrometheusSettings(url=urls["all"]))
        window = Window(start=END - timedelta(hours=2), end=END - timedelta(hours=1))
        pieces = history_pieces(source, window, piece_seconds=180)
    assert pieces["seconds"].tolist() == [300.0] * 12
    assert pieces["samples"].tolist() == [1.0] * 12
