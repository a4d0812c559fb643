"""Queues, quotas and fairness: Kueue quota use, borrowing and lending, waits, DRF shares, reclaim."""

from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd

from gpuwatch.analytics.ledger import EPSILON_GE, SECONDS_PER_HOUR
from gpuwatch.core.errors import DataError
from gpuwatch.core.model import cluster_of, utc
from gpuwatch.core.schema import (
    ADMISSION_TIMES,
    BLOCKED_VS_IDLE,
    FAIRNESS,
    IDLE_PODS,
    PENDING_WAITS,
    POOL_PRICES,
    QUEUE_QUOTAS,
    QUEUE_SUMMARY,
    QUEUE_USAGE,
    QUEUE_WORKLOADS,
    RECLAIM_CANDIDATES,
    TEAM_ALLOCATED_HOURS,
    TEAM_QUOTA_HOURS,
)

NO_COHORT = ""  # a ClusterQueue outside any cohort: it neither borrows from nor lends to anyone
ANY_POOL = ""  # a pending pod without a product selector: any pool's GPUs would do

Floats = npt.NDArray[np.float64]
_WAIT_COLUMNS = (
    "admitted_workloads",
    "pending_workloads",
    "preemptions",
    "wait_seconds_p50",
    "wait_seconds_p95",
    "wait_seconds_max",
)


def queue_usage(
    workloads: pd.DataFrame,
    quotas: pd.DataFrame,
    sample_times: Sequence[datetime] | pd.DatetimeIndex,
    step_seconds: float,
) -> pd.DataFrame:
    """QUEUE_USAGE: per ClusterQueue × pool × sample, the GE it uses, its nominal quota, borrowed and lent GE.

    workloads: QUEUE_WORKLOADS; quotas: QUEUE_QUOTAS; sample_times: the window's grid, tz-aware,
    increasing and step_seconds apart (checked: queue_summary multiplies each sample by the step).
    The number of rows is queues × pools × samples, so callers pick a coarse step.

    A workload holds its cluster queue's quota in its pool over [admitted_at, finished_at) (NaT finished:
    still holding). Sample t stands for [t, t + step) (SPEC §3): used_gpus = the mean over it of the GE
    held, Σ gpus × the share of the sample each workload held it, so Σ used × step is exact.
    borrowed_gpus = max(0, used − nominal).
    Lending is per (cohort, pool) at each t: B = Σ borrowed over the cohort's queues; each queue's
    lendable unused U_q = max(0, nominal − used), capped at lending_limit_gpus when given;
    lent_gpus_q = min(U_q, B × U_q / Σ U) (0 when Σ U = 0). A queue with no cohort lends nothing.
    borrowing_limit_gpus is Kueue's to enforce and not needed here.

    Unknown stays unknown: a holding workload with unknown gpus makes its queue's used (and so its
    borrowed and unused) NaN at that sample, and the lent of its cohort's lenders NaN then. A
    (cluster_queue, pool) that has workloads but no quota row is reported with nominal, borrowed and lent
    NaN and takes no part in its cohort's lending. Several quota rows of one queue and pool (flavors of
    one product) add up (a lending limit NaN if any of them is unlimited). Quota pairs without workloads
    use 0. Sorted by cluster_queue, pool, timestamp.
    """
    QUEUE_WORKLOADS.check(workloads)
    QUEUE_QUOTAS.check(quotas)
    times = _sample_grid(sample_times, step_seconds)
    held = workloads[workloads["admitted_at"].notna() & (workloads["pool"] != ANY_POOL)]
    pairs = _queue_pools(quotas, held)
    if not len(times) or not len(pairs):
        return QUEUE_USAGE.empty()
    used = _held_gpus(held, pairs, times, step_seconds)
    nominal = pairs["nominal_gpus"].to_numpy(dtype=np.float64)[:, None]
    limit = pairs["lending_limit_gpus"].to_numpy(dtype=np.float64)[:, None]
    with np.errstate(invalid="ignore", divide="ignore"):
        borrowed = _positive(used - nominal)
        unused = _positive(nominal - used)
        lendable = np.where(np.isnan(limit), unused, np.minimum(unused, limit))
        quoted = pairs["quoted"].to_numpy()
        lending = (pairs["cohort"] != NO_COHORT).to_numpy() & quoted
        codes = pd.factorize(pd.MultiIndex.from_frame(pairs[["cohort", "pool"]]))[0]
        cohort_borrowed = _group_sum(borrowed, codes, lending)
        cohort_lendable = _group_sum(lendable, codes, lending)
        pro_rata = np.minimum(lendable, cohort_borrowed * lendable / cohort_lendable)
        lent = np.where(~lending[:, None] | (lendable == 0.0), 0.0, pro_rata)
        lent[~quoted] = np.nan
    n, p = len(times), len(pairs)
    keys = pairs.loc[np.repeat(np.arange(p), n), ["cluster_queue", "cohort", "team", "pool"]]
    out = pd.DataFrame(
        {
            "timestamp": pd.to_datetime(np.tile(times.asi8, p), utc=True),
            **{c: keys[c].astype("str").to_numpy() for c in keys.columns},
            "nominal_gpus": np.repeat(pairs["nominal_gpus"].to_numpy(dtype=np.float64), n),
            "used_gpus": used.ravel(),
            "borrowed_gpus": borrowed.ravel(),
            "lent_gpus": lent.ravel(),
        }
    )
    return out.astype({c: "str" for c in keys.columns})


def _sample_grid(
    sample_times: Sequence[datetime] | pd.DatetimeIndex, step_seconds: float
) -> pd.DatetimeIndex:
    if not step_seconds > 0:
        raise DataError(f"queue_usage: step_seconds must be positive, got {step_seconds}")
    times = pd.DatetimeIndex(
        sample_times if isinstance(sample_times, pd.DatetimeIndex) else list(sample_times)
    )
    if len(times) and times.tz is None:
        raise DataError("queue_usage: sample_times must be tz-aware")
    times = (times.tz_convert("UTC") if len(times) else times.tz_localize("UTC")).as_unit("ns")
    gaps = np.diff(times.asi8)
    if len(gaps) and not np.all(gaps == round(step_seconds * 1e9)):
        raise DataError(f"queue_usage: sample_times are not a grid of {step_seconds} s steps")
    return times


def _queue_pools(quotas: pd.DataFrame, held: pd.DataFrame) -> pd.DataFrame:
    """One row per (cluster_queue, pool) of the quotas or the holding workloads, sorted: cohort, team,
    nominal_gpus, lending_limit_gpus, and quoted (whether any quota row names the pair)."""
    keys = ["cluster_queue", "pool"]
    rows = quotas.assign(**{c: quotas[c].astype("str") for c in [*keys, "cohort", "team"]})
    grouped = rows.groupby(keys, sort=False)
    quoted = grouped[["cohort", "team"]].first()
    quoted["nominal_gpus"] = grouped["nominal_gpus"].sum(skipna=False)
    quoted["lending_limit_gpus"] = grouped["lending_limit_gpus"].sum(skipna=False)
    quoted["quoted"] = True
    # Pairs only the workloads know: the queue's cohort and team when its other pools say, else theirs.
    queue_of = rows.drop_duplicates("cluster_queue").set_index("cluster_queue")
    extra = held[[*keys, "team"]].astype("str").drop_duplicates(keys, keep="last").set_index(keys)
    extra = extra[~extra.index.isin(quoted.index)]
    queues = extra.index.get_level_values("cluster_queue")
    known = queues.isin(queue_of.index)
    extra["cohort"] = np.where(known, queue_of["cohort"].reindex(queues).to_numpy(), NO_COHORT)
    extra["team"] = np.where(known, queue_of["team"].reindex(queues).to_numpy(), extra["team"].to_numpy())
    extra = extra.assign(nominal_gpus=np.nan, lending_limit_gpus=np.nan, quoted=False)
    pairs = pd.concat([quoted, extra]) if len(extra) else quoted
    return pairs.sort_index().reset_index().astype({"quoted": "bool"})


def _held_gpus(
    held: pd.DataFrame, pairs: pd.DataFrame, times: pd.DatetimeIndex, step_seconds: float
) -> Floats:
    """(pairs × samples) the mean GE held over each sample [t, t + step): a workload holding over
    [admitted_at, finished_at) adds its gpus × the share of the sample it overlaps (a difference array
    for the samples it covers whole, the two partial ones added apart); NaN where a holder with unknown
    gpus overlaps the sample."""
    n = len(times)
    index = pd.MultiIndex.from_frame(pairs[["cluster_queue", "pool"]])
    row = index.get_indexer(pd.MultiIndex.from_frame(held[["cluster_queue", "pool"]].astype("str")))
    start_ns, step_ns = int(times.asi8[0]), step_seconds * 1e9
    admitted = (_epoch_ns(held["admitted_at"]) - start_ns) / step_ns
    finished = held["finished_at"].isna().to_numpy()
    ended = (_epoch_ns(held["finished_at"].fillna(held["admitted_at"])) - start_ns) / step_ns
    # Positions in samples, clipped to the grid [0, n]: a workload admitted before it starts at 0.
    begin = np.clip(admitted, 0.0, n)
    end = np.clip(np.where(finished, n, ended), 0.0, n)
    end = np.maximum(begin, end)  # finished before admitted: never held
    first, last = np.floor(begin).astype(np.int64), np.floor(end).astype(np.int64)
    gpus = held["gpus"].to_numpy(dtype=np.float64)
    unknown = np.isnan(gpus)
    width = n + 2

    def averaged(weights: Floats) -> Floats:
        out = np.zeros((len(pairs), width))

        def add(rows: npt.NDArray[np.intp], column: npt.NDArray[np.int64], values: Floats) -> None:
            # Column k + 1 holds sample k's change; past the last sample changes nothing drawn.
            np.add.at(out, (rows, np.minimum(column, width - 1)), values)

        same = first == last  # inside one sample
        inside = weights[same] * (end[same] - begin[same])
        add(row[same], first[same] + 1, inside)
        add(row[same], first[same] + 2, -inside)
        apart = ~same
        r, f, e, w = row[apart], first[apart], last[apart], weights[apart]
        head = w * (f + 1 - begin[apart])  # the share of its first sample
        tail = w * (end[apart] - e)  # of its last (0 when it ends on a sample's start)
        add(r, f + 1, head)
        add(r, f + 2, w - head)  # the samples it holds whole
        add(r, e + 1, tail - w)
        add(r, e + 2, -tail)
        summed: Floats = np.cumsum(out, axis=1)[:, 1 : n + 1]
        return summed

    used = averaged(np.where(unknown, 0.0, gpus))
    overlap = averaged(unknown.astype(np.float64))
    return np.where(overlap > 1e-12, np.nan, used)


def _positive(values: Floats) -> Floats:
    """max(0, values), with the float noise of summed GE shares (3/7 + 4/7 − 1) taken as 0; NaN stays."""
    return np.where(values > EPSILON_GE, values, np.where(np.isnan(values), np.nan, 0.0))


def _group_sum(values: Floats, codes: npt.NDArray[np.intp], members: npt.NDArray[np.bool_]) -> Floats:
    """Per row, the column sums over the member rows of its group (NaN if any is NaN)."""
    sums = np.zeros((int(codes.max()) + 1, values.shape[1]))
    np.add.at(sums, codes[members], values[members])
    out: Floats = sums[codes]
    return out


def _epoch_ns(timestamps: Any) -> npt.NDArray[np.int64]:
    return np.asarray(pd.DatetimeIndex(timestamps).as_unit("ns").asi8, dtype=np.int64)


def queue_summary(usage: pd.DataFrame, step_seconds: float, rates: pd.DataFrame) -> pd.DataFrame:
    """QUEUE_SUMMARY: per ClusterQueue × pool over the window of a queue_usage frame.

    nominal_gpus at the pair's last sample; used_gpu_hours, borrowed_gpu_hours, lent_gpu_hours =
    Σ_t GE × step; reserved_unused_gpu_hours = Σ_t max(0, nominal − used) × step (the quota's own unused
    part, lent or not: what the team reserved and did not use); reserved_unused_usd =
    Σ_t max(0, nominal − used) × step × the pool's price in force at t (rates: POOL_PRICES, the latest
    row at or before t; NaN before a pool's first row). A NaN term makes its sum NaN (unknown is never
    0), except that no unused GE costs 0 whatever the price. Sorted by cluster_queue, pool.
    """
    QUEUE_USAGE.check(usage)
    POOL_PRICES.check(rates)
    hours = step_seconds / SECONDS_PER_HOUR
    price = _price_in_force(usage["pool"], usage["timestamp"], rates)
    nominal = usage["nominal_gpus"].to_numpy(dtype=np.float64)
    with np.errstate(invalid="ignore"):
        unused = _positive(nominal - usage["used_gpus"].to_numpy(dtype=np.float64))
    keys = ["cluster_queue", "pool"]
    hourly = pd.DataFrame(
        {
            "cluster_queue": usage["cluster_queue"].astype("str").to_numpy(),
            "pool": usage["pool"].astype("str").to_numpy(),
            "used_gpu_hours": usage["used_gpus"].to_numpy(dtype=np.float64) * hours,
            "borrowed_gpu_hours": usage["borrowed_gpus"].to_numpy(dtype=np.float64) * hours,
            "lent_gpu_hours": usage["lent_gpus"].to_numpy(dtype=np.float64) * hours,
            "reserved_unused_gpu_hours": unused * hours,
            "reserved_unused_usd": np.where(unused == 0.0, 0.0, unused * price) * hours,
        }
    )
    if not len(hourly):
        return QUEUE_SUMMARY.empty()
    sums = hourly.groupby(keys, sort=True).sum(skipna=False)
    last = usage.sort_values("timestamp", kind="stable").drop_duplicates(keys, keep="last")
    last = last.astype({c: "str" for c in [*keys, "cohort", "team"]}).set_index(keys)
    out = last[["cohort", "team", "nominal_gpus"]].reindex(sums.index).join(sums).reset_index()
    return out[list(QUEUE_SUMMARY.columns)].astype({c: "str" for c in [*keys, "cohort", "team"]})


def _price_in_force(pools: "pd.Series[Any]", timestamps: "pd.Series[Any]", rates: pd.DataFrame) -> Floats:
    """Per row, the usd_per_gpu_hour of the latest rates row of its pool at or before its timestamp."""
    if not len(pools) or not len(rates):
        return np.full(len(pools), np.nan)
    left = pd.DataFrame(
        {
            "pool": pools.astype("str").to_numpy(dtype=object),
            "timestamp": _epoch_ns(timestamps),
            "row": np.arange(len(pools)),
        }
    ).sort_values("timestamp", kind="stable")
    right = pd.DataFrame(
        {
            "pool": rates["pool"].astype("str").to_numpy(dtype=object),
            "timestamp": _epoch_ns(rates["timestamp"]),
            "usd_per_gpu_hour": rates["usd_per_gpu_hour"].to_numpy(dtype=np.float64),
        }
    ).sort_values("timestamp", kind="stable")
    merged = pd.merge_asof(left, right, on="timestamp", by="pool", direction="backward")
    price = np.full(len(pools), np.nan)
    price[merged["row"].to_numpy()] = merged["usd_per_gpu_hour"].to_numpy(dtype=np.float64)
    return price


def wait_stats(items: pd.DataFrame, keys: Sequence[str], *, start: datetime, as_of: datetime) -> pd.DataFrame:
    """Admissions, pending, preemptions and waits per keys over the window [start, as_of).

    items: ADMISSION_TIMES plus the key columns (e.g. ["namespace", "queue"], ["cluster_queue"],
    ["team"]; [] = one row for all): QUEUE_WORKLOADS, or plain pods with admitted_at = the time the pod
    was scheduled (or started). Optional columns finished_at (when it stopped holding or was deleted;
    absent = never) and preemptions (absent = unknown). Something happened "by as_of" when its time is
    < as_of, as for everything else in the window.

    admitted_workloads: admitted_at in [start, as_of). pending_workloads: created_at < as_of, not admitted
    by as_of, not finished by as_of (one deleted while pending is neither admitted nor pending).
    preemptions: Σ over the items created before as_of and not finished before start (float: NaN when
    unknown, as for plain pods). wait_seconds_p50 / _p95 / _max over the waits of the items admitted in
    the window (admitted_at − created_at) together with the waits so far of those pending at as_of
    (as_of − created_at), so a starved queue shows its waits; linear-interpolated percentiles; NaN
    when there is no wait. One row per key with an item alive in the window (created before as_of and
    not finished before start) or admitted in it, sorted by the keys.
    """
    ADMISSION_TIMES.check(items)
    keys = list(keys)
    missing = [k for k in keys if k not in items.columns]
    if missing:
        raise DataError(f"wait_stats: missing key column {missing[0]!r}")
    begin, end = pd.Timestamp(utc(start)), pd.Timestamp(utc(as_of))
    created, admitted = items["created_at"], items["admitted_at"]
    if "finished_at" in items.columns:
        finished = items["finished_at"]
    else:
        finished = pd.Series(pd.NaT, index=items.index, dtype="datetime64[ns, UTC]")
    preempted = (
        items["preemptions"].astype("float64")
        if "preemptions" in items.columns
        else pd.Series(np.nan, index=items.index)
    )
    # NaT compares False: a missing admitted_at is "not admitted", a missing finished_at "not finished".
    alive = (created < end) & ~(finished < begin)
    admitted_in = (admitted >= begin) & (admitted < end)
    pending = (created < end) & ~(admitted < end) & ~(finished < end)
    waited = np.where(
        admitted_in,
        (admitted - created).dt.total_seconds(),
        np.where(pending, (end - created).dt.total_seconds(), np.nan),
    )
    by = keys or ["_all"]
    frame = pd.DataFrame(
        {
            **{k: items[k] for k in keys},
            "_all": 0,
            "admitted_workloads": admitted_in.to_numpy(),
            "pending_workloads": pending.to_numpy(),
            "preemptions": np.where(alive, preempted, 0.0),
            "wait_seconds": waited,
        },
        index=items.index,
    )[alive | admitted_in]
    if not len(frame):
        empty = items[keys].iloc[0:0].reset_index(drop=True)
        columns = {
            c: pd.Series(dtype="int64" if c.endswith("workloads") else "float64") for c in _WAIT_COLUMNS
        }
        return empty.assign(**columns)
    grouped = frame.groupby(by, sort=True, observed=True, dropna=False)
    waits = grouped["wait_seconds"]
    out = pd.DataFrame(
        {
            "admitted_workloads": grouped["admitted_workloads"].sum().astype("int64"),
            "pending_workloads": grouped["pending_workloads"].sum().astype("int64"),
            "preemptions": grouped["preemptions"].sum(skipna=False).astype("float64"),
            "wait_seconds_p50": waits.quantile(0.5).astype("float64"),
            "wait_seconds_p95": waits.quantile(0.95).astype("float64"),
            "wait_seconds_max": waits.max().astype("float64"),
        }
    ).reset_index()
    out = out.drop(columns="_all") if not keys else out
    return out.astype({k: items[k].dtype for k in keys})


def fairness(allocated: pd.DataFrame, quotas_hours: pd.DataFrame) -> pd.DataFrame:
    """FAIRNESS: dominant-resource fairness per team, each pool a resource.

    allocated: TEAM_ALLOCATED_HOURS (what the team's pods held over the window); quotas_hours:
    TEAM_QUOTA_HOURS (its nominal quota × the window's hours). With N(P) = Σ_teams nominal(P):
    alloc_share(T,P) = allocated(T,P) / N(P); quota_share(T,P) = nominal(T,P) / N(P).
    allocation_share and quota_share are the dominant shares: max over P. fairness_ratio =
    allocation_share ÷ quota_share (NaN when the team has no quota; > 1 = above its fair share).
    dominant_pool: the pool of the dominant allocation share ("" when the team allocated nothing in a
    quota'd pool). Pools with no quota at all (N(P) = 0) are left out of the shares; each team's
    GE-hours there are reported as unquoted_gpu_hours. Teams of either frame; several rows per team and
    pool add up. Sorted by fairness_ratio descending (NaN last), then team.
    """
    TEAM_ALLOCATED_HOURS.check(allocated)
    TEAM_QUOTA_HOURS.check(quotas_hours)
    alloc = _by_team_pool(allocated, "allocated_gpu_hours")
    quota = _by_team_pool(quotas_hours, "nominal_gpu_hours")
    teams = sorted(set(alloc.index.get_level_values("team")) | set(quota.index.get_level_values("team")))
    if not teams:
        return FAIRNESS.empty()
    pool_nominal = quota.groupby(level="pool").sum(skipna=False)
    quoted = sorted(str(p) for p in pool_nominal.index[~(pool_nominal == 0.0)])  # NaN total: unknown, kept
    total = pool_nominal.reindex(quoted).to_numpy(dtype=np.float64)
    alloc_share = _team_pool_matrix(alloc, teams, quoted) / total
    quota_share = _team_pool_matrix(quota, teams, quoted) / total
    if quoted:
        dominant_alloc, dominant_quota = alloc_share.max(axis=1), quota_share.max(axis=1)
        top = np.asarray(quoted, dtype=object)[np.argmax(np.nan_to_num(alloc_share, nan=-np.inf), axis=1)]
    else:
        dominant_alloc = dominant_quota = np.full(len(teams), np.nan)
        top = np.full(len(teams), "", dtype=object)
    ratio = np.divide(
        dominant_alloc, dominant_quota, out=np.full(len(teams), np.nan), where=dominant_quota > 0
    )
    dominant = np.where(dominant_alloc > 0, top, "")
    in_quoted = alloc.index.get_level_values("pool").isin(quoted)
    unquoted = alloc[~in_quoted].groupby(level="team").sum(skipna=False).reindex(teams, fill_value=0.0)
    out = pd.DataFrame(
        {
            "team": pd.Series(teams, dtype="str"),
            "allocation_share": dominant_alloc,
            "quota_share": dominant_quota,
            "fairness_ratio": ratio,
            "dominant_pool": pd.Series(dominant, dtype="str"),
            "unquoted_gpu_hours": unquoted.to_numpy(dtype=np.float64),
        }
    )
    return out.sort_values(
        ["fairness_ratio", "team"], ascending=[False, True], na_position="last", ignore_index=True
    )


def _team_pool_matrix(summed: "pd.Series[float]", teams: list[str], pools: list[str]) -> Floats:
    """teams × pools of a (team, pool) series; 0 where it has no row."""
    matrix = np.zeros((len(teams), len(pools)))
    row = pd.Index(teams).get_indexer(summed.index.get_level_values("team"))
    column = pd.Index(pools).get_indexer(summed.index.get_level_values("pool"))
    kept = column >= 0
    matrix[row[kept], column[kept]] = summed.to_numpy(dtype=np.float64)[kept]
    return matrix


def _by_team_pool(frame: pd.DataFrame, column: str) -> "pd.Series[float]":
    keyed = frame.assign(team=frame["team"].astype("str"), pool=frame["pool"].astype("str"))
    summed: pd.Series[float] = keyed.groupby(["team", "pool"], sort=True)[column].sum(skipna=False)
    return summed.astype("float64")


def blocked_vs_idle(pending: pd.DataFrame, idle: pd.DataFrame) -> pd.DataFrame:
    """BLOCKED_VS_IDLE: per pool now, the GPU demand that waits beside the GPUs that sit idle-allocated.

    pending: PENDING_WAITS (pool "" = a pod without a product selector: its own row, "the whole
    fleet"; its demand is not added to any pool's); idle: IDLE_PODS (the pods idle now). A pod listed
    twice counts once (its last row). pending_pods; pending_gpus = Σ GE requested by pending pods;
    pending_gpu_hours_waited = Σ gpus × waiting_seconds / 3600; idle_allocated_gpus = Σ GE of the
    idle pods; idle_holders = the teams holding them, largest first (ties by name), "team (n GPUs)"
    joined by ", " (n to two decimals, "1 GPU" singular). A pool absent from one side has 0 (and "")
    there: both frames list every pod. Sorted by pool.
    """
    PENDING_WAITS.check(pending)
    IDLE_PODS.check(idle)
    waits = pending.drop_duplicates(["namespace", "pod"], keep="last")
    holders = idle.drop_duplicates(["namespace", "pod"], keep="last")
    demand = pd.DataFrame(
        {
            "pool": waits["pool"].astype("str").to_numpy(),
            "pending_pods": 1,
            "pending_gpus": waits["gpus"].to_numpy(dtype=np.float64),
            "pending_gpu_hours_waited": (waits["gpus"] * waits["waiting_seconds"]).to_numpy(dtype=np.float64)
            / SECONDS_PER_HOUR,
        }
    )
    pending_by_pool = demand.groupby("pool", sort=True).sum(skipna=False)
    by_team = (
        holders.assign(pool=holders["pool"].astype("str"), team=holders["team"].astype("str"))
        .groupby(["pool", "team"], sort=True)["gpus"]
        .sum(skipna=False)
        .reset_index()
        .sort_values(["pool", "gpus", "team"], ascending=[True, False, True], kind="stable")
    )
    by_team["text"] = by_team["team"] + " (" + by_team["gpus"].map(_gpus_text).astype("str") + ")"
    idle_by_pool = pd.DataFrame(
        {
            "idle_allocated_gpus": by_team.groupby("pool", sort=True)["gpus"].sum(skipna=False),
            "idle_holders": by_team.groupby("pool", sort=True)["text"].agg(", ".join),
        }
    )
    if not len(pending_by_pool) and not len(idle_by_pool):
        return BLOCKED_VS_IDLE.empty()
    out = pending_by_pool.join(idle_by_pool, how="outer").sort_index()
    zero = ["pending_pods", "pending_gpus", "pending_gpu_hours_waited", "idle_allocated_gpus"]
    out[zero] = out[zero].fillna(0.0)
    out["idle_holders"] = out["idle_holders"].fillna("")
    out = out.rename_axis("pool").reset_index()
    out = out.astype(
        {
            "pool": "str",
            "pending_pods": "int64",
            "pending_gpus": "float64",
            "pending_gpu_hours_waited": "float64",
            "idle_allocated_gpus": "float64",
            "idle_holders": "str",
        }
    )
    return out[list(BLOCKED_VS_IDLE.columns)]


def _gpus_text(gpus: float) -> str:
    if np.isnan(gpus):
        return "unknown GPUs"
    number = f"{gpus:.2f}".rstrip("0").rstrip(".")
    return f"{number} GPU" if number == "1" else f"{number} GPUs"


def reclaim_candidates(
    idle: pd.DataFrame,
    usage_now: pd.DataFrame,
    pending_pools: Iterable[tuple[str, str]],
    rates_now: pd.DataFrame,
    *,
    as_of: datetime,
    min_idle_seconds: float,
) -> pd.DataFrame:
    """RECLAIM_CANDIDATES: idle pods worth taking back because GPU pods wait for their pool.

    idle: IDLE_PODS (the pods idle-allocated now). usage_now: QUEUE_USAGE; only its rows at its last
    sample at or before as_of are read (pass a whole window or just that sample). pending_pools: the
    (cluster, pool) pairs with pending GPU demand, the cluster of the pending pod's name (model.cluster_of:
    "" in a fleet of one; pods never take another cluster's GPUs); pool "" (a pod without a product
    selector) makes every pool of its cluster qualify. rates_now: POOL_PRICES, priced at as_of.

    A row per idle pod idle for at least min_idle_seconds at as_of (idle_seconds = as_of − idle_since;
    exactly the threshold is included) in a pool with pending demand, with IDLE_PODS' columns plus
    idle_seconds, usd_per_hour = gpus × the pool's price in force at as_of (NaN unknown),
    idle_usd_so_far = usd_per_hour × idle_seconds / 3600 (today's price for the whole stretch),
    cluster_queue = the ClusterQueue of the pod's team in its pool (the team a quota row gives each
    queue; several joined by ", "; "" for none) of the pod's own cluster (in a fleet of several, pods
    and queues are named by their cluster: model.cluster_of) and borrowing = that queue borrows in that
    pool now (borrowed_gpus > 0; False for no queue or unknown). Sorted borrowing first, then
    idle_usd_so_far descending (NaN last), then namespace, pod.
    """
    IDLE_PODS.check(idle)
    QUEUE_USAGE.check(usage_now)
    POOL_PRICES.check(rates_now)
    now = pd.Timestamp(utc(as_of))
    demand = pd.MultiIndex.from_tuples([(str(c), str(p)) for c, p in pending_pools], names=["c", "p"])
    idle_seconds = (now - idle["idle_since"]).dt.total_seconds()
    clusters = idle["pod"].astype("str").map(cluster_of).astype("str")
    pools = idle["pool"].astype("str")
    in_demand = pd.MultiIndex.from_arrays([clusters, pools]).isin(demand)
    in_demand |= pd.MultiIndex.from_arrays([clusters, pd.Series(ANY_POOL, index=idle.index)]).isin(demand)
    kept = (idle_seconds >= min_idle_seconds) & in_demand
    chosen = idle[kept]
    if not len(chosen):
        return RECLAIM_CANDIDATES.empty()
    seconds = idle_seconds[kept].to_numpy(dtype=np.float64)
    price = _price_in_force(chosen["pool"], pd.Series(now, index=chosen.index), rates_now)
    per_hour = chosen["gpus"].to_numpy(dtype=np.float64) * price
    queues = _team_queues(usage_now, now)
    out = chosen.assign(
        team=chosen["team"].astype("str"),
        pool=chosen["pool"].astype("str"),
        idle_seconds=seconds,
        usd_per_hour=per_hour,
        idle_usd_so_far=per_hour * seconds / SECONDS_PER_HOUR,
        cluster=chosen["pod"].astype("str").map(cluster_of).astype("str"),
    ).merge(queues, on=["cluster", "team", "pool"], how="left")
    out["cluster_queue"] = out["cluster_queue"].fillna("").astype("str")
    out["borrowing"] = out["borrowing"].fillna(False).astype("bool")
    out = out.sort_values(
        ["borrowing", "idle_usd_so_far", "namespace", "pod"],
        ascending=[False, False, True, True],
        na_position="last",
        ignore_index=True,
    )
    result: pd.DataFrame = out[list(RECLAIM_CANDIDATES.columns)]
    return result


def _team_queues(usage: pd.DataFrame, now: pd.Timestamp) -> pd.DataFrame:
    """cluster, team, pool → cluster_queue (names joined by ", ") and borrowing, at the last sample by
    now."""
    usage = usage[usage["timestamp"] <= now]
    latest = usage[usage["timestamp"] == usage["timestamp"].max()]
    rows = pd.DataFrame(
        {
            "cluster": latest["cluster_queue"].astype("str").map(cluster_of).astype("str").to_numpy(),
            "team": latest["team"].astype("str").to_numpy(),
            "pool": latest["pool"].astype("str").to_numpy(),
            "cluster_queue": latest["cluster_queue"].astype("str").to_numpy(),
            "borrowing": (latest["borrowed_gpus"] > EPSILON_GE).to_numpy(),
        }
    ).sort_values("cluster_queue")
    grouped = rows.groupby(["cluster", "team", "pool"], sort=True)
    queues = pd.DataFrame(
        {"cluster_queue": grouped["cluster_queue"].agg(", ".join), "borrowing": grouped["borrowing"].any()}
    )
    return queues.reset_index()
