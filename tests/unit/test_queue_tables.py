"""Kueue's objects in gpuwatch's terms and a window's queue tables, on a tiny cluster worked out by hand:
flavors to pools, time-sliced quota in GE, teams of queues, borrowing and lending, showback dollars,
waits, preemptions and fairness (issue 14)."""

from datetime import UTC, datetime, timedelta

import pandas as pd
import pytest

from gpuwatch.analytics.queuetables import QueueSetup, queue_setup, queue_tables, workload_inputs
from gpuwatch.core.model import (
    GPU_PRODUCT_LABEL,
    RESOURCE_GPU,
    ClusterQueue,
    FlavorQuota,
    KueueState,
    LocalQueue,
    Node,
    ResourceFlavor,
    TeamRules,
    Window,
    Workload,
)
from gpuwatch.core.schema import POOL_PRICES

T0 = datetime(2026, 11, 20, tzinfo=UTC)
H100, T4 = "NVIDIA-H100-80GB-HBM3", "TESLA-T4"
WINDOW = Window(start=T0, end=T0 + timedelta(hours=4), step_seconds=3600)
NODES = [
    Node(name="h1", product=H100, gpu_count=8, labels={GPU_PRODUCT_LABEL: H100}),
    # Time-sliced: 4 replicas a GPU; its flavor names no product, only the cloud's accelerator label.
    Node(
        name="t1",
        product="Tesla-T4-SHARED",
        gpu_count=4,
        replicas=4,
        labels={GPU_PRODUCT_LABEL: "Tesla-T4-SHARED", "cloud.google.com/gke-accelerator": "nvidia-tesla-t4"},
    ),
]
KUEUE = KueueState(
    installed=True,
    version="v1beta2",
    flavors=(
        ResourceFlavor(name="h100", node_labels={GPU_PRODUCT_LABEL: H100}),
        ResourceFlavor(name="t4", node_labels={"cloud.google.com/gke-accelerator": "nvidia-tesla-t4"}),
        ResourceFlavor(name="ghost", node_labels={"pool": "gone"}),  # selects no node
    ),
    cluster_queues=(
        ClusterQueue(
            name="research",
            cohort="c",
            quotas=(
                FlavorQuota(flavor="h100", resource=RESOURCE_GPU, nominal=8),
                FlavorQuota(flavor="t4", resource=RESOURCE_GPU, nominal=8),  # 8 replicas = 2 GE
                FlavorQuota(flavor="h100", resource="cpu", nominal=64),  # not a GPU: left out
            ),
        ),
        ClusterQueue(
            name="ml",
            cohort="c",
            quotas=(FlavorQuota(flavor="h100", resource=RESOURCE_GPU, nominal=2, lending_limit=1),),
        ),
        ClusterQueue(name="phantom", quotas=(FlavorQuota(flavor="ghost", resource=RESOURCE_GPU, nominal=4),)),
    ),
    local_queues=(
        LocalQueue(namespace="team-a", name="a-queue", cluster_queue="research"),
        LocalQueue(namespace="team-b", name="b-queue", cluster_queue="research"),
        LocalQueue(namespace="ml", name="ml-queue", cluster_queue="ml"),
    ),
    workloads=(
        # Waited an hour, holds 2 H100s from T0+1h.
        Workload(
            namespace="team-a",
            name="a1",
            queue_name="a-queue",
            created_at=T0,
            gpu_requests={RESOURCE_GPU: 2},
            cluster_queue="research",
            flavors={RESOURCE_GPU: "h100"},
            quota_reserved_at=T0 + timedelta(hours=1),
            admitted_at=T0 + timedelta(hours=1),
        ),
        # Pending since T0+2h.
        Workload(
            namespace="team-b",
            name="b1",
            queue_name="b-queue",
            created_at=T0 + timedelta(hours=2),
            gpu_requests={RESOURCE_GPU: 1},
        ),
        # Admitted at T0 (after 10 minutes), 4 H100s on a nominal 2: borrows 2 until Kueue preempts it.
        Workload(
            namespace="ml",
            name="m1",
            queue_name="ml-queue",
            created_at=T0 - timedelta(minutes=10),
            gpu_requests={RESOURCE_GPU: 4},
            cluster_queue="ml",
            flavors={RESOURCE_GPU: "h100"},
            admitted_at=T0,
            evicted_at=T0 + timedelta(hours=3),
            evicted_reason="Preempted",
            preemptions=1,
        ),
        # A job with no GPU: not a GPU workload.
        Workload(namespace="ml", name="cpu-only", queue_name="ml-queue", created_at=T0, gpu_requests={}),
    ),
)
RULES = TeamRules()
NAMESPACE_LABELS = {"team-a": {"team": "alpha"}, "team-b": {"team": "alpha"}}
PRICES = POOL_PRICES.check(
    pd.DataFrame(
        {
            "timestamp": pd.to_datetime([T0, T0], utc=True),
            "pool": pd.Series([H100, T4], dtype="str"),
            "usd_per_gpu_hour": [4.0, 0.5],
        }
    )
)


# team-b's b1 pod, pending for 2 h for one H100 (its Workload is b1).
B1_PENDING = pd.DataFrame(
    {
        "namespace": ["team-b"],
        "pod": ["b1-pod"],
        "team": ["alpha"],
        "pool": [H100],
        "gpus": [1.0],
        "waiting_seconds": [7200.0],
    }
)


def setup() -> QueueSetup:
    return queue_setup(KUEUE, nodes=NODES, rules=RULES, namespace_labels=NAMESPACE_LABELS)


def test_flavors_become_pools_and_quota_becomes_gpu_equivalents() -> None:
    s = setup()
    quotas = s.quotas.set_index(["cluster_queue", "pool"])
    assert sorted(quotas.index) == [("ml", H100), ("research", H100), ("research", T4)]
    # The T4 flavor names no product: its pool is its nodes'; 8 time-sliced replicas are 2 GPUs.
    assert quotas.loc[("research", T4), "nominal_gpus"] == 2.0
    assert quotas.loc[("research", H100), "nominal_gpus"] == 8.0
    assert quotas.loc[("ml", H100), ["nominal_gpus", "lending_limit_gpus"]].tolist() == [2.0, 1.0]
    assert pd.isna(quotas.loc[("ml", H100), "borrowing_limit_gpus"])  # no limit set: unlimited
    # A cluster queue's team is its local queues' (both in alpha's namespaces); ml has no team label.
    assert quotas.loc[("research", H100), "team"] == "alpha"
    assert quotas.loc[("ml", H100), "team"] == "ml"
    assert s.warnings == ("Kueue flavor(s) ghost select no GPU node: their quota is left out",)
    workloads = s.workloads.set_index("workload")
    assert list(workloads.index) == ["a1", "b1", "m1"]
    assert workloads.loc["b1", "pool"] == ""  # never admitted
    # Evicted after it was admitted: it stopped holding quota then.
    assert workloads.loc["m1", "finished_at"] == pd.Timestamp(T0 + timedelta(hours=3))
    assert pd.isna(workloads.loc["a1", "finished_at"])


def test_a_windows_queue_tables_by_hand() -> None:
    # The report's workload rows: alpha's pod held 2 H100s for 3 h, ml's 4 for 3 h; an alpha pod is idle.
    workloads = pd.DataFrame(
        {
            "namespace": ["team-a", "ml"],
            "pod": ["a1-pod", "m1-pod"],
            "team": ["alpha", "ml"],
            "pool": [H100, H100],
            "gpus": [2.0, 4.0],
            "allocated_gpu_hours": [6.0, 12.0],
            "idle_since": pd.to_datetime([T0 + timedelta(hours=1), None], utc=True),
        }
    )
    tables = queue_tables(
        setup(),
        window=WINDOW,
        prices=PRICES,
        **inputs(workloads),
        pending=B1_PENDING,
        reclaim_after_seconds=7200,
    )
    assert tables.step_seconds == 3600
    rows = tables.queues.set_index("queue")
    # phantom's only quota is in a flavor no node backs: it has no row.
    assert list(rows.index) == ["ml-queue", "a-queue", "b-queue"]
    # ml holds 4 on a nominal 2 at T0, +1h, +2h (evicted at +3h): borrows 2 GPUs × 3 h from research,
    # the only queue of cohort c with unused quota, which lends them.
    assert rows.loc["ml-queue", "borrowed_gpu_hours"] == pytest.approx(6.0)
    assert rows.loc["a-queue", "lent_gpu_hours"] == pytest.approx(6.0)
    assert rows.loc["a-queue", "used_gpu_hours"] == pytest.approx(6.0)  # 2 GPUs from +1h: 3 samples
    # Reserved but unused: research H100 (8 + 6 + 6 + 6) GE-h at $4, T4 2 × 4 GE-h at $0.5 = $108;
    # ml: only at +3h, 2 GE-h at $4.
    assert rows.loc["a-queue", "reserved_unused_gpu_hours"] == pytest.approx(34.0)
    assert rows.loc["a-queue", "reserved_unused_usd"] == pytest.approx(26 * 4.0 + 8 * 0.5)
    assert rows.loc["ml-queue", "reserved_unused_usd"] == pytest.approx(8.0)
    # Both of research's local queues show its quota: one fact, not to be added up.
    assert rows.loc["b-queue", "reserved_unused_usd"] == rows.loc["a-queue", "reserved_unused_usd"]
    assert rows.loc["a-queue", "nominal_gpus"] == 10.0  # 8 H100 + 2 T4 GE
    # Waits: a1 an hour to admission; b1 pending 2 h at the end; m1 10 minutes and preempted once.
    assert rows.loc["a-queue", ["admitted_workloads", "pending_workloads", "wait_seconds_max"]].tolist() == [
        1,
        0,
        3600.0,
    ]
    assert rows.loc["b-queue", ["pending_workloads", "wait_seconds_p50"]].tolist() == [1, 7200.0]
    assert rows.loc["ml-queue", ["preemptions", "wait_seconds_p50"]].tolist() == [1, 600.0]
    # Fairness: H100 quota 8 × 4 h (alpha) + 2 × 4 h (ml) = 40 GE-h; T4 2 × 4 = 8 (alpha's).
    # alpha: allocation 6/40, quota max(32/40, 8/8) = 1 → 0.15; ml: 12/40 ÷ 8/40 = 1.5.
    fair = tables.fairness.set_index("team")
    assert fair.loc["alpha", "fairness_ratio"] == pytest.approx(0.15)
    assert fair.loc["ml", "fairness_ratio"] == pytest.approx(1.5)
    # Pending demand for H100s beside alpha's idle pod; it idled 3 h (over the 2 h threshold) but its
    # queue (research) lends, it does not borrow.
    blocked = tables.blocked_vs_idle.set_index("pool")
    assert blocked.loc[H100, ["pending_gpus", "idle_allocated_gpus", "idle_holders"]].tolist() == [
        1.0,
        2.0,
        "alpha (2 GPUs)",
    ]
    (candidate,) = tables.reclaim.to_dict("records")
    assert (candidate["pod"], candidate["idle_seconds"], candidate["usd_per_hour"]) == (
        "a1-pod",
        10800.0,
        8.0,
    )
    assert (candidate["cluster_queue"], candidate["borrowing"]) == ("research", False)


def test_recorded_usage_stands_for_workloads_kueue_has_deleted() -> None:
    """The history path's usage, as the exporter published it, replaces the Workloads': none is left here
    (Kueue deleted them with their Jobs), yet ml's borrowing and research's lending are counted. A sample
    the exporter published nothing for (+3h) counts nothing: it is no row."""
    s = setup()
    gone = QueueSetup(
        installed=True,
        quotas=s.quotas,
        workloads=s.workloads.iloc[0:0],
        local_queues=s.local_queues,
        cohorts=s.cohorts,
    )
    times = pd.to_datetime([T0, T0 + timedelta(hours=1), T0 + timedelta(hours=2)], utc=True)
    recorded = pd.DataFrame(
        {
            "timestamp": times.repeat(2),
            "cluster_queue": ["ml", "research"] * 3,
            "cohort": ["c"] * 6,
            "team": ["ml", "alpha"] * 3,
            "pool": [H100] * 6,
            "nominal_gpus": [2.0, 8.0] * 3,
            "used_gpus": [4.0, 0.0, 4.0, 2.0, 3.0, 2.0],
            "borrowed_gpus": [2.0, 0.0, 2.0, 0.0, 1.0, 0.0],
            "lent_gpus": [0.0, 2.0, 0.0, 2.0, 0.0, 1.0],
        }
    )
    pending = pd.DataFrame(columns=["namespace", "pod", "team", "pool", "gpus", "waiting_seconds"])

    def rows_of(recorded: pd.DataFrame | None) -> pd.DataFrame:
        tables = queue_tables(
            gone,
            window=WINDOW,
            prices=PRICES,
            allocated=None,
            idle=None,
            pending=pending,
            reclaim_after_seconds=7200,
            recorded=recorded,
        )
        return tables.queues.set_index("queue")

    rows = rows_of(recorded)
    assert rows.loc["ml-queue", "borrowed_gpu_hours"] == pytest.approx(5.0)  # (2 + 2 + 1) × 1 h
    assert rows.loc["ml-queue", "used_gpu_hours"] == pytest.approx(11.0)
    assert rows.loc["a-queue", "lent_gpu_hours"] == pytest.approx(5.0)
    # research's unused H100 quota: (8 + 6 + 6) GE-h at $4; its T4 quota has no recorded sample.
    assert rows.loc["a-queue", "reserved_unused_usd"] == pytest.approx(80.0)
    assert rows.loc["ml-queue", "nominal_gpus"] == 2.0
    assert rows.loc["a-queue", ["admitted_workloads", "pending_workloads"]].tolist() == [0, 0]
    # Without a recorded row the Workloads are all there is: none left, nothing used.
    assert rows_of(None).loc["ml-queue", "used_gpu_hours"] == 0.0


def inputs(workloads: pd.DataFrame) -> dict[str, pd.DataFrame]:
    allocated, idle = workload_inputs(
        workloads, set(zip(workloads["namespace"], workloads["pod"], strict=True))
    )
    return {"allocated": allocated, "idle": idle}


def test_without_kueue_there_are_no_queue_rows_but_blocked_demand_still_shows() -> None:
    tables = queue_tables(
        queue_setup(KueueState(), nodes=NODES, rules=RULES, namespace_labels={}),
        reclaim_after_seconds=7200,
        window=WINDOW,
        prices=PRICES,
        **inputs(
            pd.DataFrame(
                {
                    "namespace": ["a"],
                    "pod": ["p"],
                    "team": ["alpha"],
                    "pool": [H100],
                    "gpus": [1.0],
                    "allocated_gpu_hours": [4.0],
                    "idle_since": pd.to_datetime([T0], utc=True),
                }
            )
        ),
        pending=pd.DataFrame(
            {
                "namespace": ["b"],
                "pod": ["q"],
                "team": ["beta"],
                "pool": [H100],
                "gpus": [2.0],
                "waiting_seconds": [60.0],
            }
        ),
    )
    assert not tables.installed
    assert tables.queues.empty and tables.fairness.empty and tables.usage.empty
    assert tables.blocked_vs_idle["idle_allocated_gpus"].tolist() == [1.0]
    assert tables.reclaim["pod"].tolist() == ["p"]


def test_a_summary_without_workload_rows_leaves_what_needs_them_unknown() -> None:
    tables = queue_tables(
        setup(),
        window=WINDOW,
        prices=PRICES,
        allocated=None,
        idle=None,
        pending=B1_PENDING,
        reclaim_after_seconds=7200,
    )
    # Quota, borrowing and waits come from Kueue alone: as with the rows.
    assert tables.queues.set_index("queue").loc["ml-queue", "borrowed_gpu_hours"] == pytest.approx(6.0)
    # What the workload rows say is unknown, never 0.
    assert tables.fairness["allocation_share"].isna().all() and tables.fairness["fairness_ratio"].isna().all()
    blocked = tables.blocked_vs_idle.set_index("pool")
    assert blocked.loc[H100, "pending_gpus"] == 1.0 and pd.isna(blocked.loc[H100, "idle_allocated_gpus"])
    assert tables.reclaim.empty
