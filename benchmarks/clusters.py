"""Benchmark: what reading a fleet as several clusters costs beside reading it as one.

Builds N simulated clusters of the demo's shape (default 2 × ~1,000 GPUs, one day at 1-minute samples)
and, in one run, times the raw-path analysis and report of (a) each cluster alone, summed, and (b) the
same clusters as one fleet through MultiClusterSources (names qualified, samples concatenated, one
analysis). Prints both, their ratio and the peak memory after each. Not a test: nothing is asserted on
time. The simulated sources stand in for each cluster's API server and store, so this measures
gpuwatch's own work on top of the reads.
"""

import argparse
import resource
import time
from datetime import UTC, datetime

from gpuwatch.config import Settings
from gpuwatch.report import build_report
from gpuwatch.service import FleetService, FleetSources, MultiClusterSources, SimulatedSources, demo_settings
from gpuwatch.sources.simulated import build_demo_fleet


def _peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _timed(sources: FleetSources, settings: Settings) -> tuple[float, int]:
    """Seconds for one window's analysis and report, and the GPUs it counted."""
    service = FleetService(settings=settings, sources=sources)
    window = service.window(days=1.0)
    began = time.perf_counter()
    report = build_report(service.analysis(window))
    return time.perf_counter() - began, int(report["fleet"]["gpus"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clusters", type=int, default=2)
    parser.add_argument("--gpus", type=int, default=1000, help="about this many GPUs per cluster")
    args = parser.parse_args()
    end = datetime(2026, 11, 20, tzinfo=UTC)
    began = time.perf_counter()
    fleets = {
        f"c{k}": SimulatedSources(build_demo_fleet(seed=42 + k, end=end, days=1, gpus=args.gpus))
        for k in range(args.clusters)
    }
    print(f"built {args.clusters} clusters in {time.perf_counter() - began:.1f} s")
    settings = demo_settings(Settings(), end=end)
    alone = [_timed(f, settings) for f in fleets.values()]
    alone_s, alone_gpus = sum(t for t, _ in alone), sum(g for _, g in alone)
    print(f"each cluster alone: {alone_s:.2f} s for {alone_gpus} GPUs; peak {_peak_mb():.0f} MB")
    merged_s, merged_gpus = _timed(MultiClusterSources(fleets), settings)
    print(f"as one fleet:       {merged_s:.2f} s for {merged_gpus} GPUs; peak {_peak_mb():.0f} MB")
    print(f"ratio (one fleet ÷ clusters alone): {merged_s / alone_s:.2f}")


if __name__ == "__main__":
    main()
