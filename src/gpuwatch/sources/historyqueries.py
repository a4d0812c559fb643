"""The history path's PromQL (SPEC §4.3): the gpuwatch_* families summed, counted or read last over a
piece of a window on the history grid (or from their roll-ups), and their latest values."""

import textwrap
from collections.abc import Sequence
from typing import Final

from gpuwatch.core.errors import ConfigError
from gpuwatch.sources.ownseries import (
    _MS,
    DAY_NAMESPACE_ROLLUP_MARKER,
    DAY_ROLLUP_MARKER,
    FAMILY_LABELS,
    NAMESPACE_LABELS,
    NAMESPACE_NEW_PODS,
    NAMESPACE_PODS,
    NAMESPACE_ROLLUP_MARKER,
    NAMESPACE_ROLLUPS,
    NODE_SUM_METRICS,
    PENDING_INFO_LABELS,
    PENDING_LABELS,
    POD_HISTORY_LABELS,
    POD_IDLE_SPLIT_METRICS,
    POD_LAST_METRICS,
    POD_NEED_ROLLUPS,
    POD_POWER_METRIC,
    POD_SUM_METRICS,
    POOL_ENERGY_METRICS,
    POOL_GE_METRICS,
    POOL_MEAN_METRICS,
    ROLLUP_LEVEL_SECONDS,
    ROLLUP_MARKER,
    ROLLUP_SECONDS,
    TEAM_ENERGY_METRICS,
    _nonzero,
    _on_grid,
    one_copy,
    range_duration,
    rollup_name,
)
from gpuwatch.sources.promql import Matcher, _by, check_label_name, equals, one_of, selector


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
