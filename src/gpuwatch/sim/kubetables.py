"""Lists in the Table form `kubectl get` asks for (meta.k8s.io), with the real server's columns.

kubectl sends `Accept: application/json;as=Table;v=v1;g=meta.k8s.io,...` and prints the cells the server
computed: without them it shows NAME and AGE only. Columns and cells follow the API server's printers
(k8s.io/kubernetes pkg/printers/internalversion) for the four resources the simulated server lists;
priority 1 columns are the `-o wide` ones. Each row carries its object as `includeObject` asks
(PartialObjectMetadata by default), from which kubectl takes the NAMESPACE column for `-A`.
"""

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

JsonObject = dict[str, Any]
NONE = "<none>"
UNKNOWN = "<unknown>"
TABLE_VERSIONS = ("v1", "v1beta1")  # v1beta1: what kubectl before 1.16 asks for; the same shape
INCLUDE_OBJECT = ("None", "Metadata", "Object")


def table_version(accept: str | None) -> str | None:
    """The meta.k8s.io version of the Table the Accept header asks for, or None for the plain object.

    Media ranges are taken in the client's order, as the API server negotiates: the first one it can
    serve wins, so `application/json` before any Table range means the plain object."""
    for media_range in (accept or "").split(","):
        kind, *raw = (p.strip() for p in media_range.split(";"))
        params = dict(p.partition("=")[::2] for p in raw)
        if kind not in ("application/json", "application/*", "*/*"):
            continue
        if "as" not in params:
            return None
        if params["as"] == "Table" and params.get("g") == "meta.k8s.io":
            version = params.get("v", "v1")
            if version in TABLE_VERSIONS:
                return version
    return None


def _column(
    name: str, description: str, *, kind: str = "string", fmt: str = "", priority: int = 0
) -> JsonObject:
    return {"name": name, "type": kind, "format": fmt, "description": description, "priority": priority}


_NAME = _column("Name", "Name must be unique within a namespace.", fmt="name")
_AGE = _column(
    "Age",
    "CreationTimestamp is a timestamp representing the server time when this object was created.",
)


def human_duration(seconds: float) -> str:
    """The API server's age format (apimachinery duration.HumanDuration): 45s, 5m10s, 3h20m, 5d2h, 63d."""
    s = int(seconds)
    if s < -1:
        return "<invalid>"
    if s < 0:
        return "0s"
    if s < 120:
        return f"{s}s"
    minutes = s // 60
    if minutes < 10:
        return f"{minutes}m{s % 60}s" if s % 60 else f"{minutes}m"
    if minutes < 180:
        return f"{minutes}m"
    hours = s // 3600
    if hours < 8:
        return f"{hours}h{minutes % 60}m" if minutes % 60 else f"{hours}h"
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        return f"{hours // 24}d{hours % 24}h" if hours % 24 else f"{hours // 24}d"
    if hours < 24 * 365 * 2:
        return f"{hours // 24}d"
    if hours < 24 * 365 * 8:
        years, days = hours // 24 // 365, hours // 24 % 365
        return f"{years}y{days}d" if days else f"{years}y"
    return f"{hours // 24 // 365}y"


def _since(timestamp: Any, now: datetime) -> str:
    if not isinstance(timestamp, str) or not timestamp:
        return UNKNOWN
    when = datetime.fromisoformat(timestamp.replace("Z", "+00:00"))
    return human_duration((now - when).total_seconds())


def _age(obj: JsonObject, now: datetime) -> str:
    return _since(obj.get("metadata", {}).get("creationTimestamp"), now)


def _pod_cells(pod: JsonObject, now: datetime) -> list[Any]:
    spec, status = pod.get("spec", {}), pod.get("status", {})
    reason = status.get("reason") or status.get("phase") or ""
    ready = restarts = 0
    last_restart = ""
    running = False
    # The server's pod printer walks the containers backwards, so the first container's state wins.
    for c in reversed(status.get("containerStatuses", [])):
        restarts += int(c.get("restartCount", 0))
        finished = c.get("lastState", {}).get("terminated", {}).get("finishedAt", "")
        last_restart = max(last_restart, finished)
        state = c.get("state", {})
        waiting, terminated = state.get("waiting"), state.get("terminated")
        if waiting is not None and waiting.get("reason"):
            reason = waiting["reason"]
        elif terminated is not None and terminated.get("reason"):
            reason = terminated["reason"]
        elif terminated is not None:
            signal = terminated.get("signal", 0)
            reason = f"Signal:{signal}" if signal else f"ExitCode:{terminated.get('exitCode', 0)}"
        elif c.get("ready") and "running" in state:
            running = True
            ready += 1
    if reason == "Completed" and running:
        pod_ready = any(c.get("type") == "Ready" for c in status.get("conditions", []))
        reason = "Running" if pod_ready else "NotReady"
    if pod.get("metadata", {}).get("deletionTimestamp"):
        reason = "Unknown" if status.get("reason") == "NodeLost" else "Terminating"
    gates = spec.get("readinessGates") or []
    true_conditions = {c.get("type") for c in status.get("conditions", []) if c.get("status") == "True"}
    met = sum(1 for g in gates if g.get("conditionType") in true_conditions)
    pod_ips = status.get("podIPs") or []
    return [
        pod["metadata"]["name"],
        f"{ready}/{len(spec.get('containers', []))}",
        reason,
        f"{restarts} ({_since(last_restart, now)} ago)" if restarts and last_restart else str(restarts),
        _age(pod, now),
        (pod_ips[0].get("ip") if pod_ips else "") or NONE,
        spec.get("nodeName") or NONE,
        status.get("nominatedNodeName") or NONE,
        f"{met}/{len(gates)}" if gates else NONE,
    ]


_POD_COLUMNS = [
    _NAME,
    _column("Ready", "The aggregate readiness state of this pod for accepting traffic."),
    _column("Status", "The aggregate status of the containers in this pod."),
    _column(
        "Restarts",
        "The number of times the containers in this pod have been restarted and when the last container in "
        "this pod has restarted.",
    ),
    _AGE,
    _column(
        "IP",
        "podIP address allocated to the pod. Routable at least within the cluster. Empty if not yet "
        "allocated.",
        priority=1,
    ),
    _column(
        "Node",
        "NodeName indicates in which node this pod is scheduled. If empty, this pod is a candidate for "
        "scheduling by the scheduler defined in schedulerName.",
        priority=1,
    ),
    _column(
        "Nominated Node",
        "nominatedNodeName is set only when this pod preempts other pods on the node, but it cannot be "
        "scheduled right away as preemption victims receive their graceful termination periods.",
        priority=1,
    ),
    _column(
        "Readiness Gates",
        "If specified, all readiness gates will be evaluated for pod readiness.",
        priority=1,
    ),
]


def _node_cells(node: JsonObject, now: datetime) -> list[Any]:
    spec, status = node.get("spec", {}), node.get("status", {})
    ready = next((c for c in status.get("conditions", []) if c.get("type") == "Ready"), None)
    # Any Ready status but "True" (False, Unknown) prints NotReady; no Ready condition at all, Unknown.
    states = ["Unknown" if ready is None else "Ready" if ready.get("status") == "True" else "NotReady"]
    if spec.get("unschedulable"):
        states.append("SchedulingDisabled")
    labels = node.get("metadata", {}).get("labels", {})
    prefix = "node-role.kubernetes.io/"
    roles = {key.removeprefix(prefix) for key in labels if key.startswith(prefix) and key != prefix}
    if labels.get("kubernetes.io/role"):
        roles.add(labels["kubernetes.io/role"])
    addresses = status.get("addresses", [])

    def address(kind: str) -> str:
        return next((a.get("address") for a in addresses if a.get("type") == kind), None) or NONE

    info = status.get("nodeInfo", {})
    return [
        node["metadata"]["name"],
        ",".join(states),
        ",".join(sorted(roles)) or NONE,
        _age(node, now),
        info.get("kubeletVersion", ""),
        address("InternalIP"),
        address("ExternalIP"),
        info.get("osImage") or UNKNOWN,
        info.get("kernelVersion") or UNKNOWN,
        info.get("containerRuntimeVersion") or UNKNOWN,
    ]


_NODE_COLUMNS = [
    _NAME,
    _column("Status", "The status of the node"),
    _column("Roles", "The roles of the node"),
    _AGE,
    _column("Version", "Kubelet Version reported by the node."),
    _column("Internal-IP", "List of internal IPs that are assigned to the node.", priority=1),
    _column("External-IP", "List of external IPs that are assigned to the node.", priority=1),
    _column(
        "OS-Image",
        "OS Image reported by the node from /etc/os-release (e.g. Debian GNU/Linux 7).",
        priority=1,
    ),
    _column("Kernel-Version", "Kernel Version reported by the node from 'uname -r'.", priority=1),
    _column("Container-Runtime", "Container Runtime Version reported by the node.", priority=1),
]


def _namespace_cells(namespace: JsonObject, now: datetime) -> list[Any]:
    return [namespace["metadata"]["name"], namespace.get("status", {}).get("phase", ""), _age(namespace, now)]


_NAMESPACE_COLUMNS = [
    _NAME,
    _column("Status", "The status of the namespace"),
    _AGE,
]


def _quota_cells(quota: JsonObject, now: datetime) -> list[Any]:
    hard, used = quota.get("spec", {}).get("hard", {}), quota.get("status", {}).get("used", {})

    def listed(keys: Sequence[str]) -> str:
        return ", ".join(f"{k}: {used.get(k, '0')}/{hard[k]}" for k in keys)

    # limits.* resources go to LIMIT, every other one (requests.*, pods, count/...) to REQUEST.
    requests = sorted(k for k in hard if not k.startswith("limits."))
    limits = sorted(k for k in hard if k.startswith("limits."))
    return [quota["metadata"]["name"], _age(quota, now), listed(requests), listed(limits)]


_QUOTA_COLUMNS = [
    _NAME,
    _AGE,
    _column("Request", "Request represents a minimum amount of cpu/memory that a container may consume."),
    _column(
        "Limit",
        "Limits control the maximum amount of cpu/memory that a container may use independent of contention "
        "on the node.",
    ),
]

_PRINTERS: dict[str, tuple[list[JsonObject], Callable[[JsonObject, datetime], list[Any]]]] = {
    "pods": (_POD_COLUMNS, _pod_cells),
    "nodes": (_NODE_COLUMNS, _node_cells),
    "namespaces": (_NAMESPACE_COLUMNS, _namespace_cells),
    "resourcequotas": (_QUOTA_COLUMNS, _quota_cells),
}


def table(
    resource: str,
    items: Sequence[JsonObject],
    *,
    metadata: JsonObject,
    now: datetime,
    version: str = "v1",
    include_object: str = "Metadata",
) -> JsonObject:
    """The Table of `items` of `resource` (metadata: the list's resourceVersion, continue, ...), each row
    with its object whole, as PartialObjectMetadata or not at all (`include_object`)."""
    columns, cells = _PRINTERS[resource]
    return table_of(
        columns,
        lambda obj: cells(obj, now),
        items,
        metadata=metadata,
        version=version,
        include_object=include_object,
    )


def table_of(
    columns: Sequence[JsonObject],
    cells: Callable[[JsonObject], list[Any]],
    items: Sequence[JsonObject],
    *,
    metadata: JsonObject,
    version: str,
    include_object: str,
) -> JsonObject:
    """A meta.k8s.io Table of `items`: `columns`, a row of `cells` each, with its object whole, as
    PartialObjectMetadata or not at all (`include_object`), as the API server answers kubectl get."""
    api_version = f"meta.k8s.io/{version}"

    def row(obj: JsonObject) -> JsonObject:
        out: JsonObject = {"cells": cells(obj)}
        if include_object == "Object":
            out["object"] = obj
        elif include_object == "Metadata":
            out["object"] = {
                "kind": "PartialObjectMetadata",
                "apiVersion": api_version,
                "metadata": obj.get("metadata", {}),
            }
        return out

    return {
        "kind": "Table",
        "apiVersion": api_version,
        "metadata": metadata,
        "columnDefinitions": list(columns),
        "rows": [row(obj) for obj in items],
    }
