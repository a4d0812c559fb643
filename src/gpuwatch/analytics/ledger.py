"""The GPU-hour ledger of SPEC §3: idle-allocated samples, the five capacity states per node, usage."""

import math
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np
import pandas as pd
from numpy.typing import NDArray

from gpuwatch.core.model import ALLOCATED_STATES, LEDGER_STATES, IdleParams
from gpuwatch.core.schema import ATTRIBUTED, IDLE_MARKED, NODE_FRAGMENTATION, NODE_SAMPLES, SCHEDULABLE_FREE

SECONDS_PER_HOUR = 3600.0
# Summed GE shares carry float noise (7 × 1/7 is not exactly 1): differences below this are zero.
EPSILON_GE = 1e-9
LEDGER_COLUMNS = tuple(f"{state}_ge" for state in LEDGER_STATES)
# The groupings of SPEC §1/§4.2 by name; a workload is a pod (namespace + pod).
GROUPINGS: Mapping[str, tuple[str, ...]] = {
    "fleet": (),
    "team": ("team",),
    "namespace": ("namespace",),
    "workload": ("namespace", "pod"),
    "pool": ("pool",),
}
UNIT_KEYS = ("namespace", "pod", "uuid", "gpu_instance_id")  # one pod holding one GPU / MIG instance
_NODE_KEYS = ("timestamp", "node")
_TICKS_PER_SECOND = {"s": 1, "ms": 10**3, "us": 10**6, "ns": 10**9}
_NAT = np.iinfo(np.int64).min

Int64s = NDArray[np.int64]
Floats = NDArray[np.float64]
Bools = NDArray[np.bool_]


class Ledger(NamedTuple):
    """The ledger per node-sample, and the allocations it could not place on a known node-sample."""

    by_node: pd.DataFrame
    unknown_nodes: pd.DataFrame


# ----------------------------------------------------------------------------------------------------
# Idle-allocated samples


def mark_idle(attributed: pd.DataFrame, *, step_seconds: float, idle: IdleParams) -> pd.DataFrame:
    """ATTRIBUTED rows (same order and index) plus `idle` (bool) and `low_util_since` (time or NaT).

    SPEC §3: sample i of a unit (namespace, pod, uuid, gpu_instance_id) is idle when the pod held the
    unit at all of the w = ceil(window / step) samples i-w+1..i (no hole in the timestamps) and its
    util_ratio was below the threshold at every one of them. NaN utilization is never low, so it is
    never idle and it breaks the run. Timestamps are on the step grid; rows repeating a unit's
    timestamp (a pod holding two time-slice replicas of one GPU) are one sample.
    `low_util_since` is the first sample of the run of below-threshold samples a row belongs to.
    With `fb_used_bytes`, `memory_held` is 1.0 where the unit's framebuffer holds at least
    idle.held_fb_bytes, 0.0 below, NaN where unknown: an idle row is then held or abandoned.
    """
    ATTRIBUTED.check(attributed)
    ticks, per_second = _ticks(attributed["timestamp"])
    step = round(step_seconds * per_second)
    window = max(1, math.ceil(idle.window_seconds / step_seconds))
    codes, _ = group_codes(attributed, UNIT_KEYS)
    order = _group_time_order(codes, ticks)
    unit = codes[order]
    t = ticks[order]
    low = attributed["util_ratio"].to_numpy(dtype=np.float64)[order] < idle.threshold_ratio
    n = len(t)
    held_on = np.zeros(n, dtype=np.bool_)  # this row continues the previous row's holding, no hole
    if n > 1:
        held_on[1:] = (unit[1:] == unit[:-1]) & (t[1:] - t[:-1] <= step)
    low_on = held_on.copy()
    low_on[1:] &= low[:-1]
    # Index of the first row of each row's low run, carried forward (running maximum of run starts).
    first = np.where(low_on, 0, np.arange(n, dtype=np.int64))
    np.maximum.accumulate(first, out=first)
    since = t[first]
    is_idle = low & (t - since >= (window - 1) * step)
    idle_out = np.empty(n, dtype=np.bool_)
    idle_out[order] = is_idle
    since_out = np.empty(n, dtype=np.int64)
    since_out[order] = np.where(low, since, _NAT)
    marked = attributed.assign(
        idle=idle_out, low_util_since=_to_time(since_out, attributed["timestamp"], attributed.index)
    )
    if "fb_used_bytes" in attributed:
        fb = attributed["fb_used_bytes"].to_numpy(dtype=np.float64)
        marked["memory_held"] = np.where(np.isnan(fb), np.nan, fb >= idle.held_fb_bytes)
    return marked


def idle_since(marked: pd.DataFrame) -> pd.DataFrame:
    """Per workload (namespace, pod): `idle_since`, the start of its current below-threshold run, or NaT.

    A workload is idle when every unit it holds at its last held sample is idle there; it has been
    below the threshold since the latest of those units' run starts — idle.window before the end of
    its first idle sample (SPEC §3 does not count that first window). Sorted by namespace, pod.
    """
    IDLE_MARKED.check(marked)
    codes, keys = group_codes(marked, GROUPINGS["workload"])
    ticks, _ = _ticks(marked["timestamp"])
    last = pd.Series(ticks).groupby(codes).max().to_numpy()
    at_last = ticks == last[codes]
    since_ticks, _ = _ticks(marked["low_util_since"].dt.as_unit(marked["timestamp"].dt.unit))
    tail = pd.DataFrame(
        {"idle": marked["idle"].to_numpy()[at_last], "since": since_ticks[at_last]},
    ).groupby(codes[at_last])
    all_idle = tail["idle"].all().to_numpy()
    since = np.where(all_idle, tail["since"].max().to_numpy(), _NAT)
    out = keys.assign(idle_since=_to_time(since, marked["timestamp"], keys.index))
    return out.sort_values(list(GROUPINGS["workload"]), ignore_index=True)


def silent_units(marked: pd.DataFrame, *, step_seconds: float) -> pd.DataFrame:
    """node, uuid, gpu_instance_id, silent_seconds: how long each allocated unit had no utilization
    sample in the window (its allocated_unknown samples, SPEC §3: per GPU, not per pod), longest first.

    A sample counts once however many pods share the unit (time-slice replicas); units whose identity
    is unknown (uuid "": a pod DCGM never named on any GPU) are left out, as are units never silent.
    """
    keys = ["node", "uuid", "gpu_instance_id"]
    rows = marked.loc[marked["util_ratio"].isna() & marked["uuid"].ne(""), ["timestamp", *keys]]
    samples = rows.drop_duplicates().groupby(keys, observed=True, sort=False).size()
    out = samples.rename("silent_seconds").reset_index()
    out = out.astype({c: "str" for c in keys}).assign(
        silent_seconds=out["silent_seconds"] * float(step_seconds)
    )
    return out.sort_values(["silent_seconds", *keys], ascending=[False, True, True, True], ignore_index=True)


# ----------------------------------------------------------------------------------------------------
# The ledger


def schedulable_free(node_samples: pd.DataFrame, marked: pd.DataFrame) -> pd.DataFrame:
    """SCHEDULABLE_FREE (timestamp, node, pool, schedulable_free_ge): the input of fragmentation().

    Free GE (capacity − unavailable − allocated, never below 0) on ready, uncordoned nodes; 0 on the
    others, whose free GE no pod can be placed on (it is `unavailable` or cordon-`stranded`).
    """
    balance, _ = _balance(node_samples, marked)
    free = balance["free_ge"].where(balance["placeable"], 0.0)
    out = balance[["timestamp", "node", "pool"]].assign(schedulable_free_ge=free)
    return SCHEDULABLE_FREE.check(out)


def ledger(node_samples: pd.DataFrame, marked: pd.DataFrame, stranded: pd.DataFrame) -> Ledger:
    """The GPU-hour ledger of SPEC §3 in GE per node-sample, and the allocations on unknown node-samples.

    node_samples: NODE_SAMPLES. marked: mark_idle() output. stranded: NODE_FRAGMENTATION, i.e.
    fragmentation()'s per-node frame (timestamp, node, fragmented_ge = F_n); node-samples it lacks
    have no fragmented GE.

    by_node — timestamp, node, pool, capacity_ge, unavailable_ge, stranded_ge, unallocated_ge,
    allocated_unknown_ge, allocated_idle_ge, allocated_active_ge, overallocated_ge; the six state
    columns sum to capacity_ge (up to float rounding) and none is negative:
      unavailable = capacity − allocatable on a ready node, all of capacity on a NotReady one;
      allocated = Σ ge_share of the marked rows on the node-sample, split into unknown (util_ratio
      NaN: no telemetry), idle (`idle`) and active (known and not idle);
      free = capacity − unavailable − allocated; stranded = all of free on a cordoned node, else F_n;
      unallocated = free − stranded.
    Over-allocation (allocated > capacity − unavailable: a pod on a NotReady node, or on a GPU the
    device plugin stopped advertising) is not hidden: the allocated states are scaled down pro rata
    so the states still sum to capacity, and the excess is `overallocated_ge`, for callers to warn.
    Node-samples with unknown (NaN) capacity are left out; unknown allocatable is taken as capacity.

    unknown_nodes — timestamp, node, pool and the three allocated_*_ge columns: marked rows whose
    (timestamp, node) is not in node_samples, summed; they are in no ledger state, so count them.
    Σ allocated over `marked` = Σ allocated states + overallocated (by_node) + Σ allocated states
    (unknown_nodes).
    """
    NODE_FRAGMENTATION.check(stranded)
    balance, unknown = _balance(node_samples, marked)
    free = balance["free_ge"].to_numpy()
    fragmented = np.zeros(len(balance))
    if len(stranded):
        pos = _row_positions(balance, stranded)
        hit = pos >= 0
        fragmented[pos[hit]] = stranded["fragmented_ge"].to_numpy(dtype=np.float64)[hit]
    fragmented = np.nan_to_num(np.clip(fragmented, 0.0, free), nan=0.0)
    # SPEC §3: free GE on a cordoned node is stranded whole; on a schedulable node only its F_n.
    stranded_ge = np.where(balance["placeable"].to_numpy(), fragmented, free)
    by_node = pd.DataFrame(
        {
            "timestamp": balance["timestamp"],
            "node": balance["node"],
            "pool": balance["pool"],
            "capacity_ge": balance["capacity_ge"],
            "unavailable_ge": balance["unavailable_ge"],
            "stranded_ge": stranded_ge,
            "unallocated_ge": free - stranded_ge,
            "allocated_unknown_ge": balance["allocated_unknown_ge"],
            "allocated_idle_ge": balance["allocated_idle_ge"],
            "allocated_active_ge": balance["allocated_active_ge"],
            "overallocated_ge": balance["overallocated_ge"],
        }
    )
    return Ledger(by_node=by_node, unknown_nodes=unknown)


def ledger_gpu_hours(frame: pd.DataFrame, *, step_seconds: float, by: Sequence[str] = ()) -> pd.DataFrame:
    """Every `<name>_ge` column of a per-sample frame summed to `<name>_gpu_hours` (GE × step / 3600).

    Works on Ledger.by_node and Ledger.unknown_nodes. by = () is the fleet (one row); ("pool",) per
    pool; any columns of the frame.
    """
    ge_columns = [c for c in frame.columns if c.endswith("_ge")]
    hours = frame[ge_columns] * (step_seconds / SECONDS_PER_HOUR)
    if by:
        summed = hours.groupby([frame[c] for c in by], sort=True, observed=True).sum().reset_index()
    else:
        summed = hours.sum().to_frame().T.astype("float64")
    return summed.rename(columns={c: c.removesuffix("_ge") + "_gpu_hours" for c in ge_columns})


# ----------------------------------------------------------------------------------------------------
# Usage summaries


def usage_summary(marked: pd.DataFrame, *, step_seconds: float, by: str | Sequence[str]) -> pd.DataFrame:
    """Allocated, used and idle GE-hours and efficiency per group, sorted by the group keys.

    by: "fleet", "team", "namespace", "workload" (namespace, pod), "pool", or a sequence of columns.
    Columns: the keys, allocated_gpu_hours (Σ ge_share × step), used_gpu_hours (Σ util × ge_share ×
    step over samples with known util; NaN when none is known), idle_gpu_hours (Σ over idle
    samples), unknown_gpu_hours (Σ over samples with unknown util: the allocated_unknown state),
    efficiency (used / the allocated GE-hours whose utilization is known: unknown hours count neither
    as busy nor as idle; NaN when none is known), pods (distinct namespace/pod).
    """
    return summarize_usage(marked, step_seconds=step_seconds, by=by)


def summarize_usage(
    marked: pd.DataFrame,
    *,
    step_seconds: float,
    by: str | Sequence[str],
    allocated_weights: Mapping[str, Floats] | None = None,
    idle_weights: Mapping[str, Floats] | None = None,
) -> pd.DataFrame:
    """usage_summary() plus a column Σ ge_share × step × weight per named per-row weight, over all rows
    (allocated_weights) or idle rows only (idle_weights): the one pass cost.py prices with. Rows with
    `memory_held` (mark_idle) add held_idle_gpu_hours and abandoned_idle_gpu_hours: their sum is
    idle_gpu_hours, or both are NaN where some idle hours' framebuffer is unknown."""
    IDLE_MARKED.check(marked)
    keys = GROUPINGS[by] if isinstance(by, str) else tuple(by)
    codes, groups = group_codes(marked, keys)
    n_groups = len(groups)
    ge_hours = marked["ge_share"].to_numpy(dtype=np.float64) * (step_seconds / SECONDS_PER_HOUR)
    util = marked["util_ratio"].to_numpy(dtype=np.float64)
    known = ~np.isnan(util)
    idle = marked["idle"].to_numpy(dtype=np.bool_) & known  # unknown is never idle (SPEC §3)
    used = np.bincount(codes, weights=np.where(known, util * ge_hours, 0.0), minlength=n_groups)
    n_known = np.bincount(codes, weights=known, minlength=n_groups)
    allocated = np.bincount(codes, weights=ge_hours, minlength=n_groups)
    used = np.where(n_known > 0, used, np.nan)  # unknown telemetry is unknown, never 0 (SPEC §3)
    unknown = np.bincount(codes, weights=np.where(known, 0.0, ge_hours), minlength=n_groups)
    measured = allocated - unknown
    out = groups.assign(
        allocated_gpu_hours=allocated,
        used_gpu_hours=used,
        idle_gpu_hours=np.bincount(codes, weights=np.where(idle, ge_hours, 0.0), minlength=n_groups),
        unknown_gpu_hours=unknown,
        efficiency=np.divide(used, measured, out=np.full(n_groups, np.nan), where=measured > EPSILON_GE),
        pods=_distinct_workloads(marked, codes, keys, n_groups),
    )
    if "memory_held" in marked:
        # Held vs abandoned idle (SPEC §3): a group with idle hours of unknown framebuffer has neither.
        held = marked["memory_held"].to_numpy(dtype=np.float64)
        idle_hours = np.where(idle, ge_hours, 0.0)
        fb_unknown = np.bincount(codes, weights=np.where(np.isnan(held), idle_hours, 0.0), minlength=n_groups)
        for name, weight in (("held_idle_gpu_hours", held == 1.0), ("abandoned_idle_gpu_hours", held == 0.0)):
            split = np.bincount(codes, weights=np.where(weight, idle_hours, 0.0), minlength=n_groups)
            out[name] = np.where(fb_unknown > 0, np.nan, split)
    for name, weight in (allocated_weights or {}).items():
        out[name] = np.bincount(codes, weights=ge_hours * weight, minlength=n_groups)
    for name, weight in (idle_weights or {}).items():
        out[name] = np.bincount(codes, weights=np.where(idle, ge_hours * weight, 0.0), minlength=n_groups)
    return out.sort_values(list(keys), ignore_index=True) if keys else out


def _distinct_workloads(marked: pd.DataFrame, codes: Int64s, keys: Sequence[str], n_groups: int) -> Int64s:
    workload = GROUPINGS["workload"]
    if set(workload) <= set(keys):
        return np.ones(n_groups, dtype=np.int64)
    pods, pod_keys = group_codes(marked, workload)
    width = max(len(pod_keys), 1)
    pairs = codes * width + pods
    if n_groups * width <= max(2 * len(pairs), 2**20):
        present = np.zeros(n_groups * width, dtype=np.bool_)
        present[pairs] = True
        distinct = np.flatnonzero(present)
    else:
        distinct = pd.unique(pairs)
    return np.bincount(distinct // width, minlength=n_groups).astype(np.int64)


# ----------------------------------------------------------------------------------------------------
# Vectorized building blocks


def group_codes(frame: pd.DataFrame, columns: Sequence[str]) -> tuple[Int64s, pd.DataFrame]:
    """Dense int64 code per row of its key tuple, and the distinct keys (row j of the frame = code j).

    No columns: one group holding every row. NaN is a key like any other.
    """
    if not columns:
        return np.zeros(len(frame), dtype=np.int64), pd.DataFrame(index=pd.RangeIndex(1))
    combined = np.zeros(len(frame), dtype=np.int64)
    size = 1
    uniques: list[Any] = []
    for column in columns:
        codes, distinct = _factorize(frame[column])
        width = max(len(distinct), 1)
        if size * width >= 2**62:  # the mixed-radix code would overflow: renumber densely first
            combined = np.asarray(pd.factorize(combined)[0], dtype=np.int64)
            size = int(combined.max()) + 1
            uniques = []
        combined = combined * width + codes
        size *= width
        uniques.append(distinct)
    if len(columns) == 1:
        return combined, pd.DataFrame({columns[0]: uniques[0]})
    if size <= max(2 * len(combined), 2**20):
        # A small key space: number the present keys through a table, no hashing of every row.
        present = np.zeros(size, dtype=np.bool_)
        present[combined] = True
        values = np.flatnonzero(present)
        dense = (np.cumsum(present) - 1)[combined]
    else:
        codes, values = pd.factorize(combined)
        dense = np.asarray(codes, dtype=np.int64)
    if len(uniques) == len(columns):
        # Decode each distinct mixed-radix value back into the columns' distinct values.
        keys: dict[str, Any] = {}
        rest = np.asarray(values, dtype=np.int64)
        for column, distinct in zip(reversed(columns), reversed(uniques), strict=True):
            width = max(len(distinct), 1)
            keys[column] = distinct.take(rest % width)
            rest = rest // width
        return dense, pd.DataFrame({c: keys[c] for c in columns})
    # After a renumbering the keys are taken from each group's first row (codes number groups in
    # order of first appearance, so that is where the running maximum of the codes steps up).
    is_first = np.ones(len(dense), dtype=np.bool_)
    is_first[1:] = dense[1:] > np.maximum.accumulate(dense)[:-1]
    return dense, frame[list(columns)].iloc[np.flatnonzero(is_first)].reset_index(drop=True)


def _factorize(values: "pd.Series[Any]") -> tuple[Int64s, pd.Index]:
    """pd.factorize (NaN a value like any other), skipping the hashing for a column of one value (say
    gpu_instance_id "" on a fleet without MIG). A categorical column (the join's keys) is numbered
    from its codes, with the categories no row uses left out."""
    if isinstance(values.dtype, pd.CategoricalDtype):
        raw = values.cat.codes.to_numpy().astype(np.int64)
        categories = values.cat.categories
        raw = np.where(raw < 0, len(categories), raw)  # NaN: one more key
        present = np.bincount(raw, minlength=len(categories) + 1) > 0
        dense = (np.cumsum(present) - 1)[raw]
        distinct = categories.append(pd.Index([np.nan]))[np.flatnonzero(present)]
        return dense.astype(np.int64), pd.Index(distinct)
    if len(values) and not pd.isna(first := values.iloc[0]):
        head = values.iloc[:1024]
        if (head == first).all() and (values == first).all():
            return np.zeros(len(values), dtype=np.int64), pd.Index(values.iloc[:1])
    codes, distinct = pd.factorize(values, use_na_sentinel=False)
    return np.asarray(codes, dtype=np.int64), pd.Index(distinct)


def _group_time_order(codes: Int64s, ticks: Int64s) -> Int64s:
    """Row order sorted by group code, then time; stable, and O(n) radix passes in the usual case.

    The attributed timeline arrives sorted by time, so a stable sort by group alone already leaves
    each group in time order; only when it does not is a full lexsort paid for.
    """
    n_groups = int(codes.max()) + 1 if len(codes) else 0
    if n_groups <= 2**16:
        order = np.argsort(codes.astype(np.uint16), kind="stable")
    elif n_groups <= 2**32:
        order = np.argsort((codes & 0xFFFF).astype(np.uint16), kind="stable")
        order = order[np.argsort((codes[order] >> 16).astype(np.uint16), kind="stable")]
    else:
        order = np.argsort(codes, kind="stable")
    sorted_codes = codes[order]
    sorted_ticks = ticks[order]
    if np.any((sorted_codes[1:] == sorted_codes[:-1]) & (sorted_ticks[1:] < sorted_ticks[:-1])):
        order = np.lexsort((ticks, codes))
    return order.astype(np.int64, copy=False)


def _balance(node_samples: pd.DataFrame, marked: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Per node-sample: capacity, unavailable, allocated (idle/active, capped), free, over-allocation."""
    NODE_SAMPLES.check(node_samples)
    IDLE_MARKED.check(marked)
    nodes = node_samples[node_samples["capacity_ge"].notna()]
    if nodes.duplicated(list(_NODE_KEYS), keep="last").any():
        nodes = nodes.drop_duplicates(list(_NODE_KEYS), keep="last")
    nodes = nodes.reset_index(drop=True)
    pos = _row_positions(nodes, marked)
    weights = _allocated_weights(marked)
    placed = pos >= 0
    m = len(nodes)
    if not placed.all():
        pos = pos[placed]
        weights = {state: weight[placed] for state, weight in weights.items()}
    unknown_ge, idle_ge, active_ge = (
        np.bincount(pos, weights=weights[state], minlength=m) for state in ALLOCATED_STATES
    )
    capacity = nodes["capacity_ge"].to_numpy(dtype=np.float64)
    allocatable = nodes["allocatable_ge"].to_numpy(dtype=np.float64)
    allocatable = np.clip(np.where(np.isnan(allocatable), capacity, allocatable), 0.0, capacity)
    ready = nodes["ready"].to_numpy(dtype=np.bool_)
    # SPEC §3: not allocatable is unavailable; on a NotReady node all of capacity is.
    unavailable = np.where(ready, capacity - allocatable, capacity)
    room = capacity - unavailable
    allocated = unknown_ge + idle_ge + active_ge
    over = allocated - room > EPSILON_GE
    scale = np.divide(room, allocated, out=np.ones(m), where=over)
    balance = pd.DataFrame(
        {
            "timestamp": nodes["timestamp"],
            "node": nodes["node"],
            "pool": nodes["pool"],
            "capacity_ge": capacity,
            "unavailable_ge": unavailable,
            "free_ge": np.maximum(room - allocated * scale, 0.0),
            "allocated_unknown_ge": unknown_ge * scale,
            "allocated_idle_ge": idle_ge * scale,
            "allocated_active_ge": active_ge * scale,
            "overallocated_ge": np.where(over, allocated - room, 0.0),
            "placeable": ready & nodes["schedulable"].to_numpy(dtype=np.bool_),
        }
    )
    return balance, _unknown_nodes(marked, ~placed)


def _allocated_weights(marked: pd.DataFrame) -> dict[str, Floats]:
    """Each row's GE in its allocated state: unknown (no utilization), idle, or active (known, not idle)."""
    ge = marked["ge_share"].to_numpy(dtype=np.float64)
    idle = marked["idle"].to_numpy(dtype=np.bool_)
    unknown = np.isnan(marked["util_ratio"].to_numpy(dtype=np.float64))
    return {
        "allocated_unknown": np.where(unknown, ge, 0.0),
        "allocated_idle": np.where(idle & ~unknown, ge, 0.0),
        "allocated_active": np.where(idle | unknown, 0.0, ge),
    }


def _unknown_nodes(marked: pd.DataFrame, mask: Bools) -> pd.DataFrame:
    rows = marked.loc[mask, ["timestamp", "node", "pool"]]
    weights = _allocated_weights(marked)
    sums = rows.assign(**{f"{state}_ge": weights[state][mask] for state in ALLOCATED_STATES})
    return sums.groupby(["timestamp", "node", "pool"], as_index=False, sort=True, observed=True).sum()


def _row_positions(index: pd.DataFrame, query: pd.DataFrame) -> Int64s:
    """Position in `index` of the row with each query row's (timestamp, node); -1 where none.

    `index` has unique (timestamp, node). A dense (sample × node) table when it is about as many
    cells as rows (the usual complete node timeline), else a hash lookup.
    """
    if not len(index):
        return np.full(len(query), -1, dtype=np.int64)
    index_ticks, _ = _ticks(index["timestamp"])
    query_ticks, _ = _ticks(query["timestamp"].dt.as_unit(index["timestamp"].dt.unit))
    times = np.unique(index_ticks)
    nodes = pd.Index(pd.unique(index["node"]))
    index_key = _sample_index(index_ticks, times) * len(nodes) + _lookup(index["node"], nodes)
    t = _sample_index(query_ticks, times)
    n = _lookup(query["node"], nodes)
    known = (t >= 0) & (n >= 0)
    query_key = np.where(known, t * len(nodes) + n, 0)
    cells = len(times) * len(nodes)
    if cells <= 4 * len(index) + 1024:
        table = np.full(cells, -1, dtype=np.int64)
        table[index_key] = np.arange(len(index), dtype=np.int64)
        pos = table[query_key]
    else:
        pos = np.asarray(pd.Index(index_key).get_indexer(pd.Index(query_key)), dtype=np.int64)
    return np.where(known, pos, -1)


def _sample_index(ticks: Int64s, times: Int64s) -> Int64s:
    """Position of each tick in the sorted distinct sample times (-1 if absent); arithmetic on a regular
    grid (the usual case: a range query's step), else a hash lookup."""
    if len(times) > 1:
        step = times[1] - times[0]
        if step > 0 and np.all(np.diff(times) == step):
            offset = ticks - times[0]
            position = offset // step
            # An unsigned view turns "0 <= position < n" into one comparison.
            on_grid = (position * step == offset) & (position.view(np.uint64) < len(times))
            return np.where(on_grid, position, -1)
    return _lookup(ticks, pd.Index(times))


def _lookup(values: "NDArray[Any] | pd.Series[Any]", index: pd.Index) -> Int64s:
    """Position of each value in `index` (-1 if absent); hashes the few distinct values, not every row."""
    codes, uniques = pd.factorize(values)
    where = np.append(np.asarray(index.get_indexer(pd.Index(uniques)), dtype=np.int64), -1)
    return where[codes]  # code -1 (a missing value) picks the appended -1


def _ticks(times: "pd.Series[Any]") -> tuple[Int64s, int]:
    """Integer ticks of a tz-aware time column in its own unit, and ticks per second."""
    unit = str(times.dt.unit)
    return np.asarray(pd.DatetimeIndex(times).asi8, dtype=np.int64), _TICKS_PER_SECOND[unit]


def _to_time(ticks: Int64s, like: "pd.Series[Any]", index: pd.Index) -> "pd.Series[Any]":
    """A UTC time column from integer ticks in the unit of `like` (int64 min = NaT)."""
    dtype = like.dtype
    assert isinstance(dtype, pd.DatetimeTZDtype)  # the contracts' "time" kind
    # Ticks are UTC already: reading them as UTC wall times is a relabel, not a conversion.
    times = pd.DatetimeIndex(ticks.view(f"datetime64[{dtype.unit}]"), dtype=dtype)
    return pd.Series(times, index=index)
