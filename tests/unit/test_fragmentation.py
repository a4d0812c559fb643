"""FGD fragmentation (Weng et al., ATC'23) of SPEC §3 on hand-computed fleets, and pending-pod diagnosis."""

import pandas as pd
import pytest
from pandas.testing import assert_frame_equal

from gpuwatch.analytics.fragmentation import (
    diagnose_pending,
    fragmentation,
    fragmentation_summary,
    largest_free_block,
    request_mix,
)
from gpuwatch.analytics.placement import screen_pending
from gpuwatch.core.model import GPU_PRODUCT_LABEL, RESOURCE_GPU, Node, Pod
from gpuwatch.core.schema import GPU_REQUESTS, PENDING_PODS, REQUEST_MIX, SCHEDULABLE_FREE

T0 = pd.Timestamp("2026-11-20 00:00", tz="UTC")
A, B, C = "NVIDIA-A100-SXM4-80GB", "NVIDIA-H100-80GB-HBM3", "NVIDIA-L4"
EXACT = {"check_exact": False, "rtol": 1e-12, "atol": 0.0}


def t(i: int) -> pd.Timestamp:
    return T0 + pd.Timedelta(minutes=i)


def requests(rows: list[tuple[str, str, float]]) -> pd.DataFrame:
    """GPU_REQUESTS from (pod, pool, gpus)."""
    frame = pd.DataFrame(
        {
            "namespace": pd.Series(["ml"] * len(rows), dtype="str"),
            "pod": pd.Series([r[0] for r in rows], dtype="str"),
            "pool": pd.Series([r[1] for r in rows], dtype="str"),
            "gpus": [float(r[2]) for r in rows],
        }
    )
    return GPU_REQUESTS.check(frame)


def free(rows: list[tuple[int, str, str, float]]) -> pd.DataFrame:
    """SCHEDULABLE_FREE from (sample, node, pool, free GE)."""
    frame = pd.DataFrame(
        {
            "timestamp": pd.to_datetime([t(r[0]) for r in rows], utc=True),
            "node": pd.Series([r[1] for r in rows], dtype="str"),
            "pool": pd.Series([r[2] for r in rows], dtype="str"),
            "schedulable_free_ge": [float(r[3]) for r in rows],
        }
    )
    return SCHEDULABLE_FREE.check(frame)


# Pool A pods ask 1, 1, 2, 4 GPUs; a pod without a product selector ("") asks 2; pool B has none.
# Pool A mix: p_1 = 2/4, p_2 = 1/4, p_4 = 1/4. Fleet mix (all 5 pods): p_1 = 2/5, p_2 = 2/5, p_4 = 1/5.
REQUESTS = requests([("a1", A, 1), ("a2", A, 1), ("a3", A, 2), ("a4", A, 4), ("any", "", 2), ("zero", A, 0)])


def test_request_mix_per_pool_and_fleet() -> None:
    expected = pd.DataFrame(
        {
            "pool": pd.Series(["", "", "", A, A, A], dtype="str"),
            "k": [1.0, 2.0, 4.0, 1.0, 2.0, 4.0],
            "p_k": [2 / 5, 2 / 5, 1 / 5, 2 / 4, 1 / 4, 1 / 4],
        }
    )
    assert_frame_equal(REQUEST_MIX.check(request_mix(REQUESTS)), expected, **EXACT)


def test_a_repeated_pod_counts_once() -> None:
    mix = request_mix(requests([("a1", A, 1), ("a1", A, 2)]))
    assert mix[mix["pool"] == A][["k", "p_k"]].to_dict("records") == [{"k": 2.0, "p_k": 1.0}]


def test_fragmentation_by_hand() -> None:
    frame = free(
        [
            (0, "a-n1", A, 1),  # F = 1 × (p_2 + p_4) = 1 × 1/2 = 0.5
            (0, "a-n2", A, 3),  # F = 3 × p_4 = 3 × 1/4 = 0.75
            (0, "a-n3", A, 0),  # nothing free, nothing fragmented
            (0, "a-n4", A, 4),  # 4 < k for no k: F = 0
            (0, "b-n1", B, 3),  # pool B has no pods: fleet mix, F = 3 × p_4 = 3 × 1/5 = 0.6
            (1, "a-n1", A, 0),  # nothing free in the pool: ratio 0
        ]
    )
    per_node, per_pool = fragmentation(frame, request_mix(REQUESTS))
    assert_frame_equal(per_node, frame.assign(fragmented_ge=[0.5, 0.75, 0.0, 0.0, 0.6, 0.0]), **EXACT)
    expected = pd.DataFrame(
        {
            "timestamp": pd.to_datetime([t(0), t(0), t(1)], utc=True),
            "pool": pd.Series([A, B, A], dtype="str"),
            "schedulable_free_ge": [8.0, 3.0, 0.0],
            "fragmented_ge": [1.25, 0.6, 0.0],
            # A: (0.5 + 0.75) / (1 + 3 + 0 + 4) = 1.25 / 8; B: 0.6 / 3 = 0.2; nothing free -> 0.
            "fragmentation_ratio": [1.25 / 8, 0.2, 0.0],
        }
    )
    assert_frame_equal(
        per_pool.sort_values(["timestamp", "pool"], ignore_index=True),
        expected.sort_values(["timestamp", "pool"], ignore_index=True),
        **EXACT,
    )
    summary = fragmentation_summary(per_pool, step_seconds=60)
    # Time average of A's ratio over its two samples: (1.25/8 + 0) / 2; fragmented GE-hours 1.25 / 60.
    assert summary["pool"].tolist() == [A, B]
    assert summary["fragmentation_ratio"].tolist() == pytest.approx([1.25 / 16, 0.2], rel=1e-12)
    assert summary["fragmented_gpu_hours"].tolist() == pytest.approx([1.25 / 60, 0.6 / 60], rel=1e-12)


def test_fractional_free_and_no_mix_at_all() -> None:
    # Float noise of summed shares: 7 × 1/7 free is one GPU, which a 1-GPU pod fits (not fragmented).
    frame = free([(0, "n1", A, sum([1 / 7] * 7)), (0, "n2", A, 3 / 7)])
    mix = request_mix(requests([("p", A, 1)]))
    per_node, _ = fragmentation(frame, mix)
    assert per_node["fragmented_ge"].tolist() == [0.0, 3 / 7]  # 3/7 < 1 -> all of it fragmented
    per_node, per_pool = fragmentation(frame, request_mix(requests([])))
    assert per_node["fragmented_ge"].tolist() == [0.0, 0.0]
    assert per_pool["fragmentation_ratio"].tolist() == [0.0]


def test_largest_free_block_at_the_last_sample() -> None:
    frame = free([(0, "a-n1", A, 8), (1, "a-n1", A, 1), (1, "a-n2", A, 3), (1, "b-n1", B, 0)])
    expected = pd.DataFrame({"pool": pd.Series([A, B], dtype="str"), "largest_free_block_ge": [3.0, 0.0]})
    assert_frame_equal(largest_free_block(frame), expected)


def gpu_node(name: str, product: str, gpus: int = 8) -> Node:
    return Node(
        name=name,
        product=product,
        gpu_count=gpus,
        capacity={RESOURCE_GPU: float(gpus)},
        allocatable={RESOURCE_GPU: float(gpus)},
        labels={GPU_PRODUCT_LABEL: product},
    )


def test_diagnose_pending_fragmentation_vs_capacity_over_the_nodes_a_pod_may_use() -> None:
    # Last sample: pool A nodes free 1 and 3 (total 4, largest 3); pool B one node free 3; pool C's one
    # node has nothing free. Fleet: total 7, largest 3. The earlier sample (8 free on a-n1) must not count.
    last = free(
        [(0, "a-n1", A, 8), (1, "a-n1", A, 1), (1, "a-n2", A, 3), (1, "b-n1", B, 3), (1, "c-n1", C, 0)]
    )
    nodes = [gpu_node("a-n1", A), gpu_node("a-n2", A), gpu_node("b-n1", B), gpu_node("c-n1", C)]
    rows = [
        ("frag", A, 4.0, 10),  # 4 ≥ 4 in total, no node has 4 -> fragmentation
        ("big", A, 8.0, 20),  # 4 < 8 -> capacity
        ("fits", A, 2.0, 30),  # a node has 3 ≥ 2: not fragmentation -> capacity (waits on something else)
        ("fleet-frag", "", 5.0, 40),  # fleet total 7 ≥ 5, largest 3 -> fragmentation
        ("fleet-big", "", 8.0, 50),  # 7 < 8 -> capacity
        ("no-free", C, 1.0, 60),  # its pool has no free GPU -> capacity
        # A selector is a label match: no node is labelled the lower-case spelling -> affinity.
        ("lowercase", "nvidia a100 sxm4 80gb", 4.0, 70),
    ]
    pods = [
        Pod(
            namespace="ml",
            name=name,
            uid=name,
            phase="Pending",
            created_at=T0.to_pydatetime(),
            gpu_requests={RESOURCE_GPU: gpus},
            node_selector_product=pool or None,
        )
        for name, pool, gpus, _ in rows
    ]
    pending = PENDING_PODS.check(
        pd.DataFrame(
            {
                "namespace": pd.Series(["ml"] * len(rows), dtype="str"),
                "pod": pd.Series([r[0] for r in rows], dtype="str"),
                "team": pd.Series(["research"] * len(rows), dtype="str"),
                "pool": pd.Series([r[1] for r in rows], dtype="str"),
                "gpus": [r[2] for r in rows],
                "created_at": pd.to_datetime([T0 - pd.Timedelta(seconds=r[3]) for r in rows], utc=True),
            }
        )
    )
    screens, placeable = screen_pending(pods, nodes)
    as_of = (T0 + pd.Timedelta(minutes=1)).to_pydatetime()
    result = diagnose_pending(pending, last, as_of=as_of, screens=screens, placeable=placeable)
    selector = f"{GPU_PRODUCT_LABEL}=nvidia a100 sxm4 80gb"
    expected = pending.assign(
        pool=pd.Series([A, A, A, "", "", C, A], dtype="str"),
        pool_free_ge=[4.0, 4.0, 4.0, 7.0, 7.0, 0.0, 0.0],
        largest_free_block_ge=[3.0, 3.0, 3.0, 3.0, 3.0, 0.0, 0.0],
        waiting_seconds=[70.0, 80.0, 90.0, 100.0, 110.0, 120.0, 130.0],  # as_of − created_at
        blocked_by=pd.Series(
            ["fragmentation", "capacity", "capacity", "fragmentation", "capacity", "capacity", "affinity"],
            dtype="str",
        ),
        node_affinity=pd.Series(
            [f"{GPU_PRODUCT_LABEL}={A}"] * 3 + ["", "", f"{GPU_PRODUCT_LABEL}={C}", selector], dtype="str"
        ),
        tolerations=pd.Series([""] * len(rows), dtype="str"),
        scheduler_message=pd.Series([""] * len(rows), dtype="str"),
        reason=[
            "4 GPUs are free on the nodes it may use, but at most 3 on one node; it needs 4 GPUs",
            "it needs 8 GPUs; 4 GPUs are free on the 2 nodes it may use",
            "it needs 2 GPUs and a node it may use has 3 free now: the scheduler has not placed it yet",
            "7 GPUs are free on the nodes it may use, but at most 3 on one node; it needs 5 GPUs",
            "it needs 8 GPUs; 7 GPUs are free on the 4 nodes it may use",
            "it needs 1 GPU; no GPU is free on the 1 node it may use",
            f"no GPU node matches its node selector or required affinity ({selector})",
        ],
    )
    expected = expected.iloc[::-1].reset_index(drop=True)  # longest wait first
    assert_frame_equal(result[expected.columns], expected)
