"""Kueue's queues in a fleet of several clusters: each cluster's ClusterQueues, cohorts, flavors, LocalQueues
and Workloads under names qualified by it, with the numbers the cluster has read alone; a flavor that
never takes another cluster's nodes; a cluster whose Kueue cannot be read left out with a warning; pods
matched to their own cluster's Workloads and queues."""

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pandas as pd
import pytest
from pandas.testing import assert_frame_equal

from gpuwatch.analytics.queues import reclaim_candidates
from gpuwatch.analytics.queuetables import QueueSetup, QueueTables
from gpuwatch.core.config import Settings, load_settings
from gpuwatch.core.errors import KubernetesError
from gpuwatch.core.model import (
    GPU_PRODUCT_LABEL,
    RESOURCE_GPU,
    ClusterQueue,
    FlavorQuota,
    KueueState,
    LocalQueue,
    Node,
    ResourceFlavor,
    cluster_of,
    normalize_product,
    qualified,
)
from gpuwatch.core.schema import IDLE_PODS, POOL_PRICES, QUEUE_USAGE
from gpuwatch.read.analysis import Analysis, analysis_queues
from gpuwatch.read.service import FleetService, MultiClusterSources
from gpuwatch.sim import build_demo_fleet
from gpuwatch.sim.demoservice import SimulatedSources, demo_service, demo_settings
from gpuwatch.sim.fleet import SimulatedFleet
from gpuwatch.sources.kubernetes import ClusterState
from gpuwatch.surfaces.report import build_report

END = datetime(2026, 11, 20, tzinfo=UTC)
TWO_CLUSTERS = Path(__file__).parents[2] / "docs/examples/two-clusters.yaml"
H100, T4 = "NVIDIA-H100-80GB-HBM3", "Tesla-T4-SHARED"


@dataclass(frozen=True)
class Read:
    """A fleet's queue setup, the analysis of a window and its queue tables."""

    setup: QueueSetup
    analysis: Analysis
    tables: QueueTables


def read(service: FleetService) -> Read:
    analysis = service.analysis(service.window(days=0.1, end=END))
    setup = service.queue_setup()
    return Read(setup=setup, analysis=analysis, tables=analysis_queues(analysis, setup))


@pytest.fixture(scope="module")
def demo() -> tuple[Read, dict[str, Read]]:
    """The two-cluster demo read as one fleet, and each of its clusters read alone."""
    settings = load_settings(config_path=str(TWO_CLUSTERS), env={})
    fleet = build_demo_fleet(seed=42, end=END, days=0.1)
    service = demo_service(settings, fleet, history_days=0.1)
    assert isinstance(service.sources, MultiClusterSources)
    alone = {
        name: read(FleetService(settings=service.settings, sources=member))
        for name, member in service.sources.members.items()
    }
    return read(service), alone


def own(frame: pd.DataFrame, cluster: str, names: Sequence[str], by: str = "cluster_queue") -> pd.DataFrame:
    """The rows of one cluster (by the qualified name in column `by`), its names as it has them alone."""
    rows = frame[frame[by].map(cluster_of) == cluster].reset_index(drop=True)
    return rows.assign(**{c: rows[c].str.removeprefix(f"{cluster}/") for c in names})


def test_the_two_cluster_demo_shows_each_clusters_queues_under_qualified_names(
    demo: tuple[Read, dict[str, Read]],
) -> None:
    fleet, alone = demo
    setup = fleet.setup
    assert setup.installed and setup.warnings == ()
    assert sorted({cluster_of(q) for q in setup.quotas["cluster_queue"]}) == ["eu-1", "us-1"]
    for name, one in alone.items():
        assert one.setup.installed and len(one.setup.local_queues) > 0
        mine = own(setup.local_queues, name, ["queue", "cluster_queue"])
        assert_frame_equal(mine, one.setup.local_queues)
        assert_frame_equal(own(setup.quotas, name, ["cluster_queue", "cohort"]), one.setup.quotas)
        workloads = own(setup.workloads, name, ["workload", "queue", "cluster_queue"])
        assert_frame_equal(workloads, one.setup.workloads)
        assert {k: v for k, v in setup.cohorts.items() if cluster_of(k) == name} == {
            qualified(name, k): qualified(name, v) for k, v in one.setup.cohorts.items()
        }
    # The same queue names in both clusters, never one queue: each keeps its own cohort.
    assert {q.removeprefix("eu-1/") for q in setup.cohorts if cluster_of(q) == "eu-1"} == {
        q.removeprefix("us-1/") for q in setup.cohorts if cluster_of(q) == "us-1"
    }
    assert all(cluster_of(c) == cluster_of(q) for q, c in setup.cohorts.items() if c)


def test_each_queues_quota_and_usage_are_its_clusters_read_alone(
    demo: tuple[Read, dict[str, Read]],
) -> None:
    fleet, alone = demo
    tables = fleet.tables
    assert len(tables.queues) == sum(len(one.tables.queues) for one in alone.values())
    # Dollars follow the fleet's price book, whose commitments are blended over all the fleet's GPUs.
    dollars = ["reserved_unused_usd"]
    for name, one in alone.items():
        queues = own(tables.queues, name, ["queue", "cluster_queue", "cohort"])
        assert_frame_equal(
            queues.drop(columns=dollars), one.tables.queues.drop(columns=dollars), check_exact=True
        )
        assert queues["nominal_gpus"].sum() > 0 and queues["used_gpu_hours"].sum() > 0
        usage = own(tables.usage, name, ["cluster_queue", "cohort"])
        assert_frame_equal(usage, one.tables.usage, check_exact=True)
        states = own(tables.states, name, ["queue", "cluster_queue"])
        assert_frame_equal(states, one.tables.states, check_exact=True)


def test_pods_join_their_own_clusters_workloads_and_queues(demo: tuple[Read, dict[str, Read]]) -> None:
    fleet, alone = demo
    messages = fleet.setup.admission_messages
    assert messages
    assert messages == {
        (namespace, qualified(name, pod)): text
        for name, one in alone.items()
        for (namespace, pod), text in one.setup.admission_messages.items()
    }
    # Kueue's words reach the pending pod of that cluster (the pod named by its cluster too).
    pending = {p["pod"]: p["reason"] for p in build_report(fleet.analysis, queues=fleet.setup)["pending"]}
    for (_namespace, pod), text in messages.items():
        if pod in pending:
            assert pending[pod] == f"Kueue has not admitted it: {text}"
    assert any(pod in pending for _namespace, pod in messages)
    # An idle pod to reclaim is matched to its own cluster's queue only.
    reclaim = fleet.tables.reclaim
    assert len(reclaim) and any(reclaim["cluster_queue"] != "")
    for pod, queues in zip(reclaim["pod"], reclaim["cluster_queue"], strict=True):
        assert all(cluster_of(q) == cluster_of(pod) for q in queues.split(", ") if q), (pod, queues)


# -- hand-made clusters ------------------------------------------------------------------------------------


class HandMade(SimulatedSources):
    """A cluster of hand-made nodes and Kueue objects (the simulated fleet behind it is never read here)."""

    def __init__(self, fleet: SimulatedFleet, *, nodes: Sequence[Node], kueue: KueueState) -> None:
        super().__init__(fleet)
        self.nodes = tuple(nodes)
        self.kueue = kueue

    def node_state(self, *, namespaces: bool = False) -> ClusterState:
        return ClusterState(nodes=self.nodes, pods=(), namespaces=(), quotas=())

    def kueue_state(self) -> KueueState:
        return self.kueue


class KueueDown(SimulatedSources):
    """A cluster whose API server refuses Kueue's objects."""

    def kueue_state(self) -> KueueState:
        raise KubernetesError("kubernetes API at https://10.0.0.9:6443 refused: 403 forbidden")


class NoKueue(SimulatedSources):
    """A cluster that serves no Kueue API."""

    def kueue_state(self) -> KueueState:
        return KueueState()


SHARED = {"gpu-tier": "shared"}  # both clusters label their nodes alike
SPOT = {"gpu-tier": "spot"}


def kueue(*, spot: bool) -> KueueState:
    """ClusterQueue research: 8 nvidia.com/gpu of flavor shared (the nodes labelled gpu-tier=shared, no
    product named). With spot: ClusterQueue spot, 4 of flavor spot (gpu-tier=spot)."""
    flavors = [ResourceFlavor(name="shared", node_labels=SHARED)]
    queues = [
        ClusterQueue(
            name="research",
            cohort="c",
            quotas=(FlavorQuota(flavor="shared", resource=RESOURCE_GPU, nominal=8),),
        )
    ]
    if spot:
        flavors.append(ResourceFlavor(name="spot", node_labels=SPOT))
        queues.append(
            ClusterQueue(name="spot", quotas=(FlavorQuota(flavor="spot", resource=RESOURCE_GPU, nominal=4),))
        )
    return KueueState(
        installed=True,
        version="v1beta2",
        flavors=tuple(flavors),
        cluster_queues=tuple(queues),
        local_queues=(LocalQueue(namespace="team-a", name="a-queue", cluster_queue="research"),),
    )


@pytest.fixture(scope="module")
def tiny() -> SimulatedFleet:
    return build_demo_fleet(seed=1, end=END, days=0.05, gpus=8)


def hand_made(tiny: SimulatedFleet) -> dict[str, HandMade]:
    """eu-1: an 8-GPU H100 node; us-1: a 4-GPU T4 node time-sliced 4 ways and a spot H100 node. Both
    clusters' nodes are named gpu-0 and labelled gpu-tier=shared; only us-1 has a spot node, while both
    clusters' Kueue have a flavor spot."""
    eu = [Node(name="gpu-0", product=H100, gpu_count=8, labels={GPU_PRODUCT_LABEL: H100, **SHARED})]
    us = [
        Node(name="gpu-0", product=T4, gpu_count=4, replicas=4, labels={GPU_PRODUCT_LABEL: T4, **SHARED}),
        Node(name="gpu-1", product=H100, gpu_count=8, labels={GPU_PRODUCT_LABEL: H100, **SPOT}),
    ]
    return {
        "eu-1": HandMade(tiny, nodes=eu, kueue=kueue(spot=True)),
        "us-1": HandMade(tiny, nodes=us, kueue=kueue(spot=True)),
    }


def setup_of(sources: SimulatedSources | MultiClusterSources) -> QueueSetup:
    return FleetService(settings=demo_settings(Settings(), end=END), sources=sources).queue_setup()


def test_a_flavor_selects_its_own_clusters_nodes_only(tiny: SimulatedFleet) -> None:
    clusters = hand_made(tiny)
    setup = setup_of(MultiClusterSources(clusters))
    quotas = setup.quotas[["cluster_queue", "cohort", "pool", "nominal_gpus"]]
    expected = pd.DataFrame(
        {
            "cluster_queue": ["eu-1/research", "us-1/research", "us-1/spot"],
            "cohort": ["eu-1/c", "us-1/c", ""],
            # eu-1's flavor shared: its H100 node alone; us-1's: its T4 node, a replica 1/4 GE.
            "pool": [normalize_product(H100), normalize_product(T4), normalize_product(H100)],
            "nominal_gpus": [8.0, 2.0, 4.0],
        }
    ).astype({"cluster_queue": "str", "cohort": "str", "pool": "str"})
    assert_frame_equal(quotas.reset_index(drop=True), expected, check_exact=True)
    # eu-1's flavor spot selects none of eu-1's nodes (us-1's spot node is not eu-1's): left out.
    assert setup.warnings == ("Kueue flavor(s) eu-1/spot select no GPU node: their quota is left out",)
    # Each cluster read alone gives the same quota, under its own names.
    for name, cluster in clusters.items():
        one = setup_of(cluster).quotas
        assert_frame_equal(own(setup.quotas, name, ["cluster_queue", "cohort"]), one, check_exact=True)


def test_a_cluster_whose_kueue_cannot_be_read_is_left_out_with_a_warning(tiny: SimulatedFleet) -> None:
    clusters = hand_made(tiny)
    setup = setup_of(MultiClusterSources({"eu-1": clusters["eu-1"], "us-1": KueueDown(tiny)}))
    assert setup.installed
    assert list(setup.quotas["cluster_queue"]) == ["eu-1/research"]
    assert list(setup.local_queues["queue"]) == ["eu-1/a-queue"]
    assert setup.warnings == (
        "cluster us-1: Kueue not read (kubernetes API at https://10.0.0.9:6443 refused: 403 forbidden); "
        "its queues are left out",
        "Kueue flavor(s) eu-1/spot select no GPU node: their quota is left out",
    )
    # A cluster without Kueue adds no queue and no warning.
    setup = setup_of(MultiClusterSources({"eu-1": NoKueue(tiny), "us-1": clusters["us-1"]}))
    assert list(setup.quotas["cluster_queue"]) == ["us-1/research", "us-1/spot"] and setup.warnings == ()
    # No cluster's Kueue read: no queues, and the warning names every cluster not read.
    setup = setup_of(MultiClusterSources({"eu-1": NoKueue(tiny), "us-1": KueueDown(tiny)}))
    assert not setup.installed and len(setup.quotas) == 0
    assert setup.warnings == (
        "Kueue not read: cluster us-1: kubernetes API at https://10.0.0.9:6443 refused: 403 forbidden",
    )
    setup = setup_of(MultiClusterSources({"eu-1": NoKueue(tiny), "us-1": NoKueue(tiny)}))
    assert not setup.installed and setup.warnings == ()


def test_an_idle_pod_is_matched_to_its_own_clusters_queue() -> None:
    """Team ml has a queue in each cluster, in the same pool; only eu-1's borrows now."""
    now = pd.Timestamp(END)
    idle = IDLE_PODS.check(
        pd.DataFrame(
            {
                "namespace": pd.Series(["ml", "ml"], dtype="str"),
                "pod": pd.Series(["eu-1/train-0", "us-1/train-0"], dtype="str"),
                "team": pd.Series(["ml", "ml"], dtype="str"),
                "pool": pd.Series([H100, H100], dtype="str"),
                "gpus": [2.0, 2.0],
                "idle_since": pd.to_datetime([END, END], utc=True) - pd.Timedelta(hours=2),
            }
        )
    )
    usage = QUEUE_USAGE.check(
        pd.DataFrame(
            {
                "timestamp": pd.to_datetime([END, END], utc=True),
                "cluster_queue": pd.Series(["eu-1/ml", "us-1/ml"], dtype="str"),
                "cohort": pd.Series(["eu-1/c", "us-1/c"], dtype="str"),
                "team": pd.Series(["ml", "ml"], dtype="str"),
                "pool": pd.Series([H100, H100], dtype="str"),
                "nominal_gpus": [4.0, 4.0],
                "used_gpus": [6.0, 1.0],
                "borrowed_gpus": [2.0, 0.0],
                "lent_gpus": [0.0, 0.0],
            }
        )
    )
    rates = POOL_PRICES.check(
        pd.DataFrame(
            {"timestamp": pd.to_datetime([END], utc=True), "pool": pd.Series([H100], dtype="str")}
        ).assign(usd_per_gpu_hour=4.0)
    )
    demand = [("eu-1", H100), ("us-1", H100)]
    out = reclaim_candidates(idle, usage, demand, rates, as_of=now, min_idle_seconds=3600.0)
    got = {p: (q, b) for p, q, b in zip(out["pod"], out["cluster_queue"], out["borrowing"], strict=True)}
    assert got == {"eu-1/train-0": ("eu-1/ml", True), "us-1/train-0": ("us-1/ml", False)}
    # Demand in eu-1 alone: us-1's idle pod frees nothing a pending pod could use.
    out = reclaim_candidates(idle, usage, [("eu-1", H100)], rates, as_of=now, min_idle_seconds=3600.0)
    assert list(out["pod"]) == ["eu-1/train-0"]
