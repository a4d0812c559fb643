"""DCGM samples to GPU rows: labels resolved once per series, values in base units, copies averaged, MIG
parents dropped, one row per timestamp, GPU unit and workload (SPEC §2)."""

import itertools
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import numpy as np
import numpy.typing as npt
import pandas as pd

from gpuwatch.core.schema import GPU_SAMPLES, categorical_strings
from gpuwatch.sources.dcgm import (
    DEV_GPU_UTIL,
    FIELD_BY_NAME,
    FIELDS,
    GPU_INDEX_LABELS,
    GPU_INSTANCE_LABEL,
    GPU_PROFILE_LABEL,
    MODEL_LABELS,
    NO_EXPORTERS,
    PROF_GR_ENGINE_ACTIVE,
    ExporterPods,
    _first,
    field_of,
    resolve_node,
    resolve_uuid,
    resolve_workload,
)

FloatArray = npt.NDArray[np.float64]


UNIT_KEY: Final = ("node", "uuid", "gpu_instance_id")
WORKLOAD_COLUMNS: Final = ("namespace", "pod", "container")
ROW_KEY: Final = ("timestamp", *UNIT_KEY, *WORKLOAD_COLUMNS)
ID_COLUMNS: Final = ("mig_profile", "gpu_index", "product")

Sample = tuple[Mapping[str, str], float | str]
Problem = Callable[[str], None]


def samples_frame(samples: Iterable[Sample], *, timestamp: pd.Timestamp | None = None) -> pd.DataFrame:
    """(labels, value) samples (labels include __name__) as a long frame: one column per label."""
    rows = [{**labels, "value": value} for labels, value in samples]
    frame = pd.DataFrame(rows)
    if frame.empty:
        frame = pd.DataFrame({"value": pd.Series(dtype="float64")})
    frame["timestamp"] = pd.Timestamp(0, tz="UTC") if timestamp is None else timestamp
    return frame


def to_float(values: "pd.Series[Any] | Sequence[object] | np.ndarray[Any, Any]") -> FloatArray:
    """Sample values as floats: NaN, +Inf, -Inf and anything unparsable become NaN (unknown), never 0."""
    try:
        numbers = np.array(values, dtype=np.float64)
    except (TypeError, ValueError):
        each = np.asarray(values, dtype=object).ravel()
        numbers = np.array([_float_or_nan(v) for v in each], dtype=np.float64)
    numbers[~np.isfinite(numbers)] = np.nan
    return numbers


def _float_or_nan(value: object) -> float:
    try:
        return float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return math.nan


def gpu_rows(
    samples: pd.DataFrame | Iterable[Sample],
    *,
    exporters: ExporterPods = NO_EXPORTERS,
    on_problem: Problem | None = None,
) -> pd.DataFrame:
    """DCGM samples -> one row per (timestamp, unit, workload) in base units (GPU_SAMPLES + extras).

    Input is a long frame (columns: timestamp, value, and one per label; `__name__` for raw exporter
    series) or (labels, value) pairs.
    Rules (SPEC §2): identity UUID|uuid (+ GPU_I_ID for a MIG instance); node from Hostname|hostname or,
    when that is the exporter pod, the scrape target; workload exported_* > pod/namespace/container (not the
    exporter's own) > pod_name/...; copies of one unit and workload (`vgpu`, duplicate scrapes) are averaged,
    never summed; a MIG parent row is dropped where instance rows of its GPU exist; utilization comes per
    unit from DCGM_FI_PROF_GR_ENGINE_ACTIVE when the unit reports it at all, else DCGM_FI_DEV_GPU_UTIL/100.

    Columns: timestamp, node, uuid, gpu_instance_id, mig_profile, gpu_index, product, namespace, pod,
    container, util_ratio, util_source, then one base-unit column per other field present (fb_used_bytes,
    power_watts, ...). A unit held by several pods (time-slicing) has one row per pod carrying the same
    unit-level values: use `unit_rows` for per-GPU numbers.
    """
    frame = samples if isinstance(samples, pd.DataFrame) else samples_frame(samples)
    if frame.empty:
        return _empty_rows()
    labels = [c for c in frame.columns if c not in ("timestamp", "value")]
    text = frame[labels].astype(object).where(frame[labels].notna(), "").astype(str)
    codes = text.groupby(labels, sort=False).ngroup().to_numpy()
    distinct = text.drop_duplicates().to_dict("records")
    return series_rows(
        [{str(k): v for k, v in d.items()} for d in distinct],
        codes,
        pd.to_datetime(frame["timestamp"], utc=True).to_numpy(),
        frame["value"].to_numpy(),
        exporters=exporters,
        on_problem=on_problem,
    )


def series_rows(
    series: Sequence[Mapping[str, str]],
    series_index: "np.ndarray[Any, Any]",
    timestamps: "np.ndarray[Any, Any] | pd.DatetimeIndex",
    values: "np.ndarray[Any, Any] | Sequence[object]",
    *,
    exporters: ExporterPods = NO_EXPORTERS,
    on_problem: Problem | None = None,
) -> pd.DataFrame:
    """`gpu_rows` on a series table: point k is (series[series_index[k]], timestamps[k], values[k]).

    Labels are resolved once per series, not per point (a month of per-GPU points is millions of rows):
    points carry integer codes of their series' unit, workload, field and split, and every step below
    (MIG parents, copies, split parts, the pivot, the sort, the source choice) works on those codes.
    `timestamps` is best a DatetimeIndex (an object array of Timestamps is converted point by point).
    """
    block = row_block(series, series_index, timestamps, values, exporters=exporters)
    return combine_row_blocks([block], on_problem=on_problem)


_ORDER: Final = ("timestamp", *UNIT_KEY, *ID_COLUMNS, *WORKLOAD_COLUMNS, "util_ratio", "util_source")
IntArray = npt.NDArray[np.intp]
SeriesId = tuple[tuple[str, str], ...]  # a series' labels, sorted


def _empty_rows() -> pd.DataFrame:
    out = GPU_SAMPLES.empty()
    for column in (*ID_COLUMNS, *WORKLOAD_COLUMNS, "util_source"):
        out[column] = pd.Series(dtype="str")
    return out[list(_ORDER)]


@dataclass(frozen=True, slots=True, kw_only=True)
class RowBlock:
    """`series_rows` of one stretch of time, before each unit's utilization source is chosen.

    One row per (timestamp, unit, workload), sorted by timestamp then by the key's strings, with every
    field's value (NaN where the row has none), and the series skipped on the way. Blocks of disjoint
    stretches (range-query chunks) can be built apart, in worker threads as their answers arrive, and
    joined by `combine_row_blocks`.
    """

    times: "np.ndarray[Any, np.dtype[np.datetime64]]"  # UTC, sorted
    row_key: IntArray  # -> keys
    keys: tuple[tuple[str, ...], ...]  # UNIT_KEY + WORKLOAD_COLUMNS values
    key_ids: tuple[tuple[str, ...], ...]  # per key: its unit's ID_COLUMNS values
    values: dict[str, FloatArray]  # field name -> value per row
    unknown_names: frozenset[str]  # metrics gpuwatch does not read
    no_uuid: frozenset[SeriesId]  # skipped: no UUID label
    no_node: frozenset[SeriesId]  # kept, but naming no node


@dataclass(frozen=True, slots=True, kw_only=True)
class _SeriesTable:
    """Per input series: kept or not, unit conversion, and integer codes of what it resolved to."""

    keep: npt.NDArray[np.bool_]
    mul: FloatArray
    div: FloatArray
    unit: IntArray  # (node, uuid, gpu_instance_id) -> units[code]
    key: IntArray  # unit and workload: the row key without the timestamp -> keys[code]
    gpu: IntArray  # (node, uuid): a physical GPU, for MIG parents
    field: IntArray  # -> fields[code]
    split: IntArray  # -> splits[code]
    is_instance: npt.NDArray[np.bool_]  # has a GPU_I_ID
    ids: tuple[tuple[str, ...], ...]  # per series: its ID_COLUMNS values
    units: tuple[tuple[str, str, str], ...]
    keys: tuple[tuple[str, ...], ...]  # UNIT_KEY + WORKLOAD_COLUMNS values
    fields: tuple[str, ...]
    n_gpus: int
    n_splits: int
    unknown_names: frozenset[str]
    no_uuid: frozenset[SeriesId]
    no_node: frozenset[SeriesId]


@dataclass(frozen=True, slots=True, kw_only=True)
class _Points:
    """The kept points: their series, timestamp (and its rank among the distinct times), base value."""

    table: _SeriesTable
    series: IntArray
    times: pd.DatetimeIndex
    moment: IntArray
    values: FloatArray

    def take(self, mask: npt.NDArray[np.bool_]) -> "_Points":
        return _Points(
            table=self.table,
            series=self.series[mask],
            times=self.times[mask],
            moment=self.moment[mask],
            values=self.values[mask],
        )


def row_block(
    series: Sequence[Mapping[str, str]],
    series_index: "np.ndarray[Any, Any]",
    timestamps: "np.ndarray[Any, Any] | pd.DatetimeIndex",
    values: "np.ndarray[Any, Any] | Sequence[object]",
    *,
    exporters: ExporterPods = NO_EXPORTERS,
) -> RowBlock:
    """The rows of one stretch of time (see `series_rows` and `RowBlock`)."""
    index = np.asarray(series_index, dtype=np.intp)
    table = _series_table(series, exporters)
    row_ok = table.keep[index]
    times = _times(timestamps, row_ok)
    if times.hasnans:  # a sample without a time is unusable (groupby dropped it before, silently too)
        missing = np.asarray(times.isna(), dtype=bool)
        row_ok[np.flatnonzero(row_ok)[missing]] = False
        times = times[~missing]
    sel = index[row_ok]
    codes, distinct = pd.factorize(times.asi8)
    in_time_order = np.empty(len(distinct), dtype=np.intp)
    in_time_order[np.argsort(distinct)] = np.arange(len(distinct))
    points = _Points(
        table=table,
        series=sel,
        times=times,
        moment=in_time_order[codes],
        values=_values(values, row_ok) * table.mul[sel] / table.div[sel],
    )
    if not points.series.size:
        return RowBlock(
            times=np.zeros(0, dtype="datetime64[ns]"),
            row_key=np.zeros(0, dtype=np.intp),
            keys=(),
            key_ids=(),
            values={},
            unknown_names=table.unknown_names,
            no_uuid=table.no_uuid,
            no_node=table.no_node,
        )
    return _sorted_block(_pivot(_drop_mig_parents(points)))


def _series_table(series: Sequence[Mapping[str, str]], exporters: ExporterPods) -> _SeriesTable:
    """Resolve every series once, noting those skipped."""
    resolved = [_resolve_series(labels, exporters) for labels in series]

    def ids(found: Iterable[Mapping[str, str]]) -> frozenset[SeriesId]:
        return frozenset(tuple(sorted(labels.items())) for labels in found)

    pairs = list(zip(series, resolved, strict=True))
    codes: dict[str, dict[Any, int]] = {name: {} for name in ("unit", "key", "gpu", "field", "split")}
    columns: dict[str, list[int]] = {name: [] for name in codes}
    blank = dict.fromkeys(_SERIES_COLUMNS, "")
    per_series_ids = []
    for r in resolved:
        c = r[0] if r is not None else blank
        unit = (c["node"], c["uuid"], c["gpu_instance_id"])
        for name, value in (
            ("unit", unit),
            ("key", (*unit, c["namespace"], c["pod"], c["container"])),
            ("gpu", unit[:2]),
            ("field", c["field"]),
            ("split", c["split"]),
        ):
            columns[name].append(codes[name].setdefault(value, len(codes[name])))
        per_series_ids.append(tuple(c[k] for k in ID_COLUMNS))
    arrays = {name: np.array(column, dtype=np.intp) for name, column in columns.items()}
    return _SeriesTable(
        keep=np.array([r is not None and bool(r[0]["uuid"]) for r in resolved], dtype=bool),
        mul=np.array([r[1] if r is not None else math.nan for r in resolved], dtype=np.float64),
        div=np.array([r[2] if r is not None else math.nan for r in resolved], dtype=np.float64),
        unit=arrays["unit"],
        key=arrays["key"],
        gpu=arrays["gpu"],
        field=arrays["field"],
        split=arrays["split"],
        is_instance=np.array([r is not None and r[0]["gpu_instance_id"] != "" for r in resolved], dtype=bool),
        ids=tuple(per_series_ids),
        units=tuple(codes["unit"]),
        keys=tuple(codes["key"]),
        fields=tuple(codes["field"]),
        n_gpus=len(codes["gpu"]),
        n_splits=len(codes["split"]),
        unknown_names=frozenset(labels.get("__name__") or "(no name)" for labels, r in pairs if r is None),
        no_uuid=ids(labels for labels, r in pairs if r is not None and not r[0]["uuid"]),
        no_node=ids(labels for labels, r in pairs if r is not None and r[0]["uuid"] and not r[0]["node"]),
    )


def _times(
    timestamps: "np.ndarray[Any, Any] | pd.DatetimeIndex", row_ok: npt.NDArray[np.bool_]
) -> pd.DatetimeIndex:
    if isinstance(timestamps, pd.DatetimeIndex) and timestamps.tz is not None:
        return timestamps[row_ok].tz_convert("UTC")
    return pd.DatetimeIndex(pd.to_datetime(np.asarray(timestamps)[row_ok], utc=True))


def _values(values: "np.ndarray[Any, Any] | Sequence[object]", row_ok: npt.NDArray[np.bool_]) -> FloatArray:
    if isinstance(values, np.ndarray) and values.dtype.kind == "f":
        return to_float(values[row_ok])
    return to_float(np.asarray(values, dtype=object)[row_ok])


def _group(*parts: tuple[IntArray, int]) -> tuple[IntArray, int]:
    """Dense group codes of the rows' (code, code, ...) tuples, numbered in order of first appearance."""
    combined = np.zeros(len(parts[0][0]), dtype=np.int64)
    size = 1
    for codes, n in parts:
        if size * max(n, 1) >= 2**62:
            combined, uniques = pd.factorize(combined)
            size = len(uniques)
        combined = combined * max(n, 1) + codes
        size *= max(n, 1)
    dense, uniques = pd.factorize(combined)
    return dense.astype(np.intp), len(uniques)


def _first_rows(groups: IntArray, n: int) -> IntArray:
    """The first row of each group 0..n-1 (groups numbered in order of first appearance)."""
    # Numbered in order of first appearance: a group's first row is where the running maximum grows.
    new = np.ones(len(groups), dtype=bool)
    running = np.maximum.accumulate(groups)
    new[1:] = running[1:] > running[:-1]
    first = np.flatnonzero(new)
    if len(first) != n:
        raise AssertionError("group codes are not numbered in order of first appearance")
    return first


def _drop_mig_parents(points: _Points) -> _Points:
    """Drop whole-GPU points (no GPU_I_ID) of a GPU whose MIG instances report at the same time.

    Under MIG the exporter can serve the parent GPU next to its instances; the parent's utilization
    aggregates the instances', so keeping both would count the GPU twice.
    """
    t = points.table
    reporting = np.bincount(points.series, minlength=len(t.keep)) > 0
    parents, instances = t.gpu[reporting & ~t.is_instance], t.gpu[reporting & t.is_instance]
    if not np.isin(parents, instances).any():  # per series first: no GPU reports both
        return points
    instance = t.is_instance[points.series]
    at = points.moment.astype(np.int64) * t.n_gpus + t.gpu[points.series]
    parent = ~instance & np.isin(at, np.unique(at[instance]))
    return points.take(~parent) if parent.any() else points


@dataclass(frozen=True, slots=True, kw_only=True)
class _Wide:
    """One row per (timestamp, unit, workload): a representative point, the key, one value per field."""

    points: _Points
    row_point: IntArray  # a point of each row (for its timestamp)
    row_key: IntArray
    values: dict[str, FloatArray]  # field name -> value per row
    ids: dict[str, list[str]]  # ID column -> value per unit


def _one_row_per_point(points: _Points) -> bool:
    """No two points share a (timestamp, key): each key is reported by one series only, and a series
    never repeats a timestamp (its points may come in several runs, e.g. one per range-query chunk)."""
    t = points.table
    reporting = np.flatnonzero(np.bincount(points.series, minlength=len(t.keep)))
    if len(np.unique(t.key[reporting])) != len(reporting):
        return False
    series, stamps = points.series, points.times.asi8
    same = series[1:] == series[:-1]
    if not (stamps[1:][same] > stamps[:-1][same]).all():
        return False
    starts = np.flatnonzero(np.r_[True, ~same])
    ends = np.r_[starts[1:], len(series)] - 1
    order = np.argsort(series[starts], kind="stable")  # a series' runs in point order
    run_series, first, last = series[starts][order], stamps[starts][order], stamps[ends][order]
    again = run_series[1:] == run_series[:-1]
    return bool((first[1:][again] > last[:-1][again]).all())


def _pivot(points: _Points) -> _Wide:
    """Average copies (vgpu, duplicate scrapes) per key, sum `split` parts, one column per field."""
    t = points.table
    moment = points.moment
    n_moments = int(moment.max()) + 1
    key, field, split = t.key[points.series], t.field[points.series], t.split[points.series]
    n_keys, n_fields = len(t.keys), len(t.fields)
    if _one_row_per_point(points):  # the usual answer of one range query per alias: nothing to group
        every = np.arange(len(key), dtype=np.intp)
        wide = {t.fields[code]: np.where(field == code, points.values, np.nan) for code in np.unique(field)}
        return _Wide(
            points=points,
            row_point=every,
            row_key=key,
            values=wide,
            ids=_unit_ids(points),
        )
    # pandas' groupby sums (compensated) in row order, as the frame-based version did: same floats.
    copy, n_copies = _group((moment, n_moments), (key, n_keys), (field, n_fields), (split, t.n_splits))
    first = _first_rows(copy, n_copies)
    if n_copies == len(copy):
        value = points.values
    else:
        value = np.asarray(pd.Series(points.values).groupby(copy, sort=True).mean(), dtype=np.float64)
    if t.n_splits > 1:  # else every (timestamp, key, field) has a single part
        part, n_parts = _group((moment[first], n_moments), (key[first], n_keys), (field[first], n_fields))
        if n_parts != len(part):
            value = np.asarray(pd.Series(value).groupby(part, sort=True).sum(min_count=1), dtype=np.float64)
            first = first[_first_rows(part, n_parts)]
    row, n_rows = _group((moment[first], n_moments), (key[first], n_keys))
    row_first = first[_first_rows(row, n_rows)]
    values = {}
    entry_field = field[first]
    for code in np.unique(entry_field):
        column = np.full(n_rows, np.nan)
        mine = entry_field == code
        column[row[mine]] = value[mine]
        values[t.fields[code]] = column
    return _Wide(
        points=points,
        row_point=row_first,
        row_key=key[row_first],
        values=values,
        ids=_unit_ids(points),
    )


def _unit_ids(points: _Points) -> dict[str, list[str]]:
    """Identity columns are constant per unit; a label present on some series only (modelName) must not
    split rows, so take each unit's first non-empty value (in point order)."""
    t = points.table
    present, first_point = np.unique(points.series, return_index=True)
    out = {column: [""] * len(t.units) for column in ID_COLUMNS}
    done: dict[str, set[int]] = {column: set() for column in ID_COLUMNS}
    for s in present[np.argsort(first_point, kind="stable")].tolist():
        unit = int(t.unit[s])
        for column, value in zip(ID_COLUMNS, t.ids[s], strict=True):
            if value and unit not in done[column]:
                out[column][unit] = value
                done[column].add(unit)
    return out


def _sorted_block(wide: _Wide) -> RowBlock:
    """The pivoted rows sorted by ROW_KEY: the timestamp, then the key's strings (ranked once per key)."""
    t = wide.points.table
    rank = np.empty(len(t.keys), dtype=np.int64)
    rank[sorted(range(len(t.keys)), key=t.keys.__getitem__)] = np.arange(len(t.keys))
    moment = wide.points.moment[wide.row_point].astype(np.int64)
    order = np.argsort(moment * len(t.keys) + rank[wide.row_key], kind="stable")
    unit_of: dict[tuple[str, ...], int] = {unit: code for code, unit in enumerate(t.units)}
    return RowBlock(
        times=wide.points.times.tz_convert(None).to_numpy()[wide.row_point[order]],
        row_key=wide.row_key[order],
        keys=t.keys,
        key_ids=tuple(tuple(wide.ids[c][unit_of[key[:3]]] for c in ID_COLUMNS) for key in t.keys),
        values={name: column[order] for name, column in wide.values.items()},
        unknown_names=t.unknown_names,
        no_uuid=t.no_uuid,
        no_node=t.no_node,
    )


def combine_row_blocks(blocks: Sequence[RowBlock], *, on_problem: Problem | None = None) -> pd.DataFrame:
    """Blocks of disjoint stretches of time, in time order -> the `gpu_rows` frame.

    util_ratio per unit: PROF when the unit reports it in any block, else GPU_UTIL (SPEC §2). A unit's
    ID columns are the first non-empty values, block by block. Skipped series are reported once each.
    """
    problem = on_problem or (lambda _message: None)
    unknown = sorted(frozenset[str]().union(*(b.unknown_names for b in blocks)))
    if unknown:
        problem(f"ignored series gpuwatch does not read: {', '.join(unknown)}")
    no_uuid = len(frozenset[SeriesId]().union(*(b.no_uuid for b in blocks)))
    if no_uuid:
        problem(f"{no_uuid} DCGM series without a UUID label were skipped")
    no_node = len(frozenset[SeriesId]().union(*(b.no_node for b in blocks)))
    if no_node:
        problem(f"{no_node} DCGM series name no node (an exporter pod gpuwatch cannot place)")
    filled = [b for b in blocks if b.times.size]
    if not filled:
        return _empty_rows()
    for before, after in itertools.pairwise(filled):
        if not after.times[0] > before.times[-1]:
            raise ValueError("row blocks must cover disjoint stretches of time, in time order")
    keys: dict[tuple[str, ...], int] = {}
    unit_ids: dict[tuple[str, ...], list[str]] = {}
    row_keys = []
    for block in filled:
        remap = np.array([keys.setdefault(key, len(keys)) for key in block.keys], dtype=np.intp)
        row_keys.append(remap[block.row_key])
        for key, ids in zip(block.keys, block.key_ids, strict=True):
            have = unit_ids.setdefault(key[:3], list(ids))
            if not all(have):
                have[:] = [old or new for old, new in zip(have, ids, strict=True)]
    names = list(dict.fromkeys(name for block in filled for name in block.values))
    values = {
        name: np.concatenate(
            [b.values[name] if name in b.values else np.full(len(b.times), np.nan) for b in filled]
        )
        for name in names
    }
    row_key = np.concatenate(row_keys)
    unit_code = {unit: code for code, unit in enumerate(unit_ids)}
    key_list = list(keys)
    unit = np.array([unit_code[key[:3]] for key in key_list], dtype=np.intp)[row_key]
    util, source, keep = _choose_util(values, unit, len(unit_code))
    if keep is not None:
        row_key = row_key[keep]
    times = np.concatenate([b.times for b in filled])
    columns: dict[str, Any] = {
        "timestamp": pd.Series(times if keep is None else times[keep], copy=False).dt.tz_localize("UTC")
    }
    tables = {name: [key[p] for key in key_list] for p, name in enumerate((*UNIT_KEY, *WORKLOAD_COLUMNS))}
    tables |= {name: [unit_ids[key[:3]][p] for key in key_list] for p, name in enumerate(ID_COLUMNS)}
    for name in (*UNIT_KEY, *ID_COLUMNS, *WORKLOAD_COLUMNS):
        columns[name] = categorical_strings(tables[name], row_key)
    columns["util_ratio"] = util
    columns["util_source"] = categorical_strings(["", PROF_GR_ENGINE_ACTIVE.name, DEV_GPU_UTIL.name], source)
    others = {FIELD_BY_NAME[f].column: v for f, v in values.items() if f not in _UTIL_NAMES}
    for name in sorted(others):
        columns[name] = others[name] if keep is None else others[name][keep]
    return pd.DataFrame(columns, copy=False)


_UTIL_NAMES: Final = (PROF_GR_ENGINE_ACTIVE.name, DEV_GPU_UTIL.name)


def _choose_util(
    values: Mapping[str, FloatArray], unit: IntArray, n_units: int
) -> tuple[FloatArray, "np.ndarray[Any, np.dtype[np.int8]]", IntArray | None]:
    """util_ratio and its source (0 none, 1 PROF, 2 GPU_UTIL) per kept row, and the rows kept (None: all).

    A unit on PROF has no row where only GPU_UTIL reported: that sample is unknown, not a mixed source.
    """
    prof, dev = (values[n] if n in values else np.full(len(unit), np.nan) for n in _UTIL_NAMES)
    prof_seen, dev_seen = ~np.isnan(prof), ~np.isnan(dev)
    has_prof = np.bincount(unit[prof_seen], minlength=n_units) > 0
    has_dev = np.bincount(unit[dev_seen], minlength=n_units) > 0
    on_prof = has_prof[unit]
    source = np.where(has_prof, 1, np.where(has_dev, 2, 0)).astype(np.int8)[unit]
    util = np.where(on_prof, prof, dev)  # NaN where the unit reports neither
    only_dev_rows = on_prof & dev_seen & ~prof_seen
    for name, column in values.items():
        if name not in _UTIL_NAMES:
            only_dev_rows &= np.isnan(column)
    if not only_dev_rows.any():
        return util, source, None
    keep = np.flatnonzero(~only_dev_rows)
    return util[keep], source[keep], keep


_SERIES_COLUMNS: Final = (*UNIT_KEY, *ID_COLUMNS, *WORKLOAD_COLUMNS, "field", "split")


def _resolve_series(
    labels: Mapping[str, str], exporters: ExporterPods
) -> tuple[dict[str, str], float, float] | None:
    """One series' labels -> (resolved columns, mul, div), or None for a metric outside the catalog."""
    found = field_of(labels.get("__name__", ""))
    if found is None:
        return None
    fld, alias = found
    mul, div = alias.mul, alias.div
    namespace, pod, container = resolve_workload(labels, exporters)
    return (
        {
            "node": resolve_node(labels, exporters),
            "uuid": resolve_uuid(labels),
            "gpu_instance_id": labels.get(GPU_INSTANCE_LABEL, ""),
            "mig_profile": labels.get(GPU_PROFILE_LABEL, ""),
            "gpu_index": _first(labels, GPU_INDEX_LABELS),
            "product": _first(labels, MODEL_LABELS),
            "namespace": namespace,
            "pod": pod,
            "container": container,
            "field": fld.name,
            "split": labels.get(fld.split_label, "") if fld.split_label else "",
        },
        mul,
        div,
    )


def unit_rows(rows: pd.DataFrame) -> pd.DataFrame:
    """One row per (timestamp, unit): workload columns dropped, the workload rows' values averaged.

    Use this (never a sum over `gpu_rows`) when a per-GPU quantity is wanted: a time-sliced GPU held by
    three pods has three rows carrying the same GPU-level values.
    """
    key = ["timestamp", *UNIT_KEY]
    values = [c for c in rows.columns if c not in (*key, *ID_COLUMNS, *WORKLOAD_COLUMNS, "util_source")]
    firsts = [*ID_COLUMNS, "util_source"]
    grouped = rows.groupby(key, sort=True)
    out = grouped[values].mean()
    out[firsts] = grouped[firsts].first()
    return out.reset_index()[[*key, *ID_COLUMNS, *values, "util_source"]]


def physical_gpus(rows: pd.DataFrame) -> pd.DataFrame:
    """One row per (timestamp, node, uuid) with the whole-GPU fields (power, temp, energy, XID...).

    The exporter repeats these on every MIG instance series; summing them over instances is wrong.
    """
    columns = [
        f.column for f in FIELDS if f.whole_gpu and f.column in rows.columns and f.column != "util_ratio"
    ]
    key = ["timestamp", "node", "uuid"]
    return rows.groupby(key, sort=True)[columns].mean().reset_index()
