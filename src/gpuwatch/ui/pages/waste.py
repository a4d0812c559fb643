"""Waste page: what idle, unallocated and stranded GPUs cost, by team, namespace and workload."""

from concurrent.futures import ThreadPoolExecutor
from typing import Any

import dash
import pandas as pd
from dash import Input, Output, callback, html

from gpuwatch.ui import figures, ids
from gpuwatch.ui.components import (
    POLL_PAUSED,
    as_of,
    capacity_kpi,
    draw,
    graph,
    kpi,
    kwh,
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
from gpuwatch.ui.rows import (
    IDLE_COLUMNS,
    NAMESPACE_COLUMNS,
    TEAM_COLUMNS,
    WORKLOAD_COLUMNS,
    idle_rows,
    shown_idle,
    shown_teams,
)

dash.register_page(__name__, path="/waste", name="Waste", title="gpuwatch · Waste", order=3)


TOP_ROWS = 25  # rows each table shows (its download has them all)


def layout(**_query: str) -> html.Div:
    return page(
        "Waste",
        "GPU-hours and dollars allocated but idle, unallocated or stranded — and who holds idle GPUs now.",
        html.Div(id=ids.WASTE_KPIS, className="gw-kpis"),
        html.Div(
            [
                graph(
                    ids.WASTE_LEDGER, "Ledger in dollars", note="GE-hours of each state × the pool's price."
                ),
                graph(
                    ids.WASTE_TREEMAP,
                    "Idle-allocated dollars: team → namespace → workload",
                    note="Click a team or namespace to zoom in.",
                    height=420,
                ),
            ],
            className="gw-grid-2",
        ),
        html.Div(id=ids.WASTE_TABLES),
        as_of_id=ids.WASTE_AS_OF,
        banner_id=ids.WASTE_BANNER,
    )


def _kpis(view: View, filters: Filters) -> list[html.Div]:
    fleet = view.headline["fleet"]
    idle_now = len(view.idle_now())
    return [
        kpi("idle-allocated waste", usd(fleet["waste_usd"]), "waste", tone="gw-warn"),
        kpi("idle GPU-hours", num(fleet["ledger_gpu_hours"]["allocated_idle"]), "idle-hours"),
        capacity_kpi(filters, "unallocated $", usd(fleet["unallocated_cost_usd"]), "unallocated"),
        capacity_kpi(filters, "stranded $", usd(fleet["stranded_cost_usd"]), "stranded", tone="gw-bad"),
        kpi("allocated cost", usd(fleet["cost_usd"]), "cost"),
        kpi(
            "GPU energy",
            kwh(fleet["energy_kwh"]),
            "energy",
            hint=f"{usd(fleet['energy_cost_usd'])} with PUE and tariff; "
            f"{kwh(fleet['unallocated_energy_kwh'])} drawn by GPUs no pod held",
        ),
        kpi(
            "efficiency",
            pct(fleet["efficiency"]),
            "efficiency",
            hint="used ÷ allocated GPU-hours with telemetry",
        ),
        kpi("workloads idle now", f"{idle_now}", "idle-now", tone="gw-warn" if idle_now else ""),
    ]


def _tables(view: View, query: str) -> list[html.Section]:
    summary = view.summary
    idle_now = len(view.idle_now())
    more = (
        f"showing the {TOP_ROWS} most wasteful of {idle_now:,} idle now; the download has every idle workload"
        if idle_now > TOP_ROWS
        else ""
    )
    return [
        table(
            "waste-idle",
            "Top idle workloads",
            IDLE_COLUMNS,
            shown_idle(idle_rows(view, TOP_ROWS)),
            limit=TOP_ROWS,
            empty_text="no workload is idle",
            query=query,
            more=more,
            note="Idle: every GPU the workload holds stayed below the idle threshold for the whole idle "
            "window. Held: idle with a model in GPU memory (a parked notebook, a loaded server); "
            "abandoned: idle with memory near empty. Dollars are this window's idle-allocated GE-hours × "
            "price.",
        ),
        table(
            "waste-teams",
            "Waste by team",
            TEAM_COLUMNS,
            shown_teams(summary["teams"]),
            empty_text="no GPU workloads",
            query=query,
        ),
        table(
            "waste-namespaces",
            "Waste by namespace",
            NAMESPACE_COLUMNS,
            summary["namespaces"],
            limit=TOP_ROWS,
            empty_text="no GPU workloads",
            query=query,
        ),
        table(
            "waste-workloads",
            "Waste by workload",
            WORKLOAD_COLUMNS,
            view.top_workloads(TOP_ROWS),
            limit=TOP_ROWS,
            empty_text="no GPU workloads",
            query=query,
            total=view.workload_count(),
        ),
    ]


@exporter("waste-idle")
def _export_idle(loaded: Loaded, _filters: Filters, _arg: str) -> Export:
    assert loaded.view is not None
    return Export(frame=pd.DataFrame(idle_rows(loaded.view)))


@exporter("waste-teams")
def _export_teams(loaded: Loaded, _filters: Filters, _arg: str) -> Export:
    assert loaded.view is not None
    return report_group(loaded.view.summary, "team")


@exporter("waste-namespaces")
def _export_namespaces(loaded: Loaded, _filters: Filters, _arg: str) -> Export:
    assert loaded.view is not None
    return report_group(loaded.view.summary, "namespace")


@exporter("waste-workloads")
def _export_workloads(loaded: Loaded, _filters: Filters, _arg: str) -> Export:
    assert loaded.view is not None
    return report_group(loaded.view.report, "workload")


def render(search: str | None) -> tuple[Any, ...]:
    filters, loaded = load(search)
    view = loaded.view
    head = (loaded_banner(loaded), as_of(loaded, filters))
    if view is None:
        blank = pending_figure(loaded)
        return (*head, pending_note(loaded), blank, blank, pending_card("Teams", loaded))
    # The page's reads of the pods' series go side by side: Prometheus sums them on every core.
    with ThreadPoolExecutor(max_workers=3) as pool:
        reads = [
            pool.submit(read)
            for read in (lambda: view.summary, view.idle_now, lambda: view.top_workloads(TOP_ROWS))
        ]
    for read in reads:
        read.result()
    return (
        *head,
        _kpis(view, filters),
        figures.ledger_usd_bar(view.state_usd()),
        figures.waste_treemap(view.idle_waste()),
        _tables(view, to_query(filters)),
    )


@callback(
    Output(ids.WASTE_BANNER, "children"),
    Output(ids.WASTE_AS_OF, "children"),
    Output(ids.WASTE_KPIS, "children"),
    Output(ids.WASTE_LEDGER, "figure"),
    Output(ids.WASTE_TREEMAP, "figure"),
    Output(ids.WASTE_TABLES, "children"),
    Output(rendered_id(ids.WASTE_BANNER), "data"),
    Input(ids.URL, "search"),
    Input(ids.REFRESH, "n_intervals"),
    Input(ids.PENDING, "data"),
    running=POLL_PAUSED,
)
def update(search: str | None, _n: int, _pending: object) -> tuple[Any, ...]:
    return draw(lambda: render(search))
