"""The simulated fleet rendered as Kubernetes core/v1 JSON objects, as a real API server returns them."""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from gpuwatch.core.model import (
    Namespace,
    Node,
    NodeRequirement,
    Placement,
    Pod,
    ResourceQuota,
    Taint,
    Toleration,
    product_label,
    utc,
)
from gpuwatch.sim.fleet import (
    DRIVER_VERSION,
    EXPORTER_NAMESPACE,
    ExporterTarget,
    SimulatedFleet,
    _uid,
    stable_hex,
)

JsonObject = dict[str, Any]

UNSCHEDULABLE_TAINT = "node.kubernetes.io/unschedulable"
NOT_READY_TAINT = "node.kubernetes.io/not-ready"
KUBELET_VERSION = "v1.31.4"
EXPORTER_IMAGE = "nvcr.io/nvidia/k8s/dcgm-exporter:3.3.5-3.4.0-ubuntu22.04"
_IMAGES: Mapping[str, str] = {
    "training": "nvcr.io/nvidia/pytorch:24.05-py3",
    "stuck": "nvcr.io/nvidia/pytorch:24.05-py3",
    "inference": "nvcr.io/nvidia/tritonserver:24.05-py3",
    "notebook": "quay.io/jupyter/pytorch-notebook:cuda12-2024-06-03",
    "batch": "nvcr.io/nvidia/cuda:12.4.1-runtime-ubuntu22.04",
    "nvidia-dcgm-exporter": EXPORTER_IMAGE,
}
_DEFAULT_IMAGE = "nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04"
# Pods without GPUs a real cluster runs beside the GPU ones: per-node agents, then services.
_CPU_WORKLOADS = (
    ("kube-system", "kube-proxy"),
    ("kube-system", "calico-node"),
    ("monitoring", "node-exporter"),
    ("logging", "fluent-bit"),
    ("kube-system", "csi-node"),
    ("web", "api-gateway"),
    ("web", "frontend"),
    ("data", "etl-worker"),
)


def rfc3339(dt: datetime) -> str:
    """A timestamp as the API server writes it: UTC, whole seconds, `Z` suffix."""
    return utc(dt).strftime("%Y-%m-%dT%H:%M:%SZ")


def quantity(value: float) -> str:
    """A resource quantity in canonical form: "8", "0", "500m" (extended resources are integers)."""
    if float(value).is_integer():
        return str(int(value))
    milli = round(value * 1000)
    return f"{milli}m"


def resource_version(*parts: object) -> str:
    """A stable per-object resourceVersion, always below every list resourceVersion the server issues."""
    return str(1000 + int(stable_hex("rv", *parts, n=8), 16) % 90_000)


def uid(*parts: object) -> str:
    h = stable_hex("uid", *parts, n=32)
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


@dataclass(frozen=True, slots=True)
class _Lookup:
    """The fleet's nodes (position, node) and exporter targets by name: one dict look per pod rendered,
    not a walk over every node (the API server renders tens of thousands of pods)."""

    nodes: tuple[Node, ...]
    node_at: dict[str, tuple[int, Node]]
    target_of: dict[str, ExporterTarget]


_LAST_LOOKUP: list[_Lookup] = []


def _lookup(fleet: SimulatedFleet) -> _Lookup:
    last = _LAST_LOOKUP[0] if _LAST_LOOKUP else None
    if last is not None and last.nodes is fleet.nodes:
        return last
    made = _Lookup(
        fleet.nodes,
        {n.name: (i, n) for i, n in enumerate(fleet.nodes)},
        {t.pod: t for t in fleet.targets},
    )
    _LAST_LOOKUP[:] = [made]
    return made


def node_internal_ip(fleet: SimulatedFleet, node: str) -> str:
    i = _lookup(fleet).node_at.get(node, (0, None))[0]
    return f"172.20.{i // 250}.{i % 250 + 10}"


def _pod_ip(fleet: SimulatedFleet, pod: Pod) -> str:
    lookup = _lookup(fleet)
    target = lookup.target_of.get(pod.name) if pod.namespace == EXPORTER_NAMESPACE else None
    if target is not None:
        return target.ip
    i = lookup.node_at.get(pod.node or "", (0, None))[0]
    host = int(stable_hex(pod.uid, n=6), 16) % 250 + 2
    return f"10.244.{i}.{host}"


def _meta(
    *,
    name: str,
    created: datetime,
    namespace: str | None = None,
    object_uid: str | None = None,
    labels: Mapping[str, str] | None = None,
) -> JsonObject:
    meta: JsonObject = {"name": name}
    if namespace is not None:
        meta["namespace"] = namespace
    meta["uid"] = object_uid or uid(namespace or "", name)
    meta["resourceVersion"] = resource_version(namespace or "", name)
    meta["creationTimestamp"] = rfc3339(created)
    if labels:
        meta["labels"] = dict(labels)
    return meta


# ---------------------------------------------------------------------------------------------
# Pods


def pod_object(fleet: SimulatedFleet, pod: Pod) -> JsonObject:
    """The Pod as `GET /api/v1/namespaces/{ns}/pods/{name}` returns it at `fleet.now`."""
    exporter = pod.namespace == EXPORTER_NAMESPACE and pod.name in _lookup(fleet).target_of
    meta = _meta(
        name=pod.name, namespace=pod.namespace, created=pod.created_at, object_uid=pod.uid, labels=pod.labels
    )
    if exporter:
        meta["generateName"] = "nvidia-dcgm-exporter-"
        meta["ownerReferences"] = [
            {
                "apiVersion": "apps/v1",
                "kind": "DaemonSet",
                "name": "nvidia-dcgm-exporter",
                "uid": uid(EXPORTER_NAMESPACE, "daemonset", "nvidia-dcgm-exporter"),
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": _pod_spec(pod, exporter=exporter, node_taints=_node_taints(fleet, pod.node)),
        "status": _pod_status(fleet, pod, exporter=exporter),
    }


def pods_without_gpus(fleet: SimulatedFleet, count: int) -> list[Pod]:
    """`count` running pods that request no GPU, spread over the fleet's nodes: what the API server lists
    beside the GPU pods of a large cluster (node agents, services), which gpuwatch must pass over."""
    pods = []
    nodes = [n.name for n in fleet.nodes]
    for k in range(count):
        namespace, app = _CPU_WORKLOADS[k % len(_CPU_WORKLOADS)]
        name = f"{app}-{stable_hex(fleet.seed, 'cpu', k, n=5)}"
        pods.append(
            Pod(
                namespace=namespace,
                name=name,
                uid=_uid(fleet.seed, namespace, name),
                phase="Running",
                created_at=fleet.window.start,
                node=nodes[(k // len(_CPU_WORKLOADS)) % len(nodes)] if nodes else None,
                started_at=fleet.window.start,
                labels={"app": app},
                container=app,
            )
        )
    return pods


def _pod_spec(pod: Pod, *, exporter: bool, node_taints: tuple[Taint, ...]) -> JsonObject:
    gpus = sum(pod.gpu_requests.values())
    cpu = quantity(max(1.0, 8.0 * gpus)) if not exporter else "100m"
    memory = f"{int(max(4, 32 * gpus))}Gi" if not exporter else "128Mi"
    requests = {"cpu": cpu, "memory": memory} | {r: quantity(q) for r, q in pod.gpu_requests.items()}
    resources: JsonObject = {"requests": requests}
    if not exporter:
        # Extended resources must have limits == requests; cpu/memory too, so the pod is Guaranteed.
        resources["limits"] = dict(requests)
    container: JsonObject = {
        "name": pod.container,
        "image": _IMAGES.get(pod.container, _DEFAULT_IMAGE),
        "imagePullPolicy": "IfNotPresent",
        "resources": resources,
        "terminationMessagePath": "/dev/termination-log",
        "terminationMessagePolicy": "File",
    }
    if exporter:
        container["ports"] = [{"containerPort": 9400, "name": "metrics", "protocol": "TCP"}]
    tolerations: list[JsonObject] = [
        {"key": NOT_READY_TAINT, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
        {
            "key": "node.kubernetes.io/unreachable",
            "operator": "Exists",
            "effect": "NoExecute",
            "tolerationSeconds": 300,
        },
    ]
    if pod.placement is not None:
        tolerations = [_toleration(t) for t in pod.placement.tolerations] + tolerations
    elif pod.gpu_requests or exporter:
        # The toleration the ExtendedResourceToleration admission plugin adds, and one for each other
        # taint of the node the pod runs on (it was placed there, so it tolerated them).
        extra = [
            _toleration(Toleration(key=t.key, value=t.value, effect=t.effect))
            for t in node_taints
            if t.key != "nvidia.com/gpu"
        ]
        tolerations = [
            {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
            *extra,
            *tolerations,
        ]
    batch = pod.labels.get("gpuwatch.io/archetype") == "batch" or pod.phase in ("Succeeded", "Failed")
    spec: JsonObject = {
        "containers": [container],
        "dnsPolicy": "ClusterFirst",
        "enableServiceLinks": True,
        "preemptionPolicy": "PreemptLowerPriority",
        "priority": 0,
        "restartPolicy": "Never" if batch else "Always",
        "schedulerName": "default-scheduler",
        "securityContext": {},
        "serviceAccount": "nvidia-dcgm-exporter" if exporter else "default",
        "serviceAccountName": "nvidia-dcgm-exporter" if exporter else "default",
        "terminationGracePeriodSeconds": 30,
        "tolerations": tolerations,
    }
    if pod.placement is not None:
        spec |= _placement_spec(pod.placement)
    elif pod.node_selector_product:
        spec["nodeSelector"] = {product_label(pod.node_selector_product): pod.node_selector_product}
    if pod.node:
        spec["nodeName"] = pod.node
    return spec


def _toleration(t: Toleration) -> JsonObject:
    out: JsonObject = {"key": t.key, "operator": t.operator} if t.key else {"operator": t.operator}
    if t.operator != "Exists":
        out["value"] = t.value
    if t.effect:
        out["effect"] = t.effect
    return out


def _requirement(r: NodeRequirement) -> JsonObject:
    out: JsonObject = {"key": r.key, "operator": r.operator}
    if r.values:
        out["values"] = list(r.values)
    return out


def _placement_spec(placement: Placement) -> JsonObject:
    """A pending pod's nodeSelector, required node affinity and scheduling gates as spec fields."""
    spec: JsonObject = {}
    if placement.node_selector:
        spec["nodeSelector"] = dict(placement.node_selector)
    if placement.node_affinity:
        terms = []
        for term in placement.node_affinity:
            rendered: JsonObject = {}
            expressions = [_requirement(r) for r in term if not r.on_field]
            fields = [_requirement(r) for r in term if r.on_field]
            if expressions:
                rendered["matchExpressions"] = expressions
            if fields:
                rendered["matchFields"] = fields
            terms.append(rendered)
        spec["affinity"] = {
            "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}
        }
    if placement.scheduling_gates:
        spec["schedulingGates"] = [{"name": g} for g in placement.scheduling_gates]
    return spec


def _node_taints(fleet: SimulatedFleet, node: str | None) -> tuple[Taint, ...]:
    at = _lookup(fleet).node_at.get(node or "")
    return () if at is None else at[1].taints


def _condition(kind: str, status: bool, when: datetime, reason: str = "", message: str = "") -> JsonObject:
    cond: JsonObject = {
        "type": kind,
        "status": "True" if status else "False",
        "lastProbeTime": None,
        "lastTransitionTime": rfc3339(when),
    }
    if reason:
        cond["reason"] = reason
    if message:
        cond["message"] = message
    return cond


def _pod_status(fleet: SimulatedFleet, pod: Pod, *, exporter: bool) -> JsonObject:
    qos = "Burstable" if exporter else "Guaranteed"
    if pod.phase == "Pending" or pod.node is None:
        gated = pod.placement is not None and bool(pod.placement.scheduling_gates)
        message = scheduler_message(fleet.nodes, pod)
        reason = "SchedulingGated" if gated else "Unschedulable"
        return {
            "phase": pod.phase,
            "conditions": [_condition("PodScheduled", False, pod.created_at, reason, message)],
            "qosClass": qos,
        }
    started = pod.started_at or pod.created_at
    at = _lookup(fleet).node_at.get(pod.node)
    node_ready = True if at is None else at[1].ready
    image = _IMAGES.get(pod.container, _DEFAULT_IMAGE)
    container: JsonObject = {
        "name": pod.container,
        "image": image,
        "imageID": f"{image}@sha256:{stable_hex('image', image, n=64)}",
        "containerID": f"containerd://{stable_hex('container', pod.uid, n=64)}",
        "lastState": {},
        "restartCount": 0,
    }
    if pod.phase in ("Succeeded", "Failed"):
        finished = pod.finished_at or fleet.now
        ok = pod.phase == "Succeeded"
        container |= {
            "ready": False,
            "started": False,
            "state": {
                "terminated": {
                    "exitCode": 0 if ok else 1,
                    "reason": "Completed" if ok else "Error",
                    "startedAt": rfc3339(started),
                    "finishedAt": rfc3339(finished),
                    "containerID": container["containerID"],
                }
            },
        }
        ready = False
        ready_since = finished
        ready_reason = "PodCompleted" if ok else "PodFailed"
    else:
        ready = node_ready
        ready_since = started if node_ready else fleet.window.start
        ready_reason = "" if node_ready else "ContainersNotReady"
        container |= {"ready": ready, "started": True, "state": {"running": {"startedAt": rfc3339(started)}}}
    pod_ip = _pod_ip(fleet, pod)
    return {
        "phase": pod.phase,
        "conditions": [
            _condition("PodReadyToStartContainers", pod.phase == "Running", started),
            _condition("Initialized", True, started),
            _condition("Ready", ready, ready_since, ready_reason),
            _condition("ContainersReady", ready, ready_since, ready_reason),
            _condition("PodScheduled", True, started),
        ],
        "hostIP": node_internal_ip(fleet, pod.node),
        "hostIPs": [{"ip": node_internal_ip(fleet, pod.node)}],
        "podIP": pod_ip,
        "podIPs": [{"ip": pod_ip}],
        "startTime": rfc3339(started),
        "containerStatuses": [container],
        "qosClass": qos,
    }


GATED_MESSAGE = "Scheduling is blocked due to non-empty scheduling gates"


def scheduler_message(nodes: Sequence[Node], pod: Pod) -> str:
    """The scheduler's words on a pod it cannot place: its FailedScheduling summary of why each node was
    rejected, or the scheduling-gate message while a gate holds the pod back."""
    if pod.placement is not None and pod.placement.scheduler_message:
        return pod.placement.scheduler_message
    placement = pod.placement or Placement(
        node_selector={product_label(p): p} if (p := pod.node_selector_product) else {}
    )
    if placement.scheduling_gates:
        return GATED_MESSAGE
    reasons: dict[str, int] = {}
    wanted = ", ".join(sorted(pod.gpu_requests)) or "cpu"
    for node in nodes:
        untolerated = placement.untolerated(node)
        missing = [r for r in sorted(pod.gpu_requests) if node.allocatable.get(r, 0.0) <= 0]
        if node.unschedulable:
            reason = "node(s) were unschedulable"
        elif not node.ready:
            reason = "node(s) had untolerated taint {node.kubernetes.io/not-ready: }"
        elif not placement.matches(node):
            reason = "node(s) didn't match Pod's node affinity/selector"
        elif untolerated:
            reason = f"node(s) had untolerated taint {{{untolerated[0].key}: {untolerated[0].value}}}"
        else:
            reason = f"Insufficient {', '.join(missing) or wanted}"
        reasons[reason] = reasons.get(reason, 0) + 1
    total = len(nodes)
    parts = ", ".join(f"{n} {r}" for r, n in sorted(reasons.items(), key=lambda kv: (-kv[1], kv[0])))
    return (
        f"0/{total} nodes are available: {parts}. preemption: 0/{total} nodes are available: "
        f"{total} No preemption victims found for incoming pod."
    )


# ---------------------------------------------------------------------------------------------
# Nodes


def node_object(fleet: SimulatedFleet, node: Node) -> JsonObject:
    """The Node as `GET /api/v1/nodes/{name}`: GFD labels, GPU capacity/allocatable, conditions."""
    created = fleet.window.start - timedelta(days=180)
    labels = {
        "beta.kubernetes.io/arch": "amd64",
        "beta.kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
    }
    labels |= dict(node.labels)
    labels.setdefault("kubernetes.io/hostname", node.name)
    labels.setdefault(product_label(node.product), node.product)
    cpus = max(8, 16 * node.gpu_count)
    memory_kib = max(64, 128 * node.gpu_count) * 1024 * 1024
    capacity = {
        "cpu": str(cpus),
        "ephemeral-storage": "1968874900Ki",
        "hugepages-1Gi": "0",
        "hugepages-2Mi": "0",
        "memory": f"{memory_kib}Ki",
        "pods": "110",
    }
    allocatable = capacity | {
        "cpu": f"{cpus * 1000 - 100}m",
        "ephemeral-storage": "1814505034176",
        "memory": f"{memory_kib - 1024 * 1024}Ki",
    }
    capacity |= {r: quantity(q) for r, q in node.capacity.items()}
    allocatable |= {r: quantity(q) for r, q in node.allocatable.items()}
    node_index = next((k for k, n in enumerate(fleet.nodes) if n.name == node.name), 0)
    spec: JsonObject = {
        "podCIDR": f"10.244.{node_index}.0/24",
        "podCIDRs": [f"10.244.{node_index}.0/24"],
        "providerID": f"gce://gpuwatch-sim/us-central1-a/{node.name}",
    }
    taints: list[JsonObject] = [
        {"key": t.key, **({"value": t.value} if t.value else {}), "effect": t.effect} for t in node.taints
    ]
    if node.unschedulable:
        spec["unschedulable"] = True
        taints.append(
            {"key": UNSCHEDULABLE_TAINT, "effect": "NoSchedule", "timeAdded": rfc3339(fleet.window.start)}
        )
    if not node.ready:
        for effect in ("NoSchedule", "NoExecute"):
            taints.append(
                {"key": NOT_READY_TAINT, "effect": effect, "timeAdded": rfc3339(fleet.window.start)}
            )
    if taints:
        spec["taints"] = taints
    now = fleet.now
    healthy = created + timedelta(minutes=2)
    pressure = [
        ("MemoryPressure", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
        ("DiskPressure", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
        ("PIDPressure", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
    ]
    conditions = [
        {
            "type": kind,
            "status": "False",
            "reason": reason,
            "message": message,
            "lastHeartbeatTime": rfc3339(now),
            "lastTransitionTime": rfc3339(healthy),
        }
        for kind, reason, message in pressure
    ]
    if node.ready:
        ready = {"status": "True", "reason": "KubeletReady", "message": "kubelet is posting ready status"}
        ready_since = healthy
    else:
        ready = {
            "status": "False",
            "reason": "KubeletNotReady",
            "message": "PLEG is not healthy: pleg was last seen active 3m0s ago; threshold is 3m0s",
        }
        ready_since = fleet.window.start
    conditions.append(
        {"type": "Ready"}
        | ready
        | {"lastHeartbeatTime": rfc3339(now), "lastTransitionTime": rfc3339(ready_since)}
    )
    ip = node_internal_ip(fleet, node.name)
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": _meta(name=node.name, created=created, labels=labels)
        | {
            "annotations": {
                "node.alpha.kubernetes.io/ttl": "0",
                "nvidia.com/gpu-driver-upgrade-enabled": "true",
            }
        },
        "spec": spec,
        "status": {
            "addresses": [{"type": "InternalIP", "address": ip}, {"type": "Hostname", "address": node.name}],
            "allocatable": allocatable,
            "capacity": capacity,
            "conditions": conditions,
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {
                "architecture": "amd64",
                "bootID": uid(node.name, "boot"),
                "containerRuntimeVersion": "containerd://1.7.22",
                "kernelVersion": "5.15.0-1057-gcp",
                "kubeProxyVersion": KUBELET_VERSION,
                "kubeletVersion": KUBELET_VERSION,
                "machineID": stable_hex("machine", node.name, n=32),
                "operatingSystem": "linux",
                "osImage": f"Ubuntu 22.04.4 LTS (NVIDIA driver {DRIVER_VERSION})",
                "systemUUID": uid(node.name, "system"),
            },
        },
    }


# ---------------------------------------------------------------------------------------------
# Namespaces and quotas


def namespace_object(fleet: SimulatedFleet, namespace: Namespace) -> JsonObject:
    """The Namespace as `GET /api/v1/namespaces/{name}` returns it (labels carry the team)."""
    labels = {"kubernetes.io/metadata.name": namespace.name} | dict(namespace.labels)
    created = fleet.window.start - timedelta(days=120)
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": _meta(name=namespace.name, created=created, labels=labels),
        "spec": {"finalizers": ["kubernetes"]},
        "status": {"phase": "Active"},
    }


def quota_object(fleet: SimulatedFleet, quota: ResourceQuota) -> JsonObject:
    """The ResourceQuota: spec.hard, status.hard and status.used as quantity strings."""
    hard = {r: quantity(q) for r, q in quota.hard.items()}
    used = {r: quantity(quota.used.get(r, 0.0)) for r in quota.hard} | {
        r: quantity(q) for r, q in quota.used.items()
    }
    created = fleet.window.start - timedelta(days=90)
    return {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": _meta(name=quota.name, namespace=quota.namespace, created=created),
        "spec": {"hard": hard},
        "status": {"hard": dict(hard), "used": used},
    }


def status_object(code: int, reason: str, message: str, *, details: JsonObject | None = None) -> JsonObject:
    """A `kind: Status` failure body, the shape every API server error has."""
    body: JsonObject = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
    }
    if details is not None:
        body["details"] = details
    body["code"] = code
    return body
