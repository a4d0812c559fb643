"""Benchmark: the analytics stages (mark_idle, fragmentation, ledger, cost) on ~10 million GPU-samples.

Builds a synthetic attributed timeline (default 7,000 GPUs × 1,440 one-minute samples, whole-GPU pods
of 1/2/4/8 GPUs laid out on 8-GPU nodes, time-major like the join's output) plus the node samples,
then times each stage and prints attributed rows per second per stage and overall (target: at least
2 million rows/s on a 2-core machine) and peak memory. Not a test: nothing is asserted on time.
"""

import argparse
import resource
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd

from gpuwatch.analytics.cost import ledger_cost, usage_cost
from gpuwatch.analytics.fragmentation import fragmentation, request_mix
from gpuwatch.analytics.ledger import idle_since, ledger, ledger_gpu_hours, mark_idle, schedulable_free
from gpuwatch.core.model import IdleParams, PriceBook

POOLS = ("NVIDIA-H100-80GB-HBM3", "NVIDIA-A100-SXM4-80GB", "NVIDIA-L4", "TESLA-T4")
LAYOUTS = ((8,), (4, 4), (4, 2, 2), (2, 2, 2, 2), (4, 2, 1, 1), (1,) * 8)  # pod sizes per 8-GPU node
GPUS_PER_NODE = 8


def build(gpus: int, samples: int, step: int, seed: int) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """(attributed, node_samples, gpu requests) of a synthetic fleet; vectorized except per slot."""
    rng = np.random.default_rng(seed)
    n_nodes = gpus // GPUS_PER_NODE
    start = pd.Timestamp("2026-11-19", tz="UTC")
    # Each node is cut into slots of k GPUs; each slot runs back-to-back pods with short free gaps.
    seg_node, seg_gpu0, seg_k, seg_t0, seg_t1 = [], [], [], [], []
    for node in range(n_nodes):
        gpu0 = 0
        for k in LAYOUTS[rng.integers(len(LAYOUTS))]:
            t = int(rng.integers(0, 30))
            while t < samples:
                length = int(rng.integers(20, 400))
                seg_node.append(node)
                seg_gpu0.append(gpu0)
                seg_k.append(k)
                seg_t0.append(t)
                seg_t1.append(min(samples, t + length))
                t += length + int(rng.integers(0, 25))
            gpu0 += k
    node_of = np.array(seg_node)
    k_of = np.array(seg_k)
    t0 = np.array(seg_t0)
    length = np.array(seg_t1) - t0
    n_pods = len(node_of)
    # A quarter of pods sit near 0 (idle candidates), the rest work; 1% of samples have no telemetry.
    level = np.where(rng.random(n_pods) < 0.25, 0.01, rng.uniform(0.2, 0.95, n_pods))
    rows_per_pod = k_of * length
    pod = np.repeat(np.arange(n_pods), rows_per_pod)
    within = np.arange(len(pod)) - np.repeat(np.cumsum(rows_per_pod) - rows_per_pod, rows_per_pod)
    gpu = np.repeat(np.array(seg_gpu0), rows_per_pod) + within % np.repeat(k_of, rows_per_pod)
    sample = np.repeat(t0, rows_per_pod) + within // np.repeat(k_of, rows_per_pod)
    util = np.clip(level[pod] + rng.normal(0, 0.02, len(pod)), 0, 1)
    util[rng.random(len(pod)) < 0.01] = np.nan
    order = np.argsort(sample, kind="stable")  # time-major, as the join emits it
    pod, gpu, sample, util = pod[order], gpu[order], sample[order], util[order]
    node = node_of[pod]
    team = pod % 12
    pool = node % len(POOLS)
    times = start + pd.to_timedelta(np.arange(samples) * step, unit="s")
    node_names = pd.Categorical.from_codes(node, [f"node-{i:05d}" for i in range(n_nodes)])
    # Key columns as the join emits them: categoricals (team and pool are plain strings).
    attributed = pd.DataFrame(
        {
            "timestamp": times[sample],
            "namespace": pd.Categorical.from_codes(team, [f"ns-{i}" for i in range(12)]),
            "pod": pd.Categorical.from_codes(pod, [f"pod-{i:06d}" for i in range(n_pods)]),
            "team": pd.Categorical.from_codes(team, [f"team-{i}" for i in range(12)]).astype("str"),
            "node": node_names,
            "pool": pd.Categorical.from_codes(pool, list(POOLS)).astype("str"),
            "uuid": pd.Categorical.from_codes(
                node * GPUS_PER_NODE + gpu, [f"GPU-{i:08x}" for i in range(n_nodes * GPUS_PER_NODE)]
            ),
            "gpu_instance_id": pd.Categorical.from_codes(np.zeros(len(pod), dtype=np.int64), [""]),
            "ge_share": np.ones(len(pod)),
            "util_ratio": util,
        }
    )
    grid_node = np.tile(np.arange(n_nodes), samples)
    grid_time = np.repeat(np.arange(samples), n_nodes)
    capacity = np.full(len(grid_node), float(GPUS_PER_NODE))
    allocatable = np.where(grid_node % 97 == 5, GPUS_PER_NODE - 1.0, capacity)  # a GPU not advertised
    node_samples = pd.DataFrame(
        {
            "timestamp": times[grid_time],
            "node": pd.Categorical.from_codes(grid_node, node_names.categories).astype("str"),
            "pool": pd.Categorical.from_codes(grid_node % len(POOLS), list(POOLS)).astype("str"),
            "product": pd.Categorical.from_codes(grid_node % len(POOLS), list(POOLS)).astype("str"),
            "capacity_ge": capacity,
            "allocatable_ge": allocatable,
            "ready": grid_node % 101 != 7,
            "schedulable": grid_node % 53 != 3,
        }
    )
    requests = pd.DataFrame(
        {
            "namespace": [f"ns-{i % 12}" for i in range(n_pods)],
            "pod": [f"pod-{i:06d}" for i in range(n_pods)],
            "pool": [POOLS[n % len(POOLS)] for n in node_of],
            "gpus": k_of.astype("float64"),
        }
    ).astype({"namespace": "str", "pod": "str", "pool": "str"})
    return attributed, node_samples, requests


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--gpus", type=int, default=7500)
    parser.add_argument("--samples", type=int, default=1440)
    parser.add_argument("--step", type=int, default=60)
    parser.add_argument("--seed", type=int, default=42)
    args = parser.parse_args()

    t0 = time.perf_counter()
    attributed, node_samples, requests = build(args.gpus, args.samples, args.step, args.seed)
    rows = len(attributed)
    print(f"synthetic fleet: {args.gpus:,} GPUs × {args.samples:,} samples at {args.step} s")
    print(f"  {rows:,} attributed GPU-samples, {len(node_samples):,} node samples, {len(requests):,} pods")
    print(f"  built in {time.perf_counter() - t0:.1f} s (not timed below)")

    idle = IdleParams()
    prices = PriceBook(
        products={"NVIDIA-H100-80GB-HBM3": 4.0, "NVIDIA-A100-SXM4-80GB": 2.5, "NVIDIA-L4": 0.8}
    )
    results: dict[str, Any] = {}
    timings: list[tuple[str, float]] = []

    def stage(name: str, run: Callable[[], Any]) -> None:
        started = time.perf_counter()
        results[name] = run()
        timings.append((name, time.perf_counter() - started))

    stage("mark_idle", lambda: mark_idle(attributed, step_seconds=args.step, idle=idle))
    marked = results["mark_idle"]
    stage("schedulable_free", lambda: schedulable_free(node_samples, marked))
    stage(
        "request_mix + fragmentation",
        lambda: fragmentation(results["schedulable_free"], request_mix(requests)),
    )
    per_node, _ = results["request_mix + fragmentation"]
    stage("ledger", lambda: ledger(node_samples, marked, per_node))
    by_node = results["ledger"].by_node
    stage(
        "ledger GE-hours (fleet + pool)",
        lambda: (
            ledger_gpu_hours(by_node, step_seconds=args.step),
            ledger_gpu_hours(by_node, step_seconds=args.step, by=("pool",)),
        ),
    )
    stage(
        "cost (ledger by pool + usage by team)",
        lambda: (
            ledger_cost(by_node, step_seconds=args.step, price_book=prices),
            usage_cost(marked, step_seconds=args.step, price_book=prices, by="team"),
        ),
    )
    core = sum(seconds for _, seconds in timings)
    stage("idle_since (extra)", lambda: idle_since(marked))
    stage(
        "usage by workload (extra)",
        lambda: usage_cost(marked, step_seconds=args.step, price_book=prices, by="workload"),
    )

    print(f"\n{'stage':<40} {'seconds':>8} {'rows/s':>14}")
    for name, seconds in timings:
        print(f"{name:<40} {seconds:8.2f} {rows / seconds:14,.0f}")
    print(f"{'overall (mark_idle → cost)':<40} {core:8.2f} {rows / core:14,.0f}   (target ≥ 2,000,000)")

    fleet = ledger_gpu_hours(by_node, step_seconds=args.step).iloc[0]
    idle_share = marked["idle"].mean()
    print(
        f"\nidle samples: {idle_share:.1%}; capacity {fleet['capacity_gpu_hours']:,.0f} GE-h = "
        + ", ".join(f"{c.removesuffix('_gpu_hours')} {fleet[c]:,.0f}" for c in fleet.index[1:])
    )
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"peak memory (ru_maxrss): {peak_mib:,.0f} MiB")


if __name__ == "__main__":
    main()
