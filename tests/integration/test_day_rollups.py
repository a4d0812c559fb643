"""The daily roll-ups (alerts/gpuwatch-recording.rules.yml, group gpuwatch.rollup.daily) on Prometheus and
VictoriaMetrics.

A window of days is read from whole days of daily roll-ups, the hours around them from the hourly ones
and the part-hours at its ends raw; the report equals the one read from hours alone. A day whose daily
roll-ups are missing is read from its hours, and a day missing an hour as well is read raw: never counted
as nothing.
"""

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from gpuwatch.core.config import PrometheusSettings, Settings
from gpuwatch.core.model import Window
from gpuwatch.read.history import read_history
from gpuwatch.sim import SimulatedFleet
from gpuwatch.sim.demoservice import demo_settings
from gpuwatch.sources.prometheus import PrometheusSource
from gpuwatch.sources.windowpieces import history_pieces
from gpuwatch.surfaces.report import build_history_report
from tests.integration.prom import Backend, Keep, rollup_variants
from tests.integration.test_rollups import Report, _same

pytestmark = pytest.mark.integration
END = datetime(2026, 11, 20, tzinfo=UTC)
# Hourly roll-ups on the hour, daily ones at 23:30 (of the hours 00:00-23:00). The window: 43 min raw,
# 8 h (15:00-23:00 Nov 16), the days to 23:00 Nov 17 and Nov 18, 22 h to 21:00 Nov 19, 44 min raw.
WINDOW = Window(start=END - timedelta(days=3, hours=9, minutes=43), end=END - timedelta(hours=2, minutes=16))
DAY = 86_400.0
LOST_DAY = datetime(2026, 11, 18, 23, 30, tzinfo=UTC)  # the daily roll-ups evaluated then
LOST_HOURS = (
    datetime(2026, 11, 18, 5, tzinfo=UTC),
    datetime(2026, 11, 18, 6, tzinfo=UTC),
)  # (a, b]: one hour


def _at(line: str) -> datetime:
    return datetime.fromtimestamp(float(line.rsplit(" ", 1)[1]), UTC)


def _lost_day(line: str) -> bool:
    """A daily roll-up sample (not the evaluation marker) of LOST_DAY."""
    return line.startswith("day:gpuwatch_") and "rollup_evaluation" not in line and _at(line) == LOST_DAY


def _lost_hour(line: str) -> bool:
    hourly = line.startswith("hour:gpuwatch_") and "rollup_evaluation" not in line
    return hourly and LOST_HOURS[0] < _at(line) <= LOST_HOURS[1]


KEEPS: dict[str, Keep] = {
    "complete": lambda line: True,
    "hourly": lambda line: not line.startswith("day:"),
    "raw": lambda line: not line.startswith(("day:", "hour:")),
    "lost day": lambda line: not _lost_day(line),
    "lost day and hours": lambda line: not (_lost_day(line) or _lost_hour(line)),
}


@pytest.fixture(scope="module", params=("prometheus", "victoriametrics"))
def servers(
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    days_fleet: SimulatedFleet,
    worlds: Path,
) -> Iterator[dict[str, str]]:
    """One server of the backend per KEEPS entry, holding the fleet's history lines it keeps."""
    backend: Backend = request.param
    root = tmp_path_factory.mktemp(f"days-{backend}")
    with rollup_variants(days_fleet, KEEPS, root, backend=backend, cache=worlds / "seed5-days") as urls:
        yield urls


def _pieces(url: str) -> list[tuple[float, str]]:
    source = PrometheusSource.from_settings(PrometheusSettings(url=url))
    try:
        pieces = history_pieces(source, WINDOW)
    finally:
        source.close()
    return list(zip(pieces["seconds"].tolist(), pieces["rollup"].tolist(), strict=True))


def _report(url: str) -> Report:
    settings = demo_settings(Settings(prometheus=PrometheusSettings(url=url)))
    return build_history_report(read_history(settings, WINDOW))


def test_whole_days_come_from_the_daily_rollups(servers: dict[str, str]) -> None:
    assert _pieces(servers["complete"]) == [
        (43 * 60, ""),
        (8 * 3600, "hour"),
        (DAY, "day"),
        (DAY, "day"),
        (22 * 3600, "hour"),
        (44 * 60, ""),
    ]
    assert _pieces(servers["hourly"]) == [
        (43 * 60, ""),
        (DAY, "hour"),
        (DAY, "hour"),
        (DAY, "hour"),
        (6 * 3600, "hour"),
        (44 * 60, ""),
    ]


def test_a_report_from_daily_rollups_equals_the_hourly_read_and_the_raw_one(servers: dict[str, str]) -> None:
    """Equal to the hourly read to the last digit; to the raw read but for the part-hour ends of a 5-min
    exporter, whose samples the raw pieces (cut from the window's start) attribute a little differently."""
    complete, hourly, raw = _report(servers["complete"]), _report(servers["hourly"]), _report(servers["raw"])
    assert hourly["fleet"]["allocated_gpu_hours"] > 100
    _same(complete, hourly)
    assert complete["coverage"] == hourly["coverage"]
    for key in ("capacity_gpu_hours", "allocated_gpu_hours", "used_gpu_hours", "cost_usd", "waste_usd"):
        assert complete["fleet"][key] == pytest.approx(raw["fleet"][key], rel=1e-3), key


def test_a_day_without_daily_rollups_is_read_from_its_hours_and_one_missing_hours_raw(
    servers: dict[str, str],
) -> None:
    expected = [
        (43 * 60, ""),
        (8 * 3600, "hour"),
        (DAY, "day"),
        (DAY, "hour"),
        (22 * 3600, "hour"),
        (44 * 60, ""),
    ]
    assert _pieces(servers["lost day"]) == expected
    expected[3] = (DAY, "")
    assert _pieces(servers["lost day and hours"]) == expected
    hourly = _report(servers["hourly"])
    _same(_report(servers["lost day"]), hourly)
    _same(_report(servers["lost day and hours"]), hourly, same_p95=False)  # a day read raw
