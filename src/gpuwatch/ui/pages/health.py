"""Fleet health page: a node × GPU heatmap, device health events, and where telemetry is missing."""

from typing import Any

import dash
import pandas as pd
from dash import Input, Output, callback, dcc, html

from gpuwatch.read.devicehealth import HEALTH_COLUMNS, HOT_CELSIUS, gpu_rows, health_events, xid_text
from gpuwatch.ui import figures, ids
from gpuwatch.ui.components import (
    POLL_PAUSED,
    Column,
    as_of,
    banners,
    current_store,
    download_buttons,
    draw,
    first_nodes,
    incomplete,
    kpi,
    load,
    num,
    page,
    pct,
    pending_card,
    pending_figure,
    polled,
    records,
    rendered_id,
    table,
)
from gpuwatch.ui.data import Loaded, Timed, View
from gpuwatch.ui.downloads import Export, exporter
from gpuwatch.ui.filters import Filters
from gpuwatch.ui.rows import gpu_marks, gpus_to_look_at

dash.register_page(__name__, path="/health", name="Fleet health", title="gpuwatch · Fleet health", order=1)


def layout(**_query: str) -> html.Div:
    return page(
        "Fleet health",
        "Which GPUs and nodes are sick, which GPUs the scheduler cannot see, where telemetry is missing.",
        html.Section(
            [
                html.Div(
                    [
                        html.H2("GPUs at the end of the window"),
                        download_buttons("health-gpus"),
                        dcc.RadioItems(
                            id=ids.HEALTH_METRIC,
                            options=[
                                {"label": "utilization", "value": "util"},
                                {"label": "temperature", "value": "temp"},
                                {"label": "power", "value": "power"},
                                {"label": "memory", "value": "memory"},
                            ],
                            value="util",
                            inline=True,
                            className="gw-segmented",
                        ),
                    ],
                    className="gw-section-head",
                ),
                html.P(
                    "Last reported values per GPU (MIG GPUs: instances combined). Marked cells: XID, "
                    f"row-remap failure, hot (above {HOT_CELSIUS:.0f} °C). Grey: no telemetry. Hover for "
                    "the pods on the GPU.",
                    className="gw-muted gw-note",
                ),
                html.P(id=ids.HEALTH_HEATMAP_SHOWN, className="gw-muted gw-note"),
                dcc.Loading(
                    dcc.Graph(id=ids.HEALTH_HEATMAP, config={"displaylogo": False, "responsive": True}),
                    type="dot",
                    delay_show=400,
                ),
            ],
            className="gw-card",
        ),
        html.Div(id=ids.HEALTH_EVENTS),
        html.Div(id=ids.HEALTH_COVERAGE),
        as_of_id=ids.HEALTH_AS_OF,
        banner_id=ids.HEALTH_BANNER,
    )


def gpu_table(view: View, health: pd.DataFrame) -> pd.DataFrame:
    """One row per physical GPU of the view's nodes (telemetry or not) with its health values and holders."""
    nodes = view.nodes()
    units = health[health["node"].isin(nodes["node"])]
    holders = units[["uuid", "gpu_instance_id"]].merge(
        view.gpu_holders(), on=["uuid", "gpu_instance_id"], how="left"
    )
    per_gpu = gpu_rows(units).merge(
        holders.groupby("uuid", as_index=False).agg(
            holders=(
                "holders",
                lambda s: ", ".join(sorted({p for v in s.dropna() for p in v.split(", ") if p})),
            )
        ),
        on="uuid",
        how="left",
    )
    per_gpu["holders"] = per_gpu["holders"].fillna("")
    # Every GPU slot of every node, so a node that reports nothing shows as a row of holes.
    slots = pd.DataFrame(
        [
            (n, p, i)
            for n, p, c in nodes[["node", "pool", "capacity_ge"]].itertuples(index=False)
            for i in range(int(c))
        ],
        columns=["node", "pool", "gpu"],
    )
    slots["gpu"] = slots["gpu"].astype("float64")
    out = slots.merge(per_gpu, on=["node", "gpu"], how="outer")
    out["pool"] = out["pool"].fillna(out["node"].map(dict(zip(nodes["node"], nodes["pool"], strict=True))))
    return out.sort_values(["pool", "node", "gpu"], ignore_index=True)


def _cells(gpus: pd.DataFrame, metric: str) -> pd.DataFrame:
    column = {"util": "util_ratio", "temp": "temp_celsius", "power": "power_watts", "memory": "memory_ratio"}[
        metric
    ]
    markers, hovers = [], []
    for r, m in zip(records(gpus), records(gpu_marks(gpus)), strict=True):
        marks = [f"XID {int(r['xid_last'])}"] if m["xid"] else []
        marks += [name for name in ("remap", "hot") if m[name]]
        markers.append(" ".join(marks))
        title = f"<b>{r['node']} · GPU {r['gpu']:.0f}</b>"
        if pd.isna(r["uuid"]):
            hovers.append(f"{title}<br>no DCGM telemetry in the last samples")
            continue
        lines = [
            title,
            f"{r['uuid']}" + (f" · {r['units']} MIG instances" if r["units"] > 1 else ""),
            f"utilization {pct(r['util_ratio'])} · {num(r['temp_celsius']).rstrip('0').rstrip('.')} °C · "
            f"{r['power_watts']:,.0f} W · memory {pct(r['memory_ratio'])}",
        ]
        if m["xid"]:
            lines.append(xid_text(r["xid_last"]))
        if m["remap"]:
            lines.append("row-remap failure: memory unreliable until reset")
        lines.append(f"pods: {r['holders'] or 'none'}")
        hovers.append("<br>".join(lines))
    return pd.DataFrame(
        {
            "node": gpus["node"],
            "gpu": gpus["gpu"],
            "value": gpus[column],
            "reporting": gpus["uuid"].notna(),
            "marker": markers,
            "hover": hovers,
        }
    )


def events(view: View, gpus: pd.DataFrame) -> pd.DataFrame:
    """Health events now (analytics.health.health_events) with the pods on each GPU."""
    found = health_events(gpus[gpus["uuid"].notna()], view.nodes())
    pods = dict(zip(gpus["uuid"], gpus["holders"], strict=True))
    return found.assign(pods=[pods.get(u, "") if u else "" for u in found["uuid"]])


EVENT_COLUMNS = [
    Column("severity", "severity", "tag"),
    Column("node", "node"),
    Column("gpu", "GPU"),
    Column("event", "event"),
    Column("detail", "detail"),
    Column("pods", "pods on the GPU"),
]
COVERAGE_COLUMNS = [
    Column("node", "node"),
    Column("pool", "pool"),
    Column("capacity_ge", "GPUs", "int"),
    Column("coverage", "samples with telemetry", "pct"),
]


EVENTS_TITLE = "Health events"
COVERAGE_TITLE = "Telemetry coverage"


def coverage_rows(view: View) -> pd.DataFrame:
    frame = view.node_coverage().rename(columns={"coverage_ratio": "coverage"})
    short: pd.DataFrame = frame[frame["coverage"] < 1].sort_values("coverage", ignore_index=True)
    return short[["node", "pool", "capacity_ge", "coverage"]]


def _coverage(view: View) -> html.Div:
    c = view.headline["coverage"]
    expected, present = c["gpu_samples_expected"], c["gpu_samples_present"]
    share = present / expected if expected else float("nan")
    source = c["util_source"]
    tiles = html.Div(
        [
            kpi("GPU-samples with telemetry", pct(share), "coverage", hint=f"{present:,} of {expected:,}"),
            kpi(
                "unattributed GPU-hours",
                num(c["unattributed_gpu_hours"]),
                "unattributed",
                hint="busy GPU, no pod found",
            ),
            kpi(
                "GPUs on PROF_GR_ENGINE_ACTIVE",
                f"{source.get('DCGM_FI_PROF_GR_ENGINE_ACTIVE', 0)}",
                "util-prof",
            ),
            kpi(
                "GPUs on DEV_GPU_UTIL",
                f"{source.get('DCGM_FI_DEV_GPU_UTIL', 0)}",
                "util-dev",
                hint="no profiling metrics",
            ),
        ],
        className="gw-kpis gw-kpis-4",
    )
    warnings = c["warnings"]
    return html.Div(
        [
            html.Section(
                [
                    html.H2(COVERAGE_TITLE),
                    tiles,
                    html.Ul([html.Li(w) for w in warnings], className="gw-warnings")
                    if warnings
                    else html.P("no coverage warnings", className="gw-muted"),
                ],
                className="gw-card",
            ),
            table(
                "health-coverage",
                "Nodes with telemetry gaps in the window",
                COVERAGE_COLUMNS,
                records(coverage_rows(view)),
                empty_text="every node reported at every sample",
            ),
        ]
    )


def _health(loaded: Loaded, *, polled: bool = False) -> Timed | None:
    return current_store().health(loaded.view.window, polled=polled) if loaded.view is not None else None


@exporter("health-events")
def _export_events(loaded: Loaded, _filters: Filters, _arg: str) -> Export:
    assert loaded.view is not None
    timed = _health(loaded)
    frame = timed.frame if timed and timed.frame is not None else pd.DataFrame(columns=list(HEALTH_COLUMNS))
    return Export(frame=events(loaded.view, gpu_table(loaded.view, frame)))


@exporter("health-gpus")
def _export_gpus(loaded: Loaded, _filters: Filters, _arg: str) -> Export:
    assert loaded.view is not None
    timed = _health(loaded)
    frame = timed.frame if timed and timed.frame is not None else pd.DataFrame(columns=list(HEALTH_COLUMNS))
    return Export(frame=gpu_table(loaded.view, frame))


@exporter("health-coverage")
def _export_coverage(loaded: Loaded, _filters: Filters, _arg: str) -> Export:
    assert loaded.view is not None
    return Export(frame=coverage_rows(loaded.view))


def render(search: str | None, metric: str) -> tuple[Any, ...]:
    filters, loaded = load(search)
    view = loaded.view
    timed = _health(loaded, polled=polled())
    if timed is not None:
        incomplete(timed)
    outage = loaded.outage or (timed.outage if timed else None)
    shown = banners(outage, view, loaded.waiting)
    text = as_of(loaded, filters)
    if view is None or timed is None:
        events_card, coverage_card = pending_card(EVENTS_TITLE, loaded), pending_card(COVERAGE_TITLE, loaded)
        return shown, text, pending_figure(loaded), "", events_card, coverage_card
    if timed.frame is None:
        if timed.waiting is not None:  # device health still being read: say what for
            return shown, text, pending_figure(timed), "", pending_card(EVENTS_TITLE, timed), _coverage(view)
        return shown, text, figures.empty("device telemetry unavailable"), "", None, _coverage(view)
    last = timed.frame["timestamp"].max() if len(timed.frame) else None
    if last is not None and not pd.isna(last):
        text += f" · device telemetry at {pd.Timestamp(last):%Y-%m-%d %H:%M} UTC"
    gpus = gpu_table(view, timed.frame)
    found = events(view, gpus)
    why = "nodes with critical events, then those with the most GPUs marked or without telemetry"
    drawn, caption = first_nodes(gpus, gpus_to_look_at(gpus, found), why=why)
    heat = figures.health_heatmap(_cells(drawn, metric), metric)
    event_rows = records(found)
    event_table = table(
        "health-events", EVENTS_TITLE, EVENT_COLUMNS, event_rows, empty_text="no health events"
    )
    return shown, text, heat, caption, event_table, _coverage(view)


@callback(
    Output(ids.HEALTH_BANNER, "children"),
    Output(ids.HEALTH_AS_OF, "children"),
    Output(ids.HEALTH_HEATMAP, "figure"),
    Output(ids.HEALTH_HEATMAP_SHOWN, "children"),
    Output(ids.HEALTH_EVENTS, "children"),
    Output(ids.HEALTH_COVERAGE, "children"),
    Output(rendered_id(ids.HEALTH_BANNER), "data"),
    Input(ids.URL, "search"),
    Input(ids.HEALTH_METRIC, "value"),
    Input(ids.REFRESH, "n_intervals"),
    Input(ids.PENDING, "data"),
    running=POLL_PAUSED,
)
def update(search: str | None, metric: str | None, _n: int, _pending: object) -> tuple[Any, ...]:
    return draw(lambda: render(search, metric or "util"))
