"""The namespace roll-ups (alerts/gpuwatch-recording.rules.yml: the pods' roll-ups summed per namespace,
team and pool, and the pods counted) on a real Prometheus.

Their rules give what the backfill writes; a window's team and namespace numbers read from them equal
those summed from every pod's families, whatever the pieces the window is cut in (a first piece of a day,
of hours, or raw); a store whose rules gained them midway (an upgrade) is read from the pods' roll-ups
again; and reading them touches no pod's series but where the window's ends are read raw.
"""

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from gpuwatch.core.config import PrometheusSettings, Settings
from gpuwatch.core.model import Window
from gpuwatch.read.history import NAMESPACE, WORKLOAD, read_history
from gpuwatch.sim import SimulatedFleet
from gpuwatch.sim.demoservice import demo_settings
from gpuwatch.sources import ownseries
from gpuwatch.sources.prometheus import PrometheusSource
from gpuwatch.sources.windowpieces import history_pieces
from gpuwatch.surfaces.report import build_history_report
from tests.integration.prom import query, rollup_variants

pytestmark = pytest.mark.integration
END = datetime(2026, 11, 20, tzinfo=UTC)
UPGRADE = datetime(2026, 11, 18, tzinfo=UTC)  # the "upgraded" store's rules recorded namespaces from then
WINDOWS = {
    # 43 min raw, 8 h, two days (to 23:00 Nov 17 and Nov 18), 22 h, 44 min raw.
    "off the hour": Window(
        start=END - timedelta(days=3, hours=9, minutes=43), end=END - timedelta(hours=2, minutes=16)
    ),
    # From 23:00 Nov 16 to 23:00 Nov 18: the first piece is a day's roll-ups.
    "whole days": Window(
        start=datetime(2026, 11, 16, 23, tzinfo=UTC), end=datetime(2026, 11, 18, 23, tzinfo=UTC)
    ),
    # Five hours and a part-hour in one day.
    "hours": Window(
        start=datetime(2026, 11, 19, 3, tzinfo=UTC), end=datetime(2026, 11, 19, 8, 20, tzinfo=UTC)
    ),
}
Report = dict[str, Any]


def _namespace_line(line: str) -> bool:
    return line.startswith(("hour:gpuwatch_namespace_", "day:gpuwatch_namespace_"))


def _before_upgrade(line: str) -> bool:
    return _namespace_line(line) and datetime.fromtimestamp(float(line.rsplit(" ", 1)[1]), UTC) < UPGRADE


KEEPS = {
    "complete": lambda line: True,
    "pods only": lambda line: not _namespace_line(line),  # rules older than the namespace roll-ups
    "upgraded": lambda line: not _before_upgrade(line),
}


@pytest.fixture(scope="module")
def servers(
    tmp_path_factory: pytest.TempPathFactory, days_fleet: SimulatedFleet, worlds: Path
) -> Iterator[dict[str, str]]:
    root = tmp_path_factory.mktemp("namespace-rollups")
    with rollup_variants(days_fleet, KEEPS, root, cache=worlds / "seed5-days") as urls:
        yield urls


def _values(url: str, expr: str, at: datetime) -> dict[tuple[tuple[str, str], ...], float]:
    return {
        tuple(sorted((k, v) for k, v in r["metric"].items() if k != "__name__")): float(r["value"][1])
        for r in query(url, expr, at)
    }


def test_the_rules_record_what_the_backfill_writes(servers: dict[str, str]) -> None:
    """Each namespace rule evaluated over the backfilled pods' roll-ups equals the namespace roll-up the
    backfill wrote, hour by hour over a day (pods came and went) and at the day's evaluation."""
    url = servers["complete"]
    hourly = {r["record"]: r["expr"] for r in ownseries.namespace_rollup_rules()}
    new_pods = ownseries.rollup_name(ownseries.NAMESPACE_NEW_PODS, "count")
    seen_new = 0.0
    for hour in range(24):
        at = datetime(2026, 11, 18, hour, tzinfo=UTC)
        for record, expr in hourly.items():
            if record == ownseries.NAMESPACE_ROLLUP_MARKER:
                continue
            written = _values(url, record, at)
            assert written == pytest.approx(_values(url, expr, at), rel=1e-12), (record, at)
            if record == new_pods:
                seen_new += sum(written.values())
        allocated = _values(
            url, ownseries.rollup_name("gpuwatch_namespace_gpu_allocation", "sum_over_time"), at
        )
        assert sum(allocated.values()) > 0
    assert seen_new > 0  # pods started that day
    day = datetime(2026, 11, 18, 23, 30, tzinfo=UTC)
    daily = {
        r["record"]: r["expr"] for r in ownseries.day_rollup_rules() if "gpuwatch_namespace_" in r["record"]
    }
    for record, expr in daily.items():
        if record == ownseries.DAY_NAMESPACE_ROLLUP_MARKER:
            continue
        written = _values(url, record, day)
        assert written == pytest.approx(_values(url, expr, day), rel=1e-12), record
        assert written or "unknown" in record, record  # the demo's GPUs all report that day


def _report(url: str, window: Window, detail: str) -> Report:
    settings = demo_settings(Settings(prometheus=PrometheusSettings(url=url)))
    return build_history_report(read_history(settings, window, detail=detail))


def _rows(report: Report, section: str, key: str) -> dict[str, dict[str, Any]]:
    return {"/".join(str(row[k]) for k in key.split("/")): row for row in report[section]}


def _same_groups(got: Report, expected: Report) -> None:
    """Fleet, team and namespace numbers the same (pods counted included)."""
    for key, value in expected["fleet"].items():
        assert got["fleet"][key] == pytest.approx(value, rel=1e-9, abs=1e-9, nan_ok=True), key
    for section, key in (("teams", "team"), ("namespaces", "namespace/team")):
        a, b = _rows(got, section, key), _rows(expected, section, key)
        assert a.keys() == b.keys() and len(b) > 3, section
        for name, row in b.items():
            for field, value in row.items():
                if isinstance(value, float | int) and not isinstance(value, bool):
                    assert a[name][field] == pytest.approx(value, rel=1e-9, abs=1e-9, nan_ok=True), (
                        section,
                        name,
                        field,
                    )
                else:
                    assert a[name][field] == value, (section, name, field)


@pytest.mark.parametrize("window", list(WINDOWS), ids=list(WINDOWS))
def test_team_and_namespace_rows_from_namespace_rollups_equal_every_pods_sum(
    servers: dict[str, str], window: str
) -> None:
    """The namespace detail (team and namespace rows from the namespace roll-ups) equals the workload
    detail (every pod's families summed), on the complete store, on one whose rules never had the
    namespace roll-ups, and on one that gained them midway."""
    expected = _report(servers["complete"], WINDOWS[window], WORKLOAD)
    assert sum(t["pods"] for t in expected["teams"]) > 20
    for name in KEEPS:
        _same_groups(_report(servers[name], WINDOWS[window], NAMESPACE), expected)


def test_the_whole_days_window_starts_with_a_day(servers: dict[str, str]) -> None:
    source = PrometheusSource.from_settings(PrometheusSettings(url=servers["complete"]))
    try:
        pieces = history_pieces(source, WINDOWS["whole days"])
    finally:
        source.close()
    assert pieces["rollup"].iloc[0] == "day" and len(pieces) > 1


def test_team_rows_read_no_pod_series_but_at_the_raw_ends(
    servers: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A month's team numbers cost what its namespaces cost: with the namespace roll-ups, no query reads a
    pod's roll-up; without them (older rules), the pods' roll-ups are read as before."""
    sent: list[str] = []
    for method in ("query", "query_range"):
        original = getattr(PrometheusSource, method)

        def recorded(
            self: PrometheusSource, expr: str, *args: Any, _original: Any = original, **kwargs: Any
        ) -> Any:
            sent.append(expr)
            return _original(self, expr, *args, **kwargs)

        monkeypatch.setattr(PrometheusSource, method, recorded)
    for name, reads_pods in (("complete", False), ("pods only", True)):
        sent.clear()
        _report(servers[name], WINDOWS["off the hour"], NAMESPACE)
        pod_rollups = [q for q in sent if "hour:gpuwatch_pod_" in q or "day:gpuwatch_pod_" in q]
        assert bool(pod_rollups) == reads_pods, (name, pod_rollups[:3])
