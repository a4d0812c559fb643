"""The simulated fleet's Kueue Workloads: which of its pods run through a queue (and the jobs that wait
with none), and each Workload object with its admission and conditions over time."""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from gpuwatch.core.model import KUEUE_QUEUE_LABEL, Node, Pod
from gpuwatch.sim.fleet import SimulatedFleet, stable_hex
from gpuwatch.sim.kubeobjects import (
    _DEFAULT_IMAGE,
    _IMAGES,
    JsonObject,
    _meta,
    quantity,
    rfc3339,
    uid,
)
from gpuwatch.sim.kueuecrds import KUEUE_GROUP
from gpuwatch.sim.kueuesetup import DEFAULT_FLAVOR, _gpu_resources, _pool_of, _Queue

JOB_UID_LABEL = "kueue.x-k8s.io/job-uid"
_POD_SET = "main"

_JOBS = frozenset({"training", "batch"})  # archetypes that run as batch/v1 Jobs (the others as pods)
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
# Objects


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
