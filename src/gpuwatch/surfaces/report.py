"""The report of SPEC §4.2, built from either read path's tables: one document whose renderings
(surfaces.renderings: table, json, csv, parquet, html) show the same numbers."""

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Any

import numpy as np
import pandas as pd

from gpuwatch.analytics.queuetables import QueueSetup, QueueTables, no_queues, queue_tables, workload_inputs
from gpuwatch.core.config import Settings
from gpuwatch.core.errors import ConfigError
from gpuwatch.core.model import ALLOCATED_STATES, LEDGER_STATES, Window, forecast_month_usd
from gpuwatch.read.analysis import Analysis, Coverage, analysis_queues, iso_z, usage_tables
from gpuwatch.read.historytables import History

Report = dict[str, Any]
GROUPS = {
    "team": "teams",
    "namespace": "namespaces",
    "workload": "workloads",
    "pool": "pools",
    "cluster": "clusters",
}
# 2: the allocated_unknown ledger state, unknown_gpu_hours per group, pool prices and health events
# (additions: every version-1 field keeps its name; allocated_active no longer counts unknown hours).
# 3: teams' budget_usd and forecast_month_usd, teams' and workloads' held and abandoned idle GPU-hours
# (additions: every version-2 field keeps its name).
SCHEMA_VERSION = 4
_EPSILON_HOURS = 1e-9  # float noise of a difference of GE-hour sums


def json_schema() -> dict[str, Any]:
    """The JSON Schema every `--format json` report validates against (shipped with the package)."""
    text = resources.files("gpuwatch").joinpath("report.schema.json").read_text(encoding="utf-8")
    schema: dict[str, Any] = json.loads(text)
    return schema


def group_rows(report: Report, group_by: str) -> list[dict[str, Any]]:
    """The report's rows for one grouping (team, namespace, workload or pool)."""
    if group_by not in GROUPS:
        raise ConfigError(f"--group-by must be one of {', '.join(GROUPS)}, got {group_by!r}")
    rows: list[dict[str, Any]] = report[GROUPS[group_by]]
    return [_flat(r) for r in rows] if group_by == "workload" else rows


def _flat(row: Mapping[str, Any]) -> dict[str, Any]:
    """A workload row with its recommendation as columns (for tables and showback files)."""
    out = {k: v for k, v in row.items() if k != "recommendation"}
    rec = row.get("recommendation") or {}
    out |= {f"recommendation_{k}": rec.get(k) for k in ("kind", "target", "reason")}
    out["monthly_savings_usd"] = rec.get("monthly_savings_usd")
    return out


@dataclass(frozen=True, slots=True, kw_only=True, eq=False)
class Rightsizing:
    """A window's right-sizing, as its report has it: what the Right-size page draws and downloads. One
    frame, not a row object per workload (a month at real churn is ~600,000 of them): rows() makes rows
    only of what is drawn."""

    # Every workload as RIGHTSIZE_COLUMNS (text as str, numbers as float64, the recommendation's text None
    # and its savings NaN where it has none): those with a change first, the biggest monthly savings first,
    # else in the report's order (most wasteful first)
    table: pd.DataFrame
    summary: dict[str, Any]  # the report's "rightsizing": monthly_savings_usd, gpus_freed, pools

    def rows(self, limit: int | None = None) -> list[dict[str, Any]]:
        """The first `limit` rows (all when None) as the report's workload rows flattened (_flat): savings
        null where unknown."""
        head = self.table if limit is None else self.table.iloc[:limit]
        columns = {k: head[k].tolist() for k in RIGHTSIZE_COLUMNS}
        columns["monthly_savings_usd"] = [v if v == v else None for v in columns["monthly_savings_usd"]]
        return [dict(zip(RIGHTSIZE_COLUMNS, r, strict=True)) for r in zip(*columns.values(), strict=True)]

    def count(self, *kinds: str) -> int:
        """Workloads whose recommendation is one of `kinds`."""
        return int(self.table["recommendation_kind"].isin(kinds).sum())

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Rightsizing):
            return NotImplemented
        return self.summary == other.summary and self.table.equals(other.table)

    __hash__ = None  # type: ignore[assignment]


def rightsizing_of(report: Report) -> Rightsizing:
    """The report's right-sizing: its workload rows and its "rightsizing" section."""
    rows = (_flat(r) for r in report["workloads"])
    flat = pd.DataFrame.from_records(rows, columns=list(RIGHTSIZE_COLUMNS))
    return Rightsizing(table=_ranked(flat), summary=report["rightsizing"])


def rightsizing_from_tables(workloads: pd.DataFrame, packing: pd.DataFrame | None) -> Rightsizing:
    """The right-sizing report_from_tables() would give a workload table with recommendation columns and
    its packing estimate (None: not known which workloads held GPUs at the window's end), column by
    column: in the workload rows' order, used GPU-hours 0 where unknown, and the recommendation (none
    where its kind is not known, no target where it is empty) as workload_rows() and _flat() make them."""
    tables = {"workload": workloads, **({} if packing is None else {"packing": packing})}
    missing = [c for c in RIGHTSIZE_COLUMNS if c not in workloads]  # no pod read: no recommendation
    ordered = workloads.reindex(columns=[*workloads.columns, *missing]).sort_values(
        ["waste_usd", "allocated_gpu_hours"], ascending=False
    )
    has = np.array([isinstance(k, str) for k in ordered["recommendation_kind"]], dtype=bool)
    target = ordered["recommendation_target"]
    flat = ordered.assign(
        used_gpu_hours=ordered["used_gpu_hours"].astype("float64").fillna(0.0),
        recommendation_kind=ordered["recommendation_kind"].where(has),
        recommendation_target=target.where(has & target.notna().to_numpy() & (target.astype("str") != "")),
        recommendation_reason=ordered["recommendation_reason"].where(has),
        monthly_savings_usd=ordered["monthly_savings_usd"].astype("float64").where(has),
    )
    return Rightsizing(table=_ranked(flat), summary=_rightsizing(tables))


_RECOMMENDATION_TEXT = ("recommendation_kind", "recommendation_target", "recommendation_reason")


def _ranked(flat: pd.DataFrame) -> pd.DataFrame:
    """Rightsizing.table of flattened workload rows in the report's order: typed, then those with a change
    first and the biggest savings first, in a stable sort (rows saving the same, every keep and unknown,
    stay in the report's order)."""

    def typed(k: str) -> "pd.Series[Any]":
        if k in _WORKLOAD_TEXT:
            return flat[k].astype("str")
        if k in _RECOMMENDATION_TEXT:
            return flat[k].astype(object).where(flat[k].notna(), None)
        return flat[k].astype("float64")

    out = pd.DataFrame({k: typed(k) for k in RIGHTSIZE_COLUMNS}).reset_index(drop=True)
    savings = out["monthly_savings_usd"].to_numpy()
    savings = np.where(np.isfinite(savings), savings, 0.0)
    later = ~out["recommendation_kind"].isin(RIGHTSIZE_CHANGES).to_numpy()
    order = np.lexsort((-savings, later))  # by the last key first; lexsort is stable
    return out.iloc[order].reset_index(drop=True)


def recommendations(frame: pd.DataFrame) -> list[dict[str, Any] | None]:
    """Per row of a workload table, its recommendation: kind (gpus, mig, time_slice, product, keep or
    unknown), target ("" none), monthly_savings_usd (null when unknown) and the reason; None where the
    table has none (the history path)."""
    if "recommendation_kind" not in frame:
        return [None] * len(frame)
    out: list[dict[str, Any] | None] = []
    columns = ("recommendation_kind", "recommendation_target", "monthly_savings_usd", "recommendation_reason")
    # tolist(): the same values as iterating each column, without a Python call per value of an Arrow one
    for kind, target, savings, reason in zip(*(frame[c].tolist() for c in columns), strict=True):
        if not isinstance(kind, str):
            out.append(None)
            continue
        out.append(
            {"kind": kind, "target": target or None, "monthly_savings_usd": _num(savings), "reason": reason}
        )
    return out


_ISO_FORMAT = "%Y-%m-%dT%H:%M:%SZ"
_WORKLOAD_TEXT = ("namespace", "pod", "team", "node", "pool")
# Idle-allocated GPU-hours with the framebuffer in use (a model loaded, a notebook parked) and near empty.
IDLE_SPLIT = ("held_idle_gpu_hours", "abandoned_idle_gpu_hours")
# The GPUs' own energy (before PUE) and its cost (× PUE × the tariff in force): null where unknown.
ENERGY = ("energy_kwh", "energy_cost_usd")
_WORKLOAD_NUMBERS = (
    "gpus",
    "allocated_gpu_hours",
    "used_gpu_hours",
    "idle_gpu_hours",
    *IDLE_SPLIT,
    "unknown_gpu_hours",
    "waste_usd",
    *ENERGY,
)
# The recommendation kinds that change something (the others: keep, and unknown).
RIGHTSIZE_CHANGES = ("gpus", "mig", "time_slice", "product")
# A row of right-sizing: a workload row's identity and GPU-hours with its recommendation as columns (no
# idle-since, idle split or energy: the recorded path reads right-sizing without those pod families).
RIGHTSIZE_COLUMNS = (
    *_WORKLOAD_TEXT,
    "gpus",
    "allocated_gpu_hours",
    "used_gpu_hours",
    "idle_gpu_hours",
    "unknown_gpu_hours",
    "waste_usd",
    "recommendation_kind",
    "recommendation_target",
    "monthly_savings_usd",
    "recommendation_reason",
)


def build_report(
    analysis: Analysis, *, health: pd.DataFrame | None = None, queues: QueueSetup | None = None
) -> Report:
    """The report of an analysis: every hour a GE-hour, every ratio in [0, 1] or null.

    health: the window's health events (service.health_events), when read. queues: Kueue's queues
    (FleetService.queue_setup()); without them the report has no queue rows.
    """
    return report_and_queues(analysis, health=health, queues=queues)[0]


def report_and_queues(
    analysis: Analysis, *, health: pd.DataFrame | None = None, queues: QueueSetup | None = None
) -> tuple[Report, QueueTables]:
    """build_report() and the queue tables it was made with (a page drawing both computes them once)."""
    tables = usage_tables(analysis)
    queued = analysis_queues(analysis, queues, workloads=tables["workload"])
    report = report_from_tables(
        tables,
        window=analysis.window,
        settings=analysis.settings,
        gpus=int(analysis.nodes["capacity_ge"].sum()),
        pending=analysis.pending,
        coverage=analysis.coverage,
        health=health,
        queues=queued,
    )
    return report, queued


def history_queues(
    history: History,
    queues: QueueSetup | None,
    *,
    allocated: pd.DataFrame | None = None,
    idle: pd.DataFrame | None = None,
) -> QueueTables:
    """The queue tables of a window read from gpuwatch's own series: the queues' usage as the exporter
    published it (from Kueue's Workloads where it published none), the teams' allocation per pool and
    the idle pods from its workload rows, when read, else as given (unknown when not)."""
    if history.workloads_read:
        allocated, idle = workload_inputs(history.tables["workload"], history.held_at_end)
    return queue_tables(
        queues or no_queues(),
        window=history.window,
        prices=history.prices,
        allocated=allocated,
        idle=idle,
        pending=history.pending,
        reclaim_after_seconds=history.settings.idle.reclaim_after_seconds,
        recorded=history.queue_usage,
    )


def build_history_report(
    history: History, *, health: pd.DataFrame | None = None, queues: QueueSetup | None = None
) -> Report:
    """The same report from gpuwatch's own series (the long-window path of SPEC §4.3)."""
    return report_from_tables(
        history.tables,
        window=history.window,
        settings=history.settings,
        gpus=history.gpus,
        pending=history.pending,
        coverage=history.coverage,
        health=health,
        queues=history_queues(history, queues),
    )


def report_from_tables(
    tables: Mapping[str, pd.DataFrame],
    *,
    window: Window,
    settings: Settings,
    gpus: int,
    pending: pd.DataFrame,
    coverage: Coverage,
    health: pd.DataFrame | None = None,
    queues: QueueTables | None = None,
) -> Report:
    """The report of usage tables shaped as usage_tables() makes them (fleet, fleet_ledger, team,
    namespace, workload, pool), the pending-pod diagnosis and coverage, whichever path computed them,
    and the queue tables of the same window."""
    fleet_usage = tables["fleet"].iloc[0] if len(tables["fleet"]) else None
    ledger_row = tables["fleet_ledger"].iloc[0]
    capacity = float(sum(ledger_row[f"{s}_gpu_hours"] for s in LEDGER_STATES))
    allocated = _num(fleet_usage["allocated_gpu_hours"]) if fleet_usage is not None else 0.0
    used = _num(fleet_usage["used_gpu_hours"]) if fleet_usage is not None else None
    unknown = float(fleet_usage["unknown_gpu_hours"]) if fleet_usage is not None else 0.0
    return {
        "schema_version": SCHEMA_VERSION,
        "window": {
            "start": _iso(window.start),
            "end": _iso(window.end),
            "step_seconds": window.step_seconds,
        },
        "params": {
            "idle_threshold": settings.idle.threshold_ratio,
            "idle_window_seconds": settings.idle.window_seconds,
            "reclaim_after_seconds": settings.idle.reclaim_after_seconds,
        },
        "fleet": {
            "gpus": gpus,
            "capacity_gpu_hours": capacity,
            "ledger_gpu_hours": {s: float(ledger_row[f"{s}_gpu_hours"]) for s in LEDGER_STATES},
            "allocated_gpu_hours": allocated,
            "used_gpu_hours": used if used is not None else 0.0,
            "efficiency": _efficiency(used, allocated, unknown),
            "allocation_rate": _ratio(allocated, capacity),
            "cost_usd": float(ledger_row["cost_usd"]),
            "waste_usd": float(ledger_row["waste_usd"]),
            "unallocated_cost_usd": float(ledger_row["unallocated_cost_usd"]),
            "stranded_cost_usd": float(ledger_row["stranded_cost_usd"]),
            "unavailable_cost_usd": float(ledger_row["unavailable_cost_usd"]),
            # Every GPU-hour of capacity at its price: the dollars of the six ledger states add up to it.
            "capacity_cost_usd": float(
                ledger_row[
                    ["cost_usd", "unallocated_cost_usd", "stranded_cost_usd", "unavailable_cost_usd"]
                ].sum()
            ),
            **{
                k: _num(fleet_usage.get(k)) if fleet_usage is not None else None
                for k in (*ENERGY, "unallocated_energy_kwh")
            },
        },
        "clusters": _cluster_rows(tables.get("cluster"))
        or [
            {
                "cluster": settings.cluster_name,
                "gpus": gpus,
                "capacity_gpu_hours": capacity,
                "allocated_gpu_hours": allocated,
                "used_gpu_hours": used,
                "cost_usd": float(ledger_row["cost_usd"]),
                "waste_usd": float(ledger_row["waste_usd"]),
                "ledger_gpu_hours": {s: float(ledger_row[f"{s}_gpu_hours"]) for s in LEDGER_STATES},
                "error": None,
            }
        ],
        "teams": [
            {
                **row,
                "budget_usd": settings.budgets.monthly_usd.get(row["team"]),
                "forecast_month_usd": forecast_month_usd(row["cost_usd"], window),
            }
            for row in _usage_rows(tables["team"], ["team"], idle_split=True)
        ],
        "namespaces": _usage_rows(tables["namespace"], ["namespace", "team"]),
        "workloads": workload_rows(tables["workload"]),
        "pools": [
            {
                "pool": str(r["pool"]),
                "vendor": str(r["vendor"]),
                "nodes": int(r["nodes"]),
                "gpus": int(r["gpus"]),
                "allocation_rate": _ratio(
                    sum(r[f"{s}_gpu_hours"] for s in ALLOCATED_STATES), _pool_capacity(r)
                ),
                "utilization": _ratio(_num(r["used_gpu_hours"]), _pool_capacity(r)),
                "fragmentation_ratio": _ratio(_num(r["fragmentation_ratio"]), 1.0),
                # To 1e-9 GE, the ledger's epsilon: VictoriaMetrics truncates stored values to about 12
                # significant digits, so the two read paths' blocks differ there by ~1e-12.
                "largest_free_block": round(_num(r["largest_free_block_ge"]) or 0.0, 9),
                "stranded_gpu_hours": float(r["stranded_gpu_hours"]),
                "stranded_cost_usd": float(r["stranded_cost_usd"]),
                "usd_per_gpu_hour": _num(r["usd_per_gpu_hour"]),
                "taints": str(r["taints"]),
            }
            for r in tables["pool"].to_dict("records")
        ],
        "rightsizing": _rightsizing(tables),
        "pending": [
            {
                "namespace": str(r["namespace"]),
                "pod": str(r["pod"]),
                "team": str(r["team"]),
                "gpus": float(r["gpus"]),
                "pool": str(r["pool"]),
                "waiting_seconds": max(0.0, float(r["waiting_seconds"])),
                "blocked_by": str(r["blocked_by"]),
                "reason": _reason(r, queues),
                "scheduler_message": str(r["scheduler_message"]),
                "node_affinity": str(r["node_affinity"]),
                "tolerations": str(r["tolerations"]),
            }
            for r in pending.to_dict("records")
        ],
        "health": [
            {
                "severity": str(r["severity"]),
                "kind": str(r["kind"]),
                "event": str(r["event"]),
                "node": str(r["node"]),
                "gpu": str(r["gpu"]),
                "uuid": str(r["uuid"]),
                "value": _num(r["value"]),
                "detail": str(r["detail"]),
            }
            for r in (health.to_dict("records") if health is not None else [])
        ],
        **queue_sections(queues),
        "coverage": {
            "gpu_samples_expected": coverage.gpu_samples_expected,
            "gpu_samples_present": coverage.gpu_samples_present,
            "unattributed_gpu_hours": coverage.unattributed_gpu_hours,
            "util_source": dict(coverage.util_source),
            "warnings": list(coverage.warnings) + list(queues.warnings if queues is not None else ()),
        },
    }


def _reason(pending: Mapping[Any, Any], queues: QueueTables | None) -> str:
    """Why a pending pod waits; for one Kueue holds back, in Kueue's own words when its Workload says."""
    message = (queues.admission_messages if queues is not None else {}).get(
        (str(pending["namespace"]), str(pending["pod"]))
    )
    if pending["blocked_by"] == "quota" and message:
        return f"Kueue has not admitted it: {message}"
    return str(pending["reason"])


def queue_sections(queues: QueueTables | None) -> dict[str, Any]:
    """Kueue's queues, fairness per team, pending demand beside idle GPUs per pool and the idle pods
    worth reclaiming for it (the last two need no Kueue)."""
    if queues is None:
        return {}

    def rows(
        frame: pd.DataFrame, ints: Sequence[str] = (), flags: Sequence[str] = ()
    ) -> list[dict[str, Any]]:
        out = []
        for r in frame.to_dict("records"):
            row: dict[str, Any] = {}
            for key, value in r.items():
                name = str(key)
                if name in ints:
                    row[name] = int(value)
                elif name in flags:
                    row[name] = bool(value)
                elif isinstance(value, pd.Timestamp):
                    row[name] = iso_z(value.to_pydatetime())
                elif isinstance(value, float | np.floating):
                    row[name] = _num(float(value))
                else:
                    row[name] = str(value)
            out.append(row)
        return out

    fairness = queues.fairness.drop(columns=["unquoted_gpu_hours"], errors="ignore")
    return {
        "kueue": {"installed": queues.installed},
        "queues": rows(queues.queues, ints=("admitted_workloads", "pending_workloads", "preemptions")),
        "fairness": rows(fairness),
        "blocked_vs_idle": rows(queues.blocked_vs_idle, ints=("pending_pods",)),
        "reclaim_candidates": rows(queues.reclaim, flags=("borrowing",)),
    }


def _rightsizing(tables: Mapping[str, pd.DataFrame]) -> dict[str, Any]:
    """Right-sizing over the fleet: the monthly dollars every recommendation would save, and per pool the
    whole GPUs the workloads holding GPUs at the window's end need now and after (first-fit
    decreasing). Null (and no pools) where not computed: no workload rows read, or (packing) not known
    which workloads held GPUs at the window's end."""
    packing, workloads = tables.get("packing"), tables["workload"]
    if "monthly_savings_usd" not in workloads:
        return {"monthly_savings_usd": None, "gpus_freed": None, "pools": []}
    savings = float(workloads["monthly_savings_usd"].sum())
    if packing is None:
        return {"monthly_savings_usd": savings, "gpus_freed": None, "pools": []}
    return {
        "monthly_savings_usd": savings,
        "gpus_freed": int(packing["gpus_freed"].sum()),
        "pools": [
            {
                "pool": str(r["pool"]),
                "gpus_before": int(r["gpus_before"]),
                "gpus_after": int(r["gpus_after"]),
                "gpus_freed": int(r["gpus_freed"]),
            }
            for r in packing.to_dict("records")
        ],
    }


def _pool_capacity(row: Mapping[Any, Any]) -> float:
    return float(sum(row[f"{s}_gpu_hours"] for s in LEDGER_STATES))


def workload_rows(frame: pd.DataFrame) -> list[dict[str, Any]]:
    """The workload rows, most wasteful first, built a column at a time (a month holds ~50,000 pods):
    used_gpu_hours 0 where unknown, as in _usage_rows. A frame with only some of the columns
    (historytables.idle_workloads) gives rows with only those."""
    tie = "allocated_gpu_hours" if "allocated_gpu_hours" in frame else "idle_gpu_hours"
    ordered = frame.sort_values(["waste_usd", tie], ascending=False)
    columns: dict[str, list[Any]] = {
        k: ordered[k].astype("str").tolist() for k in _WORKLOAD_TEXT if k in ordered
    }
    present = [k for k in _WORKLOAD_NUMBERS if k in ordered]
    numbers = ordered[present].astype("float64").fillna({"used_gpu_hours": 0.0})
    columns.update({k: numbers[k].tolist() for k in present})
    for k in IDLE_SPLIT:  # unknown (NaN, or not read) is null
        if "idle_gpu_hours" in columns:
            columns[k] = (
                [v if v == v else None for v in columns[k]] if k in columns else [None] * len(ordered)
            )
    for k in ENERGY:  # unknown (NaN, or not measured) is null; idle rows (no allocation read) have none
        if k in columns:
            columns[k] = [v if v == v else None for v in columns[k]]
        elif "allocated_gpu_hours" in columns:
            columns[k] = [None] * len(ordered)
    if "idle_since" in ordered:
        since = pd.to_datetime(ordered["idle_since"], utc=True)
        texts = since.dt.strftime(_ISO_FORMAT).tolist()
        columns["idle_since"] = [t if known else None for t, known in zip(texts, since.notna(), strict=True)]
    if "idle_gpu_hours" in columns and "allocated_gpu_hours" in columns:
        columns["recommendation"] = recommendations(ordered)
    names = list(columns)
    return [dict(zip(names, row, strict=True)) for row in zip(*columns.values(), strict=True)]


def _cluster_rows(frame: pd.DataFrame | None) -> list[dict[str, Any]]:
    """One row per cluster (a cluster not read: its numbers null, and why); [] where the path kept no
    cluster table (the recorded path: one cluster, the fleet)."""
    if frame is None:
        return []
    return [
        {
            "cluster": str(r["cluster"]),
            "gpus": None if r["error"] else round(float(r["gpus"])),
            **{k: _num(r[k]) for k in ("capacity_gpu_hours", "allocated_gpu_hours", "used_gpu_hours")},
            **{k: _num(r[k]) for k in ("cost_usd", "waste_usd")},
            "ledger_gpu_hours": None
            if r["error"]
            else {s: float(r[f"{s}_gpu_hours"]) for s in LEDGER_STATES},
            "error": r["error"] or None,
        }
        for r in frame.to_dict("records")
    ]


def _usage_rows(
    frame: pd.DataFrame, keys: Sequence[str], *, idle_split: bool = False
) -> list[dict[str, Any]]:
    """Rows of a usage table, most wasteful first; idle_split: with held and abandoned idle GPU-hours
    (null where the framebuffer of some idle hours is unknown, or the table lacks them)."""
    ordered = frame.sort_values(["waste_usd", "allocated_gpu_hours"], ascending=False)
    return [
        {
            **{k: str(r[k]) for k in keys},
            "allocated_gpu_hours": float(r["allocated_gpu_hours"]),
            "used_gpu_hours": _num(r["used_gpu_hours"]) or 0.0,
            "idle_gpu_hours": float(r["idle_gpu_hours"]),
            "unknown_gpu_hours": float(r["unknown_gpu_hours"]),
            "efficiency": _efficiency(
                _num(r["used_gpu_hours"]), float(r["allocated_gpu_hours"]), float(r["unknown_gpu_hours"])
            ),
            "cost_usd": float(r["cost_usd"]),
            "waste_usd": float(r["waste_usd"]),
            "pods": int(r["pods"]),
            **{k: _num(r.get(k)) for k in ENERGY},
            **({k: _num(r.get(k)) for k in IDLE_SPLIT} if idle_split else {}),
        }
        for r in ordered.to_dict("records")
    ]


def _num(value: Any) -> float | None:
    """A finite float, or None for NaN / missing (unknown is not zero)."""
    if value is None:
        return None
    number = float(value)
    return number if math.isfinite(number) else None


def _efficiency(used: float | None, allocated: float | None, unknown: float) -> float | None:
    """Used ÷ the allocated GE-hours whose utilization is known: hours without telemetry are neither
    busy nor idle, so they are left out of both sides (null when none is known)."""
    measured = None if allocated is None else allocated - unknown
    return _ratio(used, measured) if measured is not None and measured > _EPSILON_HOURS else None


def _ratio(part: float | None, whole: float | None) -> float | None:
    if part is None or whole is None or whole <= 0 or not math.isfinite(part):
        return None
    return min(1.0, max(0.0, part / whole))


def _iso(value: Any) -> str:
    return pd.Timestamp(value).tz_convert("UTC").strftime(_ISO_FORMAT)
