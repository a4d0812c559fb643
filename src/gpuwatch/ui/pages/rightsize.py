"""Right-size page: per workload the smallest fit for its p95 compute and peak memory, with the dollars."""

from typing import Any

import dash
from dash import Input, Output, callback, html

from gpuwatch.surfaces.report import RIGHTSIZE_CHANGES
from gpuwatch.ui import ids
from gpuwatch.ui.components import (
    POLL_PAUSED,
    Column,
    as_of,
    draw,
    kpi,
    load,
    loaded_banner,
    page,
    pending_card,
    pending_note,
    rendered_id,
    table,
    usd,
)
from gpuwatch.ui.data import Loaded
from gpuwatch.ui.downloads import Export, exporter
from gpuwatch.ui.filters import Filters, to_query
from gpuwatch.ui.rows import team_link

dash.register_page(__name__, path="/rightsize", name="Right-size", title="gpuwatch · Right-size", order=5)

TOP_ROWS = 25
COLUMNS = [
    Column("namespace", "namespace"),
    Column("pod", "workload"),
    Column("team", "team", href=team_link),
    Column("pool", "pool"),
    Column("gpus", "GPUs now", "num"),
    Column("recommendation_kind", "change", "tag"),
    Column("recommendation_target", "to"),
    Column("monthly_savings_usd", "saves $ / month", "usd"),
    Column("recommendation_reason", "why"),
]
PACKING_COLUMNS = [
    Column("pool", "pool"),
    Column("gpus_before", "GPUs needed now", "int"),
    Column("gpus_after", "after the changes", "int"),
    Column("gpus_freed", "GPUs freed", "int"),
]


def layout(**_query: str) -> html.Div:
    return page(
        "Right-size",
        "What each workload needs, from its p95 compute and peak GPU memory over the window, and what the "
        "smallest fit would save: fewer GPUs, a MIG slice, a time-slice share or a cheaper product.",
        html.Div(id=ids.RIGHTSIZE_KPIS, className="gw-kpis"),
        html.Div(id=ids.RIGHTSIZE_TABLES),
        as_of_id=ids.RIGHTSIZE_AS_OF,
        banner_id=ids.RIGHTSIZE_BANNER,
    )


RECOMMENDATIONS_TITLE = "Recommendations, biggest savings first"


@exporter("rightsize")
def _export(loaded: Loaded, _filters: Filters, _arg: str) -> Export:
    assert loaded.view is not None
    return Export(frame=loaded.view.rightsizing().table)


def render(search: str | None) -> tuple[Any, ...]:
    filters, loaded = load(search)
    view = loaded.view
    head = (loaded_banner(loaded), as_of(loaded, filters))
    if view is None:
        return (*head, pending_note(loaded), pending_card(RECOMMENDATIONS_TITLE, loaded))
    rightsizing = view.rightsizing()
    summary, workloads = rightsizing.summary, len(rightsizing.table)
    changes, unknown = rightsizing.count(*RIGHTSIZE_CHANGES), rightsizing.count("unknown")
    kpis = [
        kpi("saved per month", usd(summary["monthly_savings_usd"]), "rightsize-savings", tone="gw-ok"),
        kpi(
            "GPUs freed",
            f"{summary['gpus_freed']:,}",
            "rightsize-freed",
            hint="net, first-fit decreasing per pool",
        ),
        kpi("workloads to change", f"{changes:,}", "rightsize-changes"),
        kpi(
            "without a recommendation",
            f"{unknown:,}",
            "rightsize-unknown",
            hint="too little telemetry: why below",
        ),
    ]
    query = to_query(filters)
    tables = [
        table(
            "rightsize",
            RECOMMENDATIONS_TITLE,
            COLUMNS,
            rightsizing.rows(TOP_ROWS),
            limit=TOP_ROWS,
            empty_text="no GPU workloads",
            query=query,
            total=workloads,
            more=f"showing {TOP_ROWS} of {workloads:,}; the download has every workload"
            if workloads > TOP_ROWS
            else "",
            note="Needs: p95 of the GPU-equivalents the workload kept busy and its peak GPU memory, plus 20% "
            "headroom. Savings: the hourly price difference at the window's end, for as long as the "
            "workload held GPUs in the window, over a 730-hour month. Unknown: too little utilization "
            "telemetry or allocation to judge.",
        ),
        table(
            "rightsize-packing",
            "GPUs freed if every change were made",
            PACKING_COLUMNS,
            summary["pools"],
            empty_text="no workload holds GPUs at the window's end",
            query=query,
            downloadable=False,
            note="The workloads holding GPUs at the window's end, packed by first-fit decreasing onto whole "
            "GPUs of each pool, before and after; a move to a cheaper product adds GPUs to its pool.",
        ),
    ]
    return (*head, kpis, tables)


@callback(
    Output(ids.RIGHTSIZE_BANNER, "children"),
    Output(ids.RIGHTSIZE_AS_OF, "children"),
    Output(ids.RIGHTSIZE_KPIS, "children"),
    Output(ids.RIGHTSIZE_TABLES, "children"),
    Output(rendered_id(ids.RIGHTSIZE_BANNER), "data"),
    Input(ids.URL, "search"),
    Input(ids.REFRESH, "n_intervals"),
    Input(ids.PENDING, "data"),
    running=POLL_PAUSED,
)
def update(search: str | None, _n: int, _pending: object) -> tuple[Any, ...]:
    return draw(lambda: render(search))
