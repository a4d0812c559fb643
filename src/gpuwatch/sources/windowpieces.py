"""The history path's pieces (SPEC §4.3): a window cut into pieces read from the hourly or daily roll-ups of
gpuwatch's own series or raw, and a query built per piece read over them, one range query per run."""

import math
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from typing import Any, Final

import numpy as np
import numpy.typing as npt
import pandas as pd

from gpuwatch.core.errors import ConfigError
from gpuwatch.core.model import Window
from gpuwatch.sources import historyqueries, ownseries, promql
from gpuwatch.sources.prometheus import PrometheusSource

# A range query over the roll-ups of a family without pods (teams, pools, nodes: no churn) spans a month.
ROLLUP_CHUNK_SECONDS: Final = 31 * 86_400.0
HISTORY_PIECE_SECONDS: Final = 86_400  # one range evaluation reads at most a day of samples per series


def window_pieces(window: Window, *, piece_seconds: int = HISTORY_PIECE_SECONDS) -> pd.DataFrame:
    """The window cut into pieces of `piece_seconds` from its start, the last one shorter: piece, end,
    seconds."""
    if piece_seconds < 1:
        raise ConfigError(f"a history piece must last at least 1s, got {piece_seconds}s")
    full = int(window.duration_seconds // piece_seconds)
    rest = window.duration_seconds - full * piece_seconds
    seconds = [float(piece_seconds)] * full + ([rest] if rest >= 1e-3 else [])
    ends = [window.start + timedelta(seconds=piece_seconds * (k + 1)) for k in range(full)]
    ends += [window.end] if len(seconds) > full else []
    return pd.DataFrame(
        {
            "piece": np.arange(len(seconds), dtype=np.int64),
            "end": pd.to_datetime(ends, utc=True),
            "seconds": np.asarray(seconds, dtype=np.float64),
        }
    )


DEFAULT_HISTORY_RESOLUTION_SECONDS: Final = 60
# A piece to read: piece, end, seconds; grid_seconds, the grid it is read on; rollup, the roll-ups it is
# read from ("hour" or "day", ownseries.ROLLUPS; "" raw); resolution_seconds, the longest a grid sample stands
# for (the exporter's interval, at least the grid); samples, its grid points with an exporter cycle (0: none).
Build = Callable[[float, int, str], str]  # (range seconds, grid seconds, rollup) -> query
RAW: Final = ""


def history_pieces(
    source: PrometheusSource, window: Window, *, piece_seconds: int = HISTORY_PIECE_SECONDS
) -> pd.DataFrame:
    """The window's pieces for long sums: the whole hours between its ends from the hourly roll-ups, in
    pieces of `piece_seconds` (a multiple of an hour), the whole days among them from the daily roll-ups
    (when `piece_seconds` is a multiple of a day), and the part-hours at either end raw, on the exporter's
    grid (all raw where there are no roll-ups). A roll-up piece that counts fewer exporter cycles than the
    raw series hold (the rules missed an evaluation) is read from the level below instead: a day from its
    hours, an hour raw. A piece is never shorter than the exporter's interval: one the exporter had no
    cycle in is no gap in its history."""
    probed = max(
        piece_seconds, historyqueries.INTERVAL_PROBE_SECONDS
    )  # a piece's count says its interval or less
    resolution = _exporter_resolution(source, window_pieces(window, piece_seconds=probed))
    piece_seconds = max(piece_seconds, resolution)
    plain = window_pieces(window, piece_seconds=piece_seconds)
    pieces = _rollup_pieces(source, window, piece_seconds, resolution)
    if pieces is None:
        grid = plain.assign(grid_seconds=resolution, rollup=RAW, resolution_seconds=resolution)
        return grid.assign(samples=_samples(source, grid))
    samples = _samples(source, pieces).copy()
    rolled = (pieces["rollup"] != RAW).to_numpy()
    raw = samples.copy()
    raw[rolled] = _samples(source, pieces[rolled].assign(rollup=RAW))
    # A scrape still in flight at an evaluation is left out of its roll-up: one per hour is let pass, but
    # never half an hour's cycles, so that an hour the rules missed is found whatever the interval.
    hours = pieces["seconds"].to_numpy() / ownseries.ROLLUP_SECONDS
    late = np.minimum(hours, 0.5 * ownseries.ROLLUP_SECONDS / resolution)
    for level, below in (("day", "hour"), ("hour", RAW)):
        missed = (pieces["rollup"] == level).to_numpy() & (samples < raw - late)
        if not missed.any():
            continue
        pieces.loc[missed, "rollup"] = below
        if below == RAW:
            pieces.loc[missed, ["grid_seconds", "resolution_seconds"]] = [resolution, resolution]
        samples[missed] = _samples(source, pieces[missed])
    return pieces.assign(samples=samples)


def _exporter_resolution(source: PrometheusSource, pieces: pd.DataFrame) -> int:
    """The history grid: the exporter's scrape interval rounded down (a grid no coarser holds at most
    one sample per interval); DEFAULT_HISTORY_RESOLUTION_SECONDS where nothing was published."""
    grid = pieces.assign(grid_seconds=1, rollup=RAW)
    cycles = _read_pieces(
        source,
        lambda s, g, r: historyqueries.exporter_interval_query(range_seconds=s, matchers=source.scope),
        grid,
        (),
    )
    seconds = cycles["piece"].map(pieces.set_index("piece")["seconds"]).to_numpy(dtype=np.float64)
    probes = np.minimum(seconds, historyqueries.INTERVAL_PROBE_SECONDS)
    intervals = probes / cycles["value"].to_numpy(dtype=np.float64)
    intervals = intervals[np.isfinite(intervals) & (intervals > 0)]
    return max(1, int(intervals.min())) if len(intervals) else DEFAULT_HISTORY_RESOLUTION_SECONDS


def _samples(source: PrometheusSource, pieces: pd.DataFrame) -> "npt.NDArray[np.float64]":
    """Per piece, the grid points at which some exporter cycle was published (0: none)."""

    def build(seconds: float, grid: int, rollup: str) -> str:
        return historyqueries.exporter_samples_query(
            range_seconds=seconds, resolution_seconds=grid, rollup=rollup, matchers=source.scope
        )

    counts = _read_pieces(source, build, pieces, ())
    per_piece = counts.groupby("piece")["value"].sum()
    return pieces["piece"].map(per_piece).fillna(0.0).to_numpy(dtype=np.float64)


def _rollup_pieces(
    source: PrometheusSource, window: Window, piece_seconds: int, resolution: int
) -> pd.DataFrame | None:
    """Pieces with the roll-ups' whole hours in the middle, their whole days from the daily roll-ups
    (samples not yet counted); None when there are no roll-ups to read (none evaluated in the window's
    last two hours, or no whole hour in it)."""
    hour = timedelta(seconds=ownseries.ROLLUP_SECONDS)
    if piece_seconds % ownseries.ROLLUP_SECONDS:
        return None
    last = _last_evaluation(source, window, "hour")
    if last is None:
        return None
    whole = int((last - window.start) / hour)
    if whole < 1:
        return None
    first = last - whole * hour
    days = _day_span(source, window, first, last) if piece_seconds % ownseries.DAY_SECONDS == 0 else None
    spans: list[tuple[datetime, float, str]] = []
    if (first - window.start).total_seconds() > ownseries.MIN_RANGE_SECONDS:
        spans.append((first, (first - window.start).total_seconds(), RAW))
    if days is None:
        spans += _spans(first, last, piece_seconds, "hour")
    else:
        spans += _spans(first, days[0], piece_seconds, "hour")
        spans += _spans(days[0], days[1], ownseries.DAY_SECONDS, "day")
        spans += _spans(days[1], last, piece_seconds, "hour")
    if (window.end - last).total_seconds() > ownseries.MIN_RANGE_SECONDS:
        spans.append((window.end, (window.end - last).total_seconds(), RAW))
    ends, seconds, rollup = zip(*spans, strict=True)
    rolled = np.asarray(rollup) != RAW
    return pd.DataFrame(
        {
            "piece": np.arange(len(spans), dtype=np.int64),
            "end": pd.to_datetime(list(ends), utc=True),
            "seconds": np.asarray(seconds, dtype=np.float64),
            "grid_seconds": np.where(rolled, ownseries.ROLLUP_GRID_SECONDS, resolution),
            "rollup": np.asarray(rollup, dtype=object),
            "resolution_seconds": np.where(
                rolled, max(ownseries.ROLLUP_GRID_SECONDS, resolution), resolution
            ),
        }
    )


def _last_evaluation(source: PrometheusSource, window: Window, level: str) -> datetime | None:
    """When the level's roll-ups were last evaluated by the window's end (None: not lately)."""
    marker = source.query(ownseries.rollup_marker_query(level, source.scope), at=window.end)
    if not len(marker):
        return None
    return datetime.fromtimestamp(round(float(marker["value"].max()), 3), UTC)


def _day_span(
    source: PrometheusSource, window: Window, first: datetime, last: datetime
) -> tuple[datetime, datetime] | None:
    """day_span() of the daily roll-ups' latest evaluation by the window's end (None: none lately)."""
    evaluated = _last_evaluation(source, window, "day")
    return None if evaluated is None else day_span(first, last, evaluated)


def day_span(first: datetime, last: datetime, evaluated: datetime) -> tuple[datetime, datetime] | None:
    """The run of whole days the daily roll-ups hold within the roll-up hours (first, last], the hourly
    roll-ups evaluated at `last` and every hour before it, the daily ones at `evaluated` and every day
    before it: a day evaluated at D sums the hours evaluated in (D − lag − 1 d, D − lag], so its hours end
    at the last hourly evaluation at or before D − lag. None when not one whole day fits."""
    hour = timedelta(seconds=ownseries.ROLLUP_SECONDS)
    day = timedelta(seconds=ownseries.DAY_SECONDS)
    covered = evaluated - timedelta(seconds=ownseries.DAY_ROLLUP_LAG_SECONDS)
    end = last + math.floor((covered - last) / hour) * hour
    if end > last:  # the days evaluated after the hours stopped hold none of them
        end -= math.ceil((end - last) / day) * day
    count = int((end - first) / day)
    return (end - count * day, end) if count >= 1 else None


def _spans(a: datetime, b: datetime, seconds: int, rollup: str) -> list[tuple[datetime, float, str]]:
    """(a, b] cut into pieces of `seconds` from a (the last shorter): (end, length, rollup) each."""
    spans = []
    t = a
    while t < b:
        end = min(b, t + timedelta(seconds=seconds))
        spans.append((end, (end - t).total_seconds(), rollup))
        t = end
    return spans


def _family(
    source: PrometheusSource,
    pieces: pd.DataFrame,
    query: Callable[..., str],
    labels: Sequence[str],
    matchers: Sequence[promql.Matcher] = (),
    **kwargs: Any,
) -> pd.DataFrame:
    """A history builder of historyqueries (range_seconds, resolution_seconds, rollup, matchers) read over the
    pieces, under the source's scope and `matchers`."""
    matchers = [*source.scope, *matchers]

    def build(seconds: float, grid: int, rollup: str) -> str:
        return str(
            query(range_seconds=seconds, resolution_seconds=grid, rollup=rollup, matchers=matchers, **kwargs)
        )

    return _read_pieces(source, build, pieces, labels)


def _read_pieces(
    source: PrometheusSource, build: Build, pieces: pd.DataFrame, labels: Sequence[str]
) -> pd.DataFrame:
    """build(range, grid, rollup) evaluated at the end of every piece: each run of back-to-back pieces of
    one length, grid and form in one range query (step = the piece), a piece alone as an instant query.
    A range query of one series (no labels: the exporter's cycles) or of a family without per-pod labels
    from the roll-ups may span a month (a few series, no churn); any other spans a day at most
    (MAX_CHUNK_SECONDS). Frame: piece, labels, value."""
    runs: list[list[int]] = []
    ids = pieces["piece"].to_numpy()
    ends = pd.DatetimeIndex(pieces["end"])
    forms = list(zip(pieces["seconds"], pieces["grid_seconds"], pieces["rollup"], strict=True))

    def read(run: list[int]) -> pd.DataFrame:
        seconds, grid, rollup = float(forms[run[0]][0]), int(forms[run[0]][1]), str(forms[run[0]][2])
        query = build(seconds, grid, rollup)
        at = _read_time(ends[run[0]], rollup)
        if len(run) == 1:
            return source.query(query, at=at.to_pydatetime()).assign(piece=ids[run[0]])
        span = ROLLUP_CHUNK_SECONDS if not labels or (rollup and "pod" not in labels) else None
        frame = source.range_points(
            query, first=at.to_pydatetime(), n=len(run), step_seconds=round(seconds), span_seconds=span
        ).frame()
        offset = (frame["timestamp"] - at).dt.total_seconds() / seconds
        index = np.clip(np.round(offset), 0, len(run) - 1).astype("int64")
        return frame.assign(piece=ids[run][index])

    for k in range(len(pieces)):
        if runs:
            a = runs[-1][-1]
            whole = float(forms[a][0]).is_integer()
            next_to = ends[k] - ends[a] == pd.Timedelta(seconds=float(forms[k][0]))
            if forms[a] == forms[k] and whole and next_to:
                runs[-1].append(k)
                continue
        runs.append([k])
    if len(runs) > 1:  # the runs (a month's hours, days and raw ends) side by side
        with ThreadPoolExecutor(max_workers=min(len(runs), source.max_concurrent_queries)) as pool:
            parts = list(pool.map(read, runs))
    else:
        parts = [read(run) for run in runs]
    return _labelled(pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(), labels)


def _read_time(end: pd.Timestamp, rollup: str) -> pd.Timestamp:
    """When a piece ending at `end` is read: roll-ups half their period after it, so no sample sits on a
    range's edge, which Prometheus 2 takes in and VictoriaMetrics leaves out (an hour's sample sits at its
    end; a day's, evaluated at a phase of its own, less than half a day after the end of its hours)."""
    return end + pd.Timedelta(seconds=ownseries.ROLLUP_LEVEL_SECONDS[rollup] / 2 if rollup else 0)


def _labelled(frame: pd.DataFrame, labels: Sequence[str]) -> pd.DataFrame:
    """piece, the label columns ("" where a series lacks one), value; rows without a finite value dropped."""

    def column(name: str, default: object, dtype: Any) -> "pd.Series[Any]":
        values = frame[name] if name in frame else pd.Series(default, index=frame.index)
        converted: pd.Series[Any] = values.astype(dtype)
        return converted

    columns = {"piece": column("piece", 0, "int64")}
    columns.update({label: column(label, "", "str") for label in labels})
    columns["value"] = column("value", np.nan, "float64")
    out = pd.DataFrame(columns, index=frame.index)
    kept: pd.DataFrame = out[np.isfinite(out["value"].to_numpy())].reset_index(drop=True)
    return kept
