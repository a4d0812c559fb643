"""Benchmark: gpuwatch at fleet scale (issue 12) on a real Prometheus. Not a test: nothing is asserted.

  world    `gpuwatch simulate backfill --gpus G --days D --step 300s --no-dcgm --tsdb DIR` (timed: it writes
           the 2 h blocks itself), then Prometheus on DIR once it has compacted them. `--tsdb DIR` keeps
           the world for the next run (reused when built with the same parameters).
  pages    `gpuwatch serve` on that Prometheus and the simulated Kubernetes API of the same fleet, once
           it is ready (/readyz: the cluster listed, the default view warm), every
           page opened in headless Chromium for windows of 24 h, 7 d and 30 d ending at the world's end:
           the first visit of each window and page (cold) and the p95 of `--repeat` more (warm), to the
           moment Dash has no callback in flight; then the serve process's peak RSS (VmHWM).
  report   `gpuwatch report --start <D days before the end> --end <end>` (a fresh process each time): the
           default terminal table (teams), then `--format json` (every workload of the window, ~50,000).
  exporter `gpuwatch export` cycles at G GPUs with the API server listing ~50,000 pods (--cpu-pods more
           without GPUs): CPU seconds and peak RSS of each cycle.
  compare  side by side in one run on a 1,000-GPU 7-day world holding DCGM and gpuwatch_* series: the
           7-day view opened cold on the raw path (DCGM samples recomputed) and on the recorded one.

Targets (issue 12): pages <= 3 s cold and <= 1 s warm p95; report <= 5 s; serve <= 2 GB RSS; an
exporter cycle <= 5 s CPU and <= 1.5 GB RSS; the
recorded path >= 20x faster than the raw one cold; world set-up <= 15 min on 2 cores.
Run from the repository root: python benchmarks/scale.py [--gpus 10000 --days 30] [--tsdb DIR]
"""

import argparse
import hashlib
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]  # progress as it happens
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]

from tests.integration.browser import browser_page  # noqa: E402
from tests.integration.prom import PrometheusServer, free_port  # noqa: E402

from collect import block_count, dir_bytes, wait_for_compaction  # noqa: E402
from ui import p95  # noqa: E402

END = datetime(2026, 11, 20, tzinfo=UTC)
MARKER = "gpuwatch-scale.json"
GPUWATCH = str(Path(sys.executable).with_name("gpuwatch"))
PAGES = ("/", "/capacity", "/queues", "/waste", "/teams", "/teams/genai", "/health", "/rightsize")
WINDOWS = {"24h": timedelta(days=1), "7d": timedelta(days=7), "30d": timedelta(days=30)}
DONE = (
    "() => window.dash_clientside !== undefined"
    " && !document.querySelector('[data-dash-is-loading=\"true\"]')"
    " && /resolution|DCGM samples/.test(document.body.innerText)"
    # a view computed in the background says so until its data is drawn
    " && ![...document.querySelectorAll('.gw-pending')]"
    "      .some(e => /^(waiting for|computing)/.test(e.innerText))"
)


def world_args(
    gpus: int, days: float, step: str, *more: str, end: datetime = END, pods: int | None = None
) -> list[str]:
    """The fleet's flags: the same ones give the same fleet, so the API server and the history agree.
    pods: about this many pods per 30 days (None: the simulator's own churn, ~2 pods per GPU a day)."""
    fleet = ["--gpus", str(gpus), "--days", f"{days:g}", "--step", step, "--end", end.isoformat()]
    if pods is not None and days >= 1:
        fleet += ["--pods", str(round(pods * days / 30))]
    return [*fleet, *more]


@dataclass(frozen=True)
class World:
    """A scale world: its fleet (GPUs, days, pods per 30 days or the simulator's churn) at a 300 s step."""

    gpus: int
    days: float
    pods: int | None = None

    def args(self, *more: str) -> list[str]:
        return world_args(self.gpus, self.days, "300s", *more, pods=self.pods)

    def __str__(self) -> str:
        pods = "the simulator's churn" if self.pods is None else f"{self.pods:,} pods a month"
        return f"{self.gpus:,} GPUs x {self.days:g} d, {pods}"


def build_world(tsdb: Path, world: World) -> None:
    """The scale world's TSDB: built (timed) unless `tsdb` holds one with the same parameters."""
    params = {"world": world.args(), "rollups": rollups_fingerprint()}
    marker = tsdb / MARKER
    if tsdb.exists():
        if not marker.is_file() or json.loads(marker.read_text(encoding="utf-8")) != params:
            sys.exit(f"{tsdb} exists but was not built by this benchmark with these parameters: remove it")
        print(f"world: reusing {tsdb} ({dir_bytes(tsdb) / 1e6:,.0f} MB, {block_count(tsdb)} blocks)")
        return
    began = time.perf_counter()
    cmd = [GPUWATCH, "simulate", "backfill", *world.args("--no-dcgm")]
    subprocess.run([*cmd, "--tsdb", str(tsdb)], check=True)
    seconds = time.perf_counter() - began
    marker.write_text(json.dumps(params), encoding="utf-8")
    print(
        f"world: {' '.join(cmd[1:])} took {seconds:.0f} s ({seconds / 60:.1f} min), "
        f"{block_count(tsdb)} blocks"
    )


def rollups_fingerprint() -> str:
    """What the world's roll-ups were written by: a world written under other rules is not reused."""
    from gpuwatch.sources import ownseries

    rules = json.dumps([ownseries.rollup_rules(), ownseries.day_rollup_rules()], sort_keys=True)
    return hashlib.sha256(rules.encode()).hexdigest()[:16]


@contextmanager
def kube_api(
    gpus: int,
    days: float,
    step: str,
    workdir: Path,
    *,
    end: datetime = END,
    cpu_pods: int = 0,
    pods: int | None = None,
) -> Iterator[Path]:
    """The simulated Kubernetes API of the same fleet (its state at the world's end) and a kubeconfig."""
    kubeconfig = workdir / "kubeconfig"
    port = free_port()
    cmd = [GPUWATCH, "simulate", "kube-api", *world_args(gpus, days, step, end=end, pods=pods)]
    cmd += ["--port", str(port)]
    cmd += ["--cpu-pods", str(cpu_pods)]
    proc = subprocess.Popen([*cmd, "--write-kubeconfig", str(kubeconfig)], stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stderr is not None
        for line in proc.stderr:  # "Kubernetes API on ..." then "kubeconfig written to ..."
            if "kubeconfig written" in line:
                break
        else:
            raise RuntimeError(f"the simulated Kubernetes API did not start ({proc.wait()})")
        yield kubeconfig
    finally:
        proc.terminate()
        proc.wait(timeout=30)


@contextmanager
def serve(prometheus_url: str, kubeconfig: Path) -> Iterator[tuple[str, int]]:
    """`gpuwatch serve`, its log (a request line each) in serve.log beside the kubeconfig: an unread pipe
    would fill and stop the server mid-benchmark."""
    port = free_port()
    cmd = [GPUWATCH, "serve", "--prometheus-url", prometheus_url, "--kubeconfig", str(kubeconfig)]
    log = (kubeconfig.parent / "serve.log").open("wb")
    proc = subprocess.Popen([*cmd, "--port", str(port)], stdout=subprocess.DEVNULL, stderr=log)
    base = f"http://127.0.0.1:{port}"
    try:
        import requests

        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:  # ready: the cluster listed and the watches following it
            try:
                if requests.get(f"{base}/readyz", timeout=2).ok:
                    break
            except requests.ConnectionError:
                pass
            time.sleep(0.3)
        yield base, proc.pid
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        log.close()


def peak_rss_gb(pid: int) -> float:
    with open(f"/proc/{pid}/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024 / 1024
    return float("nan")


def query_of(window: timedelta) -> str:
    start, end = END - window, END
    return f"?window=custom&start={start:%Y-%m-%dT%H:%M:%SZ}&end={end:%Y-%m-%dT%H:%M:%SZ}"


def time_pages(base: str, pid: int, repeat: int, windows: list[str], world: timedelta) -> dict[str, float]:
    """Each page at each window: cold (the first visit) and the p95 of `repeat` more; returns the cold
    seconds by "<window> <path>"."""
    cold: dict[str, float] = {}
    with browser_page(1440, 1000) as (page, errors):
        # A fresh browser first fetches and compiles the app's JavaScript (Plotly's is megabytes), once:
        # timed apart, on the default view /readyz waited for, so a page's cold time is its window's.
        began = time.perf_counter()
        page.goto(base + "/", timeout=600_000)
        page.wait_for_function(DONE, timeout=600_000)
        seconds = time.perf_counter() - began
        print(f"  browser: the app's first load (its scripts; the default view warm) {seconds:.2f} s")
        for name in windows:
            length = WINDOWS[name]
            if length > world:
                continue
            for path in PAGES:
                url = f"{base}{path}{query_of(length)}"
                visits = []
                for _ in range(1 + repeat):
                    began = time.perf_counter()
                    page.goto(url, timeout=600_000)
                    page.wait_for_function(DONE, timeout=600_000)
                    visits.append(time.perf_counter() - began)
                cold[f"{name} {path}"] = visits[0]
                warm = (
                    f"warm p50 {statistics.median(visits[1:]):6.2f} s  p95 {p95(visits[1:]):6.2f} s"
                    if repeat
                    else ""
                )
                print(
                    f"  {name:<4} {path:<13} cold {visits[0]:7.2f} s   {warm}   "
                    f"serve RSS {peak_rss_gb(pid):.2f} GB",
                    flush=True,
                )
        if errors:
            print(f"  console errors: {errors[:3]}")
    return cold


# The reports timed: the default table (teams), CSV grouped by team, and JSON with every workload.
REPORTS = {
    "table": ("--format", "table"),
    "csv by team": ("--format", "csv", "--group-by", "team"),
    "json": ("--format", "json"),
}


def time_report(prometheus_url: str, kubeconfig: Path, days: float, flags: tuple[str, ...]) -> float:
    start = END - timedelta(days=days)
    cmd = [GPUWATCH, "report", "--prometheus-url", prometheus_url, "--kubeconfig", str(kubeconfig)]
    cmd += ["--start", start.isoformat(), "--end", END.isoformat(), *flags]
    began = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - began


def compare(workdir: Path, args: argparse.Namespace) -> None:
    """Raw against recorded on one world, cold, each in a fresh service (no shared cache)."""
    from gpuwatch.core.config import KubernetesSettings, PrometheusSettings, Settings, ViewSettings
    from gpuwatch.core.model import Window
    from gpuwatch.read.service import FleetService, LiveSources, demo_settings
    from gpuwatch.views.reader import open_view

    tsdb = Path(args.compare_tsdb) if args.compare_tsdb else workdir / "compare-tsdb"
    days, gpus = args.compare_days, args.compare_gpus
    began = time.perf_counter()
    cmd = [GPUWATCH, "simulate", "backfill", *world_args(gpus, days, "60s")]
    cmd += ["--metrics", "DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_PROF_GR_ENGINE_ACTIVE"]
    marker, params = tsdb / MARKER, [*cmd[1:], rollups_fingerprint()]
    if marker.is_file() and json.loads(marker.read_text(encoding="utf-8")) == params:
        print(f"compare: reusing {tsdb}")
    else:
        if marker.is_file():  # this benchmark's world of other parameters or rules: replaced
            shutil.rmtree(tsdb)
        subprocess.run([*cmd, "--tsdb", str(tsdb)], check=True)
        marker.write_text(json.dumps(params), encoding="utf-8")
    print(
        f"compare: {gpus:,} GPUs x {days:g} d world (DCGM + gpuwatch_*) in "
        f"{time.perf_counter() - began:.0f} s"
    )
    window = Window(start=END - timedelta(days=days), end=END, step_seconds=300)
    with PrometheusServer(tsdb) as prom, kube_api(gpus, days, "60s", workdir) as kubeconfig:
        wait_for_compaction(prom.url, tsdb)
        seconds = {}
        for name, limit in (("raw", 10**13), ("recorded", 0)):
            base = Settings(
                prometheus=PrometheusSettings(url=prom.url),
                kubernetes=KubernetesSettings(kubeconfig=str(kubeconfig)),
            )
            settings = replace(demo_settings(base), views=ViewSettings(raw_max_gpu_samples=limit))
            service = FleetService(settings=settings, sources=LiveSources(settings))
            began = time.perf_counter()
            view = open_view(service, window, computed_at=END)
            view.ledger_timeline(), view.team_timeline()  # what the overview draws
            seconds[name] = time.perf_counter() - began
            print(f"  {name:<9} {seconds[name]:7.2f} s  ({view.read_path.describe()})", flush=True)
    print(f"compare: recorded is {seconds['raw'] / seconds['recorded']:.1f}x faster cold (target >= 20x)")


def exporter(workdir: Path, args: argparse.Namespace) -> None:
    """`gpuwatch export` cycles on the same fleet size: its DCGM series of the last hours backfilled (the
    world ends at the minute the benchmark starts, as the exporter reads `now`), the Kubernetes API
    listing --cpu-pods more pods without GPUs. CPU seconds of this process and its peak RSS per cycle."""
    from gpuwatch.core.config import KubernetesSettings, PrometheusSettings, Settings
    from gpuwatch.read.service import FleetService, demo_settings
    from gpuwatch.surfaces.exporter.collector import PUBLISHED_FIELD_SECONDS, ExportLoop

    end = datetime.now(UTC).replace(second=0, microsecond=0)
    tsdb, hours = workdir / "exporter-tsdb", 2.0
    began = time.perf_counter()
    cmd = [GPUWATCH, "simulate", "backfill", *world_args(args.gpus, hours / 24, "60s", end=end)]
    subprocess.run([*cmd, "--no-gpuwatch-series", "--tsdb", str(tsdb)], check=True)
    print(
        f"exporter: {args.gpus:,} GPUs' DCGM series of the last {hours:g} h written in "
        f"{time.perf_counter() - began:.0f} s"
    )
    with (
        PrometheusServer(tsdb) as prom,
        kube_api(args.gpus, hours / 24, "60s", workdir, end=end, cpu_pods=args.cpu_pods) as kubeconfig,
    ):
        base = Settings(
            prometheus=PrometheusSettings(url=prom.url),
            kubernetes=KubernetesSettings(kubeconfig=str(kubeconfig)),
        )
        # As `gpuwatch export` builds it: the framebuffer, energy and power read for the samples it publishes.
        service = FleetService.live(
            demo_settings(base), watch_cluster=True, field_seconds=PUBLISHED_FIELD_SECONDS
        )
        loop = ExportLoop(service)
        for n in range(4):
            if n:  # a new minute: a new window, not the service's cached analysis of the last one
                time.sleep(61 - datetime.now(UTC).second)
            cpu, wall = time.process_time(), time.perf_counter()
            result = loop.run_once()
            cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
            series = sum(len(f.samples) for f in result.families)
            print(
                f"  cycle {n + 1}: {wall:6.2f} s wall, {cpu:6.2f} s CPU (target <= 5 s), "
                f"peak RSS {peak_rss_gb(os.getpid()):.2f} GB (target <= 1.5 GB), {series:,} series"
                + (f", error: {result.error}" if result.error else ""),
                flush=True,
            )
        state = loop.service.sources.cluster_state()
        print(f"exporter: the cache holds {len(state.pods):,} GPU pods of the API server's listing")


def measure(tsdb: Path, world: World, workdir: Path, args: argparse.Namespace) -> dict[str, float]:
    """Reports and pages on one world (built or reused): their seconds by name, and serve's peak RSS."""
    build_world(tsdb, world)
    seconds: dict[str, float] = {}
    with PrometheusServer(tsdb) as prom:
        wait_for_compaction(prom.url, tsdb)
        print(f"prometheus: {block_count(tsdb)} blocks, {dir_bytes(tsdb) / 1e6:,.0f} MB")
        seconds["pods"] = count_pods(prom.url, world)
        print(f"pods: {seconds['pods']:,.0f} held GPUs in the {world.days:g} days")
        with kube_api(world.gpus, world.days, "300s", workdir, pods=world.pods) as kubeconfig:
            if "report" not in args.skip:
                for name, flags in REPORTS.items():
                    runs = [time_report(prom.url, kubeconfig, world.days, flags) for _ in range(args.reports)]
                    seconds[f"report {name}"] = runs[0]
                    target = 15 if name == "json" else 5
                    print(
                        f"report: {world.days:g} d, {name}: "
                        + ", ".join(f"{t:.2f} s" for t in runs)
                        + f" (target <= {target} s)",
                        flush=True,
                    )
            if "pages" not in args.skip:
                with serve(prom.url, kubeconfig) as (base, pid):
                    pages = time_pages(
                        base, pid, args.repeat, args.windows.split(","), timedelta(days=world.days)
                    )
                    seconds |= pages
                    seconds["serve RSS GB"] = peak_rss_gb(pid)
                    print(f"serve: peak RSS {seconds['serve RSS GB']:.2f} GB (target <= 2 GB)")
    return seconds


# The scaling table's worlds (issue 35): GPUs at the simulator's churn, and pods at 10,000 GPUs.
SWEEP = (
    World(2_500, 30.0),
    World(5_000, 30.0),
    World(10_000, 30.0),
    World(10_000, 30.0, 50_000),
    World(10_000, 30.0, 200_000),
)


def sweep(workdir: Path, args: argparse.Namespace) -> None:
    """Cold pages and reports at 30 d on each world of SWEEP (kept under --worlds when given), one world's
    Prometheus at a time; the table (markdown) printed, the chart written as HTML and PNG."""
    keep = Path(args.worlds) if args.worlds else workdir
    results = []
    for world in SWEEP:
        print(f"sweep: {world}", flush=True)
        name = f"world-{world.gpus}-{world.days:g}d-{world.pods or 'churn'}"
        began = time.perf_counter()
        seconds = measure(
            keep / name,
            world,
            workdir,
            argparse.Namespace(**{**vars(args), "repeat": 0, "reports": 1, "windows": "30d"}),
        )
        results.append({"gpus": world.gpus, "churn": world.pods is None, **seconds})
        print(f"sweep: {world} done in {time.perf_counter() - began:.0f} s", flush=True)
    (Path(args.chart).with_suffix(".json")).write_text(json.dumps(results, indent=1), encoding="utf-8")
    print(scaling_table(results))
    chart(results, Path(args.chart))


def count_pods(prometheus_url: str, world: World) -> int:
    """The pods that held GPUs over the world's window, counted by Prometheus from their daily roll-ups."""
    import requests

    held = f"day:gpuwatch_pod_gpu_allocation:sum_over_time[{round(world.days) + 1}d]"
    params = {"query": f"count(group by (namespace, pod) (last_over_time({held})))"}
    params["time"] = str((END + timedelta(days=1)).timestamp())
    answer = requests.get(f"{prometheus_url}/api/v1/query", params=params, timeout=600).json()
    result = answer["data"]["result"]
    return int(float(result[0]["value"][1])) if result else 0


def scaling_table(results: list[dict[str, Any]]) -> str:
    """The sweep as a markdown table: a row per world, a column per page and report (cold, 30 d)."""
    columns = [f"30d {p}" for p in PAGES] + [f"report {r}" for r in REPORTS]
    head = "| GPUs | pods in 30 d | " + " | ".join(c.removeprefix("30d ") for c in columns) + " | serve RSS |"
    lines = [head, "|" + "---|" * (len(columns) + 3)]
    for r in results:
        cells = [f"{r[c]:.1f} s" if c in r else "–" for c in columns]
        rss = f"{r['serve RSS GB']:.2f} GB" if "serve RSS GB" in r else "–"
        lines.append(f"| {r['gpus']:,} | {r['pods']:,.0f} | " + " | ".join(cells) + f" | {rss} |")
    return "\n".join(lines)


def chart(results: list[dict[str, Any]], path: Path) -> None:
    """Cold seconds against GPUs (the simulator's churn) and against pods (10,000 GPUs), a line per page
    and report: HTML (plotly) and PNG (the HTML in headless Chromium)."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    figure = make_subplots(
        rows=1,
        cols=2,
        subplot_titles=("against GPUs (the simulator's churn)", "against pods in 30 days (10,000 GPUs)"),
    )
    by_gpus = sorted((r for r in results if r["churn"]), key=lambda r: r["gpus"])
    by_pods = sorted(
        (r for r in results if r["gpus"] == max(x["gpus"] for x in results)), key=lambda r: r["pods"]
    )
    names = [f"30d {p}" for p in PAGES] + [f"report {r}" for r in REPORTS]
    for i, name in enumerate(names):
        color = f"hsl({round(360 * i / len(names))},60%,45%)"
        for col, rows, x in ((1, by_gpus, "gpus"), (2, by_pods, "pods")):
            figure.add_trace(
                go.Scatter(
                    x=[r[x] for r in rows if name in r],
                    y=[r[name] for r in rows if name in r],
                    name=name.removeprefix("30d "),
                    legendgroup=name,
                    showlegend=col == 1,
                    mode="lines+markers",
                    line={"color": color, "dash": "dot" if name.startswith("report") else "solid"},
                ),
                row=1,
                col=col,
            )
    for target in (3, 5, 15):  # the targets: pages, reports, the every-workload JSON
        figure.add_hline(y=target, line_dash="dash", line_color="#999", row=1, col="all")
    highest = max((v for r in results for k, v in r.items() if k in names), default=10.0)
    top = math.log10(max(highest, 15) * 1.5)
    figure.update_yaxes(title_text="cold seconds, 30-day window", type="log", range=[-0.3, top])
    figure.update_xaxes(title_text="GPUs", row=1, col=1)
    figure.update_xaxes(title_text="pods in the window", row=1, col=2)
    figure.update_layout(
        title="gpuwatch at scale: cold page and report times (one Prometheus, 2 cores; dashed: 3, 5, 15 s)",
        width=1400,
        height=600,
        template="plotly_white",
    )
    html = path.with_suffix(".html")
    figure.write_html(html, include_plotlyjs=True, full_html=True)  # offline: the script inside
    with browser_page(1400, 620) as (page, _):
        page.goto(html.resolve().as_uri())
        page.wait_for_selector(".main-svg")
        page.screenshot(path=str(path.with_suffix(".png")))
    print(f"chart: {html} and {path.with_suffix('.png')}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", type=int, default=10_000)
    parser.add_argument("--days", type=float, default=30.0)
    parser.add_argument("--pods", type=int, help="pods per 30 days (default: the simulator's churn)")
    parser.add_argument("--tsdb", help="keep the scale world here (reused when it matches)")
    parser.add_argument("--repeat", type=int, default=10, help="warm visits per page and window")
    parser.add_argument("--windows", default="24h,7d,30d", help="the page windows, of 24h, 7d, 30d")
    parser.add_argument("--reports", type=int, default=3, help="runs of each report")
    parser.add_argument("--compare-gpus", type=int, default=1000)
    parser.add_argument("--compare-days", type=float, default=7.0)
    parser.add_argument("--compare-tsdb", help="keep the comparison's world here (reused when it matches)")
    parser.add_argument("--cpu-pods", type=int, default=40_000, help="pods without GPUs the API lists")
    parser.add_argument("--sweep", action="store_true", help="only the scaling table and its chart")
    parser.add_argument("--worlds", help="--sweep: keep its worlds under this directory")
    parser.add_argument("--chart", default="docs/scaling", help="--sweep: the chart's path, less .html/.png")
    parser.add_argument("--skip", nargs="*", default=[], choices=("pages", "report", "exporter", "compare"))
    args = parser.parse_args()
    for tool in ("promtool", "prometheus", "chromium"):
        if shutil.which(tool) is None:
            sys.exit(f"{tool} not found: run `make test-deps` first")
    with tempfile.TemporaryDirectory(prefix="gpuwatch-scale-") as scratch:
        workdir = Path(scratch)
        if args.sweep:
            sweep(workdir, args)
            return 0
        world = World(args.gpus, args.days, args.pods)
        if "pages" not in args.skip or "report" not in args.skip:
            measure(Path(args.tsdb) if args.tsdb else workdir / "tsdb", world, workdir, args)
        if "exporter" not in args.skip:
            exporter(workdir, args)
        if "compare" not in args.skip:
            compare(workdir, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
