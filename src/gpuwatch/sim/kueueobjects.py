"""The simulated fleet's Kueue objects (kueue.x-k8s.io), as a real API server with Kueue 0.16+ returns them.

ResourceFlavors stand for the fleet's pools (nodeLabels the nodes' GFD labels share, the H100 nodes'
reservation tolerated) plus `default-flavor` for cpu and memory. ClusterQueues in two cohorts: `research`
(llm-research lends H100s; genai borrows them, over its nominal quota, and has a job preempted when
llm-research reclaimed its quota waiting to run again; robotics, with no A100 quota of its own and
nothing left to borrow, has had jobs pending for hours with nothing admitted) and `serving` (search's
L4 quota is all in use, so the Kueue-gated pod search/rerank-batch-0 waits); `batch` has no cohort.
LocalQueues live in the teams' namespaces. Workloads stand for the fleet's pods: the training and batch
pods of a queue's namespace (as Jobs), its inference pods (as pods), and every pod with a
kueue.x-k8s.io/queue-name label; admitted ones hold exactly what their pods request. Quotas and usage are
computed from those, so the objects are a pure function of the fleet.

Objects are built in the storage version (v1beta2); kueuecrds converts them for v1beta1 (at_version()),
as the API server converts a CRD's objects between its served versions, and prints them with the CRDs'
columns (table()). kueuesetup holds the queues and flavors, kueueworkloads the Workloads; this module
the quotas, usage and why a workload waits, the ClusterQueues and LocalQueues, and kueue_objects().
"""

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from gpuwatch.core.model import RESOURCE_GPU, Node
from gpuwatch.sim.fleet import SimulatedFleet
from gpuwatch.sim.kubeobjects import JsonObject, _meta, quantity, rfc3339
from gpuwatch.sim.kueuecrds import KUEUE_GROUP
from gpuwatch.sim.kueuesetup import (
    _QUEUES,
    DEFAULT_FLAVOR,
    _cohort_object,
    _flavor_object,
    _gpu_resources,
    _kept,
    _pools,
    _Queue,
)
from gpuwatch.sim.kueueworkloads import (
    _POD_SET,
    _WAITING_JOBS,
    _preempt,
    _Workload,
    _workload_object,
    _workloads,
)


@dataclass(frozen=True, slots=True)
class _Quota:
    nominal: float
    borrowing: float | None = None
    lending: float | None = None


def kueue_objects(fleet: SimulatedFleet) -> dict[str, list[JsonObject]]:
    """Every Kueue object of the fleet at `fleet.now`, by plural, in v1beta2 form, in the API server's
    order (by namespace and name)."""
    pools = _pools(fleet.nodes)
    namespaces = {n.name for n in fleet.namespaces}
    queues = [
        q
        for q in (
            _Queue(
                q.cluster_queue,
                q.cohort,
                q.namespace,
                q.local_queue,
                tuple(f for f in q.flavors if f in pools),
                q.managed,
            )
            for q in _QUEUES
        )
        if q.namespace in namespaces and q.flavors
    ]
    workloads = _workloads(fleet, queues, pools)
    for w in workloads:
        if w.preempted:
            _preempt(w, workloads, fleet.now)
    used = _usage(workloads)
    quotas = _quotas(queues, pools, used)
    for w in workloads:
        if not w.flavor and w.queue is not None and not w.message:
            w.message = _wait_message(w, queues, quotas, used)
    created = fleet.window.start - timedelta(days=60)
    cohorts = sorted({q.cohort for q in queues if q.cohort})
    return {
        "resourceflavors": [
            _flavor_object(name, pools.get(name, []), created) for name in sorted({*pools, DEFAULT_FLAVOR})
        ],
        "cohorts": [_cohort_object(name, created) for name in cohorts],
        "clusterqueues": sorted(
            (_cluster_queue_object(q, pools, quotas, workloads, created) for q in queues),
            key=lambda o: str(o["metadata"]["name"]),
        ),
        "localqueues": sorted(
            (_local_queue_object(q, workloads, created) for q in queues),
            key=lambda o: (str(o["metadata"]["namespace"]), str(o["metadata"]["name"])),
        ),
        "workloads": sorted(
            (_workload_object(w) for w in workloads),
            key=lambda o: (str(o["metadata"]["namespace"]), str(o["metadata"]["name"])),
        ),
    }


# ---------------------------------------------------------------------------------------------
# Quotas, usage, and why a workload waits


def _usage(workloads: Sequence[_Workload]) -> dict[tuple[str, str, str], float]:
    """GPUs admitted (and not finished) per (cluster queue, flavor, resource)."""
    used: dict[tuple[str, str, str], float] = {}
    for w in workloads:
        if w.admitted and w.queue is not None:
            key = (w.queue.cluster_queue, w.flavor, w.resource)
            used[key] = used.get(key, 0.0) + w.gpus
    return used


def _covered(queue: _Queue, pools: Mapping[str, Sequence[Node]]) -> list[str]:
    """The GPU resources a queue's resource group covers: those of its flavors' nodes."""
    return sorted({r for f in queue.flavors for r in _gpu_resources(pools[f])})


def _quotas(
    queues: Sequence[_Queue], pools: Mapping[str, Sequence[Node]], used: Mapping[tuple[str, str, str], float]
) -> dict[tuple[str, str, str], _Quota]:
    """Each queue's GPU quota per (cluster queue, flavor, resource), from what it holds: genai holds
    twice its nominal quota, the rest borrowed up to its limit; llm-research keeps room to lend it;
    vision keeps two H100s spare; bio-ml's A100 quota is all in use; robotics has none of its own and
    may borrow four; search's L4s are all in use and it may not borrow; the others have room."""
    genai = sum(v for (cq, _f, r), v in used.items() if cq == "genai" and r == RESOURCE_GPU)
    genai_nominal = float(math.ceil(genai / 2)) if genai else 4.0
    genai_borrowing = genai - genai_nominal if genai else 4.0
    out: dict[tuple[str, str, str], _Quota] = {}
    for q in queues:
        for flavor in q.flavors:
            for resource in _covered(q, pools):
                have = used.get((q.cluster_queue, flavor, resource), 0.0)
                quota = _Quota(max(4.0, have))
                if q.cluster_queue == "llm-research":
                    spare = max(8.0, genai_borrowing)
                    quota = _Quota(math.ceil((have + spare) / 8) * 8.0, lending=spare)
                elif q.cluster_queue == "genai":
                    quota = _Quota(genai_nominal, borrowing=genai_borrowing)
                elif q.cluster_queue == "vision":
                    quota = _Quota(have + 2.0 if flavor == "h100" else max(2.0, have))
                elif q.cluster_queue == "bio-ml":
                    quota = _Quota(have, borrowing=0.0, lending=have)
                elif q.cluster_queue == "robotics":
                    quota = _Quota(0.0, borrowing=4.0)
                elif q.cluster_queue == "search":
                    quota = _Quota(have, borrowing=0.0)
                out[(q.cluster_queue, flavor, resource)] = quota
    return out


def _wait_message(
    w: _Workload,
    queues: Sequence[_Queue],
    quotas: Mapping[tuple[str, str, str], _Quota],
    used: Mapping[tuple[str, str, str], float],
) -> str:
    """Why Kueue cannot reserve quota for a pending workload, as its flavor assigner says it (classical
    quota: the queue's unused nominal quota, plus what it may still borrow of its cohort's unused
    lendable quota). A waiting job with no pods is sized to need its listed number of GPUs more than that."""
    assert w.queue is not None
    queue = w.queue
    reasons = []
    more = next(
        (m for qn, job, m, _ in _WAITING_JOBS if qn == queue.cluster_queue and job == w.owner_name), 0
    )
    for flavor in queue.flavors:
        key = (queue.cluster_queue, flavor, w.resource)
        quota = quotas.get(key)
        if quota is None:
            continue
        available, capacity = _available(queue, flavor, w.resource, queues, quotas, used)
        if w.gpus == 0.0:
            w.gpus = available + more
        need = w.gpus
        if need > capacity:
            reasons.append(
                f"insufficient quota for {w.resource} in flavor {flavor}, previously considered podsets "
                f"requests (0) + current podset request ({quantity(need)}) > maximum capacity "
                f"({quantity(capacity)})"
            )
        elif need > available:
            reasons.append(
                f"insufficient unused quota for {w.resource} in flavor {flavor}, "
                f"{quantity(need - available)} more needed"
            )
        else:
            return ""  # it fits: Kueue has not tried it yet
    prefix = f"couldn't assign flavors to pod set {_POD_SET}"
    if not reasons:
        return f"{prefix}: resource {w.resource} unavailable in ClusterQueue"
    return f"{prefix}: {', '.join(sorted(reasons))}"


def _available(
    queue: _Queue,
    flavor: str,
    resource: str,
    queues: Sequence[_Queue],
    quotas: Mapping[tuple[str, str, str], _Quota],
    used: Mapping[tuple[str, str, str], float],
) -> tuple[float, float]:
    """(unused quota the queue can use now, the most it could ever hold) of a flavor's resource."""
    key = (queue.cluster_queue, flavor, resource)
    quota = quotas[key]
    have = used.get(key, 0.0)
    own = max(0.0, quota.nominal - have)
    if not queue.cohort:
        return own, quota.nominal
    lendable = 0.0
    free = 0.0
    borrowed = 0.0
    for other in queues:
        if other.cohort != queue.cohort:
            continue
        k = (other.cluster_queue, flavor, resource)
        q = quotas.get(k)
        if q is None:
            continue
        u = used.get(k, 0.0)
        borrowed += max(0.0, u - q.nominal)
        if other is not queue:
            cap = q.nominal if q.lending is None else q.lending
            lendable += cap
            free += min(cap, max(0.0, q.nominal - u))
    limit = math.inf if quota.borrowing is None else quota.borrowing
    room = max(0.0, limit - max(0.0, have - quota.nominal))
    return own + min(room, max(0.0, free - borrowed)), quota.nominal + min(limit, lendable)


# ---------------------------------------------------------------------------------------------
# Objects


def _cluster_queue_object(
    queue: _Queue,
    pools: Mapping[str, Sequence[Node]],
    quotas: Mapping[tuple[str, str, str], _Quota],
    workloads: Sequence[_Workload],
    created: datetime,
) -> JsonObject:
    mine = [w for w in workloads if w.queue is queue]
    admitted = [w for w in mine if w.admitted]
    pending = [w for w in mine if not w.flavor]
    gpu_flavors = []
    covered = _covered(queue, pools)
    capacity = 0.0
    for flavor in queue.flavors:
        resources = []
        for resource in covered:
            quota = quotas.get((queue.cluster_queue, flavor, resource), _Quota(0.0))
            entry: JsonObject = {"name": resource, "nominalQuota": quantity(quota.nominal)}
            if quota.borrowing is not None:
                entry["borrowingLimit"] = quantity(quota.borrowing)
            if quota.lending is not None:
                entry["lendingLimit"] = quantity(quota.lending)
            capacity += quota.nominal + (quota.nominal if quota.borrowing is None else quota.borrowing)
            resources.append(entry)
        gpu_flavors.append({"name": flavor, "resources": resources})
    # cpu and memory in a flavor of their own, ample for every pod the GPU quota allows.
    cpu_quota = max(16.0, 16.0 * capacity)
    memory_quota = int(max(64.0, 64.0 * capacity))
    spec: JsonObject = {
        "namespaceSelector": {},
        "queueingStrategy": "BestEffortFIFO",
        "resourceGroups": [
            {
                "coveredResources": ["cpu", "memory"],
                "flavors": [
                    {
                        "name": DEFAULT_FLAVOR,
                        "resources": [
                            {"name": "cpu", "nominalQuota": quantity(cpu_quota)},
                            {"name": "memory", "nominalQuota": f"{memory_quota}Gi"},
                        ],
                    }
                ],
            },
            {"coveredResources": covered, "flavors": gpu_flavors},
        ],
        "flavorFungibility": {"whenCanBorrow": "MayStopSearch", "whenCanPreempt": "TryNextFlavor"},
        "preemption": {
            "borrowWithinCohort": {"policy": "Never"},
            "reclaimWithinCohort": "Any" if queue.cohort else "Never",
            "withinClusterQueue": "LowerPriority",
        },
        "stopPolicy": "None",
    }
    if queue.cohort:
        spec["cohortName"] = queue.cohort
    usage = [
        {
            "name": DEFAULT_FLAVOR,
            "resources": [
                {"name": "cpu", "total": quantity(sum(w.cpu for w in admitted)), "borrowed": "0"},
                {"name": "memory", "total": _gi(sum(w.memory_gi for w in admitted)), "borrowed": "0"},
            ],
        }
    ]
    for flavor in queue.flavors:
        resources = []
        for resource in covered:
            total = sum(w.gpus for w in admitted if w.flavor == flavor and w.resource == resource)
            nominal = quotas.get((queue.cluster_queue, flavor, resource), _Quota(0.0)).nominal
            resources.append(
                {"name": resource, "total": quantity(total), "borrowed": quantity(max(0.0, total - nominal))}
            )
        usage.append({"name": flavor, "resources": resources})
    return {
        "apiVersion": f"{KUEUE_GROUP}/v1beta2",
        "kind": "ClusterQueue",
        "metadata": _meta(name=queue.cluster_queue, created=created) | _kept(),
        "spec": spec,
        "status": {
            "conditions": [
                {
                    "type": "Active",
                    "status": "True",
                    "reason": "Ready",
                    "message": "Can admit new workloads",
                    "lastTransitionTime": rfc3339(created),
                    "observedGeneration": 1,
                }
            ],
            "flavorsReservation": usage,
            "flavorsUsage": usage,
            "pendingWorkloads": len(pending),
            "reservingWorkloads": len(admitted),
            "admittedWorkloads": len(admitted),
        },
    }


def _gi(n: int) -> str:
    return f"{n}Gi" if n else "0"


def _local_queue_object(queue: _Queue, workloads: Sequence[_Workload], created: datetime) -> JsonObject:
    mine = [w for w in workloads if w.queue is queue and w.queue_name == queue.local_queue]
    admitted = [w for w in mine if w.admitted]
    usage = [
        {
            "name": DEFAULT_FLAVOR,
            "resources": [
                {"name": "cpu", "total": quantity(sum(w.cpu for w in admitted))},
                {"name": "memory", "total": _gi(sum(w.memory_gi for w in admitted))},
            ],
        }
    ] + [
        {
            "name": flavor,
            "resources": [
                {
                    "name": r,
                    "total": quantity(
                        sum(w.gpus for w in admitted if w.flavor == flavor and w.resource == r)
                    ),
                }
                for r in sorted({w.resource for w in mine} | {"nvidia.com/gpu"})
            ],
        }
        for flavor in queue.flavors
    ]
    return {
        "apiVersion": f"{KUEUE_GROUP}/v1beta2",
        "kind": "LocalQueue",
        "metadata": _meta(name=queue.local_queue, namespace=queue.namespace, created=created) | _kept(),
        "spec": {"clusterQueue": queue.cluster_queue, "stopPolicy": "None"},
        "status": {
            "conditions": [
                {
                    "type": "Active",
                    "status": "True",
                    "reason": "Ready",
                    "message": "Can submit new workloads to localQueue",
                    "lastTransitionTime": rfc3339(created),
                    "observedGeneration": 1,
                }
            ],
            "pendingWorkloads": sum(1 for w in mine if not w.flavor),
            "reservingWorkloads": len(admitted),
            "admittedWorkloads": len(admitted),
            "flavorsReservation": usage,
            "flavorsUsage": usage,
        },
    }
