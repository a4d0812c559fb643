"""The UI's data: FleetService views per (window, filters), computed in background threads and cached; what a
page waits for meanwhile (Waiting), and the last good data kept for outages."""

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Final, Generic, TypeAlias, TypeVar

import pandas as pd

from gpuwatch.core.errors import SourceError
from gpuwatch.core.model import SourceWait, Window
from gpuwatch.read.devicehealth import gpu_health, team_quotas
from gpuwatch.read.service import FleetService
from gpuwatch.surfaces.report import Report
from gpuwatch.ui.filters import CUSTOM, PRESET_GRID_SECONDS, PRESETS, Filters
from gpuwatch.ui.memory import released_after
from gpuwatch.views.base import FleetView, Scope
from gpuwatch.views.reader import open_view, trend_report

log = logging.getLogger(__name__)
T = TypeVar("T")
View: TypeAlias = FleetView  # what a page draws: one window under its filters, from either read path

# A page waits this long for its view before it says what the view waits for (SPEC §7: within 5 s) ...
WAIT_SECONDS: Final = 1.5
# ... and for what it adds to a view (device health, quotas, the trends' window before).
SIDE_WAIT_SECONDS: Final = 1.0
# A view computed from what was read (no read of an outside system under way) is waited for this long
# after its computation started: a page is drawn whole when it can be, and says "computing" when not.
COMPUTE_SECONDS: Final = 4.0
# A page drawn again to show progress (polled) waits this long, and no longer: Dash keeps the loading
# spinner off for 400 ms, so the page does not flicker between what it waits for and a spinner.
POLLED_WAIT_SECONDS: Final = 0.3
# A read of an outside system unanswered this long is a wait worth putting into words.
SLOW_READ_SECONDS: Final = 1.0
# A failed computation a page still shows is tried again after this long, twice as long after each
# failure in a row, at most MAX_RETRY_SECONDS (a page opened or refreshed tries again at once).
RETRY_SECONDS: Final = 5.0
MAX_RETRY_SECONDS: Final = 60.0


def scope_of(filters: Filters) -> Scope:
    """The part of the fleet the filters keep."""
    return Scope(
        pools=filters.pools, products=filters.products, teams=filters.teams, clusters=filters.clusters
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class Outage:
    """A source failing since when (wall clock) and its last error; or, `late`, no failure yet but the
    dashboard's deadline passed with the sources named in `message` still not answering."""

    since: datetime
    message: str
    late: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class Waiting:
    """A computation under way for a page: how long it has run, the reads of outside systems under way
    (FleetService.waiting), and the dashboard's deadline (settings.ui.deadline_seconds)."""

    seconds: float
    sources: tuple[SourceWait, ...] = ()
    deadline_seconds: float

    @property
    def text(self) -> str:
        """ "waiting for Prometheus at http://prometheus:9090 · 6 s"; "computing … · 6 s" when nothing
        outside is being read."""
        if not self.sources:
            return f"computing … · {self.seconds:.0f} s"
        return f"waiting for {' and '.join(w.what for w in self.sources)} · {self.seconds:.0f} s"

    @property
    def late(self) -> bool:
        """Past the dashboard's deadline."""
        return self.seconds >= self.deadline_seconds

    def unanswered(self, source: SourceWait) -> str:
        """ "Prometheus at http://prometheus:9090: no answer within 30s"."""
        return f"{source.what}: no answer within {self.deadline_seconds:g}s"

    @property
    def late_clusters(self) -> tuple[SourceWait, ...]:
        """The sources of clusters of several still unanswered at the deadline (each gets its banner)."""
        return tuple(w for w in self.sources if w.cluster) if self.late else ()


@dataclass(frozen=True, slots=True, kw_only=True)
class Loaded:
    """A view for the page, or the last good one while a source fails (then `outage` is set) or while the
    view asked for is still being computed (then `waiting` is set, and `view` is older or None)."""

    view: View | None
    requested: Window | None
    outage: Outage | None = None
    waiting: Waiting | None = None

    @property
    def stale(self) -> bool:
        return self.outage is not None


@dataclass(frozen=True, slots=True, kw_only=True)
class Timed:
    """A frame fetched at a wall-clock time (health, quotas), and the outage if it is the last good one;
    `waiting` while a fetch is under way (then the frame is the last good one, or None)."""

    frame: pd.DataFrame | None
    fetched_at: datetime | None
    outage: Outage | None = None
    waiting: Waiting | None = None


@dataclass(slots=True, kw_only=True)
class _Failure:
    """A key whose last computation failed: the outage, when (monotonic), how many times in a row, when a
    page last asked for it (one drawn again since the failure still shows it), and whether pages were told
    its retry time has come."""

    outage: Outage
    at: float
    count: int = 1
    asked: float = 0.0
    announced: bool = False

    def retry_at(self, retry_seconds: float) -> float:
        return self.at + min(retry_seconds * 2.0 ** (self.count - 1), MAX_RETRY_SECONDS)


@dataclass(frozen=True, slots=True)
class _Entry:
    frame: pd.DataFrame
    fetched_at: datetime
    fetched_monotonic: float


class _Job(Generic[T]):
    """One computation in a background thread: its value or its error once `done` is set."""

    def __init__(self, started_at: datetime) -> None:
        self.started = time.monotonic()
        self.started_at = started_at
        self.done = threading.Event()
        self.value: T | None = None
        self.error: Exception | None = None


class ViewStore:
    """Views per (window, filters) over one FleetService; thread-safe, one computation per key at a time.

    Views, device health, quotas and the trends' window before are computed in background threads: a page
    waits for them a moment (WAIT_SECONDS), then draws what it has and says what it waits for (Waiting),
    and from the dashboard's deadline on (settings.ui.deadline_seconds) which source did not answer in
    time. `progress()` tells the shell to draw pages again while computations are under way. A failed
    computation is not kept: the next page opened or refreshed starts another; a page drawn again only to
    show progress (`polled`) starts one after a backoff (RETRY_SECONDS, doubling, MAX_RETRY_SECONDS).

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
        deadline_seconds: float | None = None,
        wait_seconds: float = WAIT_SECONDS,
        side_wait_seconds: float = SIDE_WAIT_SECONDS,
        compute_seconds: float = COMPUTE_SECONDS,
        slow_read_seconds: float = SLOW_READ_SECONDS,
        retry_seconds: float = RETRY_SECONDS,
    ) -> None:
        self.service = service
        self.refresh_seconds = refresh_seconds
        self.deadline_seconds = (
            service.settings.ui.deadline_seconds if deadline_seconds is None else deadline_seconds
        )
        self.wait_seconds = wait_seconds
        self.side_wait_seconds = side_wait_seconds
        self.compute_seconds = compute_seconds
        self.slow_read_seconds = slow_read_seconds
        self.retry_seconds = retry_seconds
        self._max_views = max_views
        self._wall = wall_clock or (lambda: datetime.now(UTC))
        self._lock = threading.Lock()
        self._key_locks: dict[Hashable, threading.Lock] = {}
        self._views: OrderedDict[Hashable, View] = OrderedDict()
        self._trends: OrderedDict[Hashable, Report] = OrderedDict()
        self._last_good: dict[Filters, View] = {}  # unscoped request -> its last good unscoped view
        self._latest: View | None = None
        self._timed: dict[Hashable, _Entry] = {}
        self._jobs: dict[Hashable, _Job[object]] = {}  # the computations under way, per key
        self._failures: dict[Hashable, _Failure] = {}  # keys whose last computation failed
        self._logged: set[str] = set()  # the failures logged since the sources last all answered
        self._outage: Outage | None = None
        self._generation = 0  # computations ended so far
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

    def progress(self) -> tuple[int, bool]:
        """How many computations have ended so far (counting, once each, a failed one whose retry time has
        come while a page still shows it), and whether any is under way: pages are drawn again while one
        is, and once after one ends (the page showing a failed one then tries it again)."""
        now = time.monotonic()
        with self._lock:
            for failure in self._failures.values():
                due = failure.asked >= failure.at and now >= failure.retry_at(self.retry_seconds)
                if due and not failure.announced:
                    failure.announced = True
                    self._generation += 1
            return self._generation, bool(self._jobs)

    def _failed(self, error: Exception, key: Hashable) -> Outage:
        """Record a source's failure; it is logged once, in one line, until the sources answer again."""
        with self._lock:
            outage = self._outage_of(error)
            before = self._failures.get(key)
            count = before.count + 1 if before is not None else 1
            self._failures[key] = _Failure(outage=outage, at=time.monotonic(), count=count)
            return outage

    def read_failed(self, error: Exception) -> Outage:
        """A read a page makes while it draws a view failed (the recorded path reads a view's detail as it
        is drawn): the outage, logged as _failed() logs it."""
        with self._lock:
            return self._outage_of(error)

    def _outage_of(self, error: Exception) -> Outage:
        """The outage `error` makes (since the first failure of this outage), logged once; hold the lock."""
        message = str(error) or type(error).__name__
        since = self._outage.since if self._outage else self._wall()
        self._outage = Outage(since=since, message=message)
        if message not in self._logged:
            self._logged.add(message)
            log.warning("gpuwatch UI: source failing: %s", message)
        return self._outage

    def _succeeded(self, key: Hashable, *, whole: bool) -> None:
        """A computation of `key` succeeded; a view's (`whole`: it read every source) ends every failure."""
        with self._lock:
            self._failures.pop(key, None)
            if whole:
                self._failures.clear()
            if self._outage is not None and not self._failures:
                log.info("gpuwatch UI: source recovered")
                self._outage = None
                self._logged.clear()

    def _key_lock(self, key: Hashable) -> threading.Lock:
        with self._lock:
            return self._key_locks.setdefault(key, threading.Lock())

    # -- computations in the background ---------------------------------------------------------

    def _start(
        self, key: Hashable, build: Callable[[], T], keep: Callable[[T], None], *, retry: bool, whole: bool
    ) -> "_Job[T] | None":
        """The computation of `key` under way, else a new one in a background thread; None instead when
        not `retry`ing a key whose last computation failed, until its retry time (_Failure.retry_at).
        `keep` stores its value (under the lock)."""
        with self._lock:
            running = self._jobs.get(key)
            if running is not None:
                return running  # type: ignore[return-value]  # the job of this key builds a T
            failure = self._failures.get(key)
            if failure is not None:
                failure.asked = time.monotonic()
                if not retry and failure.asked < failure.retry_at(self.retry_seconds):
                    return None
            job: _Job[T] = _Job(self._wall())
            self._jobs[key] = job  # type: ignore[assignment]
        threading.Thread(
            target=self._run, args=(key, build, keep, job, whole), name="gpuwatch-compute", daemon=True
        ).start()
        return job

    def _run(
        self, key: Hashable, build: Callable[[], T], keep: Callable[[T], None], job: "_Job[T]", whole: bool
    ) -> None:
        try:
            with released_after():
                value = build()
        except SourceError as e:
            job.error = e
            self._failed(e, key)
        except Exception as e:  # a bug: logged with its traceback, and raised to the page waiting for it
            job.error = e
            log.exception("gpuwatch UI: a computation failed")
        else:
            job.value = value
            with self._lock:
                keep(value)
            self._succeeded(key, whole=whole)
        finally:
            with self._lock:
                self._jobs.pop(key, None)
                self._generation += 1
            job.done.set()

    def _settle(self, job: "_Job[T]", wait: float | None, compute: float | None) -> bool:
        """Wait for `job`: `wait` seconds (None: until it ends), and beyond that while no read of an outside
        system has been under way slow_read_seconds and (given `compute`) the job has run less than
        `compute` seconds. True once it has ended."""
        if wait is None:
            job.done.wait()
            return True
        if job.done.wait(wait):
            return True
        while True:
            if compute is not None and time.monotonic() - job.started >= compute:
                return False
            if any(w.seconds >= self.slow_read_seconds for w in self.service.waiting()):
                return False
            if job.done.wait(0.1):
                return True

    def _result(self, job: "_Job[T]") -> T | None:
        """An ended job's value; None when a source failed (recorded); a bug's exception raised."""
        if job.error is None:
            return job.value
        if isinstance(job.error, SourceError):
            return None
        raise job.error

    def _progress(self, job: "_Job[T]") -> tuple[Waiting, Outage | None]:
        """What a job under way waits for and, past the dashboard's deadline, the outage saying which
        sources did not answer in time (none for the clusters of several: each gets its own banner)."""
        waiting = Waiting(
            seconds=time.monotonic() - job.started,
            sources=tuple(self.service.waiting()),
            deadline_seconds=self.deadline_seconds,
        )
        if not waiting.late:
            return waiting, None
        fleet = [w for w in waiting.sources if not w.cluster]
        if waiting.sources and not fleet:
            return waiting, None
        message = (
            "; ".join(waiting.unanswered(w) for w in fleet)
            if fleet
            else f"the view is not computed within {self.deadline_seconds:g}s"
        )
        with self._lock:
            since = min(self._outage.since, job.started_at) if self._outage else job.started_at
        return waiting, Outage(since=since, message=message, late=True)

    def _put(self, cache: "OrderedDict[Hashable, T]", key: Hashable, value: T) -> None:
        """cache[key] = value, the least recently built dropped past max_views (under the lock)."""
        cache[key] = value
        cache.move_to_end(key)
        while len(cache) > self._max_views:
            old, _ = cache.popitem(last=False)
            self._key_locks.pop(old, None)

    # -- views ---------------------------------------------------------------------------------

    def _patience(
        self, wait: float, compute: float | None, *, polled: bool, block: bool
    ) -> tuple[float | None, float | None]:
        """How long to wait for a computation (_settle's `wait` and `compute`): until it ends (`block`), a
        moment (`polled`: a page drawn again to show progress), or `wait` and `compute`."""
        if block:
            return None, None
        if polled:
            return min(wait, POLLED_WAIT_SECONDS), 0.0
        return wait, compute

    def load(self, filters: Filters, *, polled: bool = False, block: bool = False) -> Loaded:
        """The view the filters ask for. While it is being computed (after WAIT_SECONDS, or at once when it
        waits on an outside read; COMPUTE_SECONDS when not): what it waits for, with the last good view of
        the same filters, or past the deadline or on a failure the last good data and the outage.

        polled: the page is drawn again only to show progress: it waits a moment (POLLED_WAIT_SECONDS),
        and tries a window whose last computation failed again only after its backoff (a page opened or
        refreshed tries it at once). block: wait until the view is computed or has failed (warm-up)."""
        try:
            window = self.window(filters)
        except SourceError as e:
            return self._fallback(filters, None, self._failed(e, ("window",)))
        key = (window, Scope())
        with self._lock:
            base = self._views.get(key)
        if base is None:
            build, keep = (lambda: self._open(window)), (lambda v: self._keep_view(key, v))
            job = self._start(key, build, keep, retry=not polled, whole=True)
            wait, compute = self._patience(
                self.wait_seconds, self.compute_seconds, polled=polled, block=block
            )
            if job is not None and not self._settle(job, wait, compute):
                return self._pending(filters, window, job)
            base = self._result(job) if job is not None else None
            if base is None:
                return self._fallback(filters, window, self._failure(key))
        with self._lock:
            self._last_good[filters.unscoped()] = base
        return Loaded(view=self._scoped(base, filters), requested=window, outage=self._outage)

    def _open(self, window: Window) -> View:
        """The whole-fleet view of a window, on the read path its cost asks for (views.reader)."""
        started = time.monotonic()
        view = open_view(self.service, window, computed_at=self._wall())
        log.info(
            "gpuwatch UI: %s %s in %.1f s", view.read_path.describe(), window, time.monotonic() - started
        )
        return view

    def _keep_view(self, key: Hashable, view: View) -> None:
        self._put(self._views, key, view)
        if self._latest is None or view.computed_at >= self._latest.computed_at:
            self._latest = view

    def _failure(self, key: Hashable) -> Outage | None:
        with self._lock:
            failure = self._failures.get(key)
            return self._outage or (failure.outage if failure is not None else None)

    def _pending(self, filters: Filters, window: Window, job: "_Job[View]") -> Loaded:
        """The page's view still being computed: what it waits for, over the last good view of the same
        filters; past the deadline (or while a source fails) over the last good data of any."""
        waiting, late = self._progress(job)
        with self._lock:
            same = self._last_good.get(filters.unscoped())
            outage = late or self._outage
            base = same or (self._latest if outage is not None or waiting.late else None)
        view = self._scoped(base, filters) if base is not None else None
        return Loaded(view=view, requested=window, outage=outage, waiting=waiting)

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
        """The scoped view under `key`, built once (from a view at hand, in the caller's thread): callers
        asking for the same key meanwhile wait for it."""
        with self._lock:
            hit = self._views.get(key)
        if hit is not None:
            return hit
        with self._key_lock(key):
            with self._lock:
                hit = self._views.get(key)
            if hit is not None:
                return hit
            value = build()
            with self._lock:
                self._put(self._views, key, value)
            return value

    def previous(self, view: View, *, polled: bool = False) -> Report | None:
        """What the view's team trends compare with: views.reader.trend_report of the window just before
        `view`'s (same length, step and scope), computed once in the background; None while it is being
        computed (a moment is waited for it, SIDE_WAIT_SECONDS) and while the source fails."""
        w = view.window
        window = Window(start=w.start - (w.end - w.start), end=w.start, step_seconds=w.step_seconds)
        key = ("trend", window, view.scope)
        with self._lock:
            hit = self._trends.get(key)
        if hit is not None:
            return hit

        def build() -> Report:
            return trend_report(self.service, window, view.scope, computed_at=self._wall())

        def keep(report: Report) -> None:
            self._put(self._trends, key, report)

        job = self._start(key, build, keep, retry=not polled, whole=False)
        wait, compute = self._patience(self.side_wait_seconds, None, polled=polled, block=False)
        if job is None or not self._settle(job, wait, compute):
            return None
        return self._result(job)

    def _fallback(self, filters: Filters, window: Window | None, outage: Outage | None) -> Loaded:
        with self._lock:
            base = self._last_good.get(filters.unscoped()) or self._latest
        view = self._scoped(base, filters) if base is not None else None
        return Loaded(view=view, requested=window, outage=outage)

    def latest(self) -> View | None:
        """The most recently computed whole-fleet view (for filter options)."""
        with self._lock:
            return self._latest

    # -- the present: health and quotas ---------------------------------------------------------

    def health(self, window: Window, *, polled: bool = False, block: bool = False) -> Timed:
        """Per-unit device health at the window's end (service.gpu_health), refetched when old."""
        return self._timed_fetch(
            ("health", window.end, window.step_seconds),
            lambda: gpu_health(self.service, window),
            polled=polled,
            block=block,
        )

    def quotas(self, *, polled: bool = False, block: bool = False) -> Timed:
        """Per-team GPU quotas now (service.team_quotas), refetched when old."""
        return self._timed_fetch(("quotas",), lambda: team_quotas(self.service), polled=polled, block=block)

    def _timed_fetch(
        self, key: Hashable, fetch: Callable[[], pd.DataFrame], *, polled: bool, block: bool
    ) -> Timed:
        """The frame under `key`, fetched again in the background once older than refresh_seconds; while
        that fetch is under way (or has failed) the last good frame of its kind, with what it waits for."""
        with self._lock:
            hit = self._timed.get(key)
        if hit is not None and time.monotonic() - hit.fetched_monotonic < self.refresh_seconds:
            return Timed(frame=hit.frame, fetched_at=hit.fetched_at, outage=self._outage)

        def build() -> _Entry:
            frame = fetch()
            return _Entry(frame, self._wall(), time.monotonic())

        def keep(entry: _Entry) -> None:
            self._timed[key] = entry
            while len(self._timed) > 8:
                self._timed.pop(next(iter(self._timed)))

        job = self._start(key, build, keep, retry=not polled, whole=False)
        waiting: Waiting | None = None
        late: Outage | None = None
        wait, compute = self._patience(self.side_wait_seconds, None, polled=polled, block=block)
        if job is not None:
            if self._settle(job, wait, compute):
                entry = self._result(job)
                if entry is not None:
                    return Timed(frame=entry.frame, fetched_at=entry.fetched_at, outage=None)
            else:
                waiting, late = self._progress(job)
        with self._lock:
            last = hit or self._last_of_kind(key)
            failure = self._failures.get(key)
            outage = late or self._outage or (failure.outage if failure is not None else None)
        if last is None:
            return Timed(frame=None, fetched_at=None, outage=outage, waiting=waiting)
        return Timed(frame=last.frame, fetched_at=last.fetched_at, outage=outage, waiting=waiting)

    def _last_of_kind(self, key: Hashable) -> _Entry | None:
        kind = key[0] if isinstance(key, tuple) else key
        same = [e for k, e in self._timed.items() if isinstance(k, tuple) and k[0] == kind]
        return max(same, key=lambda e: e.fetched_monotonic) if same else None

    # -- warming --------------------------------------------------------------------------------

    def warm(self, filters: Filters | None = None) -> threading.Thread:
        """Compute the default view, health and quotas in a background thread (which also lists the
        cluster the watches then follow): the first visit is fast. `warmed` is set when it ends. A source
        failing is logged once, in one line (as every failure: _failed), never with a traceback."""
        wanted = filters or Filters()

        def run() -> None:
            try:
                loaded = self.load(wanted, block=True)
                if loaded.view is not None:
                    self.health(loaded.view.window, block=True)
                self.quotas(block=True)
            except SourceError as e:
                self._failed(e, ("warm",))
            except Exception:  # a bug: a warm-up must never take the server down; pages say what failed
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
