"""A real Prometheus for integration tests: backfill a simulated fleet with promtool, serve it, query it."""

import contextlib
import ctypes
import functools
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Self

import requests

from gpuwatch.service import write_fleet_backfill
from gpuwatch.sources.simulated import SimulatedFleet
from gpuwatch.sources.simulated.exposition import write_backfill

PROMTOOL = shutil.which("promtool") or "/usr/bin/promtool"
PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"
MAX_LIFETIME_SECONDS = 3600  # a Prometheus left behind by a killed test run stops by itself after this

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
) -> BackfillStats:
    """(a) The fleet's OpenMetrics backfill at `path`, with how many samples, bytes and seconds it took.

    gpuwatch_series appends gpuwatch's own history (at the fleet's step) after the DCGM families.
    """
    began = time.perf_counter()
    with path.open("w", encoding="utf-8") as out:
        if gpuwatch_series:
            if step_seconds not in (None, fleet.window.step_seconds):
                raise ValueError("gpuwatch series are written at the fleet's own step")
            samples = write_fleet_backfill(fleet, out, layout=layout, metrics=metrics)
        else:
            samples = write_backfill(fleet, out, layout=layout, metrics=metrics, step_seconds=step_seconds)
    return BackfillStats(path, samples, path.stat().st_size, time.perf_counter() - began)


@functools.cache
def _promtool_has_max_block_duration() -> bool:
    """promtool learnt --max-block-duration in 2.44; 2.42 (Debian 12) writes 2h blocks, one file pass each."""
    help_text = subprocess.run(
        [PROMTOOL, "tsdb", "create-blocks-from", "openmetrics", "--help"],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    return "max-block-duration" in help_text.stdout + help_text.stderr


def create_blocks(
    openmetrics: Path, data_dir: Path, *, max_block_hours: int = 48, timeout: float = 600
) -> None:
    """(b) `promtool tsdb create-blocks-from openmetrics FILE DIR`; a failure raises with its output."""
    data_dir.mkdir(parents=True, exist_ok=True)
    cmd = [PROMTOOL, "tsdb", "create-blocks-from", "openmetrics", "--quiet"]
    if _promtool_has_max_block_duration():
        cmd.append(f"--max-block-duration={max_block_hours}h")
    cmd += [str(openmetrics), str(data_dir)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    if done.returncode != 0:
        raise RuntimeError(
            f"promtool failed ({done.returncode}): {done.stderr.strip() or done.stdout.strip()}"
        )


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _die_with_parent() -> None:
    """In the child before exec: get SIGTERM when the test process dies, however it dies (Linux)."""
    pr_set_pdeathsig = 1
    with contextlib.suppress(OSError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(pr_set_pdeathsig, signal.SIGTERM)


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
        self.process = subprocess.Popen(
            cmd, stdout=log, stderr=subprocess.STDOUT, preexec_fn=_die_with_parent
        )
        log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"prometheus exited with {self.process.returncode}; see {log.name}")
            try:
                if requests.get(f"{self.url}/-/ready", timeout=2).status_code == 200:
                    return self
            except requests.RequestException:
                pass
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"prometheus not ready after {timeout}s; see {log.name}")

    def stop(self, *, timeout: float = 15) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.terminate()
        try:
            self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=timeout)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


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
    """A running Prometheus holding one simulated fleet's DCGM history in one label layout."""

    fleet: SimulatedFleet
    layout: str
    metrics: tuple[str, ...] | None
    step_seconds: int
    backfill: BackfillStats
    server: PrometheusServer

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
) -> BackfilledPrometheus:
    """Backfill `fleet` into a fresh TSDB under `workdir` and start a Prometheus on it (stop it yourself)."""
    workdir.mkdir(parents=True, exist_ok=True)
    stats = write_backfill_file(
        fleet,
        workdir / "backfill.om",
        layout=layout,
        metrics=metrics,
        step_seconds=step_seconds,
        gpuwatch_series=gpuwatch_series,
    )
    create_blocks(stats.path, workdir / "tsdb")
    if not keep_file:
        stats.path.unlink()
    server = PrometheusServer(workdir / "tsdb").start()
    return BackfilledPrometheus(
        fleet=fleet,
        layout=layout,
        metrics=None if metrics is None else tuple(metrics),
        step_seconds=step_seconds or fleet.window.step_seconds,
        backfill=stats,
        server=server,
    )


PrometheusFactory = Callable[..., BackfilledPrometheus]
