"""The simulated fleet's history as Prometheus would hold it: DCGM series, gpuwatch_* series and the hourly
and daily roll-ups the recording rules make of them, in one OpenMetrics file or straight into a TSDB
directory. With a cluster name, every series carries cluster="<name>", as in a store shared by several
clusters (the DCGM ones as each cluster's Prometheus adds its external label, the gpuwatch_* ones as
`gpuwatch export` stamps them, the roll-ups as the recording rules keep it).

A month of a large fleet is far too big for one OpenMetrics file, and parsing its text was most of
promtool's time. So into a TSDB directory the history goes one 2 h block at a time, with `workers`
processes analysing and writing side by side: the gpuwatch_* series written as blocks directly (tsdb),
the DCGM series as one OpenMetrics file per block handed to `promtool tsdb create-blocks-from
openmetrics` (promtool before 2.44, Debian 12 ships 2.42, re-reads its whole input once per 2 h block
it writes). With both, each 2 h range has two blocks, which Prometheus merges. The directory is then a
Prometheus `--storage.tsdb.path` (Prometheus compacts the 2 h blocks itself).
"""

import math
import multiprocessing
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path
from typing import TextIO

import numpy as np
import pandas as pd

from gpuwatch.core.config import Settings, is_cluster_name
from gpuwatch.core.errors import ConfigError
from gpuwatch.core.model import TextSink, Window
from gpuwatch.read.series import Family, series_codes, write_openmetrics
from gpuwatch.sim.exposition import write_backfill
from gpuwatch.sim.fleet import SimulatedFleet
from gpuwatch.sim.systems import SimulationParams, history_families, history_service
from gpuwatch.sim.tsdb import sample_table, write_block
from gpuwatch.sources import ownseries

BLOCK = timedelta(hours=2)
BLOCKS_PER_TASK = 12  # one day of blocks analysed at once: the memory of a day of the fleet per worker
# The largest worlds write_simulated_backfill writes within 2 GB of memory, in GPU-samples (measured in
# docs/performance.md). It holds the fleet (~35 bytes a GPU-sample of the window) and, with DCGM series,
# their grid of the whole window (~900 bytes a GPU-sample); it makes a day's gpuwatch_* series at once
# (~2,000 bytes a GPU-sample of the day). Larger worlds go to write_tsdb.
OUTPUT_GPU_SAMPLES = 10_000_000
OUTPUT_DCGM_GPU_SAMPLES = 1_500_000
OUTPUT_DAY_GPU_SAMPLES = 500_000


@dataclass(frozen=True, slots=True)
class TsdbBackfill:
    """What write_tsdb wrote."""

    samples: int
    blocks: int


@dataclass(frozen=True, slots=True)
class _Job:
    layout: str
    metrics: Sequence[str] | None
    dcgm: bool
    gpuwatch_series: bool
    promtool: str | None
    tsdb: Path
    scratch: Path
    external_labels: tuple[tuple[str, str], ...]


# Set by write_tsdb before it forks its workers, which inherit them (a fleet is never pickled).
_FLEET: SimulatedFleet | None = None
_JOB: _Job | None = None


def write_simulated_backfill(
    path: str,
    params: SimulationParams,
    *,
    layout: str,
    metrics: Sequence[str] | None = None,
    dcgm: bool = True,
    gpuwatch_series: bool = True,
    progress: Callable[[int, int], None] | None = None,
    cluster: str | None = None,
) -> int:
    """Write an OpenMetrics backfill of the simulated fleet; returns the number of samples written.

    The history is made as write_tsdb makes it, a day of blocks at a time, and the file holds exactly the
    samples write_tsdb writes. Each family's text waits in a scratch file of its own beside `path` until the
    last day is made (OpenMetrics wants each family in one piece), so writing takes twice the file's size
    on disk for a moment. A world it cannot write within 2 GB of memory (check_output_fits) is refused
    before the fleet is built.

    With gpuwatch_series, the gpuwatch_* history is appended as if `gpuwatch export` had run all along
    (what long-window reports, recording rules and dashboards read). With a cluster name, every series
    carries cluster="<name>" (cluster_labels). `progress(done, total)` counts 2 h blocks.
    """
    external = cluster_labels(cluster)  # a bad name fails before the fleet is built and the file written
    check_output_fits(params, dcgm=dcgm, gpuwatch_series=gpuwatch_series)
    fleet = params.build()
    # No promtool, TSDB or scratch directory of its own: every sample goes to the spool as text.
    job = _Job(layout, metrics, dcgm, gpuwatch_series, None, Path(), Path(), external)
    ranges = block_ranges(fleet.window)
    target = Path(path)
    samples = done = 0
    with tempfile.TemporaryDirectory(prefix=".gpuwatch-backfill-", dir=target.parent) as scratch:
        spool = FamilySpool(Path(scratch))
        try:
            for task in _day_tasks(ranges, fleet.window.step_seconds / 2):
                samples += _spool_task(fleet, job, task, spool, last=task[-1] == ranges[-1])
                done += len(task)
                if progress is not None:
                    progress(done, len(ranges))
            with target.open("w", encoding="utf-8") as out:
                spool.join(out)
                out.write("# EOF\n")
        finally:
            spool.close()
    return samples


def check_output_fits(params: SimulationParams, *, dcgm: bool, gpuwatch_series: bool) -> None:
    """A ConfigError, before anything is built, for a world write_simulated_backfill cannot write within
    2 GB (OUTPUT_GPU_SAMPLES and the others)."""
    gpus, samples = params.fleet_gpus(), params.window_samples()
    a_day = min(samples, math.ceil(86_400 / params.step_seconds))
    if dcgm and gpus * samples > OUTPUT_DCGM_GPU_SAMPLES:
        what, per_gpu, limit = "holds the window's DCGM series", samples, OUTPUT_DCGM_GPU_SAMPLES
    elif gpus * samples > OUTPUT_GPU_SAMPLES:
        what, per_gpu, limit = "holds the window's fleet", samples, OUTPUT_GPU_SAMPLES
    elif gpuwatch_series and gpus * a_day > OUTPUT_DAY_GPU_SAMPLES:
        what, per_gpu, limit = "makes each day's gpuwatch_* series", a_day, OUTPUT_DAY_GPU_SAMPLES
    else:
        return
    raise ConfigError(
        f"--output {what} in memory: {gpus:,} GPUs x {per_gpu:,} samples = {gpus * per_gpu:,} GPU-samples, "
        f"more than the {limit:,} that fit in 2 GB; write this world with --tsdb DIR"
    )


class FamilySpool:
    """OpenMetrics text written family after family, chunk after chunk, kept in a scratch file per family
    and joined once the last chunk is in: a family's samples end up together (OpenMetrics wants each
    family once) while only one chunk of a long history is ever in memory. Text goes to the family of
    the last `# HELP`/`# TYPE` lines written (write_openmetrics and write_backfill write those before
    their samples); those lines are kept once per family, in the order families first came."""

    def __init__(self, scratch: Path) -> None:
        self._scratch = scratch
        self._files: dict[str, TextIO] = {}
        self._headers: dict[str, list[str]] = {}
        self._current: TextIO | None = None

    def write(self, text: str) -> int:
        if text.startswith("# EOF"):
            return len(text)
        if text.startswith("#"):
            for line in text.splitlines(keepends=True):
                name = line.split(" ", 3)[2]
                if name not in self._files:
                    self._files[name] = (self._scratch / f"{len(self._files)}.om").open(
                        "w+", encoding="utf-8"
                    )
                    self._headers[name] = []
                if len(self._headers[name]) < 2:
                    self._headers[name].append(line)
                self._current = self._files[name]
            return len(text)
        if self._current is None:
            raise ValueError("samples written before their family's # HELP line")
        return self._current.write(text)

    def join(self, out: TextIO) -> None:
        """Every family's header and samples into `out`, in the order the families first came."""
        for name, spooled in self._files.items():
            out.write("".join(self._headers[name]))
            spooled.seek(0)
            shutil.copyfileobj(spooled, out, 1 << 20)

    def close(self) -> None:
        for spooled in self._files.values():
            spooled.close()


def write_fleet_backfill(
    fleet: SimulatedFleet,
    out: TextIO,
    *,
    layout: str = "servicemonitor",
    metrics: Sequence[str] | None = None,
    dcgm: bool = True,
    gpuwatch_series: bool = True,
    progress: Callable[[int, int], None] | None = None,
    settings: Settings | None = None,
    cluster: str | None = None,
) -> int:
    """DCGM series as Prometheus stores them and, optionally, gpuwatch's own series with their hourly and
    daily roll-ups, one OpenMetrics file; returns the number of samples written.

    gpuwatch's series come from one analysis of the whole window (fragmentation under its request mix)
    with `settings` (the demo's when None); a fleet too large for that is written block by block with
    backfill.write_tsdb. With a cluster name, every series carries cluster="<name>" (cluster_labels).
    """
    external = cluster_labels(cluster)
    n = 0
    if dcgm:
        n += write_backfill(
            fleet,
            out,
            layout=layout,
            metrics=metrics,
            progress=progress,
            end_of_file=False,
            external_labels=external,
        )
    if gpuwatch_series:
        # Samples sit mid-interval like the DCGM ones, so avg_over_time(x[step]) at t_i + step reads sample i.
        families = stamped(history_families(history_service(fleet, settings), fleet.window), external)
        half = fleet.window.step_seconds / 2
        n += write_openmetrics(families, out, offset_seconds=half, end_of_file=False)
        hourly = rollup_families(families, offset_seconds=half, external_labels=external)
        n += write_openmetrics(
            [*hourly, *day_rollup_families(hourly, external_labels=external)], out, end_of_file=False
        )
    out.write("# EOF\n")
    return n


def cluster_labels(cluster: str | None) -> tuple[tuple[str, str], ...]:
    """The external labels of a cluster's series: ((ownseries.CLUSTER_LABEL, cluster),), none for None. The
    name is one a `clusters:` list can hold, so that gpuwatch can read the series back by it."""
    if cluster is None:
        return ()
    if not is_cluster_name(cluster):
        raise ConfigError(f"a cluster name is a-z, 0-9, '-', '.', '_' (as in clusters:), got {cluster!r}")
    return ((ownseries.CLUSTER_LABEL, cluster),)


def stamped(families: Sequence[Family], external_labels: Sequence[tuple[str, str]]) -> list[Family]:
    """The families with the external labels after their own (columns of one value each), as `gpuwatch
    export` stamps its cluster label on every series; the families themselves when there are none."""
    if not external_labels:
        return list(families)
    names = tuple(name for name, _ in external_labels)
    return [
        Family(f.name, f.help, (*f.labels, *names), f.samples.assign(**dict(external_labels)))
        for f in families
    ]


def rollup_families(
    families: Sequence[Family],
    *,
    offset_seconds: float,
    after: datetime | None = None,
    until: datetime | None = None,
    external_labels: Sequence[tuple[str, str]] = (),
) -> list[Family]:
    """The hourly roll-ups (ownseries.ROLLUPS) Prometheus's recording rules make of these samples (written at
    their timestamp + offset), evaluated on whole UTC hours: at hour h, per series, its grid function over
    the ROLLUP_GRID_SECONDS grid points in (h − 1 h, h], one copy per grid point (the mean of its samples
    there, or the last); only those above 0 of ownseries.NONZERO_ROLLUPS. A series is its family's labels
    and, where the samples have them, ownseries.RULE_KEEP_LABELS (cluster), as the rules keep. Only grid
    points in (after, until] count, so blocks written apart give each hour once; the evaluation marker is
    written at every hour those grid points reach, with the external labels of the Prometheus evaluating
    the rules."""
    grid_ms = ownseries.ROLLUP_GRID_SECONDS * 1000
    hour_ms = ownseries.ROLLUP_SECONDS * 1000
    low = -np.inf if after is None else after.timestamp() * 1000
    high = np.inf if until is None else until.timestamp() * 1000
    by_name = {f.name: f for f in families}
    out: list[Family] = []
    hours: set[int] = set()
    held: pd.DataFrame | None = None  # the pods' allocation roll-up, with the hour before `after`'s
    for metric, function in ownseries.ROLLUPS:
        family = by_name.get(metric)
        if family is None or family.samples.empty:
            continue
        samples = family.samples
        kept = (*ownseries.FAMILY_LABELS[metric], *ownseries.RULE_KEEP_LABELS)
        labels = [label for label in kept if label in samples.columns]
        ms = samples["timestamp"].dt.as_unit("ms").astype("int64").to_numpy() + round(offset_seconds * 1000)
        grid = -(-ms // grid_ms) * grid_ms
        # The namespaces' new pods at the first hour compare with the hour before: its allocation rolled too.
        held_rollup = (metric, function) == (ownseries.POD_SUM_METRICS[0], "sum_over_time")
        keep = (grid > low - (hour_ms if held_rollup else 0)) & (grid <= high)
        if not keep.any():
            continue
        # One integer per series: groupby on ints, not labels.
        codes, first_rows = series_codes(samples, labels)
        values = samples["value"].to_numpy(np.float64)
        frame = pd.DataFrame(
            {"series": codes[keep], "grid": grid[keep], "ms": ms[keep], "value": values[keep]}
        )
        per_point = frame.sort_values("ms", kind="stable").groupby(["series", "grid"], sort=False)
        last = function == "last_over_time"
        points = per_point.tail(1) if last else per_point.agg(value=("value", "mean")).reset_index()
        points = points.assign(hour=-(-points["grid"].to_numpy() // hour_ms) * hour_ms)
        per_hour = points.sort_values("grid", kind="stable").groupby(["series", "hour"], sort=False)["value"]
        reduced: dict[str, Callable[[], pd.Series]] = {
            "sum_over_time": per_hour.sum,
            "count_over_time": per_hour.count,
            "last_over_time": per_hour.last,
            "max_over_time": per_hour.max,
            "p95_over_time": partial(per_hour.quantile, 0.95),  # interpolated, as quantile_over_time
        }
        rolled = reduced[function]().reset_index()
        if (metric, function) in ownseries.NONZERO_ROLLUPS:
            rolled = rolled[rolled["value"] > 0].reset_index(drop=True)
        names = samples[labels].iloc[first_rows].reset_index(drop=True)
        labelled = names.iloc[rolled.pop("series").to_numpy()].reset_index(drop=True)
        rolled = pd.concat([labelled, rolled], axis=1)
        if held_rollup:
            held = rolled
            rolled = rolled[rolled["hour"] > low].reset_index(drop=True)
        hours.update(rolled["hour"].unique().tolist())
        rolled["timestamp"] = pd.to_datetime(rolled.pop("hour"), unit="ms", utc=True)
        name = ownseries.rollup_name(metric, function)
        out.append(Family(name, f"Hourly {function} of {metric}.", tuple(labels), rolled))
    out += _namespace_rollups(out, held, after_ms=low)
    if hours:
        marks = np.arange(min(hours), max(hours) + hour_ms, hour_ms)
        marker = pd.DataFrame(
            {"timestamp": pd.to_datetime(marks, unit="ms", utc=True), "value": marks / 1000}
        )
        out += stamped(
            [
                Family(ownseries.ROLLUP_MARKER, "When the hourly roll-ups were evaluated.", (), marker),
                Family(
                    ownseries.NAMESPACE_ROLLUP_MARKER,
                    "When the namespace roll-ups were evaluated.",
                    (),
                    marker,
                ),
            ],
            external_labels,
        )
    return out


def _namespace_rollups(
    hourly: Sequence[Family], held: pd.DataFrame | None, *, after_ms: float
) -> list[Family]:
    """The namespace roll-ups the hourly rules make of the pods' (ownseries.namespace_rollup_rules): each pod
    sum per namespace, team and pool, and per namespace and team the pods with an allocation roll-up in
    the hour and those without one the hour before. `held`: the allocation roll-up with a `hour` column
    (ms), holding the hour at `after_ms` as well, which is not written."""
    out: list[Family] = []
    by_name = {f.name: f for f in hourly}
    for pod, namespace in ownseries.NAMESPACE_ROLLUPS.items():
        family = by_name.get(ownseries.rollup_name(pod, "sum_over_time"))
        if family is None:
            continue
        labels = [k for k in (*ownseries.NAMESPACE_LABELS, *ownseries.RULE_KEEP_LABELS) if k in family.labels]
        summed = family.samples.groupby([*labels, "timestamp"], as_index=False, sort=True).agg(
            value=("value", "sum")
        )
        name = ownseries.rollup_name(namespace, "sum_over_time")
        out.append(Family(name, f"Hourly sum of {pod} per namespace.", tuple(labels), summed))
    if held is None or held.empty:
        return out
    cluster = [k for k in ownseries.RULE_KEEP_LABELS if k in held.columns]
    pods = held[["namespace", "pod", "team", *cluster, "hour"]].drop_duplicates()
    before = pods[["namespace", "pod", *cluster, "hour"]].drop_duplicates()
    before = before.assign(hour=before["hour"] + ownseries.ROLLUP_SECONDS * 1000, held_before=True)
    pods = pods.merge(before, on=["namespace", "pod", *cluster, "hour"], how="left")
    pods = pods[pods["hour"] > after_ms]
    keys: list[str] = ["namespace", "team", *cluster]
    for counted_name, rows in (
        (ownseries.NAMESPACE_PODS, pods),
        (ownseries.NAMESPACE_NEW_PODS, pods[pods["held_before"].isna()]),
    ):
        counted = (
            rows.groupby([*keys, "hour"], as_index=False, sort=True).size().rename(columns={"size": "value"})
        )
        counted = counted.astype({"value": "float64"})
        counted["timestamp"] = pd.to_datetime(counted.pop("hour"), unit="ms", utc=True)
        what = "with an allocation roll-up" if counted_name == ownseries.NAMESPACE_PODS else "new to the hour"
        out.append(
            Family(
                ownseries.rollup_name(counted_name, "count"),
                f"Hourly count of pods {what}.",
                tuple(keys),
                counted,
            )
        )
    return out


# The daily roll-ups' evaluation, as Prometheus might phase the group: 23:30 UTC, summing the hours
# evaluated 00:00-23:00 (ownseries.day_rollup_rules).
DAY_EVALUATION_SECONDS = 23 * 3600 + 1800


def day_rollup_families(
    hourly: Sequence[Family], *, external_labels: Sequence[tuple[str, str]] = ()
) -> list[Family]:
    """The daily roll-ups the gpuwatch.rollup.daily rules make of these hourly ones, evaluated every day
    at DAY_EVALUATION_SECONDS after midnight UTC: per series (the hourly one's labels), the sum (or the
    last) of its hourly samples evaluated in (D − lag − 1 d, D − lag] (the highest, for
    ownseries.POD_NEED_ROLLUPS). Only days evaluated by the last hour given (+ lag) are written, so blocks
    written apart give each day once when each holds the hours of whole UTC days. The evaluation marker
    has the external labels of the Prometheus evaluating the rules."""
    day_ms, lag_ms = ownseries.DAY_SECONDS * 1000, ownseries.DAY_ROLLUP_LAG_SECONDS * 1000
    phase_ms = DAY_EVALUATION_SECONDS * 1000
    out: list[Family] = []
    days: set[int] = set()
    written = [f.samples["timestamp"].max() for f in hourly if not f.samples.empty]
    if not written:
        return out
    latest_ms = int(max(written).value // 1_000_000)
    for family in hourly:
        parts = family.name.split(":")
        metric, function = parts[1], parts[2]
        markers = (ownseries.ROLLUP_MARKER, ownseries.NAMESPACE_ROLLUP_MARKER)
        if (
            family.name in markers
            or family.samples.empty
            or (metric, function) in ownseries.HOUR_ONLY_ROLLUPS
        ):
            continue
        samples = family.samples.sort_values("timestamp", kind="stable")
        ms = samples["timestamp"].dt.as_unit("ms").astype("int64").to_numpy()
        evaluated = -(-(ms + lag_ms - phase_ms) // day_ms) * day_ms + phase_ms
        codes, first_rows = series_codes(samples, family.labels)
        frame = pd.DataFrame({"series": codes, "day": evaluated, "value": samples["value"].to_numpy()})
        per_day = frame.groupby(["series", "day"], sort=False)["value"]
        day_of = {"last_over_time": per_day.last, "max_over_time": per_day.max, "p95_over_time": per_day.max}
        rolled = day_of.get(function, per_day.sum)().reset_index()
        rolled = rolled[rolled["day"] - lag_ms <= latest_ms].reset_index(drop=True)
        days.update(rolled["day"].unique().tolist())
        names = samples[list(family.labels)].iloc[first_rows].reset_index(drop=True)
        labelled = names.iloc[rolled.pop("series").to_numpy()].reset_index(drop=True)
        rolled = pd.concat([labelled, rolled], axis=1)
        rolled["timestamp"] = pd.to_datetime(rolled.pop("day"), unit="ms", utc=True)
        name = ownseries.rollup_name(metric, function, "day")
        out.append(Family(name, f"Daily {function} of {metric}.", family.labels, rolled))
    if days:
        marks = np.array(sorted(days), dtype=np.int64)
        marker = pd.DataFrame(
            {"timestamp": pd.to_datetime(marks, unit="ms", utc=True), "value": marks / 1000}
        )
        out += stamped(
            [
                Family(ownseries.DAY_ROLLUP_MARKER, "When the daily roll-ups were evaluated.", (), marker),
                Family(
                    ownseries.DAY_NAMESPACE_ROLLUP_MARKER,
                    "When the daily namespace roll-ups were evaluated.",
                    (),
                    marker,
                ),
            ],
            external_labels,
        )
    return out


def block_ranges(window: Window) -> list[tuple[datetime, datetime]]:
    """Per 2 h block holding a sample: the interval starts [a, b) whose samples, written at t_i + step/2,
    fall in that block (a `between=` range for write_backfill)."""
    half = timedelta(seconds=window.step_seconds / 2)
    span = BLOCK.total_seconds()
    block = datetime.fromtimestamp(math.floor((window.start + half).timestamp() / span) * span, UTC)
    last = window.sample_time(window.n_samples - 1) + half
    ranges = []
    while block <= last:
        ranges.append((block - half, block + BLOCK - half))
        block += BLOCK
    return ranges


def write_tsdb(
    fleet: SimulatedFleet,
    tsdb: str | Path,
    *,
    layout: str = "servicemonitor",
    metrics: Sequence[str] | None = None,
    dcgm: bool = True,
    gpuwatch_series: bool = True,
    workers: int = 2,
    progress: Callable[[int, int], None] | None = None,
    cluster: str | None = None,
) -> TsdbBackfill:
    """Write the fleet's history (DCGM series and/or gpuwatch_* series) as TSDB blocks into `tsdb`; returns
    how many samples and 2 h ranges were written. With a cluster name, every series carries
    cluster="<name>" (cluster_labels)."""
    external = cluster_labels(cluster)
    promtool = shutil.which("promtool") if dcgm else None
    if dcgm and promtool is None:
        raise ConfigError("promtool not found on PATH (Debian and Ubuntu: apt install prometheus)")
    target = Path(tsdb)
    target.mkdir(parents=True, exist_ok=True)
    ranges = block_ranges(fleet.window)
    tasks = _day_tasks(ranges, fleet.window.step_seconds / 2)
    samples = done = 0
    with tempfile.TemporaryDirectory(prefix="gpuwatch-backfill-") as scratch:
        job = _Job(layout, metrics, dcgm, gpuwatch_series, promtool, target, Path(scratch), external)
        global _FLEET, _JOB
        _FLEET, _JOB = fleet, job
        try:
            with multiprocessing.get_context("fork").Pool(max(1, workers)) as pool:
                for n, blocks in pool.imap_unordered(_write_task, tasks):
                    samples, done = samples + n, done + blocks
                    if progress is not None:
                        progress(done, len(ranges))
        finally:
            _FLEET, _JOB = None, None
    return TsdbBackfill(samples=samples, blocks=len(ranges))


def _day_tasks(ranges: list[tuple[datetime, datetime]], half: float) -> list[list[tuple[datetime, datetime]]]:
    """The blocks cut into tasks of one UTC day (at most BLOCKS_PER_TASK blocks): a task's roll-ups are the
    hours of its day, so each daily roll-up is made, whole, by one task."""
    tasks: list[list[tuple[datetime, datetime]]] = []
    for a, b in ranges:
        block = a + timedelta(seconds=half)
        if not tasks or len(tasks[-1]) == BLOCKS_PER_TASK or (block.hour == 0 and block.minute == 0):
            tasks.append([])
        tasks[-1].append((a, b))
    return tasks


def _write_task(ranges: list[tuple[datetime, datetime]]) -> tuple[int, int]:
    """Analyse the task's blocks at once, then write them one by one (the last task, the roll-ups
    evaluated after its last block, at the window's end, as one more)."""
    fleet, job = _FLEET, _JOB
    assert fleet is not None and job is not None, "write_tsdb sets the fleet before forking"
    samples = 0
    half = fleet.window.step_seconds / 2
    if job.gpuwatch_series:
        last = ranges[-1] == block_ranges(fleet.window)[-1]
        families, rollups = _task_history(fleet, job, ranges, last=last)
        table = sample_table([(f, half) for f in families] + [(f, 0.0) for f in rollups])
        del families, rollups
        blocks = [a for a, _ in ranges] + ([ranges[-1][1]] if last else [])
        for a in blocks:
            block_ms = round((a.timestamp() + half) * 1000)  # samples of intervals from a on, at t + half
            samples += write_block(job.tsdb, table, block_ms, block_ms + round(BLOCK.total_seconds() * 1000))
    if job.dcgm:
        for a, b in ranges:
            path = job.scratch / f"block-{int(a.timestamp())}.om"
            with path.open("w", encoding="utf-8") as out:
                samples += _dcgm_block(fleet, job, out, (a, b))
            _import(job, path)
    return samples, len(ranges)


def _spool_task(
    fleet: SimulatedFleet,
    job: _Job,
    ranges: list[tuple[datetime, datetime]],
    spool: FamilySpool,
    *,
    last: bool,
) -> int:
    """The task's blocks as OpenMetrics text into the spool: the samples _write_task writes as blocks (the
    last task's, with the roll-ups evaluated at the window's end)."""
    samples = 0
    if job.dcgm:
        for block in ranges:
            samples += _dcgm_block(fleet, job, spool, block)
    if job.gpuwatch_series:
        half = fleet.window.step_seconds / 2
        start_ms = round((ranges[0][0].timestamp() + half) * 1000)  # as _write_task's first block
        end_ms = start_ms + (len(ranges) + last) * round(BLOCK.total_seconds() * 1000)
        families, rollups = _task_history(fleet, job, ranges, last=last)
        for timed, offset in ((families, half), (rollups, 0.0)):
            inside = [_between(f, offset, start_ms, end_ms) for f in timed]
            samples += write_openmetrics(inside, spool, offset_seconds=offset, end_of_file=False)
    return samples


def _between(family: Family, offset_seconds: float, start_ms: int, end_ms: int) -> Family:
    """The family's samples written (at their timestamp + offset) in [start_ms, end_ms)."""
    ms = family.samples["timestamp"].dt.as_unit("ms").astype("int64").to_numpy() + round(
        offset_seconds * 1000
    )
    return replace(family, samples=family.samples[(ms >= start_ms) & (ms < end_ms)])


def _task_history(
    fleet: SimulatedFleet, job: _Job, ranges: list[tuple[datetime, datetime]], *, last: bool
) -> tuple[list[Family], list[Family]]:
    """The gpuwatch_* families of the task's blocks (and the hours before) and their hourly roll-ups
    evaluated in the blocks [T0, T1) on the hour, of grid points in (T0 − 1 h, T1 − 1 h] (the last task's,
    every grid point from T0 − 1 h on: the hour ending with the window too), with the daily roll-ups of
    the task's day."""
    half = fleet.window.step_seconds / 2
    families = stamped(_task_families(fleet, ranges), job.external_labels)
    hour = timedelta(seconds=ownseries.ROLLUP_SECONDS)
    first, end = ranges[0][0] + timedelta(seconds=half), ranges[-1][1] + timedelta(seconds=half)
    rollups = rollup_families(
        families,
        offset_seconds=half,
        after=first - hour,
        until=None if last else end - hour,
        external_labels=job.external_labels,
    )
    rollups += day_rollup_families(rollups, external_labels=job.external_labels)
    return families, rollups


def _dcgm_block(fleet: SimulatedFleet, job: _Job, out: TextSink, block: tuple[datetime, datetime]) -> int:
    return write_backfill(
        fleet,
        out,
        layout=job.layout,
        metrics=job.metrics,
        between=block,
        external_labels=job.external_labels,
    )


def _task_families(fleet: SimulatedFleet, ranges: list[tuple[datetime, datetime]]) -> list[Family]:
    """gpuwatch_* samples whose interval starts in the task's blocks (the fleet's samples there), and in the
    two hours before: the roll-up evaluated at the first block's start reads the hour before it, and the
    namespaces' new pods then compare with the hour before that."""
    window = fleet.window
    step = timedelta(seconds=window.step_seconds)

    def on_grid(t: datetime) -> datetime:
        return window.start + max(0, math.ceil((t - window.start) / step)) * step

    hour = timedelta(seconds=ownseries.ROLLUP_SECONDS)
    start, end = on_grid(ranges[0][0] - 2 * hour - step), min(window.end, on_grid(ranges[-1][1]))
    if start >= end:
        return []
    return history_families(history_service(fleet), replace(window, start=start, end=end))


def _import(job: _Job, path: Path) -> None:
    assert job.promtool is not None, "write_tsdb finds promtool when it writes DCGM series"
    cmd = [job.promtool, "tsdb", "create-blocks-from", "openmetrics", "--quiet", str(path), str(job.tsdb)]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    path.unlink()
    if done.returncode != 0:
        message = (done.stderr.strip() or done.stdout.strip()).splitlines()
        raise ConfigError(f"promtool failed on {path.name}: {message[-1] if message else done.returncode}")
