"""Properties of the ledger on random small fleets (hypothesis): states partition capacity, hours add up."""

import math
from collections import defaultdict
from dataclasses import dataclass

import numpy as np
import pandas as pd
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuwatch.analytics.fragmentation import fragmentation, request_mix
from gpuwatch.analytics.ledger import (
    LEDGER_COLUMNS,
    ledger,
    ledger_gpu_hours,
    mark_idle,
    schedulable_free,
    usage_summary,
)
from gpuwatch.core.model import ALLOCATED_STATES, IdleParams
from gpuwatch.core.schema import ATTRIBUTED, GPU_REQUESTS, NODE_SAMPLES

STEP = 60
T0 = pd.Timestamp("2026-11-20", tz="UTC")
POOLS = ("NVIDIA-H100-80GB-HBM3", "NVIDIA-A100-SXM4-80GB")
SHARES = (1.0, 3 / 7, 2 / 7, 1 / 7, 0.25, 0.5)  # whole GPU, MIG slices, time-slice replicas
UTILS = (0.0, 0.01, 0.049, 0.05, 0.3, 1.0, math.nan)


@dataclass(frozen=True)
class Fleet:
    attributed: pd.DataFrame
    node_samples: pd.DataFrame
    requests: pd.DataFrame
    window_seconds: int


@st.composite
def fleets(draw: st.DrawFn) -> Fleet:
    n_samples = draw(st.integers(1, 6))
    n_nodes = draw(st.integers(1, 4))
    node_rows = []
    for node in range(n_nodes):
        pool = draw(st.sampled_from(POOLS))
        capacity = float(draw(st.sampled_from((1, 2, 4, 8))))
        for sample in range(n_samples):
            if draw(st.integers(0, 9)) == 0:
                continue  # a missing node-sample: its allocations go to unknown_nodes
            allocatable = draw(st.one_of(st.just(math.nan), st.floats(0, capacity + 1, allow_nan=False)))
            ready = draw(st.booleans()) or draw(st.booleans())  # mostly True
            schedulable = draw(st.booleans()) or draw(st.booleans())
            stamp = T0 + pd.Timedelta(seconds=STEP * sample)
            node_rows.append((stamp, f"n{node}", pool, capacity, allocatable, ready, schedulable))
    node_samples = pd.DataFrame(
        node_rows,
        columns=["timestamp", "node", "pool", "capacity_ge", "allocatable_ge", "ready", "schedulable"],
    )
    node_samples["timestamp"] = pd.to_datetime(node_samples["timestamp"], utc=True)
    node_samples["product"] = node_samples["pool"]
    node_samples = node_samples.astype({"node": "str", "pool": "str", "product": "str", "ready": "bool"})
    node_samples = node_samples.astype(
        {"schedulable": "bool", "capacity_ge": "float64", "allocatable_ge": "float64"}
    )

    rows = []
    requests = []
    for pod in range(draw(st.integers(0, 8))):
        node = draw(st.integers(0, n_nodes))  # n_nodes = a node nobody reports ("ghost")
        units = draw(st.integers(1, 3))
        share = draw(st.sampled_from(SHARES))
        start = draw(st.integers(0, n_samples - 1))
        end = draw(st.integers(start + 1, n_samples))
        team = draw(st.sampled_from(("x", "y", "z")))
        pool = POOLS[pod % 2]
        requests.append((f"ns-{team}", f"p{pod}", pool, units * share))
        for sample in range(start, end):
            if draw(st.integers(0, 7)) == 0:
                continue  # a hole in the holding
            util = draw(st.sampled_from(UTILS))
            for unit in range(units):
                stamp = T0 + pd.Timedelta(seconds=STEP * sample)
                unit_id = (f"g{node}-{pod}-{unit}", str(unit % 2))
                rows.append((stamp, f"ns-{team}", f"p{pod}", team, f"n{node}", pool, *unit_id, share, util))
    attributed = pd.DataFrame(rows, columns=list(ATTRIBUTED.columns))
    attributed["timestamp"] = pd.to_datetime(attributed["timestamp"], utc=True)
    attributed = attributed.astype({c: "str" for c, k in ATTRIBUTED.columns.items() if k == "str"})
    attributed = attributed.astype({"ge_share": "float64", "util_ratio": "float64"})
    shuffled = attributed.sample(frac=1.0, random_state=draw(st.integers(0, 2**16)))
    request_frame = pd.DataFrame(requests, columns=["namespace", "pod", "pool", "gpus"])
    request_frame = request_frame.astype({"namespace": "str", "pod": "str", "pool": "str", "gpus": "float64"})
    return Fleet(
        attributed=ATTRIBUTED.check(shuffled),
        node_samples=NODE_SAMPLES.check(node_samples),
        requests=GPU_REQUESTS.check(request_frame),
        window_seconds=draw(st.sampled_from((60, 120, 150, 180, 300))),
    )


@settings(max_examples=150, deadline=None)
@given(fleets())
def test_states_partition_capacity_and_allocations_add_up(fleet: Fleet) -> None:
    marked = mark_idle(
        fleet.attributed, step_seconds=STEP, idle=IdleParams(window_seconds=fleet.window_seconds)
    )
    free = schedulable_free(fleet.node_samples, marked)
    per_node, per_pool = fragmentation(free, request_mix(fleet.requests))
    result = ledger(fleet.node_samples, marked, per_node)
    by_node = result.by_node

    # Every GE of capacity is in exactly one state; none is negative.
    states = by_node[list(LEDGER_COLUMNS)].to_numpy()
    np.testing.assert_allclose(states.sum(axis=1), by_node["capacity_ge"], rtol=0, atol=1e-9)
    assert (states >= 0).all()
    assert (by_node["overallocated_ge"] >= 0).all()
    assert per_pool["fragmentation_ratio"].between(0, 1).all()
    assert (per_node["fragmented_ge"] <= per_node["schedulable_free_ge"] + 1e-12).all()

    # Team hours sum to the fleet's; the fleet's allocation is the ledger's (allocated states plus
    # over-allocation) plus what sat on unknown node-samples.
    teams = usage_summary(marked, step_seconds=STEP, by="team")
    fleet_usage = usage_summary(marked, step_seconds=STEP, by="fleet")
    allocated = fleet_usage["allocated_gpu_hours"].iloc[0]
    assert math.isclose(teams["allocated_gpu_hours"].sum(), allocated, rel_tol=1e-9, abs_tol=1e-12)
    assert math.isclose(teams["idle_gpu_hours"].sum(), fleet_usage["idle_gpu_hours"].iloc[0], abs_tol=1e-12)
    hours = ledger_gpu_hours(by_node, step_seconds=STEP).iloc[0] if len(by_node) else None
    unknown = (
        ledger_gpu_hours(result.unknown_nodes, step_seconds=STEP).iloc[0]
        if len(result.unknown_nodes)
        else None
    )
    allocated_states = [f"{s}_gpu_hours" for s in ALLOCATED_STATES]
    placed = 0.0 if hours is None else hours[[*allocated_states, "overallocated_gpu_hours"]].sum()
    lost = 0.0 if unknown is None else unknown[allocated_states].sum()
    assert math.isclose(placed + lost, allocated, rel_tol=1e-9, abs_tol=1e-12)
    # Samples without utilization are allocated_unknown, never idle or active: the ledger's unknown
    # GE-hours are the usage's (less what over-allocation scaled away), and no unknown sample is idle.
    unknown_hours = fleet_usage["unknown_gpu_hours"].iloc[0]
    assert math.isclose(teams["unknown_gpu_hours"].sum(), unknown_hours, abs_tol=1e-12)
    in_ledger = (0.0 if hours is None else hours["allocated_unknown_gpu_hours"]) + (
        0.0 if unknown is None else unknown["allocated_unknown_gpu_hours"]
    )
    assert in_ledger <= unknown_hours + 1e-12
    if hours is None or hours["overallocated_gpu_hours"] == 0:
        assert math.isclose(in_ledger, unknown_hours, rel_tol=1e-9, abs_tol=1e-12)
    assert not (marked["idle"] & marked["util_ratio"].isna()).any()
    # Idle GE-hours never exceed allocated ones, per team.
    assert (teams["idle_gpu_hours"] <= teams["allocated_gpu_hours"] + 1e-12).all()


@settings(max_examples=100, deadline=None)
@given(fleets(), st.lists(st.sampled_from((0.0, 2.0**29, 2.0**31, math.nan)), min_size=64, max_size=64))
def test_held_and_abandoned_split_the_idle_hours_and_leave_the_ledger_alone(
    fleet: Fleet, framebuffers: list[float]
) -> None:
    """SPEC §3: the split of allocated_idle into held and abandoned never changes the ledger; per group
    held + abandoned = idle, or both are unknown where some idle hour's framebuffer is."""
    idle = IdleParams(window_seconds=fleet.window_seconds, held_fb_bytes=2.0**30)
    fb = [framebuffers[i % len(framebuffers)] for i in range(len(fleet.attributed))]
    with_fb = fleet.attributed.assign(fb_used_bytes=fb)
    plain = mark_idle(fleet.attributed, step_seconds=STEP, idle=idle)
    marked = mark_idle(with_fb, step_seconds=STEP, idle=idle)
    free = schedulable_free(fleet.node_samples, marked)
    per_node, _ = fragmentation(free, request_mix(fleet.requests))
    plain_per_node, _ = fragmentation(
        schedulable_free(fleet.node_samples, plain), request_mix(fleet.requests)
    )
    by_node = ledger(fleet.node_samples, marked, per_node).by_node
    pd.testing.assert_frame_equal(by_node, ledger(fleet.node_samples, plain, plain_per_node).by_node)
    for by in ("team", "workload", "fleet"):
        usage = usage_summary(marked, step_seconds=STEP, by=by)
        known = usage["held_idle_gpu_hours"].notna()
        assert (known == usage["abandoned_idle_gpu_hours"].notna()).all()
        split = usage["held_idle_gpu_hours"] + usage["abandoned_idle_gpu_hours"]
        np.testing.assert_allclose(split[known], usage.loc[known, "idle_gpu_hours"], rtol=1e-12, atol=1e-12)
        unknown_fb_idle = marked["idle"] & marked["memory_held"].isna()
        if not unknown_fb_idle.any():
            assert known.all()


def reference_idle(attributed: pd.DataFrame, window: int) -> list[bool]:
    """SPEC §3 read literally, one unit at a time: the last w samples held without a hole, all low."""
    by_unit: dict[tuple[str, ...], dict[pd.Timestamp, float]] = defaultdict(dict)
    for row in attributed.itertuples():
        by_unit[(row.namespace, row.pod, row.uuid, row.gpu_instance_id)][row.timestamp] = row.util_ratio
    out = []
    for row in attributed.itertuples():
        held = by_unit[(row.namespace, row.pod, row.uuid, row.gpu_instance_id)]
        back = [row.timestamp - pd.Timedelta(seconds=STEP * j) for j in range(window)]
        out.append(all(ts in held and held[ts] < 0.05 for ts in back))
    return out


@settings(max_examples=150, deadline=None)
@given(fleets())
def test_mark_idle_matches_the_definition(fleet: Fleet) -> None:
    window = math.ceil(fleet.window_seconds / STEP)
    marked = mark_idle(
        fleet.attributed, step_seconds=STEP, idle=IdleParams(window_seconds=fleet.window_seconds)
    )
    assert marked["idle"].tolist() == reference_idle(fleet.attributed, window)
    assert marked.index.equals(fleet.attributed.index)
