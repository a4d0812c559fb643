"""Benchmark: what one per-pod family of a month costs the store, Prometheus and VictoriaMetrics side by side.

A per-pod daily roll-up (`day:gpuwatch_pod_gpu_used:sum_over_time`, the labels gpuwatch publishes) for
`--pods` pods over 30 days, each pod on one day or two, is written with promtool into a Prometheus TSDB
(blocks of up to 486 h, as Prometheus compacts a long retention) and imported into a VictoriaMetrics.
Each store then answers, `--runs` times at the window's end, the window's sum per pod (what Right-size and
the every-workload report read for each family) and the count of it (the series touched, nothing
returned). Printed: wall seconds and the store's CPU seconds (from /proc) of each answer.

Not a test: nothing is asserted. Run from the repository root: python benchmarks/stores.py
"""

import argparse
import os
import random
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import requests

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT)]

from tests.integration.prom import PrometheusServer, VictoriaMetricsServer, create_blocks  # noqa: E402

from gpuwatch.sources.historyqueries import pod_gpus_sum_query  # noqa: E402

END = datetime(2026, 11, 20, tzinfo=UTC)
FAMILY = "day:gpuwatch_pod_gpu_used:sum_over_time"
# The whole days of a 30-day window ending at a midnight, as gpuwatch reads them (pod_gpus_sum_query)
SUM = pod_gpus_sum_query(
    "gpuwatch_pod_gpu_used", range_seconds=30 * 86_400, resolution_seconds=300, rollup="day"
)
QUERIES = {"sum per pod": SUM, "count": f"count({SUM})"}


def write_family(path: Path, pods: int, *, seed: int = 5) -> None:
    """OpenMetrics of the family: pod k's GE-hours on the day it ran (and the next, for three in ten)."""
    rng = random.Random(seed)
    rows = []
    for k in range(pods):
        labels = (
            f'namespace="ns-{k % 400}",pod="job-{k:07d}-{rng.getrandbits(20):05x}",team="team-{k % 40}",'
            f'node="gpu-h100-{rng.randrange(1250):04d}",pool="NVIDIA-H100-80GB-HBM3"'
        )
        day = rng.randrange(1, 30)  # day d ends d days after the window's start
        for d in (day, day + 1) if rng.random() < 0.3 else (day,):
            rows.append((END.timestamp() - (30 - d) * 86_400, labels, rng.random() * 24))
    rows.sort()
    with path.open("w", encoding="utf-8") as out:
        out.write(f"# TYPE {FAMILY} gauge\n")
        out.writelines(f"{FAMILY}{{{labels}}} {value:.6f} {t:.0f}\n" for t, labels, value in rows)
        out.write("# EOF\n")


def store_cpu_seconds(wrapper_pid: int) -> float:
    """CPU seconds of the server the `timeout` wrapper runs (its one child)."""
    with open(f"/proc/{wrapper_pid}/task/{wrapper_pid}/children", encoding="ascii") as children:
        pid = int(children.read().split()[0])
    with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime, in clock ticks


def settle(pid: int, *, idle_cpu_seconds: float = 0.05, period_seconds: float = 2.0) -> None:
    """Wait until the store is idle (its start-up compaction, or merges after an import, done)."""
    while True:
        cpu = store_cpu_seconds(pid)
        time.sleep(period_seconds)
        if store_cpu_seconds(pid) - cpu < idle_cpu_seconds:
            return


def measure(name: str, url: str, pid: int, runs: int) -> None:
    settle(pid)
    for label, query in QUERIES.items():
        for run in range(runs):
            cpu, began = store_cpu_seconds(pid), time.perf_counter()
            at = {"query": query, "time": END.timestamp()}
            reply = requests.get(f"{url}/api/v1/query", params=at, timeout=600)
            reply.raise_for_status()
            seconds, cpu = time.perf_counter() - began, store_cpu_seconds(pid) - cpu
            series = len(reply.json()["data"]["result"])
            print(
                f"  {name:<16} {label:<12} run {run + 1}: {seconds:6.2f} s, store {cpu:6.2f} CPU-s, "
                f"{series:,} series back ({len(reply.content) / 1e6:.0f} MB)",
                flush=True,
            )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=int, default=570_000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="gpuwatch-stores-") as scratch:
        work = Path(scratch)
        began = time.perf_counter()
        write_family(work / "family.om", args.pods)
        create_blocks(work / "family.om", work / "tsdb")
        print(f"{args.pods:,} pods' {FAMILY} written in {time.perf_counter() - began:.0f} s", flush=True)
        with PrometheusServer(work / "tsdb") as prometheus:
            assert prometheus.process is not None
            measure("Prometheus", prometheus.url, prometheus.process.pid, args.runs)
        # VictoriaMetrics refuses a query over more series than this (300,000 by default in 1.79).
        limit = f"-search.maxUniqueTimeseries={2 * args.pods}"
        with VictoriaMetricsServer(work / "victoria-metrics", flags=(limit,)) as victoria:
            victoria.import_openmetrics(work / "family.om")
            assert victoria.process is not None
            measure("VictoriaMetrics", victoria.url, victoria.process.pid, args.runs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
