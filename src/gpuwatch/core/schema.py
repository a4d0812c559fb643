"""DataFrame contracts (column names and dtypes) checked where frames cross a layer boundary."""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd

from gpuwatch.core.errors import DataError


def categorical_strings(table: Sequence[str], codes: npt.NDArray[np.integer[Any]]) -> "pd.Series[str]":
    """table[codes] as a categorical of strings with sorted categories (so it sorts like str): millions
    of rows over a few thousand names, built from the codes without spelling the strings out."""
    categories, inverse = np.unique(np.array(table, dtype=object), return_inverse=True)
    dtype = pd.CategoricalDtype(pd.Index(categories, dtype="str"))
    # The code type pandas would pick for that many categories: no second pass to convert them.
    width = next(t for t in (np.int8, np.int16, np.int32, np.int64) if len(categories) < np.iinfo(t).max)
    row_codes = inverse.astype(width)[codes]
    return pd.Series(pd.Categorical.from_codes(row_codes, dtype=dtype, validate=False))


def _is_kind(series: "pd.Series[Any]", kind: str) -> bool:
    """Column kinds: "time" tz-aware UTC, "str" strings (or a categorical of strings: cheap keys for
    joins), "float" float64 (NaN = unknown), "int", "bool"."""
    dtype = series.dtype
    if kind == "str" and isinstance(dtype, pd.CategoricalDtype):
        return bool(pd.api.types.is_string_dtype(dtype.categories.dtype) or dtype.categories.dtype == object)
    if kind == "bool":
        return bool(pd.api.types.is_bool_dtype(dtype))
    if kind == "time":
        return isinstance(dtype, pd.DatetimeTZDtype) and str(dtype.tz) == "UTC"
    if kind == "str":
        return bool(pd.api.types.is_string_dtype(dtype) or pd.api.types.is_object_dtype(dtype))
    if kind == "float":
        return bool(pd.api.types.is_float_dtype(dtype))
    return bool(pd.api.types.is_integer_dtype(dtype))


@dataclass(frozen=True, slots=True)
class Contract:
    """A named set of required columns and their kinds; extra columns are allowed."""

    name: str
    columns: Mapping[str, str]

    def check(self, frame: pd.DataFrame) -> pd.DataFrame:
        """Return the frame unchanged, or raise DataError naming the first broken column."""
        for column, kind in self.columns.items():
            if column not in frame.columns:
                raise DataError(f"{self.name}: missing column {column!r}")
            if not _is_kind(frame[column], kind):
                raise DataError(f"{self.name}: column {column!r} is {frame[column].dtype}, expected {kind}")
        return frame

    def empty(self) -> pd.DataFrame:
        dtypes = {
            "time": "datetime64[ns, UTC]",
            "str": "str",
            "float": "float64",
            "int": "int64",
            "bool": "bool",
        }
        return pd.DataFrame({c: pd.Series(dtype=dtypes[k]) for c, k in self.columns.items()})


# Per GPU (or MIG instance) and sample: what DCGM reported, in base units.
GPU_SAMPLES = Contract(
    "gpu_samples",
    {
        "timestamp": "time",
        "node": "str",
        "uuid": "str",
        "gpu_instance_id": "str",
        "util_ratio": "float",
    },
)

# Per pod, GPU and sample: who held how many GPU-equivalents, and the GPU's utilization.
ATTRIBUTED = Contract(
    "attributed",
    {
        "timestamp": "time",
        "namespace": "str",
        "pod": "str",
        "team": "str",
        "node": "str",
        "pool": "str",
        "uuid": "str",
        "gpu_instance_id": "str",
        "ge_share": "float",
        "util_ratio": "float",
    },
)

# ATTRIBUTED plus the idle decision of SPEC §3 (analytics.ledger.mark_idle): `idle` is the sample's state,
# `low_util_since` the start of the trailing run of below-threshold samples it belongs to (NaT if none).
IDLE_MARKED = Contract(
    "idle_marked",
    {**ATTRIBUTED.columns, "idle": "bool", "low_util_since": "time"},
)

# Per node and sample: the node's GPU capacity as Kubernetes sees it, in GPU-equivalents.
# capacity_ge = physical GPUs; allocatable_ge = what the device plugin advertises; schedulable False =
# cordoned.
NODE_SAMPLES = Contract(
    "node_samples",
    {
        "timestamp": "time",
        "node": "str",
        "pool": "str",
        "product": "str",
        "capacity_ge": "float",
        "allocatable_ge": "float",
        "ready": "bool",
        "schedulable": "bool",
    },
)

# Per node and sample: free GE a pod could be placed on (0 on cordoned or NotReady nodes).
SCHEDULABLE_FREE = Contract(
    "schedulable_free",
    {"timestamp": "time", "node": "str", "pool": "str", "schedulable_free_ge": "float"},
)

# Per node and sample: the FGD fragmented GE F_n (analytics.fragmentation.fragmentation's per-node frame).
NODE_FRAGMENTATION = Contract(
    "node_fragmentation",
    {"timestamp": "time", "node": "str", "fragmented_ge": "float"},
)

# Per GPU pod seen in the window (running or pending): its pool ("" = any pool) and requested GE.
GPU_REQUESTS = Contract(
    "gpu_requests",
    {"namespace": "str", "pod": "str", "pool": "str", "gpus": "float"},
)

# The FGD request mix: share p_k of a pool's GPU pods requesting k GE; pool "" is the fleet-wide mix.
REQUEST_MIX = Contract("request_mix", {"pool": "str", "k": "float", "p_k": "float"})

# Per pending GPU pod: pool from its product node selector ("" = the whole fleet), requested GE.
PENDING_PODS = Contract(
    "pending_pods",
    {"namespace": "str", "pod": "str", "team": "str", "pool": "str", "gpus": "float", "created_at": "time"},
)

# Per pending GPU pod: the scheduler's checks before free GPUs (analytics.placement.screen_pending).
# blocked_by is affinity, taint, mig_profile, quota, or "" when the free GPUs of its group's nodes decide.
PENDING_SCREENS = Contract(
    "pending_screens",
    {
        "namespace": "str",
        "pod": "str",
        "group": "int",
        "blocked_by": "str",
        "detail": "str",
        "node_affinity": "str",
        "tolerations": "str",
        "scheduler_message": "str",
    },
)

# The nodes each group of pending pods asking the same may use (matching, tolerated, offering).
PLACEABLE_NODES = Contract("placeable_nodes", {"group": "int", "node": "str"})

# GPU_SAMPLES as the DCGM sources deliver them: identity extras, the workload whose labels the unit's
# series carried (a time-sliced GPU held by k pods has k rows with the same unit-level values: never sum
# them) and the DCGM field its utilization came from. Other fields add base-unit columns.
DCGM_SAMPLES = Contract(
    "dcgm_samples",
    {
        **GPU_SAMPLES.columns,
        "mig_profile": "str",
        "gpu_index": "str",
        "product": "str",
        "namespace": "str",
        "pod": "str",
        "container": "str",
        "util_source": "str",
    },
)

# The input of counter_increase_joules: per GPU (or MIG instance) series and sample, whole-GPU values in
# base units. Extra columns (gpu_instance_id, node, ...) are allowed and ignored.
ENERGY_SAMPLES = Contract(
    "energy_samples",
    {"timestamp": "time", "uuid": "str", "energy_joules": "float", "power_watts": "float"},
)
# Per physical GPU and sample: the energy it drew in the sample (NaN = unknown) and where that came from.
GPU_ENERGY = Contract(
    "gpu_energy",
    {"timestamp": "time", "uuid": "str", "energy_joules": "float", "energy_source": "str"},
)
# Per pod, GPU and sample: the pod's part of the GPU's energy; namespace/pod/team "" = the unheld part.
ATTRIBUTED_ENERGY = Contract(
    "attributed_energy",
    {
        "timestamp": "time",
        "namespace": "str",
        "pod": "str",
        "team": "str",
        "node": "str",
        "pool": "str",
        "uuid": "str",
        "ge_share": "float",
        "energy_joules": "float",
    },
)

# Right-sizing (analytics.rightsize): one row per workload (a pod) over a window. pool: the normalized
# product of its GPUs; gpus: GE held; p95_busy_ge: 95th percentile over its samples of Σ util × GE share
# (NaN unknown); peak_fb_bytes: the largest framebuffer its units used together at one sample (NaN
# unknown); telemetry_ratio: share of its allocated samples with known utilization.
RIGHTSIZE_WORKLOADS = Contract(
    "rightsize_workloads",
    {
        "namespace": "str",
        "pod": "str",
        "team": "str",
        "pool": "str",
        "gpus": "float",
        "allocated_gpu_hours": "float",
        "p95_busy_ge": "float",
        "peak_fb_bytes": "float",
        "telemetry_ratio": "float",
    },
)
# RIGHTSIZE_WORKLOADS plus what recommend() says of each.
RIGHTSIZE_RECOMMENDATIONS = Contract(
    "rightsize_recommendations",
    {
        **RIGHTSIZE_WORKLOADS.columns,
        "recommendation_kind": "str",
        "recommendation_target": "str",
        "target_ge": "float",
        "monthly_savings_usd": "float",
        "recommendation_reason": "str",
    },
)
RIGHTSIZE_PACKING = Contract(
    "rightsize_packing",
    {"pool": "str", "gpus_before": "int", "gpus_after": "int", "gpus_freed": "int"},
)

# Queues, quotas and fairness (analytics.queues). Kueue: one row per ClusterQueue × pool (the GPU product
# of its flavors): cohort "" = none; quotas in GE; borrowing_limit_gpus NaN = unlimited;
# lending_limit_gpus NaN = all of the unused nominal quota is lendable.
QUEUE_QUOTAS = Contract(
    "queue_quotas",
    {
        "cluster_queue": "str",
        "cohort": "str",
        "team": "str",
        "pool": "str",
        "nominal_gpus": "float",
        "borrowing_limit_gpus": "float",
        "lending_limit_gpus": "float",
    },
)
# One row per Kueue Workload: queue = its LocalQueue; pool "" when never admitted; gpus in GE;
# admitted_at NaT = not admitted; finished_at = when it stopped holding quota (finished or evicted),
# NaT = still holding; preemptions = times it was preempted.
QUEUE_WORKLOADS = Contract(
    "queue_workloads",
    {
        "namespace": "str",
        "workload": "str",
        "queue": "str",
        "cluster_queue": "str",
        "team": "str",
        "pool": "str",
        "gpus": "float",
        "created_at": "time",
        "admitted_at": "time",
        "finished_at": "time",
        "preemptions": "int",
    },
)
# What wait_stats reads of a Kueue Workload or a plain pod: when it was created and admitted (a pod: when
# it was scheduled/started; NaT = not yet). Optional: finished_at (time), preemptions (int).
ADMISSION_TIMES = Contract("admission_times", {"created_at": "time", "admitted_at": "time"})
# The USD per GPU-hour in force in a pool from each timestamp on: one row per sample (PoolRates.at of a
# grid) or one per price change; a sample before a pool's first row has no known price.
POOL_PRICES = Contract("pool_prices", {"timestamp": "time", "pool": "str", "usd_per_gpu_hour": "float"})
# Per ClusterQueue × pool and sample (analytics.queues.queue_usage), in GE.
QUEUE_USAGE = Contract(
    "queue_usage",
    {
        "timestamp": "time",
        "cluster_queue": "str",
        "cohort": "str",
        "team": "str",
        "pool": "str",
        "nominal_gpus": "float",
        "used_gpus": "float",
        "borrowed_gpus": "float",
        "lent_gpus": "float",
    },
)
# One row per Kueue LocalQueue (or ClusterQueue without one) over a window: the report's queues[] fields
# (queues.queue_tables); quota, borrowing and unused quota are the cluster queue's.
QUEUE_ROWS = Contract(
    "queue_rows",
    {
        "queue": "str",
        "namespace": "str",
        "cluster_queue": "str",
        "cohort": "str",
        "team": "str",
        "nominal_gpus": "float",
        "used_gpu_hours": "float",
        "borrowed_gpu_hours": "float",
        "lent_gpu_hours": "float",
        "admitted_workloads": "int",
        "pending_workloads": "int",
        "preemptions": "int",
        "wait_seconds_p50": "float",
        "wait_seconds_p95": "float",
        "wait_seconds_max": "float",
        "reserved_unused_gpu_hours": "float",
        "reserved_unused_usd": "float",
    },
)
# Per ClusterQueue × pool over a window (analytics.queues.queue_summary).
QUEUE_SUMMARY = Contract(
    "queue_summary",
    {
        "cluster_queue": "str",
        "cohort": "str",
        "team": "str",
        "pool": "str",
        "nominal_gpus": "float",
        "used_gpu_hours": "float",
        "borrowed_gpu_hours": "float",
        "lent_gpu_hours": "float",
        "reserved_unused_gpu_hours": "float",
        "reserved_unused_usd": "float",
    },
)
# Per team and pool over a window: GE-hours its pods held, and its quota (nominal GE × window hours).
TEAM_ALLOCATED_HOURS = Contract(
    "team_allocated_hours", {"team": "str", "pool": "str", "allocated_gpu_hours": "float"}
)
TEAM_QUOTA_HOURS = Contract("team_quota_hours", {"team": "str", "pool": "str", "nominal_gpu_hours": "float"})
# Per team: dominant-resource fairness over pools (analytics.queues.fairness).
FAIRNESS = Contract(
    "fairness",
    {
        "team": "str",
        "allocation_share": "float",
        "quota_share": "float",
        "fairness_ratio": "float",
        "dominant_pool": "str",
        "unquoted_gpu_hours": "float",
    },
)
# Per pending GPU pod now: pool "" = the whole fleet; waiting_seconds = as_of − created_at.
PENDING_WAITS = Contract(
    "pending_waits",
    {
        "namespace": "str",
        "pod": "str",
        "team": "str",
        "pool": "str",
        "gpus": "float",
        "waiting_seconds": "float",
    },
)
# Per pod idle-allocated now (SPEC §3): the GE it holds and the start of its idle stretch.
IDLE_PODS = Contract(
    "idle_pods",
    {"namespace": "str", "pod": "str", "team": "str", "pool": "str", "gpus": "float", "idle_since": "time"},
)
# Per pool now: pending demand beside idle-allocated GPUs (analytics.queues.blocked_vs_idle).
BLOCKED_VS_IDLE = Contract(
    "blocked_vs_idle",
    {
        "pool": "str",
        "pending_pods": "int",
        "pending_gpus": "float",
        "pending_gpu_hours_waited": "float",
        "idle_allocated_gpus": "float",
        "idle_holders": "str",
    },
)
# Idle pods worth reclaiming for pending demand (analytics.queues.reclaim_candidates).
RECLAIM_CANDIDATES = Contract(
    "reclaim_candidates",
    {
        **IDLE_PODS.columns,
        "idle_seconds": "float",
        "usd_per_hour": "float",
        "idle_usd_so_far": "float",
        "cluster_queue": "str",
        "borrowing": "bool",
    },
)
# Per charge period × workload (namespace, pod, team) or fleet state × pool × cluster (analytics.charges):
# state one of the six ledger states, or "energy" (gpu_hours then holds kWh; unknown energy NaN). The
# dollars: effective_usd as the report prices a GPU-hour, list_usd at the on-demand price in force.
CHARGES = Contract(
    "charges",
    {
        "period_start": "time",
        "period_end": "time",
        "cluster": "str",
        "pool": "str",
        "team": "str",
        "namespace": "str",
        "pod": "str",
        "state": "str",
        "gpu_hours": "float",
        "effective_usd": "float",
        "list_usd": "float",
    },
)
