"""Teams page: per team GPUs held, GPU-hours allocated vs used, efficiency, waste, quota use and trend."""

from typing import Any

import dash
import pandas as pd
from dash import Input, Output, callback, html

from gpuwatch.ui import figures, ids
from gpuwatch.ui.components import (
    POLL_PAUSED,
    Column,
    Markup,
    as_of,
    draw,
    load,
    loaded_banner,
    page,
    pending_card,
    rendered_id,
    table,
    two_lines,
    usd,
)
from gpuwatch.ui.data import Loaded, View
from gpuwatch.ui.downloads import Export, exporter
from gpuwatch.ui.filters import Filters, to_query
from gpuwatch.ui.rows import budget_text, change_frame, quota_frame, quota_text, team_rows

dash.register_page(__name__, path="/teams", name="Teams", title="gpuwatch · Teams", order=4)


TITLE = "Teams by idle waste"


def layout(**_query: str) -> html.Div:
    return page(
        "Teams",
        "Per team: GPUs held, GPU-hours allocated vs used, efficiency and their change since the previous "
        "period, idle waste, quota use. Click a team for its trend and workloads.",
        html.Div(id=ids.TEAMS_TABLE),
        as_of_id=ids.TEAMS_AS_OF,
        banner_id=ids.TEAMS_BANNER,
    )


# The trend sits next to the team it belongs to: were the table ever wider than the page, the columns
# that scroll out of sight are the last ones, never the sparkline.
COLUMNS = [
    Column("team", "team", href=lambda r: f"/teams/{r['team']}"),
    Column("trend", "trend: held · used"),
    Column("gpus_now", "GPUs now", "num"),
    Column("quota", "quota (GPU requests)"),
    Column("allocated_gpu_hours", "allocated GPU-h", "num"),
    Column("used_gpu_hours", "used GPU-h", "num"),
    Column("efficiency", "efficiency", "pct"),
    Column("allocated_gpu_hours_change_ratio", "allocated vs prev.", "change"),
    Column("efficiency_change_ratio", "efficiency vs prev.", "pp"),
    Column("idle_gpu_hours", "idle GPU-h", "num"),
    Column("cost_usd", "cost $", "usd"),
    Column("waste_usd", "waste $", "usd"),
    Column("budget", "month forecast $ · of budget"),
    Column("pods", "pods", "int"),
]


def _sparklines(view: View) -> dict[str, Markup]:
    """Each team's trend, drawn as SVG inside the table's HTML."""
    timeline = view.team_timeline()
    return {
        str(team): Markup(figures.sparkline_svg(rows)) for team, rows in timeline.groupby("team", sort=False)
    }


def _budget(row: dict[str, Any]) -> Markup:
    """The month's forecast over the share of the monthly budget it spends, red when over budget."""
    over = (row.get("budget_use") or 0.0) > 1.0
    return two_lines(usd(row["forecast_month_usd"]), budget_text(row), alert=over)


@exporter("teams")
def _export_teams(loaded: Loaded, _filters: Filters, _arg: str) -> Export:
    assert loaded.view is not None
    view = loaded.view
    return Export(frame=pd.DataFrame(team_rows(view, quota_frame(), change_frame(view))))


def render(search: str | None) -> tuple[Any, ...]:
    filters, loaded = load(search)
    view = loaded.view
    head = (loaded_banner(loaded), as_of(loaded, filters))
    if view is None:
        return (*head, pending_card(TITLE, loaded))
    sparks = _sparklines(view)
    rows = [
        {**r, "quota": quota_text(r), "budget": _budget(r), "trend": sparks.get(r["team"])}
        for r in team_rows(view, quota_frame(), change_frame(view))
    ]
    return (
        *head,
        table(
            "teams",
            TITLE,
            COLUMNS,
            rows,
            limit=100,
            empty_text="no team held GPUs in this window",
            query=to_query(filters),
            note="Efficiency = used ÷ allocated GPU-hours with telemetry. Trend: GPUs held (orange) and used "
            "(line) over the window. vs prev.: the change since the window of the "
            "same length just before this one (— when the team allocated nothing then). Quota: GPU requests "
            "now vs the ResourceQuotas of the team's namespaces. Month forecast: the window's spend rate "
            "over the calendar month it ends in, and its share of the team's monthly budget (config).",
        ),
    )


@callback(
    Output(ids.TEAMS_BANNER, "children"),
    Output(ids.TEAMS_AS_OF, "children"),
    Output(ids.TEAMS_TABLE, "children"),
    Output(rendered_id(ids.TEAMS_BANNER), "data"),
    Input(ids.URL, "search"),
    Input(ids.REFRESH, "n_intervals"),
    Input(ids.PENDING, "data"),
    running=POLL_PAUSED,
)
def update(search: str | None, _n: int, _pending: object) -> tuple[Any, ...]:
    return draw(lambda: render(search))
