"""The demo fleet of SPEC §5: its pools, teams and workload streams, and the scheduler that places them.

build_demo_fleet() is the simulated fleet every demo, test and benchmark starts from; simulate() builds
any fleet of PoolSpecs and Streams the same way.
"""

from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import numpy as np

from gpuwatch.core.model import (
    GPU_PRODUCT_LABEL,
    KUEUE_ADMISSION_GATE,
    KUEUE_QUEUE_LABEL,
    MIG_SLICES_PER_GPU,
    RESOURCE_AMD_GPU,
    RESOURCE_GAUDI,
    RESOURCE_GPU,
    RESOURCE_GPU_SHARED,
    RESOURCE_MIG_PREFIX,
    Allocation,
    Budgets,
    Commitment,
    DatedPrice,
    EnergyTariff,
    Gpu,
    Namespace,
    Node,
    NodeRequirement,
    Placement,
    Pod,
    Price,
    PriceBook,
    Taint,
    TeamRules,
    Toleration,
    Window,
    mig_profile_slices,
    normalize_product,
)
from gpuwatch.core.units import BYTES_PER_MIB
from gpuwatch.sim.fleet import (
    DRIVER_VERSION,
    EXPORTER_NAMESPACE,
    HealthEvent,
    SimulatedFleet,
    TelemetryGap,
    _draw_utilization,
    _exporter_pods,
    _exporter_targets,
    _quotas,
    _uid,
    gpu_uuid,
    stable_hex,
)
from gpuwatch.sim.kubeobjects import scheduler_message
from gpuwatch.sim.scheduler import PoolSpec, Stream, _generate_requests, _schedule

# notebooks carries no team label: the demo config maps it explicitly (SPEC §4.1 example).
DEMO_NAMESPACE_TEAMS: Mapping[str, str] = {"notebooks": "data-science"}


DEMO_PRICES_USD_PER_GPU_HOUR: Mapping[str, float] = {
    "NVIDIA-H100-80GB-HBM3": 4.0,
    "NVIDIA-A100-SXM4-80GB": 2.5,
    "NVIDIA-L4": 0.8,
    "TESLA-T4": 0.35,
    "AMD_INSTINCT_MI300X_OAM": 3.2,
}


# The A100's price drops by a fifth this long before the demo's end: a 30-day window prices its GPU-hours
# at both rates, a 24-hour or 7-day one at the new rate only.
DEMO_PRICE_CHANGE_BEFORE_END = timedelta(days=14)
DEMO_PRICE_CHANGE: tuple[str, float] = ("NVIDIA-A100-SXM4-80GB", 2.0)
# 24 of the 32 H100s reserved at $3.00 from half a day before the fleet's end: the pool's GPU-hour then
# costs (24 × 3.00 + 8 × 4.00) / 32 = $3.25.
DEMO_COMMITMENT_BEFORE_END = timedelta(hours=12)
DEMO_COMMITMENT: tuple[str, float, float] = ("NVIDIA-H100-80GB-HBM3", 24.0, 3.0)

# Monthly budgets: llm-research forecast just over its budget, platform (mostly idle GPUs) well over;
# idle-spend budgets for GPUTeamIdleSpendHigh.
DEMO_BUDGETS = Budgets(
    monthly_usd={"llm-research": 20_000.0, "data-science": 10_000.0, "platform": 3_000.0, "vision": 8_000.0},
    idle_usd_per_hour={"platform": 5.0, "data-science": 10.0},
)


# The power the demo's GPUs draw: 12 cents per kWh, a PUE of 1.3.
DEMO_ENERGY = EnergyTariff(usd_per_kwh=((None, 0.12),), pue=1.3)


def demo_price_book(
    default_usd_per_gpu_hour: float, end: datetime | None, energy: EnergyTariff | None = None
) -> PriceBook:
    """The demo's prices (and its energy tariff, unless `energy`); given the fleet's end, the A100's
    price changes DEMO_PRICE_CHANGE_BEFORE_END before it, and the H100 commitment begins
    DEMO_COMMITMENT_BEFORE_END before it (for a year)."""
    products: dict[str, Price] = dict(DEMO_PRICES_USD_PER_GPU_HOUR)
    commitments: dict[str, tuple[Commitment, ...]] = {}
    if end is not None:
        committed, gpus, rate = DEMO_COMMITMENT
        start = end - DEMO_COMMITMENT_BEFORE_END
        commitments[committed] = (
            Commitment(start=start, end=start + timedelta(days=365), gpus=gpus, usd_per_gpu_hour=rate),
        )
        product, new_price = DEMO_PRICE_CHANGE
        old_price = DEMO_PRICES_USD_PER_GPU_HOUR[product]
        products[product] = (
            DatedPrice(start=datetime(2000, 1, 1, tzinfo=UTC), usd_per_gpu_hour=old_price),
            DatedPrice(start=end - DEMO_PRICE_CHANGE_BEFORE_END, usd_per_gpu_hour=new_price),
        )
    return PriceBook(
        default_usd_per_gpu_hour=default_usd_per_gpu_hour,
        products=products,
        commitments=commitments,
        energy=energy or DEMO_ENERGY,
    )


# Every GPU node carries the taint GKE and the GPU Operator's users put on GPU nodes; the H100 nodes are also
# reserved for large training jobs, and pods must tolerate that to run there.
GPU_PRESENT_TAINT = Taint(key="nvidia.com/gpu", value="present", effect="NoSchedule")
H100_TAINT = Taint(key="dedicated", value="llm-training", effect="NoSchedule")
TOLERATE_GPU = Toleration(key="nvidia.com/gpu", operator="Exists", effect="NoSchedule")
TOLERATE_H100 = Toleration(key="dedicated", value="llm-training", effect="NoSchedule")

DEMO_POOLS: tuple[PoolSpec, ...] = (
    PoolSpec(
        product="NVIDIA-H100-80GB-HBM3",
        nodes=4,
        gpus_per_node=8,
        memory_mib=81559,
        name_prefix="h100",
        taints=(H100_TAINT,),
    ),
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
    # AMD Instinct beside the NVIDIA pools: the product as AMD's node labeller spells it, no DCGM profiling
    # fields (its exporter's gpu_gfx_activity stands for GPU utilization).
    PoolSpec(
        product="AMD_Instinct_MI300X_OAM",
        nodes=2,
        gpus_per_node=8,
        memory_mib=196608,
        name_prefix="mi300x",
        has_prof=False,
        tdp_watts=750.0,
        vendor="amd",
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
    # Last, so the NVIDIA pools' arrivals are drawn as before.
    Stream(
        namespace="llm-research",
        archetype="training",
        pool="mi300x",
        resource=RESOURCE_AMD_GPU,
        qty=4,
        concurrency=2,
        hours=(24, 72),
    ),
    Stream(
        namespace="genai-apps",
        archetype="inference",
        pool="mi300x",
        resource=RESOURCE_AMD_GPU,
        qty=1,
        concurrency=5,
        hours=(24, 96),
    ),
)


# The history `gpuwatch serve --demo` simulates: the longest window preset (30 days), the window before
# it (the Teams page compares with it) and a day for the presets' grid.
DEMO_HISTORY_DAYS = 61.0

# The clusters the default demo simulates (the demo's shape each, seeds 42, 43, ...); `--demo-clusters 1` is
# one cluster, unnamed, as a single live cluster is.
DEMO_CLUSTERS = ("eu-1", "us-1", "ap-1", "sa-1")
DEFAULT_DEMO_CLUSTERS = 2


def demo_end() -> datetime:
    """The demo fleet's "now": the current hour (UTC)."""
    return datetime.now(UTC).replace(minute=0, second=0, microsecond=0)


def build_demo_fleet(
    *,
    seed: int = 42,
    end: datetime | None = None,
    days: float = 7.0,
    step_seconds: int = 60,
    gpus: int | None = None,
    pods: int | None = None,
) -> SimulatedFleet:
    """The SPEC §5 demo fleet: 80 NVIDIA GPUs in four pools and 16 AMD MI300X, 13 teams, scaled to about
    `gpus` if given.

    `end` defaults to the current hour (UTC); pass it explicitly for a reproducible fleet. `pods`: about
    that many pods over the window, by living longer (as many run at once; lifetimes never shorten).
    """
    if end is None:
        end = demo_end()
    window = Window(start=end - timedelta(days=days), end=end, step_seconds=step_seconds)
    scale = _scale(gpus)
    streams = tuple(replace(s, concurrency=max(1, round(s.concurrency * scale))) for s in DEMO_STREAMS)
    if pods is not None:
        streams = _stretched(streams, window, pods)
    return simulate(
        seed=seed, window=window, pools=demo_pools(gpus), streams=streams, namespaces=DEMO_NAMESPACES
    )


def _scale(gpus: int | None) -> float:
    return 1.0 if gpus is None else gpus / sum(p.nodes * p.gpus_per_node for p in DEMO_POOLS)


def demo_pools(gpus: int | None = None) -> tuple[PoolSpec, ...]:
    """The demo fleet's pools, scaled to about `gpus` GPUs (as they are when None)."""
    scale = _scale(gpus)
    return tuple(replace(p, nodes=max(1, round(p.nodes * scale))) for p in DEMO_POOLS)


def _stretched(streams: Sequence[Stream], window: Window, pods: int) -> tuple[Stream, ...]:
    """The streams with every lifetime stretched by one factor (>= 1, found by bisection) so that they
    start about `pods` pods over the window."""

    def scaled(factor: float) -> tuple[Stream, ...]:
        return tuple(replace(s, hours=(s.hours[0] * factor, s.hours[1] * factor)) for s in streams)

    low, high = 1.0, 1e4
    if _expected_pods(streams, window) <= pods:
        return tuple(streams)
    for _ in range(60):
        mid = (low * high) ** 0.5
        low, high = (mid, high) if _expected_pods(scaled(mid), window) > pods else (low, mid)
    return scaled(high)


def _expected_pods(streams: Sequence[Stream], window: Window) -> float:
    """About how many pods the streams start over the window (each slot: a chain of pods and pauses,
    the first begun up to a lifetime before the window)."""
    hours = window.duration_seconds / 3600
    total = 0.0
    for s in streams:
        lo, hi = s.hours
        total += s.concurrency * (hours + hi / 2) / ((lo + hi) / 2 + max(lo * 0.1, 0.25))
    return total


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
    pods, allocations = _leave_holes(window, nodes, pods, allocations, prefix=HOLES_POOL)
    pods += _pending_demo_pods(window, nodes, allocations)
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
        team_rules=TeamRules(namespaces=DEMO_NAMESPACE_TEAMS),
        tdp_watts={p.product: p.tdp_watts for p in pools},
    )
    util = _draw_utilization(rng, fleet)
    return replace(fleet, util_ratio=util, quotas=tuple(_quotas(fleet)))


def _build_nodes(seed: int, pools: Sequence[PoolSpec]) -> tuple[list[Node], list[Gpu], dict[str, bool]]:
    nodes: list[Node] = []
    gpus: list[Gpu] = []
    has_prof: dict[str, bool] = {}
    for spec in pools:
        for n in range(spec.nodes):
            name = f"gpu-{spec.name_prefix}-{n:03d}"
            if spec.vendor != "nvidia":
                node, node_gpus = _other_vendor_node(seed, spec, name)
                nodes.append(node)
                gpus += node_gpus
                has_prof.update(dict.fromkeys((g.uuid for g in node_gpus), False))
                continue
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
                    taints=(GPU_PRESENT_TAINT, *spec.taints),
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


def _other_vendor_node(seed: int, spec: PoolSpec, name: str) -> tuple[Node, list[Gpu]]:
    """An AMD Instinct node as its device plugin and node labeller describe it (or a Gaudi node as Habana's
    feature discovery does), and its GPUs, known by the serial numbers their exporters label them with."""
    labels = {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux"}
    if spec.vendor == "amd":
        resource = RESOURCE_AMD_GPU
        labels |= {
            "amd.com/gpu.product-name": spec.product,
            "amd.com/gpu.vram": f"{spec.memory_mib // 1024}G",
            "amd.com/gpu.family": "AI",
            "amd.com/gpu.device-id": "74a1",
            "amd.com/gpu.cu-count": "304",
            "amd.com/gpu.simd-count": "1216",
        }
    else:
        resource = RESOURCE_GAUDI
        labels |= {"habana.ai/device.type": spec.product, "habana.ai/device.count": str(spec.gpus_per_node)}
    capacity = {resource: float(spec.gpus_per_node)}
    node = Node(
        name=name,
        product=spec.product,
        gpu_count=spec.gpus_per_node,
        gpu_memory_bytes=spec.memory_mib * BYTES_PER_MIB,
        capacity=capacity,
        allocatable=dict(capacity),
        labels=labels,
        taints=spec.taints,
    )
    gpus = [
        Gpu(
            node=name,
            uuid=str(int(stable_hex(seed, name, i, n=10), 16) % 10**12).zfill(12),
            index=i,
            product=spec.product,
            memory_bytes=spec.memory_mib * BYTES_PER_MIB,
        )
        for i in range(spec.gpus_per_node)
    ]
    return node, gpus


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


def _pending_demo_pods(window: Window, nodes: Sequence[Node], allocations: Sequence[Allocation]) -> list[Pod]:
    """Pods pending at `now`, one for each reason a GPU pod waits (SPEC §3): an 8-GPU H100 job and a
    4-GPU L4 job no pool has room for (capacity); a job the pool's free GPUs would fit in total but no
    single node (fragmentation): one GPU more than the largest free block of the first whole-GPU pool
    whose free GPUs are spread over several schedulable nodes at the last sample; a job pinned to a
    product the fleet lacks (affinity); one that does not tolerate the H100 nodes' reservation (taint);
    one asking for a MIG profile no node offers (mig_profile); one Kueue has not admitted (quota)."""
    h100, l4, a100 = "NVIDIA-H100-80GB-HBM3", "NVIDIA-L4", "NVIDIA-A100-SXM4-80GB"
    both = (TOLERATE_GPU, TOLERATE_H100)
    specs: list[tuple[str, str, str, str, float, float, Placement, Mapping[str, str]]] = [
        ("llm-research", "pretrain-70b-0", h100, RESOURCE_GPU, 8, 5.0, _pinned(h100, both), {}),
        ("search", "reindex-embed-0", l4, RESOURCE_GPU, 4, 1.5, _pinned(l4, (TOLERATE_GPU,)), {}),
    ]
    holes = _fragmented_pool(window, nodes, allocations)
    if holes is not None:
        product, gpus = holes
        specs.append(
            ("vision", "finetune-vit-0", product, RESOURCE_GPU, gpus, 2.5, _pinned(product, both), {})
        )
    b200 = Placement(
        node_affinity=((NodeRequirement(key=GPU_PRODUCT_LABEL, operator="In", values=("NVIDIA-B200",)),),),
        tolerations=(TOLERATE_GPU,),
    )
    specs += [
        ("llm-research", "eval-b200-0", "NVIDIA-B200", RESOURCE_GPU, 1, 3.0, b200, {}),
        ("vision", "sweep-h100-0", h100, RESOURCE_GPU, 1, 0.75, _pinned(h100, (TOLERATE_GPU,)), {}),
        (
            "genai-apps",
            "mig-7g-eval-0",
            a100,
            f"{RESOURCE_MIG_PREFIX}7g.80gb",
            1,
            2.0,
            _pinned(a100, (TOLERATE_GPU,)),
            {},
        ),
        (
            "search",
            "rerank-batch-0",
            l4,
            RESOURCE_GPU,
            2,
            4.0,
            replace(_pinned(l4, (TOLERATE_GPU,)), scheduling_gates=(KUEUE_ADMISSION_GATE,)),
            {KUEUE_QUEUE_LABEL: "search-queue"},
        ),
    ]
    products = {normalize_product(n.product) for n in nodes}
    out = []
    for ns, name, product, resource, qty, hours, placement, labels in specs:
        if product not in products and product != "NVIDIA-B200":
            continue
        pod = Pod(
            namespace=ns,
            name=name,
            uid=_uid(0, ns, name),
            phase="Pending",
            created_at=window.end - timedelta(hours=hours),
            labels={"app": "pending", **labels},
            gpu_requests={resource: float(qty)},
            node_selector_product=product,
            placement=placement,
        )
        out.append(
            replace(pod, placement=replace(placement, scheduler_message=scheduler_message(nodes, pod)))
        )
    return out


def _pinned(product: str, tolerations: tuple[Toleration, ...]) -> Placement:
    return Placement(node_selector={GPU_PRODUCT_LABEL: product}, tolerations=tolerations)


# The pool where the demo shows free GPUs that no waiting pod can use: spread one by one over nodes.
HOLES_POOL = "h100"


def _free_at_end(
    window: Window, nodes: Sequence[Node], allocations: Sequence[Allocation], prefix: str
) -> dict[str, int]:
    """Free whole GPUs per schedulable node of a pool at the window's last sample."""
    last = window.end - timedelta(seconds=window.step_seconds)
    held: dict[str, float] = {}
    for a in allocations:
        if a.start <= last and (a.end is None or a.end > last):
            held[a.node] = held.get(a.node, 0.0) + a.ge
    return {
        n.name: round(n.allocatable.get(RESOURCE_GPU, 0.0) - held.get(n.name, 0.0))
        for n in nodes
        if n.name.startswith(f"gpu-{prefix}-") and n.ready and not n.unschedulable
    }


def _leave_holes(
    window: Window, nodes: Sequence[Node], pods: list[Pod], allocations: list[Allocation], *, prefix: str
) -> tuple[list[Pod], list[Allocation]]:
    """Make sure the pool's free GPUs at `now` are spread over at least two schedulable nodes (SPEC §3
    fragmentation): where they are not, the smallest pods on full nodes finish an hour before the end."""
    finish = window.end - timedelta(hours=1)
    by_pod: dict[tuple[str, str], list[Allocation]] = {}
    for a in allocations:
        by_pod.setdefault((a.namespace, a.pod), []).append(a)
    ended: set[tuple[str, str]] = set()
    while True:
        free = _free_at_end(window, nodes, allocations, prefix)
        if len(free) < 2 or sum(1 for f in free.values() if f > 0) >= 2:
            break  # one schedulable node cannot be fragmented; or it is already
        full = {name for name, f in free.items() if f == 0}
        # The smallest pod still running on a full node, that started before the hour it ends at.
        candidates = sorted(
            (len(held), key)
            for key, held in by_pod.items()
            if key not in ended
            and {a.node for a in held} <= full
            and all(a.start < finish and a.end is None for a in held)
        )
        if not candidates:
            break  # a pool too small or too idle to show holes
        key = candidates[0][1]
        ended.add(key)
        closing = {id(a) for a in by_pod[key]}
        allocations = [replace(a, end=finish) if id(a) in closing else a for a in allocations]
        by_pod[key] = [replace(a, end=finish) for a in by_pod[key]]
    if ended:
        pods = [
            replace(p, phase="Succeeded", finished_at=finish) if (p.namespace, p.name) in ended else p
            for p in pods
        ]
    return pods, allocations


def _fragmented_pool(
    window: Window, nodes: Sequence[Node], allocations: Sequence[Allocation]
) -> tuple[str, int] | None:
    """(product, GPUs) of a request blocked by fragmentation at the window's last sample, if any pool has
    one: HOLES_POOL first, then the other whole-GPU pools in DEMO_POOLS order."""
    specs = sorted(DEMO_POOLS, key=lambda spec: spec.name_prefix != HOLES_POOL)
    for spec in specs:
        if spec.mig_layout or spec.replicas > 1:
            continue
        free = [f for f in _free_at_end(window, nodes, allocations, spec.name_prefix).values() if f > 0]
        if len(free) > 1:
            return normalize_product(spec.product), max(free) + 1
    return None


def _recent(window: Window, fraction: float, at_most: timedelta) -> datetime:
    """A moment `fraction` into the window, but no longer than `at_most` before its end: a long demo
    history keeps its events within the default windows (24 h for heat and the gap)."""
    return max(window.start + (window.end - window.start) * fraction, window.end - at_most)


def _telemetry_gaps(window: Window, nodes: Sequence[Node]) -> list[TelemetryGap]:
    """NotReady nodes serve nothing; one L4 node's exporter is down for 2 h mid-window (at most 14 h ago)."""
    gaps = [TelemetryGap(node=n.name, start=window.start, end=window.end) for n in nodes if not n.ready]
    l4 = [n.name for n in nodes if n.name.startswith("gpu-l4-")]
    if len(l4) >= 2:
        begin = _recent(window, 0.5, timedelta(hours=14))
        gaps.append(TelemetryGap(node=l4[1], start=begin, end=begin + timedelta(hours=2)))
    return gaps


def _health_events(window: Window, nodes: Sequence[Node], gpus: Sequence[Gpu]) -> list[HealthEvent]:
    """XID 79 on the hidden H100 GPU, app XID 13, a row-remap failure, and a GPU running hot (above the
    85 °C alert threshold until now)."""
    events = []
    hidden = [n for n in nodes if n.allocatable.get(RESOURCE_GPU, 0) < n.capacity.get(RESOURCE_GPU, 0)]
    whole: dict[str, list[Gpu]] = {n.name: [] for n in nodes}
    for gpu in gpus:
        if not gpu.mig_profile:
            whole[gpu.node].append(gpu)
    if hidden:
        g = whole[hidden[0].name][-1]
        events.append(
            HealthEvent(
                node=g.node, uuid=g.uuid, kind="xid", value=79, start=_recent(window, 0.1, timedelta(days=3))
            )
        )
    a100 = [n.name for n in nodes if n.name.startswith("gpu-a100-") and n.ready and len(whole[n.name]) > 1]
    if a100:
        g = whole[a100[0]][1]
        events.append(
            HealthEvent(
                node=g.node,
                uuid=g.uuid,
                kind="xid",
                value=13,
                start=_recent(window, 0.5, timedelta(hours=20)),
            )
        )
    h100 = [n.name for n in nodes if n.name.startswith("gpu-h100-")]
    if len(h100) >= 2 and len(whole[h100[1]]) > 5:
        g = whole[h100[1]][5]
        events.append(
            HealthEvent(
                node=g.node,
                uuid=g.uuid,
                kind="row_remap_failure",
                value=1,
                start=_recent(window, 0.8, timedelta(days=2)),
            )
        )
    l4 = [n.name for n in nodes if n.name.startswith("gpu-l4-")]
    if l4:
        g = whole[l4[0]][0]
        events.append(
            HealthEvent(
                node=g.node,
                uuid=g.uuid,
                kind="hot",
                value=89.0,
                start=_recent(window, 0.6, timedelta(hours=12)),
            )
        )
    return events
