"""The DCGM catalog: metric aliases and units (DCGM's and other vendors' exporters), label layouts,
exporter-pod detection. dcgmrows turns samples into GPU rows with it."""

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Final, Literal

from gpuwatch.core.units import BYTES_PER_MIB

Kind = Literal["gauge", "counter", "last_value"]


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
# The counterparts of other vendors' exporters, each under the DCGM field whose quantity it measures.
# AMD's device-metrics-exporter (ROCm/device-metrics-exporter docs/configuration/metricslist.md and
# pkg/amdgpu/gpuagent): every field a gauge, "MB" being MiB (amd-smi divides bytes by 2^20). Its
# MetricsFieldPrefix is usually unset or "amd_" (the project's example configs): both spellings are read.
# Intel's Gaudi metric exporter (HabanaAI/gaudi-metric-exporter samples.go): gauges, power in mW.
_AMD = "AMD device-metrics-exporter"
_GAUDI = "Intel Gaudi metric-exporter"


def _amd(metric: str, unit: str, *, mul: float = 1.0, div: float = 1.0) -> tuple[Alias, Alias]:
    """An AMD field under its plain name and under the "amd_" prefix."""
    return (
        Alias(metric=metric, unit=unit, source=_AMD, mul=mul, div=div),
        Alias(metric=f"amd_{metric}", unit=unit, source=f"{_AMD}, MetricsFieldPrefix amd_", mul=mul, div=div),
    )


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
        # The graphics (compute) engine's busy percentage; on a partitioned GPU only partition 0's is set.
        *_amd("gpu_gfx_activity", "percent", div=100.0),
        # HLML's AIP utilization, 0-100 (the exporter does not state the unit; its dashboards read %).
        Alias(metric="habanalabs_utilization", unit="percent", source=_GAUDI, div=100.0),
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
        *_amd("gpu_used_vram", "MiB", mul=BYTES_PER_MIB),
        Alias(metric="habanalabs_memory_used_bytes", unit="bytes", source=_GAUDI),
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
        *_amd("gpu_free_vram", "MiB", mul=BYTES_PER_MIB),
        Alias(metric="habanalabs_memory_free_bytes", unit="bytes", source=_GAUDI),
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
        # Socket power: current on MI3xx (gpu_package_power), averaged on MI2xx (gpu_average_package_power);
        # gpu_power_usage repeats whichever the GPU has, so it is not read as well.
        *_amd("gpu_package_power", "W"),
        *_amd("gpu_average_package_power", "W"),
        Alias(metric="habanalabs_power_mW", unit="mW", source=_GAUDI, div=1000.0),
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
        # The hotspot, which MI2xx and MI3xx both report (MI3xx has no edge sensor).
        *_amd("gpu_junction_temperature", "celsius"),
        Alias(metric="habanalabs_temperature_onchip", unit="celsius", source=_GAUDI),
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
        *_amd("gpu_memory_temperature", "celsius"),
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
        # Exported as a gauge, but it accumulates: read like a counter.
        *_amd("gpu_energy_consumed", "uJ", div=1_000_000.0),
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
        *_amd("gpu_ecc_uncorrect_total", "count"),
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
    """A DCGM metric, or one of the catalog's counterparts from another vendor's exporter."""
    return metric.startswith(("DCGM_", "dcgm_", "habanalabs_")) or metric in _ALIAS_BY_METRIC


# ---------------------------------------------------------------------------------------------
# Labels

# Label names in every layout gpuwatch understands (Prometheus-stored; empty values are absent), in order of
# preference. AMD's exporter always writes serial_number (gpu_uuid only when configured) and hostname (the
# node's name), gpu_id, and card_series (the product) or card_model (a board part number); Gaudi's writes
# UUID and Serial but no node: its series are placed by their scrape target.
UUID_LABELS: Final = ("UUID", "uuid", "serial_number", "gpu_uuid", "Serial")
HOSTNAME_LABELS: Final = ("Hostname", "hostname")  # exporter 4.8.3 (with DCGM 4.6) renamed it
GPU_INSTANCE_LABEL: Final = "GPU_I_ID"
GPU_PROFILE_LABEL: Final = "GPU_I_PROFILE"
GPU_INDEX_LABELS: Final = ("gpu", "gpu_id", "id")
MODEL_LABELS: Final = ("modelName", "card_series", "card_model")
INSTANCE_LABEL: Final = "instance"
# (namespace, pod, container) label triples in order of preference: kube-prometheus-stack's ServiceMonitor
# (honorLabels: false) renames the exporter's labels to exported_*; honor_labels keeps them; the 1.x-era
# exporter wrote pod_name/pod_namespace/container_name.
WORKLOAD_LABEL_SETS: Final = (
    ("exported_namespace", "exported_pod", "exported_container"),
    ("namespace", "pod", "container"),
    ("pod_namespace", "pod_name", "container_name"),
)
# The telemetry exporters' containers: dcgm-exporter (GPU Operator, Helm chart), AMD's device-metrics-
# exporter (AMD GPU Operator, its standalone chart's two variants), Intel's Gaudi metric-exporter.
EXPORTER_CONTAINERS: Final = frozenset(
    {
        "nvidia-dcgm-exporter",
        "dcgm-exporter",
        "metrics-exporter-container",
        "amdgpu-metrics-exporter-container",
        "amd-device-metrics-exporter-container",
        "metric-exporter",
    }
)
# DaemonSet pod names: nvidia-dcgm-exporter-q28k4 (GPU Operator), dcgm-exporter-6ldbb (Helm chart),
# dcgm-exporter-dev-78z52 (a renamed release): "...dcgm-exporter..." plus the 5-character pod suffix;
# AMD's default-metrics-exporter-q8hbb (operator) or rel-amdgpu-metrics-exporter-x2k9d (chart), Gaudi's
# metric-exporter-ds-7fz2p.
_EXPORTER_POD = re.compile(
    r"^(?:[a-z0-9-]*-)?(?:dcgm-exporter|metrics-exporter|metric-exporter-ds)(?:-[a-z0-9-]+)?-[a-z0-9]{5}$"
)


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
