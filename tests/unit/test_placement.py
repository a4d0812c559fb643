"""Why a pending GPU pod waits, on a tiny fleet worked out by hand: affinity, taint, MIG profile, quota,
then fragmentation or capacity (SPEC §3, issue 14), and the Kubernetes matching rules behind them."""

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pandas as pd
import pytest

from gpuwatch.analytics.fragmentation import diagnose_pending
from gpuwatch.analytics.placement import screen_pending
from gpuwatch.core.model import (
    GPU_PRODUCT_LABEL,
    KUEUE_ADMISSION_GATE,
    KUEUE_QUEUE_LABEL,
    RESOURCE_GPU,
    Node,
    NodeRequirement,
    Placement,
    Pod,
    Taint,
    Toleration,
)
from gpuwatch.core.schema import PENDING_PODS, SCHEDULABLE_FREE

END = datetime(2026, 11, 20, 12, tzinfo=UTC)
H100, A100 = "NVIDIA-H100-80GB-HBM3", "NVIDIA-A100-SXM4-80GB"
GPU_TAINT = Taint(key="nvidia.com/gpu", value="present", effect="NoSchedule")
TOLERATE_GPU = Toleration(key="nvidia.com/gpu", operator="Exists", effect="NoSchedule")
MIG_1G = "nvidia.com/mig-1g.10gb"
MIG_3G = "nvidia.com/mig-3g.40gb"


def node(name: str, product: str, *, resources: dict[str, float], **kw: object) -> Node:
    labels = {GPU_PRODUCT_LABEL: product, "nvidia.com/gpu.count": "8", **kw.pop("labels", {})}  # type: ignore[dict-item]
    return Node(
        name=name,
        product=product,
        gpu_count=8,
        capacity=resources,
        allocatable=resources,
        labels=labels,
        **kw,  # type: ignore[arg-type]
    )


# The fleet at the window's last sample (free GE in brackets):
#   h1 [2], h2 [2]   H100, tainted nvidia.com/gpu=present:NoSchedule, whole GPUs
#   a1 [3]           A100, MIG mixed: offers 1g.10gb instances only, no taint
#   a2 [1]           A100, whole GPUs, tainted dedicated=batch:NoExecute
#   h3 [8]           H100, cordoned (its lifecycle taint must not count as a toleration problem)
NODES = [
    node("h1", H100, resources={RESOURCE_GPU: 8.0}, taints=(GPU_TAINT,)),
    node("h2", H100, resources={RESOURCE_GPU: 8.0}, taints=(GPU_TAINT,)),
    node("a1", A100, resources={MIG_1G: 7.0}),
    node(
        "a2",
        A100,
        resources={RESOURCE_GPU: 8.0},
        taints=(Taint(key="dedicated", value="batch", effect="NoExecute"),),
    ),
    node(
        "h3",
        H100,
        resources={RESOURCE_GPU: 8.0},
        unschedulable=True,
        taints=(Taint(key="node.kubernetes.io/unschedulable", effect="NoSchedule"), GPU_TAINT),
    ),
]
FREE_AT_END = {"h1": 2.0, "h2": 2.0, "a1": 3.0, "a2": 1.0, "h3": 0.0}  # a cordoned node places nothing


def pending_pod(name: str, requests: dict[str, float], placement: Placement, **kw: object) -> Pod:
    return Pod(
        namespace="ml",
        name=name,
        uid=name,
        phase="Pending",
        created_at=END - timedelta(hours=1),
        gpu_requests=requests,
        placement=placement,
        **kw,  # type: ignore[arg-type]
    )


def h100(**kw: object) -> Placement:
    return Placement(node_selector={GPU_PRODUCT_LABEL: H100}, **kw)  # type: ignore[arg-type]


PODS = [
    # No node is labelled B200.
    pending_pod("b200", {RESOURCE_GPU: 1.0}, Placement(node_selector={GPU_PRODUCT_LABEL: "NVIDIA-B200"})),
    # h1, h2, h3 match; h3's only other taint is its cordon; all carry the GPU taint, not tolerated.
    pending_pod("untolerated", {RESOURCE_GPU: 1.0}, h100()),
    # A100 nodes: a1 is free of taints but offers only 1g.10gb; a2's NoExecute taint is not tolerated.
    pending_pod("mig-3g", {MIG_3G: 1.0}, Placement(node_selector={GPU_PRODUCT_LABEL: A100})),
    # Would fit on h1 (tolerated), but Kueue holds it at its admission gate.
    pending_pod(
        "gated",
        {RESOURCE_GPU: 1.0},
        h100(tolerations=(TOLERATE_GPU,), scheduling_gates=(KUEUE_ADMISSION_GATE,)),
        labels={KUEUE_QUEUE_LABEL: "ml-queue"},
    ),
    # Tolerated H100 nodes h1 + h2 have 4 free in total, 2 at most on one: 3 is fragmentation ...
    pending_pod("frag", {RESOURCE_GPU: 3.0}, h100(tolerations=(TOLERATE_GPU,))),
    # ... and 5 is capacity; the scheduler's own words are kept.
    pending_pod(
        "big",
        {RESOURCE_GPU: 5.0},
        h100(
            tolerations=(TOLERATE_GPU,),
            scheduler_message="0/5 nodes are available: 2 Insufficient nvidia.com/gpu.",
        ),
    ),
    # A tolerate-everything toleration (empty key, Exists) reaches a2 and a1; a 1g.10gb fits a1's 3.
    pending_pod(
        "mig-1g",
        {MIG_1G: 2.0},
        Placement(
            node_affinity=((NodeRequirement(key=GPU_PRODUCT_LABEL, operator="In", values=(A100,)),),),
            tolerations=(Toleration(operator="Exists"),),
        ),
    ),
]


def diagnose() -> pd.DataFrame:
    screens, placeable = screen_pending(PODS, NODES)
    pending = PENDING_PODS.check(
        pd.DataFrame(
            {
                "namespace": pd.Series(["ml"] * len(PODS), dtype="str"),
                "pod": pd.Series([p.name for p in PODS], dtype="str"),
                "team": pd.Series(["research"] * len(PODS), dtype="str"),
                "pool": pd.Series([""] * len(PODS), dtype="str"),
                "gpus": [sum(p.gpu_requests.values()) for p in PODS],
                "created_at": pd.to_datetime([p.created_at for p in PODS], utc=True),
            }
        )
    )
    free = SCHEDULABLE_FREE.check(
        pd.DataFrame(
            {
                "timestamp": pd.to_datetime([END - timedelta(minutes=1)] * len(NODES), utc=True),
                "node": pd.Series([n.name for n in NODES], dtype="str"),
                "pool": pd.Series([n.pool for n in NODES], dtype="str"),
                "schedulable_free_ge": [FREE_AT_END[n.name] for n in NODES],
            }
        )
    )
    out = diagnose_pending(pending, free, as_of=END, screens=screens, placeable=placeable)
    return out.set_index("pod")


def test_each_pending_reason_in_the_order_a_scheduler_meets_them() -> None:
    result = diagnose()
    assert result["blocked_by"].to_dict() == {
        "b200": "affinity",
        "untolerated": "taint",
        "mig-3g": "mig_profile",
        "gated": "quota",
        "frag": "fragmentation",
        "big": "capacity",
        "mig-1g": "capacity",
    }
    assert result.loc["b200", "reason"] == (
        f"no GPU node matches its node selector or required affinity ({GPU_PRODUCT_LABEL}=NVIDIA-B200)"
    )
    assert result.loc["untolerated", "reason"] == (
        "every GPU node it may use has a taint it does not tolerate (nvidia.com/gpu=present:NoSchedule)"
    )
    assert result.loc["mig-3g", "reason"] == (
        f"no GPU node it may use offers the MIG profile it requests ({MIG_3G})"
    )
    assert (
        result.loc["gated", "reason"]
        == "Kueue has not admitted it in queue ml-queue: its queue's quota is in use"
    )
    assert result.loc["frag", "reason"] == (
        "4 GPUs are free on the nodes it may use, but at most 2 on one node; it needs 3 GPUs"
    )
    assert result.loc["big", "reason"] == "it needs 5 GPUs; 4 GPUs are free on the 3 nodes it may use"
    assert result.loc["big", "scheduler_message"] == "0/5 nodes are available: 2 Insufficient nvidia.com/gpu."
    # mig-1g may use a1 only (a2 offers no 1g.10gb): a1 has 3 GE free, one node, 2 instances fit now.
    assert result.loc["mig-1g", ["pool_free_ge", "largest_free_block_ge"]].tolist() == [3.0, 3.0]
    assert result.loc["mig-1g", "reason"] == (
        "it needs 2 GPUs and a node it may use has 3 free now: the scheduler has not placed it yet"
    )
    # Free GPUs are counted over the nodes a pod may use: h1 + h2 (h3 is cordoned, its 8 do not count).
    assert result.loc["frag", ["pool_free_ge", "largest_free_block_ge"]].tolist() == [4.0, 2.0]
    assert result.loc["gated", "tolerations"] == "nvidia.com/gpu:NoSchedule op=Exists"
    assert result.loc["mig-1g", "node_affinity"] == f"{GPU_PRODUCT_LABEL} In ({A100})"
    assert result.loc["mig-1g", "tolerations"] == "op=Exists"
    assert result.loc["b200", "pool_free_ge"] == 0.0  # screened out: no node, nothing free for it


def test_pods_asking_the_same_are_screened_once() -> None:
    twins = [
        pending_pod(f"twin-{i}", {RESOURCE_GPU: 1.0}, h100(tolerations=(TOLERATE_GPU,))) for i in range(3)
    ]
    screens, placeable = screen_pending([*twins, PODS[0]], NODES)
    assert screens["group"].tolist() == [0, 0, 0, 1]
    # Group 0 may use h1, h2 and h3 (cordoned nodes stay: the free frame gives them 0); group 1 none.
    assert placeable.sort_values("node")["node"].tolist() == ["h1", "h2", "h3"]
    assert set(placeable["group"]) == {0}


def test_a_pod_known_only_by_its_product_selector_asks_for_that_label() -> None:
    pod = Pod(
        namespace="ml",
        name="old",
        uid="old",
        phase="Pending",
        created_at=END,
        gpu_requests={RESOURCE_GPU: 1.0},
        node_selector_product=A100,
    )
    screens, placeable = screen_pending([pod], NODES)
    # a1 has no taint, so the taint check passes on it; a1 offers MIG instances only, no whole GPU.
    assert screens.loc[0, "blocked_by"] == ""
    assert screens.loc[0, "detail"] == f"no node it may use offers {RESOURCE_GPU}"
    assert placeable.empty


@pytest.mark.parametrize(
    ("operator", "values", "label", "expected"),
    [
        ("In", ("a", "b"), "b", True),
        ("In", ("a",), None, False),
        ("NotIn", ("a",), "b", True),
        ("NotIn", ("a",), None, True),  # a missing label is not in any set
        ("NotIn", ("a",), "a", False),
        ("Exists", (), "", True),
        ("Exists", (), None, False),
        ("DoesNotExist", (), None, True),
        ("Gt", ("40",), "80", True),
        ("Gt", ("80",), "80", False),
        ("Lt", ("80",), "40", True),
        ("Gt", ("40",), "80GB", False),  # not an integer: no match, never an error
        ("Bogus", ("a",), "a", False),
    ],
)
def test_node_selector_operators(
    operator: str, values: tuple[str, ...], label: str | None, expected: bool
) -> None:
    n = node("n", H100, resources={}, labels={} if label is None else {"k": label})
    assert NodeRequirement(key="k", operator=operator, values=values).matches(n) is expected


def test_terms_are_ored_expressions_anded_and_an_empty_term_matches_nothing() -> None:
    n = node("n1", H100, resources={}, labels={"zone": "a"})
    zone_a = NodeRequirement(key="zone", operator="In", values=("a",))
    zone_b = NodeRequirement(key="zone", operator="In", values=("b",))
    by_name = NodeRequirement(key="metadata.name", operator="In", values=("n1",), on_field=True)
    assert Placement(node_affinity=((zone_b,), (zone_a,))).matches(n)
    assert not Placement(node_affinity=((zone_a, zone_b),)).matches(n)
    assert not Placement(node_affinity=((),)).matches(n)
    assert Placement(node_affinity=((by_name,),)).matches(n)
    assert not Placement(node_selector={"zone": "a", "extra": "x"}).matches(n)


def test_toleration_rules() -> None:
    n = node(
        "n",
        H100,
        resources={},
        taints=(
            GPU_TAINT,
            Taint(key="soft", effect="PreferNoSchedule"),  # never keeps a pod off
            Taint(key="node.kubernetes.io/not-ready", effect="NoExecute"),  # a node state, counted elsewhere
        ),
    )
    assert Placement().untolerated(n) == [GPU_TAINT]
    assert (
        Placement(tolerations=(Toleration(key="nvidia.com/gpu", value="present"),)).untolerated(n) == []
    )  # any effect
    assert Placement(tolerations=(Toleration(key="nvidia.com/gpu", value="absent"),)).untolerated(n) == [
        GPU_TAINT
    ]
    assert Placement(
        tolerations=(Toleration(key="nvidia.com/gpu", operator="Exists", effect="NoExecute"),)
    ).untolerated(n) == [GPU_TAINT]
    assert Placement(tolerations=(Toleration(operator="Exists"),)).untolerated(n) == []


def test_a_pod_is_screened_against_its_own_clusters_nodes() -> None:
    # eu-1 has A100 nodes only; us-1 has an H100 node its selector matches: eu-1's pod may not use it.
    eu = node("eu-1/a2", A100, resources={RESOURCE_GPU: 8.0})
    us = node("us-1/h1", H100, resources={RESOURCE_GPU: 8.0})
    pod = pending_pod("eu-1/train", {RESOURCE_GPU: 1.0}, h100())
    screens, placeable = screen_pending([pod, replace(pod, name="us-1/train")], [eu, us])
    assert screens["blocked_by"].tolist() == ["affinity", ""]
    assert placeable["node"].tolist() == ["us-1/h1"]
    assert screens["group"].tolist() == [0, 1]  # asking the same in two clusters: screened apart
