"""Every PromQL string gpuwatch sends, as named builders whose docstrings show the exact query."""

import re
import textwrap
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Final, Literal

from gpuwatch.errors import ConfigError
from gpuwatch.sources.dcgm import Field

_LABEL_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
_METRIC_NAME = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")
_RE2_SPECIAL = re.compile(r"([\\.+*?()|\[\]{}^$])")
WIDTH: Final = 100  # line width of the pretty-printed queries (they sit in docstrings too)


def escape_string(value: str) -> str:
    """A value as the body of a double-quoted PromQL string: backslash, double quote and newline escaped.

    >>> escape_string('team"} or vector(1) or {a="')
    'team\\\\"} or vector(1) or {a=\\\\"'
    """
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def escape_regex(value: str) -> str:
    """A literal for an RE2 (=~) matcher: metacharacters backslash-escaped (string escaping comes later)."""
    return _RE2_SPECIAL.sub(r"\\\1", value)


def check_label_name(name: str) -> str:
    if not _LABEL_NAME.match(name):
        raise ConfigError(f"not a valid Prometheus label name: {name!r}")
    return name


def check_metric_name(name: str) -> str:
    if not _METRIC_NAME.match(name):
        raise ConfigError(f"not a valid Prometheus metric name: {name!r}")
    return name


@dataclass(frozen=True, slots=True)
class Matcher:
    """One label matcher; the value is escaped when rendered, so user input stays a literal."""

    label: str
    value: str
    op: Literal["=", "!=", "=~", "!~"] = "="

    def __post_init__(self) -> None:
        check_label_name(self.label)

    def render(self) -> str:
        return f'{self.label}{self.op}"{escape_string(self.value)}"'


def equals(label: str, value: str) -> Matcher:
    return Matcher(label, value, "=")


def one_of(label: str, values: Iterable[str]) -> Matcher:
    """label =~ "v1|v2|..." with every value a literal (regex metacharacters escaped)."""
    return Matcher(label, "|".join(escape_regex(v) for v in values), "=~")


def selector(metric: str, matchers: Sequence[Matcher] = ()) -> str:
    """metric{m1,m2,...}, or the bare metric name without matchers.

    >>> selector("DCGM_FI_DEV_GPU_UTIL", [equals("exported_namespace", 'x"} or vector(1) or {a="')])
    'DCGM_FI_DEV_GPU_UTIL{exported_namespace="x\\\\"} or vector(1) or {a=\\\\""}'
    """
    check_metric_name(metric)
    if not matchers:
        return metric
    return metric + "{" + ", ".join(m.render() for m in matchers) + "}"


def names_selector(metrics: Iterable[str], matchers: Sequence[Matcher] = ()) -> str:
    """{__name__=~"a|b|..."} plus matchers: every alias of some fields, for series and label-value lookups.

    >>> names_selector(["DCGM_FI_DEV_GPU_UTIL", "dcgm_gpu_utilization"])
    '{__name__=~"DCGM_FI_DEV_GPU_UTIL|dcgm_gpu_utilization"}'
    """
    names = [check_metric_name(m) for m in metrics]
    return "{" + ", ".join(m.render() for m in (one_of("__name__", names), *matchers)) + "}"


def dcgm_names_selector(matchers: Sequence[Matcher] = ()) -> str:
    """Every name of DCGM's and other vendors' exporters, for /api/v1/label/__name__/values?match[]=...

    AMD's are gpu_* (amd_gpu_* with its usual prefix), Gaudi's habanalabs_*::

    {__name__=~"DCGM_.+|dcgm_.+|gpu_.+|amd_gpu_.+|habanalabs_.+"}
    """
    names = Matcher("__name__", "DCGM_.+|dcgm_.+|gpu_.+|amd_gpu_.+|habanalabs_.+", "=~")
    return "{" + ", ".join(m.render() for m in (names, *matchers)) + "}"


def field_aliases_selector(fields: Sequence[Field], matchers: Sequence[Matcher] = ()) -> str:
    """The raw series of some catalog fields under any alias (for /api/v1/series and counts).

    field_aliases_selector([PROF_GR_ENGINE_ACTIVE, DEV_GPU_UTIL]) is::

        {__name__=~"DCGM_FI_PROF_GR_ENGINE_ACTIVE|DCGM_FI_PROF_GR_ENGINE_UTIL_RATIO|dcgm_fi_prof_gr_engine_active|DCGM_FI_DEV_GPU_UTIL|DCGM_FI_DEV_GPU_UTIL_RATIO|dcgm_gpu_utilization|gpu_gfx_activity|amd_gpu_gfx_activity|habanalabs_utilization"}
    """
    return names_selector([m for f in fields for m in f.metrics], matchers)


def liveness_query() -> str:
    """The cheapest question a query API answers (whether it answers at all), evaluated on no series::

    vector(1)
    """
    return "vector(1)"


def series_count_query(fields: Sequence[Field], matchers: Sequence[Matcher] = ()) -> str:
    """How many raw series the fields have now (sizes range-query chunks under the samples limit).

    series_count_query([PROF_GR_ENGINE_ACTIVE, DEV_GPU_UTIL]) is::

        count({__name__=~"DCGM_FI_PROF_GR_ENGINE_ACTIVE|DCGM_FI_PROF_GR_ENGINE_UTIL_RATIO|dcgm_fi_prof_gr_engine_active|DCGM_FI_DEV_GPU_UTIL|DCGM_FI_DEV_GPU_UTIL_RATIO|dcgm_gpu_utilization|gpu_gfx_activity|amd_gpu_gfx_activity|habanalabs_utilization"})
    """
    return f"count({field_aliases_selector(fields, matchers)})"


# ---------------------------------------------------------------------------------------------
# Per-unit aggregates


def _by(aggregate: str, labels: Sequence[str], body: str) -> str:
    """aggregate by (labels, wrapped) (body), with the body indented two spaces."""
    listed = textwrap.fill(", ".join(labels), width=WIDTH, initial_indent="  ", subsequent_indent="  ")
    return f"{aggregate} by (\n{listed}\n) (\n{textwrap.indent(body, '  ')}\n)"


_RANGE_FUNCTION: Final = {
    "gauge": "avg_over_time",
    "counter": "last_over_time",
    "last_value": "last_over_time",
}
# What identifies a GPU unit on both sides of `unless` (either spelling of the renamed labels).
UNIT_MATCH_LABELS: Final = ("UUID", "uuid", "GPU_I_ID", "Hostname", "hostname")


def dcgm_alias_query(
    field: Field,
    metric: str,
    *,
    step_seconds: int,
    matchers: Sequence[Matcher] = (),
    unless_metrics: Sequence[str] = (),
) -> str:
    """One alias of a catalog field per raw series over each step (SPEC §3), optionally minus the GPU
    units that report any of `unless_metrics` at that step.

    Evaluated at t_i + step it covers sample i = [t_i, t_i + step): gauges are averaged over the step
    (avg_over_time), counters and sticky values read last (last_over_time). Nothing else happens on the
    server: the reduction that matters, a step's raw scrapes to one point, is done there, while label
    work (unit conversion per alias, uuid/hostname spellings, `vgpu` copies, MIG parents, xid codes) is
    done per series on the client (`dcgm.row_block`). Prometheus evaluates label_replace, `or` and
    `avg by` per step and series: on a week of 1,000 GPUs that costs ~10x the reads themselves
    (benchmarks/collect.py). The range function drops the metric name; the caller knows it (one query
    per alias).

    dcgm_alias_query(DEV_GPU_UTIL, "DCGM_FI_DEV_GPU_UTIL", step_seconds=60,
    unless_metrics=["DCGM_FI_PROF_GR_ENGINE_ACTIVE"]) is::

        avg_over_time(DCGM_FI_DEV_GPU_UTIL[60s])
        unless on (UUID, uuid, GPU_I_ID, Hostname, hostname) {__name__=~"DCGM_FI_PROF_GR_ENGINE_ACTIVE"}
    """
    if step_seconds <= 0:
        raise ConfigError(f"step must be positive, got {step_seconds}s")
    if metric not in field.metrics:
        raise ConfigError(f"{metric} is not an alias of {field.name}")
    query = f"{_RANGE_FUNCTION[field.kind]}({selector(metric, matchers)}[{step_seconds}s])"
    if unless_metrics:
        on = ", ".join(UNIT_MATCH_LABELS)
        query += f"\nunless on ({on}) {names_selector(unless_metrics, matchers)}"
    return query


POD_ALLOCATION_LABELS = ("namespace", "pod", "team", "node", "pool")
_POD_LABELS = POD_ALLOCATION_LABELS
PENDING_LABELS = ("namespace", "pod", "team", "pool")
# A Kueue ClusterQueue's quota in a pool, and a LocalQueue (gpuwatch_queue_* labels).
QUEUE_POOL_LABELS = ("cluster_queue", "cohort", "team", "pool")
QUEUE_LABELS = ("namespace", "queue", "cluster_queue", "team")
# Why a pending pod waits, in words, and what it asks of a node (gpuwatch_pending_pod_info's labels).
PENDING_INFO_LABELS = ("reason", "scheduler_message", "node_affinity", "tolerations")

# Every gpuwatch_* family and its own labels (docs/metrics.md). Copies of a series from several
# publishers (two exporter replicas, a second scrape job, Prometheus HA replicas behind one query
# endpoint) differ only in labels the scrape added — instance, job, the exporter pod's namespace/pod,
# service, endpoint, replica labels — whatever a deployment calls them. Every read aggregates a family
# by its own labels with max, so the copies are one fact, never summed.
FAMILY_LABELS: Final[dict[str, tuple[str, ...]]] = {
    "gpuwatch_pod_gpu_allocation": (*_POD_LABELS, "resource"),
    "gpuwatch_pod_gpu_idle": _POD_LABELS,
    "gpuwatch_pod_gpu_idle_held": _POD_LABELS,
    "gpuwatch_pod_gpu_idle_abandoned": _POD_LABELS,
    "gpuwatch_pod_gpu_used": _POD_LABELS,
    "gpuwatch_pod_gpu_unknown": _POD_LABELS,
    "gpuwatch_pod_gpu_utilization_ratio": _POD_LABELS,
    "gpuwatch_pod_gpu_idle_since_timestamp_seconds": _POD_LABELS,
    "gpuwatch_pod_gpu_framebuffer_used_bytes": _POD_LABELS,
    "gpuwatch_node_gpus": ("node", "pool", "state"),
    "gpuwatch_node_gpu_capacity": ("node", "pool"),
    "gpuwatch_node_gpu_allocatable": ("node", "pool"),
    "gpuwatch_node_gpus_reporting": ("node", "pool"),
    "gpuwatch_team_gpus": ("team", "state"),
    "gpuwatch_team_used_gpus": ("team",),
    "gpuwatch_team_cost_usd_per_hour": ("team",),
    "gpuwatch_team_idle_cost_usd_per_hour": ("team",),
    "gpuwatch_pool_gpus": ("pool", "state"),
    "gpuwatch_pool_fragmentation_ratio": ("pool",),
    "gpuwatch_pool_fragmented_gpus": ("pool",),
    "gpuwatch_pool_schedulable_free_gpus": ("pool",),
    "gpuwatch_pool_largest_free_block_gpus": ("pool",),
    "gpuwatch_pool_price_usd_per_gpu_hour": ("pool",),
    "gpuwatch_pod_gpu_power_watts": _POD_LABELS,
    "gpuwatch_pool_gpu_power_watts": ("pool",),
    "gpuwatch_team_energy_cost_usd_per_hour": ("team",),
    "gpuwatch_team_gpu_power_watts": ("team",),
    "gpuwatch_pool_energy_cost_usd_per_hour": ("pool",),
    "gpuwatch_team_monthly_budget_usd": ("team",),
    "gpuwatch_team_idle_budget_usd_per_hour": ("team",),
    "gpuwatch_pending_pod_gpus": (*PENDING_LABELS, "blocked_by"),
    "gpuwatch_pending_pod_waiting_seconds": PENDING_LABELS,
    "gpuwatch_pending_pod_info": (*PENDING_LABELS, "blocked_by", *PENDING_INFO_LABELS),
    "gpuwatch_pool_tainted_nodes": ("pool", "taint"),
    "gpuwatch_pool_info": ("pool", "vendor"),
    **dict.fromkeys(
        (
            "gpuwatch_queue_nominal_gpus",
            "gpuwatch_queue_used_gpus",
            "gpuwatch_queue_borrowed_gpus",
            "gpuwatch_queue_lent_gpus",
            "gpuwatch_queue_reserved_unused_usd_per_hour",
        ),
        QUEUE_POOL_LABELS,
    ),
    "gpuwatch_queue_workloads": (*QUEUE_LABELS, "state"),
    "gpuwatch_queue_oldest_pending_seconds": QUEUE_LABELS,
    "gpuwatch_build_info": (),  # version left out: a cycle is a cycle whichever version ran it
}
# The namespace roll-ups' own families (no exporter publishes them: the hourly rules sum the pods' roll-ups).
NAMESPACE_LABELS: Final = ("namespace", "team", "pool")
NAMESPACE_PODS: Final = "gpuwatch_namespace_pods"  # pods with an allocation roll-up in the hour
NAMESPACE_NEW_PODS: Final = "gpuwatch_namespace_new_pods"  # of those, pods without one the hour before
FAMILY_LABELS.update({NAMESPACE_PODS: ("namespace", "team"), NAMESPACE_NEW_PODS: ("namespace", "team")})


# The label a store shared by several clusters tells their series apart by: `gpuwatch export` stamps it
# on its series, each cluster's Prometheus adds it to the DCGM ones as an external label. The recording
# rules keep it beside a family's own labels (RULE_KEEP_LABELS), so a central ruler (Thanos, Mimir,
# vmalert) records each cluster's series apart; where it is absent, keeping it changes nothing.
CLUSTER_LABEL: Final = "cluster"
RULE_KEEP_LABELS: Final = (CLUSTER_LABEL,)


def one_copy(body: str, metric: str, *, keep: Sequence[str] = ()) -> str:
    """`body` (an expression over `metric`) with the publishers' copies of each series made one: max by
    the family's own labels (and `keep`'s, as the recording rules keep CLUSTER_LABEL).

    one_copy("gpuwatch_pool_gpus", "gpuwatch_pool_gpus") is::

        max by (pool, state) (gpuwatch_pool_gpus)
    """
    labels = (*FAMILY_LABELS[metric], *(check_label_name(label) for label in keep))
    by = f" by ({', '.join(labels)})" if labels else ""
    single = f"max{by} ({body})"
    return single if len(single) <= WIDTH else _by("max", labels, body)


def pod_allocation_history_query(*, step_seconds: int, matchers: Sequence[Matcher] = ()) -> str:
    """GE each pod held over each step, from gpuwatch's own exporter series (SPEC §4.3 history), one copy
    of each series whatever publishers wrote it.

    pod_allocation_history_query(step_seconds=60) is::

        sum by (
          namespace, pod, team, node, pool
        ) (
          max by (
            namespace, pod, team, node, pool, resource
          ) (
            avg_over_time(gpuwatch_pod_gpu_allocation[60s])
          )
        )
    """
    metric = "gpuwatch_pod_gpu_allocation"
    body = one_copy(f"avg_over_time({selector(metric, matchers)}[{step_seconds}s])", metric)
    return _by("sum", POD_ALLOCATION_LABELS, body)


# ---------------------------------------------------------------------------------------------
# The history path (SPEC §4.3): gpuwatch's own low-cardinality series summed over a piece of a window
# or read at its end. Sums are taken on a grid of `resolution` seconds (a subquery): at each grid point
# the publishers' copies of a series are made one (one_copy of its average over the grid interval), so
# two exporter replicas count once and an HA failover mid-piece loses nothing. GE-hours are those sums
# times the piece's length over its grid points with an exporter cycle (exporter_samples_query), which
# holds for any resolution that is a multiple of the scrape interval.

POD_HISTORY_LABELS = POD_ALLOCATION_LABELS
POD_SUM_METRICS = (
    "gpuwatch_pod_gpu_allocation",
    "gpuwatch_pod_gpu_idle",
    "gpuwatch_pod_gpu_used",
    "gpuwatch_pod_gpu_unknown",
)
POD_LAST_METRICS = ("gpuwatch_pod_gpu_allocation", "gpuwatch_pod_gpu_idle")
# The idle GE split by framebuffer (held, abandoned): published only for pods with idle GE whose
# framebuffer is known, so idle − held − abandoned is the idle GE of unknown framebuffer.
POD_IDLE_SPLIT_METRICS = ("gpuwatch_pod_gpu_idle_held", "gpuwatch_pod_gpu_idle_abandoned")
POOL_MEAN_METRICS = ("gpuwatch_pool_fragmentation_ratio", "gpuwatch_pool_price_usd_per_gpu_hour")
# The fragmentation ratio's parts, summed over a window: Σ fragmented ÷ Σ free is the window's ratio.
POOL_GE_METRICS = ("gpuwatch_pool_fragmented_gpus", "gpuwatch_pool_schedulable_free_gpus")
NODE_SUM_METRICS = ("gpuwatch_node_gpu_capacity", "gpuwatch_node_gpus_reporting")
# Energy, summed over a window: W × sample hours / 1000 is kWh, USD/h × sample hours is USD.
POD_POWER_METRIC = "gpuwatch_pod_gpu_power_watts"  # a workload's energy: Σ W × sample hours
# Right-sizing's need per pod and piece: the 95th percentile of its busy GE and the peak of its memory.
# Over several pieces a reader takes the highest of each: the peak is the window's; the p95 is the
# busiest piece's (an hour's from roll-ups, a stretch read raw its own): never a burst averaged away,
# but not the window's own, and it moves with the pieces a window is cut in.
POD_NEED_ROLLUPS: Final = (
    ("gpuwatch_pod_gpu_used", "p95_over_time"),
    ("gpuwatch_pod_gpu_framebuffer_used_bytes", "max_over_time"),
)
TEAM_ENERGY_METRICS = ("gpuwatch_team_gpu_power_watts", "gpuwatch_team_energy_cost_usd_per_hour")
# Per pod family summed by namespace, team and pool, the family the namespace roll-ups record it as.
NAMESPACE_ROLLUPS: Final = {
    pod: pod.replace("gpuwatch_pod_", "gpuwatch_namespace_", 1)
    for pod in (*POD_SUM_METRICS, POD_POWER_METRIC, *POD_IDLE_SPLIT_METRICS)
}
FAMILY_LABELS.update(dict.fromkeys(NAMESPACE_ROLLUPS.values(), NAMESPACE_LABELS))
POOL_ENERGY_METRICS = ("gpuwatch_pool_gpu_power_watts", "gpuwatch_pool_energy_cost_usd_per_hour")


_MS: Final = 0.001
MIN_RANGE_SECONDS: Final = 2 * _MS  # a range 1 ms short of its piece must still be one


def range_duration(seconds: float) -> str:
    """A range selector's duration: whole seconds as `86400s`, anything finer in milliseconds (`1500ms`)."""
    ms = round(seconds * 1000)
    if ms <= 0:
        raise ConfigError(f"a range must be positive, got {seconds}s")
    return f"{ms // 1000}s" if ms % 1000 == 0 else f"{ms}ms"


def _on_grid(
    function: str,
    metric: str,
    seconds: float,
    resolution: int,
    matchers: Sequence[Matcher] = (),
    rollup: str = "",
    keep: Sequence[str] = (),
) -> str:
    """function over a subquery: one copy of the metric per grid interval (its average, or its last sample
    for last_over_time), `seconds` back, by the family's labels and `keep`'s. rollup="hour" or "day" reads
    the same from that level's roll-ups instead (rollup_name): the range must then span whole roll-up
    periods and hold their evaluations."""
    if rollup:
        rolled = selector(rollup_name(metric, function, rollup), matchers)
        return f"{_ROLLUP_OUTER[function]}({rolled}[{range_duration(seconds - _MS)}])"
    call = _CALLS.get(function, f"{function}(")
    if resolution < 1:
        raise ConfigError(f"the history resolution must be at least 1s, got {resolution}s")
    within = "last_over_time" if function == "last_over_time" else "avg_over_time"
    # Prometheus before 3.0 closes ranges at both ends: 1 ms less puts a sample (or grid point) that falls
    # exactly on a boundary in one interval (piece), not two.
    samples = f"{selector(metric, matchers)}[{range_duration(resolution - _MS)}]"
    inner = one_copy(f"{within}({samples})", metric, keep=keep)
    outer = f"[{range_duration(seconds - _MS)}:{resolution}s]"
    single = f"{call}({inner}){outer})"
    if len(single) <= WIDTH:
        return single
    return f"{call.rstrip()}\n  (\n{textwrap.indent(inner, '    ')}\n  ){outer}\n)"


def _summed(
    labels: Sequence[str],
    metric: str,
    function: str,
    seconds: float,
    resolution: int,
    rollup: str,
    matchers: Sequence[Matcher] = (),
) -> str:
    body = _on_grid(function, metric, seconds, resolution, matchers, rollup)
    if tuple(labels) == FAMILY_LABELS[metric]:
        return body  # one series per label set already
    if not labels:
        return f"sum (\n{textwrap.indent(body, '  ')}\n)"
    return _by("sum", [check_label_name(label) for label in labels], body)


def _teams(teams: Sequence[str]) -> list[Matcher]:
    """A matcher keeping `teams`' series (none: every team's)."""
    return [one_of("team", teams)] if teams else []


def _nonzero(query: str, nonzero: bool) -> str:
    """The query, or only its series above 0 (a reader counts a missing one as 0)."""
    return f"(\n{textwrap.indent(query, '  ')}\n) > 0" if nonzero else query


# -- hourly roll-ups: the same grid sums recorded once an hour (alerts/gpuwatch-recording.rules.yml) ------
# A roll-up evaluated at h holds the grid function of its family over (h − 1 h, h] on a
# ROLLUP_GRID_SECONDS grid: sum_over_time of those over whole hours is the grid sum of the hours, a
# month of pods is ~1/60 of the samples, and count_over_time of gpuwatch_build_info says which grid
# points had an exporter cycle, so a reader can tell an hour the rules missed from one nobody published.

ROLLUP_SECONDS: Final = 3600
ROLLUP_GRID_SECONDS: Final = 60
ROLLUP_MARKER: Final = "hour:gpuwatch_rollup_evaluation:timestamp_seconds"  # vector(time()) each hour
# Daily roll-ups (rule group gpuwatch.rollup.daily) sum 24 hourly ones: a month of pods is 30 samples per
# series, not 720. Prometheus evaluates a group at a phase of its own, so a reader finds the hours a day
# covers from its evaluation time (DAY_ROLLUP_MARKER) and the hourly phase.
DAY_SECONDS: Final = 86_400
DAY_ROLLUP_LAG_SECONDS: Final = 1800
DAY_ROLLUP_MARKER: Final = "day:gpuwatch_rollup_evaluation:timestamp_seconds"
ROLLUP_LEVEL_SECONDS: Final = {"hour": ROLLUP_SECONDS, "day": DAY_SECONDS}
_ROLLUP_OUTER: Final = {
    "sum_over_time": "sum_over_time",
    "count_over_time": "sum_over_time",
    "last_over_time": "last_over_time",
    "max_over_time": "max_over_time",
    "p95_over_time": "max_over_time",  # a day's, or a window's: its busiest hour's (POD_NEED_ROLLUPS)
    "count": "sum_over_time",  # pods counted in an hour (NAMESPACE_POD_ROLLUPS)
}
# The PromQL call of a grid function that is not one by its own name.
_CALLS: Final = {"p95_over_time": "quantile_over_time(0.95, "}
ROLLUPS: Final = (
    ("gpuwatch_build_info", "count_over_time"),
    ("gpuwatch_pool_gpus", "sum_over_time"),
    ("gpuwatch_team_gpus", "sum_over_time"),
    ("gpuwatch_team_used_gpus", "sum_over_time"),
    ("gpuwatch_team_cost_usd_per_hour", "sum_over_time"),
    ("gpuwatch_team_idle_cost_usd_per_hour", "sum_over_time"),
    ("gpuwatch_pod_gpu_allocation", "sum_over_time"),
    ("gpuwatch_pod_gpu_idle", "sum_over_time"),
    ("gpuwatch_pod_gpu_used", "sum_over_time"),
    ("gpuwatch_pod_gpu_unknown", "sum_over_time"),
    ("gpuwatch_pod_gpu_idle_held", "sum_over_time"),
    ("gpuwatch_pod_gpu_idle_abandoned", "sum_over_time"),
    ("gpuwatch_pod_gpu_allocation", "last_over_time"),
    ("gpuwatch_pod_gpu_idle", "last_over_time"),
    ("gpuwatch_pod_gpu_idle_since_timestamp_seconds", "last_over_time"),
    ("gpuwatch_pool_fragmentation_ratio", "sum_over_time"),
    ("gpuwatch_pool_fragmentation_ratio", "count_over_time"),
    ("gpuwatch_pool_price_usd_per_gpu_hour", "sum_over_time"),
    ("gpuwatch_pool_price_usd_per_gpu_hour", "count_over_time"),
    ("gpuwatch_pool_fragmented_gpus", "sum_over_time"),
    ("gpuwatch_pool_schedulable_free_gpus", "sum_over_time"),
    ("gpuwatch_node_gpu_capacity", "sum_over_time"),
    ("gpuwatch_node_gpus_reporting", "sum_over_time"),
    *((metric, "sum_over_time") for metric in (*TEAM_ENERGY_METRICS, *POOL_ENERGY_METRICS)),
    (POD_POWER_METRIC, "sum_over_time"),
    *POD_NEED_ROLLUPS,
)


# Roll-ups that keep only their series above 0: most pods are never idle or without telemetry in an hour,
# and a reader counts a missing one as 0 (the pod's allocation roll-up says it was there). A month's
# daily idle and unknown roll-ups are then a tenth of the pods', not all ~50,000, for Prometheus to look up.
NONZERO_ROLLUPS: Final = frozenset(
    {
        ("gpuwatch_pod_gpu_idle", "sum_over_time"),
        ("gpuwatch_pod_gpu_unknown", "sum_over_time"),
        ("gpuwatch_pod_gpu_idle_held", "sum_over_time"),
        ("gpuwatch_pod_gpu_idle_abandoned", "sum_over_time"),
    }
)


# Namespace roll-ups: the pods' hourly roll-ups summed per namespace, team and pool by the same rule group,
# right after them, and the pods counted per namespace and team. Every fleet, team and namespace number of
# a window reads these, so it costs what the namespaces cost, not the pods that came and went (real GPU
# clusters start ~2 pods per GPU a day). A window's pods are those of its first piece and, in every later
# one, the pods new to it: present in an hour without an allocation roll-up the hour before (a pod, once
# gone, does not come back under its name: a StatefulSet pod recreated after an hour away counts twice).
NAMESPACE_POD_ROLLUPS: Final = ((NAMESPACE_PODS, "count"), (NAMESPACE_NEW_PODS, "count"))
NAMESPACE_ROLLUP_MARKER: Final = "hour:gpuwatch_namespace_rollup_evaluation:timestamp_seconds"
DAY_NAMESPACE_ROLLUP_MARKER: Final = "day:gpuwatch_namespace_rollup_evaluation:timestamp_seconds"
# Hourly roll-ups without a daily one: a day of hourly pod counts sums nothing a reader wants.
HOUR_ONLY_ROLLUPS: Final = frozenset({(NAMESPACE_PODS, "count")})
_HELD: Final = f"hour:{POD_SUM_METRICS[0]}:sum_over_time"  # a pod's allocation roll-up: it held GPUs


def namespace_rollups() -> tuple[tuple[str, str], ...]:
    """(family, function) of every namespace roll-up, as rollup_name names them."""
    return (*((m, "sum_over_time") for m in NAMESPACE_ROLLUPS.values()), *NAMESPACE_POD_ROLLUPS)


def namespace_rollup_rules() -> list[dict[str, str]]:
    """The hourly rules of the namespace roll-ups, evaluated after the pods' roll-ups in their group (a rule
    reads what the rules before it wrote at the same evaluation), one series per cluster.

    The rules of hour:gpuwatch_namespace_gpu_allocation:sum_over_time and
    hour:gpuwatch_namespace_new_pods:count are::

        sum by (namespace, team, pool, cluster) (hour:gpuwatch_pod_gpu_allocation:sum_over_time)

        count by (
          namespace, team, cluster
        ) (
          group by (
            namespace, pod, team, cluster
          ) (
            hour:gpuwatch_pod_gpu_allocation:sum_over_time
            unless on (namespace, pod, cluster)
            hour:gpuwatch_pod_gpu_allocation:sum_over_time offset 1h
          )
        )
    """
    rules = [{"record": NAMESPACE_ROLLUP_MARKER, "expr": "vector(time())"}]
    keep = (*NAMESPACE_LABELS, *RULE_KEEP_LABELS)
    for pod, namespace in NAMESPACE_ROLLUPS.items():
        expr = f"sum by ({', '.join(keep)}) ({rollup_name(pod, 'sum_over_time')})"
        rules.append({"record": rollup_name(namespace, "sum_over_time"), "expr": expr})
    pod_keys = ("namespace", "pod", "team", *RULE_KEEP_LABELS)
    counted = ("namespace", "team", *RULE_KEEP_LABELS)
    before = f"{_HELD}\nunless on (namespace, pod, {', '.join(RULE_KEEP_LABELS)})\n{_HELD} offset 1h"
    for family, held in ((NAMESPACE_PODS, _HELD), (NAMESPACE_NEW_PODS, before)):
        expr = _by("count", counted, _by("group", pod_keys, held))
        rules.append({"record": rollup_name(family, "count"), "expr": expr})
    return rules


def rollup_name(metric: str, function: str, level: str = "hour") -> str:
    """A roll-up of a family's grid function: hour:<metric>:<function> or day:<metric>:<function>."""
    if level not in ROLLUP_LEVEL_SECONDS:
        raise ConfigError(f"a roll-up level is one of {', '.join(ROLLUP_LEVEL_SECONDS)}, got {level!r}")
    return f"{level}:{metric}:{function}"


def rollup_rules() -> list[dict[str, str]]:
    """The recording rules of the hourly roll-ups, as the rule file holds them (evaluated every hour):
    the history path's grid reads, one copy of each series per cluster (RULE_KEEP_LABELS), so a ruler
    over a store shared by several clusters records each cluster's apart; those of NONZERO_ROLLUPS keep
    only the series above 0 (the daily ones, sums of those, have no other).

    The rule of hour:gpuwatch_pool_gpus:sum_over_time is::

        sum_over_time(
          (
            max by (pool, state, cluster) (avg_over_time(gpuwatch_pool_gpus[59999ms]))
          )[3599999ms:60s]
        )
    """
    rules = [{"record": ROLLUP_MARKER, "expr": "vector(time())"}]
    for metric, function in ROLLUPS:
        expr = _on_grid(function, metric, ROLLUP_SECONDS, ROLLUP_GRID_SECONDS, keep=RULE_KEEP_LABELS)
        expr = _nonzero(expr, (metric, function) in NONZERO_ROLLUPS)
        rules.append({"record": rollup_name(metric, function), "expr": expr})
    return [*rules, *namespace_rollup_rules()]


def day_rollup_rules() -> list[dict[str, str]]:
    """The recording rules of the daily roll-ups (evaluated every day): each the sum (or last) of its
    hourly roll-up over the 24 hours that end DAY_ROLLUP_LAG_SECONDS before the evaluation, so the hour
    evaluated at the same moment, if any, has been written; one copy of each series per cluster (the
    hourly ones of two rule evaluators, merged by a query layer, are one fact; two clusters' are two).

    The rule of day:gpuwatch_pool_gpus:sum_over_time is::

        max by (
          pool, state, cluster
        ) (
          sum_over_time(hour:gpuwatch_pool_gpus:sum_over_time[86399999ms] offset 1800s)
        )
    """
    rules = [{"record": DAY_ROLLUP_MARKER, "expr": "vector(time())"}]
    lag = f"offset {DAY_ROLLUP_LAG_SECONDS}s"
    for metric, function in (*ROLLUPS, *namespace_rollups()):
        if (metric, function) in HOUR_ONLY_ROLLUPS:
            continue
        hourly = rollup_name(metric, function)
        rolled = f"{_ROLLUP_OUTER[function]}({hourly}[{range_duration(DAY_SECONDS - _MS)}] {lag})"
        expr = one_copy(rolled, metric, keep=RULE_KEEP_LABELS)
        rules.append({"record": rollup_name(metric, function, "day"), "expr": expr})
        if (
            metric == ROLLUPS[-1][0] and function == ROLLUPS[-1][1]
        ):  # the namespace ones' marker after the pods'
            rules.append({"record": DAY_NAMESPACE_ROLLUP_MARKER, "expr": "vector(time())"})
    return rules


def rollup_marker_query(level: str = "hour", matchers: Sequence[Matcher] = ()) -> str:
    """The time of the latest evaluation of a level's roll-ups (instant query; absent without them).
    With `matchers` (one cluster's series in a store several share): the marker they match, or one
    without their labels, as a ruler over the whole store records it (its rules keep each cluster's
    series apart, but the marker is a vector(time()) of no cluster).

    rollup_marker_query() and rollup_marker_query(matchers=[equals("cluster", "eu-1")]) are::

        last_over_time(hour:gpuwatch_rollup_evaluation:timestamp_seconds[7200s])

        last_over_time(hour:gpuwatch_rollup_evaluation:timestamp_seconds{cluster="eu-1"}[7200s])
        or last_over_time(hour:gpuwatch_rollup_evaluation:timestamp_seconds{cluster=""}[7200s])
    """
    marker = ROLLUP_MARKER if level == "hour" else DAY_ROLLUP_MARKER
    within = f"[{2 * ROLLUP_LEVEL_SECONDS[level]}s]"
    own = f"last_over_time({selector(marker, matchers)}{within})"
    if not matchers:
        return own
    unlabelled = [equals(m.label, "") for m in matchers]
    return f"{own}\nor last_over_time({selector(marker, unlabelled)}{within})"


def _one_of_metrics(metric: str, allowed: Sequence[str]) -> str:
    if metric not in allowed:
        raise ConfigError(f"{metric!r} is not one of {', '.join(allowed)}")
    return metric


INTERVAL_PROBE_SECONDS: Final = 600


def exporter_interval_query(*, range_seconds: float, matchers: Sequence[Matcher] = ()) -> str:
    """The most exporter cycles one publisher left in any stretch of INTERVAL_PROBE_SECONDS (or of the
    range, if shorter) within the range: that stretch / it is at most the scrape interval, the history
    grid's resolution (a failover between replicas mid-range does not stretch it).

    exporter_interval_query(range_seconds=86400) is::

        max_over_time((max(count_over_time(gpuwatch_build_info[600s])))[86400s:600s])
    """
    probe = range_duration(probe_seconds(range_seconds))
    counts = f"max(count_over_time({selector('gpuwatch_build_info', matchers)}[{probe}]))"
    return f"max_over_time(({counts})[{range_duration(range_seconds)}:{probe}])"


def probe_seconds(range_seconds: float) -> float:
    """The stretch exporter_interval_query counts cycles in."""
    return min(float(INTERVAL_PROBE_SECONDS), range_seconds)


def exporter_samples_query(
    *, range_seconds: float, resolution_seconds: int, rollup: str = "", matchers: Sequence[Matcher] = ()
) -> str:
    """Grid points of the range at which some exporter cycle was published (every cycle publishes
    gpuwatch_build_info), whatever number of publishers.

    exporter_samples_query(range_seconds=86400, resolution_seconds=60) is::

        count_over_time((max (avg_over_time(gpuwatch_build_info[59999ms])))[86399999ms:60s])
    """
    return _on_grid(
        "count_over_time", "gpuwatch_build_info", range_seconds, resolution_seconds, matchers, rollup
    )


def pool_state_gpus_sum_query(
    *,
    range_seconds: float,
    resolution_seconds: int,
    rollup: str = "",
    matchers: Sequence[Matcher] = (),
) -> str:
    """GE per pool and ledger state, summed over the grid points of the range.

    pool_state_gpus_sum_query(range_seconds=86400, resolution_seconds=60) is::

        sum_over_time((max by (pool, state) (avg_over_time(gpuwatch_pool_gpus[59999ms])))[86399999ms:60s])
    """
    metric = "gpuwatch_pool_gpus"
    return _summed(
        ("pool", "state"), metric, "sum_over_time", range_seconds, resolution_seconds, rollup, matchers
    )


def team_state_gpus_sum_query(
    *,
    range_seconds: float,
    resolution_seconds: int,
    rollup: str = "",
    matchers: Sequence[Matcher] = (),
) -> str:
    """GE each team held per allocated state (unknown, idle, active), summed over the grid points.

    team_state_gpus_sum_query(range_seconds=86400, resolution_seconds=60) is::

        sum_over_time((max by (team, state) (avg_over_time(gpuwatch_team_gpus[59999ms])))[86399999ms:60s])
    """
    metric = "gpuwatch_team_gpus"
    return _summed(
        ("team", "state"), metric, "sum_over_time", range_seconds, resolution_seconds, rollup, matchers
    )


def team_used_gpus_sum_query(
    *,
    range_seconds: float,
    resolution_seconds: int,
    rollup: str = "",
    matchers: Sequence[Matcher] = (),
) -> str:
    """Busy GE (utilization × GE share) per team, summed over the grid points of the range.

    team_used_gpus_sum_query(range_seconds=86400, resolution_seconds=60) is::

        sum_over_time((max by (team) (avg_over_time(gpuwatch_team_used_gpus[59999ms])))[86399999ms:60s])
    """
    metric = "gpuwatch_team_used_gpus"
    return _summed(("team",), metric, "sum_over_time", range_seconds, resolution_seconds, rollup, matchers)


def team_cost_sum_query(
    *,
    range_seconds: float,
    resolution_seconds: int,
    idle: bool = False,
    rollup: str = "",
    matchers: Sequence[Matcher] = (),
) -> str:
    """A team's spend rate (USD/h), allocated or idle-allocated, summed over the grid points.

    team_cost_sum_query(range_seconds=86400, resolution_seconds=60) and (idle=True) are::

        sum_over_time(
          (
            max by (team) (avg_over_time(gpuwatch_team_cost_usd_per_hour[59999ms]))
          )[86399999ms:60s]
        )

        sum_over_time(
          (
            max by (team) (avg_over_time(gpuwatch_team_idle_cost_usd_per_hour[59999ms]))
          )[86399999ms:60s]
        )
    """
    metric = "gpuwatch_team_idle_cost_usd_per_hour" if idle else "gpuwatch_team_cost_usd_per_hour"
    return _summed(("team",), metric, "sum_over_time", range_seconds, resolution_seconds, rollup, matchers)


def team_energy_sum_query(
    metric: str,
    *,
    range_seconds: float,
    resolution_seconds: int,
    rollup: str = "",
    matchers: Sequence[Matcher] = (),
) -> str:
    """A team's GPU power (W) or energy cost rate (USD/h), summed over the grid points of the range.

    team_energy_sum_query("gpuwatch_team_gpu_power_watts", range_seconds=86400, resolution_seconds=60) is::

        sum_over_time(
          (
            max by (team) (avg_over_time(gpuwatch_team_gpu_power_watts[59999ms]))
          )[86399999ms:60s]
        )
    """
    metric = _one_of_metrics(metric, TEAM_ENERGY_METRICS)
    return _summed(("team",), metric, "sum_over_time", range_seconds, resolution_seconds, rollup, matchers)


def pod_gpus_sum_query(
    metric: str,
    *,
    range_seconds: float,
    resolution_seconds: int,
    rollup: str = "",
    nonzero: bool = False,
    matchers: Sequence[Matcher] = (),
) -> str:
    """GE per pod (allocated, idle-allocated, busy or unknown), summed over the grid points of the range.
    nonzero=True leaves out the pods whose sum is 0: most pods are never idle or without telemetry, and
    a month of a large fleet is ~50,000 pods a reader would otherwise receive and parse to add nothing.
    `matchers`: only the pods' series they match (a team's, some pods').

    The same for gpuwatch_pod_gpu_idle, _used, _unknown, _idle_held and _idle_abandoned;
    pod_gpus_sum_query("gpuwatch_pod_gpu_allocation", range_seconds=86400, resolution_seconds=60) is::

        sum by (
          namespace, pod, team, node, pool
        ) (
          sum_over_time(
            (
              max by (
                namespace, pod, team, node, pool, resource
              ) (
                avg_over_time(gpuwatch_pod_gpu_allocation[59999ms])
              )
            )[86399999ms:60s]
          )
        )
    """
    metric = _one_of_metrics(metric, (*POD_SUM_METRICS, *POD_IDLE_SPLIT_METRICS, POD_POWER_METRIC))
    query = _summed(
        POD_HISTORY_LABELS, metric, "sum_over_time", range_seconds, resolution_seconds, rollup, matchers
    )
    return _nonzero(query, nonzero)


def team_pool_gpus_sum_query(
    metric: str,
    *,
    range_seconds: float,
    resolution_seconds: int,
    teams: Sequence[str] = (),
    rollup: str = "",
    matchers: Sequence[Matcher] = (),
) -> str:
    """GE of pods (allocated, idle-allocated, busy or unknown) per team and pool, summed over the grid
    points of the range: what a view scoped to teams or pools draws (only `teams`' pods when given).

    The same for gpuwatch_pod_gpu_idle, _used and _unknown;
    team_pool_gpus_sum_query("gpuwatch_pod_gpu_idle", range_seconds=3600, resolution_seconds=60,
    teams=["nlp"]) is::

        sum by (
          team, pool
        ) (
          sum_over_time(
            (
              max by (
                namespace, pod, team, node, pool
              ) (
                avg_over_time(gpuwatch_pod_gpu_idle{team=~"nlp"}[59999ms])
              )
            )[3599999ms:60s]
          )
        )
    """
    metric = _one_of_metrics(metric, POD_SUM_METRICS)
    scope = [*matchers, *_teams(teams)]
    body = _on_grid("sum_over_time", metric, range_seconds, resolution_seconds, scope, rollup)
    return _by("sum", ("team", "pool"), body)


def namespace_gpus_sum_query(
    metric: str,
    *,
    range_seconds: float,
    resolution_seconds: int,
    rollup: str = "",
    matchers: Sequence[Matcher] = (),
    by: Sequence[str] = NAMESPACE_LABELS,
    namespace_rollups: bool = False,
) -> str:
    """GE of pods (allocated, idle-allocated, busy or unknown) per namespace, team and pool (or the labels
    `by`), summed over the grid points of the range: a namespace's rows without its pods' (`matchers` as
    in pod_gpus_sum_query). namespace_rollups: from roll-ups, read the namespace roll-ups (the same sums,
    recorded per namespace) instead of every pod's.

    The same for gpuwatch_pod_gpu_idle, _used and _unknown;
    namespace_gpus_sum_query("gpuwatch_pod_gpu_used", range_seconds=86400, resolution_seconds=60,
    rollup="day") is::

        sum by (
          namespace, team, pool
        ) (
          sum_over_time(day:gpuwatch_pod_gpu_used:sum_over_time[86399999ms])
        )
    """
    metric = _one_of_metrics(metric, tuple(NAMESPACE_ROLLUPS))
    if namespace_rollups and rollup and tuple(by) == NAMESPACE_LABELS:
        body = _on_grid(
            "sum_over_time", NAMESPACE_ROLLUPS[metric], range_seconds, resolution_seconds, matchers, rollup
        )
        return _by("sum", by, body)
    return _summed(by, metric, "sum_over_time", range_seconds, resolution_seconds, rollup, matchers)


def namespace_pods_query(
    *,
    new: bool,
    range_seconds: float,
    resolution_seconds: int,
    rollup: str = "",
    matchers: Sequence[Matcher] = (),
) -> str:
    """Pods that held GPUs in the range, per namespace and team: all of them, or (new) those that held none
    in the hour before it; from roll-ups, the namespace roll-ups' counts (all of them: an hour's alone).
    resolution_seconds is the history grid's, unused: a pod with any sample in the range is counted.

    namespace_pods_query(new=True, range_seconds=1800, resolution_seconds=60) and
    namespace_pods_query(new=True, range_seconds=86400, resolution_seconds=60, rollup="day") are::

        count by (
          namespace, team
        ) (
          group by (
            namespace, pod, team
          ) (
            last_over_time(gpuwatch_pod_gpu_allocation[1799999ms])
            unless on (namespace, pod)
            last_over_time(gpuwatch_pod_gpu_allocation[3599999ms] offset 1800s)
          )
        )

        sum by (
          namespace, team
        ) (
          sum_over_time(day:gpuwatch_namespace_new_pods:count[86399999ms])
        )
    """
    del resolution_seconds
    counted = ("namespace", "team")
    if rollup:
        if not new and rollup != "hour":
            raise ConfigError("a roll-up counts all of an hour's pods, not a day's: read its new ones")
        family = NAMESPACE_NEW_PODS if new else NAMESPACE_PODS
        rolled = selector(rollup_name(family, "count", rollup), matchers)
        return _by("sum", counted, f"sum_over_time({rolled}[{range_duration(range_seconds - _MS)}])")
    held = selector(POD_SUM_METRICS[0], matchers)
    inside = f"last_over_time({held}[{range_duration(range_seconds - _MS)}])"
    if new:
        before = f"[{range_duration(ROLLUP_SECONDS - _MS)}] offset {range_duration(range_seconds)}"
        inside += f"\nunless on (namespace, pod)\nlast_over_time({held}{before})"
    return _by("count", counted, _by("group", ("namespace", "pod", "team"), inside))


def namespace_rollup_count_query(
    *, namespaces: bool, level: str, range_seconds: float, matchers: Sequence[Matcher] = ()
) -> str:
    """How many evaluations of a level's roll-ups (namespaces: of its namespace roll-ups) the range holds;
    fewer namespace ones than the pods' where rules older than the namespace roll-ups ran. With `matchers`,
    as rollup_marker_query.

    namespace_rollup_count_query(namespaces=True, level="hour", range_seconds=86400) is::

        sum(count_over_time(hour:gpuwatch_namespace_rollup_evaluation:timestamp_seconds[86399999ms]))
    """
    if level not in ROLLUP_LEVEL_SECONDS:
        raise ConfigError(f"a roll-up level is one of {', '.join(ROLLUP_LEVEL_SECONDS)}, got {level!r}")
    markers = {
        (False, "hour"): ROLLUP_MARKER,
        (True, "hour"): NAMESPACE_ROLLUP_MARKER,
        (False, "day"): DAY_ROLLUP_MARKER,
        (True, "day"): DAY_NAMESPACE_ROLLUP_MARKER,
    }
    within = f"[{range_duration(range_seconds - _MS)}]"
    own = f"sum(count_over_time({selector(markers[namespaces, level], matchers)}{within}))"
    if not matchers:
        return own
    unlabelled = [equals(m.label, "") for m in matchers]
    return f"{own}\nor sum(count_over_time({selector(markers[namespaces, level], unlabelled)}{within}))"


def pod_need_query(
    metric: str,
    *,
    range_seconds: float,
    resolution_seconds: int,
    rollup: str = "",
    matchers: Sequence[Matcher] = (),
) -> str:
    """Right-sizing's need per pod over the range (POD_NEED_ROLLUPS): the 95th percentile of its busy GE
    over the grid points it had telemetry at, or the peak of the memory its GPUs held; from roll-ups the
    highest of their hours' (`matchers` as in pod_gpus_sum_query).

    pod_need_query("gpuwatch_pod_gpu_used", range_seconds=86400, resolution_seconds=60) is::

        quantile_over_time(0.95,
          (
            max by (namespace, pod, team, node, pool) (avg_over_time(gpuwatch_pod_gpu_used[59999ms]))
          )[86399999ms:60s]
        )
    """
    function = dict(POD_NEED_ROLLUPS)[_one_of_metrics(metric, [m for m, _ in POD_NEED_ROLLUPS])]
    return _on_grid(function, metric, range_seconds, resolution_seconds, matchers, rollup)


def pod_gpus_last_query(
    metric: str,
    *,
    range_seconds: float,
    resolution_seconds: int,
    rollup: str = "",
    nonzero: bool = False,
    matchers: Sequence[Matcher] = (),
) -> str:
    """GE per pod (allocated or idle-allocated) at its last grid point in the range with a sample, one
    copy per series: after a failover the surviving replica's last word counts, not the dead one's.
    nonzero=True leaves out the pods with 0 GE there (`matchers` as in pod_gpus_sum_query).

    The same for gpuwatch_pod_gpu_idle;
    pod_gpus_last_query("gpuwatch_pod_gpu_allocation", range_seconds=86400, resolution_seconds=60) is::

        sum by (
          namespace, pod, team, node, pool
        ) (
          last_over_time(
            (
              max by (
                namespace, pod, team, node, pool, resource
              ) (
                last_over_time(gpuwatch_pod_gpu_allocation[59999ms])
              )
            )[86399999ms:60s]
          )
        )
    """
    metric = _one_of_metrics(metric, POD_LAST_METRICS)
    body = _on_grid("last_over_time", metric, range_seconds, resolution_seconds, matchers, rollup)
    return _nonzero(_by("sum", POD_HISTORY_LABELS, body), nonzero)


def pod_idle_since_last_query(
    *, range_seconds: float, resolution_seconds: int, rollup: str = "", matchers: Sequence[Matcher] = ()
) -> str:
    """Since when each pod (whose series `matchers` match) was idle, at the last grid point in the range that
    said so.

    pod_idle_since_last_query(range_seconds=86400, resolution_seconds=60) is::

        last_over_time(
          (
            max by (
              namespace, pod, team, node, pool
            ) (
              last_over_time(gpuwatch_pod_gpu_idle_since_timestamp_seconds[59999ms])
            )
          )[86399999ms:60s]
        )
    """
    metric = "gpuwatch_pod_gpu_idle_since_timestamp_seconds"
    return _on_grid("last_over_time", metric, range_seconds, resolution_seconds, matchers, rollup)


def pool_sum_query(
    metric: str,
    *,
    range_seconds: float,
    resolution_seconds: int,
    count: bool = False,
    rollup: str = "",
    matchers: Sequence[Matcher] = (),
) -> str:
    """A per-pool ratio, price or GE summed (or, count=True, counted) over the grid points of the range:
    its time average is Σ sum / Σ count over the pieces of a window, each weighted by its sample interval.

    The same for gpuwatch_pool_price_usd_per_gpu_hour, gpuwatch_pool_fragmented_gpus and
    gpuwatch_pool_schedulable_free_gpus;
    pool_sum_query("gpuwatch_pool_fragmentation_ratio", range_seconds=86400, resolution_seconds=60) and
    (count=True) are::

        sum_over_time(
          (
            max by (pool) (avg_over_time(gpuwatch_pool_fragmentation_ratio[59999ms]))
          )[86399999ms:60s]
        )

        count_over_time(
          (
            max by (pool) (avg_over_time(gpuwatch_pool_fragmentation_ratio[59999ms]))
          )[86399999ms:60s]
        )
    """
    metric = _one_of_metrics(metric, (*POOL_MEAN_METRICS, *POOL_GE_METRICS, *POOL_ENERGY_METRICS))
    function = "count_over_time" if count else "sum_over_time"
    return _summed(("pool",), metric, function, range_seconds, resolution_seconds, rollup, matchers)


def node_sum_query(
    metric: str,
    *,
    range_seconds: float,
    resolution_seconds: int,
    rollup: str = "",
    matchers: Sequence[Matcher] = (),
) -> str:
    """GPU units per node (capacity, or with DCGM telemetry) summed over the grid points of the range.

    The same for gpuwatch_node_gpus_reporting;
    node_sum_query("gpuwatch_node_gpu_capacity", range_seconds=86400, resolution_seconds=60) is::

        sum by (
          node
        ) (
          sum_over_time(
            (
              max by (node, pool) (avg_over_time(gpuwatch_node_gpu_capacity[59999ms]))
            )[86399999ms:60s]
          )
        )
    """
    metric = _one_of_metrics(metric, NODE_SUM_METRICS)
    return _summed(("node",), metric, "sum_over_time", range_seconds, resolution_seconds, rollup, matchers)


def node_capacity_latest_query(matchers: Sequence[Matcher] = ()) -> str:
    """Physical GPUs per node now (an instant query: the latest sample, staleness-aware).

    max by (node, pool) (gpuwatch_node_gpu_capacity)
    """
    return f"max by (node, pool) ({selector('gpuwatch_node_gpu_capacity', matchers)})"


def node_state_gpus_latest_query(matchers: Sequence[Matcher] = ()) -> str:
    """GE of each node per ledger state now (instant query).

    max by (node, pool, state) (gpuwatch_node_gpus)
    """
    return one_copy(selector("gpuwatch_node_gpus", matchers), "gpuwatch_node_gpus")


def team_state_gpus_latest_query(matchers: Sequence[Matcher] = ()) -> str:
    """GE each team holds per allocated ledger state now (instant query).

    max by (team, state) (gpuwatch_team_gpus)
    """
    return one_copy(selector("gpuwatch_team_gpus", matchers), "gpuwatch_team_gpus")


def pod_gpus_by_node_latest_query(
    metric: str, *, teams: Sequence[str] = (), matchers: Sequence[Matcher] = ()
) -> str:
    """GE of pods (allocated, idle-allocated, busy or unknown) per team, pool and node now (instant query;
    only `teams`' pods when given).

    The same for gpuwatch_pod_gpu_idle, _used and _unknown;
    pod_gpus_by_node_latest_query("gpuwatch_pod_gpu_allocation", teams=["nlp"]) is::

        sum by (
          team, pool, node
        ) (
          max by (namespace, pod, team, node, pool, resource) (gpuwatch_pod_gpu_allocation{team=~"nlp"})
        )
    """
    metric = _one_of_metrics(metric, POD_SUM_METRICS)
    scope = [*matchers, *_teams(teams)]
    return _by("sum", ("team", "pool", "node"), one_copy(selector(metric, scope), metric))


def largest_free_block_latest_query(matchers: Sequence[Matcher] = ()) -> str:
    """The largest request one schedulable node of each pool can take now (instant query).

    max by (pool) (gpuwatch_pool_largest_free_block_gpus)
    """
    return f"max by (pool) ({selector('gpuwatch_pool_largest_free_block_gpus', matchers)})"


def pending_pod_gpus_latest_query(matchers: Sequence[Matcher] = ()) -> str:
    """GE each pending GPU pod requests now, and why it waits (instant query).

    max by (namespace, pod, team, pool, blocked_by) (gpuwatch_pending_pod_gpus)
    """
    pending = selector("gpuwatch_pending_pod_gpus", matchers)
    return f"max by ({', '.join(PENDING_LABELS)}, blocked_by) ({pending})"


def pending_pod_waiting_latest_query(matchers: Sequence[Matcher] = ()) -> str:
    """How long each pending GPU pod had waited at the exporter's latest cycle (instant query).

    max by (namespace, pod, team, pool) (gpuwatch_pending_pod_waiting_seconds)
    """
    return (
        f"max by ({', '.join(PENDING_LABELS)}) ({selector('gpuwatch_pending_pod_waiting_seconds', matchers)})"
    )


def pending_pod_info_latest_query(matchers: Sequence[Matcher] = ()) -> str:
    """Why each pending GPU pod waits, in words, and what it asks of a node (instant query).

    max by (namespace, pod, team, pool, reason, scheduler_message, node_affinity, tolerations)
      (gpuwatch_pending_pod_info)
    """
    labels = ", ".join((*PENDING_LABELS, *PENDING_INFO_LABELS))
    return f"max by ({labels}) ({selector('gpuwatch_pending_pod_info', matchers)})"


# A ClusterQueue's GE in a pool as the exporter published it each cycle (QUEUE_USAGE's columns).
QUEUE_GPU_METRICS = (
    "gpuwatch_queue_nominal_gpus",
    "gpuwatch_queue_used_gpus",
    "gpuwatch_queue_borrowed_gpus",
    "gpuwatch_queue_lent_gpus",
)


def queue_gpus_mean_query(
    metric: str, *, range_seconds: float, resolution_seconds: int, matchers: Sequence[Matcher] = ()
) -> str:
    """A ClusterQueue's nominal, used, borrowed or lent GE in a pool, averaged over the grid points of the
    range: the queue's mean over a sample of the queue grid, whatever Workloads Kueue has deleted since.

    The same for gpuwatch_queue_nominal_gpus, _borrowed_gpus and _lent_gpus;
    queue_gpus_mean_query("gpuwatch_queue_used_gpus", range_seconds=5400, resolution_seconds=60) is::

        avg_over_time(
          (
            max by (cluster_queue, cohort, team, pool) (avg_over_time(gpuwatch_queue_used_gpus[59999ms]))
          )[5399999ms:60s]
        )
    """
    metric = _one_of_metrics(metric, QUEUE_GPU_METRICS)
    return _on_grid("avg_over_time", metric, range_seconds, resolution_seconds, matchers)


def pool_tainted_nodes_latest_query(matchers: Sequence[Matcher] = ()) -> str:
    """How many of each pool's nodes carry each taint now (instant query).

    max by (pool, taint) (gpuwatch_pool_tainted_nodes)
    """
    return f"max by (pool, taint) ({selector('gpuwatch_pool_tainted_nodes', matchers)})"


def pool_info_latest_query(matchers: Sequence[Matcher] = ()) -> str:
    """Each pool's vendor now (instant query).

    max by (pool, vendor) (gpuwatch_pool_info)
    """
    return f"max by (pool, vendor) ({selector('gpuwatch_pool_info', matchers)})"
