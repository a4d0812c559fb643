"""Where a pending GPU pod may run: its node selector and affinity, taints, MIG profiles, Kueue's gate.

The checks a scheduler makes before it counts free GPUs, in its order (SPEC §3): the nodes matching
the pod's node selector and required node affinity (else `affinity`), of those the nodes whose taints
it tolerates (else `taint`), of those the nodes offering the MIG profiles it requests (else
`mig_profile`); a pod Kueue has not admitted yet waits for quota (`quota`). What is left is the set of
nodes whose free GPUs decide between fragmentation and capacity (analytics.fragmentation).
"""

from collections import Counter
from collections.abc import Hashable, Sequence
from dataclasses import dataclass

import pandas as pd

from gpuwatch.core.model import (
    KUEUE_ADMISSION_GATE,
    KUEUE_QUEUE_LABEL,
    LIFECYCLE_TAINT_PREFIX,
    RESOURCE_MIG_PREFIX,
    Node,
    Placement,
    Pod,
    Taint,
    cluster_of,
    product_label,
)
from gpuwatch.core.schema import PENDING_SCREENS, PLACEABLE_NODES


def policy_taints(node: Node) -> list[Taint]:
    """The node's taints but the lifecycle controller's (cordon and NotReady are node states of their own)."""
    return [t for t in node.taints if not t.key.startswith(LIFECYCLE_TAINT_PREFIX)]


def pool_taints(counts: pd.DataFrame, pool_nodes: "pd.Series[int]") -> "pd.Series[str]":
    """Per pool, its taints and how many of its nodes carry each: "key=value:NoSchedule (8 of 8 nodes)".

    counts: pool, taint, nodes (the nodes carrying it); pool_nodes: the pool's node count, by pool.
    Pools without taints are absent (the caller fills "")."""
    if counts.empty:
        return pd.Series(dtype="str", name="taints")
    ordered = counts.sort_values(["pool", "nodes", "taint"], ascending=[True, False, True])
    total = ordered["pool"].map(pool_nodes).fillna(0).astype("int64")
    text = [
        f"{taint} ({n} of {of} node{'s' if of != 1 else ''})"
        for taint, n, of in zip(ordered["taint"], ordered["nodes"].astype("int64"), total, strict=True)
    ]
    return pd.Series(text, index=ordered["pool"].to_numpy()).groupby(level=0).agg(", ".join).rename("taints")


def placement_of(pod: Pod) -> Placement:
    """The pod's placement as read; a pod known only by its product selector asks for that label."""
    if pod.placement is not None:
        return pod.placement
    if pod.node_selector_product:
        return Placement(node_selector={product_label(pod.node_selector_product): pod.node_selector_product})
    return Placement()


def describe_affinity(placement: Placement) -> str:
    """The node selector and required affinity in one line ("" when the pod asks for no labels)."""
    parts = [f"{k}={v}" for k, v in sorted(placement.node_selector.items())]
    terms = [" and ".join(str(r) for r in term) or "(empty term)" for term in placement.node_affinity]
    if terms:
        parts.append(" or ".join(terms) if len(terms) == 1 else " or ".join(f"[{t}]" for t in terms))
    return "; ".join(parts)


def describe_tolerations(placement: Placement) -> str:
    """Its tolerations but the not-ready/unreachable ones the API server gives every pod."""
    return ", ".join(str(t) for t in placement.tolerations if not t.key.startswith(LIFECYCLE_TAINT_PREFIX))


@dataclass(frozen=True, slots=True)
class _Verdict:
    blocked_by: str  # affinity | taint | mig_profile | "" (decided by free GPUs)
    detail: str  # what the reason names: the selector, the taint, the profile or the missing resource
    nodes: tuple[str, ...]  # the nodes the pod may use (those it is screened down to)


def _screen(placement: Placement, resources: Sequence[str], nodes: Sequence[Node]) -> _Verdict:
    matching = [n for n in nodes if placement.matches(n)]
    if not matching:
        return _Verdict("affinity", describe_affinity(placement), ())
    untolerated_taints = {n.name: placement.untolerated(n) for n in matching}
    tolerated = [n for n in matching if not untolerated_taints[n.name]]
    if not tolerated:
        counts = Counter(str(t) for taints in untolerated_taints.values() for t in taints)
        return _Verdict("taint", counts.most_common(1)[0][0], ())
    profiles = [r for r in resources if r.startswith(RESOURCE_MIG_PREFIX)]
    offering = [n for n in tolerated if all(_offers(n, r) for r in profiles)]
    if not offering:
        return _Verdict("mig_profile", ", ".join(profiles), ())
    others = [r for r in resources if not r.startswith(RESOURCE_MIG_PREFIX)]
    usable = [n for n in offering if all(_offers(n, r) for r in others)]
    missing = ", ".join(r for r in others if not any(_offers(n, r) for n in offering))
    return _Verdict(
        "", f"no node it may use offers {missing}" if missing else "", tuple(n.name for n in usable)
    )


def _offers(node: Node, resource: str) -> bool:
    return node.capacity.get(resource, 0.0) > 0 or node.allocatable.get(resource, 0.0) > 0


def _signature(placement: Placement, resources: Sequence[str]) -> Hashable:
    return (
        tuple(sorted(placement.node_selector.items())),
        placement.node_affinity,
        placement.tolerations,
        tuple(resources),
    )


def screen_pending(pods: Sequence[Pod], nodes: Sequence[Node]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The scheduler's checks before free GPUs, for each pending GPU pod.

    Returns PENDING_SCREENS (namespace, pod, group, blocked_by — affinity, taint, mig_profile, quota
    or "" when free GPUs decide —, detail, node_affinity, tolerations, scheduler_message) and
    PLACEABLE_NODES (group, node): the nodes each group of pods asking the same may use. Pods are
    grouped by what they ask, so the nodes are screened once per group, not once per pod. In a fleet of
    several clusters a pod is screened against its own cluster's nodes alone (model.cluster_of).
    """
    groups: dict[Hashable, tuple[int, _Verdict]] = {}
    own: dict[str, list[Node]] = {}  # each cluster's nodes
    for node in nodes:
        own.setdefault(cluster_of(node.name), []).append(node)
    rows = []
    for pod in pods:
        placement = placement_of(pod)
        resources = sorted(pod.gpu_requests)
        cluster = cluster_of(pod.name)
        key = (cluster, _signature(placement, resources))
        if key not in groups:
            groups[key] = (len(groups), _screen(placement, resources, own.get(cluster, [])))
        group, verdict = groups[key]
        blocked_by, detail = verdict.blocked_by, verdict.detail
        if not blocked_by and KUEUE_ADMISSION_GATE in placement.scheduling_gates:
            blocked_by, detail = "quota", pod.labels.get(KUEUE_QUEUE_LABEL, "")
        rows.append(
            {
                "namespace": pod.namespace,
                "pod": pod.name,
                "group": group,
                "blocked_by": blocked_by,
                "detail": detail,
                "node_affinity": describe_affinity(placement),
                "tolerations": describe_tolerations(placement),
                "scheduler_message": placement.scheduler_message,
            }
        )
    screens = PENDING_SCREENS.check(
        pd.DataFrame(rows, columns=list(PENDING_SCREENS.columns)).astype(
            {c: "str" for c in PENDING_SCREENS.columns if c != "group"} | {"group": "int64"}
        )
    )
    placeable = pd.DataFrame(
        [(group, node) for group, verdict in groups.values() for node in verdict.nodes],
        columns=["group", "node"],
    ).astype({"group": "int64", "node": "str"})
    return screens, PLACEABLE_NODES.check(placeable)
