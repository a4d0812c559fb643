"""Entities of a GPU fleet: frozen, slotted, keyword-only dataclasses with no I/O."""

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Final, Protocol

import numpy as np
import numpy.typing as npt

from gpuwatch.core.errors import ConfigError, DataError
from gpuwatch.core.units import BYTES_PER_MIB

MIG_SLICES_PER_GPU = 7
MAX_POINTS_PER_SERIES = 11_000  # Prometheus refuses range queries above this many points per series.
RESOURCE_GPU = "nvidia.com/gpu"
RESOURCE_GPU_SHARED = "nvidia.com/gpu.shared"
RESOURCE_MIG_PREFIX = "nvidia.com/mig-"
GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"  # GFD's node label naming the GPU product
# AMD Instinct (ROCm/k8s-device-plugin): amd.com/gpu is one unit per GPU, or per compute partition of a
# partitioned GPU (the default "single" naming strategy); the "mixed" strategy names partitions by mode,
# amd.com/cpx_nps4. The node labeller writes amd.com/gpu.* (beta.amd.com/gpu.* in its legacy form).
RESOURCE_AMD_GPU = "amd.com/gpu"
AMD_PRODUCT_LABEL = "amd.com/gpu.product-name"  # AMD_Instinct_MI300X_OAM
AMD_PARTITION_LABEL = "amd.com/gpu.compute-memory-partition"  # cpx_nps4; only where every GPU is alike
# Compute partitions per GPU of each mode (amdsmi's accelerator partition profiles, MI300X: 8 XCDs).
AMD_COMPUTE_PARTITIONS: Final[Mapping[str, int]] = {"spx": 1, "dpx": 2, "tpx": 3, "qpx": 4, "cpx": 8}
_AMD_PARTITION_RESOURCE = re.compile(r"^amd\.com/(spx|dpx|tpx|qpx|cpx)_nps\d+$")
# Intel Gaudi (Habana device plugin): habana.ai/gaudi, one unit per accelerator, every generation; Habana's
# feature discovery names the generation (GAUDI2) in habana.ai/device.type.
RESOURCE_GAUDI = "habana.ai/gaudi"
GAUDI_PRODUCT_LABEL = "habana.ai/device.type"
VENDORS = ("nvidia", "amd", "intel")
_VENDOR_OF_DOMAIN = {"nvidia.com": "nvidia", "amd.com": "amd", "habana.ai": "intel"}
# Node labels naming a node's accelerator product, and whose they are, in the order they are looked for.
PRODUCT_LABELS: Final[Mapping[str, str]] = {
    GPU_PRODUCT_LABEL: "nvidia",
    AMD_PRODUCT_LABEL: "amd",
    f"beta.{AMD_PRODUCT_LABEL}": "amd",
    GAUDI_PRODUCT_LABEL: "intel",
}
# Taints the node lifecycle controller sets (cordoned, NotReady, unreachable, pressure): node states the
# ledger already counts as not schedulable, so they make a pod wait for capacity, not for a toleration.
LIFECYCLE_TAINT_PREFIX = "node.kubernetes.io/"
REPELLING_EFFECTS = frozenset({"NoSchedule", "NoExecute"})  # PreferNoSchedule never keeps a pod off
KUEUE_ADMISSION_GATE = "kueue.x-k8s.io/admission"  # Kueue's scheduling gate on a pod it has not admitted
KUEUE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"  # the LocalQueue a pod or job is submitted to
# SPEC §3: every GE-hour of capacity is in exactly one state. allocated_unknown holds the allocated GE-hours
# whose utilization is unknown (no telemetry): never drawn or counted as idle or active.
LEDGER_STATES = (
    "unavailable",
    "stranded",
    "unallocated",
    "allocated_unknown",
    "allocated_idle",
    "allocated_active",
)
ALLOCATED_STATES = ("allocated_unknown", "allocated_idle", "allocated_active")

_POOL_SUFFIX = re.compile(r"(-SHARED|-MIG-.*)$", re.IGNORECASE)
_MIG_PROFILE = re.compile(r"^(\d+)g\.\d+gb(\+\w+)?$")


def normalize_product(product: str) -> str:
    """Pool name of a GPU product: upper case, spaces as dashes, -SHARED / -MIG-* suffixes stripped.

    >>> normalize_product("NVIDIA H100 80GB HBM3")
    'NVIDIA-H100-80GB-HBM3'
    >>> normalize_product("Tesla-T4-SHARED")
    'TESLA-T4'
    """
    name = re.sub(r"\s+", "-", product.strip())
    return _POOL_SUFFIX.sub("", name).upper()


def mig_profile_slices(profile: str) -> int:
    """GPU-instance slices of a MIG profile: "3g.40gb" -> 3 (of 7)."""
    match = _MIG_PROFILE.match(profile)
    if match is None or not 1 <= int(match.group(1)) <= MIG_SLICES_PER_GPU:
        raise DataError(f"unknown MIG profile {profile!r}")
    return int(match.group(1))


def is_gpu_resource(resource: str) -> bool:
    return (
        resource in (RESOURCE_GPU, RESOURCE_GPU_SHARED, RESOURCE_AMD_GPU, RESOURCE_GAUDI)
        or resource.startswith(RESOURCE_MIG_PREFIX)
        or _AMD_PARTITION_RESOURCE.match(resource) is not None
    )


def amd_partitions(mode: str) -> int:
    """Compute partitions per GPU of an AMD partition mode ("cpx_nps4" -> 8); 1 for "" or an unknown mode."""
    return AMD_COMPUTE_PARTITIONS.get(mode.partition("_")[0].lower(), 1)


def vendor_of_resource(resource: str) -> str:
    """The accelerator vendor whose device plugin advertises a GPU resource: nvidia, amd or intel.

    >>> vendor_of_resource("habana.ai/gaudi")
    'intel'
    """
    if not is_gpu_resource(resource):
        raise DataError(f"not a GPU resource: {resource!r}")
    return _VENDOR_OF_DOMAIN[resource.partition("/")[0]]


def node_product(labels: Mapping[str, str]) -> str:
    """The accelerator product a node's labels name (GFD's, AMD's node labeller's...), "" when none does."""
    return next((labels[k] for k in PRODUCT_LABELS if labels.get(k)), "")


def product_label(product: str) -> str:
    """The node label naming a product, to select its nodes by: AMD's node labeller writes products as
    "AMD_Instinct_MI300X_OAM" and Habana's feature discovery Gaudi types as "GAUDI2"; GFD writes the rest.
    """
    name = normalize_product(product)
    if name.startswith("AMD"):
        return AMD_PRODUCT_LABEL
    return GAUDI_PRODUCT_LABEL if name.startswith("GAUDI") else GPU_PRODUCT_LABEL


def ge_per_unit(resource: str, replicas: int = 1) -> float:
    """GPU-equivalents of one unit of an extended resource (SPEC §3).

    A whole GPU is 1, a MIG instance slices/7, a time-sliced replica or a GPU's compute partition
    1/replicas (an AMD GPU in CPX mode advertises one amd.com/gpu per partition, or one amd.com/cpx_nps4:
    1/8 either way). A Gaudi is 1.
    """
    if resource.startswith(RESOURCE_MIG_PREFIX):
        return mig_profile_slices(resource.removeprefix(RESOURCE_MIG_PREFIX)) / MIG_SLICES_PER_GPU
    if _AMD_PARTITION_RESOURCE.match(resource):
        return 1.0 / amd_partitions(resource.removeprefix("amd.com/"))
    if resource in (RESOURCE_GPU, RESOURCE_GPU_SHARED, RESOURCE_AMD_GPU):
        return 1.0 / max(replicas, 1)
    if resource == RESOURCE_GAUDI:
        return 1.0
    raise DataError(f"not a GPU resource: {resource!r}")


def qualified(cluster: str, name: str) -> str:
    """A node's or pod's name in a fleet of several clusters: "eu-1/gpu-h100-000" (Kubernetes names hold
    no "/", so the cluster is always the part before it)."""
    return f"{cluster}/{name}" if cluster and name else name


def cluster_of(name: str, default: str = "") -> str:
    """The cluster a qualified() name belongs to; `default` for a name of the one cluster gpuwatch watches."""
    return name.partition("/")[0] if "/" in name else default


def utc(dt: datetime) -> datetime:
    """The same instant as a tz-aware UTC datetime (naive input is taken as UTC)."""
    return dt.replace(tzinfo=UTC) if dt.tzinfo is None else dt.astimezone(UTC)


@dataclass(frozen=True, slots=True, kw_only=True)
class SourceWait:
    """A read of an outside system under way: what a page or a cycle is waiting for, and for how long."""

    source: str  # "prometheus" | "kubernetes"
    url: str
    seconds: float
    cluster: str = ""  # the cluster of several whose source it is

    @property
    def what(self) -> str:
        """ "Prometheus at http://prometheus:9090" (with the cluster's name when there are several)."""
        name = "Prometheus" if self.source == "prometheus" else "the Kubernetes API"
        return f"{name} at {self.url}" + (f" (cluster {self.cluster})" if self.cluster else "")


@dataclass(frozen=True, slots=True, kw_only=True)
class Window:
    """Half-open time window [start, end) sampled every step; sample i stands for [t_i, t_i + step)."""

    start: datetime
    end: datetime
    step_seconds: int = 60

    def __post_init__(self) -> None:
        if self.start.tzinfo is None or self.end.tzinfo is None:
            raise ConfigError("window start and end must carry a time zone")
        if self.end <= self.start:
            raise ConfigError(
                f"window end {self.end.isoformat()} is not after start {self.start.isoformat()}"
            )
        if self.step_seconds <= 0:
            raise ConfigError(f"step must be positive, got {self.step_seconds}s")

    @property
    def duration_seconds(self) -> float:
        return (self.end - self.start).total_seconds()

    @property
    def n_samples(self) -> int:
        return math.ceil(self.duration_seconds / self.step_seconds)

    @property
    def step_hours(self) -> float:
        return self.step_seconds / 3600.0

    def sample_time(self, i: int) -> datetime:
        return self.start + timedelta(seconds=i * self.step_seconds)

    def coarsened(self, max_points: int = MAX_POINTS_PER_SERIES) -> "Window":
        """The same window with the step raised (to a whole multiple) so no series exceeds max_points."""
        factor = math.ceil(self.duration_seconds / self.step_seconds / max_points)
        if factor <= 1:
            return self
        return Window(start=self.start, end=self.end, step_seconds=self.step_seconds * factor)


@dataclass(frozen=True, slots=True, kw_only=True)
class Node:
    """A Kubernetes node with GPUs, as its GFD labels and status describe it (GPU resources only)."""

    name: str
    product: str
    gpu_count: int
    gpu_memory_bytes: float = math.nan
    capacity: Mapping[str, float] = field(default_factory=dict)
    allocatable: Mapping[str, float] = field(default_factory=dict)
    replicas: int = 1
    mig_strategy: str = "none"
    ready: bool = True
    unschedulable: bool = False
    labels: Mapping[str, str] = field(default_factory=dict)
    taints: tuple["Taint", ...] = ()

    @property
    def pool(self) -> str:
        return normalize_product(self.product)

    @property
    def vendor(self) -> str:
        """nvidia, amd or intel: whose device plugin advertises the node's GPUs (else whose label names
        its product; a node neither names is taken for NVIDIA's, gpuwatch's first vendor)."""
        for resource in (*self.capacity, *self.allocatable):
            if is_gpu_resource(resource):
                return vendor_of_resource(resource)
        return next((v for k, v in PRODUCT_LABELS.items() if self.labels.get(k)), "nvidia")

    def allocatable_gpus(self) -> float:
        """Allocatable capacity in GPU-equivalents."""
        return sum(
            ge_per_unit(r, self.replicas) * q for r, q in self.allocatable.items() if is_gpu_resource(r)
        )

    def capacity_gpus(self) -> float:
        """Advertised capacity in GPU-equivalents."""
        return sum(ge_per_unit(r, self.replicas) * q for r, q in self.capacity.items() if is_gpu_resource(r))


@dataclass(frozen=True, slots=True, kw_only=True)
class Taint:
    """A node taint: pods that do not tolerate it are kept off the node (NoSchedule, NoExecute) or
    placed there last (PreferNoSchedule)."""

    key: str
    value: str = ""
    effect: str = "NoSchedule"

    def __str__(self) -> str:
        return f"{self.key}={self.value}:{self.effect}" if self.value else f"{self.key}:{self.effect}"


@dataclass(frozen=True, slots=True, kw_only=True)
class Toleration:
    """A pod's toleration, with Kubernetes' matching rules: operator Exists matches any value (and with
    an empty key any taint), Equal the value given; an empty effect matches every effect."""

    key: str = ""
    operator: str = "Equal"
    value: str = ""
    effect: str = ""

    def tolerates(self, taint: Taint) -> bool:
        if self.effect and self.effect != taint.effect:
            return False
        if self.operator == "Exists":
            return not self.key or self.key == taint.key
        return self.key == taint.key and self.value == taint.value

    def __str__(self) -> str:
        """As `kubectl describe pod` lists it: key=value:effect, or key:effect op=Exists."""
        if self.operator == "Exists":
            what = f"{self.key}:{self.effect}" if self.effect else self.key
            return f"{what} op=Exists".strip()
        what = f"{self.key}={self.value}"
        return f"{what}:{self.effect}" if self.effect else what


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeRequirement:
    """One match expression of a node selector term (In, NotIn, Exists, DoesNotExist, Gt, Lt) on a
    node label, or on the node's name for a matchFields `metadata.name` requirement."""

    key: str
    operator: str
    values: tuple[str, ...] = ()
    on_field: bool = False

    def matches(self, node: "Node") -> bool:
        """As the scheduler evaluates it: a missing label is in no set; Gt/Lt compare integers."""
        value = (
            (node.name if self.key == "metadata.name" else None)
            if self.on_field
            else node.labels.get(self.key)
        )
        op = self.operator
        if op == "In":
            return value is not None and value in self.values
        if op == "NotIn":
            return value is None or value not in self.values
        if op == "Exists":
            return value is not None
        if op == "DoesNotExist":
            return value is None
        if op in ("Gt", "Lt") and value is not None and len(self.values) == 1:
            try:
                have, bound = int(value), int(self.values[0])
            except ValueError:
                return False
            return have > bound if op == "Gt" else have < bound
        return False

    def __str__(self) -> str:
        if self.operator in ("Exists", "DoesNotExist"):
            return f"{self.key} {self.operator}"
        if self.operator in ("Gt", "Lt"):
            return f"{self.key} {self.operator} {self.values[0] if self.values else ''}"
        return f"{self.key} {self.operator} ({', '.join(self.values)})"


@dataclass(frozen=True, slots=True, kw_only=True)
class Placement:
    """What a pending pod asks of a node, and what holds it back, as its spec and status say.

    node_affinity: the required node affinity's terms, any one of which must match (the expressions
    within a term all must). scheduler_message: the PodScheduled=False condition's message, the
    scheduler's own words ("" when it has not said)."""

    node_selector: Mapping[str, str] = field(default_factory=dict)
    node_affinity: tuple[tuple[NodeRequirement, ...], ...] = ()
    tolerations: tuple[Toleration, ...] = ()
    scheduling_gates: tuple[str, ...] = ()
    scheduler_message: str = ""

    def matches(self, node: "Node") -> bool:
        """The node selector (every label equal) and any one required affinity term (an empty term
        matches no node, as in Kubernetes)."""
        if any(node.labels.get(k) != v for k, v in self.node_selector.items()):
            return False
        return not self.node_affinity or any(
            term and all(r.matches(node) for r in term) for term in self.node_affinity
        )

    def untolerated(self, node: "Node") -> list[Taint]:
        """The node's NoSchedule/NoExecute taints no toleration of the pod tolerates (lifecycle taints:
        node states, counted as such, aside)."""
        return [
            t
            for t in node.taints
            if t.effect in REPELLING_EFFECTS
            and not t.key.startswith(LIFECYCLE_TAINT_PREFIX)
            and not any(tol.tolerates(t) for tol in self.tolerations)
        ]


@dataclass(frozen=True, slots=True, kw_only=True)
class Namespace:
    name: str
    labels: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True, kw_only=True)
class Pod:
    """A pod and the GPU resources it requests (extended resources: limits == requests)."""

    namespace: str
    name: str
    uid: str
    phase: str
    created_at: datetime
    node: str | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    labels: Mapping[str, str] = field(default_factory=dict)
    gpu_requests: Mapping[str, float] = field(default_factory=dict)
    node_selector_product: str | None = None
    container: str = "main"
    placement: Placement | None = None  # read for pending pods only: what keeps them waiting

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True, slots=True, kw_only=True)
class ResourceQuota:
    namespace: str
    name: str
    hard: Mapping[str, float] = field(default_factory=dict)
    used: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True, slots=True, kw_only=True)
class Gpu:
    """A telemetry unit: a whole GPU, or one MIG GPU instance (parent UUID + GPU_I_ID)."""

    node: str
    uuid: str
    index: int
    product: str
    memory_bytes: float
    gpu_instance_id: str = ""
    mig_profile: str = ""
    replicas: int = 1

    @property
    def ge(self) -> float:
        """GPU-equivalents of the whole unit (a MIG instance is slices/7)."""
        return mig_profile_slices(self.mig_profile) / MIG_SLICES_PER_GPU if self.mig_profile else 1.0


@dataclass(frozen=True, slots=True, kw_only=True)
class Allocation:
    """A pod holding (part of) a GPU over [start, end); end None = still holding."""

    namespace: str
    pod: str
    node: str
    uuid: str
    gpu_instance_id: str
    replica: str
    resource: str
    ge: float
    start: datetime
    end: datetime | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class TeamRules:
    """How a pod's team is found (SPEC §3): pod labels, namespace labels, explicit map, namespace name."""

    pod_label_keys: tuple[str, ...] = ("team",)
    namespace_label_keys: tuple[str, ...] = ("team",)
    namespaces: Mapping[str, str] = field(default_factory=dict)

    def team_of(
        self, *, namespace: str, pod_labels: Mapping[str, str], namespace_labels: Mapping[str, str]
    ) -> str:
        for key in self.pod_label_keys:
            if pod_labels.get(key):
                return pod_labels[key]
        for key in self.namespace_label_keys:
            if namespace_labels.get(key):
                return namespace_labels[key]
        return self.namespaces.get(namespace) or namespace


HOURS_PER_MONTH: Final = 730.0  # 365 × 24 / 12: the month amortization and budgets count in


@dataclass(frozen=True, slots=True, kw_only=True)
class DatedPrice:
    """A price in force from `start` (UTC) until the next dated price of its product."""

    start: datetime
    usd_per_gpu_hour: float


@dataclass(frozen=True, slots=True, kw_only=True)
class Amortization:
    """An owned GPU's cost spread over its life: (purchase − residual) / (months × HOURS_PER_MONTH)."""

    purchase_usd: float
    months: int
    residual_usd: float = 0.0

    @property
    def usd_per_gpu_hour(self) -> float:
        return (self.purchase_usd - self.residual_usd) / (self.months * HOURS_PER_MONTH)


@dataclass(frozen=True, slots=True, kw_only=True)
class Commitment:
    """GPUs of one product paid for at a committed rate from `start` until `end` (a reservation or a
    committed-use discount), whether that many are present or not."""

    start: datetime
    end: datetime
    gpus: float
    usd_per_gpu_hour: float


def in_force(
    starts: "npt.NDArray[np.float64]",
    prices: "npt.NDArray[np.float64]",
    seconds: "npt.ArrayLike",
    *,
    before: float,
) -> "npt.NDArray[np.float64]":
    """Of dated prices (each in force from its start, increasing epoch seconds, until the next), the one
    in force at each of `seconds`; `before` where it is earlier than every start."""
    k = np.searchsorted(starts, np.asarray(seconds, dtype=np.float64), side="right") - 1
    return np.where(k >= 0, prices[np.maximum(k, 0)], before)


# A product's price: one for all time, or dated prices (each from its start until the next).
Price = float | tuple[DatedPrice, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class EnergyTariff:
    """What the GPUs' energy costs: USD per kWh, each price in force from its start (None: since always)
    until the next, and the PUE (facility ÷ IT power) that charges the data centre's overhead to it."""

    usd_per_kwh: tuple[tuple[datetime | None, float], ...]
    pue: float = 1.0

    def schedule(self) -> tuple["npt.NDArray[np.float64]", "npt.NDArray[np.float64]"]:
        """Epoch seconds each price is in force from (−inf: since always), and the prices."""
        starts = [-np.inf if start is None else start.timestamp() for start, _ in self.usd_per_kwh]
        return np.asarray(starts, dtype=np.float64), np.asarray([p for _, p in self.usd_per_kwh])


@dataclass(frozen=True, slots=True, kw_only=True)
class PriceBook:
    """USD per GPU-hour by normalized product: a price for all time, dated prices, or an amortized
    purchase; `default` for products it does not name and before a product's first dated price."""

    default_usd_per_gpu_hour: float = 2.0
    products: Mapping[str, Price] = field(default_factory=dict)
    amortization: Mapping[str, Amortization] = field(default_factory=dict)
    commitments: Mapping[str, tuple[Commitment, ...]] = field(default_factory=dict)
    energy: EnergyTariff | None = None  # None: energy is measured, its cost unknown

    def usd_per_gpu_hour(self, product: str, at: datetime) -> float:
        """The price in force at `at`."""
        return float(self.prices_at(product, np.asarray([utc(at).timestamp()]))[0])

    def prices_at(self, product: str, seconds: "npt.NDArray[np.float64]") -> "npt.NDArray[np.float64]":
        """The price in force at each of `seconds` (epoch seconds), vectorized."""
        starts, prices = self.schedule(product)
        return in_force(starts, prices, seconds, before=self.default_usd_per_gpu_hour)

    def rates(
        self,
        names: Sequence[str],
        codes: "npt.NDArray[np.intp]",
        seconds: "npt.NDArray[np.float64]",
        gpus: "npt.NDArray[np.float64] | None" = None,
    ) -> "npt.NDArray[np.float64]":
        """Per row, the price of product names[codes[row]] in force at seconds[row] (epoch seconds):
        rows factorized by the caller, so each product's schedule is looked up once. With `gpus` (per
        row, the product's GPUs present then) a product's committed GPUs are blended in (blended())."""
        out = np.empty(len(codes), dtype=np.float64)
        for k, name in enumerate(names):
            rows = codes == k
            if gpus is None or not self.commits(name):
                out[rows] = self.prices_at(name, seconds[rows])
            else:
                out[rows] = self.blended(name, seconds[rows], gpus[rows])[0]
        return out

    def commits(self, product: str) -> tuple[Commitment, ...]:
        """The product's commitments, the cheapest first."""
        wanted = normalize_product(product)
        found = [c for k, v in self.commitments.items() if normalize_product(k) == wanted for c in v]
        return tuple(sorted(found, key=lambda c: (c.usd_per_gpu_hour, c.start)))

    def blended(
        self, product: str, seconds: "npt.NDArray[np.float64]", gpus: "npt.NDArray[np.float64]"
    ) -> tuple["npt.NDArray[np.float64]", "npt.NDArray[np.float64]"]:
        """Per sample (epoch seconds, the product's GPUs present then): the USD per GPU-hour of each
        present GPU, and the USD per hour paid for committed GPUs none was present for. Of the GPUs
        present, as many as are committed then (start <= t < end) are priced at the committed rates,
        the cheapest commitment first; the rest at the on-demand price in force (prices_at()); every
        GPU present costs the mean of those. No GPU present (or unknown how many): the on-demand price."""
        on_demand = self.prices_at(product, seconds)
        present = np.clip(np.nan_to_num(np.asarray(gpus, dtype=np.float64), nan=0.0), 0.0, None)
        left = present.copy()
        committed_usd = np.zeros(len(present), dtype=np.float64)
        unused_usd = np.zeros(len(present), dtype=np.float64)
        for c in self.commits(product):
            active = (seconds >= c.start.timestamp()) & (seconds < c.end.timestamp())
            paid_for = np.where(active, c.gpus, 0.0)
            covered = np.minimum(left, paid_for)
            committed_usd += covered * c.usd_per_gpu_hour
            unused_usd += (paid_for - covered) * c.usd_per_gpu_hour
            left -= covered
        some = present > 0
        mean = (committed_usd + left * on_demand) / np.where(some, present, 1.0)
        return np.where(some, mean, on_demand), unused_usd

    def schedule(self, product: str) -> tuple["npt.NDArray[np.float64]", "npt.NDArray[np.float64]"]:
        """Epoch seconds each of the product's prices is in force from (−inf: all time), and the prices."""
        price = self.normalized().get(normalize_product(product), self.default_usd_per_gpu_hour)
        if isinstance(price, tuple):
            starts = [p.start.timestamp() for p in price]
            return np.asarray(starts, dtype=np.float64), np.asarray([p.usd_per_gpu_hour for p in price])
        return np.asarray([-np.inf]), np.asarray([float(price)])

    def changes(self, start: datetime, end: datetime) -> list[tuple[str, datetime]]:
        """(product, when) of every dated price that takes effect, and every commitment that begins or
        ends, inside (start, end], by time."""
        found = [
            (product, p.start)
            for product, price in self.normalized().items()
            if isinstance(price, tuple)
            for p in price
            if start < p.start <= end
        ]
        found += [
            (normalize_product(product), when)
            for product, commitments in self.commitments.items()
            for c in commitments
            for when in (c.start, c.end)
            if start < when <= end
        ]
        return sorted(set(found), key=lambda c: (c[1], c[0]))

    def knows(self, product: str) -> bool:
        return normalize_product(product) in self.normalized()

    def normalized(self) -> dict[str, Price]:
        amortized: dict[str, Price] = {
            normalize_product(k): a.usd_per_gpu_hour for k, a in self.amortization.items()
        }
        return amortized | {normalize_product(k): v for k, v in self.products.items()}


@dataclass(frozen=True, slots=True, kw_only=True)
class Budgets:
    """Per team: a monthly spend budget (USD per calendar month) and an idle-spend budget (USD per hour of
    idle-allocated GPUs, the budget GPUTeamIdleSpendHigh compares with). Teams not named have none."""

    monthly_usd: Mapping[str, float] = field(default_factory=dict)
    idle_usd_per_hour: Mapping[str, float] = field(default_factory=dict)


def month_hours(window_end: datetime) -> float:
    """Hours of the calendar month (UTC) the window's last instant falls in: a window ending at
    2026-12-01T00:00Z is November's, 720 h."""
    last = utc(window_end) - timedelta(microseconds=1)
    first = datetime(last.year, last.month, 1, tzinfo=UTC)
    following = datetime(last.year + last.month // 12, last.month % 12 + 1, 1, tzinfo=UTC)
    return (following - first).total_seconds() / 3600.0


def forecast_month_usd(cost_usd: float, window: Window) -> float:
    """Straight-line spend for the calendar month of the window's end at the window's rate: cost_usd ÷
    window hours × month hours. For a month-to-date window this is the spend so far plus the same rate
    until the month's end."""
    return cost_usd / (window.duration_seconds / 3600.0) * month_hours(window.end)


@dataclass(frozen=True, slots=True, kw_only=True)
class IdleParams:
    threshold_ratio: float = 0.05
    window_seconds: int = 1800
    # Idle GPUs whose framebuffer holds at least this much are "held" (a loaded model, a parked notebook);
    # below it, "abandoned" (a CUDA context at most).
    held_fb_bytes: float = 1024 * BYTES_PER_MIB
    # An idle-allocated pod idle this long in a pool where GPU pods wait is a reclaim candidate.
    reclaim_after_seconds: int = 7200


# ---------------------------------------------------------------------------------------------
# Kueue (kueue.x-k8s.io): the quota queues GPU workloads wait in, read-only. GPU resources only.


@dataclass(frozen=True, slots=True, kw_only=True)
class ResourceFlavor:
    """A Kueue ResourceFlavor: the nodes its quota stands for are those carrying every one of
    node_labels (GFD's nvidia.com/gpu.product names their GPU product). node_taints: taints those nodes
    carry, which a workload must tolerate; tolerations: what Kueue adds to the pods it admits on it."""

    name: str
    node_labels: Mapping[str, str] = field(default_factory=dict)
    node_taints: tuple[Taint, ...] = ()
    tolerations: tuple[Toleration, ...] = ()

    @property
    def product(self) -> str:
        """The GPU product its nodes carry ("" when the flavor does not name one)."""
        return node_product(self.node_labels)

    def selects(self, labels: Mapping[str, str]) -> bool:
        """Whether a node with these labels is one of the flavor's (an empty flavor selects every node)."""
        return all(labels.get(k) == v for k, v in self.node_labels.items())


@dataclass(frozen=True, slots=True, kw_only=True)
class FlavorQuota:
    """A ClusterQueue's (or Cohort's) quota of one GPU resource in one flavor. borrowing_limit: how much
    more it may borrow from its cohort; lending_limit: how much of its unused nominal quota the cohort
    may lend to others. NaN: no limit set (unlimited)."""

    flavor: str
    resource: str
    nominal: float
    borrowing_limit: float = math.nan
    lending_limit: float = math.nan


@dataclass(frozen=True, slots=True, kw_only=True)
class FlavorUsage:
    """What a ClusterQueue's workloads hold of one GPU resource in one flavor; `borrowed` is the part
    above its nominal quota, taken from its cohort."""

    flavor: str
    resource: str
    total: float
    borrowed: float = 0.0


@dataclass(frozen=True, slots=True, kw_only=True)
class ClusterQueue:
    """A Kueue ClusterQueue: its cohort ("" = none), GPU quotas, and its status. usage is
    status.flavorsUsage (admitted workloads), reserved status.flavorsReservation (quota reserved:
    admitted, and those still waiting for admission checks)."""

    name: str
    cohort: str = ""
    quotas: tuple[FlavorQuota, ...] = ()
    usage: tuple[FlavorUsage, ...] = ()
    reserved: tuple[FlavorUsage, ...] = ()
    pending_workloads: int = 0
    reserving_workloads: int = 0
    admitted_workloads: int = 0

    def quota(self, flavor: str, resource: str) -> FlavorQuota | None:
        return next((q for q in self.quotas if q.flavor == flavor and q.resource == resource), None)

    def used(self, flavor: str, resource: str) -> FlavorUsage | None:
        return next((u for u in self.usage if u.flavor == flavor and u.resource == resource), None)


@dataclass(frozen=True, slots=True, kw_only=True)
class Cohort:
    """A Kueue Cohort object (cohorts also exist by name alone, as ClusterQueue.cohort): its parent
    cohort ("" = a root) and the GPU quota it holds itself."""

    name: str
    parent: str = ""
    quotas: tuple[FlavorQuota, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class LocalQueue:
    """A Kueue LocalQueue: where a namespace's workloads are submitted, and the ClusterQueue behind it."""

    namespace: str
    name: str
    cluster_queue: str
    pending_workloads: int = 0
    reserving_workloads: int = 0
    admitted_workloads: int = 0

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True, slots=True, kw_only=True)
class Workload:
    """A Kueue Workload: a job (or pod) waiting for quota, or holding it.

    gpu_requests: per GPU resource, the total over its pod sets (pods × per-pod request).
    cluster_queue / flavors: where its quota is reserved ("" / {} until then), flavors by GPU resource.
    The times are the lastTransitionTime of conditions that are True now: QuotaReserved, Admitted,
    Finished, Evicted (a workload evicted and admitted again has evicted_at None). preemptions: how
    many times Kueue preempted it. pending_message: the QuotaReserved=False message, Kueue's own words
    ("couldn't assign flavors to pod set main: insufficient unused quota ...").
    owner_kind / owner_name: the object it stands for (a Job, a Pod, ...).
    """

    namespace: str
    name: str
    queue_name: str
    created_at: datetime
    gpu_requests: Mapping[str, float] = field(default_factory=dict)
    cluster_queue: str = ""
    flavors: Mapping[str, str] = field(default_factory=dict)
    quota_reserved_at: datetime | None = None
    admitted_at: datetime | None = None
    finished_at: datetime | None = None
    evicted_at: datetime | None = None
    evicted_reason: str = ""
    preemptions: int = 0
    pending_message: str = ""
    owner_kind: str = ""
    owner_name: str = ""

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def status(self) -> str:
        """finished, admitted, quota_reserved (waiting for admission checks) or pending."""
        if self.finished_at is not None:
            return "finished"
        if self.admitted_at is not None:
            return "admitted"
        if self.quota_reserved_at is not None:
            return "quota_reserved"
        return "pending"


@dataclass(frozen=True, slots=True, kw_only=True)
class KueueState:
    """Kueue's objects as the API server has them now. installed False: the cluster serves no Kueue API
    (every collection empty). version: the kueue.x-k8s.io API version read (v1beta2, or v1beta1 on
    Kueue before 0.15). Malformed objects are skipped, counted and warned of once."""

    installed: bool = False
    version: str = ""
    flavors: tuple[ResourceFlavor, ...] = ()
    cohorts: tuple[Cohort, ...] = ()
    cluster_queues: tuple[ClusterQueue, ...] = ()
    local_queues: tuple[LocalQueue, ...] = ()
    workloads: tuple[Workload, ...] = ()
    warnings: tuple[str, ...] = ()
    skipped: int = 0
    list_restarts: int = 0


class TextSink(Protocol):
    """Where text is written: an open text file, or anything else with its write()."""

    def write(self, text: str, /) -> int: ...
