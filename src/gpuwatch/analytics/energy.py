"""GPU energy of SPEC §3: counter increases (power × time where absent), attributed to holders, priced."""

from collections.abc import Sequence
from typing import Any, Final

import numpy as np
import pandas as pd
from numpy.typing import ArrayLike, NDArray

from gpuwatch.analytics.ledger import group_codes
from gpuwatch.core.errors import DataError
from gpuwatch.core.model import EnergyTariff, in_force
from gpuwatch.core.schema import (
    ATTRIBUTED,
    ATTRIBUTED_ENERGY,
    ENERGY_SAMPLES,
    GPU_ENERGY,
    categorical_strings,
)

JOULES_PER_KWH: Final = 3.6e6
# Summed GE shares carry float noise (3/7 + 4/7 is not exactly 1): a remainder below this is none.
EPSILON_GE: Final = 1e-9
# Values of the `energy_source` column; "" = the sample's energy is unknown.
SOURCE_COUNTER: Final = "counter"
SOURCE_POWER: Final = "power"
_SOURCES: Final = ("", SOURCE_COUNTER, SOURCE_POWER)

Int64s = NDArray[np.int64]
Floats = NDArray[np.float64]
Bools = NDArray[np.bool_]


# ----------------------------------------------------------------------------------------------------
# Per GPU and sample


def counter_increase_joules(samples: pd.DataFrame, *, step_seconds: float) -> pd.DataFrame:
    """GPU_ENERGY: per physical GPU (uuid) and sample, the energy it drew in the sample, in joules.

    samples: ENERGY_SAMPLES — timestamp, uuid, energy_joules (DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION in
    joules: the cumulative counter since driver load, read last in the sample), power_watts
    (DCGM_FI_DEV_POWER_USAGE averaged over the sample); NaN = missing. Both are whole-GPU fields.

    1. One fact per (uuid, timestamp): the exporter repeats whole-GPU fields on every MIG instance
       series (and on the parent GPU's), and HA copies or a second scrape repeat whole series. Of the
       copies the counter is the max of the known values (the latest read of one counter: instance
       series are read microseconds apart, so they can differ by a few joules) and power the mean of
       the known values. Rows with uuid "" (no GPU) are left out.
    2. Per uuid in time order, sample i's energy is, when the GPU's previous sample i−1 is at most
       one step before it and both counter values are known:
         counter[i] − counter[i−1]  if counter[i] ≥ counter[i−1],
         counter[i]                 otherwise (a driver reload reset the counter to 0 in between:
                                    Prometheus' increase() convention), energy_source "counter".
       Otherwise (the GPU's first sample, the first after a gap, a missing counter value at i or
       i−1): power_watts × step_seconds when power is known (energy_source "power"), else NaN ("").
       Both sources measure the same interval: a range query evaluated at t_i reads the counter's
       last value and power's average over (t_i − step, t_i].
    Non-finite or negative readings are garbage (SPEC §7): unknown, never 0.

    Returns timestamp (the input's unit), uuid (categorical), energy_joules, energy_source
    (categorical of "counter", "power", ""), sorted by uuid then timestamp, with a default index.
    """
    ENERGY_SAMPLES.check(samples)
    uuids = samples["uuid"]
    if (uuids == "").any() or uuids.isna().any():
        samples = samples[uuids.notna() & (uuids != "")]
    raw, table = _string_codes(samples["uuid"])
    distinct, inverse = np.unique(np.array(table, dtype=object), return_inverse=True)
    codes, unit = inverse.astype(np.int64)[raw], [str(u) for u in distinct]  # codes in uuid order
    ticks = _ns(samples["timestamp"])
    step = round(step_seconds * 1e9)
    counter = _valid(samples["energy_joules"].to_numpy(dtype=np.float64))
    power = _valid(samples["power_watts"].to_numpy(dtype=np.float64))
    order = _unit_time_order(codes, ticks)
    codes, ticks, counter, power = codes[order], ticks[order], counter[order], power[order]
    codes, ticks, counter, power = _one_fact(codes, ticks, counter, power)

    n = len(ticks)
    follows = np.zeros(n, dtype=np.bool_)  # the previous row is the same GPU, at most one step before
    follows[1:] = (codes[1:] == codes[:-1]) & (ticks[1:] - ticks[:-1] <= step)
    previous = np.full(n, np.nan)
    previous[1:] = counter[:-1]
    by_counter = follows & ~np.isnan(counter) & ~np.isnan(previous)
    increase = np.where(counter >= previous, counter - previous, counter)  # a reset: energy since it
    by_power = ~by_counter & ~np.isnan(power)
    energy = np.where(by_counter, increase, np.where(by_power, power * float(step_seconds), np.nan))
    source = np.where(by_counter, 1, np.where(by_power, 2, 0))
    out = pd.DataFrame(
        {
            "timestamp": _to_time(ticks, samples["timestamp"]),
            "uuid": categorical_strings(unit, codes),
            "energy_joules": energy,
            "energy_source": categorical_strings(_SOURCES, source),
        },
        copy=False,
    )
    return GPU_ENERGY.check(out)


def energy_sources(energy: pd.DataFrame) -> dict[str, int]:
    """GPUs by the source of their energy, for coverage: {"counter": n, "power": n, "unknown": n}.

    energy: GPU_ENERGY (counter_increase_joules()). A GPU counts as "counter" when any of its samples
    used the energy counter (a GPU reporting it falls back to power only at its first sample and after
    gaps or resets of telemetry), else "power" when any used power × time, else "unknown" (no sample of
    it has a known energy).
    """
    GPU_ENERGY.check(energy)
    codes, gpus = group_codes(energy, ("uuid",))
    n_gpus = len(gpus) if len(energy) else 0
    source = energy["energy_source"].to_numpy(dtype=object)
    on_counter = np.bincount(codes[source == SOURCE_COUNTER], minlength=n_gpus) > 0
    on_power = ~on_counter & (np.bincount(codes[source == SOURCE_POWER], minlength=n_gpus) > 0)
    return {
        SOURCE_COUNTER: int(on_counter.sum()),
        SOURCE_POWER: int(on_power.sum()),
        "unknown": int(n_gpus - on_counter.sum() - on_power.sum()),
    }


# ----------------------------------------------------------------------------------------------------
# Attribution to the pods holding the GPU


def attribute_energy(
    energy: pd.DataFrame, holders: pd.DataFrame, *, gpus: pd.DataFrame | None = None
) -> pd.DataFrame:
    """ATTRIBUTED_ENERGY: each GPU-sample's energy split among the pods holding the GPU, by GE share.

    energy: GPU_ENERGY, one row per (uuid, timestamp). holders: ATTRIBUTED (ge_share = the GE the pod
    holds of the unit: a MIG instance slices/7, a time-slice replica 1/replicas; a pod holding two
    units of one GPU may come as two rows or one summed row). gpus (optional): uuid, node, pool of
    the fleet's GPUs (e.g. the node inventory), to place the unheld energy of GPUs no pod held.

    Per GPU-sample (uuid, timestamp) in either frame, with E its energy (NaN where `energy` lacks it):
    - a pod's row: energy_joules = E × its summed ge_share on the GPU (instances and replicas added
      up); when the pods' shares add up to more than 1 GE (or to 1 up to float noise) they are scaled
      down pro rata to sum to exactly 1;
    - one unheld row (namespace, pod, team ""): E × (1 − Σ shares), the GPU's idle energy — the whole
      GPU when nobody holds it; none when the GPU is fully held. Its node and pool are the `gpus`
      table's, else those of the GPU's first row in `holders` (any sample), else "".
    So the rows of a GPU-sample sum to E (within float rounding): energy is conserved per GPU, like
    the ledger's GE-hours. Unknown E stays NaN in every share, never 0. A NaN or negative ge_share
    holds nothing. Holders whose unit is unknown (uuid "": a running pod DCGM never named) keep a row
    with NaN energy and take part in no GPU's split.

    Columns: timestamp, namespace, pod, team, node, pool, uuid (categoricals), ge_share (the share
    of the GPU the row's energy is for), energy_joules. Sorted by timestamp, uuid; within a GPU-sample
    its pods in input order, then the unheld row. The pod's team/node/pool are its first row's.
    """
    GPU_ENERGY.check(energy)
    ATTRIBUTED.check(holders)
    e_uuid, h_uuid, uuid_table = _shared_codes(energy["uuid"], holders["uuid"])
    n_uuid = len(uuid_table)
    e_ticks = _ns(energy["timestamp"])
    h_ticks = _ns(holders["timestamp"])
    times, e_time, h_time = _time_codes(e_ticks, h_ticks)
    e_gs, h_gs, gs_key = _gpu_samples(e_time * n_uuid + e_uuid, h_time * n_uuid + h_uuid, len(times) * n_uuid)
    n_gs = len(gs_key)
    gs_uuid = gs_key % n_uuid
    gs_time = gs_key // n_uuid
    if len(e_gs) and np.bincount(e_gs, minlength=n_gs).max() > 1:
        raise DataError("energy: more than one row per (uuid, timestamp); use counter_increase_joules()")
    unit_known = np.asarray(uuid_table, dtype=object) != ""
    gpu_energy = np.full(n_gs, np.nan)
    gpu_energy[e_gs] = energy["energy_joules"].to_numpy(dtype=np.float64)
    gpu_energy[~unit_known[gs_uuid]] = np.nan

    # A pod on a GPU-sample: its rows (replicas, instances) become one, shares summed.
    group, first = _pods_on_gpu_samples(holders, h_gs, n_gs)
    n_groups = len(first)
    share = np.nan_to_num(np.maximum(holders["ge_share"].to_numpy(dtype=np.float64), 0.0), nan=0.0)
    held = np.bincount(group, weights=share, minlength=n_groups)
    held_gs = h_gs[first]
    total = np.bincount(held_gs, weights=held, minlength=n_gs)
    full = unit_known[gs_uuid] & (total > 1.0 - EPSILON_GE)
    scale = np.divide(1.0, total, out=np.ones(n_gs), where=full)
    remainder = np.where(unit_known[gs_uuid] & ~full, 1.0 - total, 0.0)
    idle_gs = np.flatnonzero(remainder > EPSILON_GE)

    held_share = held * scale[held_gs]
    idle_share = remainder[idle_gs]
    row_gs = np.concatenate([held_gs, idle_gs])
    order = np.argsort(row_gs, kind="stable")
    columns: dict[str, Any] = {
        "timestamp": _to_time(times[gs_time[row_gs[order]]], holders["timestamp"]),
    }
    n_idle = len(idle_gs)
    for name in ("namespace", "pod", "team"):
        codes, table = _string_codes(holders[name])
        blank = np.full(n_idle, len(table) - 1, dtype=np.int64)  # the table ends with ""
        columns[name] = categorical_strings(table, np.concatenate([codes[first], blank])[order])
    for name in ("node", "pool"):
        codes, table = _string_codes(holders[name])
        of_gpu, table = _gpu_places(name, codes, h_uuid, table, n_uuid, uuid_table, gpus)
        idle_codes = of_gpu[gs_uuid[idle_gs]]
        columns[name] = categorical_strings(table, np.concatenate([codes[first], idle_codes])[order])
    columns["uuid"] = categorical_strings(uuid_table, gs_uuid[row_gs[order]])
    columns["ge_share"] = np.concatenate([held_share, idle_share])[order]
    columns["energy_joules"] = gpu_energy[row_gs[order]] * columns["ge_share"]
    return ATTRIBUTED_ENERGY.check(pd.DataFrame(columns, copy=False))


# ----------------------------------------------------------------------------------------------------
# Roll-ups and dollars


def energy_by(attributed_energy: pd.DataFrame, keys: Sequence[str]) -> pd.DataFrame:
    """Energy per group: the keys, energy_kwh, energy_unknown_samples (and energy_cost_usd if present).

    attributed_energy: attribute_energy()'s rows (any frame with energy_joules and the keys); keys any
    of its columns, () = the whole fleet (one row). energy_kwh = Σ energy_joules / 3.6e6 over the
    group's rows whose energy is known; NaN when none is (unknown is never 0).
    energy_unknown_samples counts the group's rows with unknown energy (a pod-GPU-sample or an unheld
    GPU-sample each), so a partial sum is visible as such. An energy_cost_usd column (from
    energy_cost_usd()) is summed the same way. Sorted by the keys.
    """
    codes, groups = group_codes(attributed_energy, keys)
    n_groups = len(groups)
    joules = attributed_energy["energy_joules"].to_numpy(dtype=np.float64)
    known = ~np.isnan(joules)
    out = groups.assign(
        energy_kwh=_known_sum(codes, joules, n_groups) / JOULES_PER_KWH,
        energy_unknown_samples=np.bincount(codes, weights=~known, minlength=n_groups).astype(np.int64),
    )
    if "energy_cost_usd" in attributed_energy.columns:
        usd = attributed_energy["energy_cost_usd"].to_numpy(dtype=np.float64)
        out["energy_cost_usd"] = _known_sum(codes, usd, n_groups)
    return out.sort_values(list(keys), ignore_index=True) if keys else out


def energy_cost_usd(
    attributed_energy: pd.DataFrame,
    *,
    tariff_starts_seconds: ArrayLike,
    tariff_usd_per_kwh: ArrayLike,
    pue: float,
) -> pd.DataFrame:
    """The frame (same rows and index) plus energy_cost_usd = energy_joules / 3.6e6 × PUE × tariff.

    The tariff is the one in force at each row's timestamp (tariff_at): the price of a dated tariff
    that changes mid-window follows each sample. PUE (facility power / IT power, ≥ 1) charges the
    data centre's overhead to the GPUs' own energy (SPEC §3). Unknown energy, or a time before the
    tariff's first start, costs NaN.
    """
    if not np.isfinite(pue) or pue < 1.0:
        raise DataError(f"PUE must be a finite number >= 1, got {pue!r}")
    seconds = _ns(attributed_energy["timestamp"]) / 1e9
    usd_per_kwh = tariff_at(tariff_starts_seconds, tariff_usd_per_kwh, seconds)
    joules = attributed_energy["energy_joules"].to_numpy(dtype=np.float64)
    return attributed_energy.assign(energy_cost_usd=joules / JOULES_PER_KWH * pue * usd_per_kwh)


def tariff_at(starts_seconds: ArrayLike, usd_per_kwh: ArrayLike, seconds: ArrayLike) -> Floats:
    """The tariff in force at each of `seconds` (epoch seconds): the price of the latest start ≤ it.

    starts_seconds: strictly increasing epoch seconds (−inf: since always), each price in force from
    its start until the next start (like model.PriceBook.prices_at). NaN before the first start.
    """
    starts = np.asarray(starts_seconds, dtype=np.float64)
    prices = np.asarray(usd_per_kwh, dtype=np.float64)
    at = np.asarray(seconds, dtype=np.float64)
    if starts.ndim != 1 or starts.shape != prices.shape or not len(starts):
        raise DataError("tariff: one price per start, at least one")
    if np.isnan(starts).any() or not (np.diff(starts) > 0).all():
        raise DataError("tariff: starts must be strictly increasing")
    return in_force(starts, prices, at, before=np.nan)


# ----------------------------------------------------------------------------------------------------
# Vectorized building blocks


def _valid(values: Floats) -> Floats:
    """Non-finite and negative readings are garbage: unknown (SPEC §7)."""
    return np.where(np.isfinite(values) & (values >= 0.0), values, np.nan)


def _known_sum(codes: Int64s, values: Floats, n_groups: int) -> Floats:
    known = ~np.isnan(values)
    sums = np.bincount(codes, weights=np.where(known, values, 0.0), minlength=n_groups)
    return np.where(np.bincount(codes, weights=known, minlength=n_groups) > 0, sums, np.nan)


def _unit_time_order(codes: Int64s, ticks: Int64s) -> Int64s:
    """Rows sorted by GPU, then time; a stable radix sort by GPU when the rows come in time order (a
    range query's answer), a full lexsort only when they do not."""
    if not len(codes):
        return np.zeros(0, dtype=np.int64)
    small = np.uint16 if int(codes.max()) < 2**16 else np.uint32 if int(codes.max()) < 2**32 else np.int64
    order = np.argsort(codes.astype(small), kind="stable")
    c, t = codes[order], ticks[order]
    if np.any((c[1:] == c[:-1]) & (t[1:] < t[:-1])):
        order = np.lexsort((ticks, codes))
    return np.asarray(order, dtype=np.int64)


def _one_fact(
    codes: Int64s, ticks: Int64s, counter: Floats, power: Floats
) -> tuple[Int64s, Int64s, Floats, Floats]:
    """Rows sorted by (GPU, time) with copies of a (GPU, time) merged: max known counter, mean known power."""
    n = len(codes)
    if n < 2:
        return codes, ticks, counter, power
    repeat = (codes[1:] == codes[:-1]) & (ticks[1:] == ticks[:-1])
    if not repeat.any():
        return codes, ticks, counter, power
    starts = np.flatnonzero(np.concatenate([[True], ~repeat]))
    known = ~np.isnan(power)
    n_known = np.add.reduceat(known.astype(np.float64), starts)
    summed = np.add.reduceat(np.where(known, power, 0.0), starts)
    mean = np.divide(summed, n_known, out=np.full(len(starts), np.nan), where=n_known > 0)
    return codes[starts], ticks[starts], np.fmax.reduceat(counter, starts), mean  # fmax skips NaN


def _string_codes(values: "pd.Series[Any]") -> tuple[Int64s, list[str]]:
    """Each row's code into a table of the column's distinct values as str, which ends with "" (the
    code of a missing value). Categoricals are read from their codes, not their strings."""
    if isinstance(values.dtype, pd.CategoricalDtype):
        raw = values.cat.codes.to_numpy().astype(np.int64)
        table = [str(v) for v in values.cat.categories]
    else:
        raw_codes, uniques = pd.factorize(values)
        raw = np.asarray(raw_codes, dtype=np.int64)
        table = [str(v) for v in uniques]
    return np.where(raw < 0, len(table), raw), [*table, ""]


def _shared_codes(a: "pd.Series[Any]", b: "pd.Series[Any]") -> tuple[Int64s, Int64s, list[str]]:
    """Codes of two string columns into one sorted table of their distinct values."""
    a_codes, a_table = _string_codes(a)
    b_codes, b_table = _string_codes(b)
    table = pd.Index(sorted(set(a_table) | set(b_table)), dtype=object)
    a_at = np.asarray(table.get_indexer(pd.Index(a_table, dtype=object)), dtype=np.int64)
    b_at = np.asarray(table.get_indexer(pd.Index(b_table, dtype=object)), dtype=np.int64)
    return a_at[a_codes], b_at[b_codes], [str(v) for v in table]


def _ns(times: "pd.Series[Any]") -> Int64s:
    return np.asarray(pd.DatetimeIndex(times).as_unit("ns").asi8, dtype=np.int64)


def _time_codes(a: Int64s, b: Int64s) -> tuple[Int64s, Int64s, Int64s]:
    """The sorted distinct ticks of a and b, and each one's position in them."""
    codes, uniques = pd.factorize(np.concatenate([a, b]))
    times = np.asarray(uniques, dtype=np.int64)
    order = np.argsort(times)
    rank = np.empty(len(times), dtype=np.int64)
    rank[order] = np.arange(len(times), dtype=np.int64)
    ranked = rank[np.asarray(codes, dtype=np.int64)]
    return times[order], ranked[: len(a)], ranked[len(a) :]


def _gpu_samples(a: Int64s, b: Int64s, cells: int) -> tuple[Int64s, Int64s, Int64s]:
    """Dense ids, in key order, of the (time × uuid) keys of a and b; and the distinct keys."""
    keys = np.concatenate([a, b])
    if cells <= 4 * len(keys) + 1024:  # a dense table: no hashing of every row
        present = np.zeros(cells, dtype=np.bool_)
        present[keys] = True
        ids = (np.cumsum(present) - 1)[keys]
        distinct = np.flatnonzero(present).astype(np.int64)
    else:
        codes, uniques = pd.factorize(keys)
        values = np.asarray(uniques, dtype=np.int64)
        order = np.argsort(values)
        rank = np.empty(len(values), dtype=np.int64)
        rank[order] = np.arange(len(values), dtype=np.int64)
        ids = rank[np.asarray(codes, dtype=np.int64)]
        distinct = values[order]
    return ids[: len(a)], ids[len(a) :], distinct


def _pods_on_gpu_samples(holders: pd.DataFrame, h_gs: Int64s, n_gs: int) -> tuple[Int64s, Int64s]:
    """Per holder row, the id of its (GPU-sample, namespace, pod) group, and each group's first row;
    groups numbered in order of first appearance. Only GPU-samples with several holder rows (MIG,
    time-slicing) can hold a pod twice: the rest are their own groups, without hashing."""
    n = len(h_gs)
    rows = np.arange(n, dtype=np.int64)
    representative = rows.copy()
    shared = np.flatnonzero(np.bincount(h_gs, minlength=n_gs)[h_gs] > 1)
    if len(shared):
        pod_codes, pods = group_codes(holders.iloc[shared], ("namespace", "pod"))
        codes, _ = pd.factorize(h_gs[shared] * max(len(pods), 1) + pod_codes)
        codes = np.asarray(codes, dtype=np.int64)
        representative[shared] = shared[_first_rows(codes)][codes]
    is_first = representative == rows
    return (np.cumsum(is_first) - 1)[representative], np.flatnonzero(is_first)


def _first_rows(codes: Int64s) -> Int64s:
    """Row of each code's first appearance (codes numbered in order of first appearance)."""
    if not len(codes):
        return np.zeros(0, dtype=np.int64)
    is_first = np.ones(len(codes), dtype=np.bool_)
    is_first[1:] = codes[1:] > np.maximum.accumulate(codes)[:-1]
    return np.flatnonzero(is_first)


def _gpu_places(
    name: str,
    codes: Int64s,
    h_uuid: Int64s,
    table: list[str],
    n_uuid: int,
    uuid_table: list[str],
    gpus: pd.DataFrame | None,
) -> tuple[Int64s, list[str]]:
    """Per uuid (shared table), the code of its node or pool — from `gpus`, else the GPU's first holder
    row — in `table` extended with the `gpus` values; "" where neither knows it."""
    of_gpu = np.full(n_uuid, len(table) - 1, dtype=np.int64)  # the table ends with ""
    first = np.full(n_uuid, len(h_uuid), dtype=np.int64)
    np.minimum.at(first, h_uuid, np.arange(len(h_uuid), dtype=np.int64))
    held = first < len(h_uuid)
    of_gpu[held] = codes[first[held]]
    if gpus is None or not len(gpus):
        return of_gpu, table
    at = np.asarray(
        pd.Index(uuid_table, dtype=object).get_indexer(pd.Index(gpus["uuid"].astype(str))), dtype=np.int64
    )
    values = gpus[name].astype(str).to_numpy(dtype=object)
    known = (at >= 0) & (values != "")
    of_gpu[at[known]] = len(table) + np.flatnonzero(known)
    return of_gpu, [*table, *(str(v) for v in values)]


def _to_time(ticks: Int64s, like: "pd.Series[Any]") -> "pd.Series[Any]":
    """A UTC time column in the unit of `like` (a "time" column) from integer nanoseconds."""
    dtype = like.dtype
    assert isinstance(dtype, pd.DatetimeTZDtype)  # the contracts' "time" kind
    # Ticks are UTC already: reading them as UTC wall times is a relabel, not a conversion.
    times = pd.DatetimeIndex(ticks.view("datetime64[ns]"), dtype=pd.DatetimeTZDtype("ns", tz="UTC"))
    return pd.Series(times.as_unit(dtype.unit))


# ----------------------------------------------------------------------------------------------------
# A window's energy, from the DCGM samples the raw path reads


def window_energy(
    gpu_samples: pd.DataFrame,
    holders: pd.DataFrame,
    *,
    step_seconds: float,
    tariff: EnergyTariff | None,
    gpus: pd.DataFrame | None = None,
) -> tuple[pd.DataFrame, dict[str, int]]:
    """The window's energy per pod, GPU and sample (attribute_energy's rows) with energy_cost_usd (NaN
    without a tariff: measured, not priced), and energy_sources() for coverage.

    gpu_samples: DCGM samples with energy_joules and/or power_watts (a missing column is unknown);
    holders: ATTRIBUTED (mark_idle's frame); gpus: uuid, node, pool of the fleet's GPUs.
    """
    frame = gpu_samples[["timestamp", "uuid"]].assign(
        **{c: gpu_samples.get(c, np.nan) for c in ("energy_joules", "power_watts")}
    )
    energy = counter_increase_joules(frame, step_seconds=step_seconds)
    attributed = attribute_energy(energy, holders, gpus=gpus)
    if tariff is None:
        attributed = attributed.assign(energy_cost_usd=np.nan)
    else:
        starts, prices = tariff.schedule()
        attributed = energy_cost_usd(
            attributed, tariff_starts_seconds=starts, tariff_usd_per_kwh=prices, pue=tariff.pue
        )
    return attributed, energy_sources(energy)
