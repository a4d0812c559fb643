"""The UI's data layer: bucketing, filtering an analysis, and serving the last good view in an outage."""

from datetime import UTC, datetime, timedelta

import pandas as pd
import pytest

from gpuwatch.config import Settings
from gpuwatch.errors import PrometheusError
from gpuwatch.model import Window
from gpuwatch.report import build_report
from gpuwatch.service import FleetService
from gpuwatch.sources.simulated import build_demo_fleet
from gpuwatch.ui.data import ViewStore, bucketed, filter_analysis
from gpuwatch.ui.filters import Filters

START = datetime(2026, 11, 19, tzinfo=UTC)


def test_bucketed_averages_per_sample_totals_and_counts_missing_samples_as_zero() -> None:
    window = Window(start=START, end=START + timedelta(minutes=1000), step_seconds=60)  # 1000 samples
    t = pd.to_datetime([START, START, START + timedelta(minutes=1), START + timedelta(minutes=999)], utc=True)
    frame = pd.DataFrame({"timestamp": t, "ge": [1.0, 2.0, 4.0, 8.0]})
    out = bucketed(frame, window, ["ge"])
    # 1000 samples in <= 480 buckets: 3 samples each; samples 0-2 hold 3 + 4 + 0 GE.
    assert out["timestamp"].iloc[0] == pd.Timestamp(START)
    assert out["ge"].iloc[0] == pytest.approx(7 / 3)
    # The last bucket holds sample 999 only (1000 = 333 * 3 + 1).
    assert out["timestamp"].iloc[-1] == pd.Timestamp(START + timedelta(minutes=999))
    assert out["ge"].iloc[-1] == pytest.approx(8.0)


@pytest.fixture(scope="module")
def service() -> FleetService:
    fleet = build_demo_fleet(seed=42, end=datetime(2026, 11, 20, tzinfo=UTC), days=1)
    return FleetService.demo(Settings(), fleet)


def test_no_filter_is_the_analysis_itself_and_a_team_filter_keeps_the_teams_own(
    service: FleetService,
) -> None:
    analysis = service.analysis(service.window(days=1))
    assert filter_analysis(analysis, Filters()) is analysis
    report = build_report(analysis)
    vision = next(t for t in report["teams"] if t["team"] == "vision")
    scoped = build_report(filter_analysis(analysis, Filters(teams=("vision",))))
    assert [t["team"] for t in scoped["teams"]] == ["vision"]
    assert scoped["teams"][0] == vision
    # The ledger of a team view is the team's own allocation: its idle dollars are the team's waste.
    assert scoped["fleet"]["waste_usd"] == pytest.approx(vision["waste_usd"])
    assert scoped["fleet"]["cost_usd"] == pytest.approx(vision["cost_usd"])
    assert scoped["fleet"]["ledger_gpu_hours"]["unallocated"] == 0.0
    pool = build_report(filter_analysis(analysis, Filters(pools=("NVIDIA-L4",))))
    assert [p["pool"] for p in pool["pools"]] == ["NVIDIA-L4"]
    assert pool["fleet"]["gpus"] == 8
    assert {w["pool"] for w in pool["workloads"]} == {"NVIDIA-L4"}


def test_an_outage_serves_the_last_good_view_and_says_so(
    service: FleetService, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = ViewStore(service)
    good = store.load(Filters())
    assert good.view is not None and good.outage is None
    assert good.view.report == build_report(service.analysis(service.window(days=1)))

    def unreachable(*_args: object) -> None:
        raise PrometheusError("prometheus unreachable")

    monkeypatch.setattr(service.sources, "cluster_state", unreachable)
    stale = store.load(Filters(window="7d", teams=("vision",)))
    assert stale.outage is not None and "unreachable" in stale.outage.message
    assert stale.view is not None and stale.view.window == good.view.window  # the last good window
    assert [t["team"] for t in stale.view.report["teams"]] == ["vision"]  # filtered all the same
    assert store.load(Filters()).outage is not None  # cached, but the source is still down
    monkeypatch.undo()
    assert store.load(Filters(window="1h")).outage is None
    assert store.load(Filters()).outage is None
