"""Benchmark: what reading a fleet as several clusters costs beside reading it as one. Not a test: nothing
is asserted on time.

  raw      N simulated clusters of the demo's shape (default 2 × ~1,000 GPUs, one day at 1-minute
           samples): in one run, the raw-path analysis and report of (a) each cluster alone, summed, and
           (b) the same clusters as one fleet through MultiClusterSources (names qualified, samples
           concatenated, one analysis). The simulated sources stand in for each cluster's API server and
           store, so this measures gpuwatch's own work on top of the reads.
  history  N clusters' gpuwatch_* history (default 2 × ~1,000 GPUs over 30 days at 5-minute samples, each
           `gpuwatch simulate backfill --cluster cK --tsdb DIR` into one TSDB, as clusters sharing one
           store), on a real Prometheus: in one run, the history report of (a) each cluster alone, read
           under its cluster="cK" matcher, summed, and (b) the clusters as one fleet (ClustersHistory),
           at the team and at the workload level of detail. `--tsdb DIR` keeps the world for the next run.

Prints both, their ratio and the peak memory after each.
Run from the repository root: python benchmarks/clusters.py [raw|history] [--clusters 2 --gpus 1000]
"""

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]

from tests.integration.prom import PrometheusServer  # noqa: E402

from collect import block_count, wait_for_compaction  # noqa: E402
from gpuwatch.core.config import Settings  # noqa: E402
from gpuwatch.core.model import Window  # noqa: E402
from gpuwatch.read.history import TEAM, WORKLOAD, read_history  # noqa: E402
from gpuwatch.read.service import FleetService, FleetSources, MultiClusterSources  # noqa: E402
from gpuwatch.sim import build_demo_fleet  # noqa: E402
from gpuwatch.sim.demoservice import SimulatedSources, demo_settings  # noqa: E402
from gpuwatch.sources.historystore import ClustersHistory, HistoryStore, PrometheusHistory  # noqa: E402
from gpuwatch.sources.ownseries import CLUSTER_LABEL  # noqa: E402
from gpuwatch.sources.prometheus import PrometheusSource  # noqa: E402
from gpuwatch.sources.promql import equals  # noqa: E402
from gpuwatch.surfaces.report import build_history_report, build_report  # noqa: E402

END = datetime(2026, 11, 20, tzinfo=UTC)
GPUWATCH = str(Path(sys.executable).with_name("gpuwatch"))
MARKER = ".gpuwatch-clusters-world.json"


def _peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _timed(sources: FleetSources, settings: Settings) -> tuple[float, int]:
    """Seconds for one window's analysis and report, and the GPUs it counted."""
    service = FleetService(settings=settings, sources=sources)
    window = service.window(days=1.0)
    began = time.perf_counter()
    report = build_report(service.analysis(window))
    return time.perf_counter() - began, int(report["fleet"]["gpus"])


def raw(args: argparse.Namespace) -> None:
    began = time.perf_counter()
    fleets = {
        f"c{k}": SimulatedSources(build_demo_fleet(seed=42 + k, end=END, days=1, gpus=args.gpus))
        for k in range(args.clusters)
    }
    print(f"built {args.clusters} clusters in {time.perf_counter() - began:.1f} s")
    settings = demo_settings(Settings(), end=END)
    alone = [_timed(f, settings) for f in fleets.values()]
    alone_s, alone_gpus = sum(t for t, _ in alone), sum(g for _, g in alone)
    print(f"each cluster alone: {alone_s:.2f} s for {alone_gpus} GPUs; peak {_peak_mb():.0f} MB")
    merged_s, merged_gpus = _timed(MultiClusterSources(fleets), settings)
    print(f"as one fleet:       {merged_s:.2f} s for {merged_gpus} GPUs; peak {_peak_mb():.0f} MB")
    print(f"ratio (one fleet ÷ clusters alone): {merged_s / alone_s:.2f}")


def build_world(tsdb: Path, args: argparse.Namespace) -> list[str]:
    """The clusters' history in one TSDB (built, timed, unless `tsdb` holds one of the same parameters)."""
    names = [f"c{k}" for k in range(args.clusters)]
    params = {"clusters": names, "gpus": args.gpus, "days": args.days}
    marker = tsdb / MARKER
    if tsdb.exists():
        if not marker.is_file() or json.loads(marker.read_text(encoding="utf-8")) != params:
            sys.exit(f"{tsdb} exists but was not built by this benchmark with these parameters: remove it")
        print(f"world: reusing {tsdb} ({block_count(tsdb)} blocks)")
        return names
    for k, name in enumerate(names):
        began = time.perf_counter()
        cmd = [GPUWATCH, "simulate", "backfill", "--gpus", str(args.gpus), "--days", f"{args.days:g}"]
        cmd += ["--step", "300s", "--end", END.isoformat(), "--seed", str(42 + k), "--no-dcgm"]
        subprocess.run([*cmd, "--cluster", name, "--tsdb", str(tsdb)], check=True)
        print(f"world: cluster {name} written in {time.perf_counter() - began:.0f} s")
    marker.write_text(json.dumps(params), encoding="utf-8")
    return names


def history(args: argparse.Namespace) -> None:
    tsdb = Path(args.tsdb) if args.tsdb else Path(tempfile.mkdtemp(prefix="gpuwatch-clusters-")) / "tsdb"
    names = build_world(tsdb, args)
    settings = demo_settings(Settings(), end=END)
    window = Window(start=END - timedelta(days=args.days), end=END, step_seconds=300)
    with PrometheusServer(tsdb) as prom:
        wait_for_compaction(prom.url, tsdb)
        source = PrometheusSource(prom.url)
        own = {n: PrometheusHistory(source.scoped([equals(CLUSTER_LABEL, n)])) for n in names}

        def timed(store: HistoryStore, detail: str) -> tuple[float, float]:
            began = time.perf_counter()
            report = build_history_report(read_history(settings, window, store=store, detail=detail))
            return time.perf_counter() - began, float(report["fleet"]["gpus"])

        for detail in (TEAM, WORKLOAD):
            timed(ClustersHistory(own), detail)  # once unmeasured: Prometheus' caches warm for both
            alone = [timed(store, detail) for store in own.values()]
            alone_s, gpus = sum(t for t, _ in alone), sum(g for _, g in alone)
            merged_s, merged_gpus = timed(ClustersHistory(own), detail)
            print(f"{detail:<9} each cluster alone: {alone_s:6.2f} s for {gpus:,.0f} GPUs")
            print(f"{detail:<9} as one fleet:       {merged_s:6.2f} s for {merged_gpus:,.0f} GPUs")
            print(f"{detail:<9} ratio (one fleet ÷ clusters alone): {merged_s / alone_s:.2f}")
        print(f"peak {_peak_mb():.0f} MB (this process)")
        source.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("path", nargs="?", choices=("raw", "history"), default="raw")
    parser.add_argument("--clusters", type=int, default=2)
    parser.add_argument("--gpus", type=int, default=1000, help="about this many GPUs per cluster")
    parser.add_argument("--days", type=float, default=30.0, help="history: the window (raw: one day)")
    parser.add_argument("--tsdb", help="history: keep the clusters' TSDB here for the next run")
    args = parser.parse_args()
    raw(args) if args.path == "raw" else history(args)


if __name__ == "__main__":
    main()
