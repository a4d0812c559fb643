"""Queues and quotas over a window (issue 14): Kueue's queues with their quota, borrowing and lending,
waits and preemptions, fairness per team, reserved-but-unused quota in dollars, and pending GPU demand
beside idle-allocated GPUs, from Kueue's objects and the rows either read path gives a report."""

import math
from collections import Counter
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd

from gpuwatch.analytics.queues import (
    blocked_vs_idle,
    fairness,
    queue_summary,
    queue_usage,
    reclaim_candidates,
    wait_stats,
)
from gpuwatch.core.model import (
    KueueState,
    Node,
    TeamRules,
    Window,
    cluster_of,
    ge_per_unit,
    is_gpu_resource,
    normalize_product,
    utc,
)
from gpuwatch.core.schema import (
    BLOCKED_VS_IDLE,
    FAIRNESS,
    IDLE_PODS,
    PENDING_WAITS,
    POOL_PRICES,
    QUEUE_QUOTAS,
    QUEUE_ROWS,
    QUEUE_USAGE,
    QUEUE_WORKLOADS,
    RECLAIM_CANDIDATES,
    TEAM_ALLOCATED_HOURS,
    TEAM_QUOTA_HOURS,
)

PriceLookup = Callable[["pd.Series[Any]", "pd.Series[Any]"], "npt.NDArray[np.float64]"]
# Borrowing over time is drawn and summed on a grid of at most this many samples (queue_usage holds
# queues × pools × samples rows): a month at 90-minute steps, a day at 3 minutes.
MAX_QUEUE_SAMPLES = 480
# Per queue (as QUEUE_ROWS keys them) and sample of the queue grid (queue_states).
QUEUE_STATE_COLUMNS = (
    "timestamp",
    "namespace",
    "queue",
    "cluster_queue",
    "team",
    "pending_workloads",
    "admitted_workloads",
    "oldest_pending_seconds",
)
# Workloads whose states are computed at once (a workloads × samples block of booleans each).
_STATE_CHUNK = 4096


@dataclass(frozen=True, slots=True, kw_only=True)
class QueueSetup:
    """Kueue's objects as frames in gpuwatch's terms: quotas per ClusterQueue and pool in GE, Workloads
    with their team, pool and GE, and the LocalQueues. installed False: no Kueue (every frame empty)."""

    installed: bool
    quotas: pd.DataFrame  # QUEUE_QUOTAS
    workloads: pd.DataFrame  # QUEUE_WORKLOADS
    local_queues: pd.DataFrame  # namespace, queue, cluster_queue, team
    cohorts: Mapping[str, str] = field(default_factory=dict)  # cluster_queue -> cohort
    # (namespace, pod) -> Kueue's words on why the pod's own Workload waits (pods Kueue gates)
    admission_messages: Mapping[tuple[str, str], str] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()


def no_queues(warnings: Sequence[str] = ()) -> QueueSetup:
    return QueueSetup(
        installed=False,
        quotas=QUEUE_QUOTAS.empty(),
        workloads=QUEUE_WORKLOADS.empty(),
        local_queues=pd.DataFrame(columns=["namespace", "queue", "cluster_queue", "team"], dtype="str"),
        warnings=tuple(warnings),
    )


def queue_setup(
    kueue: KueueState,
    *,
    nodes: Sequence[Node],
    rules: TeamRules,
    namespace_labels: Mapping[str, Mapping[str, str]],
) -> QueueSetup:
    """The frames of Kueue's objects. A flavor's pool is the product its nodeLabels name
    (nvidia.com/gpu.product), else the pool of most of the nodes it selects (of its own cluster: in a
    fleet of several, Kueue's objects and the nodes are named by their cluster, model.qualified); a
    quantity of a GPU resource is in GE as the flavor's nodes offer it (a time-sliced replica
    1/replicas). A workload's team is its namespace's; a ClusterQueue's the team of most of its
    LocalQueues (its own name without one). Quota of a flavor no node backs is left out, with one
    warning naming it."""
    if not kueue.installed:
        return no_queues()
    warnings = list(kueue.warnings)

    def team_of(namespace: str) -> str:
        return rules.team_of(
            namespace=namespace, pod_labels={}, namespace_labels=namespace_labels.get(namespace, {})
        )

    flavor_pool, flavor_replicas = _flavor_pools(kueue, nodes)
    local = pd.DataFrame(
        {
            "namespace": [q.namespace for q in kueue.local_queues],
            "queue": [q.name for q in kueue.local_queues],
            "cluster_queue": [q.cluster_queue for q in kueue.local_queues],
            "team": [team_of(q.namespace) for q in kueue.local_queues],
        },
        dtype="str",
    )
    teams = {cq: Counter(group["team"]).most_common(1)[0][0] for cq, group in local.groupby("cluster_queue")}
    cohorts = {cq.name: cq.cohort for cq in kueue.cluster_queues}
    quota_rows = []
    unbacked: set[str] = set()
    for cq in kueue.cluster_queues:
        for quota in cq.quotas:
            if not is_gpu_resource(quota.resource):
                continue
            pool = flavor_pool.get(quota.flavor)
            if pool is None:
                unbacked.add(quota.flavor)
                continue
            ge = ge_per_unit(quota.resource, flavor_replicas.get(quota.flavor, 1))
            quota_rows.append(
                {
                    "cluster_queue": cq.name,
                    "cohort": cq.cohort,
                    # No LocalQueue: the queue's own name, not qualified (a team spans the clusters).
                    "team": teams.get(cq.name, cq.name.rpartition("/")[2]),
                    "pool": pool,
                    "nominal_gpus": quota.nominal * ge,
                    "borrowing_limit_gpus": quota.borrowing_limit * ge,
                    "lending_limit_gpus": quota.lending_limit * ge,
                }
            )
    if unbacked:
        warnings.append(
            f"Kueue flavor(s) {', '.join(sorted(unbacked))} select no GPU node: their quota is left out"
        )
    local_cq = {(q.namespace, q.name): q.cluster_queue for q in kueue.local_queues}
    workload_rows = []
    for w in kueue.workloads:
        gpu = {r: q for r, q in w.gpu_requests.items() if is_gpu_resource(r)}
        if not gpu:
            continue
        flavor = next((w.flavors[r] for r in gpu if r in w.flavors), "")
        pool = flavor_pool.get(flavor, "") if w.admitted_at is not None else ""
        replicas = flavor_replicas.get(flavor, 1)
        # It stops holding quota when it finishes, or is evicted after it was admitted (a workload
        # evicted and queued again shows no admission: it waits, and holds nothing).
        stopped = [w.finished_at] if w.finished_at is not None else []
        if w.admitted_at is not None and w.evicted_at is not None and w.evicted_at >= w.admitted_at:
            stopped.append(w.evicted_at)
        workload_rows.append(
            {
                "namespace": w.namespace,
                "workload": w.name,
                "queue": w.queue_name,
                "cluster_queue": w.cluster_queue or local_cq.get((w.namespace, w.queue_name), ""),
                "team": team_of(w.namespace),
                "pool": pool,
                "gpus": sum(ge_per_unit(r, replicas) * q for r, q in gpu.items()),
                "created_at": w.created_at,
                "admitted_at": w.admitted_at,
                "finished_at": min(stopped) if stopped else None,
                "preemptions": w.preemptions,
            }
        )
    messages = {
        (w.namespace, w.owner_name): w.pending_message
        for w in kueue.workloads
        if w.owner_kind == "Pod" and w.status == "pending" and w.pending_message
    }
    return QueueSetup(
        installed=True,
        admission_messages=messages,
        quotas=_frame(quota_rows, QUEUE_QUOTAS.columns),
        workloads=_frame(workload_rows, QUEUE_WORKLOADS.columns),
        local_queues=local,
        cohorts=cohorts,
        warnings=tuple(warnings),
    )


def _flavor_pools(kueue: KueueState, nodes: Sequence[Node]) -> tuple[dict[str, str], dict[str, int]]:
    pools: dict[str, str] = {}
    replicas: dict[str, int] = {}
    for flavor in kueue.flavors:
        # A flavor stands for nodes of its own cluster only: in a fleet of several clusters (its name and
        # theirs qualified by their cluster) another cluster's nodes may carry the very same labels.
        cluster = cluster_of(flavor.name)
        selected = [n for n in nodes if cluster_of(n.name) == cluster and flavor.selects(n.labels)]
        if flavor.product:
            pools[flavor.name] = normalize_product(flavor.product)
        elif selected:
            pools[flavor.name] = Counter(n.pool for n in selected).most_common(1)[0][0]
        else:
            continue
        replicas[flavor.name] = max((n.replicas for n in selected), default=1)
    return pools, replicas


def _frame(rows: Sequence[Mapping[str, Any]], columns: Mapping[str, str]) -> pd.DataFrame:
    frame = pd.DataFrame(rows, columns=list(columns))
    for column, kind in columns.items():
        if kind == "time":
            frame[column] = pd.to_datetime(frame[column], utc=True)
        elif kind == "str":
            frame[column] = frame[column].astype("str")
        elif kind == "float":
            frame[column] = frame[column].astype("float64")
        elif kind == "int":
            frame[column] = frame[column].astype("int64")
    return frame


@dataclass(frozen=True, slots=True, kw_only=True)
class QueueTables:
    """The queues of one window, as a report, the Queues page and the exporter show them."""

    installed: bool
    queues: pd.DataFrame  # QUEUE_ROWS: one row per LocalQueue (or ClusterQueue without one)
    usage: pd.DataFrame  # QUEUE_USAGE on the window's queue grid: borrowing and lending over time
    states: pd.DataFrame  # QUEUE_STATE_COLUMNS on that grid: pending and admitted workloads, oldest wait
    step_seconds: int  # that grid's step
    waits: pd.DataFrame  # namespace, queue, team, wait_seconds, state (admitted | pending): each wait
    fairness: pd.DataFrame  # FAIRNESS
    blocked_vs_idle: pd.DataFrame  # BLOCKED_VS_IDLE
    reclaim: pd.DataFrame  # RECLAIM_CANDIDATES
    admission_messages: Mapping[tuple[str, str], str] = field(default_factory=dict)  # QueueSetup's
    warnings: tuple[str, ...] = ()


def queue_step(window: Window) -> int:
    """The step queue usage is read at: the window's, coarsened (in whole minutes) to at most
    MAX_QUEUE_SAMPLES samples."""
    return max(window.step_seconds, 60 * math.ceil(window.duration_seconds / MAX_QUEUE_SAMPLES / 60))


def queue_grid(window: Window) -> pd.DatetimeIndex:
    """The samples queue usage is read at, queue_step() apart."""
    return pd.date_range(window.start, window.end, freq=f"{queue_step(window)}s", inclusive="left")


def queue_tables(
    setup: QueueSetup,
    *,
    window: Window,
    prices: pd.DataFrame,
    allocated: pd.DataFrame | None,
    idle: pd.DataFrame | None,
    pending: pd.DataFrame,
    reclaim_after_seconds: float,
    recorded: pd.DataFrame | None = None,
) -> QueueTables:
    """A window's queue tables.

    prices: POOL_PRICES (the USD per GPU-hour in force in each pool). allocated: TEAM_ALLOCATED_HOURS,
    the GE-hours each team's pods held per pool; idle: IDLE_PODS, the pods idle-allocated at the end
    (workload_inputs() makes both of a report's workload table). None when not read (a summary of
    recorded history): then what needs them is unknown — fairness' allocation shares, the GPUs idle
    beside pending demand (null in a report) — and no reclaim candidate is listed. pending: the
    report's pending pods (namespace, pod, team, pool, gpus, waiting_seconds). recorded: QUEUE_USAGE on
    the queue grid as the exporter published it (history): quota, borrowing and lending come from it
    when it holds any row, so Workloads Kueue has deleted since still count; else from the Workloads.
    """
    POOL_PRICES.check(prices)
    grid, step = queue_grid(window), queue_step(window)
    if setup.installed and recorded is not None and len(recorded):
        usage = QUEUE_USAGE.check(recorded)
    else:
        usage = queue_usage(setup.workloads, setup.quotas, grid, step)
    summary = queue_summary(usage, step, prices)
    end = window.end
    waits = wait_stats(setup.workloads, ["namespace", "queue"], start=window.start, as_of=end)
    unread = allocated is None or idle is None
    idle = IDLE_PODS.check(idle) if idle is not None else IDLE_PODS.empty()
    pending_waits = PENDING_WAITS.check(
        pending[list(PENDING_WAITS.columns)].astype({"gpus": "float64", "waiting_seconds": "float64"})
    )
    blocked = blocked_vs_idle(pending_waits, idle)
    if unread:  # unknown, never 0: the nulls say so (a summary reads no workload row, by design)
        blocked = blocked.assign(idle_allocated_gpus=np.nan, idle_holders="")
    waiting = pending_waits.drop_duplicates(["namespace", "pod"], keep="last")
    waiting = waiting[waiting["gpus"] > 0]  # (cluster, pool) of each pod waiting for GPUs
    demand = zip(waiting["pod"].astype("str").map(cluster_of), waiting["pool"].astype("str"), strict=True)
    at_end = prices[prices["timestamp"] <= pd.Timestamp(utc(end))]
    reclaim = reclaim_candidates(
        idle, usage, demand, at_end, as_of=end, min_idle_seconds=reclaim_after_seconds
    )
    allocated = TEAM_ALLOCATED_HOURS.check(
        allocated if allocated is not None else TEAM_ALLOCATED_HOURS.empty()
    )
    nominal_hours = usage.assign(nominal_gpu_hours=usage["nominal_gpus"] * step / 3600.0)
    quota_hours = TEAM_QUOTA_HOURS.check(_summed(nominal_hours, "nominal_gpu_hours"))
    fair = fairness(allocated, quota_hours) if setup.installed else FAIRNESS.empty()
    if unread:
        fair = fair.assign(allocation_share=np.nan, fairness_ratio=np.nan, dominant_pool="")
    rows = _queue_rows(setup, summary, waits)
    return QueueTables(
        installed=setup.installed,
        queues=rows,
        usage=QUEUE_USAGE.check(usage),
        states=queue_states(setup.workloads, rows, grid, step, end=end),
        step_seconds=step,
        waits=_each_wait(setup.workloads, window),
        fairness=fair,
        blocked_vs_idle=BLOCKED_VS_IDLE.check(blocked),
        reclaim=RECLAIM_CANDIDATES.check(reclaim),
        admission_messages=setup.admission_messages,
        warnings=setup.warnings,
    )


def _summed(frame: pd.DataFrame, column: str) -> pd.DataFrame:
    summed: pd.DataFrame = frame.groupby(["team", "pool"], as_index=False)[[column]].sum()
    return summed.astype({"team": "str", "pool": "str", column: "float64"})


def workload_inputs(
    workloads: pd.DataFrame, held_at_end: Collection[tuple[str, str]] | None
) -> tuple[pd.DataFrame, pd.DataFrame | None]:
    """TEAM_ALLOCATED_HOURS and IDLE_PODS of a report's workload table (namespace, pod, team, pool,
    gpus, allocated_gpu_hours, idle_since: set when the pod was idle at its last sample) and the
    workloads holding GPUs at the window's end (a pod idle when it ended holds nothing to reclaim);
    the idle pods are unknown (None) when those are."""
    allocated = _summed(workloads.astype({"team": "str", "pool": "str"}), "allocated_gpu_hours")
    if held_at_end is None:
        return TEAM_ALLOCATED_HOURS.check(allocated), None
    pairs = pd.MultiIndex.from_frame(workloads[["namespace", "pod"]].astype("str"))
    return TEAM_ALLOCATED_HOURS.check(allocated), idle_now(workloads[pairs.isin(list(held_at_end))])


def idle_now(workloads: pd.DataFrame) -> pd.DataFrame:
    """IDLE_PODS: the rows (namespace, pod, team, pool, gpus, idle_since) of workloads idle at their
    last sample (pass those holding GPUs at the window's end: idle now)."""
    idle = workloads[workloads["idle_since"].notna()]
    return IDLE_PODS.check(
        pd.DataFrame(
            {
                "namespace": idle["namespace"].astype("str"),
                "pod": idle["pod"].astype("str"),
                "team": idle["team"].astype("str"),
                "pool": idle["pool"].astype("str"),
                "gpus": idle["gpus"].astype("float64"),
                "idle_since": pd.to_datetime(idle["idle_since"], utc=True),
            }
        ).reset_index(drop=True)
    )


def _queue_rows(setup: QueueSetup, summary: pd.DataFrame, waits: pd.DataFrame) -> pd.DataFrame:
    """One row per LocalQueue (a ClusterQueue without one gets its own row): its cluster queue's quota,
    borrowing, lending and unused quota over every pool, and its own workloads' waits."""
    per_cq = summary.groupby("cluster_queue").agg(
        nominal_gpus=("nominal_gpus", "sum"),
        used_gpu_hours=("used_gpu_hours", "sum"),
        borrowed_gpu_hours=("borrowed_gpu_hours", "sum"),
        lent_gpu_hours=("lent_gpu_hours", "sum"),
        reserved_unused_gpu_hours=("reserved_unused_gpu_hours", "sum"),
        reserved_unused_usd=("reserved_unused_usd", lambda s: s.sum(min_count=1)),
    )
    local = setup.local_queues
    alone = sorted(set(setup.quotas["cluster_queue"]) - set(local["cluster_queue"]))
    teams = setup.quotas.drop_duplicates("cluster_queue").set_index("cluster_queue")["team"]
    rows = pd.concat(
        [
            local,
            pd.DataFrame(
                {
                    "namespace": [""] * len(alone),
                    "queue": alone,
                    "cluster_queue": alone,
                    "team": [str(teams.get(cq, cq)) for cq in alone],
                },
                dtype="str",
            ),
        ],
        ignore_index=True,
    )
    rows["cohort"] = rows["cluster_queue"].map(setup.cohorts).fillna("").astype("str")
    rows = rows.merge(per_cq, left_on="cluster_queue", right_index=True, how="left")
    rows = rows.merge(waits, on=["namespace", "queue"], how="left")
    counts = ["admitted_workloads", "pending_workloads"]
    rows[counts] = rows[counts].fillna(0).astype("int64")
    rows["preemptions"] = rows["preemptions"].fillna(0).astype("int64")
    hours = [
        "nominal_gpus",
        "used_gpu_hours",
        "borrowed_gpu_hours",
        "lent_gpu_hours",
        "reserved_unused_gpu_hours",
    ]
    rows[hours] = rows[hours].fillna(0.0)  # a queue with no GPU quota: none used, borrowed or reserved
    out: pd.DataFrame = QUEUE_ROWS.check(rows[list(QUEUE_ROWS.columns)])
    return out.sort_values(["cluster_queue", "namespace", "queue"], ignore_index=True)


def queue_states(
    workloads: pd.DataFrame,
    queues: pd.DataFrame,
    grid: pd.DatetimeIndex,
    step_seconds: float,
    *,
    end: datetime | None = None,
) -> pd.DataFrame:
    """QUEUE_STATE_COLUMNS: per queue and grid sample t, its workloads as of the end of the sample's
    interval, e = min(t + step, end) (at the last sample: the window's end, as the queue table counts).

    pending_workloads: created before e, neither admitted nor finished by e (wait_stats' pending, so
    the last sample's count is the queue table's pending_workloads); admitted_workloads: admitted and
    not stopped (finished or evicted) by e, i.e. holding quota; oldest_pending_seconds: e − the
    earliest created_at of those pending, NaN when none is. Times compare as wait_stats' do (NaT:
    never). workloads: QUEUE_WORKLOADS; queues: namespace, queue, cluster_queue, team of each queue
    (the queue table's rows): each gets a row per sample (counts 0 when it has no workload), and so
    does any (namespace, queue) only a workload names, with that workload's cluster queue and team.
    Sorted by cluster_queue, namespace, queue, timestamp.
    """
    QUEUE_WORKLOADS.check(workloads)
    keys = ["namespace", "queue", "cluster_queue", "team"]
    named = queues[keys].astype("str")
    extra = workloads[keys].astype("str").drop_duplicates(["namespace", "queue"], keep="last")
    known = pd.MultiIndex.from_frame(named[["namespace", "queue"]])
    extra = extra[~pd.MultiIndex.from_frame(extra[["namespace", "queue"]]).isin(known)]
    rows = pd.concat([named, extra], ignore_index=True).drop_duplicates(["namespace", "queue"])
    rows = rows.sort_values(["cluster_queue", "namespace", "queue"], ignore_index=True)
    times = np.asarray(pd.DatetimeIndex(grid).as_unit("ns").asi8, dtype=np.int64)
    ends = times + round(step_seconds * 1e9)
    if end is not None:
        ends = np.minimum(ends, pd.Timestamp(utc(end)).as_unit("ns").value)
    n, r = len(ends), len(rows)
    pending = np.zeros((r, n))
    admitted = np.zeros((r, n))
    oldest = np.full((r, n), -1.0)
    if n and r and len(workloads):
        index = pd.MultiIndex.from_frame(rows[["namespace", "queue"]])
        owner = index.get_indexer(pd.MultiIndex.from_frame(workloads[["namespace", "queue"]].astype("str")))
        created, admitted_at, finished = (
            _ns_or_never(workloads[c]) for c in ("created_at", "admitted_at", "finished_at")
        )
        # Alive at some sample: created before the last end, not stopped before the first.
        alive = np.flatnonzero((created < ends[-1]) & ~(finished < ends[0]))
        for chunk in np.array_split(alive, max(1, math.ceil(len(alive) / _STATE_CHUNK))):
            c, a, f = created[chunk, None], admitted_at[chunk, None], finished[chunk, None]
            stopped = f < ends
            waiting = (c < ends) & ~(a < ends) & ~stopped
            np.add.at(pending, owner[chunk], waiting)
            np.add.at(admitted, owner[chunk], (a < ends) & ~stopped)
            np.maximum.at(oldest, owner[chunk], np.where(waiting, (ends - c) / 1e9, -1.0))
    out = pd.DataFrame(
        {
            "timestamp": pd.to_datetime(np.tile(times, r), utc=True),
            **{k: np.repeat(rows[k].to_numpy(dtype=object), n) for k in keys},
            "pending_workloads": pending.ravel().astype("int64"),
            "admitted_workloads": admitted.ravel().astype("int64"),
            "oldest_pending_seconds": np.where(oldest < 0, np.nan, oldest).ravel(),
        }
    )
    return out.astype({k: "str" for k in keys})[list(QUEUE_STATE_COLUMNS)]


def _ns_or_never(times: "pd.Series[Any]") -> npt.NDArray[np.int64]:
    """Epoch ns of UTC times, NaT as the largest int64: never happened, so `t < e` is False for it."""
    values = pd.to_datetime(times, utc=True)
    ns = np.asarray(pd.DatetimeIndex(values).as_unit("ns").asi8, dtype=np.int64)
    return np.where(values.isna().to_numpy(), np.iinfo(np.int64).max, ns)


def _each_wait(workloads: pd.DataFrame, window: Window) -> pd.DataFrame:
    """Each wait the queue table's percentiles are over: admitted in the window, or pending at its end."""
    end = pd.Timestamp(utc(window.end))
    start = pd.Timestamp(utc(window.start))
    admitted = workloads["admitted_at"].between(start, end, inclusive="left")
    pending = (
        (workloads["created_at"] < end)
        & ~(workloads["admitted_at"] < end)
        & ~(workloads["finished_at"] <= end)
    )
    waited = np.where(
        admitted,
        (workloads["admitted_at"] - workloads["created_at"]).dt.total_seconds(),
        (end - workloads["created_at"]).dt.total_seconds(),
    )
    chosen = admitted | pending
    return pd.DataFrame(
        {
            "namespace": workloads.loc[chosen, "namespace"].astype("str"),
            "queue": workloads.loc[chosen, "queue"].astype("str"),
            "team": workloads.loc[chosen, "team"].astype("str"),
            "wait_seconds": waited[chosen.to_numpy()].astype("float64"),
            "state": np.where(admitted[chosen], "admitted", "pending"),
        }
    ).reset_index(drop=True)


def prices_on_grid(price_at: PriceLookup, pools: Sequence[str], window: Window) -> pd.DataFrame:
    """POOL_PRICES of the pools at each sample of the queue grid, from a rates lookup (PoolRates.at)."""
    grid = queue_grid(window)
    frame = pd.DataFrame(
        {
            "timestamp": np.repeat(grid, len(pools)),
            "pool": pd.Series(list(pools) * len(grid), dtype="str"),
        }
    )
    frame["usd_per_gpu_hour"] = price_at(frame["pool"], frame["timestamp"])
    return POOL_PRICES.check(frame.astype({"usd_per_gpu_hour": "float64"}))
