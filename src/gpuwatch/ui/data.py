"""The UI's data: FleetService views per (window, filters), cached; the last good one kept for outages."""

import logging
import math
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any, Final, TypeVar

import pandas as pd

from gpuwatch.errors import SourceError
from gpuwatch.model import LEDGER_STATES, Window
from gpuwatch.report import Report, build_report
from gpuwatch.series import price_per_pool
from gpuwatch.service import Analysis, FleetService, gpu_health, team_quotas
from gpuwatch.ui.filters import CUSTOM, PRESET_GRID_SECONDS, PRESETS, Filters

log = logging.getLogger(__name__)

MAX_POINTS = 480  # points per time series sent to the browser; samples are averaged into buckets
STATE_COLUMNS = [f"{s}_ge" for s in LEDGER_STATES]
T = TypeVar("T")


def filter_analysis(analysis: Analysis, filters: Filters) -> Analysis:
    """The analysis narrowed to the filters' pools/products (nodes) and teams (workloads, pending pods).

    Under a team filter the ledger keeps the team's own GPU-hours only (allocated idle and active, from
    its workloads' samples): free, stranded and broken GPUs belong to no team. Fragmentation and free
    capacity follow pools and products only. With no filter the analysis itself is returned, so its
    numbers are the report's exactly.
    """
    if not filters.scoped:
        return analysis
    nodes = analysis.nodes
    if filters.pools:
        nodes = nodes[nodes["pool"].isin(filters.pools)]
    if filters.products:
        nodes = nodes[nodes["product"].isin(filters.products)]
    by_nodes = bool(filters.pools or filters.products)
    names, pools = set(nodes["node"]), set(nodes["pool"])

    def on_nodes(frame: pd.DataFrame) -> pd.DataFrame:
        return frame[frame["node"].isin(names)].reset_index(drop=True) if by_nodes else frame

    marked, pending, per_pool = on_nodes(analysis.marked), analysis.pending, analysis.per_pool
    if by_nodes:
        pending = pending[pending["pool"].isin(pools)]
        per_pool = per_pool[per_pool["pool"].isin(pools)].reset_index(drop=True)
    if filters.teams:
        marked = marked[marked["team"].isin(filters.teams)].reset_index(drop=True)
        pending = pending[pending["team"].isin(filters.teams)]
    held = marked[["namespace", "pod"]].drop_duplicates()
    by_node = on_nodes(analysis.by_node)
    if filters.teams:
        by_node = _team_ledger(by_node, marked)
    return replace(
        analysis,
        nodes=nodes.reset_index(drop=True),
        marked=marked,
        by_node=by_node,
        per_pool=per_pool,
        free=on_nodes(analysis.free),
        pending=pending.reset_index(drop=True),
        idle_since=analysis.idle_since.merge(held, on=["namespace", "pod"], how="inner"),
        units_reporting=on_nodes(analysis.units_reporting),
    )


def _team_ledger(by_node: pd.DataFrame, marked: pd.DataFrame) -> pd.DataFrame:
    """The node ledger holding only what `marked` (some teams' samples) allocated: unknown, idle or active."""
    ge = marked["ge_share"]
    unknown = marked["util_ratio"].isna()
    idle = marked["idle"] & ~unknown
    allocated = {
        "allocated_unknown_ge": ge.where(unknown, 0.0),
        "allocated_idle_ge": ge.where(idle, 0.0),
        "allocated_active_ge": ge.where(~(idle | unknown), 0.0),
    }
    held = (
        pd.DataFrame({"timestamp": marked["timestamp"], "node": marked["node"].astype("str"), **allocated})
        .groupby(["timestamp", "node"], as_index=False)
        .sum()
    )
    keys = by_node[["timestamp", "node", "pool"]].assign(node=by_node["node"].astype("str"))
    out = keys.merge(held, on=["timestamp", "node"], how="left").fillna(dict.fromkeys(allocated, 0.0))
    for state in ("unavailable", "stranded", "unallocated"):
        out[f"{state}_ge"] = 0.0
    out["capacity_ge"] = out[list(allocated)].sum(axis=1)
    out["overallocated_ge"] = 0.0
    return out[list(by_node.columns)].astype(by_node.dtypes.to_dict())


def bucketed(
    frame: pd.DataFrame, window: Window, values: list[str], by: tuple[str, ...] = ()
) -> pd.DataFrame:
    """Per-sample totals averaged into at most MAX_POINTS buckets (a missing sample counts as 0).

    `frame` holds rows per sample (and `by` group) whose `values` are summed per sample first; the
    bucket's value is that sum averaged over every sample of the window in the bucket.
    """
    factor = max(1, math.ceil(window.n_samples / MAX_POINTS))
    width = pd.Timedelta(seconds=window.step_seconds * factor)
    start = pd.Timestamp(window.start)
    index = (frame["timestamp"] - start) // width
    summed = frame.assign(bucket=index).groupby(["bucket", *by], as_index=False)[values].sum()
    counts = pd.Series(range(window.n_samples)) // factor
    per_bucket = counts.value_counts().sort_index()
    summed[values] = summed[values].div(summed["bucket"].map(per_bucket).to_numpy(), axis=0)
    summed.insert(0, "timestamp", start + summed["bucket"].astype("int64") * width)
    return summed.drop(columns=["bucket"]).sort_values(["timestamp", *by], ignore_index=True)


MIN_TREND_COVERAGE: Final = 0.9


def team_changes(current: Report, previous: Report) -> pd.DataFrame:
    """Per team of `current`, its change since `previous` (the window just before, of the same length).

    Columns: team, allocated_gpu_hours_change_ratio (allocated GE-hours now ÷ before − 1: 0.12 is +12 %),
    efficiency_change_ratio (efficiency now − before, in ratio units: 0.032 is +3.2 pp). NaN where the
    team allocated nothing before or an efficiency is unknown: no data is never a change of 0. NaN for
    every team when the window before is less than MIN_TREND_COVERAGE as well covered by telemetry as
    this one (it reaches past the start of the data, say): a half-empty period is no baseline.
    """
    comparable = _covered(previous) >= MIN_TREND_COVERAGE * _covered(current)
    before = {t["team"]: t for t in previous["teams"]} if comparable else {}
    rows = []
    for team in current["teams"]:
        past = before.get(team["team"], {})
        allocated_before = _known(past.get("allocated_gpu_hours"))
        rows.append(
            {
                "team": team["team"],
                "allocated_gpu_hours_change_ratio": (
                    team["allocated_gpu_hours"] / allocated_before - 1 if allocated_before > 0 else math.nan
                ),
                "efficiency_change_ratio": _known(team["efficiency"]) - _known(past.get("efficiency")),
            }
        )
    columns = ["team", "allocated_gpu_hours_change_ratio", "efficiency_change_ratio"]
    return pd.DataFrame(rows, columns=columns).astype({c: "float64" for c in columns[1:]})


def _covered(report: Report) -> float:
    """Share of the expected GPU-samples present (0 when none were expected)."""
    coverage = report["coverage"]
    expected = coverage["gpu_samples_expected"]
    return coverage["gpu_samples_present"] / expected if expected else 0.0


def _known(value: float | None) -> float:
    """A report number as a float: None (unknown) is NaN."""
    return math.nan if value is None else float(value)


class View:
    """One window under one set of filters: the (filtered) analysis, its report, and derived frames."""

    def __init__(
        self, *, filters: Filters, analysis: Analysis, report: Report, computed_at: datetime
    ) -> None:
        self.filters = filters
        self.analysis = analysis
        self.report = report
        self.computed_at = computed_at
        self._memo: dict[str, Any] = {}
        self._memo_lock = threading.Lock()

    @property
    def window(self) -> Window:
        return self.analysis.window

    def _cached(self, name: str, compute: Callable[[], T]) -> T:
        with self._memo_lock:
            if name in self._memo:
                hit: T = self._memo[name]
                return hit
        value = compute()
        with self._memo_lock:
            self._memo[name] = value
        return value

    @property
    def last_sample(self) -> pd.Timestamp:
        """The start of the window's last sample (what "now" means in a view)."""
        w = self.window
        return pd.Timestamp(w.start) + pd.Timedelta(seconds=(w.n_samples - 1) * w.step_seconds)

    def ledger_timeline(self) -> pd.DataFrame:
        """timestamp and GE per ledger state (columns `<state>_ge`), bucketed."""
        return self._cached(
            "ledger_timeline", lambda: bucketed(self.analysis.by_node, self.window, STATE_COLUMNS)
        )

    def prices(self) -> dict[str, float]:
        """USD per GPU-hour of every pool in the view (the price book's default for unknown products)."""
        return self._cached("prices", lambda: price_per_pool(self.analysis))

    def state_usd(self) -> dict[str, float]:
        """Dollars of each ledger state over the window (GE-hours × the pool's price)."""

        def compute() -> dict[str, float]:
            by_node = self.analysis.by_node
            price = by_node["pool"].map(self.prices()).astype("float64")
            hours = self.window.step_hours
            return {s: float((by_node[f"{s}_ge"] * price).sum() * hours) for s in LEDGER_STATES}

        return self._cached("state_usd", compute)

    def state_usd_total(self) -> float:
        """Dollars of the whole capacity over the window."""
        return sum(self.state_usd().values())

    def allocated_now(self) -> float:
        """GE allocated at the last sample."""
        return sum(self.held_now().values())

    def nodes_now(self) -> pd.DataFrame:
        """Per node at the last sample: pool, product, readiness, and GE per ledger state."""

        def compute() -> pd.DataFrame:
            by_node = self.analysis.by_node
            last = by_node[by_node["timestamp"] == self.last_sample][["node", *STATE_COLUMNS]]
            nodes = self.analysis.nodes.merge(last, on="node", how="left").fillna(
                dict.fromkeys(STATE_COLUMNS, 0.0)
            )
            return nodes.sort_values(["pool", "node"], ignore_index=True)

        return self._cached("nodes_now", compute)

    def fragmentation_timeline(self) -> pd.DataFrame:
        """timestamp, pool, fragmentation_ratio (bucket means), free schedulable GE."""

        def compute() -> pd.DataFrame:
            per_pool = self.analysis.per_pool
            frame = bucketed(per_pool, self.window, ["fragmented_ge", "schedulable_free_ge"], by=("pool",))
            ratio = frame["fragmented_ge"] / frame["schedulable_free_ge"].where(
                frame["schedulable_free_ge"] > 0
            )
            return frame.assign(fragmentation_ratio=ratio.fillna(0.0))

        return self._cached("fragmentation_timeline", compute)

    def team_timeline(self) -> pd.DataFrame:
        """timestamp, team, held_ge, unknown_ge (no telemetry), idle_ge, active_ge, used_ge (util × GE
        where known), bucketed."""

        def compute() -> pd.DataFrame:
            marked = self.analysis.marked
            ge = marked["ge_share"]
            unknown = marked["util_ratio"].isna()
            idle = marked["idle"] & ~unknown
            frame = pd.DataFrame(
                {
                    "timestamp": marked["timestamp"],
                    "team": marked["team"],
                    "held_ge": ge,
                    "unknown_ge": ge.where(unknown, 0.0),
                    "idle_ge": ge.where(idle, 0.0),
                    "active_ge": ge.where(~(idle | unknown), 0.0),
                    "used_ge": (marked["util_ratio"] * ge).fillna(0.0),
                }
            )
            values = ["held_ge", "unknown_ge", "idle_ge", "active_ge", "used_ge"]
            return bucketed(frame, self.window, values, by=("team",))

        return self._cached("team_timeline", compute)

    def held_now(self) -> dict[str, float]:
        """GE each team holds at the last sample."""

        def compute() -> dict[str, float]:
            marked = self.analysis.marked
            last = marked[marked["timestamp"] == self.last_sample]
            return {str(k): float(v) for k, v in last.groupby("team")["ge_share"].sum().items()}

        return self._cached("held_now", compute)

    def held_at_end(self) -> set[tuple[str, str]]:
        """(namespace, pod) of the workloads still holding GPUs at the last sample."""

        def compute() -> set[tuple[str, str]]:
            marked = self.analysis.marked
            last = marked[marked["timestamp"] == self.last_sample]
            return set(zip(last["namespace"], last["pod"], strict=True))

        return self._cached("held_at_end", compute)

    def gpu_holders(self) -> pd.DataFrame:
        """uuid, gpu_instance_id, holders ("namespace/pod (team)" joined): who holds each unit at the end."""

        def compute() -> pd.DataFrame:
            marked = self.analysis.marked
            last = marked[marked["timestamp"] == self.last_sample]
            text = {c: last[c].astype("str") for c in ("namespace", "pod", "team")}
            label = text["namespace"] + "/" + text["pod"] + " (" + text["team"] + ")"
            return (
                last.assign(holder=label)
                .groupby(["uuid", "gpu_instance_id"], as_index=False)
                .agg(holders=("holder", lambda s: ", ".join(sorted(set(s)))))
            )

        return self._cached("gpu_holders", compute)

    def team_changes(self, previous: "View") -> pd.DataFrame:
        """Per team, the change since `previous`, the window just before this one (see team_changes)."""
        return self._cached("team_changes", lambda: team_changes(self.report, previous.report))

    def node_coverage(self) -> pd.DataFrame:
        """node, samples_reporting: samples of the window in which the node's DCGM exporter reported."""

        def compute() -> pd.DataFrame:
            units = self.analysis.units_reporting
            counts = units.groupby("node", as_index=False).agg(samples_reporting=("timestamp", "nunique"))
            return self.analysis.nodes[["node", "pool", "capacity_ge"]].merge(counts, on="node", how="left")

        return self._cached("node_coverage", compute)


@dataclass(frozen=True, slots=True, kw_only=True)
class Outage:
    """A source failing: since when (wall clock) and its last error."""

    since: datetime
    message: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Loaded:
    """A view for the page, or the last good one while a source fails (then `outage` is set)."""

    view: View | None
    requested: Window | None
    outage: Outage | None = None

    @property
    def stale(self) -> bool:
        return self.outage is not None


@dataclass(frozen=True, slots=True, kw_only=True)
class Timed:
    """A frame fetched at a wall-clock time (health, quotas), and the outage if it is the last good one."""

    frame: pd.DataFrame | None
    fetched_at: datetime | None
    outage: Outage | None = None


@dataclass(frozen=True, slots=True)
class _Entry:
    frame: pd.DataFrame
    fetched_at: datetime
    fetched_monotonic: float


class ViewStore:
    """Views per (window, filters) over one FleetService; thread-safe, one computation per key at a time.

    Preset windows end on a grid (PRESET_GRID_SECONDS), so a live view is recomputed at most that often;
    health and quotas (the present, read cheaply) are refetched after `refresh_seconds`. When a source
    fails, the last good data is served with the outage, so pages keep rendering and say what is stale.
    """

    def __init__(
        self,
        service: FleetService,
        *,
        refresh_seconds: float = 60.0,
        max_views: int = 24,
        wall_clock: Callable[[], datetime] | None = None,
    ) -> None:
        self.service = service
        self.refresh_seconds = refresh_seconds
        self._max_views = max_views
        self._wall = wall_clock or (lambda: datetime.now(UTC))
        self._lock = threading.Lock()
        self._key_locks: dict[Hashable, threading.Lock] = {}
        self._views: OrderedDict[Hashable, View] = OrderedDict()
        self._last_good: dict[Filters, View] = {}  # unscoped request -> its last good unscoped view
        self._latest: View | None = None
        self._timed: dict[Hashable, _Entry] = {}
        self._outage: Outage | None = None

    # -- windows and failures ------------------------------------------------------------------

    def window(self, filters: Filters) -> Window:
        """The window the filters ask for: a custom [start, end), or a preset ending now (on its grid).

        A window reaching before the sources' history (the simulated fleet's first day) starts there:
        the days before it are not invented as empty capacity."""
        if filters.window == CUSTOM and filters.start and filters.end:
            end = filters.end
            days = (filters.end - filters.start).total_seconds() / 86400
        else:
            grid = PRESET_GRID_SECONDS[filters.window]
            now = self.service.now()
            end = datetime.fromtimestamp(now.timestamp() // grid * grid, UTC)
            days = PRESETS[filters.window]
        first = self.service.history_start()
        if first is not None:
            end = max(end, first + timedelta(minutes=1))
            days = min(days, (end - first).total_seconds() / 86400)
        return self.service.window(days=days, end=end)

    @property
    def outage(self) -> Outage | None:
        return self._outage

    def _failed(self, error: Exception) -> Outage:
        message = str(error) or type(error).__name__
        with self._lock:
            since = self._outage.since if self._outage else self._wall()
            self._outage = Outage(since=since, message=message)
            log.warning("gpuwatch UI: source failing: %s", message)
            return self._outage

    def _succeeded(self) -> None:
        with self._lock:
            if self._outage is not None:
                log.info("gpuwatch UI: source recovered")
            self._outage = None

    def _key_lock(self, key: Hashable) -> threading.Lock:
        with self._lock:
            return self._key_locks.setdefault(key, threading.Lock())

    # -- views ---------------------------------------------------------------------------------

    def load(self, filters: Filters) -> Loaded:
        """The view the filters ask for; on a source failure the last good data and the outage."""
        try:
            window = self.window(filters)
        except SourceError as e:
            return self._fallback(filters, None, self._failed(e))
        try:
            base = self._base(filters.unscoped(), window)
        except SourceError as e:
            return self._fallback(filters, window, self._failed(e))
        return Loaded(view=self._scoped(base, filters), requested=window, outage=self._outage)

    def _base(self, request: Filters, window: Window) -> View:
        view = self._analysed(window)
        with self._lock:
            self._last_good[request] = view
            if self._latest is None or view.computed_at >= self._latest.computed_at:
                self._latest = view
        return view

    def _analysed(self, window: Window) -> View:
        """The whole-fleet view of a window, computed once (one computation per window at a time)."""

        def build() -> View:
            started = time.monotonic()
            analysis = self.service.analysis(window)
            view = View(
                filters=Filters(), analysis=analysis, report=build_report(analysis), computed_at=self._wall()
            )
            log.info("gpuwatch UI: analysed %s in %.1f s", window, time.monotonic() - started)
            self._succeeded()
            return view

        return self._cached((window, Filters()), build)

    def _scoped(self, base: View, filters: Filters) -> View:
        if not filters.scoped:
            return base

        def build() -> View:
            analysis = filter_analysis(base.analysis, filters)
            report = build_report(analysis)
            return View(filters=filters, analysis=analysis, report=report, computed_at=base.computed_at)

        key = (base.window, replace(filters, window="", start=None, end=None), base.computed_at)
        return self._cached(key, build)

    def _cached(self, key: Hashable, build: Callable[[], View]) -> View:
        """The view under `key`, built once: callers asking for the same key meanwhile wait for it."""
        with self._lock:
            hit = self._views.get(key)
        if hit is not None:
            return hit
        with self._key_lock(key):
            with self._lock:
                hit = self._views.get(key)
            if hit is not None:
                return hit
            view = build()
            with self._lock:
                self._remember(key, view)
            return view

    def previous(self, view: View) -> View | None:
        """The view of the window just before `view`'s (same length, step and filters), for trends;
        None while the source fails."""
        w = view.window
        window = Window(start=w.start - (w.end - w.start), end=w.start, step_seconds=w.step_seconds)
        try:
            base = self._analysed(window)
        except SourceError as e:
            self._failed(e)
            return None
        return self._scoped(base, view.filters)

    def _remember(self, key: Hashable, view: View) -> None:
        self._views[key] = view
        self._views.move_to_end(key)
        while len(self._views) > self._max_views:
            old, _ = self._views.popitem(last=False)
            self._key_locks.pop(old, None)

    def _fallback(self, filters: Filters, window: Window | None, outage: Outage) -> Loaded:
        with self._lock:
            base = self._last_good.get(filters.unscoped()) or self._latest
        view = self._scoped(base, filters) if base is not None else None
        return Loaded(view=view, requested=window, outage=outage)

    def latest(self) -> View | None:
        """The most recently computed whole-fleet view (for filter options)."""
        with self._lock:
            return self._latest

    # -- the present: health and quotas ---------------------------------------------------------

    def health(self, window: Window) -> Timed:
        """Per-unit device health at the window's end (service.gpu_health), refetched when old."""
        return self._timed_fetch(
            ("health", window.end, window.step_seconds), lambda: gpu_health(self.service, window)
        )

    def quotas(self) -> Timed:
        """Per-team GPU quotas now (service.team_quotas), refetched when old."""
        return self._timed_fetch(("quotas",), lambda: team_quotas(self.service))

    def _timed_fetch(self, key: Hashable, fetch: Callable[[], pd.DataFrame]) -> Timed:
        with self._key_lock(key):
            with self._lock:
                hit = self._timed.get(key)
            if hit is not None and time.monotonic() - hit.fetched_monotonic < self.refresh_seconds:
                return Timed(frame=hit.frame, fetched_at=hit.fetched_at, outage=self._outage)
            try:
                frame = fetch()
            except SourceError as e:
                outage = self._failed(e)
                with self._lock:
                    last = hit or self._last_of_kind(key)
                if last is None:
                    return Timed(frame=None, fetched_at=None, outage=outage)
                return Timed(frame=last.frame, fetched_at=last.fetched_at, outage=outage)
            self._succeeded()
            entry = _Entry(frame, self._wall(), time.monotonic())
            with self._lock:
                self._timed[key] = entry
                while len(self._timed) > 8:
                    self._timed.pop(next(iter(self._timed)))
            return Timed(frame=frame, fetched_at=entry.fetched_at, outage=None)

    def _last_of_kind(self, key: Hashable) -> _Entry | None:
        kind = key[0] if isinstance(key, tuple) else key
        same = [e for k, e in self._timed.items() if isinstance(k, tuple) and k[0] == kind]
        return max(same, key=lambda e: e.fetched_monotonic) if same else None

    # -- warming --------------------------------------------------------------------------------

    def warm(self, filters: Filters | None = None) -> threading.Thread:
        """Compute the default view, health and quotas in a background thread: the first visit is fast."""
        wanted = filters or Filters()

        def run() -> None:
            try:
                loaded = self.load(wanted)
                if loaded.view is not None:
                    self.health(loaded.view.window)
                self.quotas()
            except Exception:  # a warm-up must never take the server down; the page will say what failed
                log.exception("gpuwatch UI: warming the default view failed")

        thread = threading.Thread(target=run, name="gpuwatch-warm", daemon=True)
        thread.start()
        return thread


def age_text(then: datetime, now: datetime) -> str:
    """ "3 min ago"-style age."""
    seconds = max(0.0, (now - then).total_seconds())
    if seconds < 90:
        return f"{seconds:.0f} s ago"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min ago"
    return f"{seconds / 3600:.1f} h ago"


def window_text(window: Window) -> str:
    """ "2026-11-19 00:00 – 2026-11-20 00:00 UTC (24 h, 1 min step)"."""
    hours = window.duration_seconds / 3600
    span = f"{hours:.0f} h" if hours < 72 else f"{hours / 24:.0f} d"
    step = f"{window.step_seconds // 60} min" if window.step_seconds % 60 == 0 else f"{window.step_seconds} s"
    return f"{window.start:%Y-%m-%d %H:%M} – {window.end:%Y-%m-%d %H:%M} UTC ({span}, {step} step)"


def since_text(start: datetime, end: datetime) -> str:
    """A duration as "2 h 05 m" / "3 d 4 h"."""
    seconds = max(0, int((end - start).total_seconds()))
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes = rest // 60
    if days:
        return f"{days} d {hours} h"
    return f"{hours} h {minutes:02d} m" if hours else f"{minutes} m"
