"""gpuwatch's own series (the gpuwatch_* families) in PromQL: their labels and one copy of each series,
the grid the history path sums them on, and the hourly and daily roll-ups of those sums with their rules."""

import textwrap
from collections.abc import Sequence
from typing import Final

from gpuwatch.core.errors import ConfigError
from gpuwatch.sources.promql import WIDTH, Matcher, _by, check_label_name, equals, selector

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
