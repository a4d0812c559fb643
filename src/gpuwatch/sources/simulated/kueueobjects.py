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

Objects are built in the storage version (v1beta2) and converted for v1beta1 (at_version()), as the API
server converts a CRD's objects between its served versions; table() prints them with the CRDs' columns.
"""

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from gpuwatch.model import (
    KUEUE_QUEUE_LABEL,
    PRODUCT_LABELS,
    RESOURCE_GPU,
    Node,
    Pod,
    is_gpu_resource,
)
from gpuwatch.sources.simulated.fleet import SimulatedFleet, stable_hex
from gpuwatch.sources.simulated.kubeobjects import (
    _DEFAULT_IMAGE,
    _IMAGES,
    JsonObject,
    _meta,
    quantity,
    rfc3339,
    uid,
)
from gpuwatch.sources.simulated.kubetables import human_duration, table_of

KUEUE_GROUP = "kueue.x-k8s.io"
KUEUE_VERSIONS = ("v1beta2", "v1beta1")  # served; the first is the preferred (storage) version
JOB_UID_LABEL = "kueue.x-k8s.io/job-uid"
DEFAULT_FLAVOR = "default-flavor"
# The node labels a GPU flavor's nodes are told apart by (GFD's).
_FLAVOR_LABELS = (*PRODUCT_LABELS, "nvidia.com/mig.strategy", "nvidia.com/gpu.sharing-strategy")
_POD_SET = "main"


@dataclass(frozen=True, slots=True)
class KueueResource:
    plural: str
    singular: str
    kind: str
    namespaced: bool
    short_names: tuple[str, ...]


# As Kueue's CRDs name them (config/components/crd/bases).
KUEUE_RESOURCES: Mapping[str, KueueResource] = {
    r.plural: r
    for r in (
        KueueResource(
            "resourceflavors", "resourceflavor", "ResourceFlavor", False, ("flavor", "flavors", "rf")
        ),
        KueueResource("cohorts", "cohort", "Cohort", False, ("co",)),
        KueueResource("clusterqueues", "clusterqueue", "ClusterQueue", False, ("cq",)),
        KueueResource("localqueues", "localqueue", "LocalQueue", True, ("queue", "queues", "lq")),
        KueueResource("workloads", "workload", "Workload", True, ("kwl", "kueueworkload", "kueueworkloads")),
    )
}


@dataclass(frozen=True, slots=True)
class _Queue:
    """A team's ClusterQueue and the LocalQueue in its namespace."""

    cluster_queue: str
    cohort: str
    namespace: str
    local_queue: str
    flavors: tuple[str, ...]  # GPU flavors (pools), in the order Kueue tries them
    managed: frozenset[str]  # archetypes of the namespace's pods that run through the queue


_JOBS = frozenset({"training", "batch"})  # archetypes that run as batch/v1 Jobs (the others as pods)
_QUEUES = (
    _Queue("llm-research", "research", "llm-research", "llm-queue", ("h100",), frozenset({"training"})),
    _Queue("genai", "research", "genai-apps", "genai-queue", ("h100",), frozenset({"training"})),
    _Queue("vision", "research", "vision", "vision-queue", ("h100", "l4"), frozenset({"training", "batch"})),
    _Queue("bio-ml", "research", "bio-ml", "bio-ml-queue", ("a100",), frozenset({"batch"})),
    _Queue("robotics", "research", "robotics", "robotics-queue", ("a100",), frozenset()),
    _Queue("search", "serving", "search", "search-queue", ("l4",), frozenset({"inference"})),
    _Queue("speech", "serving", "speech", "speech-queue", ("a100",), frozenset({"training"})),
    _Queue("batch", "", "batch-jobs", "batch-queue", ("t4",), frozenset({"batch"})),
)
# Jobs that wait with no pod (Kueue keeps a Job suspended until it is admitted): (queue, job, GPUs more
# than the queue can take now, hours since created). genai's was preempted.
_WAITING_JOBS = (
    ("genai", "sft-llama-8b", 4, 10.0),
    ("robotics", "sim2real-train-0", 2, 6.0),
    ("robotics", "sim2real-train-1", 4, 3.5),
)
_PREEMPTED_JOB = "sft-llama-8b"
_PREEMPTED_AGO = timedelta(hours=2, minutes=10)


@dataclass(slots=True)
class _Workload:
    """One Workload being built: what it asks for and where it stands."""

    queue: _Queue | None
    queue_name: str
    namespace: str
    name: str
    owner_kind: str
    owner_name: str
    owner_uid: str
    created: datetime
    resource: str  # its GPU resource
    gpus: float  # per pod
    archetype: str
    labels: Mapping[str, str]
    flavor: str = ""  # the GPU flavor it holds quota in ("" while pending)
    started: datetime | None = None  # its pods ready since
    ready: bool = True
    finished: datetime | None = None
    preempted: bool = False
    evicted: datetime | None = None  # when Kueue preempted it
    eviction: str = ""  # the Evicted and Preempted conditions' message
    message: str = ""
    wait: timedelta = timedelta(seconds=1)  # from creation to quota reserved (and admitted)

    @property
    def admitted(self) -> bool:
        return bool(self.flavor) and self.finished is None

    @property
    def cpu(self) -> float:
        return max(1.0, 8.0 * self.gpus)

    @property
    def memory_gi(self) -> int:
        return int(max(4, 32 * self.gpus))


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
# Flavors: one per pool


def _pool_of(node: str) -> str:
    """The pool of a simulated node, by its name: gpu-h100-003 -> h100, gpu-a100-mig-000 -> a100-mig."""
    return node.removeprefix("gpu-").rsplit("-", 1)[0]


def _pools(nodes: Sequence[Node]) -> dict[str, list[Node]]:
    out: dict[str, list[Node]] = {}
    for node in nodes:
        out.setdefault(_pool_of(node.name), []).append(node)
    return out


def _shared(nodes: Sequence[Node], keys: Sequence[str]) -> dict[str, str]:
    """The labels of `keys` every node carries with the same value."""
    if not nodes:
        return {}
    first = nodes[0].labels
    return {k: first[k] for k in keys if k in first and all(n.labels.get(k) == first[k] for n in nodes)}


def _gpu_resources(nodes: Sequence[Node]) -> list[str]:
    return sorted({r for n in nodes for r, q in n.capacity.items() if q > 0 and is_gpu_resource(r)})


def _flavor_object(name: str, nodes: Sequence[Node], created: datetime) -> JsonObject:
    spec: JsonObject = {}
    if nodes:
        spec["nodeLabels"] = _shared(nodes, _FLAVOR_LABELS)
        # Taints of every node of the pool but the GPU one (which GPU pods tolerate anyway): Kueue adds
        # the flavor's tolerations to the pods it admits there.
        taints = [t for t in nodes[0].taints if t.key != "nvidia.com/gpu"]
        common = [t for t in taints if all(t in n.taints for n in nodes)]
        if common:
            spec["tolerations"] = [
                {"key": t.key, "operator": "Equal", "value": t.value, "effect": t.effect} for t in common
            ]
    return {
        "apiVersion": f"{KUEUE_GROUP}/v1beta2",
        "kind": "ResourceFlavor",
        "metadata": _meta(name=name, created=created) | _kept(),
        "spec": spec,
    }


def _kept() -> JsonObject:
    return {"finalizers": ["kueue.x-k8s.io/resource-in-use"], "generation": 1}


def _cohort_object(name: str, created: datetime) -> JsonObject:
    return {
        "apiVersion": f"{KUEUE_GROUP}/v1beta2",
        "kind": "Cohort",
        "metadata": _meta(name=name, created=created) | {"generation": 1},
        "spec": {},
        "status": {},
    }


# ---------------------------------------------------------------------------------------------
# Workloads: the fleet's pods that run through a queue, and the jobs that wait


def _archetype(pod: Pod) -> str:
    return pod.labels.get("gpuwatch.io/archetype", "")


def _workloads(
    fleet: SimulatedFleet, queues: Sequence[_Queue], pools: Mapping[str, Sequence[Node]]
) -> list[_Workload]:
    by_namespace = {q.namespace: q for q in queues}
    by_local = {(q.namespace, q.local_queue): q for q in queues}
    ready = {n.name: n.ready for n in fleet.nodes}
    out: list[_Workload] = []
    for pod in sorted(fleet.api_pods(), key=lambda p: (p.namespace, p.name)):
        if not pod.gpu_requests:
            continue
        labelled = pod.labels.get(KUEUE_QUEUE_LABEL, "")
        queue = by_local.get((pod.namespace, labelled)) if labelled else by_namespace.get(pod.namespace)
        if not labelled and (queue is None or _archetype(pod) not in queue.managed):
            continue
        pool = _pool_of(pod.node) if pod.node else ""
        if pod.phase != "Pending" and (queue is None or pool not in queue.flavors):
            continue  # running outside the queue's flavors: not one of its workloads
        resource, gpus = next(iter(sorted(pod.gpu_requests.items())))
        as_job = not labelled and _archetype(pod) in _JOBS
        owner = pod.name.rsplit("-", 1)[0] if as_job else pod.name
        # A Job waits suspended in its queue until admitted; its pod is created then. A pod Kueue gates
        # is created at once and admitted a moment later.
        wait = (
            _queue_wait(owner, _archetype(pod)) if as_job and pod.phase != "Pending" else timedelta(seconds=1)
        )
        w = _Workload(
            queue=queue,
            queue_name=labelled or (queue.local_queue if queue else ""),
            namespace=pod.namespace,
            name=_workload_name("job" if as_job else "pod", owner, pod.namespace),
            owner_kind="Job" if as_job else "Pod",
            owner_name=owner,
            owner_uid=uid("job", pod.namespace, owner) if as_job else pod.uid,
            created=pod.created_at - wait + timedelta(seconds=1)
            if wait > timedelta(seconds=1)
            else pod.created_at,
            resource=resource,
            gpus=gpus,
            archetype=_archetype(pod) or pod.container,
            labels=pod.labels,
            wait=wait,
        )
        if pod.phase == "Pending":
            if queue is None:
                w.message = f"LocalQueue {labelled} doesn't exist"
        else:
            w.flavor = pool
            w.started = pod.started_at
            w.ready = pod.phase != "Running" or ready.get(pod.node or "", True)
            w.finished = pod.finished_at if pod.phase in ("Succeeded", "Failed") else None
        out.append(w)
    named = {q.cluster_queue: q for q in queues}
    for queue_name, job, _more, hours in _WAITING_JOBS:
        queue = named.get(queue_name)
        if queue is None:
            continue
        resource = _gpu_resources(pools[queue.flavors[0]])[0]
        out.append(
            _Workload(
                queue=queue,
                queue_name=queue.local_queue,
                namespace=queue.namespace,
                name=_workload_name("job", job, queue.namespace),
                owner_kind="Job",
                owner_name=job,
                owner_uid=uid("job", queue.namespace, job),
                created=fleet.now - timedelta(hours=hours),
                resource=resource,
                gpus=0.0,  # sized by _wait_message once the queue's quota is known
                archetype="training",
                labels={"app": job, "gpuwatch.io/archetype": "training"},
                preempted=job == _PREEMPTED_JOB,
            )
        )
    return out


def _queue_wait(job: str, archetype: str) -> timedelta:
    """How long a Job waited in its queue: deterministic, from its name; training jobs wait longer."""
    draw = int(stable_hex("queue-wait", job, n=8), 16)
    return timedelta(minutes=5 + draw % 115) if archetype == "training" else timedelta(minutes=1 + draw % 29)


def _preempt(w: _Workload, workloads: Sequence[_Workload], now: datetime) -> None:
    """Make `w` the workload llm-research preempted when it reclaimed its lent quota: at the admission of
    its newest admitted workload (or, if it has none, some hours ago), three hours after `w` started."""
    assert w.queue is not None
    reclaimers = [
        x for x in workloads if x.admitted and x.queue is not None and x.queue.cluster_queue == "llm-research"
    ]
    preemptor = max(reclaimers, key=lambda x: x.created, default=None)
    if preemptor is not None:
        w.evicted = preemptor.created + timedelta(seconds=1)
        who = f"UID: {uid(preemptor.namespace, preemptor.name)}, JobUID: {preemptor.owner_uid}"
    else:
        w.evicted = now - _PREEMPTED_AGO
        who = "UID: UNKNOWN, JobUID: UNKNOWN"
    w.created = min(w.created, w.evicted - timedelta(hours=3))
    cohort = w.queue.cohort
    w.eviction = (
        f"Preempted to accommodate a workload ({who}) due to reclamation within the cohort; preemptor "
        f"path: /{cohort}/llm-research; preemptee path: /{cohort}/{w.queue.cluster_queue}"
    )


def _workload_name(kind: str, owner: str, namespace: str) -> str:
    """Kueue's name for an owner's workload: <kind>-<owner>-<5 hex of a hash>."""
    return f"{kind}-{owner}-{stable_hex('kueue', namespace, kind, owner, n=5)}"


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


def _template(w: _Workload) -> JsonObject:
    """The pod template of the workload's one pod set: what its pods ask for."""
    requests = {"cpu": quantity(w.cpu), "memory": f"{w.memory_gi}Gi", w.resource: quantity(w.gpus)}
    container = w.archetype if w.archetype in _IMAGES else "main"
    return {
        "metadata": {"labels": dict(w.labels)},
        "spec": {
            "containers": [
                {
                    "name": container,
                    "image": _IMAGES.get(container, _DEFAULT_IMAGE),
                    "resources": {"requests": requests, "limits": dict(requests)},
                }
            ],
            "restartPolicy": "Never" if w.owner_kind == "Job" else "Always",
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
        },
    }


def _condition(kind: str, status: bool, when: datetime, reason: str, message: str) -> JsonObject:
    return {
        "type": kind,
        "status": "True" if status else "False",
        "lastTransitionTime": rfc3339(when),
        "reason": reason,
        "message": message,
        "observedGeneration": 1,
    }


def _workload_object(w: _Workload) -> JsonObject:
    meta = _meta(name=w.name, namespace=w.namespace, created=w.created, labels={JOB_UID_LABEL: w.owner_uid})
    meta["ownerReferences"] = [
        {
            "apiVersion": "batch/v1" if w.owner_kind == "Job" else "v1",
            "kind": w.owner_kind,
            "name": w.owner_name,
            "uid": w.owner_uid,
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]
    meta["finalizers"] = ["kueue.x-k8s.io/resource-in-use"]
    meta["generation"] = 1
    status: JsonObject = {}
    requests = {"cpu": quantity(w.cpu), "memory": f"{w.memory_gi}Gi", w.resource: quantity(w.gpus)}
    cq = w.queue.cluster_queue if w.queue is not None else ""
    if w.flavor:
        reserved = w.created + w.wait
        status["admission"] = {
            "clusterQueue": cq,
            "podSetAssignments": [
                {
                    "name": _POD_SET,
                    "flavors": {"cpu": DEFAULT_FLAVOR, "memory": DEFAULT_FLAVOR, w.resource: w.flavor},
                    "resourceUsage": requests,
                    "count": 1,
                }
            ],
        }
        conditions = [
            _condition(
                "QuotaReserved", True, reserved, "QuotaReserved", f"Quota reserved in ClusterQueue {cq}"
            ),
            _condition("Admitted", True, reserved, "Admitted", "The workload is admitted"),
        ]
        if w.started is not None and w.ready:
            conditions.append(
                _condition(
                    "PodsReady",
                    True,
                    w.started,
                    "Started",
                    "All pods reached readiness and the workload is running",
                )
            )
        elif w.started is not None:
            conditions.append(
                _condition(
                    "PodsReady",
                    False,
                    w.started,
                    "WaitForRecovery",
                    "At least one pod has failed, waiting for recovery",
                )
            )
        if w.finished is not None:
            conditions.append(
                _condition(
                    "Finished", True, w.finished, "Succeeded", "Reached expected number of succeeded pods"
                )
            )
    else:
        conditions = _waiting_conditions(w)
        status["resourceRequests"] = [{"name": _POD_SET, "resources": requests}]
        if w.preempted:
            status["schedulingStats"] = {
                "evictions": [{"reason": "Preempted", "underlyingCause": "", "count": 1}]
            }
    status["conditions"] = conditions
    return {
        "apiVersion": f"{KUEUE_GROUP}/v1beta2",
        "kind": "Workload",
        "metadata": meta,
        "spec": {
            "active": True,
            "podSets": [{"name": _POD_SET, "count": 1, "template": _template(w)}],
            "priority": 0,
            "queueName": w.queue_name,
        },
        "status": status,
    }


def _waiting_conditions(w: _Workload) -> list[JsonObject]:
    """A pending workload's conditions: QuotaReserved=False with the reason it waits (none if Kueue has
    not tried it yet); a preempted one keeps its Evicted, Preempted and Requeued conditions (as Kueue's
    troubleshooting guide shows them)."""
    conditions: list[JsonObject] = []
    tried = w.created + timedelta(seconds=1)
    if w.evicted is not None:
        evicted = w.evicted
        tried = evicted + timedelta(seconds=1)
        message = w.eviction
        conditions += [
            _condition("Evicted", True, evicted, "Preempted", message),
            _condition("Preempted", True, evicted, "InCohortReclamation", message),
            _condition("Requeued", True, tried, "Preempted", message),
            _condition("PodsReady", False, tried, "WaitForStart", "Not all pods are ready or succeeded"),
            _condition("Admitted", False, tried, "NoReservation", "The workload has no reservation"),
        ]
    if w.message:
        reason = "Inadmissible" if w.message.startswith("LocalQueue") else "Pending"
        conditions.insert(0, _condition("QuotaReserved", False, tried, reason, w.message))
    return conditions


# ---------------------------------------------------------------------------------------------
# Versions and printing


def at_version(plural: str, obj: JsonObject, version: str) -> JsonObject:
    """The object as the API server serves it at `version` (it stores v1beta2 and converts)."""
    out = dict(obj) | {"apiVersion": f"{KUEUE_GROUP}/{version}"}
    if version != "v1beta1":
        return out
    if plural == "clusterqueues" and "cohortName" in (obj.get("spec") or {}):
        spec = dict(obj["spec"])
        spec["cohort"] = spec.pop("cohortName")
        out["spec"] = spec
    if plural == "localqueues" and "flavorsUsage" in (obj.get("status") or {}):
        status = dict(obj["status"])
        status["flavorUsage"] = status.pop("flavorsUsage")
        out["status"] = status
    return out


def _column(name: str, kind: str, description: str, priority: int = 0, fmt: str = "") -> JsonObject:
    return {"name": name, "type": kind, "format": fmt, "description": description, "priority": priority}


_NAME = _column(
    "Name",
    "string",
    "Name must be unique within a namespace. Is required when creating resources, although some resources "
    "may allow a client to request the generation of an appropriate name automatically. Name is primarily "
    "intended for creation idempotence and configuration definition. Cannot be updated.",
    fmt="name",
)
_AGE = _column(
    "Age",
    "date",
    "CreationTimestamp is a timestamp representing the server time when this object was created.",
)


def _path(*keys: str) -> Callable[[JsonObject], Any]:
    def get(obj: JsonObject) -> Any:
        value: Any = obj
        for key in keys:
            value = value.get(key) if isinstance(value, dict) else None
        return value

    return get


def _condition_status(kind: str) -> Callable[[JsonObject], Any]:
    def get(obj: JsonObject) -> Any:
        found = [c for c in (obj.get("status") or {}).get("conditions") or [] if c.get("type") == kind]
        return found[0].get("status") if found else None

    return get


_Printer = tuple[JsonObject, Callable[[JsonObject], Any]]


def _printers(plural: str, version: str) -> list[_Printer]:
    """The CRD's additionalPrinterColumns (Age when it has none), each with the value it prints."""
    if plural == "clusterqueues":
        cohort = "cohortName" if version == "v1beta2" else "cohort"
        return [
            (_column("Cohort", "string", "Cohort that this ClusterQueue belongs to"), _path("spec", cohort)),
            (
                _column("Strategy", "string", "The queueing strategy used to prioritize workloads", 1),
                _path("spec", "queueingStrategy"),
            ),
            (
                _column("Pending Workloads", "integer", "Number of pending workloads"),
                _path("status", "pendingWorkloads"),
            ),
            (
                _column(
                    "Admitted Workloads",
                    "integer",
                    "Number of admitted workloads that haven't finished yet",
                    1,
                ),
                _path("status", "admittedWorkloads"),
            ),
        ]
    if plural == "localqueues":
        return [
            (_column("ClusterQueue", "string", "Backing ClusterQueue"), _path("spec", "clusterQueue")),
            (
                _column("Pending Workloads", "integer", "Number of pending workloads"),
                _path("status", "pendingWorkloads"),
            ),
            (
                _column(
                    "Admitted Workloads", "integer", "Number of admitted workloads that haven't finished yet."
                ),
                _path("status", "admittedWorkloads"),
            ),
        ]
    if plural == "workloads":
        return [
            (
                _column("Queue", "string", "Name of the queue this workload was submitted to"),
                _path("spec", "queueName"),
            ),
            (
                _column(
                    "Reserved in", "string", "Name of the ClusterQueue where the workload is reserving quota"
                ),
                _path("status", "admission", "clusterQueue"),
            ),
            (_column("Admitted", "string", "Admission status"), _condition_status("Admitted")),
            (_column("Finished", "string", "Workload finished"), _condition_status("Finished")),
            (
                _column("Age", "date", "Time this workload was created"),
                _path("metadata", "creationTimestamp"),
            ),
        ]
    return [(_AGE, _path("metadata", "creationTimestamp"))]


def table(
    plural: str,
    version: str,
    items: Sequence[JsonObject],
    *,
    metadata: JsonObject,
    now: datetime,
    table_version: str = "v1",
    include_object: str = "Metadata",
) -> JsonObject:
    """The Table the API server prints Kueue objects as (its CRD table convertor): Name, then the CRD's
    columns; a value absent is a null cell, a date its age."""
    printers = _printers(plural, version)

    def cell(column: JsonObject, value: Any) -> Any:
        if value is None:
            return None
        if column["type"] == "date":
            when = datetime.fromisoformat(str(value).replace("Z", "+00:00"))
            return human_duration((now - when).total_seconds())
        if column["type"] == "integer":
            return int(value)
        return str(value)

    return table_of(
        [_NAME] + [c for c, _ in printers],
        lambda obj: [obj["metadata"]["name"]] + [cell(c, get(obj)) for c, get in printers],
        items,
        metadata=metadata,
        version=table_version,
        include_object=include_object,
    )
