"""What `gpuwatch report` writes and serve's /api/v1 answers for a window: the report in each of its formats
and FOCUS rows, each on the read path the window calls for (recorded history when costly, else raw)."""

from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from gpuwatch.core.errors import ConfigError, DataError, SourceError
from gpuwatch.core.model import Window, utc
from gpuwatch.core.units import parse_duration_seconds
from gpuwatch.read.chargeback import raw_charges, read_charges
from gpuwatch.read.devicehealth import health_events_now
from gpuwatch.read.history import NoHistoryError, read_history, wants_history
from gpuwatch.read.service import FleetService
from gpuwatch.surfaces.focus import PERIODS, focus_rows, render_focus, tagged
from gpuwatch.surfaces.renderings import SOURCE_HISTORY, SOURCE_RAW, detail_written, render
from gpuwatch.surfaces.report import Report, build_history_report, build_report
from gpuwatch.views.reader import prefers_recorded

SOURCES = ("auto", "history", "raw")
GROUPS = ("team", "namespace", "workload", "pool", "cluster")
FOCUS_PERIODS = tuple(PERIODS)  # a FOCUS row's charge period: "hour" or "day"
DEFAULT_WINDOW_SECONDS = 86_400.0
Warn = Callable[[str], None]  # told each warning of the read (the CLI prints them)


def parse_instant(text: str) -> datetime:
    """An ISO 8601 time ("Z" or an offset; none: UTC)."""
    try:
        return utc(datetime.fromisoformat(text.replace("Z", "+00:00")))
    except ValueError as e:
        raise ConfigError(f"not an ISO 8601 time: {text!r}") from e


def parse_length(text: str) -> float:
    """A positive duration ("7d", "12h", "90m", "3600") in seconds."""
    try:
        seconds = parse_duration_seconds(text)
    except DataError as e:
        raise ConfigError(str(e)) from e
    if seconds <= 0:
        raise ConfigError(f"a duration must be positive, got {text!r}")
    return seconds


def parse_step(text: str) -> int:
    """A sample step: a whole number of seconds, at least one."""
    seconds = parse_length(text)
    if seconds < 1 or seconds != int(seconds):
        raise ConfigError(f"step must be a whole number of seconds >= 1, got {text!r}")
    return int(seconds)


@dataclass(frozen=True, slots=True, kw_only=True)
class WindowRequest:
    """A report's window and read path, as `gpuwatch report` and /api/v1 take them."""

    start: datetime | None = None
    end: datetime | None = None
    since_seconds: float | None = None
    step_seconds: int = 60
    source: str = "auto"

    def window(self, now: datetime) -> Window:
        """[start, end) from start or since and end; `now` (the end by default) is floored to the step, so
        the last sample is a whole one and equals the dashboard's."""
        if self.since_seconds is not None and self.start is not None:
            raise ConfigError("--since and --start both set the window's start: give one of them")
        if self.source not in SOURCES:
            raise ConfigError(f"source must be one of {', '.join(SOURCES)}, got {self.source!r}")
        step = self.step_seconds
        end = self.end or datetime.fromtimestamp(now.timestamp() // step * step, UTC)
        start = self.start or end - timedelta(seconds=self.since_seconds or DEFAULT_WINDOW_SECONDS)
        return Window(start=start, end=end, step_seconds=step).coarsened()


def window_report(
    service: FleetService,
    window: Window,
    *,
    source: str,
    detail_for: tuple[str, str] = ("json", "team"),
    warn: Warn = lambda _: None,
) -> tuple[Report, str]:
    """The window's report and the path it was read on (SOURCE_HISTORY or SOURCE_RAW). `detail_for`:
    the format and grouping it is written in, which say what rows the history path must read."""
    demo = service.simulated
    if wants_history(source, demo=demo, costly=lambda: prefers_recorded(service, window)):
        # The API server is listed for the health events while Prometheus sums the window.
        with ThreadPoolExecutor(max_workers=2) as aside:
            health = aside.submit(_health_events, service, window, warn)
            queues = aside.submit(service.queue_setup)
            try:
                detail = detail_written(detail_for[0], group_by=detail_for[1])
                store = service.sources.recorded()
                history = read_history(service.settings, window, store=store, detail=detail)
                return build_history_report(
                    history, health=health.result(), queues=queues.result()
                ), SOURCE_HISTORY
            except NoHistoryError as e:
                if source == "history":
                    raise
                warn(f"{e}; recomputing from raw DCGM series")
    analysis = service.analysis(window)
    health_events = _health_events(service, window, warn, analysis.nodes)
    return build_report(analysis, health=health_events, queues=service.queue_setup()), SOURCE_RAW


def report_bytes(
    service: FleetService,
    window: Window,
    *,
    source: str,
    fmt: str,
    group_by: str,
    warn: Warn = lambda _: None,
) -> bytes:
    """The report as `gpuwatch report --format fmt --group-by group_by` writes it."""
    report, path = window_report(service, window, source=source, detail_for=(fmt, group_by), warn=warn)
    return render(report, fmt, group_by=group_by, source=path)


def focus_bytes(
    service: FleetService,
    window: Window,
    *,
    source: str,
    period: str,
    parquet: bool = False,
    only: Mapping[str, str] | None = None,
    warn: Warn = lambda _: None,
) -> bytes:
    """The window's FOCUS rows (CSV, or Parquet) per charge period ("hour" or "day"); with `only`, those
    tagged so (keys: team, pool, cluster)."""
    if period not in PERIODS:
        raise ConfigError(f"the FOCUS period must be one of {', '.join(PERIODS)}, got {period!r}")
    seconds = PERIODS[period]
    charges = None
    if wants_history(source, demo=service.simulated, costly=lambda: prefers_recorded(service, window)):
        try:
            charges = read_charges(
                service.settings, window, store=service.sources.recorded(), period_seconds=seconds
            )
        except NoHistoryError as e:
            if source == "history":
                raise
            warn(f"{e}; recomputing from raw DCGM series")
    if charges is None:
        charges = raw_charges(service.analysis(window), period_seconds=seconds)
    rows, warnings = focus_rows(tagged(charges, only or {}), window=window, names=service.settings.focus)
    for warning in warnings:
        warn(f"warning: {warning}")
    return render_focus(rows, "parquet" if parquet else "csv")


def _health_events(service: FleetService, window: Window, warn: Warn, nodes: Any = None) -> Any:
    """The report's health events; a report without them (and a warning) if the sources fail."""
    try:
        return health_events_now(service, window, nodes)
    except SourceError as e:
        warn(f"warning: health events not read: {e}")
        return None
