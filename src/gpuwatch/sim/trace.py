"""Replay of the Alibaba openb GPU trace (Weng et al., "Beware of Fragmentation", USENIX ATC'23)."""

import heapq
import math
import re
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

import numpy as np
import pandas as pd

from gpuwatch.core.errors import ConfigError
from gpuwatch.core.model import RESOURCE_GPU, Allocation, Gpu, Namespace, Node, Pod, TeamRules, Window, utc
from gpuwatch.core.units import BYTES_PER_MIB
from gpuwatch.sim.fleet import (
    EXPORTER_NAMESPACE,
    SimulatedFleet,
    _draw_utilization,
    _exporter_pods,
    _exporter_targets,
    _quotas,
    _uid,
    gpu_uuid,
)
from gpuwatch.sim.openb import MILLI_PER_GPU, OpenbTrace, load_openb

__all__ = ["OpenbFleet", "OpenbTrace", "ReplayCounts", "load_openb", "replay_openb", "summary"]

# Framebuffer sizes as nvidia-smi reports them. G1-G3 are undisclosed internal codes (trace README):
# they get a nominal size so the simulated exporter has a framebuffer to report.
GPU_MEMORY_MIB: Mapping[str, int] = {
    "V100M16": 16160,
    "V100M32": 32510,
    "P100": 16280,
    "T4": 15360,
    "A10": 23028,
}
NOMINAL_GPU_MEMORY_MIB = 32768
NO_PROF_MODELS = frozenset({"P100"})  # DCGM profiling fields (DCGM_FI_PROF_*) need Volta or newer
QOS_TEAMS: Mapping[str, str] = {
    "LS": "online",
    "BE": "offline",
    "Burstable": "research",
    "Guaranteed": "platform",
}
QOS_ARCHETYPES: Mapping[str, str] = {
    "LS": "inference",
    "BE": "batch",
    "Burstable": "training",
    "Guaranteed": "inference",
}
# Shares of GPU pods that idle instead of following their QoS archetype, so the waste numbers show something.
NOTEBOOK_SHARE = 0.10
STUCK_SHARE = 0.05


@dataclass(frozen=True, slots=True, kw_only=True)
class ReplayCounts:
    """What became of every trace pod in a replay; the pod fields sum to `trace_pods`."""

    trace_pods: int
    cpu_only: int  # num_gpu == 0: skipped
    placed: int  # held GPUs at some time inside the window
    pending: int  # still waiting at window end
    expired: int  # deleted before it ever held a GPU (waiting, or a zero-length lifetime)
    ended_before_window: int
    created_after_window: int
    nodes_without_gpus: int  # rows of the node list with gpu == 0: not part of the fleet


@dataclass(frozen=True, kw_only=True)
class OpenbFleet(SimulatedFleet):
    """A SimulatedFleet replayed from the openb trace; `counts` says what became of each trace pod."""

    counts: ReplayCounts
    offset_seconds: float = 0.0  # trace time at window.start


# ---------------------------------------------------------------------------------------------
# Replay


def replay_openb(
    trace: OpenbTrace,
    *,
    start: datetime,
    days: float = 7.0,
    step_seconds: int = 300,
    seed: int = 0,
    offset_seconds: float = 0.0,
    lifetime_scale: float = 1.0,
) -> OpenbFleet:
    """Place the trace's GPU pods on its GPU nodes over time and draw their utilization.

    Trace time `offset_seconds` (default 0) is `start`; the window is [start, start + days). Pods arrive
    at creation_time and leave at deletion_time (lifetimes stretched by `lifetime_scale`); the traced
    scheduled_time and pod_phase are not replayed, except that a pod traced as Failed ends Failed.
    Placement is best-fit by node (least free GPU capacity left after placement), GPU-sharing pods
    pack onto the fullest GPU that still fits them; a pod that fits nowhere waits and is retried in
    arrival order whenever capacity frees, until its deletion time. Pods with num_gpu == 0 are skipped.

    The openb pods are short-lived (median ~9 min) and the cluster large, so at real time only ~1% of
    its GPUs are allocated; Weng et al. (ATC'23) instead keep submitting pods until the cluster fills.
    """
    if not (math.isfinite(lifetime_scale) and lifetime_scale > 0):
        raise ConfigError(f"lifetime_scale must be a positive number, got {lifetime_scale}")
    if not (math.isfinite(days) and days > 0):
        raise ConfigError(f"days must be a positive number, got {days}")
    begin = utc(start)
    window = Window(start=begin, end=begin + timedelta(days=days), step_seconds=step_seconds)
    horizon = offset_seconds + window.duration_seconds

    gpu_nodes = trace.nodes[trace.nodes["gpu"] > 0].reset_index(drop=True)
    nodes, gpus, has_prof = _build_nodes(seed, gpu_nodes)
    pods_df = trace.pods
    gpu_rows = np.flatnonzero(pods_df["num_gpu"].to_numpy() > 0)
    g = pods_df.iloc[gpu_rows]
    created = g["creation_time"].to_numpy(dtype=float)
    deleted = created + (g["deletion_time"].to_numpy(dtype=float) - created) * lifetime_scale
    num_gpu = g["num_gpu"].to_numpy(dtype=np.int64)
    milli = g["gpu_milli"].to_numpy(dtype=np.int64)
    specs = g["gpu_spec"].tolist()

    scheduler = _Scheduler(gpu_nodes["model"].tolist(), gpu_nodes["gpu"].tolist())
    outcome = scheduler.run(created, deleted, num_gpu, milli, specs, horizon)

    rng = np.random.default_rng(seed)
    draw = rng.random(len(gpu_rows))  # one draw per GPU pod of the trace, so a window does not shift others
    qos = g["qos"].tolist()
    archetype_of = [
        "notebook"
        if u < NOTEBOOK_SHARE
        else "stuck"
        if u < NOTEBOOK_SHARE + STUCK_SHARE
        else QOS_ARCHETYPES.get(q, "batch")
        for u, q in zip(draw, qos, strict=True)
    ]
    namespace_of_qos = {q: _namespace(q) for q in sorted(set(qos))}

    def at(t: float) -> datetime:
        return begin + timedelta(seconds=t - offset_seconds)

    names = g["name"].tolist()
    traced_phase = g["pod_phase"].tolist()
    pods: list[Pod] = []
    allocations: list[Allocation] = []
    archetypes: dict[str, str] = {}
    placed = pending = before = 0
    for j in range(len(gpu_rows)):
        state = outcome.state[j]
        if state not in (_PLACED, _WAITING):
            continue
        ends = float(deleted[j])
        if state == _PLACED and ends <= offset_seconds:
            before += 1
            continue
        ns = namespace_of_qos[qos[j]]
        name = names[j]
        models = specs[j].split("|") if specs[j] else []
        request = float(num_gpu[j]) if milli[j] == MILLI_PER_GPU else milli[j] / MILLI_PER_GPU
        pod = Pod(
            namespace=ns,
            name=name,
            uid=_uid(seed, ns, name),
            phase="Pending",
            created_at=at(float(created[j])),
            labels={
                "app": archetype_of[j],
                "gpuwatch.io/archetype": archetype_of[j],
                "gpuwatch.io/qos": qos[j],
            },
            gpu_requests={RESOURCE_GPU: request},
            node_selector_product=models[0] if len(models) == 1 else None,
            container=archetype_of[j],
        )
        if state == _WAITING:
            pending += 1
            pods.append(pod)
            continue
        placed += 1
        node_idx, t_placed, held = outcome.placement[j]
        node = nodes[node_idx]
        finished = at(ends) if ends <= horizon else None
        phase = "Running" if finished is None else "Failed" if traced_phase[j] == "Failed" else "Succeeded"
        started = at(t_placed)
        pods.append(replace(pod, phase=phase, node=node.name, started_at=started, finished_at=finished))
        archetypes[f"{ns}/{name}"] = archetype_of[j]
        for gpu_index, share, slot in held:
            gpu = gpus[scheduler.gpu_lo[node_idx] + gpu_index]
            allocations.append(
                Allocation(
                    namespace=ns,
                    pod=name,
                    node=node.name,
                    uuid=gpu.uuid,
                    gpu_instance_id="",
                    replica="" if share == MILLI_PER_GPU else str(slot),
                    resource=RESOURCE_GPU,
                    ge=share / MILLI_PER_GPU,
                    start=started,
                    end=finished,
                )
            )

    counts = ReplayCounts(
        trace_pods=len(pods_df),
        cpu_only=len(pods_df) - len(gpu_rows),
        placed=placed,
        pending=pending,
        expired=outcome.expired,
        ended_before_window=before,
        created_after_window=outcome.not_arrived,
        nodes_without_gpus=len(trace.nodes) - len(gpu_nodes),
    )
    targets = _exporter_targets(seed, nodes)
    namespaces = [
        Namespace(name=ns, labels={"team": QOS_TEAMS.get(q, ns), "gpuwatch.io/qos": q})
        for q, ns in namespace_of_qos.items()
    ]
    namespaces.append(Namespace(name=EXPORTER_NAMESPACE))
    fleet = OpenbFleet(
        seed=seed,
        window=window,
        nodes=tuple(nodes),
        gpus=tuple(gpus),
        namespaces=tuple(namespaces),
        pods=tuple(pods) + tuple(_exporter_pods(window, targets)),
        allocations=tuple(allocations),
        quotas=(),
        targets=tuple(targets),
        gaps=(),
        events=(),
        has_prof=has_prof,
        archetypes=archetypes,
        util_ratio=np.empty((0, 0)),
        team_rules=TeamRules(),
        counts=counts,
        offset_seconds=offset_seconds,
    )
    util = _draw_utilization(rng, fleet)
    return replace(fleet, util_ratio=util, quotas=tuple(_quotas(fleet)))


def _namespace(qos: str) -> str:
    """A Kubernetes namespace name for a QoS class: "LS" -> "ls", "Burstable" -> "burstable"."""
    return re.sub(r"[^a-z0-9-]+", "-", qos.lower()).strip("-") or "qos"


def _build_nodes(seed: int, rows: pd.DataFrame) -> tuple[list[Node], list[Gpu], dict[str, bool]]:
    nodes: list[Node] = []
    gpus: list[Gpu] = []
    has_prof: dict[str, bool] = {}
    for name, count, model in zip(
        rows["sn"].tolist(), rows["gpu"].tolist(), rows["model"].tolist(), strict=True
    ):
        memory_mib = GPU_MEMORY_MIB.get(model, NOMINAL_GPU_MEMORY_MIB)
        labels = {
            "kubernetes.io/hostname": name,
            "kubernetes.io/os": "linux",
            "nvidia.com/gpu.present": "true",
            "nvidia.com/gpu.product": model,
            "nvidia.com/gpu.count": str(count),
            "nvidia.com/gpu.memory": str(memory_mib),
            "nvidia.com/gpu.replicas": "1",
            "nvidia.com/gpu.sharing-strategy": "none",
            "nvidia.com/mig.strategy": "single",
        }
        capacity = {RESOURCE_GPU: float(count)}
        nodes.append(
            Node(
                name=name,
                product=model,
                gpu_count=count,
                gpu_memory_bytes=float(memory_mib * BYTES_PER_MIB),
                capacity=capacity,
                allocatable=dict(capacity),
                labels=labels,
            )
        )
        for i in range(count):
            uuid = gpu_uuid(seed, name, i)
            has_prof[uuid] = model not in NO_PROF_MODELS
            gpus.append(
                Gpu(
                    node=name,
                    uuid=uuid,
                    index=i,
                    product=model,
                    memory_bytes=float(memory_mib * BYTES_PER_MIB),
                )
            )
    return nodes, gpus, has_prof


_NEW, _PLACED, _WAITING, _EXPIRED = 0, 1, 2, 3


@dataclass(slots=True)
class _Outcome:
    state: list[int]  # per GPU pod: _NEW (never arrived), _PLACED, _WAITING (at the horizon), _EXPIRED
    placement: dict[
        int, tuple[int, float, list[tuple[int, int, int]]]
    ]  # pod -> node, time, [(gpu, milli, slot)]
    expired: int
    not_arrived: int


class _Scheduler:
    """Event-driven best-fit placement of whole-GPU and GPU-sharing pods (demands in milli-GPUs).

    Node-level aggregates (free total, fully free GPUs, largest free GPU) live in numpy arrays so an
    arriving pod is placed with a few vector operations over all nodes instead of a Python scan.
    A pod that did not fit anywhere can only fit later on a node that released capacity, so waiting
    pods are retried against the nodes of each release only, grouped by identical demand.
    """

    def __init__(self, models: Sequence[str], counts: Sequence[int]) -> None:
        self.models = np.array(models, dtype=object)
        self.gpu_lo = [
            0,
            *np.cumsum(counts, dtype=np.int64).tolist(),
        ]  # node n owns flat GPUs [lo[n], lo[n+1])
        self.gpu_free = [MILLI_PER_GPU] * self.gpu_lo[-1]
        self.free_total = np.array([c * MILLI_PER_GPU for c in counts], dtype=np.int64)
        self.full_free = np.array(counts, dtype=np.int64)
        self.max_free = np.where(self.full_free > 0, MILLI_PER_GPU, 0).astype(np.int64)
        self.slots: dict[int, set[int]] = {}  # flat gpu -> sharing slot ids in use
        self._masks: dict[str, np.ndarray] = {}

    def mask(self, spec: str) -> np.ndarray:
        if spec not in self._masks:
            self._masks[spec] = (
                np.isin(self.models, spec.split("|")) if spec else np.ones(len(self.models), dtype=bool)
            )
        return self._masks[spec]

    def _refresh(self, n: int) -> None:
        free = self.gpu_free[self.gpu_lo[n] : self.gpu_lo[n + 1]]
        self.free_total[n] = sum(free)
        self.full_free[n] = free.count(MILLI_PER_GPU)
        self.max_free[n] = max(free)

    def _fits(self, n: int, k: int, m: int) -> bool:
        return bool(self.full_free[n] >= k) if m == MILLI_PER_GPU else bool(self.max_free[n] >= m)

    def best_node(self, spec: str, k: int, m: int) -> int:
        """Best-fit node over the whole fleet for k GPUs of m milli each, or -1."""
        have = self.full_free >= k if m == MILLI_PER_GPU else self.max_free >= m
        cand = self.mask(spec) & have
        if not cand.any():
            return -1
        return int(np.argmin(np.where(cand, self.free_total, np.iinfo(np.int64).max)))

    def best_of(self, nodes: Sequence[int], spec: str, k: int, m: int) -> int:
        mask = self.mask(spec)
        fits = [n for n in nodes if mask[n] and self._fits(n, k, m)]
        return min(fits, key=lambda n: (self.free_total[n], n)) if fits else -1

    def take(self, n: int, k: int, m: int) -> list[tuple[int, int, int]]:
        lo, hi = self.gpu_lo[n], self.gpu_lo[n + 1]
        free = self.gpu_free
        if m == MILLI_PER_GPU:
            chosen = [i for i in range(lo, hi) if free[i] == MILLI_PER_GPU][:k]
            held = [(i - lo, m, 0) for i in chosen]
            for i in chosen:
                free[i] = 0
        else:
            # The fullest GPU that still fits: packing leaves whole GPUs for whole-GPU pods.
            i = min((i for i in range(lo, hi) if free[i] >= m), key=lambda i: (free[i], i))
            used = self.slots.setdefault(i, set())
            slot = next(s for s in range(len(used) + 1) if s not in used)
            used.add(slot)
            free[i] -= m
            held = [(i - lo, m, slot)]
        self._refresh(n)
        return held

    def give_back(self, n: int, held: Sequence[tuple[int, int, int]]) -> None:
        lo = self.gpu_lo[n]
        for gpu_index, m, slot in held:
            self.gpu_free[lo + gpu_index] += m
            if m != MILLI_PER_GPU:
                self.slots[lo + gpu_index].discard(slot)
        self._refresh(n)

    def run(
        self,
        created: np.ndarray,
        deleted: np.ndarray,
        num_gpu: np.ndarray,
        milli: np.ndarray,
        specs: Sequence[str],
        horizon: float,
    ) -> _Outcome:
        n_pods = len(created)
        order = np.argsort(created, kind="stable")
        arrival = created[order].tolist()
        rank = np.empty(n_pods, dtype=np.int64)
        rank[order] = np.arange(n_pods)
        ranks = rank.tolist()  # FIFO position of each pod
        state = [_NEW] * n_pods
        placement: dict[int, tuple[int, float, list[tuple[int, int, int]]]] = {}
        releases: list[tuple[float, int]] = []
        waiting: dict[tuple[str, int, int], deque[int]] = {}  # same demand -> FIFO of pods
        expired = 0
        ks = num_gpu.tolist()
        ms = milli.tolist()
        ends = deleted.tolist()

        def place(j: int, n: int, t: float) -> None:
            placement[j] = (n, t, self.take(n, ks[j], ms[j]))
            state[j] = _PLACED
            if ends[j] < horizon:
                heapq.heappush(releases, (ends[j], j))

        def retry(t: float, touched: list[int]) -> None:
            nonlocal expired
            while True:
                best: tuple[int, tuple[str, int, int]] | None = None
                for key in list(waiting):
                    queue = waiting[key]
                    while queue and ends[queue[0]] <= t:
                        state[queue.popleft()] = _EXPIRED
                        expired += 1
                    if not queue:
                        del waiting[key]
                        continue
                    spec, k, m = key
                    mask = self.mask(spec)
                    if (best is None or ranks[queue[0]] < ranks[best[0]]) and any(
                        mask[n] and self._fits(n, k, m) for n in touched
                    ):
                        best = (queue[0], key)
                if best is None:
                    return
                j, key = best
                waiting[key].popleft()
                place(j, self.best_of(touched, *key), t)

        i = 0
        while True:
            t_arrive = arrival[i] if i < n_pods else math.inf
            t_release = releases[0][0] if releases else math.inf
            t = min(t_arrive, t_release)
            if t >= horizon:
                break
            if t_release <= t_arrive:
                touched: set[int] = set()
                while releases and releases[0][0] == t:
                    _, j = heapq.heappop(releases)
                    n = placement[j][0]
                    self.give_back(n, placement[j][2])
                    touched.add(n)
                retry(t, sorted(touched))
                continue
            while i < n_pods and arrival[i] == t:
                j = int(order[i])
                i += 1
                if ends[j] <= t:
                    state[j] = _EXPIRED
                    expired += 1
                    continue
                n = self.best_node(specs[j], ks[j], ms[j])
                if n >= 0:
                    place(j, n, t)
                else:
                    state[j] = _WAITING
                    waiting.setdefault((specs[j], ks[j], ms[j]), deque()).append(j)
        for queue in waiting.values():
            for j in queue:
                if ends[j] <= horizon:
                    state[j] = _EXPIRED
                    expired += 1
        return _Outcome(state=state, placement=placement, expired=expired, not_arrived=n_pods - i)


# ---------------------------------------------------------------------------------------------
# Summary


def summary(fleet: SimulatedFleet) -> dict[str, int | float]:
    """Headline numbers of a fleet: nodes, GPUs, pods, allocated GE-hours and the mean allocation rate.

    Allocated GE-hours count samples as the ledger does (sample i is held when the pod held the GPU at
    t_i), so pods shorter than a step may not show. Works on any SimulatedFleet; the trace counts
    (skipped, expired, outside the window) are zero for fleets that were not replayed from a trace.
    """
    gpu_pods = [p for p in fleet.pods if p.gpu_requests]
    n = fleet.window.n_samples
    per_sample = np.zeros(n + 1)
    spans = fleet.allocation_spans
    if spans:
        i0, i1 = np.array(spans, dtype=np.int64).T
        ge = np.array([a.ge for a in fleet.allocations])
        np.add.at(per_sample, i0, ge)
        np.add.at(per_sample, i1, -ge)
    allocated = np.cumsum(per_sample)[:n]
    step_hours = fleet.window.step_hours
    capacity_gpus = sum(node.capacity_gpus() for node in fleet.nodes)
    capacity_hours = capacity_gpus * n * step_hours
    allocated_hours = float(allocated.sum() * step_hours)
    counts = fleet.counts if isinstance(fleet, OpenbFleet) else None
    return {
        "nodes": len(fleet.nodes),
        "gpus": len({g.uuid for g in fleet.gpus}),
        "pods_placed": sum(p.node is not None for p in gpu_pods),
        "pods_running": sum(p.phase == "Running" for p in gpu_pods),
        "pods_pending": sum(p.phase == "Pending" for p in gpu_pods),
        "pods_skipped_cpu_only": counts.cpu_only if counts else 0,
        "pods_expired": counts.expired if counts else 0,
        "pods_outside_window": counts.ended_before_window + counts.created_after_window if counts else 0,
        "capacity_gpu_hours": round(capacity_hours, 6),
        "allocated_gpu_hours": round(allocated_hours, 6),
        "mean_allocation_rate": round(allocated_hours / capacity_hours, 6) if capacity_hours else 0.0,
        "peak_allocated_gpus": round(float(allocated.max()), 6) if n else 0.0,
    }


def last_days_offset_seconds(trace: OpenbTrace, days: float) -> float:
    """The trace offset whose window ends one second after the last pod creation (every pod arrived)."""
    return max(0.0, float(trace.pods["creation_time"].max()) + 1 - days * 86400)
