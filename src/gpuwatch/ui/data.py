"""The UI's data: FleetService views per (window, filters), cached; the last good one kept for outages."""

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TypeAlias, TypeVar

import pandas as pd

from gpuwatch.errors import SourceError
from gpuwatch.health import gpu_health, team_quotas
from gpuwatch.model import Window
from gpuwatch.report import Report
from gpuwatch.service import FleetService
from gpuwatch.ui.filters import CUSTOM, PRESET_GRID_SECONDS, PRESETS, Filters
from gpuwatch.views.base import FleetView, Scope
from gpuwatch.views.reader import open_view, trend_report

log = logging.getLogger(__name__)
T = TypeVar("T")
View: TypeAlias = FleetView  # what a page draws: one window under its filters, from either read path


def scope_of(filters: Filters) -> Scope:
    """The part of the fleet the filters keep."""
    return Scope(
        pools=filters.pools, products=filters.products, teams=filters.teams, clusters=filters.clusters
    )


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
        self._trends: OrderedDict[Hashable, Report] = OrderedDict()
        self._last_good: dict[Filters, View] = {}  # unscoped request -> its last good unscoped view
        self._latest: View | None = None
        self._timed: dict[Hashable, _Entry] = {}
        self._outage: Outage | None = None
        self.warmed = threading.Event()  # set once warm() has run (readiness)

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
        """The whole-fleet view of a window, computed once (one computation per window at a time), on
        the read path its cost asks for (views.reader)."""

        def build() -> View:
            started = time.monotonic()
            view = open_view(self.service, window, computed_at=self._wall())
            log.info(
                "gpuwatch UI: %s %s in %.1f s", view.read_path.describe(), window, time.monotonic() - started
            )
            self._succeeded()
            return view

        return self._cached((window, Scope()), build)

    def _scoped(self, base: View, filters: Filters | Scope) -> View:
        scope = filters if isinstance(filters, Scope) else scope_of(filters)
        if not scope.scoped:
            return base
        return self._cached((base.window, scope, base.computed_at), lambda: base.scoped(scope))

    def narrowed(self, view: View, scope: Scope) -> View:
        """`view` narrowed to `scope` (its own pools and products kept unless `scope` names some),
        computed once."""
        whole = Scope(
            pools=scope.pools or view.scope.pools,
            products=scope.products or view.scope.products,
            teams=scope.teams,
            clusters=scope.clusters or view.scope.clusters,
        )
        return self._scoped(view, whole)

    def _cached(self, key: Hashable, build: Callable[[], View]) -> View:
        """The view under `key`, built once: callers asking for the same key meanwhile wait for it."""
        return self._once(self._views, key, build)

    def previous(self, view: View) -> Report | None:
        """What the view's team trends compare with: views.reader.trend_report of the window just before
        `view`'s (same length, step and scope), computed once; None while the source fails."""
        w = view.window
        window = Window(start=w.start - (w.end - w.start), end=w.start, step_seconds=w.step_seconds)
        try:
            return self._once(
                self._trends,
                ("trend", window, view.scope),
                lambda: trend_report(self.service, window, view.scope, computed_at=self._wall()),
            )
        except SourceError as e:
            self._failed(e)
            return None

    def _once(self, cache: "OrderedDict[Hashable, T]", key: Hashable, build: Callable[[], T]) -> T:
        """cache[key], built once (the least recently built dropped past max_views): callers asking for
        the same key meanwhile wait for it."""
        with self._lock:
            hit = cache.get(key)
        if hit is not None:
            return hit
        with self._key_lock(key):
            with self._lock:
                hit = cache.get(key)
            if hit is not None:
                return hit
            value = build()
            with self._lock:
                cache[key] = value
                cache.move_to_end(key)
                while len(cache) > self._max_views:
                    old, _ = cache.popitem(last=False)
                    self._key_locks.pop(old, None)
            return value

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
        """Compute the default view, health and quotas in a background thread (which also lists the
        cluster the watches then follow): the first visit is fast. `warmed` is set when it ends."""
        wanted = filters or Filters()

        def run() -> None:
            try:
                loaded = self.load(wanted)
                if loaded.view is not None:
                    self.health(loaded.view.window)
                self.quotas()
            except Exception:  # a warm-up must never take the server down; the page will say what failed
                log.exception("gpuwatch UI: warming the default view failed")
            finally:
                self.warmed.set()

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
