"""Team detail page (/teams/<team>): the team's GPUs over time, its namespaces, workloads and pending pods."""

from dataclasses import replace
from typing import Any
from urllib.parse import unquote

import dash
from dash import Input, Output, State, callback, dcc, html

from gpuwatch.ui import figures, ids
from gpuwatch.ui.components import (
    POLL_PAUSED,
    Column,
    as_of,
    current_store,
    draw,
    graph,
    incomplete,
    kpi,
    kwh,
    loaded_banner,
    num,
    page,
    pct,
    pending_card,
    pending_figure,
    pending_note,
    polled,
    rendered_id,
    table,
    usd,
)
from gpuwatch.ui.data import Loaded, View
from gpuwatch.ui.downloads import Export, exporter, report_group
from gpuwatch.ui.filters import Filters, parse_query, to_query
from gpuwatch.ui.rows import (
    IDLE_COLUMNS,
    NAMESPACE_COLUMNS,
    WORKLOAD_COLUMNS,
    budget_text,
    idle_rows,
    quota_frame,
    quota_text,
    shown_idle,
    team_rows,
)
from gpuwatch.views.base import Scope


def _title(team: str | None = None) -> str:
    return f"gpuwatch · team {unquote(team or '')}"


dash.register_page(__name__, path_template="/teams/<team>", name="Team", title=_title, order=5)


def layout(team: str | None = None, **_query: str) -> html.Div:
    name = unquote(team or "")
    return page(
        f"Team {name}",
        "GPUs held and used over the window, the team's namespaces and workloads, and its pending pods.",
        dcc.Store(id=ids.TEAM_NAME, data=name),
        html.P(id=ids.TEAM_BACK, className="gw-back"),
        html.Div(id=ids.TEAM_KPIS, className="gw-kpis"),
        graph(ids.TEAM_TREND, "GPUs held and used over time"),
        html.Div(id=ids.TEAM_TABLES),
        as_of_id=ids.TEAM_AS_OF,
        banner_id=ids.TEAM_BANNER,
    )


def load_team(search: str | None, team: str) -> tuple[Filters, Loaded]:
    """The URL's window and pools, the whole of this team (a team filter would hide it)."""
    filters = replace(parse_query(search), teams=())
    loaded = current_store().load(filters, polled=polled())
    incomplete(loaded)
    return filters, loaded


def team_view(view: View, team: str) -> View:
    """The view narrowed to the team: its namespace and workload rows are the team's, read alone."""
    return current_store().narrowed(view, Scope(teams=(team,)))


PENDING_COLUMNS = [
    Column("namespace", "namespace"),
    Column("pod", "pod"),
    Column("gpus", "GPUs", "num"),
    Column("pool", "pool"),
    Column("blocked_by", "blocked by"),
]


@exporter("team-namespaces")
def _export_namespaces(loaded: Loaded, _filters: Filters, team: str) -> Export:
    assert loaded.view is not None
    return report_group(team_view(loaded.view, team).report, "namespace", team=team)


@exporter("team-workloads")
def _export_workloads(loaded: Loaded, _filters: Filters, team: str) -> Export:
    assert loaded.view is not None
    return report_group(team_view(loaded.view, team).report, "workload", team=team)


def render(team: str, search: str | None) -> tuple[Any, ...]:
    filters, loaded = load_team(search, team)
    view = loaded.view
    head = (
        loaded_banner(loaded),
        as_of(loaded, filters),
        dcc.Link("← all teams", href=dash.get_relative_path("/teams") + to_query(filters)),
    )
    if view is None:
        return (*head, pending_note(loaded), pending_figure(loaded), pending_card("Workloads", loaded))
    report = team_view(view, team).report
    row = next((r for r in team_rows(view, quota_frame()) if r["team"] == team), None)
    timeline = view.team_timeline()
    trend = figures.team_trend(timeline[timeline["team"] == team])
    if row is None:
        note = html.P(f"Team {team} held no GPUs in this window.", className="gw-empty")
        return (*head, [], trend, note)
    kpis = [
        kpi("GPUs now", num(row["gpus_now"]), "team-gpus"),
        kpi("quota (GPU requests)", quota_text(row), "team-quota"),
        kpi("allocated GPU-hours", num(row["allocated_gpu_hours"]), "team-allocated"),
        kpi("used GPU-hours", num(row["used_gpu_hours"]), "team-used"),
        kpi("efficiency", pct(row["efficiency"]), "team-efficiency"),
        kpi("cost", usd(row["cost_usd"]), "team-cost"),
        kpi("idle-allocated waste", usd(row["waste_usd"]), "team-waste", tone="gw-warn"),
        kpi(
            "GPU energy",
            kwh(row["energy_kwh"]),
            "team-energy",
            hint=f"{usd(row['energy_cost_usd'])} with PUE",
        ),
        kpi(
            "month forecast",
            usd(row["forecast_month_usd"]),
            "team-forecast",
            hint=budget_text(row),
            tone="gw-bad" if (row.get("budget_use") or 0.0) > 1.0 else "",
        ),
    ]
    mine = [r for r in idle_rows(team_view(view, team)) if r["team"] == team]
    tables = [
        table(
            "team-idle",
            "Idle workloads",
            IDLE_COLUMNS,
            shown_idle(mine),
            arg=team,
            query=to_query(filters),
            empty_text="none idle",
            downloadable=False,
        ),
        table(
            "team-namespaces",
            "Namespaces",
            NAMESPACE_COLUMNS,
            [r for r in report["namespaces"] if r["team"] == team],
            arg=team,
            query=to_query(filters),
        ),
        table(
            "team-workloads",
            "Workloads",
            WORKLOAD_COLUMNS,
            [r for r in report["workloads"] if r["team"] == team],
            arg=team,
            query=to_query(filters),
        ),
        table(
            "team-pending",
            "Pending GPU pods",
            PENDING_COLUMNS,
            [r for r in report["pending"] if r["team"] == team],
            arg=team,
            query=to_query(filters),
            empty_text="no pending GPU pods",
            downloadable=False,
        ),
    ]
    return (*head, kpis, trend, tables)


@callback(
    Output(ids.TEAM_BANNER, "children"),
    Output(ids.TEAM_AS_OF, "children"),
    Output(ids.TEAM_BACK, "children"),
    Output(ids.TEAM_KPIS, "children"),
    Output(ids.TEAM_TREND, "figure"),
    Output(ids.TEAM_TABLES, "children"),
    Output(rendered_id(ids.TEAM_BANNER), "data"),
    Input(ids.URL, "search"),
    Input(ids.REFRESH, "n_intervals"),
    Input(ids.PENDING, "data"),
    State(ids.TEAM_NAME, "data"),
    running=POLL_PAUSED,
)
def update(search: str | None, _n: int, _pending: object, team: str | None) -> tuple[Any, ...]:
    return draw(lambda: render(team or "", search))
