"""Replay the Alibaba openb trace (Weng et al., "Beware of Fragmentation", USENIX ATC'23) and time each step.

Not a test: run `python benchmarks/replay.py [--trace-dir DIR] [--days 7] [--step 300] [--telemetry]`.
The trace itself is not part of the repository; by default it is read from ../shared/reference/alibaba-openb.
"""

import argparse
import resource
import sys
import time
from datetime import datetime
from pathlib import Path

import pandas as pd

from gpuwatch.core.config import Settings
from gpuwatch.core.errors import GpuwatchError
from gpuwatch.read.analysis import analyze
from gpuwatch.sim import SimulatedFleet
from gpuwatch.sim.source import SimulatedSource
from gpuwatch.sim.trace import last_days_offset_seconds, load_openb, replay_openb, summary
from gpuwatch.surfaces.report import build_report

DEFAULT_TRACE_DIR = Path(__file__).parents[1].parent / "shared" / "reference" / "alibaba-openb"
NODES_FILE = "openb_node_list_gpu_node.csv"
PODS_FILE = "openb_pod_list_default.csv"


def _rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux reports KiB


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--trace-dir", type=Path, default=DEFAULT_TRACE_DIR)
    parser.add_argument("--days", type=float, default=7.0)
    parser.add_argument("--step", type=int, default=300, help="sample step in seconds")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--start", default="2024-01-01T00:00:00+00:00", help="wall-clock time of the window start"
    )
    parser.add_argument(
        "--offset-days",
        type=float,
        default=None,
        help="trace time (days) at the window start; default: the window ends just after the last pod "
        "creation (the trace is nearly empty before day ~115)",
    )
    parser.add_argument("--lifetime-scale", type=float, default=1.0, help="stretch every pod's lifetime")
    parser.add_argument(
        "--telemetry", action="store_true", help="also build the full telemetry frame (slow, GBs)"
    )
    args = parser.parse_args(argv)

    try:
        t0 = time.perf_counter()
        trace = load_openb(args.trace_dir / NODES_FILE, args.trace_dir / PODS_FILE)
        load_s = time.perf_counter() - t0
        if args.offset_days is None:
            offset = last_days_offset_seconds(trace, args.days)
        else:
            offset = args.offset_days * 86400
        t0 = time.perf_counter()
        fleet = replay_openb(
            trace,
            start=datetime.fromisoformat(args.start),
            days=args.days,
            step_seconds=args.step,
            seed=args.seed,
            offset_seconds=offset,
            lifetime_scale=args.lifetime_scale,
        )
        replay_s = time.perf_counter() - t0
    except GpuwatchError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    rss_replay = _rss_mib()
    s = summary(fleet)
    c = fleet.counts
    n_gpus, n_samples = fleet.util_ratio.shape
    print(f"trace       {args.trace_dir}  ({len(trace.nodes):,} nodes, {len(trace.pods):,} pods)")
    w = fleet.window
    span = f"{w.start.isoformat()} + {args.days:g} d, step {args.step} s"
    print(f"window      {span}, trace offset {offset / 86400:.2f} d")
    print(f"load        {load_s:8.3f} s")
    samples = f"{n_gpus:,} GPUs x {n_samples:,} samples = {n_gpus * n_samples / 1e6:.1f}M GPU-samples"
    print(f"replay      {replay_s:8.3f} s  ({samples})")
    print(f"fleet       {s['nodes']:,} nodes, {s['gpus']:,} GPUs")
    print(
        f"pods        {c.placed:,} placed ({s['pods_running']:,} running at end), {c.pending:,} pending, "
        f"{c.cpu_only:,} CPU-only skipped, {c.expired:,} expired waiting, "
        f"{c.ended_before_window:,} ended before / {c.created_after_window:,} created after the window"
    )
    print(
        f"allocated   {s['allocated_gpu_hours']:,.1f} GE-hours of {s['capacity_gpu_hours']:,.0f} "
        f"(mean allocation rate {s['mean_allocation_rate']:.4%}, peak {s['peak_allocated_gpus']:,.1f} GE)"
    )
    t0 = time.perf_counter()
    truth = fleet.truth() if fleet.allocations else None
    truth_s = time.perf_counter() - t0
    print(f"truth()     {truth_s:8.3f} s  ({0 if truth is None else len(truth):,} rows)")
    if truth is not None:
        _analytics(fleet, truth)
    if args.telemetry:
        del truth
        t0 = time.perf_counter()
        tel = fleet.telemetry()
        tel_s = time.perf_counter() - t0
        mib = tel.memory_usage(deep=True).sum() / 2**20
        print(f"telemetry() {tel_s:8.3f} s  ({len(tel):,} rows, {mib:,.0f} MiB)")
    print(f"peak RSS    {rss_replay:,.0f} MiB after replay, {_rss_mib():,.0f} MiB at the end")
    return 0


def _analytics(fleet: SimulatedFleet, truth: pd.DataFrame) -> None:
    """The replay through gpuwatch's analysis (join, idle, fragmentation, ledger, report)."""
    source = SimulatedSource(fleet)
    # DCGM samples of the held units (the trace says nothing of idle GPUs' telemetry).
    samples = truth[
        ["timestamp", "node", "uuid", "gpu_instance_id", "util_ratio", "namespace", "pod"]
    ].assign(mig_profile="", util_source="DCGM_FI_PROF_GR_ENGINE_ACTIVE")
    t0 = time.perf_counter()
    analysis = analyze(
        window=fleet.window,
        state=source.cluster_state(),
        gpu_samples=samples,
        settings=Settings(teams=fleet.team_rules),
        history=source.allocation_history(fleet.window),  # as if gpuwatch export had run all along
    )
    report = build_report(analysis)
    analytics_s = time.perf_counter() - t0
    pools = report["pools"]
    stranded = sum(p["stranded_gpu_hours"] for p in pools)
    capacity = sum(p["gpus"] for p in pools)
    weighted = sum(
        p["fragmentation_ratio"] * p["gpus"] for p in pools if p["fragmentation_ratio"] is not None
    )
    fleet_report = report["fleet"]
    print(f"analytics   {analytics_s:8.3f} s  (join, idle, fragmentation, ledger, report)")
    print(
        f"ledger      stranded {fleet_report['ledger_gpu_hours']['stranded']:,.1f} GE-h "
        f"(fragmented {stranded:,.1f}), unallocated {fleet_report['ledger_gpu_hours']['unallocated']:,.1f}, "
        f"allocated idle {fleet_report['ledger_gpu_hours']['allocated_idle']:,.1f}, "
        f"active {fleet_report['ledger_gpu_hours']['allocated_active']:,.1f}"
    )
    print(f"fragmentation ratio (GPU-weighted mean over pools) {weighted / capacity:.4f}")
    worst = sorted(pools, key=lambda p: -(p["fragmentation_ratio"] or 0))[:3]
    for p in worst:
        print(
            f"  pool {p['pool']:<10} ratio {p['fragmentation_ratio'] or 0:.3f}, "
            f"stranded {p['stranded_gpu_hours']:,.1f} GE-h"
        )


if __name__ == "__main__":
    sys.exit(main())
