"""Benchmark: read a week of a 1,000-GPU fleet's utilization from a real Prometheus, three ways.

The simulated fleet (default 1,000 GPUs over 7 days, scraped every 60 s) is backfilled into a
Prometheus TSDB with promtool, then the per-GPU-unit utilization table at a 5-min step (one row per
step, unit and workload: the mean of the step's scrapes; PROF when the unit reports it, else
GPU_UTIL/100) is produced by
  (a) gpuwatch: PrometheusSource.gpu_samples(window): avg_over_time per alias on the server, chunked
      range queries (a few at once), label work per series on the client, each chunk's rows built in
      the worker thread that receives it;
  (b) naive: prometheus-api-client get_metric_range_data (chunk_size 1 day) for both metrics,
      MetricRangeDataFrame, pandas groupby to steps a day at a time, then a merge to the same table
      (checked equal to (a));
  (c) bare: gpuwatch's range queries (same chunks, as many at once) with plain requests, JSON-decoded,
      nothing else: the floor for that data.
Every run is a fresh child process; approaches take turns, `--runs` rounds. Printed: median wall-clock
seconds (and the client's and Prometheus' CPU seconds), the ratios naive/gpuwatch (target >= 10x) and
gpuwatch/bare (target <= 1.5x), rows produced, each child's peak RSS, and the set-up (simulate,
OpenMetrics files, promtool, Prometheus' compaction) on a line of its own.

promtool re-reads its whole input once per block it writes, so the history is written as one
OpenMetrics file per 2 h block (Prometheus' block boundaries) and promtool runs per file, `--jobs` at a
time, while the next file is written. `--tsdb DIR` keeps the TSDB for the
next run (set-up is skipped when DIR holds one built with the same parameters).
Not a test: nothing is asserted on time. Run from the repository root: python benchmarks/collect.py
"""

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import requests

from gpuwatch.core.model import MAX_POINTS_PER_SERIES, Window
from gpuwatch.sim.backfill import block_ranges
from gpuwatch.sources.dcgm import UTIL_FIELDS, ExporterPods
from gpuwatch.sources.promclient import MAX_CHUNK_SECONDS, MAX_CONCURRENT_QUERIES
from gpuwatch.sources.prometheus import PrometheusSource

ROOT = Path(__file__).resolve().parents[1]
END = datetime(2026, 11, 20, tzinfo=UTC)
PROF = "DCGM_FI_PROF_GR_ENGINE_ACTIVE"
DEV = "DCGM_FI_DEV_GPU_UTIL"
METRICS = (DEV, PROF)  # only what the collection reads
LAYOUT = "servicemonitor"  # kube-prometheus-stack: workload labels stored as exported_*
MARKER = "gpuwatch-collect.json"
KEY = ["timestamp", "node", "uuid", "gpu_instance_id", "namespace", "pod", "container"]
APPROACHES = ("bare", "gpuwatch", "naive")


# -- set-up: simulated fleet -> OpenMetrics per 2 h block -> promtool -> compacted TSDB ------------


def _prom() -> Any:
    """tests/integration/prom.py (promtool and Prometheus helpers), importable from the repo root."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    import tests.integration.prom as prom

    return prom


def fleet_params(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "gpus": args.gpus,
        "days": args.days,
        "step_seconds": args.step,
        "scrape_seconds": args.scrape,
        "seed": args.seed,
        "end": END.isoformat(),
        "metrics": list(METRICS),
        "layout": LAYOUT,
    }


def backfill(fleet: Any, tsdb: Path, jobs: int) -> dict[str, float]:
    """One OpenMetrics file per 2 h block, promtool on each (`jobs` at once) while the next is written."""
    from gpuwatch.sim.exposition import write_backfill

    prom = _prom()
    tsdb.mkdir(parents=True)
    ranges = block_ranges(fleet.window)
    work = Path(tempfile.mkdtemp(prefix="gpuwatch-collect-om-"))
    running: list[tuple[subprocess.Popen[bytes], Path]] = []
    samples = written_bytes = 0
    write_seconds = 0.0

    def reap(limit: int) -> None:
        while len(running) > limit:
            for item in list(running):
                proc, path = item
                if proc.poll() is None:
                    continue
                running.remove(item)
                err = proc.stderr.read().decode() if proc.stderr else ""
                path.unlink()
                if proc.returncode != 0:
                    raise RuntimeError(f"promtool failed on {path.name} ({proc.returncode}): {err.strip()}")
            if len(running) > limit:
                time.sleep(0.05)

    try:
        for k, between in enumerate(ranges):
            path = work / f"block-{k:04d}.om"
            began = time.perf_counter()
            with path.open("w", encoding="utf-8") as out:
                samples += write_backfill(fleet, out, layout=LAYOUT, metrics=METRICS, between=between)
            write_seconds += time.perf_counter() - began
            written_bytes += path.stat().st_size
            reap(jobs - 1)
            cmd = [
                prom.PROMTOOL,
                "tsdb",
                "create-blocks-from",
                "openmetrics",
                "--quiet",
                str(path),
                str(tsdb),
            ]
            running.append((subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE), path))
            if (k + 1) % 12 == 0 or k + 1 == len(ranges):
                print(f"  backfill: {k + 1}/{len(ranges)} blocks written, {samples:,} samples", flush=True)
        reap(0)
    finally:
        for proc, _ in running:
            proc.kill()
            proc.wait()
        shutil.rmtree(work, ignore_errors=True)
    return {
        "samples": samples,
        "openmetrics_bytes": written_bytes,
        "write_seconds": write_seconds,
        "blocks_written": len(ranges),
    }


def _self_metrics(url: str) -> dict[str, float]:
    """Prometheus' own TSDB gauges and counters (unlabelled ones) from its /metrics."""
    out = {}
    for line in requests.get(f"{url}/metrics", timeout=10).text.splitlines():
        if line.startswith("prometheus_tsdb_") and "{" not in line:
            name, _, value = line.partition(" ")
            out[name] = float(value)
    return out


def wait_for_compaction(url: str, tsdb: Path, *, quiet_seconds: float = 10, timeout: float = 1800) -> None:
    """Wait for Prometheus' first compaction (triggered a minute after start) to merge the 2 h blocks.

    A real server holding a week has a few long blocks, not 84 short ones; and a compaction running
    during the measurements would steal a core.
    """
    deadline = time.monotonic() + timeout
    last: tuple[float, ...] = ()
    quiet_since = time.monotonic()
    while time.monotonic() < deadline:
        m = _self_metrics(url)
        state = (
            m.get("prometheus_tsdb_blocks_loaded", 0),
            m.get("prometheus_tsdb_compactions_total", 0),
            m.get("prometheus_tsdb_compactions_failed_total", 0),
            float(any(".tmp" in p.name for p in tsdb.iterdir())),
        )
        if state != last:
            last, quiet_since = state, time.monotonic()
        triggered = m.get("prometheus_tsdb_compactions_triggered_total", 0) >= 1
        if triggered and not state[3] and time.monotonic() - quiet_since >= quiet_seconds:
            if state[2]:
                raise RuntimeError("prometheus failed to compact the backfilled blocks; see its log")
            return
        time.sleep(1)
    raise RuntimeError(f"prometheus still compacting after {timeout:.0f}s")


def dir_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def block_count(tsdb: Path) -> int:
    return sum(1 for p in tsdb.iterdir() if (p / "meta.json").is_file())


# -- the three approaches (each runs in a child process) ---------------------------------------------


def window_of(params: dict[str, Any]) -> Window:
    end = datetime.fromisoformat(params["end"])
    return Window(start=end - timedelta(days=params["days"]), end=end, step_seconds=params["step_seconds"])


def run_gpuwatch(url: str, window: Window, exporters: ExporterPods) -> tuple[int, pd.DataFrame]:
    source = PrometheusSource(url, timeout_seconds=600)
    try:
        frame = source.gpu_samples(window, exporters=exporters)
    finally:
        source.close()
    return len(frame), frame


def run_naive(
    url: str, window: Window, exporters: ExporterPods, chunk: timedelta
) -> tuple[int, pd.DataFrame]:
    """What a user writes with prometheus-api-client: raw samples per metric and `chunk` of the window
    into MetricRangeDataFrame, pandas to one row per step, unit and workload (a chunk at a time, else a
    week of raw samples does not fit in memory), then PROF where the unit has it, else GPU_UTIL/100."""
    from prometheus_api_client import MetricRangeDataFrame, PrometheusConnect

    prom = PrometheusConnect(url=url, disable_ssl=True, timeout=600)
    step = f"{window.step_seconds}s"
    tables: dict[str, list[pd.DataFrame]] = {PROF: [], DEV: []}
    begin = window.start
    while begin < window.end:
        until = min(window.end, begin + chunk)
        for metric in (PROF, DEV):
            data = prom.get_metric_range_data(metric, start_time=begin, end_time=until, chunk_size=chunk)
            df = MetricRangeDataFrame(data).reset_index()
            del data
            df["timestamp"] = df["timestamp"].dt.tz_localize("UTC")
            host = df["Hostname"] if "hostname" not in df else df["Hostname"].fillna(df["hostname"])
            df["node"] = host.map(exporters.node_by_pod).fillna(host)  # exporter pod name -> its node
            df["uuid"] = df["UUID"]
            df["gpu_instance_id"] = df["GPU_I_ID"].fillna("") if "GPU_I_ID" in df else ""
            for column in ("namespace", "pod", "container"):
                df[column] = df[f"exported_{column}"].fillna("")
            if metric == DEV:
                df["value"] = df["value"] / 100
            # Step buckets per unit and workload; copies of a time-sliced GPU (vgpu) are averaged.
            tables[metric].append(
                df.groupby([pd.Grouper(key="timestamp", freq=step), *KEY[1:]])["value"].mean().reset_index()
            )
            del df
        begin = until
    prof, dev = (pd.concat(tables[m], ignore_index=True) for m in (PROF, DEV))
    units = ["node", "uuid", "gpu_instance_id"]
    with_prof = prof.loc[prof["value"].notna(), units].drop_duplicates()
    dev = dev.merge(with_prof, on=units, how="left", indicator=True)
    dev = dev[dev["_merge"] == "left_only"].drop(columns="_merge")
    util = pd.concat([prof.assign(util_source=PROF), dev.assign(util_source=DEV)], ignore_index=True)
    util = util.rename(columns={"value": "util_ratio"})
    return len(util), util


def run_bare(url: str, window: Window) -> tuple[int, None]:
    """The floor: gpuwatch's range queries (same aliases, chunks and concurrency) over plain HTTP,
    JSON-decoded, points counted; nothing else."""
    planner = PrometheusSource(url)
    queries = [query for _, query in planner.alias_queries(window, UTIL_FIELDS)]
    planner.close()
    step = window.step_seconds
    first = window.start + timedelta(seconds=step)  # sample i is evaluated at t_i + step
    per_chunk = max(1, min(MAX_POINTS_PER_SERIES, int(MAX_CHUNK_SECONDS // step)))
    session = requests.Session()

    def fetch(task: tuple[str, int]) -> int:
        query, a = task
        b = min(window.n_samples, a + per_chunk)
        params = {
            "query": query,
            "start": (first + timedelta(seconds=a * step)).timestamp(),
            "end": (first + timedelta(seconds=(b - 1) * step)).timestamp(),
            "step": step,
        }
        reply = session.get(f"{url}/api/v1/query_range", params=params, timeout=600)
        reply.raise_for_status()
        return sum(len(s["values"]) for s in reply.json()["data"]["result"])

    tasks = [(q, a) for q in queries for a in range(0, window.n_samples, per_chunk)]
    with ThreadPoolExecutor(max_workers=MAX_CONCURRENT_QUERIES) as pool:
        return sum(pool.map(fetch, tasks)), None


def child(args: argparse.Namespace) -> None:
    """Run one approach once; print {seconds, cpu_seconds, rows, peak_kib, baseline_kib} as JSON."""
    spec = json.loads(Path(args.child_spec).read_text(encoding="utf-8"))
    window = window_of(spec["params"])
    exporters = ExporterPods(node_by_pod=spec["node_by_pod"], node_by_ip=spec["node_by_ip"])
    work: dict[str, Callable[[], tuple[int, pd.DataFrame | None]]] = {
        "gpuwatch": lambda: run_gpuwatch(spec["url"], window, exporters),
        "naive": lambda: run_naive(spec["url"], window, exporters, timedelta(days=spec["chunk_days"])),
        "bare": lambda: run_bare(spec["url"], window),
    }
    baseline_kib = peak_rss_kib()
    began, cpu = time.perf_counter(), time.process_time()
    rows, frame = work[args.child]()
    seconds, cpu_seconds = time.perf_counter() - began, time.process_time() - cpu
    peak_kib = peak_rss_kib()
    if frame is not None and spec["keep"]:
        frame.to_pickle(spec["keep"])
    result = {
        "seconds": seconds,
        "cpu_seconds": cpu_seconds,
        "rows": rows,
        "peak_kib": peak_kib,
        "baseline_kib": baseline_kib,
    }
    print(json.dumps(result))


def peak_rss_kib() -> int:
    """This process' peak resident set (VmHWM). Not ru_maxrss: Linux carries that over from the parent
    across fork and exec, so a child would report the parent's peak."""
    for line in Path("/proc/self/status").read_text(encoding="utf-8").splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def _cpu_seconds(pid: int) -> float:
    """User + system CPU seconds a process has used so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text(encoding="utf-8").rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def prometheus_pid(server: Any) -> int:
    """The prometheus process under PrometheusServer's `timeout` wrapper."""
    wrapper = server.process.pid
    children = Path(f"/proc/{wrapper}/task/{wrapper}/children").read_text(encoding="utf-8").split()
    return int(children[0]) if children else int(wrapper)


def measure(name: str, spec: dict[str, Any], workdir: Path, server_pid: int) -> dict[str, Any]:
    """One run of one approach in a fresh child process, with the CPU Prometheus spent meanwhile."""
    spec_path = workdir / f"{name}.json"
    spec_path.write_text(json.dumps(spec), encoding="utf-8")
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", name, "--child-spec", str(spec_path)]
    server_cpu = _cpu_seconds(server_pid)
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    server_cpu = _cpu_seconds(server_pid) - server_cpu
    if done.returncode != 0:
        raise RuntimeError(f"{name} failed ({done.returncode}):\n{done.stderr[-4000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    result["server_cpu_seconds"] = server_cpu
    return result


def check_equal(gpuwatch: pd.DataFrame, naive: pd.DataFrame) -> str:
    """The two tables hold the same keys and utilization (float tolerance) and the same util_source."""
    a = gpuwatch[[*KEY, "util_ratio", "util_source"]].sort_values(KEY).reset_index(drop=True)
    b = naive[[*KEY, "util_ratio", "util_source"]].sort_values(KEY).reset_index(drop=True)
    if len(a) != len(b):
        raise AssertionError(f"gpuwatch has {len(a):,} rows, the naive table {len(b):,}")
    for column in [*KEY, "util_source"]:
        same = a[column].to_numpy() == b[column].to_numpy()
        if not same.all():
            i = int(np.flatnonzero(~same)[0])
            raise AssertionError(
                f"{column} differs at row {i}: {a.iloc[i].to_dict()} vs {b.iloc[i].to_dict()}"
            )
    x, y = a["util_ratio"].to_numpy(dtype=float), b["util_ratio"].to_numpy(dtype=float)
    close = np.isclose(x, y, rtol=1e-9, atol=1e-12, equal_nan=True)
    if not close.all():
        i = int(np.flatnonzero(~close)[0])
        raise AssertionError(f"util_ratio differs at row {i}: {a.iloc[i].to_dict()} vs {b.iloc[i].to_dict()}")
    diff = float(np.nanmax(np.abs(x - y))) if len(x) else 0.0
    return f"equal: {len(a):,} rows, all keys, util_source and util_ratio (max |diff| {diff:.1e})"


@contextmanager
def tsdb_dir(arg: str | None) -> Iterator[Path]:
    """--tsdb DIR (kept), else a temporary directory removed at the end."""
    if arg:
        yield Path(arg).resolve()
        return
    tmp = Path(tempfile.mkdtemp(prefix="gpuwatch-collect-"))
    try:
        yield tmp / "tsdb"
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def mib(kib: float) -> str:
    return f"{kib / 1024:,.0f} MiB"


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--gpus", type=int, default=1000)
    parser.add_argument("--days", type=float, default=7.0)
    parser.add_argument("--step", type=int, default=300, help="query step, seconds (default 300)")
    parser.add_argument(
        "--scrape",
        type=int,
        default=60,
        help="scrape interval of the stored DCGM series, seconds (default 60; dcgm-exporter collects "
        "every 30 s by default, so real TSDBs hold at least as many samples)",
    )
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument(
        "--runs", type=int, default=3, help="runs per approach (round robin); medians printed"
    )
    parser.add_argument("--chunk-days", type=float, default=1.0, help="the naive approach's chunk_size")
    parser.add_argument("--jobs", type=int, default=2, help="promtool processes at once during set-up")
    parser.add_argument("--tsdb", help="TSDB directory to build and keep, or reuse when it exists")
    parser.add_argument("--skip", nargs="*", default=[], choices=APPROACHES, help="approaches to leave out")
    parser.add_argument("--child", choices=APPROACHES, help=argparse.SUPPRESS)
    parser.add_argument("--child-spec", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child(args)
        return
    params = fleet_params(args)
    window = window_of(params)
    with tsdb_dir(args.tsdb) as tsdb:
        spec, backfill_stats = set_up(args, params, tsdb)
        with _prom().PrometheusServer(tsdb) as server:
            if backfill_stats is not None:
                finish_set_up(server.url, tsdb, params, backfill_stats)
            with tempfile.TemporaryDirectory(prefix="gpuwatch-collect-") as tmp:
                results, verdict = run_all(args, window, {**spec, "url": server.url}, Path(tmp), server)
    report(results, args, verdict)


def set_up(args: argparse.Namespace, params: dict[str, Any], tsdb: Path) -> tuple[dict[str, Any], Any]:
    """Simulate the fleet; backfill the TSDB unless it is there. (child spec, backfill stats or None)."""
    from gpuwatch.sim import build_demo_fleet

    began = time.perf_counter()
    fleet = build_demo_fleet(
        seed=args.seed, end=END, days=args.days, step_seconds=args.scrape, gpus=args.gpus
    )
    build_seconds = time.perf_counter() - began
    gpus = sum(n.gpu_count for n in fleet.nodes)
    print(
        f"fleet: {gpus:,} GPUs ({len(fleet.gpus):,} telemetry units), {len(fleet.nodes)} nodes, "
        f"{fleet.window.n_samples:,} scrapes of {args.scrape} s = {args.days:g} days; "
        f"simulated in {build_seconds:.1f} s"
    )
    spec = {
        "params": params,
        "node_by_pod": {t.pod: t.node for t in fleet.targets},
        "node_by_ip": {t.ip: t.node for t in fleet.targets},
        "chunk_days": args.chunk_days,
    }
    marker = tsdb / MARKER
    if tsdb.exists():
        if not marker.is_file() or json.loads(marker.read_text(encoding="utf-8")) != params:
            sys.exit(f"{tsdb} exists but was not built by this benchmark with these parameters: remove it")
        print(f"set-up: reusing {tsdb} ({dir_bytes(tsdb) / 1e6:,.0f} MB, {block_count(tsdb)} blocks)")
        return spec, None
    print(f"set-up: backfilling {tsdb}: one OpenMetrics file per 2 h block, {args.jobs} promtool at once")
    began = time.perf_counter()
    stats = backfill(fleet, tsdb, args.jobs)
    stats["build_seconds"] = build_seconds
    stats["backfill_seconds"] = time.perf_counter() - began
    return spec, stats


def finish_set_up(url: str, tsdb: Path, params: dict[str, Any], stats: dict[str, float]) -> None:
    """Let the fresh server compact the 2 h blocks, mark the TSDB reusable, print the set-up line."""
    blocks = block_count(tsdb)
    began = time.perf_counter()
    wait_for_compaction(url, tsdb)
    compact_seconds = time.perf_counter() - began
    (tsdb / MARKER).write_text(json.dumps(params), encoding="utf-8")
    total = stats["build_seconds"] + stats["backfill_seconds"] + compact_seconds
    print(
        f"set-up (not part of the comparison): {stats['samples']:,} samples as "
        f"{stats['openmetrics_bytes'] / 1e6:,.0f} MB of OpenMetrics in {stats['blocks_written']:.0f} files; "
        f"simulate {stats['build_seconds']:.1f} s + write & promtool {stats['backfill_seconds']:.1f} s "
        f"(writing {stats['write_seconds']:.1f} s of it) + compaction {blocks} -> {block_count(tsdb)} blocks "
        f"{compact_seconds:.1f} s = {total:.1f} s; TSDB {dir_bytes(tsdb) / 1e6:,.0f} MB"
    )


def run_all(
    args: argparse.Namespace, window: Window, spec: dict[str, Any], workdir: Path, server: Any
) -> tuple[dict[str, list[dict[str, Any]]], str]:
    """`--runs` rounds of every approach, round robin (a noisy neighbour then hits each alike); the last
    round keeps the gpuwatch and naive tables, which must be equal."""
    warm_up(spec["url"], window)
    pid = prometheus_pid(server)
    names = [n for n in APPROACHES if n not in args.skip]
    results: dict[str, list[dict[str, Any]]] = {n: [] for n in names}
    for run in range(args.runs):
        for name in names:
            keep = run == args.runs - 1 and name != "bare"
            r = measure(name, {**spec, "keep": str(workdir / f"{name}.pkl") if keep else ""}, workdir, pid)
            results[name].append(r)
            print(
                f"  run {run + 1}/{args.runs} {name:<8} {r['seconds']:7.2f} s  (client CPU "
                f"{r['cpu_seconds']:.2f} s, Prometheus CPU {r['server_cpu_seconds']:.2f} s)",
                flush=True,
            )
    if "gpuwatch" not in names or "naive" not in names:
        return results, "not checked (an approach was skipped)"
    return results, check_equal(
        pd.read_pickle(workdir / "gpuwatch.pkl"), pd.read_pickle(workdir / "naive.pkl")
    )


def warm_up(url: str, window: Window) -> None:
    """Read every sample of both metrics once, so no approach pays for loading blocks from disk."""
    for metric in METRICS:
        expr = f"count(count_over_time({metric}[{int(window.duration_seconds)}s]))"
        params = {"query": expr, "time": window.end.timestamp()}
        requests.get(f"{url}/api/v1/query", params=params, timeout=600).raise_for_status()


def report(results: dict[str, list[dict[str, Any]]], args: argparse.Namespace, verdict: str) -> None:
    labels = {
        "gpuwatch": "(a) gpuwatch PrometheusSource.gpu_samples",
        "naive": f"(b) naive prometheus-api-client + pandas (chunk_size {args.chunk_days:g} d)",
        "bare": "(c) bare PromQL query_range + json",
    }
    print()
    print(
        f"collection of {args.gpus:,} GPUs x {args.days:g} d at a {args.step} s step "
        f"(scraped every {args.scrape} s), "
        f"median of {args.runs} runs (wall s; client and Prometheus CPU s are medians too):"
    )
    median: dict[str, float] = {}
    for name in ("gpuwatch", "naive", "bare"):
        runs = results.get(name)
        if not runs:
            continue
        median[name] = statistics.median(r["seconds"] for r in runs)
        client = statistics.median(r["cpu_seconds"] for r in runs)
        server = statistics.median(r["server_cpu_seconds"] for r in runs)
        each = ", ".join(f"{r['seconds']:.1f}" for r in runs)
        peak = max(r["peak_kib"] for r in runs)
        print(f"  {labels[name]}")
        print(
            f"      {median[name]:8.2f} s  [{each}]  client CPU {client:.1f} s  Prometheus CPU {server:.1f} s"
        )
        baseline = mib(runs[-1]["baseline_kib"])
        print(f"      rows {runs[-1]['rows']:,}  peak RSS {mib(peak)} (after imports {baseline})")
    if "naive" in median and "gpuwatch" in median:
        ratio = median["naive"] / median["gpuwatch"]
        print(f"  naive / gpuwatch = {ratio:.2f}x  (target >= 10x: {'met' if ratio >= 10 else 'NOT met'})")
    if "bare" in median and "gpuwatch" in median:
        ratio = median["gpuwatch"] / median["bare"]
        print(f"  gpuwatch / bare  = {ratio:.2f}x  (target <= 1.5x: {'met' if ratio <= 1.5 else 'NOT met'})")
    print(f"  gpuwatch vs naive table: {verdict}")


if __name__ == "__main__":
    main()
