"""The UI's data layer and the raw views under it: bucketing, filtering an analysis, serving the last good
view in an outage, and saying what a page waits for while a source does not answer."""

import logging
import math
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

import pandas as pd
import pytest

from gpuwatch.core.config import Settings, UiSettings
from gpuwatch.core.errors import PrometheusError
from gpuwatch.core.model import KueueState, Namespace, Node, SourceWait, Window
from gpuwatch.read.service import FleetService
from gpuwatch.sim import SimulatedFleet, build_demo_fleet
from gpuwatch.sim.demoservice import SimulatedSources, demo_service, demo_settings
from gpuwatch.sources.kubernetes import ClusterState
from gpuwatch.surfaces.report import build_report
from gpuwatch.ui.components import change, points
from gpuwatch.ui.data import Loaded, ViewStore
from gpuwatch.ui.filters import CUSTOM, Filters
from gpuwatch.views.base import Scope, bucketed
from gpuwatch.views.raw import filter_analysis

START = datetime(2026, 11, 19, tzinfo=UTC)
T = TypeVar("T")


def blocking_store(service: FleetService) -> ViewStore:
    """A ViewStore whose load() waits for a computation however long it takes (nothing outside is read)."""
    return ViewStore(service, compute_seconds=math.inf)


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
    return demo_service(Settings(), fleet)


def test_no_filter_is_the_analysis_itself_and_a_team_filter_keeps_the_teams_own(
    service: FleetService,
) -> None:
    analysis = service.analysis(service.window(days=1))
    assert filter_analysis(analysis, Scope()) is analysis
    report = build_report(analysis)
    vision = next(t for t in report["teams"] if t["team"] == "vision")
    scoped = build_report(filter_analysis(analysis, Scope(teams=("vision",))))
    assert [t["team"] for t in scoped["teams"]] == ["vision"]
    assert scoped["teams"][0] == vision
    # The ledger of a team view is the team's own allocation: its idle dollars are the team's waste.
    assert scoped["fleet"]["waste_usd"] == pytest.approx(vision["waste_usd"])
    assert scoped["fleet"]["cost_usd"] == pytest.approx(vision["cost_usd"])
    assert scoped["fleet"]["ledger_gpu_hours"]["unallocated"] == 0.0
    pool = build_report(filter_analysis(analysis, Scope(pools=("NVIDIA-L4",))))
    assert [p["pool"] for p in pool["pools"]] == ["NVIDIA-L4"]
    assert pool["fleet"]["gpus"] == 8
    assert {w["pool"] for w in pool["workloads"]} == {"NVIDIA-L4"}


def test_an_outage_serves_the_last_good_view_and_says_so(
    service: FleetService, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = blocking_store(service)
    good = store.load(Filters())
    assert good.view is not None and good.outage is None
    assert good.view.report == build_report(
        service.analysis(service.window(days=1)), queues=service.queue_setup()
    )

    def unreachable(*_args: object) -> None:
        raise PrometheusError("prometheus unreachable")

    monkeypatch.setattr(service.sources, "cluster_state", unreachable)
    stale = store.load(Filters(window="1h", teams=("vision",)))
    assert stale.outage is not None and "unreachable" in stale.outage.message
    assert stale.view is not None and stale.view.window == good.view.window  # the last good window
    assert [t["team"] for t in stale.view.report["teams"]] == ["vision"]  # filtered all the same
    assert store.load(Filters()).outage is not None  # cached, but the source is still down
    monkeypatch.undo()
    assert store.load(Filters(window="1h")).outage is None


def test_a_window_longer_than_the_simulated_history_starts_where_the_history_does(
    service: FleetService,
) -> None:
    """The 1-day simulated fleet asked for 7 or 30 days: the window starts at the fleet's first sample,
    so no day before the fleet existed is counted as unallocated capacity."""
    store = blocking_store(service)
    first = service.history_start()
    assert first is not None
    for preset in ("7d", "30d"):
        window = store.window(Filters(window=preset))
        assert window.start == first and window.end == service.now()
    custom = store.window(
        Filters(window=CUSTOM, start=first - timedelta(days=20), end=first + timedelta(hours=6))
    )
    assert (custom.start, custom.end) == (first, first + timedelta(hours=6))
    view = store.load(Filters(window="30d")).view
    assert view is not None
    coverage = view.report["coverage"]
    assert coverage["gpu_samples_present"] >= 0.95 * coverage["gpu_samples_expected"]
    assert store.load(Filters()).outage is None


class HandSources:
    """One node of two L4 GPUs whose pods are gone from the API server: DCGM's labels name them."""

    simulated = False  # as live sources are: only the pods are gone

    def __init__(self, samples: pd.DataFrame) -> None:
        self.samples = samples

    def cluster_state(self) -> ClusterState:
        gpus = {"nvidia.com/gpu": 2.0}
        return ClusterState(
            nodes=(Node(name="n1", product="NVIDIA-L4", gpu_count=2, capacity=gpus, allocatable=gpus),),
            pods=(),
            namespaces=(Namespace(name="alpha"), Namespace(name="beta")),
            quotas=(),
        )

    def gpu_samples(self, window: Window, _state: ClusterState) -> pd.DataFrame:
        s = self.samples
        return s[(s["timestamp"] >= window.start) & (s["timestamp"] < window.end)].reset_index(drop=True)

    def allocation_history(self, _window: Window) -> pd.DataFrame | None:
        return None

    def take_warnings(self) -> list[str]:
        return []

    def node_state(self, *, namespaces: bool = False) -> ClusterState:
        return self.cluster_state()

    def kueue_state(self) -> KueueState:
        return KueueState(installed=False)  # a cluster without Kueue

    def now(self) -> datetime:
        return START + timedelta(hours=4)

    def history_start(self) -> datetime | None:
        return None

    def recorded(self) -> None:
        return None

    def waiting(self) -> list[SourceWait]:
        return []


def _minutes(
    uuid: str, first: int, last: int, util: float, namespace: str = "", pod: str = ""
) -> pd.DataFrame:
    """GPU samples of one unit, one a minute over [START + first min, START + last min)."""
    n = last - first
    return pd.DataFrame(
        {
            "timestamp": pd.date_range(START + timedelta(minutes=first), periods=n, freq="60s"),
            "node": "n1",
            "uuid": uuid,
            "gpu_instance_id": "",
            "mig_profile": "",
            "util_ratio": util,
            "util_source": "DCGM_FI_DEV_GPU_UTIL",
            "namespace": namespace,
            "pod": pod,
        }
    )


def test_team_changes_compare_with_the_window_before() -> None:
    # Previous 2 h: alpha holds GPU-0 at 50 % (2 GE-h allocated, 1 used: 50 %); GPU-1 sits free.
    # This 2 h: alpha holds GPU-0 at 80 % and GPU-1 at 20 % for an hour (3 GE-h, 1.6 + 0.2 used: 60 %),
    # beta holds GPU-1 at 40 % the other hour (nothing before: no change to show, not 0).
    samples = pd.concat(
        [
            _minutes("GPU-0", 0, 120, 0.5, "alpha", "a-1"),
            _minutes("GPU-1", 0, 120, 0.0),
            _minutes("GPU-0", 120, 240, 0.8, "alpha", "a-1"),
            _minutes("GPU-1", 120, 180, 0.2, "alpha", "a-2"),
            _minutes("GPU-1", 180, 240, 0.4, "beta", "b-1"),
        ],
        ignore_index=True,
    )
    store = blocking_store(FleetService(settings=Settings(), sources=HandSources(samples)))
    end = START + timedelta(hours=4)
    view = store.load(Filters(window=CUSTOM, start=end - timedelta(hours=2), end=end)).view
    assert view is not None
    previous = store.previous(view)
    assert previous is not None
    assert previous["window"] == {
        "start": "2026-11-19T00:00:00Z",
        "end": "2026-11-19T02:00:00Z",
        "step_seconds": 60,
    }
    now = {t["team"]: t for t in view.report["teams"]}
    assert now["alpha"]["allocated_gpu_hours"] == pytest.approx(3.0)
    assert now["alpha"]["efficiency"] == pytest.approx(0.6)
    changes = view.team_changes(previous).set_index("team")
    assert changes.loc["alpha", "allocated_gpu_hours_change_ratio"] == pytest.approx(3.0 / 2.0 - 1)
    assert changes.loc["alpha", "efficiency_change_ratio"] == pytest.approx(0.6 - 0.5)
    assert changes.loc["beta"].isna().all()
    assert (change(0.5), points(0.1), change(math.nan), points(math.nan)) == ("+50%", "+10.0 pp", "—", "—")
    assert (change(-0.004), points(-0.0004), change(-0.006), points(-0.0006)) == (
        "+0%",
        "+0.0 pp",
        "-1%",
        "-0.1 pp",
    )
    # Under a team filter the window before is the team's too: beta had nothing then.
    beta = store.load(Filters(window=CUSTOM, start=end - timedelta(hours=2), end=end, teams=("beta",))).view
    assert beta is not None
    before = store.previous(beta)
    assert before is not None and before["teams"] == []
    assert beta.team_changes(before)["team"].tolist() == ["beta"]
    assert beta.team_changes(before).drop(columns="team").isna().all(axis=None)


def test_no_trend_against_a_window_before_the_data_began() -> None:
    # Telemetry starts at START. The 3 h window before [START + 1 h, START + 4 h) has data for 1 h of
    # its 3: alpha's allocated hours "grew" only because the baseline is mostly missing. No trend shown.
    samples = pd.concat(
        [_minutes("GPU-0", 0, 240, 0.5, "alpha", "a-1"), _minutes("GPU-1", 0, 240, 0.0)], ignore_index=True
    )
    store = blocking_store(FleetService(settings=Settings(), sources=HandSources(samples)))
    end = START + timedelta(hours=4)
    view = store.load(Filters(window=CUSTOM, start=end - timedelta(hours=3), end=end)).view
    assert view is not None
    previous = store.previous(view)
    assert previous is not None
    assert [t["allocated_gpu_hours"] for t in previous["teams"]] == [pytest.approx(1.0)]
    changes = view.team_changes(previous)
    assert changes["team"].tolist() == ["alpha"]
    assert changes.drop(columns="team").isna().all(axis=None)
    # The 1 h window before [START + 3 h, START + 4 h) is fully covered: its change is shown (0 %).
    hour = store.load(Filters(window=CUSTOM, start=end - timedelta(hours=1), end=end)).view
    assert hour is not None
    before = store.previous(hour)
    assert before is not None
    assert hour.team_changes(before).set_index("team").loc["alpha"].tolist() == [0.0, 0.0]


# -- a source that does not answer --------------------------------------------------------------------------

PROMETHEUS = "http://prometheus.test:9090"
FAILURE = f"prometheus at {PROMETHEUS} unreachable: no answer within 60s"


class HungSources:
    """The demo fleet's sources behind a Prometheus that accepts every read of the cluster and answers once
    `answer` is set (then with PrometheusError(`error`) if that is set). The read under way is what
    waiting() names, as LiveSources' do; `silent` reads are not named (only computing, then)."""

    simulated = False  # read as a live Prometheus is

    def __init__(self, inner: SimulatedSources, *, cluster: str = "", silent: bool = False) -> None:
        self.inner = inner
        self.cluster = cluster
        self.silent = silent
        self.answer = threading.Event()
        self.error: str | None = None
        self.reads = 0
        self._since: float | None = None

    def cluster_state(self) -> ClusterState:
        self.reads += 1
        self._since = time.monotonic()
        try:
            self.answer.wait(60)
        finally:
            self._since = None
        if self.error:
            raise PrometheusError(self.error)
        return self.inner.cluster_state()

    def waiting(self) -> list[SourceWait]:
        since = self._since
        if since is None or self.silent:
            return []
        seconds = time.monotonic() - since
        return [SourceWait(source="prometheus", url=PROMETHEUS, seconds=seconds, cluster=self.cluster)]

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


@pytest.fixture(scope="module")
def small_fleet() -> SimulatedFleet:
    return build_demo_fleet(seed=42, end=datetime(2026, 11, 20, tzinfo=UTC), days=0.25, gpus=16)


def hung_store(fleet: SimulatedFleet, **kwargs: Any) -> tuple[ViewStore, HungSources]:
    """A ViewStore over a hung source with a dashboard deadline of 1 s, which waits 0.2 s for a view (and a
    read of an outside system under way as long) before it says what the view waits for."""
    sources = HungSources(SimulatedSources(fleet), **kwargs)
    settings = replace(demo_settings(Settings()), ui=UiSettings(deadline_seconds=1.0))
    service = FleetService(settings=settings, sources=sources)  # type: ignore[arg-type]
    return ViewStore(service, wait_seconds=0.2, side_wait_seconds=0.2, slow_read_seconds=0.2), sources


def eventually(get: Callable[[], T | None], timeout: float = 60.0) -> T:
    """get()'s first value that is not None, asked again until `timeout` seconds have passed."""
    end = time.monotonic() + timeout
    while (value := get()) is None:
        assert time.monotonic() < end, "timed out"
        time.sleep(0.1)
    return value


def timed_load(store: ViewStore, **kwargs: Any) -> tuple[Loaded, float]:
    started = time.monotonic()
    loaded = store.load(Filters(), **kwargs)
    return loaded, time.monotonic() - started


def test_a_page_says_what_it_waits_for_then_which_source_missed_the_deadline_then_shows_the_view(
    small_fleet: SimulatedFleet,
) -> None:
    store, sources = hung_store(small_fleet)
    try:
        loaded, took = timed_load(store)
        assert took < 0.9  # the page is drawn while the source hangs, not after
        assert loaded.view is None and loaded.outage is None
        assert loaded.waiting is not None and not loaded.waiting.late
        assert loaded.waiting.text.startswith(f"waiting for Prometheus at {PROMETHEUS} · ")
        assert loaded.waiting.text.endswith(" s")
        assert store.progress()[1]  # a computation under way: pages are drawn again
        time.sleep(max(0.0, 1.05 - took))
        late, took = timed_load(store)
        assert took < 0.9
        assert late.waiting is not None and late.waiting.late and late.waiting.seconds >= 1.0
        assert late.outage is not None and late.outage.late
        assert late.outage.message == f"Prometheus at {PROMETHEUS}: no answer within 1s"
        assert late.view is None  # nothing computed before: the cards keep saying what they wait for
        assert sources.reads == 1  # one computation per window at a time
        generation = store.progress()[0]
    finally:
        sources.answer.set()
    view = eventually(lambda: store.load(Filters()).view)
    done = store.load(Filters())
    assert done.view is view and done.outage is None and done.waiting is None
    assert store.progress() == (generation + 1, False)


def test_while_nothing_outside_is_read_a_page_says_computing(small_fleet: SimulatedFleet) -> None:
    store, sources = hung_store(small_fleet, silent=True)
    store.compute_seconds = 1.0
    try:
        loaded, took = timed_load(store)
        assert 1.0 <= took < 1.9  # nothing outside read: waited for up to compute_seconds
        assert loaded.view is None and loaded.waiting is not None
        assert loaded.waiting.text == "computing … · 1 s"
        late = store.load(Filters())
        assert late.outage is not None and late.outage.message == "the view is not computed within 1s"
    finally:
        sources.answer.set()


def test_a_failed_computation_is_not_kept_and_the_next_load_starts_another(
    small_fleet: SimulatedFleet, caplog: pytest.LogCaptureFixture
) -> None:
    store, sources = hung_store(small_fleet)
    store.retry_seconds = 0.5
    sources.error = FAILURE
    sources.answer.set()
    with caplog.at_level(logging.INFO, logger="gpuwatch.ui.data"):
        failed = store.load(Filters())
        assert failed.view is None and failed.waiting is None
        assert failed.outage is not None and failed.outage.message == FAILURE and not failed.outage.late
        # Drawn again to show progress: the failed window is not computed again before its backoff ...
        assert store.load(Filters(), polled=True).outage == failed.outage
        assert sources.reads == 1 and not store.progress()[1]
        # ... a page opened (or refreshed) computes it again at once: the same fault, logged once ...
        assert store.load(Filters()).outage == failed.outage
        assert sources.reads == 2
        store.load(Filters(), polled=True)  # a page still shows it
        # ... and after the backoff (doubled: the second failure in a row), drawing it again retries.
        generation, busy = store.progress()
        assert not busy
        time.sleep(1.05)
        assert store.progress() == (generation + 1, False)  # due: pages are drawn again, once ...
        assert store.progress() == (generation + 1, False)
        assert store.load(Filters(), polled=True).outage == failed.outage  # ... which tries it
        assert sources.reads == 3
        sources.error = None
        view = eventually(lambda: store.load(Filters()).view)
    assert store.load(Filters()).outage is None and sources.reads == 4
    assert view.window == store.window(Filters())
    records = [r for r in caplog.records if r.name == "gpuwatch.ui.data"]
    failing = [r.getMessage() for r in records if r.levelno == logging.WARNING]
    assert failing == [f"gpuwatch UI: source failing: {FAILURE}"]
    assert all(r.exc_info is None for r in records)  # one line per fault, never a traceback
    assert any(r.getMessage() == "gpuwatch UI: source recovered" for r in records)


def test_warming_up_against_a_failing_source_logs_one_line(
    small_fleet: SimulatedFleet, caplog: pytest.LogCaptureFixture
) -> None:
    store, sources = hung_store(small_fleet)
    sources.error = FAILURE
    sources.answer.set()
    with caplog.at_level(logging.INFO, logger="gpuwatch.ui.data"):
        store.warm().join(30)
    assert store.warmed.is_set()
    records = [r for r in caplog.records if r.name == "gpuwatch.ui.data"]
    assert [r.getMessage() for r in records] == [f"gpuwatch UI: source failing: {FAILURE}"]
    assert records[0].levelno == logging.WARNING and records[0].exc_info is None


def test_one_cluster_of_several_not_answering_gets_its_own_banner_not_the_fleets(
    small_fleet: SimulatedFleet,
) -> None:
    store, sources = hung_store(small_fleet, cluster="eu-1")
    try:
        time.sleep(0.1)
        loaded = store.load(Filters())
        assert loaded.waiting is not None
        assert loaded.waiting.text.startswith(f"waiting for Prometheus at {PROMETHEUS} (cluster eu-1) · ")
        time.sleep(1.0)
        late = store.load(Filters())
        assert late.outage is None  # not the whole fleet's outage
        assert late.waiting is not None
        (cluster,) = late.waiting.late_clusters
        assert late.waiting.unanswered(cluster) == (
            f"Prometheus at {PROMETHEUS} (cluster eu-1): no answer within 1s"
        )
    finally:
        sources.answer.set()


def test_quotas_and_health_say_what_they_wait_for_and_keep_their_last_frame(
    small_fleet: SimulatedFleet,
) -> None:
    store, sources = hung_store(small_fleet)
    store.refresh_seconds = 0.0  # refetched on every call
    try:
        started = time.monotonic()
        quotas = store.quotas()
        assert time.monotonic() - started < 0.9
        assert quotas.frame is None and quotas.waiting is not None
        assert quotas.waiting.text.startswith(f"waiting for Prometheus at {PROMETHEUS} · ")
    finally:
        sources.answer.set()
    fetched = eventually(lambda: store.quotas().frame)
    sources.answer.clear()
    try:
        again = store.quotas()  # refetching: the last frame meanwhile
        assert again.waiting is not None and again.frame is fetched
    finally:
        sources.answer.set()


def test_past_the_deadline_a_page_shows_the_last_good_data_under_the_outage(
    small_fleet: SimulatedFleet,
) -> None:
    store, sources = hung_store(small_fleet)
    sources.answer.set()
    good = eventually(lambda: store.load(Filters()).view)
    sources.answer.clear()
    try:
        asked = Filters(window="1h", teams=("vision",))
        waiting = store.load(asked)
        assert waiting.view is None and waiting.waiting is not None  # another window: nothing to show yet
        time.sleep(1.0)
        late = store.load(asked)
        assert late.outage is not None and late.outage.late
        assert late.view is not None and late.view.window == good.window  # the last good data, filtered
        assert [t["team"] for t in late.view.report["teams"]] == ["vision"]
        assert late.waiting is not None  # still waited for: the cards' words, the banner's next try
    finally:
        sources.answer.set()
    assert eventually(lambda: store.load(asked).view if store.load(asked).outage is None else None)


def test_a_source_failing_while_a_page_draws_is_its_banner_and_the_rest_stays(
    service: FleetService, caplog: pytest.LogCaptureFixture
) -> None:
    """The recorded path reads a view's detail as the page draws it: a source failing then is the page's
    banner (one log line), its other outputs unchanged (no_update), never a callback error."""
    import flask
    from dash import no_update
    from dash._callback_context import context_value
    from dash._utils import AttributeDict

    from gpuwatch.ui.components import STORE_KEY, draw

    def render() -> tuple[Any, ...]:
        raise PrometheusError("prometheus at http://prometheus:9090 unreachable: no answer within 60s")

    app = flask.Flask(__name__)
    app.config[STORE_KEY] = ViewStore(service)
    token = context_value.set(AttributeDict(outputs_list=[{}] * 5, triggered_inputs=[]))
    try:
        with app.test_request_context("/"), caplog.at_level(logging.WARNING):
            banner, *rest, drawn = draw(render)
            draw(render)
    finally:
        context_value.reset(token)
    text = str(banner)
    assert "Data source failing" in text and "no answer within 60s" in text
    assert rest == [no_update] * 3
    assert drawn["incomplete"] is True
    # gpuwatch's own records: a watch another test left behind may log its retries meanwhile.
    assert [r.getMessage() for r in caplog.records if r.name == "gpuwatch.ui.data"] == [
        "gpuwatch UI: source failing: prometheus at http://prometheus:9090 unreachable: no answer within 60s"
    ]
