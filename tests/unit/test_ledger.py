"""The ledger of SPEC §3 on tiny fleets computed by hand: idle samples, the six states, usage."""

import math

import numpy as np
import pandas as pd
import pytest
from pandas.testing import assert_frame_equal

from gpuwatch.analytics.ledger import (
    idle_since,
    ledger,
    ledger_gpu_hours,
    mark_idle,
    schedulable_free,
    usage_summary,
)
from gpuwatch.core.model import ALLOCATED_STATES, LEDGER_STATES, IdleParams
from gpuwatch.core.schema import ATTRIBUTED, IDLE_MARKED, NODE_SAMPLES

STEP = 60
T0 = pd.Timestamp("2026-11-20 00:00", tz="UTC")
# window 3 min at a 1 min step: w = 3 samples, counting the sample itself.
IDLE = IdleParams(threshold_ratio=0.05, window_seconds=180)
NAT = pd.NaT
H100, A100, T4 = "NVIDIA-H100-80GB-HBM3", "NVIDIA-A100-SXM4-80GB", "TESLA-T4"
EXACT = {"check_exact": False, "rtol": 1e-12, "atol": 1e-15}  # float shares (3/7), no looser


def t(i: int) -> pd.Timestamp:
    return T0 + pd.Timedelta(seconds=STEP * i)


def attributed(rows: list[tuple[int, str, str, str, float, float]], **fixed: str) -> pd.DataFrame:
    """ATTRIBUTED rows from (sample, pod, uuid, gpu_instance_id, ge_share, util_ratio)."""
    frame = pd.DataFrame(
        {
            "timestamp": pd.to_datetime([t(r[0]) for r in rows], utc=True),
            "namespace": fixed.get("namespace", "ml"),
            "pod": [r[1] for r in rows],
            "team": fixed.get("team", "research"),
            "node": fixed.get("node", "n1"),
            "pool": fixed.get("pool", H100),
            "uuid": [r[2] for r in rows],
            "gpu_instance_id": [r[3] for r in rows],
            "ge_share": [float(r[4]) for r in rows],
            "util_ratio": [float(r[5]) for r in rows],
        }
    )
    return ATTRIBUTED.check(frame.astype({c: "str" for c in ("namespace", "team", "node", "pool")}))


def times(values: list[int | None], like: pd.DataFrame) -> "pd.Series[pd.Timestamp]":
    """A time column with the unit of `like.timestamp`; None = NaT."""
    stamps = pd.to_datetime([NAT if v is None else t(v) for v in values], utc=True)
    return pd.Series(stamps.as_unit(like["timestamp"].dt.unit), index=like.index)


def expect_marked(frame: pd.DataFrame, idle: list[int], since: list[int | None]) -> pd.DataFrame:
    return frame.assign(idle=[bool(x) for x in idle], low_util_since=times(since, frame))


# ------------------------------------------------------------------------------------------------
# mark_idle


def test_whole_gpu_first_window_not_counted() -> None:
    # util below 0.05 at samples 0-3, busy at 4, low again at 5. w = 3:
    # sample 2 closes the run 0..2 -> idle; 3 (1..3) idle; 4 busy; 5 starts a new run -> not yet idle.
    frame = attributed([(i, "a", "g1", "", 1.0, u) for i, u in enumerate([0.0, 0.01, 0.02, 0.04, 0.5, 0.0])])
    expected = expect_marked(frame, [0, 0, 1, 1, 0, 0], [0, 0, 0, 0, None, 5])
    assert_frame_equal(mark_idle(frame, step_seconds=STEP, idle=IDLE), expected)


def test_threshold_is_strict() -> None:
    # util exactly 0.05 is not below the threshold: the run restarts after it.
    frame = attributed([(i, "a", "g1", "", 1.0, u) for i, u in enumerate([0.0, 0.0, 0.05, 0.0, 0.0, 0.0])])
    expected = expect_marked(frame, [0, 0, 0, 0, 0, 1], [0, 0, None, 3, 3, 3])
    assert_frame_equal(mark_idle(frame, step_seconds=STEP, idle=IDLE), expected)


def test_telemetry_gap_is_never_idle_and_breaks_the_run() -> None:
    # NaN at sample 2: never idle and the run restarts at 3; 3,4,5 -> idle from 5.
    frame = attributed(
        [(i, "a", "g1", "", 1.0, u) for i, u in enumerate([0.0, 0.0, math.nan, 0.0, 0.0, 0.0, 0.0])]
    )
    expected = expect_marked(frame, [0, 0, 0, 0, 0, 1, 1], [0, 0, None, 3, 3, 3, 3])
    assert_frame_equal(mark_idle(frame, step_seconds=STEP, idle=IDLE), expected)


def test_pod_shorter_than_the_window_is_never_idle() -> None:
    frame = attributed([(0, "short", "g1", "", 1.0, 0.0), (1, "short", "g1", "", 1.0, 0.0)])
    expected = expect_marked(frame, [0, 0], [0, 0])
    assert_frame_equal(mark_idle(frame, step_seconds=STEP, idle=IDLE), expected)


def test_a_hole_in_the_holding_restarts_the_window() -> None:
    # Held at 0,1 then 3,4,5 (no row at 2): only 5 closes a held, low run of 3 samples (3..5).
    frame = attributed([(i, "a", "g1", "", 1.0, 0.0) for i in (0, 1, 3, 4, 5)])
    expected = expect_marked(frame, [0, 0, 0, 0, 1], [0, 0, 3, 3, 3])
    assert_frame_equal(mark_idle(frame, step_seconds=STEP, idle=IDLE), expected)


def test_a_new_pod_on_the_same_gpu_starts_its_own_window() -> None:
    # Pod d holds g1 at 0,1 (idle util), pod e from 2 to 4: e is idle only at 4 (2..4).
    frame = attributed([(i, "d" if i < 2 else "e", "g1", "", 1.0, 0.0) for i in range(5)])
    expected = expect_marked(frame, [0, 0, 0, 0, 1], [0, 0, 2, 2, 2])
    assert_frame_equal(mark_idle(frame, step_seconds=STEP, idle=IDLE), expected)


def test_mig_instances_are_separate_units() -> None:
    # One A100 cut into 3g.40gb (3/7 GE, instance 1, idle) and 2g.20gb (2/7 GE, instance 2, busy
    # at sample 1): instance 1 idle at 2 and 3; instance 2's run restarts at 2 -> idle nowhere.
    rows = []
    for i in range(4):
        rows.append((i, "f", "g1", "1", 3 / 7, 0.0))
        rows.append((i, "g", "g1", "2", 2 / 7, 0.9 if i == 1 else 0.0))
    frame = attributed(rows, pool=A100)
    expected = expect_marked(frame, [0, 0, 0, 0, 1, 0, 1, 0], [0, 0, 0, None, 0, 2, 0, 2])
    assert_frame_equal(mark_idle(frame, step_seconds=STEP, idle=IDLE), expected)


def test_time_sliced_replicas_share_the_gpu_util() -> None:
    # Two pods on 1/4-GE replicas of one T4 see the same GPU util: idle together from sample 2.
    rows = [(i, pod, "g1", "", 0.25, 0.01) for i in range(3) for pod in ("p", "q")]
    frame = attributed(rows, pool=T4)
    expected = expect_marked(frame, [0, 0, 0, 0, 1, 1], [0, 0, 0, 0, 0, 0])
    assert_frame_equal(mark_idle(frame, step_seconds=STEP, idle=IDLE), expected)


def test_window_rounds_up_to_whole_samples_and_order_is_kept() -> None:
    # window 150 s at 60 s: w = ceil(2.5) = 3. Rows shuffled: the result follows the input's rows.
    frame = attributed([(i, "a", "g1", "", 1.0, 0.0) for i in range(4)]).iloc[[3, 1, 0, 2]]
    expected = expect_marked(frame, [1, 0, 0, 1], [0, 0, 0, 0])
    marked = mark_idle(frame, step_seconds=STEP, idle=IdleParams(window_seconds=150))
    assert_frame_equal(marked, expected)


def test_mark_idle_on_nothing() -> None:
    marked = mark_idle(ATTRIBUTED.empty(), step_seconds=STEP, idle=IDLE)
    assert len(marked) == 0
    IDLE_MARKED.check(marked)


# ------------------------------------------------------------------------------------------------
# idle_since


def test_idle_since_per_workload() -> None:
    rows = [(i, "a", "g1", "", 1.0, 0.0) for i in range(6)]  # idle from 2; low since 0
    # b holds two GPUs: g2 low from 0, g3 low from 1 (busy at 0): the workload is low since 1.
    rows += [(i, "b", "g2", "", 1.0, 0.0) for i in range(6)]
    rows += [(i, "b", "g3", "", 1.0, 0.9 if i == 0 else 0.0) for i in range(6)]
    # c: one of its two GPUs is busy at its last sample -> not idle.
    rows += [(i, "c", "g4", "", 1.0, 0.0) for i in range(6)]
    rows += [(i, "c", "g5", "", 1.0, 0.9 if i == 5 else 0.0) for i in range(6)]
    # d ended at sample 3 idle (low 0..3): idle since 0 at its last held sample.
    rows += [(i, "d", "g6", "", 1.0, 0.0) for i in range(4)]
    # e: low at its last sample but not for a whole window yet -> not idle.
    rows += [(i, "e", "g7", "", 1.0, 0.9 if i < 4 else 0.0) for i in range(6)]
    marked = mark_idle(attributed(rows), step_seconds=STEP, idle=IDLE)
    expected = pd.DataFrame(
        {
            "namespace": pd.Series(["ml"] * 5, dtype="str"),
            "pod": pd.Series(["a", "b", "c", "d", "e"], dtype="str"),
            "idle_since": times(
                [0, 1, None, 0, None], pd.DataFrame({"timestamp": marked["timestamp"].iloc[:5]})
            ).reset_index(drop=True),
        }
    )
    assert_frame_equal(idle_since(marked), expected)


# ------------------------------------------------------------------------------------------------
# The ledger


def node_samples(rows: list[tuple[int, str, str, float, float, bool, bool]]) -> pd.DataFrame:
    """NODE_SAMPLES from (sample, node, pool, capacity_ge, allocatable_ge, ready, schedulable)."""
    frame = pd.DataFrame(
        {
            "timestamp": pd.to_datetime([t(r[0]) for r in rows], utc=True),
            "node": pd.Series([r[1] for r in rows], dtype="str"),
            "pool": pd.Series([r[2] for r in rows], dtype="str"),
            "product": pd.Series([r[2] for r in rows], dtype="str"),
            "capacity_ge": [float(r[3]) for r in rows],
            "allocatable_ge": [float(r[4]) for r in rows],
            "ready": [r[5] for r in rows],
            "schedulable": [r[6] for r in rows],
        }
    )
    return NODE_SAMPLES.check(frame)


def marked_rows(rows: list[tuple[int, str, str, str, float, float, bool]]) -> pd.DataFrame:
    """IDLE_MARKED from (sample, node, pool, pod, ge_share, util_ratio, idle); one unit per pod."""
    frames = []
    for sample, node, pool, pod, ge, util, idle in rows:
        one = attributed([(sample, pod, f"{node}-{pod}", "", ge, util)], node=node, pool=pool, team=pod[0])
        frames.append(one.assign(idle=idle, low_util_since=times([None], one)))
    return IDLE_MARKED.check(pd.concat(frames, ignore_index=True))


FLEET = node_samples(
    [
        (0, "n1", H100, 8, 7, True, True),  # one GPU not advertised
        (0, "n2", H100, 8, 8, True, False),  # cordoned
        (0, "n3", H100, 4, 4, False, True),  # NotReady
        (0, "n4", A100, 1, 1, True, True),  # MIG: 3g.40gb + 2g.20gb + free slices
        (0, "n5", T4, 1, 1, True, True),  # time-sliced, 4 replicas
        (0, "n6", H100, 2, 1, True, True),  # a pod on a GPU the plugin stopped advertising
    ]
)
ALLOCATIONS = marked_rows(
    [
        (0, "n1", H100, "a-train", 4.0, 0.9, False),
        (0, "n1", H100, "b-notebook", 1.0, 0.0, True),
        (0, "n2", H100, "a-infer", 2.0, 0.5, False),
        (0, "n3", H100, "c-stuck", 1.0, math.nan, False),
        (0, "n1", H100, "c-dark", 1.0, math.nan, False),  # allocated, no telemetry: unknown
        (0, "n4", A100, "b-mig-idle", 3 / 7, 0.0, True),
        (0, "n4", A100, "c-mig-busy", 2 / 7, 0.7, False),
        (0, "n5", T4, "a-slice-idle", 0.25, 0.0, True),
        (0, "n5", T4, "b-slice-busy", 0.25, 0.0, False),
        (0, "n6", H100, "c-idle", 1.0, 0.0, True),
        (0, "n6", H100, "c-busy", 1.0, 0.8, False),
        (0, "ghost", H100, "d-ghost", 1.0, 0.2, False),  # a node node_samples does not know
    ]
)
# Fragmented GE F_n as fragmentation() would give it (n1: free 2, say p_4 = 3/4 -> 2 × 3/4 = 1.5).
STRANDED = pd.DataFrame(
    {
        "timestamp": pd.to_datetime([t(0)], utc=True),
        "node": pd.Series(["n1"], dtype="str"),
        "fragmented_ge": [1.5],
    }
)


def test_ledger_states_by_hand() -> None:
    result = ledger(FLEET, ALLOCATIONS, STRANDED)
    # n1: 8 - 7 = 1 unavailable; 4 active + 1 idle + 1 unknown (c-dark reports no utilization: never
    #     active); free = 8 - 1 - 6 = 1; F = 1.5 is capped at the free 1 -> stranded 1, unallocated 0.
    # n2: cordoned: free 8 - 2 = 6 is all stranded.
    # n3: NotReady: all 4 unavailable; the pod's 1 GE (unknown) has no room -> overallocated 1.
    # n4: MIG: 3/7 idle + 2/7 active; free 2/7, F = 0 (no row) -> unallocated 2/7.
    # n5: two 1/4 replicas, one idle one active; free 1/2 unallocated.
    # n6: capacity 2, allocatable 1: unavailable 1, room 1 for 2 GE held -> scaled by 1/2 pro rata:
    #     idle 1/2, active 1/2, overallocated 1, free 0.
    expected = pd.DataFrame(
        {
            "timestamp": pd.to_datetime([t(0)] * 6, utc=True),
            "node": pd.Series(["n1", "n2", "n3", "n4", "n5", "n6"], dtype="str"),
            "pool": pd.Series([H100, H100, H100, A100, T4, H100], dtype="str"),
            "capacity_ge": [8.0, 8.0, 4.0, 1.0, 1.0, 2.0],
            "unavailable_ge": [1.0, 0.0, 4.0, 0.0, 0.0, 1.0],
            "stranded_ge": [1.0, 6.0, 0.0, 0.0, 0.0, 0.0],
            "unallocated_ge": [0.0, 0.0, 0.0, 2 / 7, 0.5, 0.0],
            "allocated_unknown_ge": [1.0, 0.0, 0.0, 0.0, 0.0, 0.0],
            "allocated_idle_ge": [1.0, 0.0, 0.0, 3 / 7, 0.25, 0.5],
            "allocated_active_ge": [4.0, 2.0, 0.0, 2 / 7, 0.25, 0.5],
            "overallocated_ge": [0.0, 0.0, 1.0, 0.0, 0.0, 1.0],
        }
    )
    assert_frame_equal(result.by_node, expected, **EXACT)
    states = expected[[f"{s}_ge" for s in LEDGER_STATES]]
    np.testing.assert_allclose(states.sum(axis=1), expected["capacity_ge"], rtol=0, atol=1e-12)
    # The ghost node's allocation is not lost: it is reported for callers to count.
    unknown = pd.DataFrame(
        {
            "timestamp": pd.to_datetime([t(0)], utc=True),
            "node": pd.Series(["ghost"], dtype="str"),
            "pool": pd.Series([H100], dtype="str"),
            "allocated_unknown_ge": [0.0],
            "allocated_idle_ge": [0.0],
            "allocated_active_ge": [1.0],
        }
    )
    assert_frame_equal(result.unknown_nodes, unknown, **EXACT)


def test_schedulable_free_is_zero_where_nothing_can_be_placed() -> None:
    free = schedulable_free(FLEET, ALLOCATIONS)
    # n2 cordoned (6 free, none placeable), n3 NotReady; n1 1, n4 2/7, n5 1/2, n6 0.
    expected = pd.DataFrame(
        {
            "timestamp": pd.to_datetime([t(0)] * 6, utc=True),
            "node": pd.Series(["n1", "n2", "n3", "n4", "n5", "n6"], dtype="str"),
            "pool": pd.Series([H100, H100, H100, A100, T4, H100], dtype="str"),
            "schedulable_free_ge": [1.0, 0.0, 0.0, 2 / 7, 0.5, 0.0],
        }
    )
    assert_frame_equal(free, expected, **EXACT)


def test_allocation_identity_over_fleet_ledger_and_unknown_nodes() -> None:
    result = ledger(FLEET, ALLOCATIONS, STRANDED)
    held = ALLOCATIONS["ge_share"].sum()  # 4+1+2+1+1+3/7+2/7+1/4+1/4+1+1+1 = 12.5 + 5/7
    allocated = [f"{s}_ge" for s in ALLOCATED_STATES]
    placed = result.by_node[[*allocated, "overallocated_ge"]].to_numpy().sum()
    unknown = result.unknown_nodes[allocated].to_numpy().sum()
    assert held == pytest.approx(12.5 + 5 / 7)
    assert placed + unknown == pytest.approx(held)


def test_ledger_gpu_hours_per_fleet_and_pool() -> None:
    by_node = ledger(FLEET, ALLOCATIONS, STRANDED).by_node
    # 60 s samples: GE-hours = GE / 60. Fleet capacity 8+8+4+1+1+2 = 24 GE -> 0.4 GE-h.
    fleet = ledger_gpu_hours(by_node, step_seconds=STEP)
    expected_fleet = pd.DataFrame(
        {
            "capacity_gpu_hours": [24 / 60],
            "unavailable_gpu_hours": [6 / 60],
            "stranded_gpu_hours": [7.0 / 60],
            "unallocated_gpu_hours": [(2 / 7 + 0.5) / 60],
            "allocated_unknown_gpu_hours": [1.0 / 60],
            "allocated_idle_gpu_hours": [(1 + 3 / 7 + 0.25 + 0.5) / 60],
            "allocated_active_gpu_hours": [(4 + 2 + 2 / 7 + 0.25 + 0.5) / 60],
            "overallocated_gpu_hours": [2 / 60],
        }
    )
    assert_frame_equal(fleet, expected_fleet, **EXACT)
    pools = ledger_gpu_hours(by_node, step_seconds=STEP, by=("pool",))
    # Sorted by pool. A100: n4; H100: n1, n2, n3, n6; T4: n5.
    assert list(pools["pool"]) == [A100, H100, T4]
    np.testing.assert_allclose(pools["capacity_gpu_hours"], [1 / 60, 22 / 60, 1 / 60])
    np.testing.assert_allclose(pools["stranded_gpu_hours"], [0.0, 7.0 / 60, 0.0])
    np.testing.assert_allclose(pools["allocated_unknown_gpu_hours"], [0.0, 1.0 / 60, 0.0])
    np.testing.assert_allclose(pools["allocated_idle_gpu_hours"], [3 / 7 / 60, 1.5 / 60, 0.25 / 60])
    summed = pools.drop(columns="pool").sum().to_frame().T
    assert_frame_equal(summed, expected_fleet, **EXACT)


def test_duplicate_and_unknown_capacity_node_samples() -> None:
    # A repeated node-sample counts once (the last row); NaN capacity leaves the node-sample out,
    # so its allocation shows up under unknown_nodes instead of vanishing.
    nodes = node_samples(
        [
            (0, "n1", H100, 8, 8, True, True),
            (0, "n1", H100, 8, 6, True, True),
            (0, "n2", H100, 8, 8, True, True),
        ]
    )
    nodes.loc[2, "capacity_ge"] = math.nan
    held = marked_rows([(0, "n1", H100, "a", 1.0, 0.5, False), (0, "n2", H100, "b", 2.0, 0.5, True)])
    result = ledger(nodes, held, STRANDED.iloc[:0])
    assert result.by_node[["node", "unavailable_ge", "unallocated_ge"]].to_dict("records") == [
        {"node": "n1", "unavailable_ge": 2.0, "unallocated_ge": 5.0}
    ]
    assert result.unknown_nodes[["node", "allocated_idle_ge"]].to_dict("records") == [
        {"node": "n2", "allocated_idle_ge": 2.0}
    ]


# ------------------------------------------------------------------------------------------------
# Usage summaries


def usage_fleet() -> pd.DataFrame:
    # Step 1 h so GE-hours = GE per sample. Team x: pod p (1 GPU, 3 samples: util 0.5, unknown, then
    # 0 idle-marked), pod q (MIG 3/7, util 0.7). Team y: pod r (1/4 replica, util 0.4, idle-marked for
    # the test), pod s (1 GPU, util always unknown).
    rows = [
        (0, "p", "g1", "", 1.0, 0.5, False, "x", H100),
        (1, "p", "g1", "", 1.0, math.nan, False, "x", H100),
        (2, "p", "g1", "", 1.0, 0.0, True, "x", H100),
        (0, "q", "g2", "1", 3 / 7, 0.7, False, "x", A100),
        (0, "r", "g3", "", 0.25, 0.4, True, "y", T4),
        (0, "s", "g4", "", 1.0, math.nan, False, "y", H100),
    ]
    frames = []
    for sample, pod, uuid, gi, ge, util, idle, team, pool in rows:
        one = attributed([(sample, pod, uuid, gi, ge, util)], team=team, pool=pool, namespace=f"ns-{team}")
        frames.append(one.assign(idle=idle, low_util_since=times([None], one)))
    return IDLE_MARKED.check(pd.concat(frames, ignore_index=True))


def test_usage_by_team() -> None:
    summary = usage_summary(usage_fleet(), step_seconds=3600, by="team")
    # x: allocated 3 + 3/7; used 0.5×1 + 0 + 0.7×3/7 = 0.8 (the NaN sample excluded); idle 1; unknown 1.
    # y: allocated 0.25 + 1; used 0.4×0.25 = 0.1; idle 0.25; unknown 1 (s).
    expected = pd.DataFrame(
        {
            "team": pd.Series(["x", "y"], dtype="str"),
            "allocated_gpu_hours": [3 + 3 / 7, 1.25],
            "used_gpu_hours": [0.8, 0.1],
            "idle_gpu_hours": [1.0, 0.25],
            "unknown_gpu_hours": [1.0, 1.0],
            # Of the hours whose utilization is known: the unknown hour of each team is left out.
            "efficiency": [0.8 / (2 + 3 / 7), 0.1 / 0.25],
            "pods": [2, 2],
        }
    )
    assert_frame_equal(summary, expected, **EXACT)


def test_usage_by_workload_and_pool_and_fleet() -> None:
    marked = usage_fleet()
    workloads = usage_summary(marked, step_seconds=3600, by="workload")
    assert list(zip(workloads["namespace"], workloads["pod"], strict=True)) == [
        ("ns-x", "p"),
        ("ns-x", "q"),
        ("ns-y", "r"),
        ("ns-y", "s"),
    ]
    # s never reported utilization: used and efficiency are unknown (NaN), never 0.
    np.testing.assert_allclose(workloads["used_gpu_hours"], [0.5, 0.3, 0.1, math.nan])
    np.testing.assert_allclose(workloads["efficiency"], [0.5 / 2, 0.7, 0.4, math.nan])
    np.testing.assert_allclose(workloads["unknown_gpu_hours"], [1.0, 0.0, 0.0, 1.0])
    assert list(workloads["pods"]) == [1, 1, 1, 1]
    pools = usage_summary(marked, step_seconds=3600, by="pool")
    assert list(pools["pool"]) == [A100, H100, T4]
    np.testing.assert_allclose(pools["allocated_gpu_hours"], [3 / 7, 4.0, 0.25])
    fleet = usage_summary(marked, step_seconds=3600, by="fleet")
    expected = pd.DataFrame(
        {
            "allocated_gpu_hours": [4.25 + 3 / 7],
            "used_gpu_hours": [0.9],
            "idle_gpu_hours": [1.25],
            "unknown_gpu_hours": [2.0],
            "efficiency": [0.9 / (2.25 + 3 / 7)],
            "pods": [4],
        }
    )
    assert_frame_equal(fleet, expected, **EXACT)
    # Sixty-second samples: every hour figure is divided by 60.
    per_minute = usage_summary(marked, step_seconds=60, by="fleet")
    assert per_minute["allocated_gpu_hours"].iloc[0] == pytest.approx((4.25 + 3 / 7) / 60)


def test_efficiency_is_unknown_when_nothing_is_allocated() -> None:
    summary = usage_summary(IDLE_MARKED.empty(), step_seconds=60, by="fleet")
    assert summary["allocated_gpu_hours"].iloc[0] == 0.0
    assert math.isnan(summary["efficiency"].iloc[0])
    assert len(usage_summary(IDLE_MARKED.empty(), step_seconds=60, by="team")) == 0


def test_usage_on_categorical_keys_equals_usage_on_strings() -> None:
    """The join emits categorical keys (with categories no row uses): same groups, same numbers."""
    from gpuwatch.analytics.ledger import usage_summary

    t = pd.Timestamp("2026-11-20", tz="UTC")
    frame = pd.DataFrame(
        {
            "timestamp": [t, t, t + pd.Timedelta(minutes=1)],
            "namespace": ["b", "a", "a"],
            "pod": ["p2", "p1", "p1"],
            "team": ["y", "x", "x"],
            "node": ["n1", "n1", "n1"],
            "pool": ["P", "P", "P"],
            "uuid": ["u2", "u1", "u1"],
            "gpu_instance_id": ["", "", ""],
            "ge_share": [1.0, 0.5, 0.5],
            "util_ratio": [0.2, float("nan"), 0.4],
            "idle": [False, False, True],
            "low_util_since": pd.Series([pd.NaT] * 3, dtype="datetime64[ns, UTC]"),
        }
    )
    categorical = frame.astype(
        {
            "namespace": pd.CategoricalDtype(["a", "b", "unused"]),
            "pod": pd.CategoricalDtype(["p0", "p1", "p2"]),
            "uuid": pd.CategoricalDtype(["u1", "u2"]),
        }
    )
    for by in ("namespace", "workload"):
        plain = usage_summary(frame, step_seconds=60, by=by)
        coded = usage_summary(categorical, step_seconds=60, by=by)
        keys = ["namespace"] if by == "namespace" else ["namespace", "pod"]
        coded[keys] = coded[keys].astype("str")
        pd.testing.assert_frame_equal(plain, coded, check_dtype=False)
        assert coded["namespace"].tolist() == ["a", "b"]  # no row for the unused category


def test_idle_hours_split_into_held_and_abandoned_by_the_framebuffer() -> None:
    """SPEC §3: idle-allocated GE-hours whose unit's framebuffer holds at least idle.held_fb_bytes are held
    (a model loaded), the rest abandoned; unknown framebuffer makes the group's split unknown."""
    gib = 1024**3
    # 1 h steps, idle window 1 h: every below-threshold sample is idle. Pod nb (1 GPU) holds 20 GiB,
    # then 0.3 GiB (its kernel died); pod mig (MIG 2/7) holds 5 GiB; pod stuck (1/2 replica) holds no
    # framebuffer reading at its second sample; pod busy is never idle (and unknown framebuffer).
    rows = [
        (0, "nb", "g1", "", 1.0, 0.0, 20 * gib),
        (1, "nb", "g1", "", 1.0, 0.0, 0.3 * gib),
        (0, "mig", "g2", "3", 2 / 7, 0.01, 5 * gib),
        (0, "stuck", "g3", "", 0.5, 0.0, 0.0),
        (1, "stuck", "g3", "", 0.5, 0.0, math.nan),
        (0, "busy", "g4", "", 1.0, 0.9, math.nan),
    ]
    frame = attributed([r[:6] for r in rows]).assign(fb_used_bytes=[r[6] for r in rows])
    marked = mark_idle(frame, step_seconds=3600, idle=IdleParams(window_seconds=3600, held_fb_bytes=gib))
    assert marked["memory_held"].tolist() == pytest.approx(
        [1.0, 0.0, 1.0, 0.0, math.nan, math.nan], nan_ok=True
    )
    pods = usage_summary(marked, step_seconds=3600, by="workload").set_index("pod")
    assert pods.loc["nb", ["idle_gpu_hours", "held_idle_gpu_hours", "abandoned_idle_gpu_hours"]].tolist() == [
        2.0,
        1.0,
        1.0,
    ]
    assert pods.loc["mig", "held_idle_gpu_hours"] == pytest.approx(2 / 7)
    assert pods.loc["mig", "abandoned_idle_gpu_hours"] == 0.0
    # Half of stuck's idle hour has no framebuffer reading: neither part is known.
    assert pods.loc["stuck", "idle_gpu_hours"] == 1.0
    assert math.isnan(pods.loc["stuck", "held_idle_gpu_hours"])
    assert math.isnan(pods.loc["stuck", "abandoned_idle_gpu_hours"])
    # Never idle: nothing held or abandoned, whatever its framebuffer.
    assert pods.loc["busy", ["held_idle_gpu_hours", "abandoned_idle_gpu_hours"]].tolist() == [0.0, 0.0]
    team = usage_summary(marked.query("pod != 'stuck'"), step_seconds=3600, by="team").iloc[0]
    assert (team["held_idle_gpu_hours"], team["abandoned_idle_gpu_hours"]) == pytest.approx((1 + 2 / 7, 1.0))
    assert team["held_idle_gpu_hours"] + team["abandoned_idle_gpu_hours"] == pytest.approx(
        team["idle_gpu_hours"]
    )
