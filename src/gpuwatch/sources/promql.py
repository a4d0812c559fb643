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


def dcgm_names_selector() -> str:
    """Every DCGM metric name, for /api/v1/label/__name__/values?match[]=...

    {__name__=~"DCGM_.+|dcgm_.+"}
    """
    return '{__name__=~"DCGM_.+|dcgm_.+"}'


def field_aliases_selector(fields: Sequence[Field], matchers: Sequence[Matcher] = ()) -> str:
    """The raw series of some catalog fields under any alias (for /api/v1/series and counts).

    field_aliases_selector([PROF_GR_ENGINE_ACTIVE, DEV_GPU_UTIL]) is::

        {__name__=~"DCGM_FI_PROF_GR_ENGINE_ACTIVE|DCGM_FI_PROF_GR_ENGINE_UTIL_RATIO|dcgm_fi_prof_gr_engine_active|DCGM_FI_DEV_GPU_UTIL|DCGM_FI_DEV_GPU_UTIL_RATIO|dcgm_gpu_utilization"}
    """
    return names_selector([m for f in fields for m in f.metrics], matchers)


def series_count_query(fields: Sequence[Field], matchers: Sequence[Matcher] = ()) -> str:
    """How many raw series the fields have now (sizes range-query chunks under the samples limit).

    series_count_query([PROF_GR_ENGINE_ACTIVE, DEV_GPU_UTIL]) is::

        count({__name__=~"DCGM_FI_PROF_GR_ENGINE_ACTIVE|DCGM_FI_PROF_GR_ENGINE_UTIL_RATIO|dcgm_fi_prof_gr_engine_active|DCGM_FI_DEV_GPU_UTIL|DCGM_FI_DEV_GPU_UTIL_RATIO|dcgm_gpu_utilization"})
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


def pod_allocation_history_query(*, step_seconds: int, matchers: Sequence[Matcher] = ()) -> str:
    """GE each pod held over each step, from gpuwatch's own exporter series (SPEC §4.3 history).

    pod_allocation_history_query(step_seconds=60) is::

        sum by (
          namespace, pod, team, node, pool
        ) (
          avg_over_time(gpuwatch_pod_gpu_allocation[60s])
        )
    """
    body = f"avg_over_time({selector('gpuwatch_pod_gpu_allocation', matchers)}[{step_seconds}s])"
    return _by("sum", POD_ALLOCATION_LABELS, body)


# ---------------------------------------------------------------------------------------------
# The history path (SPEC §4.3): gpuwatch's own low-cardinality series summed over a piece of a window
# (sum_over_time: the sum of the exporter's samples in the range) or read at its end. GE-hours are those
# sums times the exporter's sample interval, which the caller finds from exporter_samples_query.

POD_HISTORY_LABELS = POD_ALLOCATION_LABELS
POD_SUM_METRICS = (
    "gpuwatch_pod_gpu_allocation",
    "gpuwatch_pod_gpu_idle",
    "gpuwatch_pod_gpu_used",
    "gpuwatch_pod_gpu_unknown",
)
POD_LAST_METRICS = ("gpuwatch_pod_gpu_allocation", "gpuwatch_pod_gpu_idle")
POOL_MEAN_METRICS = ("gpuwatch_pool_fragmentation_ratio", "gpuwatch_pool_price_usd_per_gpu_hour")
NODE_SUM_METRICS = ("gpuwatch_node_gpu_capacity", "gpuwatch_node_gpus_reporting")
PENDING_LABELS = ("namespace", "pod", "team", "pool")


def range_duration(seconds: float) -> str:
    """A range selector's duration: whole seconds as `86400s`, anything finer in milliseconds (`1500ms`)."""
    ms = round(seconds * 1000)
    if ms <= 0:
        raise ConfigError(f"a range must be positive, got {seconds}s")
    return f"{ms // 1000}s" if ms % 1000 == 0 else f"{ms}ms"


def _over_time(aggregate: str, labels: Sequence[str], function: str, metric: str, seconds: float) -> str:
    by = f" by ({', '.join(check_label_name(label) for label in labels)}) " if labels else ""
    return f"{aggregate}{by}({function}({selector(metric)}[{range_duration(seconds)}]))"


def _pod_over_time(aggregate: str, function: str, metric: str, seconds: float) -> str:
    return _by(aggregate, POD_HISTORY_LABELS, f"{function}({selector(metric)}[{range_duration(seconds)}])")


def _one_of_metrics(metric: str, allowed: Sequence[str]) -> str:
    if metric not in allowed:
        raise ConfigError(f"{metric!r} is not one of {', '.join(allowed)}")
    return metric


def exporter_samples_query(*, range_seconds: float) -> str:
    """How many samples gpuwatch's exporter left in the range (every cycle publishes gpuwatch_build_info).

    exporter_samples_query(range_seconds=86400) is::

        sum(count_over_time(gpuwatch_build_info[86400s]))
    """
    return _over_time("sum", (), "count_over_time", "gpuwatch_build_info", range_seconds)


def pool_state_gpus_sum_query(*, range_seconds: float) -> str:
    """GE per pool and ledger state, summed over the exporter's samples in the range.

    pool_state_gpus_sum_query(range_seconds=86400) is::

        sum by (pool, state) (sum_over_time(gpuwatch_pool_gpus[86400s]))
    """
    return _over_time("sum", ("pool", "state"), "sum_over_time", "gpuwatch_pool_gpus", range_seconds)


def team_state_gpus_sum_query(*, range_seconds: float) -> str:
    """GE each team held idle-allocated and active, summed over the exporter's samples in the range.

    team_state_gpus_sum_query(range_seconds=86400) is::

        sum by (team, state) (sum_over_time(gpuwatch_team_gpus[86400s]))
    """
    return _over_time("sum", ("team", "state"), "sum_over_time", "gpuwatch_team_gpus", range_seconds)


def team_used_gpus_sum_query(*, range_seconds: float) -> str:
    """Busy GE (utilization × GE share) per team, summed over the exporter's samples in the range.

    team_used_gpus_sum_query(range_seconds=86400) is::

        sum by (team) (sum_over_time(gpuwatch_team_used_gpus[86400s]))
    """
    return _over_time("sum", ("team",), "sum_over_time", "gpuwatch_team_used_gpus", range_seconds)


def team_cost_sum_query(*, range_seconds: float, idle: bool = False) -> str:
    """A team's spend rate (USD/h), allocated or idle-allocated, summed over the exporter's samples.

    team_cost_sum_query(range_seconds=86400) and (idle=True) are::

        sum by (team) (sum_over_time(gpuwatch_team_cost_usd_per_hour[86400s]))
        sum by (team) (sum_over_time(gpuwatch_team_idle_cost_usd_per_hour[86400s]))
    """
    metric = "gpuwatch_team_idle_cost_usd_per_hour" if idle else "gpuwatch_team_cost_usd_per_hour"
    return _over_time("sum", ("team",), "sum_over_time", metric, range_seconds)


def pod_gpus_sum_query(metric: str, *, range_seconds: float) -> str:
    """GE per pod (allocated, idle-allocated or busy), summed over the exporter's samples in the range.

    The same for gpuwatch_pod_gpu_idle and gpuwatch_pod_gpu_used;
    pod_gpus_sum_query("gpuwatch_pod_gpu_allocation", range_seconds=86400) is::

        sum by (
          namespace, pod, team, node, pool
        ) (
          sum_over_time(gpuwatch_pod_gpu_allocation[86400s])
        )
    """
    return _pod_over_time("sum", "sum_over_time", _one_of_metrics(metric, POD_SUM_METRICS), range_seconds)


def pod_gpus_last_query(metric: str, *, range_seconds: float) -> str:
    """GE per pod (allocated or idle-allocated) at its last sample in the range.

    The same for gpuwatch_pod_gpu_idle;
    pod_gpus_last_query("gpuwatch_pod_gpu_allocation", range_seconds=86400) is::

        sum by (
          namespace, pod, team, node, pool
        ) (
          last_over_time(gpuwatch_pod_gpu_allocation[86400s])
        )
    """
    return _pod_over_time("sum", "last_over_time", _one_of_metrics(metric, POD_LAST_METRICS), range_seconds)


def pod_idle_since_last_query(*, range_seconds: float) -> str:
    """Since when each pod was idle, at the last sample in the range that said so.

    pod_idle_since_last_query(range_seconds=86400) is::

        max by (
          namespace, pod, team, node, pool
        ) (
          last_over_time(gpuwatch_pod_gpu_idle_since_timestamp_seconds[86400s])
        )
    """
    metric = "gpuwatch_pod_gpu_idle_since_timestamp_seconds"
    return _pod_over_time("max", "last_over_time", metric, range_seconds)


def pool_sum_query(metric: str, *, range_seconds: float, count: bool = False) -> str:
    """A per-pool ratio or price summed (or, count=True, counted) over the samples in the range: its time
    average is Σ sum / Σ count over the pieces of a window, each weighted by its sample interval.

    The same for gpuwatch_pool_price_usd_per_gpu_hour;
    pool_sum_query("gpuwatch_pool_fragmentation_ratio", range_seconds=86400) and (count=True) are::

        sum by (pool) (sum_over_time(gpuwatch_pool_fragmentation_ratio[86400s]))
        sum by (pool) (count_over_time(gpuwatch_pool_fragmentation_ratio[86400s]))
    """
    metric = _one_of_metrics(metric, POOL_MEAN_METRICS)
    function = "count_over_time" if count else "sum_over_time"
    return _over_time("sum", ("pool",), function, metric, range_seconds)


def node_sum_query(metric: str, *, range_seconds: float) -> str:
    """GPU units per node (capacity, or with DCGM telemetry) summed over the samples in the range.

    The same for gpuwatch_node_gpus_reporting;
    node_sum_query("gpuwatch_node_gpu_capacity", range_seconds=86400) is::

        sum by (node) (sum_over_time(gpuwatch_node_gpu_capacity[86400s]))
    """
    metric = _one_of_metrics(metric, NODE_SUM_METRICS)
    return _over_time("sum", ("node",), "sum_over_time", metric, range_seconds)


def node_capacity_latest_query() -> str:
    """Physical GPUs per node now (an instant query: the latest sample, staleness-aware).

    max by (node, pool) (gpuwatch_node_gpu_capacity)
    """
    return f"max by (node, pool) ({selector('gpuwatch_node_gpu_capacity')})"


def largest_free_block_latest_query() -> str:
    """The largest request one schedulable node of each pool can take now (instant query).

    max by (pool) (gpuwatch_pool_largest_free_block_gpus)
    """
    return f"max by (pool) ({selector('gpuwatch_pool_largest_free_block_gpus')})"


def pending_pod_gpus_latest_query() -> str:
    """GE each pending GPU pod requests now, and why it waits (instant query).

    max by (namespace, pod, team, pool, blocked_by) (gpuwatch_pending_pod_gpus)
    """
    return f"max by ({', '.join(PENDING_LABELS)}, blocked_by) ({selector('gpuwatch_pending_pod_gpus')})"


def pending_pod_waiting_latest_query() -> str:
    """How long each pending GPU pod had waited at the exporter's latest cycle (instant query).

    max by (namespace, pod, team, pool) (gpuwatch_pending_pod_waiting_seconds)
    """
    return f"max by ({', '.join(PENDING_LABELS)}) ({selector('gpuwatch_pending_pod_waiting_seconds')})"
