"""The simulated fleet: nodes, GPUs, pods, a scheduler that places them, and per-GPU telemetry.

One `SimulatedFleet` is the single truth that the DCGM /metrics text, the OpenMetrics backfill, the
Kubernetes API test server and the tests' expected numbers are all rendered from, so they agree.
Everything is a pure function of (seed, window, scale): the same arguments give the same fleet.
"""

import hashlib
import heapq
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta

import numpy as np
import pandas as pd

from gpuwatch.model import (
    MIG_SLICES_PER_GPU,
    RESOURCE_GPU,
    RESOURCE_GPU_SHARED,
    RESOURCE_MIG_PREFIX,
    Allocation,
    Gpu,
    Namespace,
    Node,
    Pod,
    ResourceQuota,
    TeamRules,
    Window,
    ge_per_unit,
    mig_profile_slices,
    normalize_product,
)
from gpuwatch.schema import ATTRIBUTED
from gpuwatch.units import BYTES_PER_MIB

EXPORTER_NAMESPACE = "gpu-operator"
EXPORTER_PORT = 9400
DRIVER_VERSION = "550.54.15"
# Completed pods stay listed by the API server this long (then they are garbage-collected).
COMPLETED_POD_TTL = timedelta(hours=1)
# notebooks carries no team label: the demo config maps it explicitly (SPEC §4.1 example).
DEMO_NAMESPACE_TEAMS: Mapping[str, str] = {"notebooks": "data-science"}
DEMO_PRICES_USD_PER_GPU_HOUR: Mapping[str, float] = {
    "NVIDIA-H100-80GB-HBM3": 4.0,
    "NVIDIA-A100-SXM4-80GB": 2.5,
    "NVIDIA-L4": 0.8,
    "TESLA-T4": 0.35,
}
ARCHETYPES = ("training", "inference", "notebook", "stuck", "batch")


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
class ExporterTarget:
    """The dcgm-exporter pod on a node, and how its labels name the node."""

    node: str
    pod: str
    ip: str
    hostname_label: str  # "Hostname" (< 4.6) or "hostname"
    hostname_value: str  # the node name, or the exporter pod's own name (a known quirk)

    @property
    def instance(self) -> str:
        return f"{self.ip}:{EXPORTER_PORT}"


@dataclass(frozen=True, slots=True, kw_only=True)
class HealthEvent:
    """A device-health fact from `start` on: an XID (sticky last value), a row-remap failure, heat."""

    node: str
    uuid: str
    kind: str  # "xid" | "row_remap_failure" | "hot"
    value: float
    start: datetime


@dataclass(frozen=True, slots=True, kw_only=True)
class TelemetryGap:
    """The exporter on `node` served nothing over [start, end)."""

    node: str
    start: datetime
    end: datetime


@dataclass(frozen=True, kw_only=True)
class SimulatedFleet:
    """A deterministic fleet over a window; `window.end` is "now" for the API server."""

    seed: int
    window: Window
    nodes: tuple[Node, ...]
    gpus: tuple[Gpu, ...]
    namespaces: tuple[Namespace, ...]
    pods: tuple[Pod, ...]
    allocations: tuple[Allocation, ...]
    quotas: tuple[ResourceQuota, ...]
    targets: tuple[ExporterTarget, ...]
    gaps: tuple[TelemetryGap, ...]
    events: tuple[HealthEvent, ...]
    has_prof: Mapping[str, bool]  # uuid -> PROF fields reported
    archetypes: Mapping[str, str]  # pod key -> archetype
    util_ratio: np.ndarray = field(repr=False)  # [len(gpus), n_samples]; NaN where no telemetry
    team_rules: TeamRules = field(default_factory=lambda: TeamRules(namespaces=DEMO_NAMESPACE_TEAMS))

    @property
    def now(self) -> datetime:
        return self.window.end

    def sample_times(self) -> pd.DatetimeIndex:
        return pd.date_range(
            self.window.start, periods=self.window.n_samples, freq=f"{self.window.step_seconds}s"
        )

    def node(self, name: str) -> Node:
        return next(n for n in self.nodes if n.name == name)

    def team_of(self, pod: Pod) -> str:
        ns_labels = next((n.labels for n in self.namespaces if n.name == pod.namespace), {})
        return self.team_rules.team_of(
            namespace=pod.namespace, pod_labels=pod.labels, namespace_labels=ns_labels
        )

    def api_pods(self) -> list[Pod]:
        """Pods the API server lists at `now`: running, pending, and recently completed ones."""
        horizon = self.now - COMPLETED_POD_TTL
        return [p for p in self.pods if p.finished_at is None or p.finished_at >= horizon]

    def missing_mask(self) -> np.ndarray:
        """[len(gpus), n_samples] True where the exporter served nothing (gaps, NotReady nodes)."""
        times = self.sample_times()
        node_of = np.array([g.node for g in self.gpus])
        mask = np.zeros((len(self.gpus), len(times)), dtype=bool)
        for gap in self.gaps:
            cols = (times >= pd.Timestamp(gap.start)) & (times < pd.Timestamp(gap.end))
            mask[np.ix_(node_of == gap.node, cols)] = True
        return mask

    def telemetry(self) -> pd.DataFrame:
        """Per GPU (or MIG instance) and sample, the values the exporter reports, in base units.

        Columns: timestamp, node, uuid, gpu_instance_id, gpu_index, util_ratio, fb_used_bytes,
        fb_free_bytes, power_watts, temp_celsius, energy_joules (counter, resets on driver reload),
        xid_last (sticky last XID code), row_remap_failure, uncorrectable_remapped_rows.
        Rows where the exporter served nothing are absent.
        """
        return _telemetry_frame(self)

    def truth(self) -> pd.DataFrame:
        """Ground truth per allocation and sample: who held how many GE of which GPU, and its util.

        Columns: timestamp, namespace, pod, team, node, pool, uuid, gpu_instance_id, ge_share, util_ratio.
        """
        return _truth_frame(self)


# ---------------------------------------------------------------------------------------------
# The demo fleet (SPEC §5)

DEMO_POOLS: tuple[PoolSpec, ...] = (
    PoolSpec(product="NVIDIA-H100-80GB-HBM3", nodes=4, gpus_per_node=8, memory_mib=81559, name_prefix="h100"),
    PoolSpec(
        product="NVIDIA-A100-SXM4-80GB",
        nodes=2,
        gpus_per_node=8,
        memory_mib=81920,
        name_prefix="a100-mig",
        mig_layout=("3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"),
        tdp_watts=400.0,
    ),
    PoolSpec(
        product="NVIDIA-A100-SXM4-80GB",
        nodes=2,
        gpus_per_node=8,
        memory_mib=81920,
        name_prefix="a100",
        tdp_watts=400.0,
    ),
    PoolSpec(
        product="NVIDIA-L4", nodes=2, gpus_per_node=4, memory_mib=23034, name_prefix="l4", tdp_watts=72.0
    ),
    PoolSpec(
        product="Tesla-T4",
        nodes=2,
        gpus_per_node=4,
        memory_mib=15360,
        name_prefix="t4",
        replicas=4,
        has_prof=False,
        tdp_watts=70.0,
    ),
)

DEMO_NAMESPACES: tuple[tuple[str, Mapping[str, str]], ...] = (
    ("llm-research", {"team": "llm-research"}),
    ("genai-apps", {"team": "genai"}),
    ("vision", {"team": "vision"}),
    ("speech", {"team": "speech"}),
    ("recsys-prod", {"team": "recsys"}),
    ("recsys-dev", {"team": "recsys"}),
    ("search", {"team": "search"}),
    ("shared-inference", {}),  # pods carry their own team label
    ("notebooks", {}),  # mapped by config to data-science
    ("bio-ml", {"team": "bio-ml"}),
    ("robotics", {"team": "robotics"}),
    ("fraud", {"team": "fraud"}),
    ("platform", {"team": "platform"}),
    ("batch-jobs", {}),  # no label, no mapping: the namespace is the team
    (EXPORTER_NAMESPACE, {}),
)

_G, _S = RESOURCE_GPU, RESOURCE_GPU_SHARED
DEMO_STREAMS: tuple[Stream, ...] = (
    Stream(
        namespace="llm-research",
        archetype="training",
        pool="h100",
        resource=_G,
        qty=8,
        concurrency=1,
        hours=(60, 120),
    ),
    Stream(
        namespace="genai-apps",
        archetype="training",
        pool="h100",
        resource=_G,
        qty=4,
        concurrency=2,
        hours=(12, 36),
    ),
    Stream(
        namespace="platform",
        archetype="stuck",
        pool="h100",
        resource=_G,
        qty=2,
        concurrency=1,
        hours=(48, 200),
    ),
    Stream(
        namespace="fraud", archetype="batch", pool="h100", resource=_G, qty=1, concurrency=2, hours=(1, 3)
    ),
    Stream(
        namespace="vision",
        archetype="training",
        pool="h100",
        resource=_G,
        qty=2,
        concurrency=1,
        hours=(6, 24),
    ),
    Stream(
        namespace="shared-inference",
        archetype="inference",
        pool="a100-mig",
        resource=f"{RESOURCE_MIG_PREFIX}1g.10gb",
        qty=1,
        concurrency=10,
        hours=(24, 96),
        team_label="search",
    ),
    Stream(
        namespace="shared-inference",
        archetype="inference",
        pool="a100-mig",
        resource=f"{RESOURCE_MIG_PREFIX}2g.20gb",
        qty=1,
        concurrency=7,
        hours=(24, 96),
        team_label="ads",
    ),
    Stream(
        namespace="notebooks",
        archetype="notebook",
        pool="a100-mig",
        resource=f"{RESOURCE_MIG_PREFIX}3g.40gb",
        qty=1,
        concurrency=10,
        hours=(8, 72),
    ),
    Stream(
        namespace="recsys-dev",
        archetype="inference",
        pool="a100-mig",
        resource=f"{RESOURCE_MIG_PREFIX}1g.10gb",
        qty=1,
        concurrency=5,
        hours=(4, 24),
    ),
    Stream(
        namespace="bio-ml", archetype="batch", pool="a100", resource=_G, qty=2, concurrency=2, hours=(1, 6)
    ),
    Stream(
        namespace="robotics",
        archetype="notebook",
        pool="a100",
        resource=_G,
        qty=1,
        concurrency=2,
        hours=(8, 48),
    ),
    Stream(
        namespace="speech",
        archetype="training",
        pool="a100",
        resource=_G,
        qty=2,
        concurrency=1,
        hours=(12, 48),
    ),
    Stream(
        namespace="search",
        archetype="inference",
        pool="l4",
        resource=_G,
        qty=1,
        concurrency=3,
        hours=(24, 96),
    ),
    Stream(
        namespace="speech",
        archetype="inference",
        pool="l4",
        resource=_G,
        qty=1,
        concurrency=2,
        hours=(24, 96),
    ),
    Stream(
        namespace="vision", archetype="batch", pool="l4", resource=_G, qty=1, concurrency=2, hours=(0.5, 2)
    ),
    Stream(
        namespace="notebooks",
        archetype="notebook",
        pool="t4",
        resource=_G,
        qty=1,
        concurrency=10,
        hours=(8, 72),
    ),
    Stream(
        namespace="batch-jobs",
        archetype="batch",
        pool="t4",
        resource=_S,
        qty=1,
        concurrency=5,
        hours=(0.5, 2),
    ),
    Stream(
        namespace="recsys-prod",
        archetype="inference",
        pool="t4",
        resource=_G,
        qty=1,
        concurrency=8,
        hours=(24, 96),
    ),
)


def build_demo_fleet(
    *,
    seed: int = 42,
    end: datetime | None = None,
    days: float = 7.0,
    step_seconds: int = 60,
    gpus: int | None = None,
) -> SimulatedFleet:
    """The SPEC §5 demo fleet: 80 GPUs in four pools and 13 teams, scaled to about `gpus` if given.

    `end` defaults to the current hour (UTC); pass it explicitly for a reproducible fleet.
    """
    if end is None:
        end = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
    window = Window(start=end - timedelta(days=days), end=end, step_seconds=step_seconds)
    base_gpus = sum(p.nodes * p.gpus_per_node for p in DEMO_POOLS)
    scale = 1.0 if gpus is None else gpus / base_gpus
    pools = tuple(replace(p, nodes=max(1, round(p.nodes * scale))) for p in DEMO_POOLS)
    streams = tuple(replace(s, concurrency=max(1, round(s.concurrency * scale))) for s in DEMO_STREAMS)
    return simulate(seed=seed, window=window, pools=pools, streams=streams, namespaces=DEMO_NAMESPACES)


def simulate(
    *,
    seed: int,
    window: Window,
    pools: Sequence[PoolSpec],
    streams: Sequence[Stream],
    namespaces: Sequence[tuple[str, Mapping[str, str]]],
) -> SimulatedFleet:
    """Build nodes and GPUs, generate pod arrivals per stream, schedule them, and draw telemetry."""
    rng = np.random.default_rng(seed)
    nodes, gpus, has_prof = _build_nodes(seed, pools)
    nodes = _inject_node_faults(nodes, window)
    pool_of_prefix = {p.name_prefix: p for p in pools}
    requests = _generate_requests(rng, window, streams)
    pods, allocations, archetypes = _schedule(seed, window, nodes, gpus, pool_of_prefix, requests)
    pods += _pending_demo_pods(window, nodes)
    targets = _exporter_targets(seed, nodes)
    pods += _exporter_pods(window, targets)
    gaps = _telemetry_gaps(window, nodes)
    events = _health_events(window, nodes, gpus)
    fleet = SimulatedFleet(
        seed=seed,
        window=window,
        nodes=tuple(nodes),
        gpus=tuple(gpus),
        namespaces=tuple(Namespace(name=n, labels=dict(lbl)) for n, lbl in namespaces),
        pods=tuple(pods),
        allocations=tuple(allocations),
        quotas=(),
        targets=tuple(targets),
        gaps=tuple(gaps),
        events=tuple(events),
        has_prof=has_prof,
        archetypes=archetypes,
        util_ratio=np.empty((0, 0)),
    )
    util = _draw_utilization(rng, fleet)
    return replace(fleet, util_ratio=util, quotas=tuple(_quotas(fleet)))


def stable_hex(*parts: object, n: int = 8) -> str:
    """A deterministic hex string from its parts (UUIDs, pod suffixes) independent of PYTHONHASHSEED."""
    return hashlib.sha256("/".join(map(str, parts)).encode()).hexdigest()[:n]


def gpu_uuid(seed: int, node: str, index: int) -> str:
    h = stable_hex(seed, node, index, n=32)
    return f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


def _build_nodes(seed: int, pools: Sequence[PoolSpec]) -> tuple[list[Node], list[Gpu], dict[str, bool]]:
    nodes: list[Node] = []
    gpus: list[Gpu] = []
    has_prof: dict[str, bool] = {}
    for spec in pools:
        for n in range(spec.nodes):
            name = f"gpu-{spec.name_prefix}-{n:03d}"
            labels = {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "nvidia.com/gpu.present": "true",
                "nvidia.com/gpu.count": str(spec.gpus_per_node),
                "nvidia.com/gpu.memory": str(spec.memory_mib),
                "nvidia.com/gpu.replicas": str(spec.replicas),
                "nvidia.com/gpu.sharing-strategy": "time-slicing" if spec.replicas > 1 else "none",
                "nvidia.com/mig.strategy": "mixed" if spec.mig_layout else "single",
                "nvidia.com/cuda.driver.major": DRIVER_VERSION.split(".")[0],
            }
            product = spec.product
            if spec.replicas > 1 and not spec.rename_shared and n % 2 == 0:
                # renameByDefault=false: GFD appends -SHARED; the odd nodes use gpu.shared instead.
                product = f"{spec.product}-SHARED"
            labels["nvidia.com/gpu.product"] = product
            capacity: dict[str, float]
            if spec.mig_layout:
                capacity = {RESOURCE_GPU: 0.0, f"{RESOURCE_MIG_PREFIX}7g.80gb": 0.0}  # stale zero resource
                for profile in spec.mig_layout:
                    key = f"{RESOURCE_MIG_PREFIX}{profile}"
                    capacity[key] = capacity.get(key, 0.0) + spec.gpus_per_node
                    labels[f"nvidia.com/mig-{profile}.count"] = str(int(capacity[key]))
            elif spec.replicas > 1 and (spec.rename_shared or n % 2 == 1):
                capacity = {RESOURCE_GPU: 0.0, RESOURCE_GPU_SHARED: float(spec.gpus_per_node * spec.replicas)}
            else:
                capacity = {RESOURCE_GPU: float(spec.gpus_per_node * spec.replicas)}
            nodes.append(
                Node(
                    name=name,
                    product=product,
                    gpu_count=spec.gpus_per_node,
                    gpu_memory_bytes=spec.memory_mib * BYTES_PER_MIB,
                    capacity=capacity,
                    allocatable=dict(capacity),
                    replicas=spec.replicas,
                    mig_strategy="mixed" if spec.mig_layout else "single",
                    labels=labels,
                )
            )
            for i in range(spec.gpus_per_node):
                uuid = gpu_uuid(seed, name, i)
                has_prof[uuid] = spec.has_prof
                memory = spec.memory_mib * BYTES_PER_MIB
                if spec.mig_layout:
                    for k, profile in enumerate(spec.mig_layout):
                        slices = mig_profile_slices(profile)
                        gpus.append(
                            Gpu(
                                node=name,
                                uuid=uuid,
                                index=i,
                                product=spec.product,
                                memory_bytes=memory * slices / MIG_SLICES_PER_GPU,
                                gpu_instance_id=str(_MIG_GI_IDS[k]),
                                mig_profile=profile,
                            )
                        )
                else:
                    gpus.append(
                        Gpu(
                            node=name,
                            uuid=uuid,
                            index=i,
                            product=spec.product,
                            memory_bytes=memory,
                            replicas=spec.replicas,
                        )
                    )
    return nodes, gpus, has_prof


# GPU instance ids as nvidia-smi assigns them for a 3g+2g+1g+1g cut on an A100.
_MIG_GI_IDS = (2, 3, 9, 10)


def _inject_node_faults(nodes: list[Node], window: Window) -> list[Node]:
    """Cordon the last H100 node, take the last whole-A100 node NotReady, hide one GPU of an H100."""
    out = list(nodes)
    by_prefix: dict[str, list[int]] = {}
    for i, n in enumerate(out):
        by_prefix.setdefault(n.name.rsplit("-", 1)[0], []).append(i)
    h100 = by_prefix.get("gpu-h100", [])
    if len(h100) >= 3:
        out[h100[-1]] = replace(out[h100[-1]], unschedulable=True)
        sick = out[h100[-2]]
        # The device plugin stopped advertising a GPU that fell off the bus (XID 79).
        out[h100[-2]] = replace(sick, allocatable={RESOURCE_GPU: sick.capacity[RESOURCE_GPU] - 1})
    a100 = by_prefix.get("gpu-a100", [])
    if len(a100) >= 2:
        out[a100[-1]] = replace(out[a100[-1]], ready=False)
    return out


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
    for node in nodes:
        node_gpus = [g for g in gpus if g.node == node.name]
        slots: list[_Slot] = []
        for g in node_gpus:
            if g.mig_profile:
                res = f"{RESOURCE_MIG_PREFIX}{g.mig_profile}"
                slots.append(_Slot(node.name, g.uuid, g.gpu_instance_id, "", res, g.ge))
            else:
                res = RESOURCE_GPU if node.capacity.get(RESOURCE_GPU, 0) > 0 else RESOURCE_GPU_SHARED
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


def _fits(stream: Stream, slot_resource: str) -> bool:
    if stream.resource in (RESOURCE_GPU, RESOURCE_GPU_SHARED) and slot_resource in (
        RESOURCE_GPU,
        RESOURCE_GPU_SHARED,
    ):
        return True  # a time-sliced pool offers either name depending on renameByDefault
    return stream.resource == slot_resource


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

    def try_place(req: _Request, now: datetime) -> bool:
        nonlocal counter
        best: tuple[int, str] | None = None
        for name in pool_nodes.get(req.stream.pool, []):
            avail = [s for s in free[name] if _fits(req.stream, s.resource)]
            # Time-sliced pods take replicas of distinct GPUs when they ask for more than one.
            if len(avail) >= req.stream.qty and (best is None or len(avail) < best[0]):
                best = (len(avail), name)
        if best is None:
            return False
        name = best[1]
        avail = [s for s in free[name] if _fits(req.stream, s.resource)]
        taken = avail[: req.stream.qty]
        for s in taken:
            free[name].remove(s)
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
                node_selector_product=node.labels["nvidia.com/gpu.product"],
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


def _pending_demo_pods(window: Window, nodes: Sequence[Node]) -> list[Pod]:
    """Pods pending at `now`: an 8-GPU H100 job (blocked by holes) and a 4-GPU L4 job (capacity)."""
    out = []
    specs = [
        ("llm-research", "pretrain-70b-0", "NVIDIA-H100-80GB-HBM3", 8, 5.0),
        ("search", "reindex-embed-0", "NVIDIA-L4", 4, 1.5),
    ]
    products = {normalize_product(n.product) for n in nodes}
    for ns, name, product, qty, hours in specs:
        if product not in products:
            continue
        out.append(
            Pod(
                namespace=ns,
                name=name,
                uid=_uid(0, ns, name),
                phase="Pending",
                created_at=window.end - timedelta(hours=hours),
                labels={"app": "pending"},
                gpu_requests={RESOURCE_GPU: float(qty)},
                node_selector_product=product,
            )
        )
    return out


def _uid(seed: int, namespace: str, name: str) -> str:
    h = stable_hex(seed, namespace, name, n=32)
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


def _exporter_targets(seed: int, nodes: Sequence[Node]) -> list[ExporterTarget]:
    """One dcgm-exporter pod per node; label layouts vary by node like a fleet mid-upgrade."""
    out = []
    for i, node in enumerate(nodes):
        pod = f"nvidia-dcgm-exporter-{stable_hex(seed, node.name, n=5)}"
        label = "Hostname" if i % 2 == 0 else "hostname"  # exporter 4.6 renamed it
        value = pod if i % 3 == 2 else node.name  # older exporters report their own pod name
        out.append(
            ExporterTarget(
                node=node.name,
                pod=pod,
                ip=f"10.42.{i // 250}.{i % 250 + 2}",
                hostname_label=label,
                hostname_value=value,
            )
        )
    return out


def _exporter_pods(window: Window, targets: Sequence[ExporterTarget]) -> list[Pod]:
    start = window.start - timedelta(days=30)
    return [
        Pod(
            namespace=EXPORTER_NAMESPACE,
            name=t.pod,
            uid=_uid(0, EXPORTER_NAMESPACE, t.pod),
            phase="Running",
            created_at=start,
            node=t.node,
            started_at=start,
            labels={"app": "nvidia-dcgm-exporter"},
            container="nvidia-dcgm-exporter",
        )
        for t in targets
    ]


def _telemetry_gaps(window: Window, nodes: Sequence[Node]) -> list[TelemetryGap]:
    """NotReady nodes serve nothing; one L4 node's exporter is down for 2 h mid-window."""
    gaps = [TelemetryGap(node=n.name, start=window.start, end=window.end) for n in nodes if not n.ready]
    l4 = [n.name for n in nodes if n.name.startswith("gpu-l4-")]
    if len(l4) >= 2:
        mid = window.start + (window.end - window.start) / 2
        gaps.append(TelemetryGap(node=l4[1], start=mid, end=mid + timedelta(hours=2)))
    return gaps


def _health_events(window: Window, nodes: Sequence[Node], gpus: Sequence[Gpu]) -> list[HealthEvent]:
    """XID 79 on the hidden H100 GPU, app XID 13, a row-remap failure, and a GPU running hot."""
    span = window.end - window.start
    events = []
    hidden = [n for n in nodes if n.allocatable.get(RESOURCE_GPU, 0) < n.capacity.get(RESOURCE_GPU, 0)]
    whole = {n.name: [g for g in gpus if g.node == n.name and not g.mig_profile] for n in nodes}
    if hidden:
        g = whole[hidden[0].name][-1]
        events.append(
            HealthEvent(node=g.node, uuid=g.uuid, kind="xid", value=79, start=window.start + span * 0.1)
        )
    a100 = [n.name for n in nodes if n.name.startswith("gpu-a100-") and n.ready and len(whole[n.name]) > 1]
    if a100:
        g = whole[a100[0]][1]
        events.append(
            HealthEvent(node=g.node, uuid=g.uuid, kind="xid", value=13, start=window.start + span * 0.5)
        )
    h100 = [n.name for n in nodes if n.name.startswith("gpu-h100-")]
    if len(h100) >= 2 and len(whole[h100[1]]) > 5:
        g = whole[h100[1]][5]
        events.append(
            HealthEvent(
                node=g.node, uuid=g.uuid, kind="row_remap_failure", value=1, start=window.start + span * 0.8
            )
        )
    l4 = [n.name for n in nodes if n.name.startswith("gpu-l4-")]
    if l4:
        g = whole[l4[0]][0]
        events.append(
            HealthEvent(node=g.node, uuid=g.uuid, kind="hot", value=25.0, start=window.start + span * 0.6)
        )
    return events


def _quotas(fleet: SimulatedFleet) -> list[ResourceQuota]:
    """A GPU quota per team namespace: hard = a round number above its peak, used = what runs now."""
    out = []
    running = [p for p in fleet.api_pods() if p.phase == "Running" and p.gpu_requests]
    for ns in fleet.namespaces:
        reqs = [p.gpu_requests for p in running if p.namespace == ns.name]
        if ns.name == EXPORTER_NAMESPACE:
            continue
        used: dict[str, float] = {}
        for r in reqs:
            for res, q in r.items():
                used[f"requests.{res}"] = used.get(f"requests.{res}", 0.0) + q
        hard = {k: float(max(4, math.ceil(v * 1.5 / 4) * 4)) for k, v in used.items()} or {
            f"requests.{RESOURCE_GPU}": 4.0
        }
        out.append(
            ResourceQuota(
                namespace=ns.name, name="gpu-quota", hard=hard, used=used or dict.fromkeys(hard, 0.0)
            )
        )
    return out


# ---------------------------------------------------------------------------------------------
# Telemetry


def _draw_utilization(rng: np.random.Generator, fleet: SimulatedFleet) -> np.ndarray:
    """util_ratio[gpu, sample] from the archetype of whoever holds it; NaN where no telemetry.

    A time-sliced GPU shows the sum of its replicas' work, capped at 1.
    """
    times = fleet.sample_times()
    n = len(times)
    hours = np.asarray(times.hour + times.minute / 60.0)
    weekday = np.asarray(times.day_of_week < 5)
    util = np.zeros((len(fleet.gpus), n))
    index = {(g.uuid, g.gpu_instance_id): i for i, g in enumerate(fleet.gpus)}
    t0 = fleet.window.start
    step = fleet.window.step_seconds
    for a in fleet.allocations:
        i0 = max(0, math.ceil((a.start - t0).total_seconds() / step))
        end = fleet.window.end if a.end is None else a.end
        i1 = min(n, math.ceil((end - t0).total_seconds() / step))
        if i1 <= i0:
            continue
        row = index[(a.uuid, a.gpu_instance_id)]
        curve = _archetype_curve(
            rng, fleet.archetypes[f"{a.namespace}/{a.pod}"], hours[i0:i1], weekday[i0:i1]
        )
        util[row, i0:i1] = np.minimum(1.0, util[row, i0:i1] + curve * (a.ge if a.replica else 1.0))
    # A GPU busy with work the API server does not know about (a process started by hand on the host).
    l4 = [i for i, g in enumerate(fleet.gpus) if g.node.startswith("gpu-l4-") and g.index == 3]
    if l4:
        lo, hi = int(n * 0.3), int(n * 0.35)
        free = ~_held_mask(fleet)[l4[0], lo:hi]
        util[l4[0], lo:hi] = np.where(free, 0.5, util[l4[0], lo:hi])
    util = np.round(util, 6)
    util[fleet.missing_mask()] = np.nan
    return util


def _archetype_curve(
    rng: np.random.Generator, archetype: str, hours: np.ndarray, weekday: np.ndarray
) -> np.ndarray:
    k = len(hours)
    if archetype == "training":
        curve = 0.92 + rng.normal(0, 0.03, k)
        curve[rng.random(k) < 0.02] = 0.1  # checkpoint stalls
    elif archetype == "inference":
        diurnal = 0.5 + 0.5 * np.sin(2 * np.pi * (hours - 9) / 24)
        curve = 0.12 + 0.5 * diurnal + rng.normal(0, 0.05, k)
    elif archetype == "notebook":
        working = weekday & (hours >= 9) & (hours < 17)
        burst = working & (rng.random(k) < 0.25)
        curve = np.where(burst, rng.uniform(0.2, 0.6, k), 0.0)
    elif archetype == "batch":
        curve = 0.8 + rng.normal(0, 0.08, k)
    else:  # stuck: holds the GPU, does nothing
        curve = np.zeros(k)
    return np.clip(curve, 0.0, 1.0)


def _telemetry_frame(fleet: SimulatedFleet) -> pd.DataFrame:
    times = fleet.sample_times()
    n_t = len(times)
    n_g = len(fleet.gpus)
    util = fleet.util_ratio
    mem = np.array([g.memory_bytes for g in fleet.gpus])
    tdp = np.array([_tdp(g.product) for g in fleet.gpus])
    rng = np.random.default_rng(fleet.seed + 1)
    held = _held_mask(fleet)
    fb_used = np.where(held, np.round(mem[:, None] * (0.35 + 0.5 * np.nan_to_num(util)) / BYTES_PER_MIB), 0.0)
    fb_used = fb_used * BYTES_PER_MIB
    power = np.round(tdp[:, None] * (0.12 + 0.8 * np.nan_to_num(util)) + rng.normal(0, 1.0, (n_g, n_t)), 3)
    power = np.maximum(power, 1.0)
    temp = np.round(32 + 45 * np.nan_to_num(util) + rng.normal(0, 0.7, (n_g, n_t)))
    xid = np.zeros((n_g, n_t))
    remap = np.zeros((n_g, n_t))
    for ev in fleet.events:
        rows = [i for i, g in enumerate(fleet.gpus) if g.uuid == ev.uuid]
        cols = times >= pd.Timestamp(ev.start)
        for r in rows:
            if ev.kind == "xid":
                xid[r, cols] = ev.value
            elif ev.kind == "row_remap_failure":
                remap[r, cols] = 1.0
            else:
                temp[r, cols] += ev.value
    # Whole-GPU fields repeat on every MIG instance of a GPU: draw once per physical GPU.
    first_of_uuid: dict[str, int] = {}
    for i, g in enumerate(fleet.gpus):
        j = first_of_uuid.setdefault(g.uuid, i)
        if j != i:
            power[i], temp[i] = power[j], temp[j]
    if any(g.mig_profile for g in fleet.gpus):
        for uuid, j in first_of_uuid.items():
            rows = [i for i, g in enumerate(fleet.gpus) if g.uuid == uuid]
            if len(rows) > 1:
                util_sum = np.nansum(util[rows], axis=0)
                p = np.round(tdp[j] * (0.12 + 0.8 * np.clip(util_sum, 0, 1)), 3)
                for r in rows:
                    power[r] = p
    energy = np.round(np.cumsum(power * fleet.window.step_seconds, axis=1)) + 1.0e6
    reset_node = next((n.name for n in fleet.nodes if n.name.startswith("gpu-h100-")), None)
    if reset_node:
        cut = n_t // 2
        on_node = np.array([g.node == reset_node for g in fleet.gpus])
        energy[on_node, cut:] -= energy[on_node, cut - 1][:, None]  # driver reload: the counter restarts
    frame = pd.DataFrame(
        {
            "timestamp": np.tile(times.to_numpy(), n_g),
            "node": np.repeat([g.node for g in fleet.gpus], n_t),
            "uuid": np.repeat([g.uuid for g in fleet.gpus], n_t),
            "gpu_instance_id": np.repeat([g.gpu_instance_id for g in fleet.gpus], n_t),
            "gpu_index": np.repeat([g.index for g in fleet.gpus], n_t),
            "util_ratio": util.ravel(),
            "fb_used_bytes": fb_used.ravel(),
            "fb_free_bytes": (mem[:, None] - fb_used).ravel(),
            "power_watts": power.ravel(),
            "temp_celsius": temp.ravel(),
            "energy_joules": energy.ravel(),
            "xid_last": xid.ravel(),
            "row_remap_failure": remap.ravel(),
            "uncorrectable_remapped_rows": remap.ravel() * 3,
        }
    )
    frame["timestamp"] = pd.to_datetime(frame["timestamp"], utc=True)
    present = ~fleet.missing_mask().ravel()
    return frame.loc[present].reset_index(drop=True)


def _tdp(product: str) -> float:
    pool = normalize_product(product)
    for spec in DEMO_POOLS:
        if normalize_product(spec.product) == pool:
            return spec.tdp_watts
    return 300.0


def _held_mask(fleet: SimulatedFleet) -> np.ndarray:
    n = fleet.window.n_samples
    held = np.zeros((len(fleet.gpus), n), dtype=bool)
    index = {(g.uuid, g.gpu_instance_id): i for i, g in enumerate(fleet.gpus)}
    for a, (i0, i1) in zip(fleet.allocations, _sample_spans(fleet, fleet.allocations), strict=True):
        held[index[(a.uuid, a.gpu_instance_id)], i0:i1] = True
    return held


def _sample_spans(fleet: SimulatedFleet, allocations: Iterable[Allocation]) -> list[tuple[int, int]]:
    """[i0, i1) sample range of each allocation: sample i is held if the pod held it at t_i."""
    t0 = fleet.window.start
    step = fleet.window.step_seconds
    n = fleet.window.n_samples
    out = []
    for a in allocations:
        end = fleet.window.end if a.end is None else a.end
        i0 = max(0, math.ceil((a.start - t0).total_seconds() / step))
        i1 = min(n, math.ceil((end - t0).total_seconds() / step))
        out.append((i0, max(i0, i1)))
    return out


def _truth_frame(fleet: SimulatedFleet) -> pd.DataFrame:
    times = fleet.sample_times().to_numpy()
    index = {(g.uuid, g.gpu_instance_id): i for i, g in enumerate(fleet.gpus)}
    pods = {(p.namespace, p.name): p for p in fleet.pods}
    node_pool = {n.name: n.pool for n in fleet.nodes}
    parts = []
    for a, (i0, i1) in zip(fleet.allocations, _sample_spans(fleet, fleet.allocations), strict=True):
        if i1 <= i0:
            continue
        row = index[(a.uuid, a.gpu_instance_id)]
        k = i1 - i0
        parts.append(
            pd.DataFrame(
                {
                    "timestamp": times[i0:i1],
                    "namespace": a.namespace,
                    "pod": a.pod,
                    "team": fleet.team_of(pods[(a.namespace, a.pod)]),
                    "node": a.node,
                    "pool": node_pool[a.node],
                    "uuid": a.uuid,
                    "gpu_instance_id": a.gpu_instance_id,
                    "ge_share": np.full(k, a.ge),
                    "util_ratio": fleet.util_ratio[row, i0:i1],
                }
            )
        )
    if not parts:
        return ATTRIBUTED.empty()
    frame = pd.concat(parts, ignore_index=True)
    frame["timestamp"] = pd.to_datetime(frame["timestamp"], utc=True)
    return frame
