"""Overview page: the fleet's headline numbers and allocation per pool."""

import math

import dash
from dash import Input, Output, callback, dcc, html

from gpuwatch.ui import ids
from gpuwatch.ui.app import current_service
from gpuwatch.ui.figures import pool_allocation_bar

dash.register_page(__name__, path="/", name="Overview", title="gpuwatch · Overview")


def layout(**_query: str) -> html.Div:
    return html.Div(
        [
            html.H1("Fleet overview"),
            html.P(id=ids.OVERVIEW_AS_OF, className="gw-muted"),
            html.Div(id=ids.OVERVIEW_KPIS, className="gw-kpis"),
            dcc.Graph(id=ids.OVERVIEW_POOL_CHART, config={"displaylogo": False}),
            dcc.Interval(id=ids.OVERVIEW_INTERVAL, interval=60_000, n_intervals=0),
        ]
    )


def _kpi(label: str, value: str, kpi_id: str) -> html.Div:
    return html.Div(
        [html.Div(value, className="gw-kpi-value", id=f"kpi-{kpi_id}"), html.Div(label)], className="gw-kpi"
    )


@callback(
    Output(ids.OVERVIEW_KPIS, "children"),
    Output(ids.OVERVIEW_POOL_CHART, "figure"),
    Output(ids.OVERVIEW_AS_OF, "children"),
    Input(ids.OVERVIEW_INTERVAL, "n_intervals"),
)
def refresh(_n: int) -> tuple[list[html.Div], object, str]:
    service = current_service()
    snap = service.snapshot()
    util = "n/a" if math.isnan(snap.mean_util_ratio) else f"{snap.mean_util_ratio:.0%}"
    kpis = [
        _kpi("GPUs", f"{snap.gpus}", "gpus"),
        _kpi("nodes", f"{snap.nodes}", "nodes"),
        _kpi("GPUs allocated now", f"{snap.gpus_allocated_now:.2f}", "allocated"),
        _kpi("mean utilization", util, "util"),
        _kpi("GPU pods running", f"{snap.pods_running}", "running"),
        _kpi("GPU pods pending", f"{snap.pods_pending}", "pending"),
        _kpi("nodes NotReady / cordoned", f"{snap.nodes_not_ready} / {snap.nodes_cordoned}", "nodes-bad"),
    ]
    as_of = f"As of {snap.as_of:%Y-%m-%d %H:%M} UTC · {len(snap.pools)} pools · {len(snap.teams)} teams"
    return kpis, pool_allocation_bar(snap.allocated_by_pool, snap.capacity_by_pool), as_of
