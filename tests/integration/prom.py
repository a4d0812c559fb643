"""Real query backends for integration tests: a simulated fleet's history in Prometheus (backfilled with
promtool) or in VictoriaMetrics (imported over HTTP), served on 127.0.0.1 and queried through the same API.
"""

import contextlib
import ctypes
import fcntl
import json
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import IO, Any, Literal, Protocol, Self

import requests

from gpuwatch.core.config import Settings
from gpuwatch.sim import SimulatedFleet
from gpuwatch.sim.backfill import write_fleet_backfill
from gpuwatch.sim.exposition import with_counterparts, write_backfill

# The DCGM fields the raw path reads: utilization, and what held/abandoned idle and energy come from.
RAW_PATH_METRICS = (
    "DCGM_FI_DEV_GPU_UTIL",
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
    "DCGM_FI_DEV_FB_USED",
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
    "DCGM_FI_DEV_POWER_USAGE",
)

PROMTOOL = shutil.which("promtool") or "/usr/bin/promtool"
PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"
VICTORIA_METRICS = shutil.which("victoria-metrics") or "/usr/bin/victoria-metrics"
MAX_LIFETIME_SECONDS = 3600  # a server left behind by a killed test run stops by itself after this

Backend = Literal["prometheus", "victoriametrics"]
BACKENDS: tuple[Backend, ...] = ("prometheus", "victoriametrics")

_CONFIG = """\
# Nothing to scrape: the TSDB holds backfilled blocks only.
global:
  scrape_interval: 1m
  evaluation_interval: 1m
"""


@dataclass(frozen=True, slots=True)
class BackfillStats:
    path: Path
    samples: int
    size_bytes: int
    seconds: float

    @property
    def size_mb(self) -> float:
        return self.size_bytes / 1e6


def write_backfill_file(
    fleet: SimulatedFleet,
    path: Path,
    *,
    layout: str = "servicemonitor",
    metrics: Sequence[str] | None = None,
    step_seconds: int | None = None,
    gpuwatch_series: bool = False,
    settings: Settings | None = None,
) -> BackfillStats:
    """(a) The fleet's OpenMetrics backfill at `path`, with how many samples, bytes and seconds it took.

    gpuwatch_series appends gpuwatch's own history (at the fleet's step, computed with `settings`, the
    demo's by default) after the DCGM families. `metrics` names DCGM families: each brings its
    counterparts from the other vendors' exporters, for the fleet's other GPUs (AMD's MI300X pool);
    none (`()`) with gpuwatch_series is gpuwatch's history alone.
    """
    metrics = None if metrics is None else with_counterparts(metrics)
    began = time.perf_counter()
    with path.open("w", encoding="utf-8") as out:
        if gpuwatch_series:
            if step_seconds not in (None, fleet.window.step_seconds):
                raise ValueError("gpuwatch series are written at the fleet's own step")
            samples = write_fleet_backfill(
                fleet, out, layout=layout, metrics=metrics, dcgm=metrics != (), settings=settings
            )
        else:
            samples = write_backfill(fleet, out, layout=layout, metrics=metrics, step_seconds=step_seconds)
    return BackfillStats(path, samples, path.stat().st_size, time.perf_counter() - began)


def create_blocks(openmetrics: Path, data_dir: Path, *, timeout: float = 600) -> None:
    """(b) `promtool tsdb create-blocks-from openmetrics FILE DIR`; a failure raises with its output.

    promtool reads its whole input once per block it writes, so the blocks are as long as Prometheus makes
    them under the test servers' retention (486 h: 2 h × 3⁵, the longest range within its 31-day cap): a
    world of up to 20 days is one or two passes over the file. (promtool 2.42, Debian 12's, takes
    --max-block-duration without listing it in its help.)
    """
    data_dir.mkdir(parents=True, exist_ok=True)
    cmd = [PROMTOOL, "tsdb", "create-blocks-from", "openmetrics", "--quiet"]
    cmd += ["--max-block-duration=486h", str(openmetrics), str(data_dir)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    if done.returncode != 0:
        raise RuntimeError(
            f"promtool failed ({done.returncode}): {done.stderr.strip() or done.stdout.strip()}"
        )


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


_PRCTL: Callable[[int, int], int] | None
try:  # looked up once here: the child between fork and exec then loads no library
    _PRCTL = ctypes.CDLL("libc.so.6", use_errno=True).prctl
except OSError:  # not Linux
    _PRCTL = None
_PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """In the child before exec (Popen's preexec_fn): get SIGTERM when the thread that started it ends,
    however the test process ends (Linux): a server a test starts stops with it."""
    if _PRCTL is not None:
        _PRCTL(_PR_SET_PDEATHSIG, signal.SIGTERM)


def _launch(cmd: list[str], log: IO[bytes], ready_url: str, timeout: float) -> subprocess.Popen[bytes]:
    """Start a server (dying with this process), logging to `log`, and wait until ready_url answers 200;
    a server that exits or is not ready in time raises, naming its log."""
    name = Path(cmd[3]).name  # after `timeout --kill-after=10s <lifetime>`
    process = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, preexec_fn=die_with_parent)
    log.close()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{name} exited with {process.returncode}; see {log.name}")
        try:
            if requests.get(ready_url, timeout=2).status_code == 200:
                return process
        except requests.RequestException:
            pass
        time.sleep(0.2)
    _stop(process, 15)
    raise RuntimeError(f"{name} not ready after {timeout}s; see {log.name}")


def _stop(process: subprocess.Popen[bytes] | None, timeout: float) -> None:
    if process is None or process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=timeout)


@dataclass
class PrometheusServer:
    """(c) `prometheus` on 127.0.0.1 over an existing TSDB directory; start() waits for /-/ready."""

    data_dir: Path
    port: int = 0
    config_text: str = _CONFIG
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, *, timeout: float = 60) -> Self:
        config = self.data_dir.parent / f"{self.data_dir.name}-prometheus.yml"
        config.write_text(self.config_text, encoding="utf-8")
        log = (self.data_dir.parent / f"{self.data_dir.name}-prometheus.log").open("wb")
        self.port = self.port or free_port()
        cmd = [
            "timeout",
            "--kill-after=10s",
            f"{MAX_LIFETIME_SECONDS}s",
            PROMETHEUS,
            f"--config.file={config}",
            f"--storage.tsdb.path={self.data_dir}",
            f"--web.listen-address=127.0.0.1:{self.port}",
            "--storage.tsdb.retention.time=100y",  # backfilled history is old: keep every block
            "--log.level=warn",
        ]
        self.process = _launch(cmd, log, f"{self.url}/-/ready", timeout)
        return self

    def stop(self, *, timeout: float = 15) -> None:
        _stop(self.process, timeout)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class QueryServer(Protocol):
    """What the fixtures need of a server answering the Prometheus HTTP API."""

    @property
    def url(self) -> str: ...

    def start(self, *, timeout: float = 60) -> Self: ...

    def stop(self, *, timeout: float = 15) -> None: ...

    def __enter__(self) -> Self: ...

    def __exit__(self, *exc: object) -> None: ...


@dataclass
class VictoriaMetricsServer:
    """(c') single-node `victoria-metrics` on 127.0.0.1 over its own data directory; start() waits for
    /health. It speaks the Prometheus query API; history goes in by import_openmetrics().

    Flags, each for a reason: the simulated history is days old (retention 100y, as Prometheus's);
    imported history is read at once (no 30 s latency offset, no response cache). No
    -dedup.minScrapeInterval: duplicate samples are gpuwatch's to handle, as on a Prometheus. Label
    limit as high as Prometheus's (none by default; VictoriaMetrics drops labels past 30).
    """

    data_dir: Path
    port: int = 0
    flags: tuple[str, ...] = ()  # more flags, after those above
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, *, timeout: float = 60) -> Self:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        log = (self.data_dir.parent / f"{self.data_dir.name}.log").open("wb")
        self.port = self.port or free_port()
        cmd = [
            "timeout",
            "--kill-after=10s",
            f"{MAX_LIFETIME_SECONDS}s",
            VICTORIA_METRICS,
            f"-storageDataPath={self.data_dir}",
            f"-httpListenAddr=127.0.0.1:{self.port}",
            "-retentionPeriod=100y",
            "-search.latencyOffset=0s",
            "-search.disableCache",
            "-maxLabelsPerTimeseries=1000",
            "-loggerLevel=WARN",
            *self.flags,
        ]
        self.process = _launch(cmd, log, f"{self.url}/health", timeout)
        return self

    def import_openmetrics(self, openmetrics: Path, *, timeout: float = 600) -> None:
        """POST the backfill to /api/v1/import/prometheus, then make every sample searchable.

        The endpoint reads the Prometheus text format, whose timestamps are milliseconds; OpenMetrics
        (promtool's input) has seconds, with decimals. Lines are converted while streaming.
        """
        reply = requests.post(
            f"{self.url}/api/v1/import/prometheus", data=_prometheus_text(openmetrics), timeout=timeout
        )
        if reply.status_code != 204:
            raise RuntimeError(f"victoria-metrics import failed ({reply.status_code}): {reply.text.strip()}")
        # Buffered rows become searchable only when flushed (every second or so); a cached answer from
        # before the import would hide them.
        for path in ("/internal/force_flush", "/internal/resetRollupResultCache"):
            requests.get(f"{self.url}{path}", timeout=60).raise_for_status()

    def stop(self, *, timeout: float = 15) -> None:
        _stop(self.process, timeout)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _prometheus_text(openmetrics: Path, *, lines_per_chunk: int = 20_000) -> Iterator[bytes]:
    """The samples of an OpenMetrics backfill as Prometheus text: timestamps in ms, no comments or EOF."""
    chunk: list[str] = []
    with openmetrics.open(encoding="utf-8") as lines:
        for line in lines:
            if line.startswith("#") or not line.strip():
                continue
            # Label values may hold spaces; value and timestamp are the last two fields, both required.
            series, value, seconds = line.rsplit(" ", 2)
            chunk.append(f"{series} {value} {round(float(seconds) * 1000)}\n")
            if len(chunk) >= lines_per_chunk:
                yield "".join(chunk).encode()
                chunk = []
    if chunk:
        yield "".join(chunk).encode()


ROLLUP_PREFIXES = ("hour:", "day:")  # the roll-up rules' series (alerts/gpuwatch-recording.rules.yml)
Keep = Callable[[str], bool]


@contextlib.contextmanager
def rollup_variants(
    fleet: SimulatedFleet,
    keeps: Mapping[str, Keep],
    root: Path,
    *,
    backend: Backend = "prometheus",
    cache: Path | None = None,
) -> Iterator[dict[str, str]]:
    """The URL of a server of `backend` per `keeps` entry, each holding the fleet's gpuwatch_* history
    (its backfill, written once) and the roll-up samples (hour:..., day:...) its test keeps; stopped on
    leaving.

    The raw history is split off once: Prometheus servers share its blocks (hard-linked; Prometheus
    reads blocks that overlap in time) beside the blocks of their own roll-ups, so promtool reads the
    large part of the file once, not once per server. With a `cache` directory (one per fleet) the
    backfill is split, and the raw history's blocks made, there once for every module and test worker
    of the run that asks for the same fleet.
    """
    root.mkdir(parents=True, exist_ok=True)
    made = _split_once(fleet, cache or root / "split")
    raw, every_rollup = made / "raw.om", made / "rollups.om"
    rollups = {name: root / f"rollups-{k}.om" for k, name in enumerate(keeps)}
    counts = dict.fromkeys(keeps, 0)
    with contextlib.ExitStack() as files:
        outs = {name: files.enter_context(path.open("w", encoding="utf-8")) for name, path in rollups.items()}
        with every_rollup.open(encoding="utf-8") as lines:
            for line in lines:
                if line.startswith("#"):  # HELP, TYPE and EOF lines go to every file
                    for out in outs.values():
                        out.write(line)
                    continue
                for name, keep in keeps.items():
                    if keep(line):
                        outs[name].write(line)
                        counts[name] += 1
    started: dict[str, QueryServer] = {}
    try:
        for k, (name, path) in enumerate(rollups.items()):
            workdir = root / f"server-{k}"
            if backend == "prometheus":
                tsdb = workdir / "tsdb"
                if counts[name]:
                    create_blocks(path, tsdb)
                shutil.copytree(made / "raw-tsdb", tsdb, copy_function=os.link, dirs_exist_ok=True)
                started[name] = PrometheusServer(tsdb).start()
            else:
                vm = VictoriaMetricsServer(workdir / "victoria-metrics").start()
                started[name] = vm
                vm.import_openmetrics(raw)
                if counts[name]:
                    vm.import_openmetrics(path)
        yield {name: server.url for name, server in started.items()}
    finally:
        for server in started.values():
            server.stop()


def _split_once(fleet: SimulatedFleet, directory: Path) -> Path:
    """`directory`, holding the fleet's gpuwatch_* backfill split in two, raw.om (the exporter's series)
    and rollups.om (the roll-up rules'), and raw.om's blocks (raw-tsdb): made by the first process to get
    there."""
    directory.mkdir(parents=True, exist_ok=True)
    with (directory / "lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, or the process dies
        if (directory / "made").exists():
            return directory
        full = directory / "full.om"
        with full.open("w", encoding="utf-8") as out:
            write_fleet_backfill(fleet, out, dcgm=False)
        with (
            full.open(encoding="utf-8") as lines,
            (directory / "raw.om").open("w", encoding="utf-8") as raw,
            (directory / "rollups.om").open("w", encoding="utf-8") as rollups,
        ):
            for line in lines:
                if line.startswith("#"):  # HELP, TYPE and EOF lines go to both files
                    raw.write(line)
                    rollups.write(line)
                else:
                    (rollups if line.startswith(ROLLUP_PREFIXES) else raw).write(line)
        full.unlink()
        create_blocks(directory / "raw.om", directory / "raw-tsdb")
        (directory / "made").touch()
    return directory


# -- the HTTP API, read directly ----------------------------------------------------------------


def _get(url: str, path: str, params: dict[str, Any]) -> Any:
    reply = requests.get(f"{url}{path}", params=params, timeout=60)
    body = reply.json()
    if reply.status_code != 200 or body.get("status") != "success":
        raise RuntimeError(f"{path} {params}: {reply.status_code} {body}")
    return body["data"]


def query(url: str, expr: str, at: datetime) -> list[dict[str, Any]]:
    """Instant vector at `at`: [{"metric": {...}, "value": [ts, "v"]}, ...]."""
    data = _get(url, "/api/v1/query", {"query": expr, "time": at.timestamp()})
    result: list[dict[str, Any]] = data["result"]
    return result


def query_range(
    url: str, expr: str, start: datetime, end: datetime, step_seconds: int
) -> list[dict[str, Any]]:
    """Range matrix: [{"metric": {...}, "values": [[ts, "v"], ...]}, ...]."""
    params = {"query": expr, "start": start.timestamp(), "end": end.timestamp(), "step": step_seconds}
    result: list[dict[str, Any]] = _get(url, "/api/v1/query_range", params)["result"]
    return result


def series(url: str, match: str, start: datetime, end: datetime) -> list[dict[str, str]]:
    """Label sets of the series matching `match` over [start, end]."""
    params = {"match[]": match, "start": start.timestamp(), "end": end.timestamp()}
    result: list[dict[str, str]] = _get(url, "/api/v1/series", params)
    return result


@dataclass
class BackfilledPrometheus:
    """A running Prometheus (or VictoriaMetrics: `backend`) holding one simulated fleet's DCGM history in
    one label layout."""

    fleet: SimulatedFleet
    layout: str
    metrics: tuple[str, ...] | None
    step_seconds: int
    backfill: BackfillStats
    server: QueryServer
    backend: Backend = "prometheus"

    @property
    def url(self) -> str:
        return self.server.url

    def query(self, expr: str, at: datetime) -> list[dict[str, Any]]:
        return query(self.url, expr, at)

    def query_range(
        self, expr: str, start: datetime, end: datetime, step_seconds: int
    ) -> list[dict[str, Any]]:
        return query_range(self.url, expr, start, end, step_seconds)

    def series(self, match: str) -> list[dict[str, str]]:
        return series(self.url, match, self.fleet.window.start, self.fleet.window.end)


def backfilled_prometheus(
    fleet: SimulatedFleet,
    workdir: Path,
    *,
    layout: str = "servicemonitor",
    metrics: Sequence[str] | None = None,
    step_seconds: int | None = None,
    keep_file: bool = False,
    gpuwatch_series: bool = False,
    backend: Backend = "prometheus",
    settings: Settings | None = None,
    cache: Path | None = None,
) -> BackfilledPrometheus:
    """Backfill `fleet` into a fresh TSDB under `workdir` and start a Prometheus on it (stop it yourself).

    backend="victoriametrics" starts a VictoriaMetrics instead and imports the same file into it. With a
    `cache` directory the backfill file and its blocks are made there once, by whichever process comes
    first (other test workers wait), and this server's TSDB is a hard-linked copy of those blocks.
    """
    if backend not in BACKENDS:
        raise ValueError(f"unknown backend {backend!r} (expected one of {', '.join(BACKENDS)})")
    workdir.mkdir(parents=True, exist_ok=True)

    def write(path: Path) -> BackfillStats:
        return write_backfill_file(
            fleet,
            path,
            layout=layout,
            metrics=metrics,
            step_seconds=step_seconds,
            gpuwatch_series=gpuwatch_series,
            settings=settings,
        )

    stats = write(workdir / "backfill.om") if cache is None else _made_once(cache, write)
    server: QueryServer
    if backend == "prometheus":
        if cache is None:
            create_blocks(stats.path, workdir / "tsdb")
        else:  # Prometheus never rewrites a block's files: it writes new blocks and deletes old ones
            shutil.copytree(cache / "tsdb", workdir / "tsdb", copy_function=os.link)
        server = PrometheusServer(workdir / "tsdb").start()
    else:
        vm = VictoriaMetricsServer(workdir / "victoria-metrics").start()
        server = vm
        try:
            vm.import_openmetrics(stats.path)
            _expect_samples(vm.url, fleet, stats.samples)
        except BaseException:
            vm.stop()
            raise
    if not keep_file and cache is None:
        stats.path.unlink()
    return BackfilledPrometheus(
        fleet=fleet,
        layout=layout,
        metrics=None if metrics is None else tuple(metrics),
        step_seconds=step_seconds or fleet.window.step_seconds,
        backfill=stats,
        server=server,
        backend=backend,
    )


def _made_once(cache: Path, write: Callable[[Path], BackfillStats]) -> BackfillStats:
    """The backfill file and its promtool blocks in `cache`, made by the first process to get there."""
    cache.mkdir(parents=True, exist_ok=True)
    made = cache / "backfill.json"
    with (cache / "lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, or the process dies
        if not made.exists():
            stats = write(cache / "backfill.om")
            create_blocks(stats.path, cache / "tsdb")
            made.write_text(json.dumps([stats.samples, stats.size_bytes, stats.seconds]), encoding="utf-8")
    samples, size_bytes, seconds = json.loads(made.read_text(encoding="utf-8"))
    return BackfillStats(cache / "backfill.om", samples, size_bytes, seconds)


def _expect_samples(url: str, fleet: SimulatedFleet, written: int, *, timeout: float = 30) -> None:
    """Wait until every sample written is searchable: an import is no proof until it is read back."""
    window = fleet.window
    span = int((window.end - window.start).total_seconds()) + 2 * window.step_seconds
    expr = f'sum(count_over_time({{__name__=~".+"}}[{span}s]))'
    at = window.end + timedelta(seconds=window.step_seconds)
    deadline = time.monotonic() + timeout
    while True:
        got = query(url, expr, at)
        found = int(float(got[0]["value"][1])) if got else 0
        if found == written:
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"victoria-metrics at {url} holds {found} of the {written} samples imported")
        time.sleep(0.5)


PrometheusFactory = Callable[..., BackfilledPrometheus]
