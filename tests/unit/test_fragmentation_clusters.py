"""FGD fragmentation in a fleet of several clusters: each node weighed by its own cluster's request mix.

Pods of one cluster never use another cluster's free GPUs, so a cluster's F_n, fragmented and stranded
GPU-hours and its pending pods' diagnosis must not change with the other clusters read (SPEC §3's "per
pool" read per cluster); the per-pool outputs stay sums over every cluster's nodes.
"""

from datetime import UTC, datetime
from pathlib import Path

import pandas as pd
import pytest
from pandas.testing import assert_frame_equal

from gpuwatch.analytics.fragmentation import diagnose_pending, fragmentation, request_mix
from gpuwatch.analytics.placement import screen_pending
from gpuwatch.core.config import load_settings
from gpuwatch.core.model import GPU_PRODUCT_LABEL, RESOURCE_GPU, Node, Pod, cluster_of
from gpuwatch.core.schema import PENDING_PODS, REQUEST_MIX
from gpuwatch.read.analysis import Analysis
from gpuwatch.read.service import MultiClusterSources
from gpuwatch.sim import build_demo_fleet
from gpuwatch.sim.demoservice import demo_service
from gpuwatch.views.base import Scope
from gpuwatch.views.raw import RawView
from tests.unit.test_fragmentation import T0, free, requests

A, B = "NVIDIA-A100-SXM4-80GB", "NVIDIA-H100-80GB-HBM3"
EXACT = {"check_exact": False, "rtol": 1e-12, "atol": 0.0}
TWO_CLUSTERS = Path(__file__).parents[2] / "docs/examples/two-clusters.yaml"
END = datetime(2026, 11, 20, tzinfo=UTC)


# Pool A in cluster eu asks 1, 1, 4, 4 (p_1 = p_4 = 1/2) and a pod without a product selector asks 2, so
# eu's fleet-wide row is p_1 = 2/5, p_2 = 1/5, p_4 = 2/5. Pool A in cluster us asks 2, 2, 2, 8 (p_2 = 3/4,
# p_8 = 1/4), which is also us's fleet-wide row. Neither has a pod in pool B; cluster ap has none at all.
# Both clusters have a pod named "train": two pods.
EU = [("eu/a1", A, 1), ("eu/a2", A, 1), ("eu/a3", A, 4), ("eu/train", A, 4), ("eu/any", "", 2)]
US = [("us/a1", A, 2), ("us/a2", A, 2), ("us/a3", A, 2), ("us/train", A, 8), ("us/zero", A, 0)]
EU_FREE = [
    (0, "eu/n1", A, 3),  # k > 3 in eu's A: p_4 = 1/2 -> F = 3 × 1/2 = 1.5
    (0, "eu/n2", A, 1),  # k > 1: p_4 = 1/2 -> F = 0.5
    (0, "eu/n3", B, 3),  # no eu pod in B: eu's fleet-wide row, k > 3: p_4 = 2/5 -> F = 1.2
    (1, "eu/n1", A, 4),  # no k > 4 in eu's A -> F = 0
]
US_FREE = [
    (0, "us/n1", A, 3),  # k > 3 in us's A: p_8 = 1/4 -> F = 0.75
    (0, "us/n2", A, 1),  # k > 1: p_2 + p_8 = 1 -> F = 1
    (0, "us/n3", B, 4),  # us's fleet-wide row, k > 4: p_8 = 1/4 -> F = 1
    (1, "us/n1", A, 4),  # k > 4: p_8 = 1/4 -> F = 1
]
AP_FREE = [(0, "ap/n1", A, 2)]  # no pod in cluster ap: nothing to weigh by, F = 0 (as a fleet with no pods)
F_EU, F_US, F_AP = [1.5, 0.5, 1.2, 0.0], [0.75, 1.0, 1.0, 1.0], [0.0]


def test_request_mix_per_cluster_by_hand() -> None:
    expected = pd.DataFrame(
        {
            "cluster": pd.Series(["eu"] * 5 + ["us"] * 4, dtype="str"),
            "pool": pd.Series(["", "", "", A, A, "", "", A, A], dtype="str"),
            "k": [1.0, 2.0, 4.0, 1.0, 4.0, 2.0, 8.0, 2.0, 8.0],
            "p_k": [2 / 5, 1 / 5, 2 / 5, 1 / 2, 1 / 2, 3 / 4, 1 / 4, 3 / 4, 1 / 4],
        }
    )
    mix = REQUEST_MIX.check(request_mix(requests(EU + US), per_cluster=True))
    assert_frame_equal(mix, expected, **EXACT)


def test_each_node_is_weighed_by_its_own_clusters_mix() -> None:
    frame = free(EU_FREE + US_FREE + AP_FREE)
    per_node, per_pool = fragmentation(frame, request_mix(requests(EU + US), per_cluster=True))
    assert_frame_equal(per_node, frame.assign(fragmented_ge=F_EU + F_US + F_AP), **EXACT)
    # The per-pool outputs are sums over every cluster's nodes: at t0 pool A has 3 + 1 + 3 + 1 + 2 = 10
    # free, 1.5 + 0.5 + 0.75 + 1 + 0 = 3.75 fragmented; pool B 3 + 4 = 7 free, 1.2 + 1 = 2.2 fragmented;
    # at t1 pool A 4 + 4 = 8 free, 0 + 1 = 1 fragmented.
    expected = pd.DataFrame(
        {
            "timestamp": pd.to_datetime([T0, T0, T0 + pd.Timedelta(minutes=1)], utc=True),
            "pool": pd.Series([A, B, A], dtype="str"),
            "schedulable_free_ge": [10.0, 7.0, 8.0],
            "fragmented_ge": [3.75, 2.2, 1.0],
            "fragmentation_ratio": [3.75 / 10, 2.2 / 7, 1 / 8],
        }
    )
    assert_frame_equal(per_pool, expected, **EXACT)
    # The mix pooled over both clusters (what a fleet-wide pool mix gave) weighs eu/n1 by us's pods too:
    # pool A then asks 1, 1, 4, 4, 2, 2, 2, 8, and k > 3 has p_4 + p_8 = 3/8 -> 3 × 3/8, not 1.5.
    pooled, _ = fragmentation(frame, request_mix(requests(EU + US)))
    assert pooled["fragmented_ge"].iloc[0] == pytest.approx(9 / 8, rel=1e-12)


def test_a_clusters_fragmentation_does_not_change_with_the_other_clusters_read() -> None:
    both, _ = fragmentation(free(EU_FREE + US_FREE), request_mix(requests(EU + US), per_cluster=True))
    for own_free, own_pods, own_f in ((EU_FREE, EU, F_EU), (US_FREE, US, F_US)):
        alone, _ = fragmentation(free(own_free), request_mix(requests(own_pods), per_cluster=True))
        assert alone["fragmented_ge"].tolist() == pytest.approx(own_f, rel=1e-12)
        mine = both[both["node"].map(cluster_of) == cluster_of(own_free[0][1])].reset_index(drop=True)
        assert_frame_equal(mine, alone)


def test_one_cluster_fragmentation_is_unchanged() -> None:
    # Unqualified names (a fleet of one): the per-cluster mix is today's mix with a cluster column "".
    pods = requests([("a1", A, 1), ("a2", A, 1), ("a3", A, 2), ("a4", A, 4), ("any", "", 2), ("z", A, 0)])
    plain = request_mix(pods)
    per_cluster = request_mix(pods, per_cluster=True)
    assert per_cluster["cluster"].eq("").all()
    assert_frame_equal(per_cluster.drop(columns="cluster"), plain, check_exact=True)
    frame = free([(0, "n1", A, 1), (0, "n2", A, 3), (0, "n3", A, 0), (0, "n4", B, 3), (1, "n1", A, 0)])
    for got, want in zip(fragmentation(frame, per_cluster), fragmentation(frame, plain), strict=True):
        assert_frame_equal(got, want, check_exact=True)
    empty = request_mix(requests([]), per_cluster=True)
    per_node, _ = fragmentation(frame, empty)
    assert per_node["fragmented_ge"].tolist() == [0.0] * len(frame)


def gpu_node(name: str, product: str) -> Node:
    return Node(
        name=name,
        product=product,
        gpu_count=8,
        capacity={RESOURCE_GPU: 8.0},
        allocatable={RESOURCE_GPU: 8.0},
        labels={GPU_PRODUCT_LABEL: product},
    )


def test_a_pending_pod_is_judged_on_its_own_clusters_nodes() -> None:
    # Free now: eu/n1 2, eu/n2 2 (pool A, eu); us/n1 1 (pool A, us). Both pods ask 4 GPUs of pool A.
    # eu/p: 4 free in eu, at most 2 on one node -> fragmentation. us/p: 1 free in us -> capacity (the fleet
    # as one would have said fragmentation: 5 free, at most 2 on one node).
    last = free([(0, "eu/n1", A, 2), (0, "eu/n2", A, 2), (0, "us/n1", A, 1)])
    nodes = [gpu_node("eu/n1", A), gpu_node("eu/n2", A), gpu_node("us/n1", A)]
    names = ["eu/p", "us/p"]
    pods = [
        Pod(
            namespace="ml",
            name=name,
            uid=name,
            phase="Pending",
            created_at=T0.to_pydatetime(),
            gpu_requests={RESOURCE_GPU: 4.0},
            node_selector_product=A,
        )
        for name in names
    ]
    pending = PENDING_PODS.check(
        pd.DataFrame(
            {
                "namespace": pd.Series(["ml", "ml"], dtype="str"),
                "pod": pd.Series(names, dtype="str"),
                "team": pd.Series(["research", "research"], dtype="str"),
                "pool": pd.Series([A, A], dtype="str"),
                "gpus": [4.0, 4.0],
                "created_at": pd.to_datetime([T0, T0 - pd.Timedelta(seconds=10)], utc=True),
            }
        )
    )
    screens, placeable = screen_pending(pods, nodes)
    result = diagnose_pending(pending, last, as_of=T0.to_pydatetime(), screens=screens, placeable=placeable)
    got = result.set_index("pod")
    assert got.loc["eu/p", ["pool_free_ge", "largest_free_block_ge"]].tolist() == [4.0, 2.0]
    assert got.loc["us/p", ["pool_free_ge", "largest_free_block_ge"]].tolist() == [1.0, 1.0]
    assert got["blocked_by"].to_dict() == {"us/p": "capacity", "eu/p": "fragmentation"}
    assert got.loc["us/p", "reason"] == "it needs 4 GPUs; 1 GPU is free on the 1 node it may use"


@pytest.fixture(scope="module")
def demo() -> tuple[Analysis, Analysis, Analysis]:
    """The simulated fleet of docs/examples/two-clusters.yaml (eu-1 seed 42, us-1 seed 43), and each of
    its clusters read alone as a fleet of one."""
    settings = load_settings(config_path=str(TWO_CLUSTERS), env={})
    eu, us = (build_demo_fleet(seed=seed, end=END, days=0.1) for seed in (42, 43))
    service = demo_service(settings, eu, history_days=0.1)
    assert isinstance(service.sources, MultiClusterSources)
    both = service.analysis(eu.window)
    alone = [demo_service(None, f, history_days=0.1).analysis(f.window) for f in (eu, us)]
    return both, alone[0], alone[1]


def test_a_clusters_stranded_gpu_hours_are_the_same_with_or_without_the_other(
    demo: tuple[Analysis, Analysis, Analysis],
) -> None:
    both, eu, us = demo
    for name, alone in (("eu-1", eu), ("us-1", us)):
        mine = both.by_node[both.by_node["node"].map(cluster_of) == name]
        mine = mine.assign(node=mine["node"].str.partition("/")[2])
        got = mine.set_index(["timestamp", "node"])["stranded_ge"].sort_index()
        want = alone.by_node.set_index(["timestamp", "node"])["stranded_ge"].astype("float64").sort_index()
        assert float(want.sum()) > 0  # the simulated fleet has fragmented GPUs to compare
        assert_frame_equal(got.to_frame(), want.to_frame(), check_index_type=False, **EXACT)
        # Its pending pods wait for the same reasons as when it is read alone.
        pending = both.pending[both.pending["pod"].map(cluster_of) == name]
        why = dict(zip(pending["pod"].str.partition("/")[2], pending["blocked_by"], strict=True))
        assert why == dict(zip(alone.pending["pod"], alone.pending["blocked_by"], strict=True))
    # The per-pool outputs are sums over both clusters' nodes.
    keys, sums = ["timestamp", "pool"], ["schedulable_free_ge", "fragmented_ge"]
    parts = pd.concat([eu.per_pool, us.per_pool]).groupby(keys)[sums].sum()
    fleet = both.per_pool.set_index(keys)[sums].sort_index()
    assert_frame_equal(fleet, parts.sort_index(), **EXACT)


def test_a_cluster_filter_draws_its_own_clusters_fragmentation(
    demo: tuple[Analysis, Analysis, Analysis],
) -> None:
    both, eu, _ = demo
    scoped = RawView(analysis=both, computed_at=END).scoped(Scope(clusters=("eu-1",)))
    alone = RawView(analysis=eu, computed_at=END)
    # The pool spans both clusters; filtered to eu-1 its ratio is eu-1's nodes' alone, as read alone.
    assert scoped.fragmentation_ratio() == pytest.approx(alone.fragmentation_ratio(), rel=1e-12)
    assert (
        0
        < alone.fragmentation_ratio()
        != pytest.approx(RawView(analysis=both, computed_at=END).fragmentation_ratio())
    )
    got, want = scoped.fragmentation_timeline(), alone.fragmentation_timeline()
    assert_frame_equal(got.reset_index(drop=True), want.reset_index(drop=True), **EXACT)
