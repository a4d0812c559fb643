"""Benchmark: simulate a 1,000-GPU fleet for 24 h at 60 s and time each rendering of it.

Prints wall-clock seconds per stage and GPU-samples per second; not a test (no assertions on time).
Target (issue 2): generation under 30 s on a 2-core machine.
"""

import argparse
import io
import resource
import time
from datetime import UTC, datetime

from gpuwatch.sim import build_demo_fleet


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--gpus", type=int, default=1000)
    parser.add_argument("--days", type=float, default=1.0)
    parser.add_argument("--step", type=int, default=60)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument(
        "--backfill", action="store_true", help="also time the OpenMetrics backfill rendering"
    )
    args = parser.parse_args()

    end = datetime(2026, 11, 20, tzinfo=UTC)
    t0 = time.perf_counter()
    fleet = build_demo_fleet(seed=args.seed, end=end, days=args.days, step_seconds=args.step, gpus=args.gpus)
    t_build = time.perf_counter() - t0
    t0 = time.perf_counter()
    telemetry = fleet.telemetry()
    t_tel = time.perf_counter() - t0
    t0 = time.perf_counter()
    truth = fleet.truth()
    t_truth = time.perf_counter() - t0
    total = t_build + t_tel + t_truth
    gpus = sum(n.gpu_count for n in fleet.nodes)
    print(
        f"fleet: {gpus} GPUs ({len(fleet.gpus)} telemetry units), "
        f"{len(fleet.nodes)} nodes, {len(fleet.pods)} pods"
    )
    print(f"window: {args.days} d at {args.step} s = {fleet.window.n_samples} samples")
    print(f"build (nodes, pods, scheduling, utilization): {t_build:6.2f} s")
    print(f"telemetry frame ({len(telemetry):,} rows):        {t_tel:6.2f} s")
    print(f"ground-truth frame ({len(truth):,} rows):        {t_truth:6.2f} s")
    print(f"generation total:                              {total:6.2f} s  (target < 30 s)")
    print(f"GPU-samples per second: {len(telemetry) / total:,.0f}")
    if args.backfill:
        from gpuwatch.sim.exposition import write_backfill

        sink = io.StringIO()
        t0 = time.perf_counter()
        n = write_backfill(fleet, sink)
        t_bf = time.perf_counter() - t0
        print(f"OpenMetrics backfill: {n:,} samples, {sink.tell() / 1e6:,.0f} MB in {t_bf:.2f} s")
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"peak memory: {peak_mib:,.0f} MiB")


if __name__ == "__main__":
    main()
