"""Capacity page: where the free GPUs are, how fragmented, what the strands cost, and why pods pend."""

from collections import Counter
from typing import Any

import dash
import pandas as pd
from dash import Input, Output, callback, html

from gpuwatch.ui import figures, ids
from gpuwatch.ui.components import (
    POLL_PAUSED,
    Column,
    as_of,
    capacity_kpi,
    draw,
    first_nodes,
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
    records,
    rendered_id,
    table,
    usd,
)
from gpuwatch.ui.data import Loaded, View, since_text
from gpuwatch.ui.downloads import Export, exporter
from gpuwatch.ui.filters import Filters, to_query
from gpuwatch.ui.rows import free_gpus

dash.register_page(
    __name__, path="/capacity", name="Capacity", title="gpuwatch · Capacity & fragmentation", order=2
)


def layout(**_query: str) -> html.Div:
    return page(
        "Capacity & fragmentation",
        "Where the free GPUs are, whether a big job fits, what stranded capacity costs, and why pods pend.",
        html.Div(id=ids.CAPACITY_KPIS, className="gw-kpis"),
        graph(
            ids.CAPACITY_HOLES,
            "GPUs per node at the end of the window",
            note="Light grey are the holes a new pod can use; red are free GPUs no pod can use "
            "(fragments smaller than the pods that ask, or on cordoned nodes).",
            height=300,
            download="capacity-nodes",
            shown_id=ids.CAPACITY_HOLES_SHOWN,
        ),
        html.Div(id=ids.CAPACITY_POOLS),
        graph(
            ids.CAPACITY_FRAGMENTATION,
            "Fragmentation over time",
            note="Share of free GPUs too fragmented for the pool's pod sizes (Weng et al., ATC'23).",
        ),
        html.Div(id=ids.CAPACITY_PENDING),
        as_of_id=ids.CAPACITY_AS_OF,
        banner_id=ids.CAPACITY_BANNER,
    )


PENDING_TITLE = "Pending GPU pods and why"


def pool_rows(view: View) -> list[dict[str, Any]]:
    """The report's pools (with the dollars their stranded hours cost, each priced at its sample's rate)
    and what is free now."""
    now = view.nodes_now()
    free_now = (
        now[now["ready"] & now["schedulable"]]
        .groupby("pool")["unallocated_ge"]
        .sum()
        .add(now[now["ready"] & now["schedulable"]].groupby("pool")["stranded_ge"].sum(), fill_value=0.0)
    )
    return [
        {
            **p,
            "free_now": float(free_now.get(p["pool"], 0.0)),
        }
        for p in view.pool_rows()
    ]


POOL_COLUMNS = [
    Column("pool", "pool"),
    Column("vendor", "vendor"),
    Column("gpus", "GPUs", "int"),
    Column("free_now", "free now", "num"),
    Column("largest_free_block", "largest placeable", "num"),
    Column("fragmentation_ratio", "fragmentation", "pct"),
    Column("allocation_rate", "allocation", "pct"),
    Column("utilization", "utilization", "pct"),
    Column("stranded_gpu_hours", "stranded GPU-h", "num"),
    Column("stranded_cost_usd", "stranded $", "usd"),
    Column("taints", "node taints"),
]


CLUSTER_COLUMNS = [
    Column("cluster", "cluster"),
    Column("gpus", "GPUs", "int"),
    Column("capacity_gpu_hours", "capacity GPU-h", "num"),
    Column("allocation_rate", "allocation", "pct"),
    Column("utilization", "utilization", "pct"),
    Column("cost_usd", "cost $", "usd"),
    Column("waste_usd", "idle waste $", "usd"),
    Column("status", "status"),
]


def cluster_rows(view: View) -> list[dict[str, Any]]:
    """The clusters of a fleet of several (none for one): what each holds and costs, or why it is not
    read."""
    rows = view.headline.get("clusters", [])
    if len(rows) < 2 and not any(r["error"] for r in rows):
        return []

    def share(part: float | None, whole: float | None) -> float | None:
        return part / whole if part is not None and whole else None

    return [
        {
            **r,
            "allocation_rate": share(r["allocated_gpu_hours"], r["capacity_gpu_hours"]),
            "utilization": share(r["used_gpu_hours"], r["capacity_gpu_hours"]),
            "status": f"not read: {r['error']}" if r["error"] else "read",
        }
        for r in rows
    ]


def pending_rows(view: View) -> list[dict[str, Any]]:
    """Pending GPU pods with how long they waited, what blocks them and why, what they ask of a node
    and the scheduler's own words."""
    end = view.window.end
    extra = {(r["namespace"], r["pod"]): r for r in records(view.pending_detail())}
    rows = []
    for p in view.headline["pending"]:
        more = extra.get((p["namespace"], p["pod"]), {})
        rows.append(
            {
                **p,
                "pool": p["pool"] or "any (no product selector)",
                "waiting": since_text(end - pd.Timedelta(seconds=p["waiting_seconds"]), end),
                "pool_free_ge": more.get("pool_free_ge"),
                "largest_free_block_ge": more.get("largest_free_block_ge"),
                "asks": _asks(p),
                "why": _why(p),
            }
        )
    return sorted(rows, key=lambda r: -float(r["waiting_seconds"]))


def _asks(pod: dict[str, Any]) -> str:
    """Its node selector / required affinity and tolerations, as one cell."""
    parts = [pod["node_affinity"] or "any GPU node"]
    if pod["tolerations"]:
        parts.append(f"tolerates {pod['tolerations']}")
    return " · ".join(parts)


def _why(pod: dict[str, Any]) -> html.Div | str:
    """The reason in the user's words, and under it what the scheduler said."""
    if not pod["scheduler_message"]:
        return str(pod["reason"])
    return html.Div(
        [
            html.Div(pod["reason"]),
            html.Div(f"scheduler: {pod['scheduler_message']}", className="gw-muted-line"),
        ]
    )


PENDING_COLUMNS = [
    Column("namespace", "namespace"),
    Column("pod", "pod"),
    Column("team", "team", href=lambda r: f"/teams/{r['team']}"),
    Column("gpus", "GPUs", "num"),
    Column("pool", "pool"),
    Column("waiting", "waiting"),
    Column("blocked_by", "blocked by", "tag"),
    Column("asks", "asks for"),
    Column("why", "why"),
]


def _kpis(view: View, filters: Filters) -> list[html.Div]:
    fleet = view.headline["fleet"]
    now = view.nodes_now()
    placeable = now[now["ready"] & now["schedulable"]]
    free = float(placeable["unallocated_ge"].sum() + placeable["stranded_ge"].sum())
    largest = max((p["largest_free_block"] for p in view.pool_rows()), default=0.0)
    pending = view.headline["pending"]
    counts = Counter(p["blocked_by"] for p in pending)
    blocked = ", ".join(f"{n} {reason}" for reason, n in counts.most_common()) or "none"
    ratio = view.fragmentation_ratio()
    return [
        kpi("free GPUs now", num(free), "free-now", hint="on ready, schedulable nodes"),
        kpi("largest placeable request", num(largest), "largest", hint="GPUs on one node, any pool"),
        kpi("fragmentation (window)", pct(ratio), "fragmentation", hint="fragmented ÷ free GPU-hours"),
        capacity_kpi(filters, "stranded $", usd(fleet["stranded_cost_usd"]), "stranded", tone="gw-bad"),
        capacity_kpi(filters, "unallocated $", usd(fleet["unallocated_cost_usd"]), "unallocated"),
        kpi(
            "GPU pods pending",
            f"{len(pending)}",
            "pending",
            tone="gw-warn" if pending else "",
            hint=f"blocked by: {blocked}",
        ),
    ]


@exporter("capacity-nodes")
def _export_nodes(loaded: Loaded, _filters: Filters, _arg: str) -> Export:
    assert loaded.view is not None
    return Export(frame=loaded.view.nodes_now())


@exporter("capacity-pools")
def _export_pools(loaded: Loaded, _filters: Filters, _arg: str) -> Export:
    assert loaded.view is not None
    return Export(frame=pd.DataFrame(pool_rows(loaded.view)))


@exporter("capacity-clusters")
def _export_clusters(loaded: Loaded, _filters: Filters, _arg: str) -> Export:
    assert loaded.view is not None
    return Export(
        frame=pd.DataFrame(loaded.view.headline.get("clusters", [])).drop(columns="ledger_gpu_hours")
    )


@exporter("capacity-pending")
def _export_pending(loaded: Loaded, _filters: Filters, _arg: str) -> Export:
    assert loaded.view is not None
    # The cells drawn for people (waiting, asks, why) are in the row's own fields already.
    frame = pd.DataFrame(pending_rows(loaded.view)).drop(columns=["waiting", "asks", "why"], errors="ignore")
    return Export(frame=frame)


def render(search: str | None) -> tuple[Any, ...]:
    filters, loaded = load(search)
    view = loaded.view
    head = (loaded_banner(loaded), as_of(loaded, filters))
    if view is None:
        blank = pending_figure(loaded)
        return (
            *head,
            pending_note(loaded),
            blank,
            "",
            blank,
            pending_card("Pools", loaded),
            pending_card(PENDING_TITLE, loaded),
        )
    now = view.nodes_now()
    nodes, shown = first_nodes(now, free_gpus(now), why="partly used nodes with the most free GPUs first")
    return (
        *head,
        _kpis(view, filters),
        figures.node_holes(nodes),
        shown,
        figures.fragmentation_lines(view.fragmentation_timeline()),
        [
            table("capacity-pools", "Pools", POOL_COLUMNS, pool_rows(view), empty_text="no pools"),
            *(
                [table("capacity-clusters", "Clusters", CLUSTER_COLUMNS, rows, empty_text="no clusters")]
                if (rows := cluster_rows(view))
                else []
            ),
        ],
        table(
            "capacity-pending",
            PENDING_TITLE,
            PENDING_COLUMNS,
            pending_rows(view),
            empty_text="no GPU pod is pending",
            note="Blocked by the first check a pod fails, in the scheduler's order. affinity: no GPU node "
            "matches its node selector or required affinity; taint: every node it may use has a taint it "
            "does not tolerate; mig_profile: none offers its MIG profile; quota: Kueue has not admitted it; "
            "fragmentation: the nodes it may use have enough free GPUs in total, but no one node has "
            "enough; capacity: they do not have enough free GPUs.",
            query=to_query(filters),
        ),
    )


@callback(
    Output(ids.CAPACITY_BANNER, "children"),
    Output(ids.CAPACITY_AS_OF, "children"),
    Output(ids.CAPACITY_KPIS, "children"),
    Output(ids.CAPACITY_HOLES, "figure"),
    Output(ids.CAPACITY_HOLES_SHOWN, "children"),
    Output(ids.CAPACITY_FRAGMENTATION, "figure"),
    Output(ids.CAPACITY_POOLS, "children"),
    Output(ids.CAPACITY_PENDING, "children"),
    Output(rendered_id(ids.CAPACITY_BANNER), "data"),
    Input(ids.URL, "search"),
    Input(ids.REFRESH, "n_intervals"),
    Input(ids.PENDING, "data"),
    running=POLL_PAUSED,
)
def update(search: str | None, _n: int, _pending: object) -> tuple[Any, ...]:
    return draw(lambda: render(search))
