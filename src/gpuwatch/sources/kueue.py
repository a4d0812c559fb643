"""Kueue (kueue.x-k8s.io) read from the API server: ResourceFlavors, Cohorts, ClusterQueues, LocalQueues and
Workloads as model objects, GPU resources only.

Kueue serves v1beta2 (its storage version since 0.16) and, deprecated, v1beta1; gpuwatch reads v1beta2 when
the server offers it and v1beta1 otherwise (Kueue before 0.15). The two differ in nothing read here but the
ClusterQueue's cohort (spec.cohortName, spec.cohort in v1beta1), so one parser reads both. In a fleet of
several clusters each cluster's objects are its own, named as its nodes are ("eu-1/research").
"""

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, TypeVar

from gpuwatch.core.errors import DataError
from gpuwatch.core.model import (
    ClusterQueue,
    Cohort,
    FlavorQuota,
    FlavorUsage,
    KueueState,
    LocalQueue,
    ResourceFlavor,
    Workload,
    is_gpu_resource,
    qualified,
)
from gpuwatch.core.units import parse_quantity
from gpuwatch.sources.kubernetes import (
    JsonObject,
    KubernetesSource,
    _gpu_resources,
    _one_line,
    _Problems,
    _time,
    parse_taints,
    parse_tolerations,
)

KUEUE_GROUP = "kueue.x-k8s.io"
KUEUE_VERSIONS = ("v1beta2", "v1beta1")  # the first one the server serves is read
# Everything gpuwatch reads of Kueue (deploy/rbac.yaml grants exactly this).
KUEUE_RESOURCES = ("resourceflavors", "cohorts", "clusterqueues", "localqueues", "workloads")
KUEUE_RBAC = (
    'get/list/watch on clusterqueues, localqueues, workloads, resourceflavors and cohorts in API group "'
    + KUEUE_GROUP
    + '"'
)
# Evicted and Preempted conditions and schedulingStats.evictions name a preemption so.
_PREEMPTED = "Preempted"

T = TypeVar("T")


def kueue_state(source: KubernetesSource) -> KueueState:
    """Kueue's objects, listed and parsed; KueueState(installed=False) when the server serves no Kueue API.

    A 403 (or any other failure to list) is a KubernetesError, one line (a 403 names the RBAC needed).
    A Cohort collection the server does not serve (Kueue before 0.13 had it in v1alpha1 only) is no
    cohort object.
    """
    served = kueue_served(source)
    if served is None:
        return KueueState(installed=False)
    version, first = served
    raw: dict[str, list[JsonObject]] = {"clusterqueues": first[0]}
    restarts = first[1]
    for plural in KUEUE_RESOURCES:
        if plural == "clusterqueues":
            continue
        listed = source.list_custom(KUEUE_GROUP, version, plural, needs=KUEUE_RBAC)
        raw[plural] = listed[0] if listed is not None else []
        restarts += listed[1] if listed is not None else 0
    return state_from_raw(raw, version=version, list_restarts=restarts)


def kueue_served(source: KubernetesSource) -> tuple[str, tuple[list[JsonObject], int]] | None:
    """The Kueue API version the server serves (the first of KUEUE_VERSIONS) and its ClusterQueues as
    list_custom() lists them; None without Kueue. A 403 is a KubernetesError naming the RBAC needed."""
    for version in KUEUE_VERSIONS:
        queues = source.list_custom(KUEUE_GROUP, version, "clusterqueues", needs=KUEUE_RBAC)
        if queues is not None:
            return version, queues
    return None


def kueue_path(version: str, plural: str) -> str:
    """The collection of a Kueue resource across namespaces."""
    return f"/apis/{KUEUE_GROUP}/{version}/{plural}"


@dataclass(frozen=True, slots=True)
class ParsedObject:
    """One Kueue object as parse_object() read it: the model object (None: malformed, skipped) and the
    problems met (each counted, each message once)."""

    item: Any
    problems: tuple[str, ...] = ()
    count: int = 0


def parse_object(plural: str, obj: Any) -> ParsedObject:
    """A raw object of a Kueue collection (KUEUE_RESOURCES) parsed: a malformed one never breaks the rest."""
    problems = _Problems()
    item = _guarded(_PARSERS[plural], obj, problems, plural)
    return ParsedObject(item, tuple(problems.messages), problems.count)


def state_from_raw(
    raw: Mapping[str, list[JsonObject]], *, version: str, list_restarts: int = 0
) -> KueueState:
    """The KueueState of raw objects by plural (resourceflavors, cohorts, clusterqueues, localqueues,
    workloads; a missing plural is none)."""
    parsed = {plural: [parse_object(plural, obj) for obj in raw.get(plural) or []] for plural in _PARSERS}
    return state_from_parsed(parsed, version=version, list_restarts=list_restarts)


def state_from_parsed(
    parsed: Mapping[str, Sequence[ParsedObject]], *, version: str, list_restarts: int = 0
) -> KueueState:
    """The KueueState of parsed objects by plural (a missing plural is none): their problems counted, each
    message warned of once."""
    problems = _Problems()

    def items(plural: str) -> tuple[Any, ...]:
        out = []
        for p in parsed.get(plural) or ():
            if p.count:
                problems.merge(_Problems(p.count, list(p.problems)))
            if p.item is not None:
                out.append(p.item)
        return tuple(out)

    return KueueState(
        installed=True,
        version=version,
        flavors=items("resourceflavors"),
        cohorts=items("cohorts"),
        cluster_queues=items("clusterqueues"),
        local_queues=items("localqueues"),
        workloads=items("workloads"),
        warnings=tuple(problems.messages),
        skipped=problems.count,
        list_restarts=list_restarts,
    )


def merge_kueue_states(states: Mapping[str, KueueState], unread: Mapping[str, str]) -> KueueState:
    """Several clusters' Kueue objects as one fleet's, each cluster's under names qualified by it
    (in_cluster()); installed when any cluster's Kueue is (one without Kueue adds nothing). unread: the
    clusters whose Kueue could not be read (cluster -> why), each named in a warning."""
    read = {c: in_cluster(s, c) for c, s in states.items() if s.installed}
    return KueueState(
        installed=bool(read),
        version=", ".join(sorted({s.version for s in read.values()})),
        flavors=tuple(f for s in read.values() for f in s.flavors),
        cohorts=tuple(c for s in read.values() for c in s.cohorts),
        cluster_queues=tuple(q for s in read.values() for q in s.cluster_queues),
        local_queues=tuple(q for s in read.values() for q in s.local_queues),
        workloads=tuple(w for s in read.values() for w in s.workloads),
        warnings=(
            *(w for s in read.values() for w in s.warnings),
            *(f"cluster {c}: Kueue not read ({why}); its queues are left out" for c, why in unread.items()),
        ),
        skipped=sum(s.skipped for s in read.values()),
        list_restarts=sum(s.list_restarts for s in read.values()),
    )


Flavored = TypeVar("Flavored", FlavorQuota, FlavorUsage)


def in_cluster(state: KueueState, cluster: str) -> KueueState:
    """A cluster's Kueue objects under names qualified by it ("eu-1/research", as its nodes and pods are
    named in a fleet of several clusters): its ResourceFlavors, Cohorts, ClusterQueues, LocalQueues,
    Workloads and the objects they name, so none is taken for another cluster's of the same name.
    Namespaces stay as they are (a namespace spans the clusters); its warnings name the cluster."""

    def q(name: str) -> str:
        return qualified(cluster, name)

    def flavored(items: tuple[Flavored, ...]) -> tuple[Flavored, ...]:
        return tuple(replace(i, flavor=q(i.flavor)) for i in items)

    return replace(
        state,
        flavors=tuple(replace(f, name=q(f.name)) for f in state.flavors),
        cohorts=tuple(
            replace(c, name=q(c.name), parent=q(c.parent), quotas=flavored(c.quotas)) for c in state.cohorts
        ),
        cluster_queues=tuple(
            replace(
                cq,
                name=q(cq.name),
                cohort=q(cq.cohort),
                quotas=flavored(cq.quotas),
                usage=flavored(cq.usage),
                reserved=flavored(cq.reserved),
            )
            for cq in state.cluster_queues
        ),
        local_queues=tuple(
            replace(lq, name=q(lq.name), cluster_queue=q(lq.cluster_queue)) for lq in state.local_queues
        ),
        workloads=tuple(
            replace(
                w,
                name=q(w.name),
                queue_name=q(w.queue_name),
                cluster_queue=q(w.cluster_queue),
                flavors={r: q(f) for r, f in w.flavors.items()},
                owner_name=q(w.owner_name),  # the pod a Pod-owned Workload gates is named so in the fleet
            )
            for w in state.workloads
        ),
        warnings=tuple(f"cluster {cluster}: {w}" for w in state.warnings),
    )


def _guarded(
    parse: Callable[[JsonObject, _Problems], T | None], obj: Any, problems: _Problems, plural: str
) -> T | None:
    """parse(obj), or None with the problem counted when the object is not what Kueue writes (a field of
    the wrong type, a bad timestamp): one bad object never breaks the rest."""
    kind = plural.removesuffix("s")
    try:
        if not isinstance(obj, dict):
            raise ValueError("not an object")
        return parse(obj, problems)
    except (DataError, ValueError, TypeError, AttributeError, KeyError) as e:
        meta = obj.get("metadata") if isinstance(obj, dict) else None
        name = _name(meta if isinstance(meta, dict) else {})
        ours = isinstance(e, DataError | ValueError)
        reason = _one_line(str(e))[:120] if ours else "a field of the wrong type"
        problems.add(f"kueue {kind} {name or '(unnamed)'}: malformed ({reason}), skipped")
        return None


def _name(meta: Mapping[str, Any]) -> str:
    namespace, name = meta.get("namespace"), meta.get("name")
    return f"{namespace}/{name}" if namespace and name else str(name or "")


def _named(obj: JsonObject, *, namespaced: bool) -> tuple[JsonObject, str, str]:
    """(metadata, namespace, name); a ValueError when a name (or a namespaced object's namespace) is
    missing."""
    meta = obj.get("metadata") or {}
    name, namespace = meta.get("name"), meta.get("namespace")
    if not isinstance(name, str) or not name:
        raise ValueError("no metadata.name")
    if namespaced and (not isinstance(namespace, str) or not namespace):
        raise ValueError("no metadata.namespace")
    return meta, str(namespace or ""), name


def _count(value: Any) -> int:
    """A status counter (int32): absent is 0; anything but a whole number is malformed."""
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int | float) or value != int(value) or value < 0:
        raise ValueError(f"bad count {value!r}")
    return int(value)


def _limit(raw: Any) -> float:
    """A borrowing or lending limit: NaN (unlimited) when it is not set."""
    return math.nan if raw is None else _nonnegative(raw)


def _nonnegative(raw: Any) -> float:
    value = parse_quantity(raw)
    if not math.isfinite(value) or value < 0:
        raise DataError(f"malformed quantity {raw!r}")
    return value


def _quotas(spec: JsonObject, where: str, problems: _Problems) -> tuple[FlavorQuota, ...]:
    """GPU quotas of spec.resourceGroups[].flavors[].resources[]; a malformed one is skipped, counted."""
    out = []
    for group in spec.get("resourceGroups") or []:
        for flavor in group.get("flavors") or []:
            for res in flavor.get("resources") or []:
                resource = str(res.get("name") or "")
                if not is_gpu_resource(resource):
                    continue
                try:
                    out.append(
                        FlavorQuota(
                            flavor=str(flavor["name"]),
                            resource=resource,
                            nominal=_nonnegative(res.get("nominalQuota", 0)),
                            borrowing_limit=_limit(res.get("borrowingLimit")),
                            lending_limit=_limit(res.get("lendingLimit")),
                        )
                    )
                except DataError as e:
                    problems.add(f"{where}: quota of {resource} in flavor {flavor.get('name')}: {e}, skipped")
    return tuple(out)


def _usage(entries: Any, where: str, problems: _Problems) -> tuple[FlavorUsage, ...]:
    """The GPU resources of status.flavorsUsage or flavorsReservation:
    [{name, resources: [{name, total, borrowed}]}]."""
    out = []
    for flavor in entries or []:
        for res in flavor.get("resources") or []:
            resource = str(res.get("name") or "")
            if not is_gpu_resource(resource):
                continue
            try:
                out.append(
                    FlavorUsage(
                        flavor=str(flavor["name"]),
                        resource=resource,
                        total=_nonnegative(res.get("total", 0)),
                        borrowed=_nonnegative(res.get("borrowed", 0)),
                    )
                )
            except DataError as e:
                problems.add(f"{where}: usage of {resource} in flavor {flavor.get('name')}: {e}, skipped")
    return tuple(out)


def parse_resource_flavor(obj: JsonObject, problems: _Problems) -> ResourceFlavor:
    _meta, _namespace, name = _named(obj, namespaced=False)
    spec = obj.get("spec") or {}
    return ResourceFlavor(
        name=name,
        node_labels={str(k): str(v) for k, v in (spec.get("nodeLabels") or {}).items()},
        node_taints=parse_taints(spec.get("nodeTaints")),
        tolerations=parse_tolerations(spec.get("tolerations")),
    )


def parse_cohort(obj: JsonObject, problems: _Problems) -> Cohort:
    _meta, _namespace, name = _named(obj, namespaced=False)
    spec = obj.get("spec") or {}
    return Cohort(
        name=name,
        parent=str(spec.get("parentName") or ""),
        quotas=_quotas(spec, f"kueue cohort {name}", problems),
    )


def parse_cluster_queue(obj: JsonObject, problems: _Problems) -> ClusterQueue:
    _meta, _namespace, name = _named(obj, namespaced=False)
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    where = f"kueue clusterqueue {name}"
    return ClusterQueue(
        name=name,
        cohort=str(spec.get("cohortName") or spec.get("cohort") or ""),  # v1beta2 / v1beta1
        quotas=_quotas(spec, where, problems),
        usage=_usage(status.get("flavorsUsage"), where, problems),
        reserved=_usage(status.get("flavorsReservation"), where, problems),
        pending_workloads=_count(status.get("pendingWorkloads")),
        reserving_workloads=_count(status.get("reservingWorkloads")),
        admitted_workloads=_count(status.get("admittedWorkloads")),
    )


def parse_local_queue(obj: JsonObject, problems: _Problems) -> LocalQueue:
    _meta, namespace, name = _named(obj, namespaced=True)
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    return LocalQueue(
        namespace=namespace,
        name=name,
        cluster_queue=str(spec.get("clusterQueue") or ""),
        pending_workloads=_count(status.get("pendingWorkloads")),
        reserving_workloads=_count(status.get("reservingWorkloads")),
        admitted_workloads=_count(status.get("admittedWorkloads")),
    )


def _pod_gpus(template: JsonObject, where: str, problems: _Problems) -> dict[str, float]:
    """A pod template's GPU request as the scheduler counts it: the containers' summed, or the largest
    init container's if more (limits == requests for extended resources; limits alone are allowed)."""
    spec = template.get("spec") or {}
    total: dict[str, float] = {}
    for key, combine in (("containers", _add), ("initContainers", max)):
        for container in spec.get(key) or []:
            resources = container.get("resources") or {}
            merged = {**(resources.get("requests") or {}), **(resources.get("limits") or {})}
            for res, qty in _gpu_resources(merged, where, problems).items():
                total[res] = combine(total.get(res, 0.0), qty)
    return total


def _add(a: float, b: float) -> float:
    return a + b


def parse_workload(obj: JsonObject, problems: _Problems) -> Workload:
    meta, namespace, name = _named(obj, namespaced=True)
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    where = f"kueue workload {namespace}/{name}"
    requests: dict[str, float] = {}
    for pod_set in spec.get("podSets") or []:
        count = _count(pod_set.get("count", 1))
        for res, qty in _pod_gpus(pod_set.get("template") or {}, where, problems).items():
            requests[res] = requests.get(res, 0.0) + count * qty
    admission = status.get("admission") or {}
    flavors: dict[str, str] = {}
    for assignment in admission.get("podSetAssignments") or []:
        for res, flavor in (assignment.get("flavors") or {}).items():
            if is_gpu_resource(res):
                flavors.setdefault(str(res), str(flavor))
    conditions = {c["type"]: c for c in status.get("conditions") or []}

    def since(kind: str) -> datetime | None:
        """When the condition became True, if it is True now."""
        cond = conditions.get(kind) or {}
        return _time(cond.get("lastTransitionTime")) if cond.get("status") == "True" else None

    evicted = conditions.get("Evicted") or {}
    reserved = conditions.get("QuotaReserved") or {}
    # schedulingStats (Kueue 0.12+) counts evictions by reason; before it, a Preempted condition (kept,
    # False, once the workload is admitted again) or an Evicted one says it was preempted at least once.
    stats = (status.get("schedulingStats") or {}).get("evictions") or []
    counted = sum(_count(e.get("count")) for e in stats if e.get("reason") == _PREEMPTED)
    seen = "Preempted" in conditions or evicted.get("reason") == _PREEMPTED
    owners = meta.get("ownerReferences") or []
    owner = next((o for o in owners if o.get("controller")), owners[0] if owners else {})
    return Workload(
        namespace=namespace,
        name=name,
        queue_name=str(spec.get("queueName") or ""),
        created_at=_required_time(meta.get("creationTimestamp")),
        gpu_requests=requests,
        cluster_queue=str(admission.get("clusterQueue") or ""),
        flavors=flavors,
        quota_reserved_at=since("QuotaReserved"),
        admitted_at=since("Admitted"),
        finished_at=since("Finished"),
        evicted_at=since("Evicted"),
        evicted_reason=str(evicted.get("reason") or "") if evicted.get("status") == "True" else "",
        preemptions=max(counted, 1 if seen else 0),
        pending_message=_one_line(str(reserved.get("message") or ""))
        if reserved.get("status") == "False"
        else "",
        owner_kind=str(owner.get("kind") or ""),
        owner_name=str(owner.get("name") or ""),
    )


def _required_time(text: Any) -> datetime:
    when = _time(text)
    if when is None:
        raise ValueError("no metadata.creationTimestamp")
    return when


# The parser of each collection gpuwatch reads (KUEUE_RESOURCES).
_PARSERS: Mapping[str, Callable[[JsonObject, _Problems], Any]] = {
    "resourceflavors": parse_resource_flavor,
    "cohorts": parse_cohort,
    "clusterqueues": parse_cluster_queue,
    "localqueues": parse_local_queue,
    "workloads": parse_workload,
}
