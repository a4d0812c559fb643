"""Overview page: the fleet's headline numbers, its GPU-hour ledger over time and in dollars, top waste."""

from typing import Any

import dash
from dash import Input, Output, callback, html

from gpuwatch.ui import figures, ids
from gpuwatch.ui.components import (
    POLL_PAUSED,
    Column,
    as_of,
    capacity_kpi,
    draw,
    graph,
    kpi,
    load,
    loaded_banner,
    num,
    page,
    pct,
    pending_card,
    pending_figure,
    pending_note,
    rendered_id,
    table,
    usd,
)
from gpuwatch.ui.data import Loaded, View
from gpuwatch.ui.downloads import Export, exporter, report_group
from gpuwatch.ui.filters import Filters, to_query

dash.register_page(__name__, path="/", name="Overview", title="gpuwatch · Overview", order=0)

TOP = 10


def layout(**_query: str) -> html.Div:
    return page(
        "Fleet overview",
        "Where every GPU-hour of capacity went, what it cost, and who holds idle GPUs.",
        html.Div(id=ids.OVERVIEW_KPIS, className="gw-kpis gw-kpis-5"),
        html.Div(
            [
                graph(
                    ids.OVERVIEW_LEDGER_CHART,
                    "GPU-hour ledger over time",
                    note="Each GPU of capacity is in one state at every sample: the stack is the capacity.",
                ),
                graph(
                    ids.OVERVIEW_WATERFALL,
                    "Capacity dollars by ledger state",
                    note="From the window's capacity cost down to what active work used.",
                ),
            ],
            className="gw-grid-2",
        ),
        html.Div(
            [
                graph(ids.OVERVIEW_POOL_CHART, "Pools at the end of the window", height=340),
                html.Div(id=ids.OVERVIEW_TOP_WASTE),
            ],
            className="gw-grid-2",
        ),
        as_of_id=ids.OVERVIEW_AS_OF,
        banner_id=ids.OVERVIEW_BANNER,
    )


def _kpis(view: View, filters: Filters) -> list[html.Div]:
    fleet = view.headline["fleet"]
    nodes = view.nodes()
    pending = view.headline["pending"]
    return [
        kpi("GPUs", f"{fleet['gpus']}", "gpus", hint=f"on {len(nodes)} nodes"),
        capacity_kpi(
            filters, "capacity cost", usd(view.state_usd_total()), "capacity-usd", hint="all ledger states"
        ),
        kpi("allocated cost", usd(fleet["cost_usd"]), "cost"),
        kpi("idle-allocated waste", usd(fleet["waste_usd"]), "waste", tone="gw-warn"),
        capacity_kpi(
            filters,
            "stranded + unallocated",
            usd(fleet["stranded_cost_usd"] + fleet["unallocated_cost_usd"]),
            "free-usd",
        ),
        kpi(
            "efficiency",
            pct(fleet["efficiency"]),
            "efficiency",
            hint="used ÷ allocated GPU-hours with telemetry",
        ),
        capacity_kpi(
            filters,
            "allocation rate",
            pct(fleet["allocation_rate"]),
            "allocation",
            hint="allocated ÷ capacity",
        ),
        kpi("GPUs allocated now", num(view.allocated_now()), "allocated"),
        kpi("GPU pods pending", f"{len(pending)}", "pending", tone="gw-warn" if pending else ""),
        kpi(
            "nodes NotReady / cordoned",
            f"{int((~nodes['ready']).sum())} / {int((~nodes['schedulable']).sum())}",
            "nodes-bad",
        ),
    ]


WASTE_COLUMNS = [
    Column("pod", "workload"),
    Column("team", "team", href=lambda r: f"/teams/{r['team']}"),
    Column("idle_gpu_hours", "idle GPU-h", "num"),
    Column("waste_usd", "waste $", "usd"),
    Column("idle_since", "idle since", "time"),
]


TOP_WASTE_TITLE = "Top idle-allocated workloads"


def _top_waste(view: View, query: str) -> html.Section:
    return table(
        "overview-top-waste",
        TOP_WASTE_TITLE,
        WASTE_COLUMNS,
        view.top_idle_workloads(TOP),
        limit=TOP,
        empty_text="no idle-allocated GPU time in this window",
        note=f"Allocated GPUs below the idle threshold for the whole idle window: the {TOP} most wasteful "
        "in this window, by dollars (the download has every one).",
        query=query,
    )


@exporter("overview-top-waste")
def _export_top_waste(loaded: Loaded, _filters: Filters, _arg: str) -> Export:
    assert loaded.view is not None
    report = loaded.view.report
    return report_group(
        {**report, "workloads": [w for w in report["workloads"] if w["waste_usd"] > 0]}, "workload"
    )


def render(search: str | None) -> tuple[Any, ...]:
    """Everything the page shows for the URL's filters (the callback, callable without Dash)."""
    filters, loaded = load(search)
    view = loaded.view
    head = (loaded_banner(loaded), as_of(loaded, filters))
    if view is None:
        blank = pending_figure(loaded)
        return (*head, pending_note(loaded), blank, blank, blank, pending_card(TOP_WASTE_TITLE, loaded))
    return (
        *head,
        _kpis(view, filters),
        figures.ledger_area(view.ledger_timeline()),
        figures.ledger_waterfall(view.state_usd()),
        figures.pool_states_bar(view.nodes_now()),
        _top_waste(view, to_query(filters)),
    )


@callback(
    Output(ids.OVERVIEW_BANNER, "children"),
    Output(ids.OVERVIEW_AS_OF, "children"),
    Output(ids.OVERVIEW_KPIS, "children"),
    Output(ids.OVERVIEW_LEDGER_CHART, "figure"),
    Output(ids.OVERVIEW_WATERFALL, "figure"),
    Output(ids.OVERVIEW_POOL_CHART, "figure"),
    Output(ids.OVERVIEW_TOP_WASTE, "children"),
    Output(rendered_id(ids.OVERVIEW_BANNER), "data"),
    Input(ids.URL, "search"),
    Input(ids.REFRESH, "n_intervals"),
    Input(ids.PENDING, "data"),
    running=POLL_PAUSED,
)
def update(search: str | None, _n: int, _pending: object) -> tuple[Any, ...]:
    return draw(lambda: render(search))
