"""The scheduler of the simulated fleet: pod arrivals per workload stream, best-fit placement, FIFO waits."""

import heapq
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

import numpy as np
import numpy.typing as npt

from gpuwatch.core.model import (
    RESOURCE_AMD_GPU,
    RESOURCE_GAUDI,
    RESOURCE_GPU,
    RESOURCE_GPU_SHARED,
    RESOURCE_MIG_PREFIX,
    Allocation,
    Gpu,
    Node,
    Pod,
    Taint,
    Window,
    ge_per_unit,
)
from gpuwatch.sim.fleet import _uid, stable_hex


@dataclass(frozen=True, slots=True, kw_only=True)
class PoolSpec:
    """How many nodes of one kind, and how their GPUs are offered to pods."""

    product: str
    nodes: int
    gpus_per_node: int
    memory_mib: int
    name_prefix: str
    mig_layout: tuple[str, ...] = ()  # MIG mixed strategy: the instances each GPU is cut into
    replicas: int = 1  # time-slicing replicas per GPU
    rename_shared: bool = False  # time-slicing renameByDefault: nvidia.com/gpu.shared
    has_prof: bool = True  # DCGM_FI_PROF_* fields available
    tdp_watts: float = 700.0
    taints: tuple[Taint, ...] = ()  # beyond nvidia.com/gpu=present:NoSchedule, which every NVIDIA node has
    vendor: str = "nvidia"  # nvidia, amd (amd.com/gpu) or intel (habana.ai/gaudi)


@dataclass(frozen=True, slots=True, kw_only=True)
class Stream:
    """A team's recurring workload: its archetype, where it runs and how many run at once."""

    namespace: str
    archetype: str
    pool: str  # name_prefix of the PoolSpec
    resource: str
    qty: int
    concurrency: int
    hours: tuple[float, float]  # duration range
    team_label: str | None = None  # pod label `team` (pod-level team)


@dataclass(frozen=True, slots=True, kw_only=True)
class _Request:
    arrival: datetime
    duration: timedelta
    stream: Stream
    name: str


def _generate_requests(rng: np.random.Generator, window: Window, streams: Sequence[Stream]) -> list[_Request]:
    """Arrivals per stream keep about `concurrency` pods alive; long-lived ones start before the window."""
    requests: list[_Request] = []
    for s_idx, stream in enumerate(streams):
        lo, hi = stream.hours
        for slot in range(stream.concurrency):
            # Each slot is a chain of back-to-back pods with small gaps between them.
            # Kubernetes timestamps have whole seconds, so every simulated time does too.
            t = window.start - timedelta(seconds=round(float(rng.uniform(0, hi)) * 3600))
            serial = 0
            while t < window.end:
                duration = timedelta(seconds=round(float(rng.uniform(lo, hi)) * 3600))
                name = f"{stream.archetype}-{s_idx:02d}-{slot:02d}-{serial:03d}"
                requests.append(_Request(arrival=t, duration=duration, stream=stream, name=name))
                pause = timedelta(seconds=round(float(rng.exponential(max(lo * 0.1, 0.25))) * 3600))
                t += duration + pause
                serial += 1
    requests.sort(key=lambda r: (r.arrival, r.name))
    return requests


@dataclass(slots=True)
class _Slot:
    """One schedulable unit: a whole GPU, a MIG instance or a time-slice replica."""

    node: str
    uuid: str
    gpu_instance_id: str
    replica: str
    resource: str
    ge: float


def _slots(nodes: Sequence[Node], gpus: Sequence[Gpu]) -> dict[str, list[_Slot]]:
    """Free units per node, honouring allocatable (a hidden GPU offers nothing)."""
    out: dict[str, list[_Slot]] = {}
    gpus_of: dict[str, list[Gpu]] = {}
    for g in gpus:
        gpus_of.setdefault(g.node, []).append(g)
    for node in nodes:
        node_gpus = gpus_of.get(node.name, [])
        slots: list[_Slot] = []
        for g in node_gpus:
            if g.mig_profile:
                res = f"{RESOURCE_MIG_PREFIX}{g.mig_profile}"
                slots.append(_Slot(node.name, g.uuid, g.gpu_instance_id, "", res, g.ge))
            else:
                whole = (RESOURCE_GPU, RESOURCE_AMD_GPU, RESOURCE_GAUDI)
                res = next((r for r in whole if node.capacity.get(r, 0) > 0), RESOURCE_GPU_SHARED)
                for r in range(g.replicas):
                    rep = str(r) if g.replicas > 1 else ""
                    slots.append(_Slot(node.name, g.uuid, "", rep, res, ge_per_unit(res, g.replicas)))
        per_res: dict[str, int] = {}
        kept = []
        for s in slots:
            per_res[s.resource] = per_res.get(s.resource, 0) + 1
            if per_res[s.resource] <= node.allocatable.get(s.resource, 0):
                kept.append(s)
        out[node.name] = kept
    return out


def _kind(resource: str) -> str:
    """Resources interchangeable for placement: a time-sliced pool offers nvidia.com/gpu or .shared
    depending on renameByDefault, and a pod asking for either fits either; a MIG profile is its own."""
    return RESOURCE_GPU if resource in (RESOURCE_GPU, RESOURCE_GPU_SHARED) else resource


class _FreeIndex:
    """Per pool and resource kind, how many free units each schedulable node has (in pool order), so
    best fit is one vectorized look instead of a walk over every node's units."""

    def __init__(self, pool_nodes: Mapping[str, list[str]], free: Mapping[str, list[_Slot]]) -> None:
        self.names = dict(pool_nodes)
        self.counts: dict[tuple[str, str], npt.NDArray[np.int64]] = {}
        self.positions: dict[str, list[tuple[str, int]]] = {}  # a node may match two pools' prefixes
        for pool, names in pool_nodes.items():
            for i, name in enumerate(names):
                self.positions.setdefault(name, []).append((pool, i))
                for slot in free[name]:
                    self._array(pool, _kind(slot.resource))[i] += 1

    def _array(self, pool: str, kind: str) -> npt.NDArray[np.int64]:
        key = (pool, kind)
        if key not in self.counts:
            self.counts[key] = np.zeros(len(self.names[pool]), dtype=np.int64)
        return self.counts[key]

    def best_fit(self, pool: str, resource: str, qty: int) -> str | None:
        """The node with the fewest free units of the kind that still holds qty (first in pool order)."""
        counts = self.counts.get((pool, _kind(resource)))
        if counts is None:
            return None
        fitting = np.where(counts >= qty, counts, np.iinfo(np.int64).max)
        i = int(fitting.argmin())
        return self.names[pool][i] if counts[i] >= qty else None

    def change(self, node: str, resource: str, delta: int) -> None:
        for pool, i in self.positions.get(node, []):
            self._array(pool, _kind(resource))[i] += delta


def _schedule(
    seed: int,
    window: Window,
    nodes: Sequence[Node],
    gpus: Sequence[Gpu],
    pools: Mapping[str, PoolSpec],
    requests: Sequence[_Request],
) -> tuple[list[Pod], list[Allocation], dict[str, str]]:
    """Best-fit placement in arrival order; a pod that does not fit waits (FIFO) until units free up."""
    free = _slots(nodes, gpus)
    node_by_name = {n.name: n for n in nodes}
    pool_nodes = {
        prefix: [
            n.name for n in nodes if n.name.startswith(f"gpu-{prefix}-") and n.ready and not n.unschedulable
        ]
        for prefix in pools
    }
    releases: list[tuple[datetime, int, str, list[_Slot]]] = []
    waiting: list[_Request] = []
    pods: list[Pod] = []
    allocations: list[Allocation] = []
    archetypes: dict[str, str] = {}
    counter = 0

    index = _FreeIndex(pool_nodes, free)

    def try_place(req: _Request, now: datetime) -> bool:
        nonlocal counter
        name = (
            index.best_fit(req.stream.pool, req.stream.resource, req.stream.qty)
            if req.stream.pool in pool_nodes
            else None
        )
        if name is None:
            return False
        kind = _kind(req.stream.resource)
        # Time-sliced pods take replicas of distinct GPUs when they ask for more than one.
        taken = [s for s in free[name] if _kind(s.resource) == kind][: req.stream.qty]
        for s in taken:
            free[name].remove(s)
        index.change(name, kind, -len(taken))
        end = now + req.duration
        node = node_by_name[name]
        pod_name = f"{req.name}-{stable_hex(seed, req.name, n=5)}"
        resource = taken[0].resource
        labels = {"app": req.stream.archetype, "gpuwatch.io/archetype": req.stream.archetype}
        if req.stream.team_label:
            labels["team"] = req.stream.team_label
        finished = end if end <= window.end else None
        pods.append(
            Pod(
                namespace=req.stream.namespace,
                name=pod_name,
                uid=_uid(seed, req.stream.namespace, pod_name),
                phase="Running" if finished is None else "Succeeded",
                created_at=req.arrival,
                node=name,
                started_at=now,
                finished_at=finished,
                labels=labels,
                gpu_requests={resource: float(req.stream.qty)},
                node_selector_product=node.product,
                container=req.stream.archetype,
            )
        )
        archetypes[f"{req.stream.namespace}/{pod_name}"] = req.stream.archetype
        for s in taken:
            allocations.append(
                Allocation(
                    namespace=req.stream.namespace,
                    pod=pod_name,
                    node=name,
                    uuid=s.uuid,
                    gpu_instance_id=s.gpu_instance_id,
                    replica=s.replica,
                    resource=s.resource,
                    ge=s.ge,
                    start=now,
                    end=finished,
                )
            )
        counter += 1
        heapq.heappush(releases, (end, counter, name, taken))
        return True

    def release_until(t: datetime) -> None:
        while releases and releases[0][0] <= t:
            when, _, name, taken = heapq.heappop(releases)
            free[name].extend(taken)
            index.change(name, taken[0].resource, len(taken))
            retry_waiting(when)

    def retry_waiting(now: datetime) -> None:
        for req in list(waiting):
            if now >= req.arrival + req.duration:
                waiting.remove(req)  # gave up before it ever ran
            elif try_place(req, now):
                waiting.remove(req)

    for req in requests:
        release_until(req.arrival)
        if not try_place(req, max(req.arrival, window.start - timedelta(days=30))):
            waiting.append(req)
    release_until(window.end)
    return pods, allocations, archetypes
