"""The history path's frames: assemble() turns per-piece sums into a History (fleet, ledger, team,
namespace, workload, pool and cluster tables); the workload, idle and right-sizing tables alone."""

import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from pandas.core.groupby import DataFrameGroupBy

from gpuwatch.analytics.placement import pool_taints
from gpuwatch.analytics.rightsize import candidate_prices, packing_estimate, recommend
from gpuwatch.core.config import Settings
from gpuwatch.core.model import ALLOCATED_STATES, LEDGER_STATES, Window, cluster_of
from gpuwatch.core.schema import RIGHTSIZE_WORKLOADS
from gpuwatch.read.analysis import (
    CLUSTER_COLUMNS,
    LEDGER_HOURS,
    RECOMMENDATION_COLUMNS,
    Coverage,
    coverage_warning,
    silent_gpu_min_seconds,
    unknown_hours_warnings,
)
from gpuwatch.read.historypieces import (
    SECONDS_PER_HOUR,
    PriceOf,
    SampleHours,
    _piece_prices,
    energy_rate_lookup,
    gap_warnings,
    node_telemetry_hours,
    price_lookup,
)
from gpuwatch.sources.historystore import CLUSTER
from gpuwatch.sources.historysums import POD_IDLE_SPLIT, POD_NEEDS, HistorySums
from gpuwatch.sources.ownseries import PENDING_INFO_LABELS, PENDING_LABELS, POD_HISTORY_LABELS

WATT_HOURS_PER_KWH = 1000.0
EPSILON_GE = 1e-9
POD_KEYS = POD_HISTORY_LABELS
WORKLOAD_KEYS = ("namespace", "pod", "team")
SUMMED_USAGE = ("allocated_gpu_hours", "idle_gpu_hours", "unknown_gpu_hours", "cost_usd", "waste_usd")


@dataclass(frozen=True, slots=True, kw_only=True)
class History:
    """A window as gpuwatch's own series recorded it: the frames a report is made of (as usage_tables())."""

    window: Window
    settings: Settings
    gpus: int  # physical GPUs at the window's end
    tables: Mapping[str, pd.DataFrame]  # fleet, fleet_ledger, team, namespace, workload, pool
    pending: pd.DataFrame  # namespace, pod, team, pool, gpus, waiting_seconds, blocked_by
    coverage: Coverage
    sample_seconds: float  # the exporter's mean sample interval where it left samples (NaN: nowhere)
    prices: pd.DataFrame  # POOL_PRICES: the prices the exporter published, from each piece's start
    queue_usage: pd.DataFrame  # QUEUE_USAGE as the exporter published it (empty: none published)
    workloads_read: bool = True  # False: the per-pod families were not read (a summary): no workload rows
    # (namespace, pod) of the workloads holding GPUs at the window's end; None: not known
    held_at_end: Collection[tuple[str, str]] | None = None


def assemble(
    sums: HistorySums,
    *,
    window: Window,
    settings: Settings,
    source_warnings: Sequence[str] = (),
    gaps: Sequence[str] | None = None,
    held_at_end: Collection[tuple[str, str]] | None = None,
) -> History:
    """Turn per-piece sums into GE-hours and dollars per fleet, team, namespace, workload and pool.

    A sum over a piece times the piece's sample interval (its length / the exporter's cycles in it) is
    GE-hours: every sample stands for an equal share of its piece, as a raw sample stands for `step`.
    A piece without exporter samples adds nothing and is named in coverage.warnings, as is one covered
    in part (or `gaps`, finer lines of the same, say the buckets a view draws). Money uses the
    prices the exporter published in each piece, the price book's in force where a pool has none; pieces
    end where a price changes (price_cuts()), so every GPU-hour is priced at the rate of its time.

    Each workload's right-sizing (recommend()) comes from the highest p95 and memory peak of its pieces;
    `held_at_end` (namespace, pod) are the workloads holding GPUs at the window's end, which the packing
    estimate packs (none without it).
    """
    hours = SampleHours(sums.pieces)
    prices = _published_prices(sums)
    price_of = price_lookup(settings, sums)
    pool_hours = _pool_ledger(sums, hours)
    ledger = {f"{s}_gpu_hours": float(pool_hours[f"{s}_gpu_hours"].sum()) for s in LEDGER_STATES}
    states = sums.pool_states
    state_usd = (hours.weighted(states) * price_of(states)).groupby([states["pool"], states["state"]]).sum()

    def dollars(*states: str) -> float:
        return float(state_usd[state_usd.index.get_level_values("state").isin(states)].sum())

    fleet_ledger = pd.DataFrame(
        {
            **{k: [v] for k, v in ledger.items()},
            "cost_usd": [dollars(*ALLOCATED_STATES)],
            "waste_usd": [dollars("allocated_idle")],
            "unallocated_cost_usd": [dollars("unallocated")],
            "stranded_cost_usd": [dollars("stranded")],
            "unavailable_cost_usd": [dollars("unavailable")],
        }
    )
    energy_rate = energy_rate_lookup(settings, sums)
    workloads = _workloads(sums, hours, price_of, energy_rate)
    teams = _teams(sums, hours)
    namespaces = _namespaces(sums, hours, price_of, energy_rate)
    energy_kwh = hours.total(sums.pool_power) / WATT_HOURS_PER_KWH if len(sums.pool_power) else math.nan
    fleet = pd.DataFrame(
        {
            "allocated_gpu_hours": [float(teams["allocated_gpu_hours"].sum())],
            "used_gpu_hours": [_sum_known(teams["used_gpu_hours"])],
            "unknown_gpu_hours": [float(teams["unknown_gpu_hours"].sum())],
            "energy_kwh": [energy_kwh],
            "energy_cost_usd": [
                hours.total(sums.pool_energy_cost) if len(sums.pool_energy_cost) else math.nan
            ],
            # What no pod held drew: all of it less the teams' shares (unknown when any is).
            "unallocated_energy_kwh": [
                np.clip(energy_kwh - float(teams["energy_kwh"].sum(min_count=1)), 0, None)
            ],
        }
    )
    pools = _pools(sums, hours, pool_hours)
    names = pools["pool"].astype("str")
    end = window.end
    pools["usd_per_gpu_hour"] = [prices.get(p, settings.pricing.usd_per_gpu_hour(p, end)) for p in names]
    workloads, packing, stale = _rightsized(
        workloads, sums, settings=settings, window=window, published=prices, held_at_end=held_at_end
    )
    rightsized = {} if packing is None else {"packing": packing}
    if CLUSTER in sums.pieces:  # a fleet of several clusters: one row each, as the raw path's
        rightsized["cluster"] = _clusters(sums, hours, price_of)
    for state in LEDGER_STATES:  # <state>_usd: each piece's GE-hours at its price, summed
        usd = state_usd[state_usd.index.get_level_values("state") == state].droplevel("state")
        pools[f"{state}_usd"] = usd.reindex(names).fillna(0.0).to_numpy()
    pools["stranded_cost_usd"] = pools["stranded_usd"]
    step = window.step_seconds
    warnings = [*source_warnings, *(gap_warnings(sums.pieces, partial=True) if gaps is None else gaps)]
    default = settings.pricing.default_usd_per_gpu_hour
    warnings += [
        f"unknown product {p or '(none)'} priced at default ${default:.2f}/GPU-hour"
        for p in sorted(set(pools["pool"].astype("str")) - set(prices))
        if not settings.pricing.knows(p)
    ]
    missing = _pod_power_gaps(sums)
    if missing:  # an hour or day whose pods' power is not there: no namespace's or workload's is whole
        for table in (workloads, namespaces):
            table[["energy_kwh", "energy_cost_usd"]] = math.nan
        warnings.append(
            f"history path: {missing} piece(s) of the window hold the GPUs' power but no pod's (recording "
            "rules older than the roll-ups of gpuwatch_pod_gpu_power_watts?): namespace and workload "
            "energy unknown; load the current gpuwatch-recording.rules.yml"
        )
    if stale:
        warnings.append(
            f"history path: {stale} workload(s) without a p95 of their compute for part of the window "
            "(recording rules older than hour:gpuwatch_pod_gpu_used:p95_over_time?): no recommendation; "
            "load the current gpuwatch-recording.rules.yml"
        )
    # Allocated GPU-hours without telemetry, named by the team holding them: the series say which pod, not
    # which GPU (the raw path names the GPU), and coverage is the same whether the pods are read or not.
    one_gpu = silent_gpu_min_seconds(settings.idle.window_seconds, window.step_seconds) / SECONDS_PER_HOUR
    held = teams.assign(who="team " + teams["team"].astype("str"))
    warnings += unknown_hours_warnings(held, who=("who",), min_gpu_hours=one_gpu)
    warnings.append(
        "history path: gpuwatch_* series keep neither the DCGM field each GPU's utilization came from nor "
        "unattributed GPU-hours (both shown as 0), and count GPU samples present per node and piece (a day), "
        "capped at capacity (--source raw recomputes all three)"
    )
    expected_hours, present_hours = _telemetry_gpu_hours(sums)
    # GPU-hours of available capacity and of telemetry, counted in samples of the report's step.
    expected = round(max(0.0, expected_hours - ledger["unavailable_gpu_hours"]) * SECONDS_PER_HOUR / step)
    present = min(expected, round(present_hours * SECONDS_PER_HOUR / step))
    low = coverage_warning(expected=expected, present=present)
    coverage = Coverage(
        gpu_samples_expected=expected,
        gpu_samples_present=present,
        unattributed_gpu_hours=0.0,
        util_source={"DCGM_FI_PROF_GR_ENGINE_ACTIVE": 0, "DCGM_FI_DEV_GPU_UTIL": 0},
        warnings=tuple(dict.fromkeys([*([low] if low else []), *warnings])),
    )
    return History(
        window=window,
        settings=settings,
        gpus=round(float(sums.nodes_now["value"].sum())),
        tables={
            "fleet": fleet,
            "fleet_ledger": fleet_ledger,
            "team": teams,
            "namespace": namespaces,
            "workload": workloads,
            "pool": pools,
            **rightsized,
        },
        pending=_pending(sums),
        coverage=coverage,
        sample_seconds=hours.sample_seconds,
        prices=_prices_in_force(sums),
        queue_usage=sums.queue_usage,
        held_at_end=None if held_at_end is None else frozenset(held_at_end),
    )


def _prices_in_force(sums: HistorySums) -> pd.DataFrame:
    """POOL_PRICES: each pool's published price from the start of each piece on."""
    prices = _piece_prices(sums).dropna(subset=["usd_per_gpu_hour"])
    pieces = sums.pieces
    starts = (pieces["end"] - pd.to_timedelta(pieces["seconds"], unit="s")).set_axis(pieces["piece"])
    return pd.DataFrame(
        {
            "timestamp": pd.to_datetime(prices["piece"].map(starts), utc=True),
            "pool": prices["pool"].astype("str"),
            "usd_per_gpu_hour": prices["usd_per_gpu_hour"].astype("float64"),
        }
    ).sort_values(["timestamp", "pool"], ignore_index=True)


def _sum_known(values: "pd.Series[float]") -> float:
    """A sum that stays unknown (NaN) when every term is (SPEC §3: unknown is never 0)."""
    return float(values.sum(min_count=1))


def _usage_sums(grouped: "DataFrameGroupBy[Any, Any]") -> pd.DataFrame:
    """Per group: GE-hours and dollars summed, used_gpu_hours unknown where every term is (_sum_known)."""
    summed = grouped[list(SUMMED_USAGE)].sum()
    summed.insert(1, "used_gpu_hours", grouped["used_gpu_hours"].sum(min_count=1))
    return summed


def _telemetry_gpu_hours(sums: HistorySums) -> tuple[float, float]:
    """GPU-hours of capacity, and of GPUs with DCGM telemetry (node_telemetry_hours)."""
    nodes = node_telemetry_hours(sums)
    return float(nodes["capacity_gpu_hours"].sum()), float(nodes["present_gpu_hours"].sum())


def _time_average(sums: pd.DataFrame, counts: pd.DataFrame, hours: SampleHours) -> "pd.Series[float]":
    """Per pool, Σ value × interval / Σ samples × interval: a time average even where the exporter's
    cycle changed between pieces (NaN where the pool has no samples)."""
    total = hours.by(sums, ("pool",), "value").set_index("pool")["value"]
    duration = hours.by(counts, ("pool",), "value").set_index("pool")["value"].reindex(total.index)
    mean: pd.Series[float] = (total / duration).where(duration > 0)
    return mean


def _published_prices(sums: HistorySums) -> dict[str, float]:
    """Each pool's price per GPU-hour as a table quotes it: the one published in the last piece it
    published any (the raw path's: the one in force at the window's end)."""
    prices = _piece_prices(sums).dropna().merge(sums.pieces[["piece", "end"]], on="piece")
    latest = prices.sort_values("end", kind="stable").drop_duplicates("pool", keep="last")
    return {
        str(pool): float(price)
        for pool, price in zip(latest["pool"], latest["usd_per_gpu_hour"], strict=True)
    }


def _pool_ledger(sums: HistorySums, hours: SampleHours) -> pd.DataFrame:
    """pool and `<state>_gpu_hours` for every ledger state (0 where a pool never had that state)."""
    long = hours.by(sums.pool_states, ("pool", "state"), "gpu_hours")
    wide = long.pivot_table(index="pool", columns="state", values="gpu_hours", aggfunc="sum", fill_value=0.0)
    wide = wide.reindex(columns=list(LEDGER_STATES), fill_value=0.0).astype("float64")
    wide.columns = pd.Index([f"{s}_gpu_hours" for s in LEDGER_STATES])
    return wide.rename_axis(index="pool").reset_index()


def _priced(
    frame: pd.DataFrame, hours: SampleHours, price_of: "PriceOf", keys: Sequence[str], name: str
) -> pd.DataFrame:
    """USD per group of `keys`: each row's GE-hours at its piece's price, summed (SampleHours.by)."""
    return hours.by(frame.assign(value=frame["value"].to_numpy() * price_of(frame)), keys, name)


# The per-pod families idle_workloads() reads: the idle ones (a month's ~5,000 of ~50,000 pods) and
# the allocation at each pod's last sample.
IDLE_FAMILIES = ("pod_idle", "pod_last_allocated", "pod_last_idle", "pod_idle_since", *POD_IDLE_SPLIT)


def _idle_split(
    frame: pd.DataFrame, sums: HistorySums, hours: SampleHours, keys: Sequence[str]
) -> pd.DataFrame:
    """`frame` (keys and idle_gpu_hours per group) with held_idle_gpu_hours and abandoned_idle_gpu_hours
    from the pods' split families (summed per namespace, for keys of namespaces or teams): both NaN where
    they miss some idle hours (framebuffer unknown, or the families not read), abandoned the rest of the
    idle hours where they do not (their sum is the idle)."""
    if set(keys) <= {"namespace", "team"}:
        parts = (_namespace_family(sums, "idle_held"), _namespace_family(sums, "idle_abandoned"))
    else:
        parts = (sums.pod_idle_held, sums.pod_idle_abandoned)
    held = hours.by(parts[0], keys, "held")
    abandoned = hours.by(parts[1], keys, "abandoned")
    out = frame.merge(held, on=list(keys), how="left").merge(abandoned, on=list(keys), how="left")
    split = out[["held", "abandoned"]].fillna(0.0)
    idle = out["idle_gpu_hours"]
    known = split["held"] + split["abandoned"] >= idle - EPSILON_GE * np.maximum(1.0, idle)
    out["held_idle_gpu_hours"] = split["held"].clip(upper=idle).where(known)
    out["abandoned_idle_gpu_hours"] = (idle - out["held_idle_gpu_hours"]).where(known)
    return out.drop(columns=["held", "abandoned"])


def idle_workloads(sums: HistorySums, *, settings: Settings) -> pd.DataFrame:
    """The workloads (namespace, pod, team) with idle-allocated GE-hours in the window: idle_gpu_hours,
    waste_usd and, at their last sample, node, pool, gpus and idle_since, as assemble()'s workload rows
    have them, from IDLE_FAMILIES alone (the other pod families may be left empty). A pod seen under
    two label sets in its last piece takes the one holding more GE at its end (assemble: the one held
    longer in the window)."""
    hours = SampleHours(sums.pieces)
    idle = hours.by(sums.pod_idle, list(POD_KEYS), "idle_gpu_hours")
    waste = _priced(sums.pod_idle, hours, price_lookup(settings, sums), POD_KEYS, "waste_usd")
    idle = idle.merge(waste, on=list(POD_KEYS), how="left")
    idle = idle[idle["idle_gpu_hours"] > 0]
    by_workload = idle.groupby(list(WORKLOAD_KEYS), as_index=False, sort=True)
    summed = _idle_split(by_workload[["idle_gpu_hours", "waste_usd"]].sum(), sums, hours, WORKLOAD_KEYS)
    last = _last_seen(sums).sort_values(["piece", "gpus"], kind="stable")
    latest = last.groupby(list(WORKLOAD_KEYS), sort=False).tail(1)
    columns = [*WORKLOAD_KEYS, "node", "pool", "gpus", "idle_since"]
    out = summed.merge(latest[columns], on=list(WORKLOAD_KEYS), how="left")
    return out.fillna({"gpus": 0.0})


def workload_table(sums: HistorySums, *, settings: Settings) -> pd.DataFrame:
    """assemble()'s workload table alone, without right-sizing: one row per pod of the pod families in
    `sums` (their recommendation None: not read, so not known, never unknown)."""
    hours = SampleHours(sums.pieces)
    return _workloads(sums, hours, price_lookup(settings, sums), energy_rate_lookup(settings, sums))


# The per-pod families rightsizing_table() reads: the GE-hours its rows show (allocated, busy, unknown,
# idle: the report ranks workloads by waste, and the Right-size page keeps that order among equal
# savings), each pod's GE at its last sample (gpus, node and pool) and its need (p95 busy GE, peak
# memory). Not the idle GE at the last sample, the idle-since, the idle split nor the power (5 of the 12;
# the power one names every pod): right-sizing neither needs nor shows them.
RIGHTSIZE_FAMILIES = (
    "pod_allocated",
    "pod_used",
    "pod_unknown",
    "pod_idle",
    "pod_last_allocated",
    *POD_NEEDS,
)


def rightsizing_table(
    sums: HistorySums,
    *,
    settings: Settings,
    window: Window,
    held_at_end: Collection[tuple[str, str]] | None,
) -> tuple[pd.DataFrame, pd.DataFrame | None]:
    """assemble()'s workload table with its right-sizing, and its packing estimate (None without
    `held_at_end`), from RIGHTSIZE_FAMILIES alone: the other pod families may be left empty, and the
    columns made of them (idle_since, the idle split, energy) are then not known. Every other column is
    assemble()'s exactly: the same rows in the same order, the same recommendations and packing."""
    hours = SampleHours(sums.pieces)
    workloads = _workloads(sums, hours, price_lookup(settings, sums), energy_rate_lookup(settings, sums))
    table, packing, _ = _rightsized(
        workloads,
        sums,
        settings=settings,
        window=window,
        published=_published_prices(sums),
        held_at_end=held_at_end,
    )
    return table, packing


def _last_seen(sums: HistorySums) -> pd.DataFrame:
    """piece and POD_KEYS of each pod label set's last piece, its GE there (gpus) and idle_since (set only
    when every GE it held then was idle, as idle_since() in the raw path)."""
    keys = list(POD_KEYS)
    piece = ["piece", *keys]
    last = sums.pod_last_allocated.sort_values("piece", kind="stable").drop_duplicates(keys, keep="last")
    last = last.rename(columns={"value": "gpus"})
    last = last.merge(sums.pod_last_idle.rename(columns={"value": "idle_ge"}), on=piece, how="left")
    last = last.merge(sums.pod_idle_since.rename(columns={"value": "since"}), on=piece, how="left")
    all_idle = (last["idle_ge"] >= last["gpus"] - EPSILON_GE) & (last["gpus"] > 0)
    since = last["since"].where(all_idle)
    return last.assign(idle_since=pd.to_datetime(since, unit="s", utc=True))[[*piece, "gpus", "idle_since"]]


def _namespace_family(sums: HistorySums, family: str) -> pd.DataFrame:
    frame = sums.namespace_sums
    return frame[frame["family"] == family]


def _namespaces(
    sums: HistorySums, hours: SampleHours, price_of: "PriceOf", energy_rate: "PriceOf"
) -> pd.DataFrame:
    """One row per namespace (and team): GE-hours, dollars, pods and energy, from the pods' sums per
    namespace and pool (used_gpu_hours unknown where no pod of it had telemetry, energy where none had
    power readings)."""
    keys = ["namespace", "team"]
    frame = sums.namespace_sums
    frame = frame.assign(gpu_hours=hours.weighted(frame))
    frame = frame.assign(usd=frame["gpu_hours"].to_numpy() * price_of(frame))
    wide = frame.pivot_table(index=keys, columns="family", values="gpu_hours", aggfunc="sum")
    wide = wide.reindex(columns=["allocated", "idle", "used", "unknown"])
    usd = frame.pivot_table(index=keys, columns="family", values="usd", aggfunc="sum")
    usd = usd.reindex(columns=["allocated", "idle"]).reindex(wide.index)
    out = pd.DataFrame(
        {
            "allocated_gpu_hours": wide["allocated"].fillna(0.0),
            "used_gpu_hours": wide["used"],
            "idle_gpu_hours": wide["idle"].fillna(0.0),
            "unknown_gpu_hours": wide["unknown"].fillna(0.0),
            "cost_usd": usd["allocated"].fillna(0.0),
            "waste_usd": usd["idle"].fillna(0.0),
        },
        index=wide.index,
    )
    pods = sums.namespace_pods.set_index(keys)["value"]
    out["pods"] = pods.reindex(out.index).fillna(0).astype("int64")
    out = out.reset_index().astype({"namespace": "str", "team": "str"})
    return out.merge(_energy(_namespace_family(sums, "power"), hours, energy_rate, keys), on=keys, how="left")


def _pod_power_gaps(sums: HistorySums) -> int:
    """Pieces in which pods held GPUs and the GPUs' power was published, but no pod's power was read:
    read from roll-ups written before gpuwatch_pod_gpu_power_watts had its own."""
    held = set(_namespace_family(sums, "allocated")["piece"])
    powered = set(sums.pool_power["piece"])
    return len((held & powered) - set(_namespace_family(sums, "power")["piece"]))


def _energy(
    power: pd.DataFrame, hours: SampleHours, energy_rate: "PriceOf", keys: Sequence[str]
) -> pd.DataFrame:
    """keys, energy_kwh and energy_cost_usd per group of a power family (Σ W per piece): W × sample hours
    / 1000 is kWh, × PUE × the tariff of its piece is USD (pieces end where the tariff changes)."""
    kwh = hours.weighted(power) / WATT_HOURS_PER_KWH
    frame = power[list(keys)].assign(energy_kwh=kwh, energy_cost_usd=kwh.to_numpy() * energy_rate(power))
    # min_count: a group whose every piece is unpriced (no tariff) costs NaN, never 0
    return frame.groupby(list(keys), as_index=False, sort=True).sum(min_count=1)


def _workloads(
    sums: HistorySums, hours: SampleHours, price_of: "PriceOf", energy_rate: "PriceOf"
) -> pd.DataFrame:
    """One row per pod (namespace, pod, team): GE-hours, dollars, and at its last sample node, pool,
    gpus and idle_since (set only when every GE it held then was idle, as idle_since() in the raw path)."""
    keys = list(POD_KEYS)
    series = hours.by(sums.pod_allocated, keys, "allocated_gpu_hours")
    series = series.merge(hours.by(sums.pod_idle, keys, "idle_gpu_hours"), on=keys, how="left")
    series = series.merge(hours.by(sums.pod_used, keys, "used_gpu_hours"), on=keys, how="left")
    series = series.merge(hours.by(sums.pod_unknown, keys, "unknown_gpu_hours"), on=keys, how="left")
    series[["idle_gpu_hours", "unknown_gpu_hours"]] = series[["idle_gpu_hours", "unknown_gpu_hours"]].fillna(
        0.0
    )
    series = series.merge(_priced(sums.pod_allocated, hours, price_of, keys, "cost_usd"), on=keys, how="left")
    series = series.merge(_priced(sums.pod_idle, hours, price_of, keys, "waste_usd"), on=keys, how="left")
    series["waste_usd"] = series["waste_usd"].fillna(0.0)
    series = series.merge(_last_seen(sums), on=keys, how="left")
    # A pod seen under several label sets (moved node, relabelled team pool) is one workload: sums add
    # up, and node, pool, gpus and idle_since are those of the series it was last seen in.
    series = series.sort_values(["piece", "allocated_gpu_hours"], kind="stable", na_position="first")
    grouped = series.groupby(list(WORKLOAD_KEYS), sort=True)
    summed = _usage_sums(grouped).reset_index()
    latest = grouped.tail(1)[[*WORKLOAD_KEYS, "node", "pool", "gpus", "idle_since"]]
    out = _idle_split(summed, sums, hours, WORKLOAD_KEYS).merge(latest, on=list(WORKLOAD_KEYS), how="left")
    out["gpus"] = out["gpus"].fillna(0.0)
    out["pods"] = 1
    keys = list(WORKLOAD_KEYS)
    return out.merge(_energy(sums.pod_power, hours, energy_rate, keys), on=keys, how="left")


def _recommendations(
    workloads: pd.DataFrame,
    sums: HistorySums,
    *,
    settings: Settings,
    window: Window,
    published: Mapping[str, float],
) -> tuple[pd.DataFrame, int]:
    """recommend() for each workload row, and how many lack a p95 in some piece they had telemetry in
    (roll-ups from before it was recorded: their p95 unknown, never the rest of the window's).

    A workload's p95 busy GE is the highest of its pieces' (POD_NEED_ROLLUPS), its memory peak the
    highest, its telemetry the share of its allocated GE-hours whose utilization was known (the raw path
    counts samples); a pool's price is the one a table quotes (`published` in its last piece, else the
    book's at the window's end)."""
    keys, pod = list(WORKLOAD_KEYS), list(POD_KEYS)
    held = sums.pod_used[["piece", *pod]].drop_duplicates()
    measured = held.merge(sums.pod_busy_p95[["piece", *pod]], how="left", indicator=True)
    stale = measured.loc[measured["_merge"] == "left_only", keys].drop_duplicates()
    index = pd.MultiIndex.from_frame(workloads[keys])
    p95 = sums.pod_busy_p95.groupby(keys)["value"].max().reindex(index)
    p95[index.isin(pd.MultiIndex.from_frame(stale))] = math.nan
    allocated = workloads["allocated_gpu_hours"].to_numpy(dtype=np.float64)
    known = allocated - workloads["unknown_gpu_hours"].to_numpy(dtype=np.float64)
    usage = workloads[[*keys, "gpus", "allocated_gpu_hours"]].assign(
        pool=workloads["pool"].fillna("").astype("str"),
        p95_busy_ge=p95.to_numpy(dtype=np.float64),
        peak_fb_bytes=sums.pod_memory_peak.groupby(keys)["value"].max().reindex(index).to_numpy(np.float64),
        telemetry_ratio=np.divide(known, allocated, out=np.full(len(known), math.nan), where=allocated > 0),
    )
    pools = set(sums.nodes_now["pool"]) | (set(usage["pool"].unique()) - {""}) | set(published)
    quoted = {p: published.get(p, settings.pricing.usd_per_gpu_hour(p, window.end)) for p in pools}
    recommended = recommend(
        usage[list(RIGHTSIZE_WORKLOADS.columns)],
        usd_per_gpu_hour=candidate_prices(settings.pricing, quoted, window.end),
        window_hours=window.duration_seconds / SECONDS_PER_HOUR,
    )
    return recommended, len(stale)


def _rightsized(
    workloads: pd.DataFrame,
    sums: HistorySums,
    *,
    settings: Settings,
    window: Window,
    published: Mapping[str, float],
    held_at_end: Collection[tuple[str, str]] | None,
) -> tuple[pd.DataFrame, pd.DataFrame | None, int]:
    """The workload table with each row's recommendation (_recommendations), the packing estimate of
    those held at the window's end (None when not known which), and how many lack a p95."""
    recommendations, stale = _recommendations(
        workloads, sums, settings=settings, window=window, published=published
    )
    if len(workloads):  # without pod rows (not read) right-sizing is not known: none, never 0 saved
        keys = list(WORKLOAD_KEYS)
        workloads = workloads.merge(recommendations[[*keys, *RECOMMENDATION_COLUMNS]], on=keys, how="left")
    packing = None if held_at_end is None else _packing(recommendations, held_at_end)
    return workloads, packing, stale


def _packing(recommendations: pd.DataFrame, held_at_end: Collection[tuple[str, str]]) -> pd.DataFrame:
    """packing_estimate() of the workloads holding GPUs at the window's end."""
    pairs = pd.MultiIndex.from_frame(recommendations[["namespace", "pod"]])
    return packing_estimate(recommendations[pairs.isin(list(held_at_end))])


def _teams(sums: HistorySums, hours: SampleHours) -> pd.DataFrame:
    """Per team: allocated, idle and used GE-hours, cost and waste from the team series; pods seen."""
    states = hours.by(sums.team_states, ("team", "state"), "gpu_hours")
    wide = states.pivot_table(
        index="team", columns="state", values="gpu_hours", aggfunc="sum", fill_value=0.0
    )
    wide = wide.reindex(columns=list(ALLOCATED_STATES), fill_value=0.0).astype("float64")
    teams = pd.DataFrame(
        {
            "allocated_gpu_hours": wide[list(ALLOCATED_STATES)].sum(axis=1),
            "idle_gpu_hours": wide["allocated_idle"],
            "unknown_gpu_hours": wide["allocated_unknown"],
        }
    )
    for name, frame in (
        ("used_gpu_hours", sums.team_used),
        ("cost_usd", sums.team_cost),
        ("waste_usd", sums.team_idle_cost),
    ):
        teams = teams.join(hours.by(frame, ("team",), name).set_index("team"), how="outer")
    pods = sums.namespace_pods.groupby("team")["value"].sum().rename("pods")
    teams = teams.join(pods, how="outer")
    filled = {
        c: 0.0
        for c in ("allocated_gpu_hours", "idle_gpu_hours", "unknown_gpu_hours", "cost_usd", "waste_usd")
    }
    teams = teams.fillna(filled).fillna({"pods": 0}).astype({"pods": "int64"})
    teams = _idle_split(teams.rename_axis(index="team").reset_index(), sums, hours, ("team",))
    for name, frame, per_unit in (
        ("energy_kwh", sums.team_power, 1 / WATT_HOURS_PER_KWH),
        ("energy_cost_usd", sums.team_energy_cost, 1.0),
    ):
        summed = hours.by(frame, ("team",), name)
        teams = teams.merge(summed.assign(**{name: summed[name] * per_unit}), on="team", how="left")
    return teams  # energy NaN (unknown) for a team whose power was never published


def _pools(sums: HistorySums, hours: SampleHours, pool_hours: pd.DataFrame) -> pd.DataFrame:
    """Per pool: nodes and GPUs now, ledger GE-hours, used GE-hours, the window's mean fragmentation
    ratio, the largest free block and the taints now."""
    now = sums.nodes_now.groupby("pool").agg(nodes=("node", "nunique"), gpus=("value", "sum"))
    frag = _time_average(sums.fragmentation_sum, sums.fragmentation_count, hours)
    used = hours.by(_namespace_family(sums, "used"), ("pool",), "used_gpu_hours").set_index("pool")
    extra: list[pd.DataFrame | pd.Series[float]] = [
        now,
        used["used_gpu_hours"],
        frag.rename("fragmentation_ratio"),
        sums.largest_free_block_now.groupby("pool")["value"].max().rename("largest_free_block_ge"),
    ]
    pools = pool_hours.set_index("pool")
    for frame in extra:
        pools = pools.join(frame, how="outer")
    hours_columns = [f"{s}_gpu_hours" for s in LEDGER_STATES]
    pools = pools.fillna({c: 0.0 for c in hours_columns}).fillna({"nodes": 0, "gpus": 0.0})
    counts = sums.tainted_nodes_now.rename(columns={"value": "nodes"})[["pool", "taint", "nodes"]]
    taints = pool_taints(counts.astype({"nodes": "int64"}), pools["nodes"])
    pools["taints"] = pd.Series([taints.get(p, "") for p in pools.index], index=pools.index, dtype="str")
    # gpuwatch read NVIDIA's GPUs alone before it published each pool's vendor.
    vendors = dict(zip(sums.pool_info_now["pool"], sums.pool_info_now["vendor"], strict=True))
    pools["vendor"] = pd.Series(
        [vendors.get(p, "nvidia") for p in pools.index], index=pools.index, dtype="str"
    )
    return pools.astype({"nodes": "int64"}).rename_axis(index="pool").reset_index()


def _clusters(sums: HistorySums, hours: SampleHours, price_of: PriceOf) -> pd.DataFrame:
    """Per cluster (of the pieces' CLUSTER): its GPUs now, its ledger GE-hours and their dollars, the
    GE-hours its pods held and used (the columns of analysis.cluster_table); a cluster none of whose
    pieces holds a sample (its store failed, or its exporter published nothing) is a row of unknowns
    and why."""
    of_piece = sums.pieces.set_index("piece")[CLUSTER]

    def per_cluster(frame: pd.DataFrame) -> pd.DataFrame:
        return frame.assign(cluster=frame["piece"].map(of_piece).astype("str"))

    states = per_cluster(sums.pool_states)
    weighted = states.assign(gpu_hours=hours.weighted(states))
    weighted = weighted.assign(usd=weighted["gpu_hours"] * price_of(states))
    ledger, usd = (
        weighted.pivot_table(
            index="cluster", columns="state", values=v, aggfunc="sum", fill_value=0.0
        ).reindex(columns=list(LEDGER_STATES), fill_value=0.0)
        for v in ("gpu_hours", "usd")
    )
    held = per_cluster(sums.team_states)
    allocated = hours.by(held[held["state"].isin(ALLOCATED_STATES)], ("cluster",), "v").set_index("cluster")
    used = hours.by(per_cluster(sums.team_used), ("cluster",), "v").set_index("cluster")["v"]
    gpus = sums.nodes_now.groupby(sums.nodes_now["node"].map(cluster_of))["value"].sum()
    table = pd.DataFrame(
        {
            "gpus": gpus,
            "capacity_gpu_hours": ledger.sum(axis=1),
            "allocated_gpu_hours": allocated["v"],
            "used_gpu_hours": used,
            "cost_usd": usd[list(ALLOCATED_STATES)].sum(axis=1),
            "waste_usd": usd["allocated_idle"],
            "error": None,
            **{f"{s}_gpu_hours": ledger[s] for s in LEDGER_STATES},
        },
        index=pd.Index(sorted(set(of_piece.astype("str"))), name="cluster"),
    )
    zero = ["gpus", "capacity_gpu_hours", "allocated_gpu_hours", "cost_usd", "waste_usd"]
    table = table.fillna({c: 0.0 for c in [*zero, *(f"{s}_gpu_hours" for s in LEDGER_STATES)]})
    unread = sums.pieces.groupby(CLUSTER)["samples"].sum().reindex(table.index) <= 0
    numbers = [c for c in table.columns if c != "error"]
    table.loc[unread, numbers] = np.nan
    table.loc[unread, "error"] = "no gpuwatch_* history read for the window"
    return table.reset_index()[[*CLUSTER_COLUMNS, *LEDGER_HOURS[1:]]]


def _pending(sums: HistorySums) -> pd.DataFrame:
    """The pending GPU pods of the exporter's latest cycle, longest waiting first."""
    keys = list(PENDING_LABELS)
    pending = sums.pending_now.rename(columns={"value": "gpus"}).merge(
        sums.pending_waiting_now.rename(columns={"value": "waiting_seconds"}), on=keys, how="left"
    )
    info = sums.pending_info_now.drop(columns="value", errors="ignore").drop_duplicates(keys)
    pending = pending.merge(info, on=keys, how="left")
    columns = [*keys, "gpus", "waiting_seconds", "blocked_by", *PENDING_INFO_LABELS]
    # An exporter from before the info series says no more than blocked_by.
    pending = pending.fillna(dict.fromkeys(PENDING_INFO_LABELS, ""))
    return pending[columns].sort_values(
        ["waiting_seconds", "namespace", "pod"], ascending=[False, True, True], ignore_index=True
    )
