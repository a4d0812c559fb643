"""The simulated fleet's Kueue setup: the teams' queues and their cohorts, and the fleet's pools as
ResourceFlavors (the ResourceFlavor and Cohort objects)."""

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from gpuwatch.core.model import PRODUCT_LABELS, Node, is_gpu_resource
from gpuwatch.sim.kubeobjects import JsonObject, _meta
from gpuwatch.sim.kueuecrds import KUEUE_GROUP

DEFAULT_FLAVOR = "default-flavor"
# The node labels a GPU flavor's nodes are told apart by (GFD's).
_FLAVOR_LABELS = (*PRODUCT_LABELS, "nvidia.com/mig.strategy", "nvidia.com/gpu.sharing-strategy")


@dataclass(frozen=True, slots=True)
class _Queue:
    """A team's ClusterQueue and the LocalQueue in its namespace."""

    cluster_queue: str
    cohort: str
    namespace: str
    local_queue: str
    flavors: tuple[str, ...]  # GPU flavors (pools), in the order Kueue tries them
    managed: frozenset[str]  # archetypes of the namespace's pods that run through the queue


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
