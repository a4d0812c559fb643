"""The simulated fleet's history written straight into a Prometheus TSDB directory, through promtool.

A month of a large fleet is far too big for one OpenMetrics file: promtool before 2.44 (Debian 12 ships
2.42) writes 2 h blocks and re-reads its whole input once per block. So the history is cut into one
file per 2 h block, each handed to `promtool tsdb create-blocks-from openmetrics` and deleted, with
`workers` processes analysing and writing side by side. The directory is then a Prometheus
`--storage.tsdb.path` (Prometheus compacts the 2 h blocks itself).
"""

import math
import multiprocessing
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

from gpuwatch.errors import ConfigError
from gpuwatch.model import Window
from gpuwatch.series import Family, write_openmetrics
from gpuwatch.service import history_families, history_service
from gpuwatch.sources.simulated.exposition import write_backfill
from gpuwatch.sources.simulated.fleet import SimulatedFleet

BLOCK = timedelta(hours=2)
BLOCKS_PER_TASK = 12  # one day of blocks analysed at once: the memory of a day of the fleet per worker


@dataclass(frozen=True, slots=True)
class TsdbBackfill:
    """What write_tsdb wrote."""

    samples: int
    blocks: int
    openmetrics_bytes: int


@dataclass(frozen=True, slots=True)
class _Job:
    layout: str
    metrics: Sequence[str] | None
    dcgm: bool
    gpuwatch_series: bool
    promtool: str
    tsdb: Path
    scratch: Path


# Set by write_tsdb before it forks its workers, which inherit them (a fleet is never pickled).
_FLEET: SimulatedFleet | None = None
_JOB: _Job | None = None


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
) -> TsdbBackfill:
    """Write the fleet's history (DCGM series and/or gpuwatch_* series) as TSDB blocks into `tsdb`."""
    promtool = shutil.which("promtool")
    if promtool is None:
        raise ConfigError("promtool not found on PATH (Debian and Ubuntu: apt install prometheus)")
    target = Path(tsdb)
    target.mkdir(parents=True, exist_ok=True)
    ranges = block_ranges(fleet.window)
    tasks = [ranges[i : i + BLOCKS_PER_TASK] for i in range(0, len(ranges), BLOCKS_PER_TASK)]
    samples = size = done = 0
    with tempfile.TemporaryDirectory(prefix="gpuwatch-backfill-") as scratch:
        job = _Job(layout, metrics, dcgm, gpuwatch_series, promtool, target, Path(scratch))
        global _FLEET, _JOB
        _FLEET, _JOB = fleet, job
        try:
            with multiprocessing.get_context("fork").Pool(max(1, workers)) as pool:
                for n, written, blocks in pool.imap_unordered(_write_task, tasks):
                    samples, size, done = samples + n, size + written, done + blocks
                    if progress is not None:
                        progress(done, len(ranges))
        finally:
            _FLEET, _JOB = None, None
    return TsdbBackfill(samples=samples, blocks=len(ranges), openmetrics_bytes=size)


def _write_task(ranges: list[tuple[datetime, datetime]]) -> tuple[int, int, int]:
    """Analyse the task's blocks at once, then write and import one file per block."""
    fleet, job = _FLEET, _JOB
    assert fleet is not None and job is not None, "write_tsdb sets the fleet before forking"
    families = _task_families(fleet, ranges) if job.gpuwatch_series else []
    samples = size = 0
    half = fleet.window.step_seconds / 2
    for a, b in ranges:
        path = job.scratch / f"block-{int(a.timestamp())}.om"
        with path.open("w", encoding="utf-8") as out:
            if job.dcgm:
                samples += write_backfill(
                    fleet, out, layout=job.layout, metrics=job.metrics, between=(a, b), end_of_file=False
                )
            inside = [f.between(a, b) for f in families]
            samples += write_openmetrics(inside, out, offset_seconds=half)
        size += path.stat().st_size
        _import(job, path)
    return samples, size, len(ranges)


def _task_families(fleet: SimulatedFleet, ranges: list[tuple[datetime, datetime]]) -> list[Family]:
    """gpuwatch_* samples whose interval starts in the task's blocks (the fleet's samples there)."""
    window = fleet.window
    step = timedelta(seconds=window.step_seconds)

    def on_grid(t: datetime) -> datetime:
        return window.start + max(0, math.ceil((t - window.start) / step)) * step

    start, end = on_grid(ranges[0][0]), min(window.end, on_grid(ranges[-1][1]))
    if start >= end:
        return []
    return history_families(history_service(fleet), replace(window, start=start, end=end))


def _import(job: _Job, path: Path) -> None:
    cmd = [job.promtool, "tsdb", "create-blocks-from", "openmetrics", "--quiet", str(path), str(job.tsdb)]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    path.unlink()
    if done.returncode != 0:
        message = (done.stderr.strip() or done.stdout.strip()).splitlines()
        raise ConfigError(f"promtool failed on {path.name}: {message[-1] if message else done.returncode}")
