"""The simulated fleet: what it is made of, and the per-GPU telemetry and ground truth drawn from it.

One `SimulatedFleet` is the single truth that the DCGM /metrics text, the OpenMetrics backfill, the
Kubernetes API test server and the tests' expected numbers are all rendered from, so they agree.
Everything is a pure function of (seed, window, scale): the same arguments give the same fleet.
"""

import hashlib
import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from functools import cached_property
from typing import Any

import numpy as np
import pandas as pd

from gpuwatch.core.model import (
    RESOURCE_GPU,
    Allocation,
    Gpu,
    Namespace,
    Node,
    Pod,
    ResourceQuota,
    TeamRules,
    Window,
)
from gpuwatch.core.schema import ATTRIBUTED
from gpuwatch.core.units import BYTES_PER_MIB

EXPORTER_NAMESPACE = "gpu-operator"
# Each vendor's telemetry exporter DaemonSet: its pods' name prefix, container and port (dcgm-exporter under
# NVIDIA's GPU Operator; AMD's device-metrics-exporter under AMD's, whose DeviceConfig is named "default";
# Intel's Gaudi metric-exporter). The demo runs all three in one namespace.
EXPORTER_PODS: Mapping[str, tuple[str, str, int]] = {
    "nvidia": ("nvidia-dcgm-exporter", "nvidia-dcgm-exporter", 9400),
    "amd": ("default-metrics-exporter", "metrics-exporter-container", 5000),
    "intel": ("metric-exporter-ds", "metric-exporter", 41611),
}
DRIVER_VERSION = "550.54.15"
# Completed pods stay listed by the API server this long (then they are garbage-collected).
COMPLETED_POD_TTL = timedelta(hours=1)
ARCHETYPES = ("training", "inference", "notebook", "stuck", "batch")
# The simulated energy model holds the whole fleet window's power and counter: up to this many
# GPU-samples (the demo's 80 GPUs × 61 days at 1 min is 7M) it is kept on the fleet (power_energy).
ENERGY_MODEL_MAX_GPU_SAMPLES = 20_000_000


@dataclass(frozen=True, slots=True, kw_only=True)
class ExporterTarget:
    """The dcgm-exporter pod on a node, and how its labels name the node."""

    node: str
    pod: str
    ip: str
    hostname_label: str  # "Hostname" (< 4.6) or "hostname"; "" for Gaudi's exporter, which names no node
    hostname_value: str  # the node name, or the exporter pod's own name (a known quirk)
    vendor: str = "nvidia"  # whose exporter: dcgm-exporter, AMD's device-metrics-exporter, Gaudi's

    @property
    def container(self) -> str:
        return EXPORTER_PODS[self.vendor][1]

    @property
    def instance(self) -> str:
        return f"{self.ip}:{EXPORTER_PODS[self.vendor][2]}"


@dataclass(frozen=True, slots=True, kw_only=True)
class HealthEvent:
    """A device-health fact from `start` on: an XID (sticky last value), a row-remap failure, heat."""

    node: str
    uuid: str
    kind: str  # "xid" | "row_remap_failure" | "hot"
    value: float  # the XID code; for "hot", the temperature (°C) the GPU runs at, give or take a degree
    start: datetime


@dataclass(frozen=True, slots=True, kw_only=True)
class TelemetryGap:
    """The exporter on `node` served nothing over [start, end): for every GPU of the node, or for the
    one of index `gpu_index` alone (fallen off the bus, XID 79, while its siblings report)."""

    node: str
    start: datetime
    end: datetime
    gpu_index: int | None = None


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
    team_rules: TeamRules = field(default_factory=TeamRules)
    tdp_watts: Mapping[str, float] = field(default_factory=dict)  # product -> board power; 300 W if absent

    @property
    def now(self) -> datetime:
        return self.window.end

    @cached_property
    def allocation_spans(self) -> list[tuple[int, int]]:
        """sample_spans() of the fleet's allocations, made once: the telemetry of every slice reads them."""
        return sample_spans(self, self.allocations)

    def sample_times(self) -> pd.DatetimeIndex:
        return pd.date_range(
            self.window.start, periods=self.window.n_samples, freq=f"{self.window.step_seconds}s"
        )

    def node(self, name: str) -> Node:
        return next(n for n in self.nodes if n.name == name)

    @cached_property
    def _namespace_labels(self) -> Mapping[str, Mapping[str, str]]:
        return {n.name: n.labels for n in reversed(self.namespaces)}  # the first of a name, as next() had

    def team_of(self, pod: Pod) -> str:
        ns_labels = self._namespace_labels.get(pod.namespace, {})
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
        index_of = np.array([g.index for g in self.gpus])
        mask = np.zeros((len(self.gpus), len(times)), dtype=bool)
        for gap in self.gaps:
            cols = (times >= pd.Timestamp(gap.start)) & (times < pd.Timestamp(gap.end))
            rows = node_of == gap.node
            if gap.gpu_index is not None:
                rows &= index_of == gap.gpu_index
            mask[np.ix_(rows, cols)] = True
        return mask

    def with_gaps(self, *gaps: TelemetryGap) -> "SimulatedFleet":
        """The same fleet with more telemetry gaps: their GPUs' utilization unknown (NaN) there."""
        fleet = replace(self, gaps=(*self.gaps, *gaps))
        util = self.util_ratio.copy()
        util[fleet.missing_mask()] = np.nan
        return replace(fleet, util_ratio=util)

    def telemetry(self, window: Window | None = None) -> pd.DataFrame:
        """Per GPU (or MIG instance) and sample, the values the exporter reports, in base units.

        Columns: timestamp, node, uuid, gpu_instance_id, gpu_index, util_ratio, fb_used_bytes,
        fb_free_bytes, power_watts, temp_celsius, energy_joules (counter, resets on driver reload),
        xid_last (sticky last XID code), row_remap_failure, uncorrectable_remapped_rows.
        Rows where the exporter served nothing are absent. With `window`, only the samples whose time
        falls in it (the same rows and values as filtering the whole frame, without building it).
        """
        times = self.sample_times()
        if window is None:
            return _telemetry_frame(self, 0, len(times))
        first, end = times.searchsorted([pd.Timestamp(window.start), pd.Timestamp(window.end)])
        return _telemetry_frame(self, int(first), int(end))

    @property
    def power_energy(self) -> tuple[np.ndarray, np.ndarray]:
        """power_and_energy() of the fleet's own draw (the first of rng seed + 1), made once and kept: the
        samples and the health events of one fleet both read it."""
        power, energy, _ = self._power_draw
        return power, energy

    @cached_property
    def _power_draw(self) -> tuple[np.ndarray, np.ndarray, Mapping[str, Any]]:
        """power_energy, and the state of its generator after it, where telemetry() continues the draw."""
        rng = np.random.default_rng(self.seed + 1)
        power, energy = power_and_energy(self, rng)
        return power, energy, rng.bit_generator.state

    def truth(self) -> pd.DataFrame:
        """Ground truth per allocation and sample: who held how many GE of which GPU, and its util.

        Columns: timestamp, namespace, pod, team, node, pool, uuid, gpu_instance_id, ge_share, util_ratio.
        """
        return _truth_frame(self)


# ---------------------------------------------------------------------------------------------
# Identities, exporter pods and quotas every simulated fleet shares


def stable_hex(*parts: object, n: int = 8) -> str:
    """A deterministic hex string from its parts (UUIDs, pod suffixes) independent of PYTHONHASHSEED."""
    return hashlib.sha256("/".join(map(str, parts)).encode()).hexdigest()[:n]


def gpu_uuid(seed: int, node: str, index: int) -> str:
    h = stable_hex(seed, node, index, n=32)
    return f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


def _uid(seed: int, namespace: str, name: str) -> str:
    h = stable_hex(seed, namespace, name, n=32)
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


def _exporter_targets(seed: int, nodes: Sequence[Node]) -> list[ExporterTarget]:
    """One exporter pod per node, its vendor's; dcgm-exporter's label layouts vary by node like a fleet
    mid-upgrade. AMD's always names the node in `hostname`; Gaudi's names none."""
    out = []
    for i, node in enumerate(nodes):
        vendor = node.vendor
        pod = f"{EXPORTER_PODS[vendor][0]}-{stable_hex(seed, node.name, n=5)}"
        label = "Hostname" if i % 2 == 0 else "hostname"  # exporter 4.6 renamed it
        value = pod if i % 3 == 2 else node.name  # older exporters report their own pod name
        if vendor != "nvidia":
            label, value = ("hostname", node.name) if vendor == "amd" else ("", "")
        out.append(
            ExporterTarget(
                node=node.name,
                pod=pod,
                ip=f"10.42.{i // 250}.{i % 250 + 2}",
                hostname_label=label,
                hostname_value=value,
                vendor=vendor,
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
            labels={"app": EXPORTER_PODS[t.vendor][0]},
            container=t.container,
        )
        for t in targets
    ]


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
        free = ~_held_mask(fleet, first=lo, end=hi)[l4[0]]
        util[l4[0], lo:hi] = np.where(free, 0.5, util[l4[0], lo:hi])
    np.round(util, 6, out=util)
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


def power_and_energy(fleet: SimulatedFleet, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """[gpu, sample] power (W: idle draw plus load, noise from `rng`) and the energy counter (J since
    the driver loaded, including the sample's own energy), over the whole fleet window. Whole-GPU
    fields: every MIG instance of a GPU reports the GPU's. The first H100 node's driver reloads half
    way through: its counters restart from 0."""
    util = fleet.util_ratio
    n_g, n_t = util.shape
    tdp = np.array([fleet.tdp_watts.get(g.product, 300.0) for g in fleet.gpus])
    # A few GPUs' rows at a time: the demo's fleet window is millions of samples, and each temporary of
    # the whole window is memory the kernel hands out afresh. The noise is drawn in the same order
    # (row after row) as one draw of the whole.
    power = np.empty((n_g, n_t))
    for chunk in _row_chunks(n_g, n_t):
        p = power[chunk]
        np.copyto(p, _known(util[chunk]))  # tdp * (0.12 + 0.8 * util) + noise, in place
        p *= 0.8
        p += 0.12
        p *= tdp[chunk, None]
        p += rng.normal(0, 1.0, p.shape)
        np.round(p, 3, out=p)
        np.maximum(p, 1.0, out=p)
    first_of_uuid: dict[str, int] = {}
    for i, g in enumerate(fleet.gpus):
        j = first_of_uuid.setdefault(g.uuid, i)
        if j != i:
            power[i] = power[j]
    if any(g.mig_profile for g in fleet.gpus):
        for uuid, j in first_of_uuid.items():
            same = [i for i, g in enumerate(fleet.gpus) if g.uuid == uuid]
            if len(same) > 1:
                util_sum = np.nansum(util[same], axis=0)
                p = np.round(tdp[j] * (0.12 + 0.8 * np.clip(util_sum, 0, 1)), 3)
                for r in same:
                    power[r] = p
    energy = np.empty((n_g, n_t))
    for chunk in _row_chunks(n_g, n_t):
        # Each row's running sum, over the transpose: numpy sums along the first axis several times faster.
        e = np.cumsum((power[chunk] * fleet.window.step_seconds).T, axis=0).T
        np.round(e, out=e)
        e += 1.0e6
        energy[chunk] = e
    reset_node = next((n.name for n in fleet.nodes if n.name.startswith("gpu-h100-")), None)
    if reset_node:
        cut = n_t // 2
        on_node = np.array([g.node == reset_node for g in fleet.gpus])
        energy[on_node, cut:] -= energy[on_node, cut - 1][:, None]  # driver reload: the counter restarts
    return power, energy


def _row_chunks(n_rows: int, n_samples: int, elements: int = 1 << 20) -> Iterator[slice]:
    """The rows of a [gpu, sample] array, a few at a time: about `elements` values (8 MB of floats)."""
    rows = max(1, elements // max(n_samples, 1))
    for first in range(0, n_rows, rows):
        yield slice(first, first + rows)


def _known(util: np.ndarray) -> np.ndarray:
    """Utilization with unknown (NaN) as 0, as np.nan_to_num has it (a ratio is never infinite), in a
    fraction of its time: the demo's fleet window is millions of samples."""
    return np.where(np.isnan(util), 0.0, util)


def _telemetry_frame(fleet: SimulatedFleet, first: int, end: int) -> pd.DataFrame:
    """The telemetry rows of fleet samples [first, end). Noise is drawn, and energy integrated, over the
    whole fleet window so that a slice has the values of the whole."""
    times = fleet.sample_times()
    n_t = len(times)
    n_g = len(fleet.gpus)
    cols = slice(first, end)
    util = fleet.util_ratio
    mem = np.array([g.memory_bytes for g in fleet.gpus])
    rng = np.random.default_rng(fleet.seed + 1)
    held = _held_mask(fleet, first=first, end=end)
    known_util = _known(util[:, cols])
    loaded = _held_mask(fleet, loaded=True, first=first, end=end)
    fb_used = framebuffer_used_bytes(mem[:, None], util[:, cols], held, loaded)
    if util.size <= ENERGY_MODEL_MAX_GPU_SAMPLES:  # kept on the fleet: its samples read it too
        power, energy, rng.bit_generator.state = fleet._power_draw  # the temperatures' noise follows it
    else:
        power, energy = power_and_energy(fleet, rng)
    # The noise of the whole window, as one draw of it has it, kept for the slice only: a few rows at a time.
    temp_noise = np.empty((n_g, end - first))
    for chunk in _row_chunks(n_g, n_t):
        noise = temp_noise[chunk]
        noise[:] = rng.normal(0, 0.7, (len(noise), n_t))[:, cols]
    temp = np.round(32 + 45 * known_util + temp_noise)
    xid = np.zeros(temp.shape)
    remap = np.zeros(temp.shape)
    for ev in fleet.events:
        rows = [i for i, g in enumerate(fleet.gpus) if g.uuid == ev.uuid]
        after = times[cols] >= pd.Timestamp(ev.start)
        for r in rows:
            if ev.kind == "xid":
                xid[r, after] = ev.value
            elif ev.kind == "row_remap_failure":
                remap[r, after] = 1.0
            else:  # a failing fan: the GPU runs at the event's temperature whatever its load
                temp[r, after] = np.round(ev.value + temp_noise[r, after])
    # Whole-GPU fields repeat on every MIG instance of a GPU: draw once per physical GPU.
    first_of_uuid: dict[str, int] = {}
    for i, g in enumerate(fleet.gpus):
        j = first_of_uuid.setdefault(g.uuid, i)
        if j != i:
            temp[i] = temp[j]
    power, energy = power[:, cols], energy[:, cols]
    n_cols = end - first
    frame = pd.DataFrame(
        {
            "timestamp": np.tile(times[cols].to_numpy(), n_g),
            "node": np.repeat([g.node for g in fleet.gpus], n_cols),
            "uuid": np.repeat([g.uuid for g in fleet.gpus], n_cols),
            "gpu_instance_id": np.repeat([g.gpu_instance_id for g in fleet.gpus], n_cols),
            "gpu_index": np.repeat([g.index for g in fleet.gpus], n_cols),
            "util_ratio": util[:, cols].ravel(),
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
    present = ~fleet.missing_mask()[:, cols].ravel()
    return frame.loc[present].reset_index(drop=True)


def _held_mask(
    fleet: SimulatedFleet, *, loaded: bool = False, first: int = 0, end: int | None = None
) -> np.ndarray:
    """[gpu, sample] True where a pod holds the unit (loaded: a pod that keeps a model in memory, i.e.
    any archetype but stuck), for the fleet's samples [first, end) (default: all)."""
    end = fleet.window.n_samples if end is None else end
    held = np.zeros((len(fleet.gpus), end - first), dtype=bool)
    index = {(g.uuid, g.gpu_instance_id): i for i, g in enumerate(fleet.gpus)}
    for a, (i0, i1) in zip(fleet.allocations, fleet.allocation_spans, strict=True):
        lo, hi = max(i0, first), min(i1, end)
        if hi <= lo or (loaded and fleet.archetypes.get(f"{a.namespace}/{a.pod}") == "stuck"):
            continue
        held[index[(a.uuid, a.gpu_instance_id)], lo - first : hi - first] = True
    return held


# A process that opened the GPU and then hung or crashed keeps its CUDA context and nothing else.
CUDA_CONTEXT_BYTES = 320 * BYTES_PER_MIB


def framebuffer_used_bytes(
    memory_bytes: np.ndarray, util_ratio: np.ndarray, held: np.ndarray, loaded: np.ndarray
) -> np.ndarray:
    """Framebuffer a unit reports: with a model loaded (any holder but a stuck one) 35 % of its memory
    plus half of it times the utilization (to the MiB); held by stuck pods only, a bare CUDA context
    (near empty: their idle GPUs are abandoned, a parked notebook's are held); free, none."""
    model = np.round(memory_bytes * (0.35 + 0.5 * _known(util_ratio)) / BYTES_PER_MIB) * BYTES_PER_MIB
    return np.where(loaded, model, np.where(held, CUDA_CONTEXT_BYTES, 0.0))


def sample_spans(fleet: SimulatedFleet, allocations: Iterable[Allocation]) -> list[tuple[int, int]]:
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
    for a, (i0, i1) in zip(fleet.allocations, fleet.allocation_spans, strict=True):
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
