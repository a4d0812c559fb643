"""Kueue objects (kueue.x-k8s.io) parsed from the JSON the API server returns, and the simulated fleet's."""

import copy
import math
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from gpuwatch.core.errors import KubernetesError
from gpuwatch.core.model import (
    KUEUE_QUEUE_LABEL,
    RESOURCE_GPU,
    FlavorQuota,
    FlavorUsage,
    KueueState,
    Taint,
    Toleration,
)
from gpuwatch.sim import SimulatedFleet, build_demo_fleet
from gpuwatch.sim.kueuecrds import at_version
from gpuwatch.sim.kueueobjects import kueue_objects
from gpuwatch.sources.kueue import KUEUE_RBAC, kueue_state, state_from_raw
from gpuwatch.surfaces.check import kueue_line

JsonObject = dict[str, Any]
END = datetime(2026, 11, 20, tzinfo=UTC)


def t(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


# -- fixtures in the layout Kueue writes (v1beta2 unless said otherwise) ---------------------------


def flavor_h100() -> JsonObject:
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ResourceFlavor",
        "metadata": {"name": "h100", "creationTimestamp": "2026-09-01T10:00:00Z", "generation": 1},
        "spec": {
            "nodeLabels": {
                "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
                "cloud.google.com/gke-spot": "false",
            },
            "nodeTaints": [{"key": "dedicated", "value": "llm-training", "effect": "NoSchedule"}],
            "tolerations": [
                {"key": "dedicated", "operator": "Equal", "value": "llm-training", "effect": "NoSchedule"},
                {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
            ],
        },
    }


def cluster_queue() -> JsonObject:
    """genai: cpu/memory in default-flavor, GPUs in h100 (limits set) and a100-mig (none set)."""
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ClusterQueue",
        "metadata": {"name": "genai", "creationTimestamp": "2026-09-01T10:00:00Z", "generation": 3},
        "spec": {
            "cohortName": "research",
            "namespaceSelector": {},
            "queueingStrategy": "BestEffortFIFO",
            "resourceGroups": [
                {
                    "coveredResources": ["cpu", "memory"],
                    "flavors": [
                        {
                            "name": "default-flavor",
                            "resources": [
                                {"name": "cpu", "nominalQuota": "256"},
                                {"name": "memory", "nominalQuota": "1Ti"},
                            ],
                        }
                    ],
                },
                {
                    "coveredResources": ["nvidia.com/gpu", "nvidia.com/mig-1g.10gb"],
                    "flavors": [
                        {
                            "name": "h100",
                            "resources": [
                                {
                                    "name": "nvidia.com/gpu",
                                    "nominalQuota": "8",
                                    "borrowingLimit": "4",
                                    "lendingLimit": "2",
                                },
                                {"name": "nvidia.com/mig-1g.10gb", "nominalQuota": "0"},
                            ],
                        },
                        {
                            "name": "a100-mig",
                            "resources": [
                                {"name": "nvidia.com/gpu", "nominalQuota": 0},
                                {"name": "nvidia.com/mig-1g.10gb", "nominalQuota": "14"},
                            ],
                        },
                    ],
                },
            ],
        },
        "status": {
            "conditions": [
                {
                    "type": "Active",
                    "status": "True",
                    "reason": "Ready",
                    "message": "Can admit new workloads",
                    "lastTransitionTime": "2026-09-01T10:00:01Z",
                }
            ],
            "flavorsReservation": [
                {"name": "default-flavor", "resources": [{"name": "cpu", "total": "96", "borrowed": "0"}]},
                {
                    "name": "h100",
                    "resources": [
                        {"name": "nvidia.com/gpu", "total": "12", "borrowed": "4"},
                        {"name": "nvidia.com/mig-1g.10gb", "total": "0", "borrowed": "0"},
                    ],
                },
            ],
            "flavorsUsage": [
                {"name": "default-flavor", "resources": [{"name": "cpu", "total": "64", "borrowed": "0"}]},
                {
                    "name": "h100",
                    "resources": [
                        {"name": "nvidia.com/gpu", "total": "10", "borrowed": "2"},
                        {"name": "nvidia.com/mig-1g.10gb", "total": "0", "borrowed": "0"},
                    ],
                },
                {"name": "a100-mig", "resources": [{"name": "nvidia.com/mig-1g.10gb", "total": "3"}]},
            ],
            "pendingWorkloads": 2,
            "reservingWorkloads": 4,
            "admittedWorkloads": 3,
        },
    }


def local_queue() -> JsonObject:
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "LocalQueue",
        "metadata": {
            "name": "genai-queue",
            "namespace": "genai-apps",
            "creationTimestamp": "2026-09-01T10:00:00Z",
        },
        "spec": {"clusterQueue": "genai", "stopPolicy": "None"},
        "status": {"pendingWorkloads": 2, "reservingWorkloads": 4, "admittedWorkloads": 3},
    }


def pod_template(gpus: str, *, init_gpus: str | None = None) -> JsonObject:
    resources = {"cpu": "8", "memory": "32Gi", "nvidia.com/gpu": gpus}
    spec: JsonObject = {
        "containers": [
            {
                "name": "trainer",
                "image": "pytorch",
                "resources": {"requests": resources, "limits": resources},
            },
            {"name": "sidecar", "image": "busybox", "resources": {"requests": {"cpu": "100m"}}},
        ],
        "restartPolicy": "Never",
    }
    if init_gpus is not None:
        spec["initContainers"] = [
            {"name": "warmup", "image": "cuda", "resources": {"limits": {"nvidia.com/gpu": init_gpus}}}
        ]
    return {"metadata": {"labels": {"app": "sft"}}, "spec": spec}


def admitted_workload() -> JsonObject:
    """Two pod sets: a launcher (1 pod, 1 GPU) and 2 workers of 4 GPUs, admitted in h100."""
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {
            "name": "pytorchjob-sft-70b-3f2a1",
            "namespace": "genai-apps",
            "creationTimestamp": "2026-11-19T08:00:00Z",
            "labels": {"kueue.x-k8s.io/job-uid": "5c023c28-8533-4927-b266-56bca5e310c1"},
            "ownerReferences": [
                {
                    "apiVersion": "kubeflow.org/v1",
                    "kind": "PyTorchJob",
                    "name": "sft-70b",
                    "uid": "5c023c28-8533-4927-b266-56bca5e310c1",
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": {
            "active": True,
            "queueName": "genai-queue",
            "priority": 0,
            "podSets": [
                {"name": "master", "count": 1, "template": pod_template("1")},
                {"name": "worker", "count": 2, "template": pod_template("4", init_gpus="2")},
            ],
        },
        "status": {
            "admission": {
                "clusterQueue": "genai",
                "podSetAssignments": [
                    {
                        "name": "master",
                        "flavors": {
                            "cpu": "default-flavor",
                            "memory": "default-flavor",
                            "nvidia.com/gpu": "h100",
                        },
                        "resourceUsage": {"cpu": "8", "memory": "32Gi", "nvidia.com/gpu": "1"},
                        "count": 1,
                    },
                    {
                        "name": "worker",
                        "flavors": {
                            "cpu": "default-flavor",
                            "memory": "default-flavor",
                            "nvidia.com/gpu": "h100",
                        },
                        "resourceUsage": {"cpu": "16", "memory": "64Gi", "nvidia.com/gpu": "8"},
                        "count": 2,
                    },
                ],
            },
            "conditions": [
                {
                    "type": "QuotaReserved",
                    "status": "True",
                    "reason": "QuotaReserved",
                    "message": "Quota reserved in ClusterQueue genai",
                    "lastTransitionTime": "2026-11-19T08:00:02Z",
                    "observedGeneration": 1,
                },
                {
                    "type": "Admitted",
                    "status": "True",
                    "reason": "Admitted",
                    "message": "The workload is admitted",
                    "lastTransitionTime": "2026-11-19T08:00:03Z",
                    "observedGeneration": 1,
                },
                {
                    "type": "PodsReady",
                    "status": "True",
                    "reason": "Started",
                    "message": "All pods reached readiness and the workload is running",
                    "lastTransitionTime": "2026-11-19T08:04:41Z",
                },
            ],
        },
    }


PREEMPTION = (
    "Preempted to accommodate a workload (UID: 5c023c28-8533-4927-b266-56bca5e310c1, JobUID: "
    "4548c8bd-c399-4027-bb02-6114f3a8cdeb) due to reclamation within the cohort; preemptor path: "
    "/research/llm-research; preemptee path: /research/genai"
)
WAITING = (
    "couldn't assign flavors to pod set main: insufficient unused quota for nvidia.com/gpu in flavor "
    "h100, 4 more needed"
)


def preempted_workload() -> JsonObject:
    """Preempted (twice, the second time at 13:10), requeued, and waiting for quota again."""
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {
            "name": "job-sft-llama-8b-246fd",
            "namespace": "genai-apps",
            "creationTimestamp": "2026-11-19T02:00:00Z",
            "ownerReferences": [
                {
                    "apiVersion": "batch/v1",
                    "kind": "Job",
                    "name": "sft-llama-8b",
                    "uid": "u1",
                    "controller": True,
                }
            ],
        },
        "spec": {
            "queueName": "genai-queue",
            "podSets": [{"name": "main", "count": 1, "template": pod_template("4")}],
        },
        "status": {
            "conditions": [
                {
                    "type": "QuotaReserved",
                    "status": "False",
                    "reason": "Pending",
                    # kubectl -o yaml folds long messages; the JSON holds one line.
                    "message": WAITING,
                    "lastTransitionTime": "2026-11-19T13:10:01Z",
                },
                {
                    "type": "Evicted",
                    "status": "True",
                    "reason": "Preempted",
                    "message": PREEMPTION,
                    "lastTransitionTime": "2026-11-19T13:10:00Z",
                },
                {
                    "type": "Preempted",
                    "status": "True",
                    "reason": "InCohortReclamation",
                    "message": PREEMPTION,
                    "lastTransitionTime": "2026-11-19T13:10:00Z",
                },
                {
                    "type": "Requeued",
                    "status": "True",
                    "reason": "Preempted",
                    "message": PREEMPTION,
                    "lastTransitionTime": "2026-11-19T13:10:01Z",
                },
                {
                    "type": "Admitted",
                    "status": "False",
                    "reason": "NoReservation",
                    "message": "The workload has no reservation",
                    "lastTransitionTime": "2026-11-19T13:10:01Z",
                },
            ],
            "resourceRequests": [{"name": "main", "resources": {"cpu": "8", "nvidia.com/gpu": "4"}}],
            "schedulingStats": {
                "evictions": [
                    {"reason": "Preempted", "underlyingCause": "", "count": 2},
                    {"reason": "PodsReadyTimeout", "underlyingCause": "", "count": 1},
                ]
            },
        },
    }


def finished_workload() -> JsonObject:
    """Preempted once on a Kueue without schedulingStats, admitted again (its Evicted and Preempted
    conditions reset to False) and finished."""
    obj = copy.deepcopy(admitted_workload())
    obj["metadata"]["name"] = "job-eval-1"
    obj["spec"]["podSets"] = [{"name": "main", "count": 1, "template": pod_template("2")}]
    obj["status"]["conditions"] += [
        {
            "type": "Evicted",
            "status": "False",
            "reason": "QuotaReserved",
            "message": "Previously: " + PREEMPTION,
            "lastTransitionTime": "2026-11-19T08:00:02Z",
        },
        {
            "type": "Preempted",
            "status": "False",
            "reason": "QuotaReserved",
            "message": "Previously: " + PREEMPTION,
            "lastTransitionTime": "2026-11-19T08:00:02Z",
        },
        {
            "type": "Finished",
            "status": "True",
            "reason": "Succeeded",
            "message": "Reached expected number of succeeded pods",
            "lastTransitionTime": "2026-11-19T11:30:00Z",
        },
    ]
    return obj


def raw() -> dict[str, list[Any]]:
    cohort = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Cohort",
        "metadata": {"name": "research"},
        "spec": {
            "parentName": "org",
            "resourceGroups": [
                {
                    "coveredResources": ["nvidia.com/gpu"],
                    "flavors": [
                        {"name": "h100", "resources": [{"name": "nvidia.com/gpu", "nominalQuota": "16"}]}
                    ],
                }
            ],
        },
    }
    return {
        "resourceflavors": [flavor_h100()],
        "cohorts": [cohort],
        "clusterqueues": [cluster_queue()],
        "localqueues": [local_queue()],
        "workloads": [admitted_workload(), preempted_workload(), finished_workload()],
    }


# -- the parser ------------------------------------------------------------------------------------


def test_cluster_queue_quotas_limits_and_usage_of_gpus_only() -> None:
    state = state_from_raw(raw(), version="v1beta2")
    assert state.installed and state.version == "v1beta2"
    assert state.skipped == 0 and state.warnings == ()
    (cq,) = state.cluster_queues
    assert (cq.name, cq.cohort) == ("genai", "research")
    assert cq.quotas[0] == FlavorQuota(
        flavor="h100", resource=RESOURCE_GPU, nominal=8.0, borrowing_limit=4.0, lending_limit=2.0
    )
    assert cq.quotas[1].resource == "nvidia.com/mig-1g.10gb" and cq.quotas[1].nominal == 0.0
    assert [(q.flavor, q.resource, q.nominal) for q in cq.quotas] == [
        ("h100", RESOURCE_GPU, 8.0),
        ("h100", "nvidia.com/mig-1g.10gb", 0.0),
        ("a100-mig", RESOURCE_GPU, 0.0),
        ("a100-mig", "nvidia.com/mig-1g.10gb", 14.0),
    ]
    # No limit set is unlimited: NaN, never 0.
    unlimited = cq.quota("a100-mig", "nvidia.com/mig-1g.10gb")
    assert unlimited is not None
    assert math.isnan(unlimited.borrowing_limit) and math.isnan(unlimited.lending_limit)
    assert cq.used("h100", RESOURCE_GPU) == FlavorUsage(
        flavor="h100", resource=RESOURCE_GPU, total=10.0, borrowed=2.0
    )
    assert cq.used("a100-mig", "nvidia.com/mig-1g.10gb") == FlavorUsage(
        flavor="a100-mig", resource="nvidia.com/mig-1g.10gb", total=3.0, borrowed=0.0
    )
    assert [(u.flavor, u.total, u.borrowed) for u in cq.reserved if u.resource == RESOURCE_GPU] == [
        ("h100", 12.0, 4.0)
    ]
    assert all(u.flavor != "default-flavor" for u in cq.usage + cq.reserved)  # cpu, memory dropped
    assert (cq.pending_workloads, cq.reserving_workloads, cq.admitted_workloads) == (2, 4, 3)


def test_flavor_cohort_and_local_queue() -> None:
    state = state_from_raw(raw(), version="v1beta2")
    (flavor,) = state.flavors
    assert flavor.product == "NVIDIA-H100-80GB-HBM3"
    assert flavor.node_taints == (Taint(key="dedicated", value="llm-training", effect="NoSchedule"),)
    assert flavor.tolerations == (
        Toleration(key="dedicated", operator="Equal", value="llm-training", effect="NoSchedule"),
        Toleration(key="nvidia.com/gpu", operator="Exists", effect="NoSchedule"),
    )
    labels = {
        "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
        "cloud.google.com/gke-spot": "false",
        "x": "y",
    }
    assert flavor.selects(labels)
    assert not flavor.selects(labels | {"cloud.google.com/gke-spot": "true"})
    (cohort,) = state.cohorts
    assert (cohort.name, cohort.parent) == ("research", "org")
    assert cohort.quotas == (FlavorQuota(flavor="h100", resource=RESOURCE_GPU, nominal=16.0),)
    (lq,) = state.local_queues
    assert (lq.key, lq.cluster_queue) == ("genai-apps/genai-queue", "genai")
    assert (lq.pending_workloads, lq.reserving_workloads, lq.admitted_workloads) == (2, 4, 3)


def test_admitted_workload_sums_gpus_over_pod_sets() -> None:
    state = state_from_raw(raw(), version="v1beta2")
    w = {w.name: w for w in state.workloads}["pytorchjob-sft-70b-3f2a1"]
    # master: 1 pod × 1 GPU; workers: 2 pods × max(4 in containers, 2 in the init container).
    assert w.gpu_requests == {RESOURCE_GPU: 9.0}
    assert (w.key, w.queue_name, w.cluster_queue) == (
        "genai-apps/pytorchjob-sft-70b-3f2a1",
        "genai-queue",
        "genai",
    )
    assert w.flavors == {RESOURCE_GPU: "h100"}
    assert w.created_at == t("2026-11-19T08:00:00Z")
    assert w.quota_reserved_at == t("2026-11-19T08:00:02Z")
    assert w.admitted_at == t("2026-11-19T08:00:03Z")
    assert w.finished_at is None and w.evicted_at is None and w.evicted_reason == ""
    assert (w.preemptions, w.pending_message, w.status) == (0, "", "admitted")
    assert (w.owner_kind, w.owner_name) == ("PyTorchJob", "sft-70b")


def test_preempted_workload_waits_with_kueues_message_and_counts_preemptions() -> None:
    state = state_from_raw(raw(), version="v1beta2")
    w = {w.name: w for w in state.workloads}["job-sft-llama-8b-246fd"]
    assert w.status == "pending"
    assert w.gpu_requests == {RESOURCE_GPU: 4.0}
    assert w.cluster_queue == "" and w.flavors == {}
    assert w.quota_reserved_at is None and w.admitted_at is None
    assert w.evicted_at == t("2026-11-19T13:10:00Z") and w.evicted_reason == "Preempted"
    assert w.preemptions == 2  # schedulingStats counts Preempted twice; the PodsReadyTimeout is no preemption
    assert w.pending_message == WAITING
    assert (w.owner_kind, w.owner_name) == ("Job", "sft-llama-8b")


def test_a_workload_preempted_before_schedulingstats_then_readmitted_and_finished() -> None:
    state = state_from_raw(raw(), version="v1beta2")
    w = {w.name: w for w in state.workloads}["job-eval-1"]
    assert w.status == "finished"
    assert w.finished_at == t("2026-11-19T11:30:00Z")
    assert w.evicted_at is None and w.evicted_reason == ""  # Evicted is False since readmission
    assert w.preemptions == 1  # only its kept Preempted condition says so
    assert w.gpu_requests == {RESOURCE_GPU: 2.0}


def test_v1beta1_cohort_field_reads_the_same() -> None:
    old = copy.deepcopy(cluster_queue())
    old["apiVersion"] = "kueue.x-k8s.io/v1beta1"
    old["spec"]["cohort"] = old["spec"].pop("cohortName")
    state = state_from_raw({"clusterqueues": [old]}, version="v1beta1")
    assert state.version == "v1beta1"
    assert state.cluster_queues[0].cohort == "research"
    assert state.cluster_queues[0].quotas == state_from_raw(raw(), version="v1beta2").cluster_queues[0].quotas


def test_malformed_objects_are_skipped_counted_and_warned_once() -> None:
    objects = raw()
    nameless = copy.deepcopy(cluster_queue())
    del nameless["metadata"]["name"]
    bad_quota = copy.deepcopy(cluster_queue())
    bad_quota["metadata"]["name"] = "bad-quota"
    bad_quota["spec"]["resourceGroups"][1]["flavors"][0]["resources"][0]["nominalQuota"] = "eight"
    bad_time = copy.deepcopy(admitted_workload())
    bad_time["metadata"]["name"] = "bad-time"
    bad_time["status"]["conditions"][1]["lastTransitionTime"] = "yesterday"
    bad_count = copy.deepcopy(preempted_workload())
    bad_count["metadata"]["name"] = "bad-count"
    bad_count["spec"]["podSets"][0]["count"] = "two"
    bad_gpus = copy.deepcopy(preempted_workload())
    bad_gpus["metadata"]["name"] = "bad-gpus"
    bad_gpus["spec"]["podSets"][0]["template"]["spec"]["containers"][0]["resources"]["limits"][
        "nvidia.com/gpu"
    ] = "lots"
    homeless = copy.deepcopy(local_queue())
    del homeless["metadata"]["namespace"]
    objects["clusterqueues"] += [nameless, copy.deepcopy(nameless), bad_quota, "not an object"]
    objects["workloads"] += [
        bad_time,
        bad_count,
        bad_gpus,
        {
            "metadata": {"name": "w", "namespace": "n", "creationTimestamp": "2026-11-19T00:00:00Z"},
            "spec": ["main"],
        },
    ]
    objects["localqueues"] += [homeless]
    state = state_from_raw(objects, version="v1beta2")
    # Whole objects skipped: 2 nameless CQs, the string, bad-time, bad-count, the list spec, the homeless LQ.
    assert [cq.name for cq in state.cluster_queues] == ["genai", "bad-quota"]
    assert [q.flavor for q in state.cluster_queues[1].quotas] == ["h100", "a100-mig", "a100-mig"]
    assert [lq.name for lq in state.local_queues] == ["genai-queue"]
    kept = {w.name: w for w in state.workloads}
    assert set(kept) == {"pytorchjob-sft-70b-3f2a1", "job-sft-llama-8b-246fd", "job-eval-1", "bad-gpus"}
    # bad-gpus's malformed quantity is skipped (counted): its one GPU request is gone, the workload stays.
    assert kept["bad-gpus"].gpu_requests == {}
    assert state.skipped == 9
    assert state.warnings == (
        "kueue clusterqueue (unnamed): malformed (no metadata.name), skipped",
        "kueue clusterqueue bad-quota: quota of nvidia.com/gpu in flavor h100: "
        "malformed quantity 'eight', skipped",
        "kueue clusterqueue (unnamed): malformed (not an object), skipped",
        "kueue localqueue genai-queue: malformed (no metadata.namespace), skipped",
        "kueue workload genai-apps/bad-time: malformed (Invalid isoformat string: 'yesterday'), skipped",
        "kueue workload genai-apps/bad-count: malformed (bad count 'two'), skipped",
        "kueue workload genai-apps/bad-gpus: malformed quantity nvidia.com/gpu='lots' skipped",
        "kueue workload n/w: malformed (a field of the wrong type), skipped",
    )


# -- listing: versions, absence, RBAC ---------------------------------------------------------------


class FakeSource:
    """list_custom() as KubernetesSource answers it: the objects of the versions `served`, None else."""

    def __init__(self, served: dict[str, dict[str, list[Any]]], forbidden: str = "") -> None:
        self.served = served
        self.forbidden = forbidden
        self.calls: list[str] = []

    def list_custom(
        self, group: str, version: str, plural: str, *, needs: str = ""
    ) -> tuple[list[Any], int] | None:
        self.calls.append(f"{group}/{version}/{plural}")
        if plural == self.forbidden:
            raise KubernetesError(f"kubernetes: forbidden (403): nope; gpuwatch needs {needs}")
        if version not in self.served:
            return None
        objects = self.served[version]
        return (objects[plural], 1 if plural == "workloads" else 0) if plural in objects else None


def test_kueue_state_reads_v1beta2_when_served() -> None:
    source = FakeSource({"v1beta2": raw(), "v1beta1": {}})
    state = kueue_state(source)  # type: ignore[arg-type]
    assert state.version == "v1beta2" and len(state.workloads) == 3 and state.list_restarts == 1
    assert source.calls[0] == "kueue.x-k8s.io/v1beta2/clusterqueues"
    assert all("/v1beta2/" in c for c in source.calls) and len(source.calls) == 5


def test_kueue_state_falls_back_to_v1beta1_and_reads_no_cohort_collection_as_none() -> None:
    old = {k: v for k, v in raw().items() if k != "cohorts"}
    source = FakeSource({"v1beta1": old})
    state = kueue_state(source)  # type: ignore[arg-type]
    assert state.installed and state.version == "v1beta1"
    assert state.cohorts == () and [cq.name for cq in state.cluster_queues] == ["genai"]
    assert source.calls[:2] == [
        "kueue.x-k8s.io/v1beta2/clusterqueues",
        "kueue.x-k8s.io/v1beta1/clusterqueues",
    ]


def test_kueue_absent_is_not_installed_and_no_error() -> None:
    source = FakeSource({})
    state = kueue_state(source)  # type: ignore[arg-type]
    assert state == KueueState(installed=False)
    assert kueue_line(state) == "Kueue not installed: queues and quota waits not shown"


def test_a_403_names_the_rbac_kueue_needs() -> None:
    with pytest.raises(KubernetesError) as e:
        kueue_state(FakeSource({"v1beta2": raw()}, forbidden="workloads"))  # type: ignore[arg-type]
    assert str(e.value).endswith(
        "gpuwatch needs get/list/watch on clusterqueues, localqueues, workloads, resourceflavors and cohorts "
        'in API group "kueue.x-k8s.io"'
    )
    assert KUEUE_RBAC in str(e.value)


def test_check_line_of_an_installed_kueue() -> None:
    state = state_from_raw(raw(), version="v1beta2")
    assert kueue_line(state) == (
        "kueue (kueue.x-k8s.io/v1beta2): installed, 1 cluster queues, 1 local queues, 3 workloads"
    )
    skipped = replace(state, skipped=2)
    assert kueue_line(skipped).endswith("3 workloads (2 malformed objects skipped)")


# -- the simulated fleet's Kueue ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def fleet() -> SimulatedFleet:
    return build_demo_fleet(seed=42, end=END, days=1)


@pytest.fixture(scope="module")
def simulated(fleet: SimulatedFleet) -> KueueState:
    return state_from_raw(kueue_objects(fleet), version="v1beta2")


def test_simulated_objects_parse_cleanly_and_are_a_pure_function_of_the_fleet(
    fleet: SimulatedFleet, simulated: KueueState
) -> None:
    assert simulated.skipped == 0 and simulated.warnings == ()
    assert kueue_objects(fleet) == kueue_objects(build_demo_fleet(seed=42, end=END, days=1))
    names = {lq.namespace for lq in simulated.local_queues}
    assert names <= {n.name for n in fleet.namespaces}
    assert {lq.cluster_queue for lq in simulated.local_queues} == {cq.name for cq in simulated.cluster_queues}


def test_simulated_flavors_stand_for_the_pools(fleet: SimulatedFleet, simulated: KueueState) -> None:
    flavors = {f.name: f for f in simulated.flavors}
    assert set(flavors) == {"h100", "a100", "a100-mig", "l4", "t4", "mi300x", "default-flavor"}
    assert flavors["h100"].product == "NVIDIA-H100-80GB-HBM3" and flavors["l4"].product == "NVIDIA-L4"
    pools = {
        "h100": "NVIDIA-H100-80GB-HBM3",
        "a100": "NVIDIA-A100-SXM4-80GB",
        "a100-mig": "NVIDIA-A100-SXM4-80GB",
        "l4": "NVIDIA-L4",
        "t4": "TESLA-T4",
        "mi300x": "AMD_INSTINCT_MI300X_OAM",  # by AMD's node labeller's product label
    }
    for name, pool in pools.items():
        selected = [n for n in fleet.nodes if flavors[name].selects(n.labels)]
        # Exactly the pool's nodes (the MIG A100s apart from the whole ones), every one of them.
        assert {n.name for n in selected} == {n.name for n in fleet.nodes if n.name[4:-4] == name}, name
        assert {n.pool for n in selected} == {pool}, name
    assert all(flavors["default-flavor"].selects(n.labels) for n in fleet.nodes)
    assert flavors["h100"].tolerations == (
        Toleration(key="dedicated", operator="Equal", value="llm-training", effect="NoSchedule"),
    )


def test_simulated_cohorts_borrowing_and_a_starved_queue(simulated: KueueState) -> None:
    queues = {cq.name: cq for cq in simulated.cluster_queues}
    assert {cq.cohort for cq in queues.values()} == {"research", "serving", ""}
    assert [c.name for c in simulated.cohorts] == ["research", "serving"]
    genai = queues["genai"]
    assert genai.quota("h100", RESOURCE_GPU) == FlavorQuota(
        flavor="h100", resource=RESOURCE_GPU, nominal=4.0, borrowing_limit=4.0
    )
    assert genai.used("h100", RESOURCE_GPU) == FlavorUsage(
        flavor="h100", resource=RESOURCE_GPU, total=8.0, borrowed=4.0
    )
    lender = queues["llm-research"].quota("h100", RESOURCE_GPU)
    assert lender is not None and lender.lending_limit == 8.0 and lender.nominal == 16.0
    robotics = queues["robotics"]
    assert (robotics.pending_workloads, robotics.admitted_workloads) == (2, 0)
    starving = [w for w in simulated.workloads if w.queue_name == "robotics-queue"]
    assert [w.status for w in starving] == ["pending", "pending"]
    assert min(w.created_at for w in starving) <= END - timedelta(hours=6)
    assert [w.pending_message for w in starving] == [
        "couldn't assign flavors to pod set main: insufficient unused quota for nvidia.com/gpu in flavor "
        f"a100, {n} more needed"
        for n in (2, 4)
    ]


def test_simulated_preempted_workload_has_kueues_condition_layout(simulated: KueueState) -> None:
    (preempted,) = [w for w in simulated.workloads if w.preemptions]
    assert (preempted.namespace, preempted.owner_name, preempted.status) == (
        "genai-apps",
        "sft-llama-8b",
        "pending",
    )
    assert preempted.evicted_reason == "Preempted" and preempted.evicted_at is not None
    assert preempted.evicted_at < END and preempted.created_at < preempted.evicted_at
    assert preempted.preemptions == 1
    assert preempted.pending_message == (
        "couldn't assign flavors to pod set main: insufficient unused quota for nvidia.com/gpu in flavor "
        "h100, 4 more needed"
    )
    raw_object = next(
        o
        for o in kueue_objects(build_demo_fleet(seed=42, end=END, days=1))["workloads"]
        if o["metadata"]["name"] == preempted.name
    )
    conditions = {c["type"]: (c["status"], c["reason"]) for c in raw_object["status"]["conditions"]}
    assert conditions == {
        "QuotaReserved": ("False", "Pending"),
        "Evicted": ("True", "Preempted"),
        "Preempted": ("True", "InCohortReclamation"),
        "Requeued": ("True", "Preempted"),
        "PodsReady": ("False", "WaitForStart"),
        "Admitted": ("False", "NoReservation"),
    }
    assert raw_object["status"]["schedulingStats"] == {
        "evictions": [{"reason": "Preempted", "underlyingCause": "", "count": 1}]
    }


def test_the_kueue_gated_pod_waits_in_search_queue(fleet: SimulatedFleet, simulated: KueueState) -> None:
    gated = [p for p in fleet.api_pods() if p.labels.get(KUEUE_QUEUE_LABEL)]
    assert [p.key for p in gated] == ["search/rerank-batch-0"]
    (w,) = [w for w in simulated.workloads if w.owner_kind == "Pod" and w.owner_name == "rerank-batch-0"]
    assert (w.namespace, w.queue_name, w.status) == ("search", "search-queue", "pending")
    assert w.gpu_requests == {RESOURCE_GPU: 2.0}
    assert w.created_at == gated[0].created_at
    assert w.pending_message == (
        "couldn't assign flavors to pod set main: insufficient unused quota for nvidia.com/gpu in flavor l4, "
        "2 more needed"
    )
    search = next(cq for cq in simulated.cluster_queues if cq.name == "search")
    quota, used = search.quota("l4", RESOURCE_GPU), search.used("l4", RESOURCE_GPU)
    assert (
        quota is not None and used is not None and used.total == quota.nominal and quota.borrowing_limit == 0
    )


def test_admitted_workloads_hold_what_their_pods_request(
    fleet: SimulatedFleet, simulated: KueueState
) -> None:
    pods = {p.key: p for p in fleet.api_pods()}
    admitted = [w for w in simulated.workloads if w.status == "admitted"]
    assert len(admitted) >= 10
    for w in admitted:
        if w.owner_kind == "Pod":
            pod = pods[f"{w.namespace}/{w.owner_name}"]
        else:  # a Job's pod: <job>-<suffix>
            (pod,) = [
                p
                for p in pods.values()
                if p.namespace == w.namespace and p.name.rsplit("-", 1)[0] == w.owner_name
            ]
        assert pod.phase == "Running", w.key
        assert dict(w.gpu_requests) == dict(pod.gpu_requests), w.key
        flavor = next(f for f in simulated.flavors if f.name == w.flavors[RESOURCE_GPU])
        assert flavor.selects(fleet.node(pod.node or "").labels), w.key
    # Per queue and flavor, what Kueue says is in use is what its admitted workloads hold.
    for cq in simulated.cluster_queues:
        for u in cq.usage:
            held = sum(
                w.gpu_requests.get(u.resource, 0.0)
                for w in admitted
                if w.cluster_queue == cq.name and w.flavors.get(u.resource) == u.flavor
            )
            assert u.total == held, (cq.name, u)
            quota = cq.quota(u.flavor, u.resource)
            assert quota is not None and u.borrowed == max(0.0, u.total - quota.nominal)


def test_v1beta1_objects_are_the_same_objects(fleet: SimulatedFleet, simulated: KueueState) -> None:
    objects = kueue_objects(fleet)
    old = {plural: [at_version(plural, o, "v1beta1") for o in items] for plural, items in objects.items()}
    assert old["clusterqueues"][0]["apiVersion"] == "kueue.x-k8s.io/v1beta1"
    genai = next(o for o in old["clusterqueues"] if o["metadata"]["name"] == "genai")
    assert genai["spec"]["cohort"] == "research" and "cohortName" not in genai["spec"]
    assert (
        "flavorUsage" in old["localqueues"][0]["status"]
        and "flavorsUsage" not in old["localqueues"][0]["status"]
    )
    assert replace(state_from_raw(old, version="v1beta1"), version="v1beta2") == simulated
