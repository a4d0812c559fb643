"""Kueue's CRDs as the simulated API server serves them: the group, its versions and resources, the
conversion of the stored v1beta2 objects to v1beta1 (at_version()) and the CRDs' table columns (table())."""

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from gpuwatch.sim.kubeobjects import JsonObject
from gpuwatch.sim.kubetables import human_duration, table_of

KUEUE_GROUP = "kueue.x-k8s.io"
KUEUE_VERSIONS = ("v1beta2", "v1beta1")  # served; the first is the preferred (storage) version


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
