"""The simulated fleet as dcgm-exporter serves it (/metrics text) and as Prometheus stores it (backfill)."""

import math
import threading
import weakref
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any, Self
from urllib.parse import parse_qs, urlsplit

import numpy as np
import numpy.typing as npt
import pandas as pd

from gpuwatch.core.errors import DataError
from gpuwatch.core.model import TextSink, normalize_product
from gpuwatch.core.units import BYTES_PER_MIB
from gpuwatch.sim.fleet import (
    DRIVER_VERSION,
    EXPORTER_NAMESPACE,
    EXPORTER_PODS,
    ExporterTarget,
    SimulatedFleet,
)

FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]
IndexArray = npt.NDArray[np.intp]

LAYOUTS = ("servicemonitor", "honor_labels")
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

# Target labels kube-prometheus-stack's ServiceMonitor for the GPU Operator's exporter adds.
EXPORTER_JOB = "nvidia-dcgm-exporter"
EXPORTER_ENDPOINT = "gpu-metrics"
WORKLOAD_LABELS = ("container", "namespace", "pod")


@dataclass(frozen=True, slots=True, kw_only=True)
class Family:
    """One dcgm-exporter metric family: how it is typed, described and derived from the telemetry."""

    name: str
    help: str  # verbatim from dcgm-exporter etc/default-counters.csv
    column: str  # SimulatedFleet.telemetry() column, in base units
    kind: str = "gauge"  # the exporter's Prometheus type: "gauge" | "counter"
    scale: float = 1.0  # base units -> the exporter's units
    coarsen: str = "mean"  # "mean" | "last": how sub-samples combine when the backfill step is coarser
    mig: bool = True  # served for MIG instances
    prof: bool = False  # served only where the GPU reports DCP (PROF) fields
    vendor: str = "nvidia"  # whose exporter serves it: dcgm-exporter, or AMD's device-metrics-exporter


# Order of etc/default-counters.csv, which is the order the exporter writes its families in.
FAMILIES: tuple[Family, ...] = (
    Family(name="DCGM_FI_DEV_GPU_TEMP", help="GPU temperature (in C).", column="temp_celsius"),
    Family(name="DCGM_FI_DEV_POWER_USAGE", help="Power draw (in W).", column="power_watts"),
    Family(
        name="DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
        help="Total energy consumption since boot (in mJ).",
        column="energy_joules",
        kind="counter",
        scale=1000.0,
        coarsen="last",
    ),
    Family(
        name="DCGM_FI_DEV_GPU_UTIL",
        help="GPU utilization (in %).",
        column="util_ratio",
        scale=100.0,
        mig=False,
    ),
    Family(
        name="DCGM_FI_DEV_XID_ERRORS",
        help="Value of the last XID error encountered.",
        column="xid_last",
        coarsen="last",
    ),
    Family(
        name="DCGM_FI_DEV_FB_FREE",
        help="Framebuffer memory free (in MiB).",
        column="fb_free_bytes",
        scale=1.0 / BYTES_PER_MIB,
    ),
    Family(
        name="DCGM_FI_DEV_FB_USED",
        help="Framebuffer memory used (in MiB).",
        column="fb_used_bytes",
        scale=1.0 / BYTES_PER_MIB,
    ),
    Family(
        name="DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
        help="Number of remapped rows for uncorrectable errors",
        column="uncorrectable_remapped_rows",
        kind="counter",
        coarsen="last",
    ),
    Family(
        name="DCGM_FI_DEV_ROW_REMAP_FAILURE",
        help="Whether remapping of rows has failed",
        column="row_remap_failure",
        coarsen="last",
    ),
    Family(
        name="DCGM_FI_PROF_GR_ENGINE_ACTIVE",
        help="Ratio of time the graphics engine is active.",
        column="util_ratio",
        prof=True,
    ),
    # AMD's device-metrics-exporter, in base units converted to its own (ROCm/device-metrics-exporter
    # docs/configuration/metricslist.md; help texts as its gauges carry them). Every family is a gauge.
    Family(
        name="gpu_gfx_activity",
        help="Graphics engine usage in Percentage (0-100)",
        column="util_ratio",
        scale=100.0,
        vendor="amd",
    ),
    Family(
        name="gpu_used_vram",
        help="Used VRAM memory of the GPU (in MB)",
        column="fb_used_bytes",
        scale=1.0 / BYTES_PER_MIB,
        vendor="amd",
    ),
    Family(
        name="gpu_free_vram",
        help="Free VRAM memory of the GPU (in MB)",
        column="fb_free_bytes",
        scale=1.0 / BYTES_PER_MIB,
        vendor="amd",
    ),
    Family(
        name="gpu_package_power", help="Current socket power in Watts", column="power_watts", vendor="amd"
    ),
    Family(
        name="gpu_junction_temperature",
        help="Current junction/hotspot temperature in Celsius",
        column="temp_celsius",
        vendor="amd",
    ),
    Family(
        name="gpu_energy_consumed",
        help="Accumulated energy consumed by the GPU in uJ",
        column="energy_joules",
        scale=1e6,
        coarsen="last",
        vendor="amd",
    ),
)
FAMILY_NAMES: tuple[str, ...] = tuple(f.name for f in FAMILIES)


def served_columns(vendor: str) -> frozenset[str]:
    """The telemetry columns a vendor's exporter serves (AMD's: no XID, no row remapping)."""
    return frozenset(f.column for f in FAMILIES if f.vendor == vendor)


# err_msg of the 4.x exporter's XID label pair (the XID catalog's descriptions).
XID_MESSAGES: dict[int, str] = {
    0: "No Error",
    13: "Graphics Engine Exception",
    31: "GPU memory page fault",
    43: "GPU stopped processing",
    45: "Preemptive cleanup, due to previous errors",
    48: "Double Bit ECC Error",
    63: "ECC page retirement or row remapping recording event",
    64: "ECC page retirement or row remapper recording failure",
    74: "NVLINK Error",
    79: "GPU has fallen off the bus",
    92: "High single-bit ECC error rate",
    94: "Contained ECC error",
    95: "Uncontained ECC error",
}

# NVML device names (modelName) of the products GFD spells with dashes.
_MODEL_NAMES = {
    "NVIDIA-H100-80GB-HBM3": "NVIDIA H100 80GB HBM3",
    "NVIDIA-A100-SXM4-80GB": "NVIDIA A100-SXM4-80GB",
    "NVIDIA-A100-SXM4-40GB": "NVIDIA A100-SXM4-40GB",
    "NVIDIA-L4": "NVIDIA L4",
    "TESLA-T4": "Tesla T4",
}
# PCI buses of the GPUs of an 8-GPU HGX board, by GPU index.
_PCI_BUSES = (0x18, 0x2A, 0x3A, 0x5D, 0x9A, 0xAB, 0xBA, 0xDB)


def model_name(product: str) -> str:
    """The NVML device name dcgm-exporter puts in `modelName` for a GFD product label."""
    return _MODEL_NAMES.get(normalize_product(product), product.replace("-", " "))


def pci_bus_id(index: int) -> str:
    bus = _PCI_BUSES[index % len(_PCI_BUSES)] + index // len(_PCI_BUSES)
    return f"00000000:{bus % 0x100:02X}:00.0"


def xid_message(code: int) -> str:
    return XID_MESSAGES.get(code, "Unknown Error")


# ---------------------------------------------------------------------------------------------
# The fleet on a sample grid: values per telemetry unit and sample, and who held each unit when


@dataclass(frozen=True, slots=True, kw_only=True)
class _Series:
    """One exporter series of a telemetry unit: a holder (or nobody) and the samples it covers."""

    row: int  # index into fleet.gpus
    workload: tuple[str, str, str]  # (container, namespace, pod); empty strings when nobody holds it
    vgpu: str  # time-slice replica index, "" for an unshared GPU
    idx: IndexArray  # ascending sample indices where the exporter served this series


@dataclass(frozen=True, slots=True, kw_only=True)
class _Grid:
    """Source-unit values per family on a sample grid, and the series that carry them."""

    start_epoch: float
    step_seconds: int
    n_samples: int
    values: dict[str, FloatArray]  # family name -> [n_units, n_samples], NaN where not served
    series: tuple[_Series, ...]  # ordered by unit, then first sample
    base_labels: tuple[tuple[tuple[str, str], ...], ...]  # per unit: exporter labels before workload ones
    target_of_row: tuple[ExporterTarget, ...]
    node_of_row: tuple[str, ...]
    served: tuple[tuple[bool, ...], ...]  # per family index, per unit: family applies to the unit

    def sample_index(self, at: datetime) -> int:
        return math.floor((at.timestamp() - self.start_epoch) / self.step_seconds)


def _base_matrices(fleet: SimulatedFleet) -> tuple[dict[str, FloatArray], BoolArray]:
    """Telemetry columns as [n_units, n_samples] matrices (NaN where absent), and the served mask."""
    frame = fleet.telemetry()
    n_g, n_t = len(fleet.gpus), fleet.window.n_samples
    units = pd.MultiIndex.from_arrays([[g.uuid for g in fleet.gpus], [g.gpu_instance_id for g in fleet.gpus]])
    rows = units.get_indexer(pd.MultiIndex.from_arrays([frame["uuid"], frame["gpu_instance_id"]]))
    if (rows < 0).any():
        raise DataError("telemetry names a GPU the fleet does not have")
    seconds = (frame["timestamp"] - pd.Timestamp(fleet.window.start)).dt.total_seconds().to_numpy()
    cols = np.floor_divide(seconds, fleet.window.step_seconds).astype(np.intp)
    present = np.zeros((n_g, n_t), dtype=bool)
    present[rows, cols] = True
    not_ready = {n.name for n in fleet.nodes if not n.ready}
    if not_ready:  # a NotReady node's exporter serves nothing, gap or not
        present[np.array([g.node in not_ready for g in fleet.gpus])] = False
    mats: dict[str, FloatArray] = {}
    for column in {f.column for f in FAMILIES}:
        mat = np.full((n_g, n_t), np.nan)
        mat[rows, cols] = frame[column].to_numpy(dtype=np.float64)
        mat[~present] = np.nan
        mats[column] = mat
    return mats, present


def _coarsen(mat: FloatArray, k: int, how: str) -> FloatArray:
    """[n, t] -> [n, ceil(t/k)]: mean or last of the non-NaN sub-samples of each bucket (NaN if none)."""
    if k == 1:
        return mat
    n, t = mat.shape
    m = math.ceil(t / k)
    padded = np.full((n, m * k), np.nan)
    padded[:, :t] = mat
    cube = padded.reshape(n, m, k)
    ok = ~np.isnan(cube)
    count = ok.sum(axis=2)
    if how == "mean":
        total = np.where(ok, cube, 0.0).sum(axis=2)
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(count > 0, total / np.maximum(count, 1), np.nan)
    last = k - 1 - np.argmax(ok[:, :, ::-1], axis=2)
    out = np.take_along_axis(cube, last[:, :, None], axis=2)[:, :, 0]
    return np.where(count > 0, out, np.nan)


def _build_grid(fleet: SimulatedFleet, step_seconds: int | None = None) -> _Grid:
    fine = fleet.window.step_seconds
    step = fine if step_seconds is None else step_seconds
    if step <= 0 or step % fine:
        raise DataError(f"step {step}s is not a positive multiple of the fleet's step {fine}s")
    k = step // fine
    base, present_fine = _base_matrices(fleet)
    values: dict[str, FloatArray] = {}
    for family in FAMILIES:
        values[family.name] = _coarsen(base[family.column], k, family.coarsen) * family.scale
    n = math.ceil(fleet.window.n_samples / k)
    present = _coarsen(np.where(present_fine, 1.0, np.nan), k, "last") == 1.0
    targets = {t.node: t for t in fleet.targets}
    target_of_row = tuple(targets[g.node] for g in fleet.gpus)
    served = tuple(
        tuple(
            (f.mig or not g.mig_profile)
            and (not f.prof or fleet.has_prof.get(g.uuid, False))
            and f.vendor == target_of_row[row].vendor
            for row, g in enumerate(fleet.gpus)
        )
        for f in FAMILIES
    )
    return _Grid(
        start_epoch=fleet.window.start.timestamp(),
        step_seconds=step,
        n_samples=n,
        values=values,
        series=tuple(_series(fleet, present, step)),
        base_labels=tuple(_base_labels(fleet, row, t) for row, t in enumerate(target_of_row)),
        target_of_row=target_of_row,
        node_of_row=tuple(g.node for g in fleet.gpus),
        served=served,
    )


def _series(fleet: SimulatedFleet, present: BoolArray, step: int) -> list[_Series]:
    """Split each unit's served samples by holder: sample i belongs to whoever held the unit at t_i.

    The rule is the fleet's own (`sample_spans`), so labels agree with `fleet.truth()`. A time-sliced
    GPU gets one copy per pod holding a replica (label `vgpu`); an unheld unit one copy with no pod.
    """
    n = present.shape[1]
    t0 = fleet.window.start
    row_of = {(g.uuid, g.gpu_instance_id): i for i, g in enumerate(fleet.gpus)}
    containers = {(p.namespace, p.name): p.container for p in fleet.pods}
    spans: dict[tuple[int, tuple[str, str, str], str], list[tuple[int, int]]] = {}
    for a in fleet.allocations:
        end = fleet.window.end if a.end is None else a.end
        i0 = max(0, math.ceil((a.start - t0).total_seconds() / step))
        i1 = min(n, math.ceil((end - t0).total_seconds() / step))
        if i1 <= i0:
            continue
        row = row_of[(a.uuid, a.gpu_instance_id)]
        vgpu = a.replica if fleet.gpus[row].replicas > 1 else ""
        workload = (containers.get((a.namespace, a.pod), ""), a.namespace, a.pod)
        spans.setdefault((row, workload, vgpu), []).append((i0, i1))
    held = np.zeros_like(present)
    by_row: dict[int, list[_Series]] = {}
    for (row, workload, vgpu), ranges in spans.items():
        mask = np.zeros(n, dtype=bool)
        for i0, i1 in ranges:
            mask[i0:i1] = True
        held[row] |= mask
        idx = np.flatnonzero(mask & present[row])
        if idx.size:
            by_row.setdefault(row, []).append(_Series(row=row, workload=workload, vgpu=vgpu, idx=idx))
    for row in range(len(fleet.gpus)):
        idx = np.flatnonzero(present[row] & ~held[row])
        if idx.size:
            by_row.setdefault(row, []).append(_Series(row=row, workload=("", "", ""), vgpu="", idx=idx))
    out: list[_Series] = []
    for row in sorted(by_row):
        out.extend(sorted(by_row[row], key=lambda s: (int(s.idx[0]), s.vgpu)))
    return out


def _base_labels(fleet: SimulatedFleet, row: int, target: ExporterTarget) -> tuple[tuple[str, str], ...]:
    g = fleet.gpus[row]
    if target.vendor == "amd":  # every label, empty ones too; its workload labels are added with them
        return (
            ("card_model", "102-G30211-0C"),
            ("card_series", g.product.replace("_", " ")),
            ("deployment_mode", "baremetal"),
            ("gpu_compute_partition_type", "spx"),
            ("gpu_id", str(g.index)),
            ("gpu_memory_partition_type", "nps1"),
            ("gpu_partition_id", "0"),
            ("hostname", target.hostname_value),
            ("job_id", ""),
            ("job_partition", ""),
            ("job_user", ""),
            ("serial_number", g.uuid),
        )
    labels = [
        ("gpu", str(g.index)),
        ("UUID", g.uuid),
        ("pci_bus_id", pci_bus_id(g.index)),
        ("device", f"nvidia{g.index}"),
        ("modelName", model_name(g.product)),
    ]
    if g.mig_profile:
        labels += [("GPU_I_PROFILE", g.mig_profile), ("GPU_I_ID", g.gpu_instance_id)]
    labels += [(target.hostname_label, target.hostname_value), ("DCGM_FI_DRIVER_VERSION", DRIVER_VERSION)]
    return tuple(labels)


def _exporter_labels(grid: _Grid, s: _Series, xid: int | None) -> list[tuple[str, str]]:
    """Labels in the exporter's order: fixed device labels, then its label map in Go's sorted key order
    (AMD's exporter: all of them in sorted order)."""
    extra = dict(zip(WORKLOAD_LABELS, s.workload, strict=True))
    if grid.target_of_row[s.row].vendor == "amd":
        return sorted([*grid.base_labels[s.row], *extra.items()])
    if s.vgpu:
        extra["vgpu"] = s.vgpu
    if xid is not None:
        extra["err_code"] = str(xid)
        extra["err_msg"] = xid_message(xid)
    return [*grid.base_labels[s.row], *sorted(extra.items())]


def _stored_labels(
    labels: Sequence[tuple[str, str]], target: ExporterTarget, layout: str
) -> list[tuple[str, str]]:
    """The label set Prometheus stores for a scraped series under `layout` (empty values dropped)."""
    out: list[tuple[str, str]] = []
    for name, value in labels:
        if not value:
            continue
        if layout == "servicemonitor" and name in WORKLOAD_LABELS:
            name = f"exported_{name}"  # honorLabels: false renames clashing labels
        out.append((name, value))
    job = EXPORTER_JOB if target.vendor == "nvidia" else EXPORTER_PODS[target.vendor][0]
    if layout == "servicemonitor":
        out += [
            ("container", target.container),
            ("endpoint", EXPORTER_ENDPOINT if target.vendor == "nvidia" else "metrics"),
            ("instance", target.instance),
            ("job", job),
            ("namespace", EXPORTER_NAMESPACE),
            ("pod", target.pod),
            ("service", job),
        ]
    else:
        out += [("instance", target.instance), ("job", job)]
    return out


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _label_text(labels: Sequence[tuple[str, str]]) -> str:
    return "{" + ",".join(f'{k}="{_escape(v)}"' for k, v in labels) + "}"


def _format_values(values: FloatArray) -> list[str]:
    """Integers without a fraction (MiB, mJ, XID codes), others as the shortest exact decimal."""
    whole = np.isfinite(values) & (values == np.round(values)) & (np.abs(values) < 2.0**53)
    if whole.all():
        out: list[str] = values.astype(np.int64).astype(str).tolist()
        return out
    text = values.astype(str)  # numpy prints float64 as the shortest string that round-trips
    if whole.any():
        text = text.astype(object)
        text[whole] = values[whole].astype(np.int64).astype(str)
    return [str(t) for t in text.tolist()]


def _xid_split(values: FloatArray) -> Iterator[tuple[int, BoolArray]]:
    """Each distinct XID code and where it holds: the exporter's err_code label splits the series."""
    codes, first = np.unique(values, return_index=True)
    for code in codes[np.argsort(first)]:
        yield int(code), values == code


_cache_lock = threading.RLock()  # re-entrant: the finalizer below may run from GC inside the lock
_cache: tuple[weakref.ref[SimulatedFleet], _Grid] | None = None


def _fine_grid(fleet: SimulatedFleet) -> _Grid:
    """The fleet's own-step grid, remembered for the last fleet while it lives (building it is the cost)."""
    global _cache
    with _cache_lock:
        if _cache is not None and _cache[0]() is fleet:
            return _cache[1]
        grid = _build_grid(fleet)
        _cache = (weakref.ref(fleet), grid)
        weakref.finalize(fleet, _forget_dead_fleet)
        return grid


def _forget_dead_fleet() -> None:
    global _cache
    with _cache_lock:
        if _cache is not None and _cache[0]() is None:
            _cache = None


# ---------------------------------------------------------------------------------------------
# dcgm-exporter /metrics


def exporter_text(fleet: SimulatedFleet, *, at: datetime, node: str | None = None) -> str:
    """The /metrics text dcgm-exporter serves at `at` (the sample whose interval holds `at`).

    One node's exporter, or every node's concatenated family by family. Values are in the exporter's
    units (MiB, %, W, mJ, °C); workload labels name the pod holding the unit then, empty when nobody
    does. Nodes in a telemetry gap or NotReady contribute nothing; families without series are left out.
    """
    return _render(_fine_grid(fleet), fleet, at=at, node=node)


def _render(grid: _Grid, fleet: SimulatedFleet, *, at: datetime, node: str | None) -> str:
    at = at if at.tzinfo is not None else at.replace(tzinfo=UTC)
    if not fleet.window.start <= at < fleet.window.end:
        raise DataError(f"{at.isoformat()} is outside the simulated window")
    if node is not None and node not in {n.name for n in fleet.nodes}:
        raise DataError(f"no node {node!r} in the simulated fleet")
    i = grid.sample_index(at)
    live = [
        s
        for s in grid.series
        if (node is None or grid.node_of_row[s.row] == node)
        and (pos := int(np.searchsorted(s.idx, i))) < s.idx.size
        and s.idx[pos] == i
    ]
    lines: list[str] = []
    for f_idx, family in enumerate(FAMILIES):
        body = []
        values = grid.values[family.name][:, i]
        for s in live:
            if not grid.served[f_idx][s.row]:
                continue
            value = values[s.row : s.row + 1]
            xid = int(value[0]) if family.name == "DCGM_FI_DEV_XID_ERRORS" else None
            body.append(
                f"{family.name}{_label_text(_exporter_labels(grid, s, xid))} {_format_values(value)[0]}"
            )
        if body:
            lines += [f"# HELP {family.name} {family.help}", f"# TYPE {family.name} {family.kind}", *body]
    return "".join(f"{line}\n" for line in lines)


# ---------------------------------------------------------------------------------------------
# OpenMetrics backfill


def write_backfill(
    fleet: SimulatedFleet,
    out: TextSink,
    *,
    layout: str = "servicemonitor",
    metrics: Sequence[str] | None = None,
    step_seconds: int | None = None,
    progress: Callable[[int, int], None] | None = None,
    end_of_file: bool = True,
    between: tuple[datetime, datetime] | None = None,
    external_labels: Sequence[tuple[str, str]] = (),
) -> int:
    """Write the fleet's DCGM series as Prometheus stores them, for promtool's OpenMetrics backfill.

    Label sets are the stored ones: `layout="servicemonitor"` (kube-prometheus-stack, honorLabels false)
    renames the exporter's pod/namespace/container to exported_* and adds the target labels (pod,
    namespace, container of the exporter, instance, job, endpoint, service); `"honor_labels"` keeps the
    workload labels and adds instance and job. Empty labels are absent, as Prometheus drops them.

    Sample i, which stands for [t_i, t_i + step), is written at the middle of its interval,
    t_i + step/2, so `avg_over_time(x[step])` evaluated at t_i + step sees exactly sample i (and a
    plain query at t_i + step/2 reads it back). `step_seconds` (a multiple of the fleet's step)
    coarsens: gauges become the mean of their sub-samples, counters and sticky values (energy, remapped
    rows, XID, row-remap failure) the last one. Counters are declared `unknown`: OpenMetrics wants a
    counter's samples named `<name>_total`, and the stored name must stay the exporter's.

    `metrics` names the families to write (default: all; with_counterparts() adds other vendors' own).
    `external_labels` are added to every series, as a cluster's Prometheus adds its external labels
    (cluster="eu-1") to what it sends a store shared by several clusters.

    `between=(a, b)` writes only the samples whose interval starts in [a, b) (at the written step). It
    lets a caller cut the history into one file per 2 h block: promtool before 2.44 has no
    --max-block-duration and re-reads its whole input once per 2 h block it writes.

    Returns the number of samples written; `progress(done, total)` is called as samples are written.
    `end_of_file=False` leaves out the closing `# EOF`, for a caller that appends more families.
    """
    if layout not in LAYOUTS:
        raise DataError(f"unknown layout {layout!r} (expected one of {', '.join(LAYOUTS)})")
    wanted = FAMILY_NAMES if metrics is None else tuple(metrics)
    unknown = sorted(set(wanted) - set(FAMILY_NAMES))
    if unknown:
        raise DataError(f"unknown metric families {unknown} (known: {', '.join(FAMILY_NAMES)})")
    # The fleet's own-step grid is remembered: a caller writing one file per block builds it once.
    own_step = step_seconds in (None, fleet.window.step_seconds)
    grid = _fine_grid(fleet) if own_step else _build_grid(fleet, step_seconds)
    stamps = _timestamps(grid)
    first, stop = (0, grid.n_samples) if between is None else _sample_range(grid, *between)
    families = [(i, f) for i, f in enumerate(FAMILIES) if f.name in wanted]
    selected = [_select(s.idx, first, stop) for s in grid.series]
    total = sum(
        idx.size
        for i, _ in families
        for s, idx in zip(grid.series, selected, strict=True)
        if grid.served[i][s.row]
    )
    done = 0
    for f_idx, family in families:
        out.write(f"# HELP {family.name} {family.help}\n")
        out.write(f"# TYPE {family.name} {'unknown' if family.kind == 'counter' else family.kind}\n")
        matrix = grid.values[family.name]
        for s, idx in zip(grid.series, selected, strict=True):
            if not grid.served[f_idx][s.row] or not idx.size:
                continue
            values = matrix[s.row, idx]
            target = grid.target_of_row[s.row]
            if family.name == "DCGM_FI_DEV_XID_ERRORS":
                parts: list[tuple[int | None, BoolArray]] = list(_xid_split(values))
            else:
                parts = [(None, np.ones(values.size, dtype=bool))]
            for xid, sel in parts:
                labels = [*_stored_labels(_exporter_labels(grid, s, xid), target, layout), *external_labels]
                prefix = f"{family.name}{_label_text(labels)} "
                texts = _format_values(values[sel])
                out.write(
                    "".join([prefix + v + t for v, t in zip(texts, stamps[idx[sel]].tolist(), strict=True)])
                )
            done += idx.size
            if progress is not None:
                progress(done, total)
    if end_of_file:
        out.write("# EOF\n")
    return done


def with_counterparts(metrics: Sequence[str]) -> tuple[str, ...]:
    """DCGM family names and the families of other vendors' exporters measuring the same quantities (for
    DCGM_FI_DEV_GPU_UTIL, AMD's gpu_gfx_activity): what a backfill of those DCGM families needs to hold
    the same telemetry for every GPU of a mixed fleet."""
    columns = {f.column for f in FAMILIES if f.name in metrics}
    return (
        *metrics,
        *(f.name for f in FAMILIES if f.vendor != "nvidia" and f.column in columns and f.name not in metrics),
    )


def _sample_range(grid: _Grid, a: datetime, b: datetime) -> tuple[int, int]:
    """[first, stop): the samples whose interval start t_i = start + i * step lies in [a, b)."""
    if a.tzinfo is None or b.tzinfo is None:
        raise DataError("between wants timezone-aware datetimes")
    step_us = grid.step_seconds * 1_000_000
    start = datetime.fromtimestamp(grid.start_epoch, UTC)

    def ceil_index(t: datetime) -> int:
        return -(-((t - start) // timedelta(microseconds=1)) // step_us)  # exact integer ceiling

    return max(0, ceil_index(a)), min(grid.n_samples, max(0, ceil_index(b)))


def _select(idx: IndexArray, first: int, stop: int) -> IndexArray:
    """The part of an ascending index array inside [first, stop)."""
    lo, hi = np.searchsorted(idx, [first, stop])
    return idx[lo:hi]


def _timestamps(grid: _Grid) -> npt.NDArray[np.object_]:
    """' <seconds>\\n' per sample: the middle of each interval, in whole seconds when the step is even."""
    mids = grid.start_epoch + (np.arange(grid.n_samples) + 0.5) * grid.step_seconds
    if grid.step_seconds % 2 == 0 and float(grid.start_epoch).is_integer():
        text = mids.astype(np.int64).astype(str)
    else:
        text = mids.astype(str)
    return np.array([f" {t}\n" for t in text.tolist()], dtype=object)


# ---------------------------------------------------------------------------------------------
# A live /metrics endpoint


class MetricsServer:
    """A running simulated dcgm-exporter: `GET /metrics[?node=NAME]` in text format 0.0.4."""

    def __init__(self, httpd: ThreadingHTTPServer, thread: threading.Thread) -> None:
        self._httpd = httpd
        self._thread = thread

    @property
    def port(self) -> int:
        return int(self._httpd.server_address[1])

    @property
    def url(self) -> str:
        return f"http://{self._httpd.server_address[0]!s}:{self.port}"

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


class _MetricsHttpServer(ThreadingHTTPServer):
    daemon_threads = True
    fleet: SimulatedFleet
    grid: _Grid
    clock: Callable[[], datetime]


class _MetricsHandler(BaseHTTPRequestHandler):
    server: _MetricsHttpServer

    def do_GET(self) -> None:
        url = urlsplit(self.path)
        if url.path != "/metrics":
            self._reply(404, "not found: try /metrics\n")
            return
        node = parse_qs(url.query).get("node", [None])[0]
        srv = self.server
        fleet = srv.fleet
        if node is not None and node not in {n.name for n in fleet.nodes}:
            self._reply(404, f"no node {node!r}\n")
            return
        at = _clamp(srv.clock(), fleet)
        body = _render(srv.grid, fleet, at=at, node=node)
        if node is not None and not body:
            # The node's exporter is down (telemetry gap or NotReady): a scrape fails, as it would for real.
            self._reply(503, f"exporter on {node} is not serving\n")
            return
        self._reply(200, body)

    def _reply(self, status: int, body: str) -> None:
        data = body.encode()
        self.send_response(status)
        self.send_header("Content-Type", CONTENT_TYPE)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        pass


def _clamp(at: datetime, fleet: SimulatedFleet) -> datetime:
    at = at if at.tzinfo is not None else at.replace(tzinfo=UTC)
    last = fleet.window.end - timedelta(microseconds=1)
    return min(max(at, fleet.window.start), last)


def serve_metrics(
    fleet: SimulatedFleet,
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    clock: Callable[[], datetime] | None = None,
) -> MetricsServer:
    """Serve the fleet as dcgm-exporter does, in a daemon thread; values at `clock()` clamped into the window.

    `GET /metrics` is every node's exporter at once, `GET /metrics?node=NAME` one node's (503 while that
    node's exporter is down, 404 for a node the fleet does not have).
    """
    httpd = _MetricsHttpServer((host, port), _MetricsHandler)
    httpd.fleet = fleet
    httpd.grid = _fine_grid(fleet)
    httpd.clock = clock if clock is not None else (lambda: datetime.now(UTC))
    thread = threading.Thread(target=httpd.serve_forever, name="dcgm-exporter-sim", daemon=True)
    thread.start()
    return MetricsServer(httpd, thread)
