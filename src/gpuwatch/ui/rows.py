"""Rows and columns several pages show: usage tables, idle workloads, teams with quotas, nodes to draw."""

import math
from typing import Any

import pandas as pd

from gpuwatch.core.model import LEDGER_STATES
from gpuwatch.read.devicehealth import HOT_CELSIUS
from gpuwatch.ui.components import (
    Column,
    current_store,
    incomplete,
    kwh,
    num,
    polled,
    records,
    two_lines,
    usd,
)
from gpuwatch.ui.data import View, since_text

CHANGE_KEYS = ("allocated_gpu_hours_change_ratio", "efficiency_change_ratio")


def team_link(row: Any) -> str:
    return f"/teams/{row['team']}"


USAGE_COLUMNS = [
    Column("allocated_gpu_hours", "allocated GPU-h", "num"),
    Column("used_gpu_hours", "used GPU-h", "num"),
    Column("idle_gpu_hours", "idle GPU-h", "num"),
    Column("efficiency", "efficiency", "pct"),
    Column("cost_usd", "cost $", "usd"),
    Column("waste_usd", "waste $", "usd"),
    Column("pods", "pods", "int"),
]
# Idle GPU-hours with a model in memory (held) and near empty (abandoned): "n/a" where unknown.
IDLE_SPLIT_COLUMNS = [
    Column("held_idle_gpu_hours", "held idle GPU-h", "num"),
    Column("abandoned_idle_gpu_hours", "abandoned idle GPU-h", "num"),
]
TEAM_COLUMNS = [
    Column("team", "team", href=team_link),
    *USAGE_COLUMNS[:3],  # allocated, used, idle GPU-h
    *IDLE_SPLIT_COLUMNS,
    *USAGE_COLUMNS[3:-1],
    Column("energy", "GPU energy · cost", "num"),
    USAGE_COLUMNS[-1],  # pods
]
NAMESPACE_COLUMNS = [Column("namespace", "namespace"), Column("team", "team", href=team_link), *USAGE_COLUMNS]
WORKLOAD_COLUMNS = [
    Column("namespace", "namespace"),
    Column("pod", "pod"),
    Column("team", "team", href=team_link),
    Column("node", "node"),
    Column("gpus", "GPUs", "num"),
    Column("allocated_gpu_hours", "allocated GPU-h", "num"),
    Column("used_gpu_hours", "used GPU-h", "num"),
    Column("idle_gpu_hours", "idle GPU-h", "num"),
    Column("waste_usd", "waste $", "usd"),
    Column("idle_since", "idle since", "time"),
]
IDLE_COLUMNS = [
    Column("namespace", "namespace"),
    Column("pod", "pod"),
    Column("team", "team", href=team_link),
    Column("node", "node"),
    Column("pool", "pool"),
    Column("gpus", "GPUs", "num"),
    Column("idle_since", "idle since", "time"),
    Column("idle_for", "idle for"),
    Column("idle_memory", "idle GPU-h · memory", "num"),
    Column("waste_usd", "waste $ so far", "usd"),
]


def shown_idle(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Idle rows as an IDLE_COLUMNS table draws them: idle GPU-hours over what their memory held."""
    return [{**r, "idle_memory": two_lines(num(r["idle_gpu_hours"]), idle_memory_text(r))} for r in rows]


def shown_teams(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Team rows as TEAM_COLUMNS draws them: the GPUs' energy over its cost."""
    return [{**r, "energy": two_lines(kwh(r.get("energy_kwh")), usd(r.get("energy_cost_usd")))} for r in rows]


def idle_memory_text(row: dict[str, Any]) -> str:
    """What the idle GPUs' memory held: all held, all abandoned, how much of each, or unknown."""
    held, abandoned = row.get("held_idle_gpu_hours"), row.get("abandoned_idle_gpu_hours")
    if held is None or abandoned is None:
        return "memory n/a"
    if abandoned <= 0:
        return "held"
    if held <= 0:
        return "abandoned"
    return f"{held:,.2f} held · {abandoned:,.2f} abandoned"


def idle_rows(view: View, limit: int | None = None) -> list[dict[str, Any]]:
    """Workloads idle at their last sample, by waste: those still holding GPUs first ("idle now"); with
    a `limit`, at least its first `limit` rows (only those idle now, when as many are)."""
    end = view.window.end

    def row(w: dict[str, Any], now: bool) -> dict[str, Any]:
        since = pd.Timestamp(w["idle_since"]).to_pydatetime()
        return {**w, "idle_for": since_text(since, end) if now else "ended idle", "idle_now": now}

    if limit is not None and len(view.idle_now()) >= limit:
        return [row(w, True) for w in view.idle_now()[:limit]]
    held = view.held_at_end()
    rows = [row(w, (w["namespace"], w["pod"]) in held) for w in view.idle_workloads() if w["idle_since"]]
    return sorted(rows, key=lambda r: (not r["idle_now"], -r["waste_usd"]))


def quota_frame() -> pd.DataFrame | None:
    """Quotas per team now (None while they cannot be read, or are still being read)."""
    quotas = current_store().quotas(polled=polled())
    incomplete(quotas)
    return quotas.frame


def change_frame(view: View) -> pd.DataFrame | None:
    """Per team, the change since the window before the view's (None while it cannot be read, or is still
    being computed)."""
    previous = current_store().previous(view, polled=polled())
    if previous is None:
        incomplete(None)
        return None
    return view.team_changes(previous)


def team_rows(
    view: View, quotas: pd.DataFrame | None, changes: pd.DataFrame | None = None
) -> list[dict[str, Any]]:
    """The report's teams with GPUs held now, quota use (GPU requests used ÷ hard, all namespaces) and,
    given `changes` (View.team_changes), the change since the window before (NaN when unknown)."""
    held = view.held_now()
    quota = {} if quotas is None else {str(r["team"]): r for r in records(quotas)}
    change = {} if changes is None else {str(r["team"]): r for r in records(changes)}
    rows = []
    for t in view.summary["teams"]:
        q = quota.get(t["team"])
        hard = float(q["quota_gpus"]) if q is not None else None
        used = float(q["used_gpus"]) if q is not None else None
        c = change.get(t["team"], {})
        rows.append(
            {
                **t,
                "gpus_now": held.get(t["team"], 0.0),
                "quota_gpus": hard,
                "quota_used_gpus": used,
                "quota_use": used / hard if hard and used is not None else None,
                "budget_use": t["forecast_month_usd"] / t["budget_usd"] if t["budget_usd"] else None,
                **{key: c.get(key, math.nan) for key in CHANGE_KEYS},
            }
        )
    return rows


def quota_text(row: dict[str, Any]) -> str:
    if row.get("quota_gpus") is None:
        return "no quota"
    return f"{row['quota_used_gpus']:g} / {row['quota_gpus']:g} ({row['quota_use']:.0%})"


def budget_text(row: dict[str, Any]) -> str:
    """The share of the team's monthly budget the month's forecast spends, and the budget."""
    if row.get("budget_usd") is None:
        return "no budget"
    use = row.get("budget_use")
    return (f"{use:.0%} of " if use is not None else "") + f"${row['budget_usd']:,.0f}"


def free_gpus(nodes_now: pd.DataFrame) -> "pd.Series[float]":
    """Per node at the window's end, its free GE (unallocated and stranded), a node partly in use ranked
    above every wholly free one: its holes are where a pod of some size fits or strands."""
    states = nodes_now.set_index("node")
    free = states["unallocated_ge"] + states["stranded_ge"]
    total = states[[f"{s}_ge" for s in LEDGER_STATES]].sum(axis=1)
    partly = (free > 0) & (free < total - 1e-9)
    return free + partly * float(total.max())


def gpu_marks(gpus: pd.DataFrame) -> pd.DataFrame:
    """Per row of a health GPU table, what its heatmap cell is marked with: xid (a last XID), remap (a
    row-remap failure) and hot (above HOT_CELSIUS); unknown values mark nothing."""
    return pd.DataFrame(
        {
            "xid": gpus["xid_last"].fillna(0).ne(0),
            "remap": gpus["row_remap_failure"].fillna(0).ne(0),
            "hot": gpus["temp_celsius"].gt(HOT_CELSIUS),
        },
        index=gpus.index,
    )


def gpus_to_look_at(gpus: pd.DataFrame, events: pd.DataFrame) -> "pd.Series[float]":
    """Per node of a health GPU table, what an SRE looks at first: a node with a critical health event
    (`events`: node, severity) above every other, then its GPUs that are marked (gpu_marks) or without
    telemetry."""
    marked = gpu_marks(gpus).any(axis=1) | gpus["uuid"].isna()
    per_node = marked.groupby(gpus["node"]).sum().astype("float64")
    critical = events.loc[events["severity"].eq("critical"), "node"].unique()
    return per_node + per_node.index.isin(critical) * float(gpus.groupby("node").size().max() + 1)
