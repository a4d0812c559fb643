"""The DCGM catalog: metric aliases and units, label layouts, exporter-pod detection, samples to GPU rows."""

import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal

import numpy as np
import numpy.typing as npt
import pandas as pd

from gpuwatch.schema import GPU_SAMPLES
from gpuwatch.units import BYTES_PER_MIB

Kind = Literal["gauge", "counter", "last_value"]
FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True, slots=True, kw_only=True)
class Alias:
    """One metric name a DCGM field is exported under, and how its unit converts to base units.

    base = value * mul / div. Division (not multiplication by 0.01) keeps percent -> ratio exact for
    values written as p = 100 * ratio.
    """

    metric: str
    unit: str  # unit at the source: "ratio", "percent", "MiB", "bytes", "W", "mJ", "J", "celsius", ...
    source: str  # where the name comes from (exporter version, CSV)
    mul: float = 1.0
    div: float = 1.0

    def to_base(self, value: float) -> float:
        return value * self.mul / self.div


@dataclass(frozen=True, slots=True, kw_only=True)
class Field:
    """A DCGM field gpuwatch reads: canonical name (the classic exporter name), base-unit column, aliases."""

    name: str
    column: str
    kind: (
        Kind  # gauge: averaged over a step; counter: monotonic (resets on driver reload); last_value: sticky
    )
    whole_gpu: bool  # a physical-GPU value the exporter repeats on every MIG instance series
    aliases: tuple[Alias, ...]
    split_label: str = ""  # a label that splits the value into parts to be summed (DCGM_EXP_XID_* by xid)

    @property
    def metrics(self) -> tuple[str, ...]:
        return tuple(a.metric for a in self.aliases)


_X = "dcgm-exporter 2.x-4.8 (etc/default-counters.csv)"
_OLD = "etc/1.x-compatibility-metrics.csv (lowercase 1.x names, same DCGM field ids)"
# dcgm-exporter 4.9.0 renames the default fields DCGM 4.7 deprecates to their DCGM 4.7 names; eleven change
# unit (clocks Hz, energy J, utilization ratio, memory bytes, NVLink B/s) per its release notes. Names
# marked go-dcgm are asserted by NVIDIA/go-dcgm pkg/dcgm alias_resolution_test.go and
# base_unit_fields_test.go (field ids 150, 155, 230, 1001, 1611) and legacy_fields.csv (GPU_UTIL_RATIO);
# names marked "field table" come from DCGM's field-identifier table (FB_*_BYTES 1626/1627, ROW_REMAP_*
# 393/395, MEMORY_TEMP_CELSIUS) as quoted by third parties: the 4.9 exporter CSV itself was not at hand.
_V49 = "dcgm-exporter 4.9 (DCGM 4.7 name; go-dcgm)"
_V49_TABLE = "dcgm-exporter 4.9 (DCGM 4.7 name; field table)"

PROF_GR_ENGINE_ACTIVE: Final = Field(
    name="DCGM_FI_PROF_GR_ENGINE_ACTIVE",
    column="util_ratio",
    kind="gauge",
    whole_gpu=False,
    aliases=(
        Alias(metric="DCGM_FI_PROF_GR_ENGINE_ACTIVE", unit="ratio", source=_X),
        Alias(metric="DCGM_FI_PROF_GR_ENGINE_UTIL_RATIO", unit="ratio", source=_V49),
        # The 1.x CSV's help text says "(in %)", but the field (id 1001) is a 0-1 ratio either way.
        Alias(metric="dcgm_fi_prof_gr_engine_active", unit="ratio", source=_OLD),
    ),
)
DEV_GPU_UTIL: Final = Field(
    name="DCGM_FI_DEV_GPU_UTIL",
    column="util_ratio",
    kind="gauge",
    whole_gpu=True,
    aliases=(
        Alias(metric="DCGM_FI_DEV_GPU_UTIL", unit="percent", source=_X, div=100.0),
        Alias(metric="DCGM_FI_DEV_GPU_UTIL_RATIO", unit="ratio", source=_V49),
        Alias(metric="dcgm_gpu_utilization", unit="percent", source=_OLD, div=100.0),
    ),
)
DEV_FB_USED: Final = Field(
    name="DCGM_FI_DEV_FB_USED",
    column="fb_used_bytes",
    kind="gauge",
    whole_gpu=False,
    aliases=(
        # 3.3.x help text says "(in MB)"; the DCGM field has always been MiB.
        Alias(metric="DCGM_FI_DEV_FB_USED", unit="MiB", source=_X, mul=BYTES_PER_MIB),
        Alias(metric="DCGM_FI_DEV_FB_USED_BYTES", unit="bytes", source=_V49_TABLE),
        Alias(metric="dcgm_fb_used", unit="MiB", source=_OLD, mul=BYTES_PER_MIB),
    ),
)
DEV_FB_FREE: Final = Field(
    name="DCGM_FI_DEV_FB_FREE",
    column="fb_free_bytes",
    kind="gauge",
    whole_gpu=False,
    aliases=(
        Alias(metric="DCGM_FI_DEV_FB_FREE", unit="MiB", source=_X, mul=BYTES_PER_MIB),
        Alias(metric="DCGM_FI_DEV_FB_FREE_BYTES", unit="bytes", source=_V49_TABLE),
        Alias(metric="dcgm_fb_free", unit="MiB", source=_OLD, mul=BYTES_PER_MIB),
    ),
)
DEV_POWER_USAGE: Final = Field(
    name="DCGM_FI_DEV_POWER_USAGE",
    column="power_watts",
    kind="gauge",
    whole_gpu=True,
    aliases=(
        Alias(metric="DCGM_FI_DEV_POWER_USAGE", unit="W", source=_X),
        Alias(metric="DCGM_FI_DEV_BOARD_POWER_WATTS", unit="W", source=_V49),
        Alias(metric="dcgm_power_usage", unit="W", source=_OLD),
    ),
)
DEV_GPU_TEMP: Final = Field(
    name="DCGM_FI_DEV_GPU_TEMP",
    column="temp_celsius",
    kind="gauge",
    whole_gpu=True,
    aliases=(
        Alias(metric="DCGM_FI_DEV_GPU_TEMP", unit="celsius", source=_X),
        Alias(metric="DCGM_FI_DEV_GPU_TEMP_CELSIUS", unit="celsius", source=_V49),
        Alias(metric="dcgm_gpu_temp", unit="celsius", source=_OLD),
    ),
)
DEV_MEMORY_TEMP: Final = Field(
    name="DCGM_FI_DEV_MEMORY_TEMP",
    column="memory_temp_celsius",
    kind="gauge",
    whole_gpu=True,
    aliases=(
        Alias(metric="DCGM_FI_DEV_MEMORY_TEMP", unit="celsius", source=_X),
        Alias(metric="DCGM_FI_DEV_MEMORY_TEMP_CELSIUS", unit="celsius", source=_V49_TABLE),
        Alias(metric="dcgm_memory_temp", unit="celsius", source=_OLD),
    ),
)
DEV_TOTAL_ENERGY_CONSUMPTION: Final = Field(
    name="DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
    column="energy_joules",
    kind="counter",
    whole_gpu=True,
    aliases=(
        Alias(metric="DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", unit="mJ", source=_X, div=1000.0),
        Alias(metric="DCGM_FI_DEV_GPU_ENERGY_JOULES_TOTAL", unit="J", source=_V49),
        Alias(metric="dcgm_total_energy_consumption", unit="mJ", source=_OLD, div=1000.0),
    ),
)
# The LAST XID code seen (sticky), not a count; 4.x adds err_code/err_msg labels naming it.
DEV_XID_ERRORS: Final = Field(
    name="DCGM_FI_DEV_XID_ERRORS",
    column="xid_last",
    kind="last_value",
    whole_gpu=True,
    aliases=(
        Alias(metric="DCGM_FI_DEV_XID_ERRORS", unit="code", source=_X),
        Alias(metric="DCGM_FI_DEV_XID_ERROR", unit="code", source=_V49),
        Alias(metric="dcgm_xid_errors", unit="code", source=_OLD),
    ),
)
# Opt-in exporter fields: XIDs seen in the exporter's window (gauge) and since exporter start (counter),
# one series per `xid` label value.
EXP_XID_ERRORS_COUNT: Final = Field(
    name="DCGM_EXP_XID_ERRORS_COUNT",
    column="xid_count",
    kind="gauge",
    whole_gpu=True,
    split_label="xid",
    aliases=(Alias(metric="DCGM_EXP_XID_ERRORS_COUNT", unit="count", source="dcgm-exporter 3.3+ (opt-in)"),),
)
EXP_XID_ERRORS_TOTAL: Final = Field(
    name="DCGM_EXP_XID_ERRORS_TOTAL",
    column="xid_total",
    kind="counter",
    whole_gpu=True,
    split_label="xid",
    aliases=(
        Alias(metric="DCGM_EXP_XID_ERRORS_TOTAL", unit="count", source="dcgm-exporter 4.8.3+ (opt-in)"),
    ),
)
DEV_ROW_REMAP_FAILURE: Final = Field(
    name="DCGM_FI_DEV_ROW_REMAP_FAILURE",
    column="row_remap_failure",
    kind="last_value",
    whole_gpu=True,
    aliases=(
        Alias(metric="DCGM_FI_DEV_ROW_REMAP_FAILURE", unit="bool", source=_X),
        Alias(metric="DCGM_FI_DEV_ROW_REMAP_FAILED", unit="bool", source=_V49_TABLE),
    ),
)
DEV_UNCORRECTABLE_REMAPPED_ROWS: Final = Field(
    name="DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
    column="uncorrectable_remapped_rows",
    kind="counter",
    whole_gpu=True,
    aliases=(
        Alias(metric="DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", unit="count", source=_X),
        Alias(metric="DCGM_FI_DEV_ROW_REMAP_UNCORRECTABLE_TOTAL", unit="count", source=_V49_TABLE),
    ),
)
DEV_ECC_DBE_VOL_TOTAL: Final = Field(
    name="DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
    column="ecc_dbe_volatile",
    kind="counter",
    whole_gpu=True,
    aliases=(
        Alias(metric="DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", unit="count", source=_X + ", opt-in"),
        Alias(metric="dcgm_ecc_dbe_volatile_total", unit="count", source=_OLD + ", opt-in"),
    ),
)

FIELDS: Final[tuple[Field, ...]] = (
    PROF_GR_ENGINE_ACTIVE,
    DEV_GPU_UTIL,
    DEV_FB_USED,
    DEV_FB_FREE,
    DEV_POWER_USAGE,
    DEV_GPU_TEMP,
    DEV_MEMORY_TEMP,
    DEV_TOTAL_ENERGY_CONSUMPTION,
    DEV_XID_ERRORS,
    EXP_XID_ERRORS_COUNT,
    EXP_XID_ERRORS_TOTAL,
    DEV_ROW_REMAP_FAILURE,
    DEV_UNCORRECTABLE_REMAPPED_ROWS,
    DEV_ECC_DBE_VOL_TOTAL,
)
FIELD_BY_NAME: Final[Mapping[str, Field]] = {f.name: f for f in FIELDS}
_ALIAS_BY_METRIC: Final[Mapping[str, tuple[Field, Alias]]] = {
    a.metric: (f, a) for f in FIELDS for a in f.aliases
}
# Utilization sources in order of preference (SPEC §2).
UTIL_FIELDS: Final[tuple[Field, ...]] = (PROF_GR_ENGINE_ACTIVE, DEV_GPU_UTIL)


def field_of(metric: str) -> tuple[Field, Alias] | None:
    """The catalog field and alias a metric name belongs to, or None for a name gpuwatch does not read."""
    return _ALIAS_BY_METRIC.get(metric)


def is_dcgm_metric(metric: str) -> bool:
    return metric.startswith(("DCGM_", "dcgm_"))


# ---------------------------------------------------------------------------------------------
# Labels

# Label names in every layout gpuwatch understands (Prometheus-stored; empty values are absent).
UUID_LABELS: Final = ("UUID", "uuid")
HOSTNAME_LABELS: Final = ("Hostname", "hostname")  # exporter 4.8.3 (with DCGM 4.6) renamed it
GPU_INSTANCE_LABEL: Final = "GPU_I_ID"
GPU_PROFILE_LABEL: Final = "GPU_I_PROFILE"
GPU_INDEX_LABEL: Final = "gpu"
MODEL_LABEL: Final = "modelName"
INSTANCE_LABEL: Final = "instance"
# (namespace, pod, container) label triples in order of preference: kube-prometheus-stack's ServiceMonitor
# (honorLabels: false) renames the exporter's labels to exported_*; honor_labels keeps them; the 1.x-era
# exporter wrote pod_name/pod_namespace/container_name.
WORKLOAD_LABEL_SETS: Final = (
    ("exported_namespace", "exported_pod", "exported_container"),
    ("namespace", "pod", "container"),
    ("pod_namespace", "pod_name", "container_name"),
)
# Labels a per-unit query must keep: identity, node resolution and workload. Deliberately absent: `vgpu`
# (time-slicing copies of one GPU collapse), err_code/err_msg, driver version, job, endpoint, service.
GROUP_LABELS: Final = (
    "UUID",
    GPU_INSTANCE_LABEL,
    GPU_PROFILE_LABEL,
    GPU_INDEX_LABEL,
    MODEL_LABEL,
    "Hostname",
    INSTANCE_LABEL,
    "namespace",
    "pod",
    "container",
    "exported_namespace",
    "exported_pod",
    "exported_container",
    "pod_namespace",
    "pod_name",
    "container_name",
)
# The label a server-side query adds to name the canonical field its (base-unit) values belong to.
FIELD_LABEL: Final = "gpuwatch_field"

EXPORTER_CONTAINERS: Final = frozenset({"nvidia-dcgm-exporter", "dcgm-exporter"})
# DaemonSet pod names: nvidia-dcgm-exporter-q28k4 (GPU Operator), dcgm-exporter-6ldbb (Helm chart),
# dcgm-exporter-dev-78z52 (a renamed release): "...dcgm-exporter..." plus the 5-character pod suffix.
_EXPORTER_POD = re.compile(r"^(?:[a-z0-9-]*-)?dcgm-exporter(?:-[a-z0-9-]+)?-[a-z0-9]{5}$")


@dataclass(frozen=True, slots=True, kw_only=True)
class ExporterPods:
    """Where each dcgm-exporter pod runs, as the Kubernetes API says: pod -> node, pod IP -> node.

    Pod keys are "name" or "namespace/name"; the bare name of a "namespace/name" key is known too.
    """

    node_by_pod: Mapping[str, str] = field(default_factory=dict)
    node_by_ip: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        known = dict(self.node_by_pod)
        for key, node in self.node_by_pod.items():
            known.setdefault(key.rpartition("/")[2], node)
        object.__setattr__(self, "node_by_pod", known)


NO_EXPORTERS: Final = ExporterPods()


def is_exporter_pod_name(name: str, exporters: ExporterPods = NO_EXPORTERS) -> bool:
    """True when a Hostname/pod value is a dcgm-exporter pod's own name rather than a node or workload."""
    return bool(name) and (name in exporters.node_by_pod or _EXPORTER_POD.match(name) is not None)


def instance_ip(instance: str) -> str:
    """The host part of a scrape target's `instance` ("10.42.0.7:9400" -> "10.42.0.7", "[fd00::1]:9400")."""
    if instance.startswith("["):
        return instance[1 : instance.find("]")] if "]" in instance else instance
    host, sep, port = instance.rpartition(":")
    return host if sep and port.isdigit() and ":" not in host else instance


def _first(labels: Mapping[str, str], names: Iterable[str]) -> str:
    for name in names:
        value = labels.get(name) or ""
        if value:
            return value
    return ""


def resolve_uuid(labels: Mapping[str, str]) -> str:
    return _first(labels, UUID_LABELS)


def resolve_node(labels: Mapping[str, str], exporters: ExporterPods = NO_EXPORTERS) -> str:
    """The node a series is about: Hostname/hostname, unless that names the exporter pod (then the target).

    An exporter pod's name (or a missing Hostname) is mapped through the scrape target: the exporter pod
    name itself, the `pod` target label (ServiceMonitor, honorLabels false), or the `instance` IP.
    "" when none of them resolves.
    """
    host = _first(labels, HOSTNAME_LABELS)
    if host and not is_exporter_pod_name(host, exporters):
        return host
    for pod in (host, labels.get("pod") or ""):
        if pod and pod in exporters.node_by_pod:
            return exporters.node_by_pod[pod]
    ip = instance_ip(labels.get(INSTANCE_LABEL) or "")
    return exporters.node_by_ip.get(ip, "") if ip else ""


def names_exporter(namespace: str, pod: str, container: str, exporters: ExporterPods = NO_EXPORTERS) -> bool:
    """True when pod/namespace/container are the exporter's own target labels, not a workload's."""
    return (
        container in EXPORTER_CONTAINERS
        or f"{namespace}/{pod}" in exporters.node_by_pod
        or is_exporter_pod_name(pod, exporters)
    )


def resolve_workload(
    labels: Mapping[str, str], exporters: ExporterPods = NO_EXPORTERS
) -> tuple[str, str, str]:
    """(namespace, pod, container) of the workload holding the unit; ("", "", "") when nobody does."""
    for ns_label, pod_label, container_label in WORKLOAD_LABEL_SETS:
        pod = labels.get(pod_label) or ""
        if not pod:
            continue
        namespace = labels.get(ns_label) or ""
        container = labels.get(container_label) or ""
        if pod_label == "pod" and names_exporter(namespace, pod, container, exporters):
            continue
        return namespace, pod, container
    return "", "", ""


# ---------------------------------------------------------------------------------------------
# Samples -> GPU rows

UNIT_KEY: Final = ("node", "uuid", "gpu_instance_id")
WORKLOAD_COLUMNS: Final = ("namespace", "pod", "container")
ROW_KEY: Final = ("timestamp", *UNIT_KEY, *WORKLOAD_COLUMNS)
ID_COLUMNS: Final = ("mig_profile", "gpu_index", "product")

Sample = tuple[Mapping[str, str], float | str]
Problem = Callable[[str], None]


def samples_frame(samples: Iterable[Sample], *, timestamp: pd.Timestamp | None = None) -> pd.DataFrame:
    """(labels, value) samples (labels include __name__) as a long frame: one column per label."""
    rows = [{**labels, "value": value} for labels, value in samples]
    frame = pd.DataFrame(rows)
    if frame.empty:
        frame = pd.DataFrame({"value": pd.Series(dtype="float64")})
    frame["timestamp"] = pd.Timestamp(0, tz="UTC") if timestamp is None else timestamp
    return frame


def to_float(values: "pd.Series[Any] | Sequence[object] | np.ndarray[Any, Any]") -> FloatArray:
    """Sample values as floats: NaN, +Inf, -Inf and anything unparsable become NaN (unknown), never 0."""
    try:
        numbers = np.array(values, dtype=np.float64)
    except (TypeError, ValueError):
        each = np.asarray(values, dtype=object).ravel()
        numbers = np.array([_float_or_nan(v) for v in each], dtype=np.float64)
    numbers[~np.isfinite(numbers)] = np.nan
    return numbers


def _float_or_nan(value: object) -> float:
    try:
        return float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return math.nan


def gpu_rows(
    samples: pd.DataFrame | Iterable[Sample],
    *,
    exporters: ExporterPods = NO_EXPORTERS,
    on_problem: Problem | None = None,
) -> pd.DataFrame:
    """DCGM samples -> one row per (timestamp, unit, workload) in base units (GPU_SAMPLES + extras).

    Input is a long frame (columns: timestamp, value, and one per label; `__name__` for raw exporter
    series, or `gpuwatch_field` for server-side aggregates already in base units) or (labels, value) pairs.
    Rules (SPEC §2): identity UUID|uuid (+ GPU_I_ID for a MIG instance); node from Hostname|hostname or,
    when that is the exporter pod, the scrape target; workload exported_* > pod/namespace/container (not the
    exporter's own) > pod_name/...; copies of one unit and workload (`vgpu`, duplicate scrapes) are averaged,
    never summed; a MIG parent row is dropped where instance rows of its GPU exist; utilization comes per
    unit from DCGM_FI_PROF_GR_ENGINE_ACTIVE when the unit reports it at all, else DCGM_FI_DEV_GPU_UTIL/100.

    Columns: timestamp, node, uuid, gpu_instance_id, mig_profile, gpu_index, product, namespace, pod,
    container, util_ratio, util_source, then one base-unit column per other field present (fb_used_bytes,
    power_watts, ...). A unit held by several pods (time-slicing) has one row per pod carrying the same
    unit-level values: use `unit_rows` for per-GPU numbers.
    """
    frame = samples if isinstance(samples, pd.DataFrame) else samples_frame(samples)
    if frame.empty:
        return _empty_rows()
    labels = [c for c in frame.columns if c not in ("timestamp", "value")]
    text = frame[labels].astype(object).where(frame[labels].notna(), "").astype(str)
    codes = text.groupby(labels, sort=False).ngroup().to_numpy()
    distinct = text.drop_duplicates().to_dict("records")
    return series_rows(
        [{str(k): v for k, v in d.items()} for d in distinct],
        codes,
        pd.to_datetime(frame["timestamp"], utc=True).to_numpy(),
        frame["value"].to_numpy(),
        exporters=exporters,
        on_problem=on_problem,
    )


def series_rows(
    series: Sequence[Mapping[str, str]],
    series_index: "np.ndarray[Any, Any]",
    timestamps: "np.ndarray[Any, Any]",
    values: "np.ndarray[Any, Any] | Sequence[object]",
    *,
    exporters: ExporterPods = NO_EXPORTERS,
    on_problem: Problem | None = None,
) -> pd.DataFrame:
    """`gpu_rows` on a series table: point k is (series[series_index[k]], timestamps[k], values[k]).

    Labels are resolved once per series, not per point (a month of per-GPU points is millions of rows).
    """
    problem = on_problem or (lambda _message: None)
    long = _resolve(series, np.asarray(series_index, dtype=np.intp), timestamps, values, exporters, problem)
    if long.empty:
        return _empty_rows()
    return _choose_util(_pivot(drop_mig_parents(long)))


_ORDER: Final = ("timestamp", *UNIT_KEY, *ID_COLUMNS, *WORKLOAD_COLUMNS, "util_ratio", "util_source")


def _empty_rows() -> pd.DataFrame:
    out = GPU_SAMPLES.empty()
    for column in (*ID_COLUMNS, *WORKLOAD_COLUMNS, "util_source"):
        out[column] = pd.Series(dtype="str")
    return out[list(_ORDER)]


def _resolve(
    series: Sequence[Mapping[str, str]],
    index: "np.ndarray[Any, np.dtype[np.intp]]",
    timestamps: "np.ndarray[Any, Any]",
    values: "np.ndarray[Any, Any] | Sequence[object]",
    exporters: ExporterPods,
    problem: Problem,
) -> pd.DataFrame:
    """Points -> (row key, field, split, base value), labels resolved once per series."""
    resolved = [_resolve_series(labels, exporters) for labels in series]
    unknown = sorted(
        {
            labels.get("__name__", "") or "(no name)"
            for labels, r in zip(series, resolved, strict=True)
            if r is None
        }
    )
    if unknown:
        problem(f"ignored series gpuwatch does not read: {', '.join(unknown)}")
    no_uuid = sum(1 for r in resolved if r is not None and not r[0]["uuid"])
    if no_uuid:
        problem(f"{no_uuid} DCGM series without a UUID label were skipped")
    no_node = sum(1 for r in resolved if r is not None and r[0]["uuid"] and not r[0]["node"])
    if no_node:
        problem(f"{no_node} DCGM series name no node (an exporter pod gpuwatch cannot place)")
    keep = np.array([r is not None and bool(r[0]["uuid"]) for r in resolved], dtype=bool)
    if not keep.any():
        return pd.DataFrame()
    table = pd.DataFrame([r[0] if r is not None else dict.fromkeys(_SERIES_COLUMNS, "") for r in resolved])
    mul = np.array([r[1] if r is not None else math.nan for r in resolved])
    div = np.array([r[2] if r is not None else math.nan for r in resolved])
    row_ok = keep[index]
    sel = index[row_ok]
    out: pd.DataFrame = table.iloc[sel].reset_index(drop=True)
    out.insert(0, "timestamp", pd.to_datetime(np.asarray(timestamps)[row_ok], utc=True))
    out["value"] = to_float(np.asarray(values, dtype=object)[row_ok]) * mul[sel] / div[sel]
    return out


_SERIES_COLUMNS: Final = (*UNIT_KEY, *ID_COLUMNS, *WORKLOAD_COLUMNS, "field", "split")


def _resolve_series(
    labels: Mapping[str, str], exporters: ExporterPods
) -> tuple[dict[str, str], float, float] | None:
    """One series' labels -> (resolved columns, mul, div), or None for a metric outside the catalog."""
    name = labels.get("__name__", "")
    if name:
        found = field_of(name)
        if found is None:
            return None
        fld, alias = found
        mul, div = alias.mul, alias.div
    else:
        by_label = FIELD_BY_NAME.get(labels.get(FIELD_LABEL, ""))
        if by_label is None:
            return None
        fld, mul, div = by_label, 1.0, 1.0
    namespace, pod, container = resolve_workload(labels, exporters)
    return (
        {
            "node": resolve_node(labels, exporters),
            "uuid": resolve_uuid(labels),
            "gpu_instance_id": labels.get(GPU_INSTANCE_LABEL, ""),
            "mig_profile": labels.get(GPU_PROFILE_LABEL, ""),
            "gpu_index": labels.get(GPU_INDEX_LABEL, ""),
            "product": labels.get(MODEL_LABEL, ""),
            "namespace": namespace,
            "pod": pod,
            "container": container,
            "field": fld.name,
            "split": labels.get(fld.split_label, "") if fld.split_label else "",
        },
        mul,
        div,
    )


def drop_mig_parents(frame: pd.DataFrame) -> pd.DataFrame:
    """Drop whole-GPU rows (no gpu_instance_id) of a GPU whose MIG instances report at the same time.

    Under MIG the exporter can serve the parent GPU next to its instances; the parent's utilization
    aggregates the instances', so keeping both would count the GPU twice.
    """
    if frame.empty:
        return frame
    has_instance = frame["gpu_instance_id"] != ""
    with_instances = frame.loc[has_instance, ["timestamp", "node", "uuid"]].drop_duplicates()
    if with_instances.empty:
        return frame
    marked = frame.merge(with_instances.assign(_mig=True), on=["timestamp", "node", "uuid"], how="left")
    parent = (~has_instance.to_numpy()) & marked["_mig"].fillna(False).astype(bool).to_numpy()
    return frame.loc[~parent].reset_index(drop=True)


def _pivot(long: pd.DataFrame) -> pd.DataFrame:
    """Average copies (vgpu, duplicate scrapes) per key, sum `split` parts, one column per field."""
    key = [*ROW_KEY, "field"]
    copies = long.groupby([*key, "split"], sort=False)["value"].mean()
    summed = copies.groupby(level=key, sort=False).sum(min_count=1)
    # Not pivot_table: it drops all-NaN rows, and NaN (unknown) is a value here.
    wide = summed.unstack("field")  # noqa: PD010
    wide.columns = [str(c) for c in wide.columns]
    # Identity columns are constant per unit; a label present on some series only (modelName) must not
    # split rows, so take each unit's first non-empty value.
    ids = long[list(ID_COLUMNS)].replace("", np.nan).groupby([long[c] for c in UNIT_KEY], sort=False).first()
    return wide.reset_index().merge(ids.fillna("").reset_index(), on=list(UNIT_KEY), how="left")


def _choose_util(wide: pd.DataFrame) -> pd.DataFrame:
    """util_ratio per unit: PROF when the unit reports it anywhere in the frame, else GPU_UTIL (SPEC §2)."""
    prof = wide.get(PROF_GR_ENGINE_ACTIVE.name)
    dev = wide.get(DEV_GPU_UTIL.name)
    unit = wide.groupby(list(UNIT_KEY), sort=False).ngroup().to_numpy()
    n_units = int(unit.max()) + 1 if len(unit) else 0

    def reports(column: "pd.Series[float] | None") -> "np.ndarray[tuple[int], np.dtype[np.bool_]]":
        out = np.zeros(n_units, dtype=bool)
        if column is not None:
            np.logical_or.at(out, unit, column.notna().to_numpy())
        return out

    has_prof, has_dev = reports(prof), reports(dev)
    use_prof = has_prof[unit]
    use_dev = ~has_prof[unit] & has_dev[unit]
    prof_values = prof.to_numpy(dtype=np.float64) if prof is not None else np.full(len(wide), np.nan)
    dev_values = dev.to_numpy(dtype=np.float64) if dev is not None else np.full(len(wide), np.nan)
    util = np.where(use_prof, prof_values, np.where(use_dev, dev_values, np.nan))
    out = wide.drop(columns=[c for c in (PROF_GR_ENGINE_ACTIVE.name, DEV_GPU_UTIL.name) if c in wide])
    out["util_ratio"] = util
    out["util_source"] = np.where(
        use_prof, PROF_GR_ENGINE_ACTIVE.name, np.where(use_dev, DEV_GPU_UTIL.name, "")
    )
    # A unit on PROF has no row where only GPU_UTIL reported: that sample is unknown, not a mixed source.
    only_dev_rows = use_prof & np.isnan(prof_values) & ~np.isnan(dev_values)
    other = [c for c in out.columns if c in FIELD_BY_NAME]
    if other:
        only_dev_rows &= out[other].isna().all(axis=1).to_numpy()
    out = out.loc[~only_dev_rows]
    out = out.rename(columns={f.name: f.column for f in FIELDS if f.name in out.columns})
    extra = sorted(c for c in out.columns if c not in _ORDER)
    ordered: pd.DataFrame = out[[*_ORDER, *extra]]
    out = ordered.sort_values(list(ROW_KEY), kind="stable").reset_index(drop=True)
    for column in (*UNIT_KEY, *ID_COLUMNS, *WORKLOAD_COLUMNS, "util_source"):
        out[column] = out[column].astype("str")
    return out


def unit_rows(rows: pd.DataFrame) -> pd.DataFrame:
    """One row per (timestamp, unit): workload columns dropped, the workload rows' values averaged.

    Use this (never a sum over `gpu_rows`) when a per-GPU quantity is wanted: a time-sliced GPU held by
    three pods has three rows carrying the same GPU-level values.
    """
    key = ["timestamp", *UNIT_KEY]
    values = [c for c in rows.columns if c not in (*key, *ID_COLUMNS, *WORKLOAD_COLUMNS, "util_source")]
    firsts = [*ID_COLUMNS, "util_source"]
    grouped = rows.groupby(key, sort=True)
    out = grouped[values].mean()
    out[firsts] = grouped[firsts].first()
    return out.reset_index()[[*key, *ID_COLUMNS, *values, "util_source"]]


def physical_gpus(rows: pd.DataFrame) -> pd.DataFrame:
    """One row per (timestamp, node, uuid) with the whole-GPU fields (power, temp, energy, XID...).

    The exporter repeats these on every MIG instance series; summing them over instances is wrong.
    """
    columns = [
        f.column for f in FIELDS if f.whole_gpu and f.column in rows.columns and f.column != "util_ratio"
    ]
    key = ["timestamp", "node", "uuid"]
    return rows.groupby(key, sort=True)[columns].mean().reset_index()
