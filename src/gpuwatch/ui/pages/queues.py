"""Queues page: Kueue's queues with their quota, borrowing, lending and waits, fairness per team, and the
GPUs idle while pods wait for them (issue 14)."""

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from html import escape
from typing import Any

import dash
import pandas as pd
from dash import Input, Output, callback, html

from gpuwatch.core.model import cluster_of
from gpuwatch.core.schema import QUEUE_ROWS, RECLAIM_CANDIDATES
from gpuwatch.ui import figures, ids
from gpuwatch.ui.components import (
    POLL_PAUSED,
    Column,
    Markup,
    as_of,
    draw,
    graph,
    kpi,
    load,
    loaded_banner,
    missing,
    num,
    page,
    pending_card,
    pending_figure,
    pending_note,
    rendered_id,
    table,
    two_lines,
    usd,
    when,
)
from gpuwatch.ui.data import Loaded, View, since_text
from gpuwatch.ui.downloads import Export, exporter
from gpuwatch.ui.filters import Filters, to_query
from gpuwatch.ui.rows import team_link

# Order 2, as Capacity: the navigation sorts by (order, path), so Queues comes right after Capacity.
dash.register_page(__name__, path="/queues", name="Queues", title="gpuwatch · Queues & quota", order=2)

NOT_INSTALLED = "Kueue is not installed in this cluster: queues, quota and fairness are not shown"
BORROWING_QUEUES = 12  # cluster queues drawn as panels; the download has them all
WAIT_QUEUES = 20  # queues drawn in the wait distribution
RECLAIM_ROWS = 25  # reclaim candidates shown (on borrowed quota, then by idle $); the download has all
NOT_QUEUED = "—"

QUEUE_COLUMNS = [
    Column("queue", "queue · namespace"),
    Column("cluster_queue", "cluster\u00a0queue · cohort"),
    Column("team", "team", href=team_link),
    Column("nominal_gpus", "quota GPUs", "num"),
    Column("used_gpu_hours", "used GPU\u2011h", "num"),
    Column("borrowed_gpu_hours", "borrowed GPU\u2011h", "num"),
    Column("lent_gpu_hours", "lent GPU\u2011h", "num"),
    Column("admitted_workloads", "admitted", "int"),
    Column("pending_workloads", "pending", "int"),
    Column("preemptions", "preempted", "int"),
    Column("wait_seconds_p50", "wait p50", "num"),
    Column("wait_seconds_p95", "wait p95", "num"),
    Column("wait_seconds_max", "longest wait", "num"),
    Column("reserved_unused_usd", "unused quota $ · GPU\u2011h", "usd"),
]
WAIT_KEYS = ("wait_seconds_p50", "wait_seconds_p95", "wait_seconds_max")
FAIRNESS_COLUMNS = [
    Column("team", "team", href=team_link),
    Column("allocation_share", "allocation share", "pct"),
    Column("quota_share", "quota share", "pct"),
    Column("fairness_ratio", "fairness ratio", "num"),
    Column("dominant_pool", "dominant pool"),
]
BLOCKED_COLUMNS = [
    Column("pool", "pool"),
    Column("pending_pods", "pods pending", "int"),
    Column("pending_gpus", "GPUs pending", "num"),
    Column("pending_gpu_hours_waited", "GPU-h waited", "num"),
    Column("idle_allocated_gpus", "GPUs idle-allocated", "num"),
    Column("idle_holders", "held idle by"),
]
RECLAIM_COLUMNS = [
    Column("pod", "pod · namespace"),
    Column("team", "team", href=team_link),
    Column("pool", "pool"),
    Column("gpus", "GPUs", "num"),
    Column("idle_span", "idle for · since", "num"),
    Column("usd_per_hour", "$ / hour", "usd"),
    Column("idle_usd_so_far", "idle $ so far", "usd"),
    Column("cluster_queue", "cluster queue"),
    Column("borrowing", "on borrowed quota"),
]


def layout(**_query: str) -> html.Div:
    return page(
        "Queues & quota",
        "Who waits for GPUs and how long, who borrows quota and who lends it, whether each team gets its "
        "share, and which idle GPUs could run the pods that wait.",
        html.Div(id=ids.QUEUES_KPIS, className="gw-kpis gw-kpis-5"),
        html.Div(id=ids.QUEUES_KUEUE_NOTE),
        html.Div(id=ids.QUEUES_TABLE),
        html.Div(
            [
                graph(
                    ids.QUEUES_BORROWING,
                    "Borrowing and lending over time",
                    note="Per cluster queue, summed over its pools: GPUs used within its nominal quota, "
                    "borrowed above it from its cohort, and its unused quota lent to the cohort; the dashed "
                    "line is the nominal quota.",
                    download="queues-usage",
                    shown_id=ids.QUEUES_BORROWING_SHOWN,
                    height=260,
                ),
                graph(
                    ids.QUEUES_WAITS,
                    "How long workloads waited",
                    note="From creation to admission for each workload admitted in the window, and so far "
                    "for each still pending at its end: the waits the queue table's percentiles are over.",
                    download="queues-waits",
                    shown_id=ids.QUEUES_WAITS_SHOWN,
                    height=260,
                ),
            ],
            id=ids.QUEUES_CHARTS,
        ),
        html.Div(id=ids.QUEUES_TABLES),
        as_of_id=ids.QUEUES_AS_OF,
        banner_id=ids.QUEUES_BANNER,
    )


# -- rows: the report's, narrowed to the page's filters ---------------------------------------------------


def installed(view: View) -> bool:
    return bool(view.queue_report().get("kueue", {}).get("installed", False))


def _scope_pools(view: View) -> set[str] | None:
    """The pools the view's pool and product filters keep (None: no such filter)."""
    if not (view.scope.pools or view.scope.products):
        return None
    return {str(p) for p in view.nodes()["pool"]}


def _usage(view: View) -> pd.DataFrame:
    """The queues' usage over time (QUEUE_USAGE) in the view's pools."""
    usage = view.queue_tables().usage
    pools = _scope_pools(view)
    return usage if pools is None else usage[usage["pool"].isin(pools)]


def queue_rows(view: View) -> list[dict[str, Any]]:
    """The report's queues the filters keep: under a cluster filter the clusters' queues, under a team
    filter the teams' queues, under a pool or product filter the queues with a quota (even of none) or GPUs
    in use there (their numbers stay over all their pools)."""
    if not installed(view):
        return []
    rows: list[dict[str, Any]] = view.queue_report().get("queues", [])
    clusters = set(view.scope.clusters)
    if clusters:  # a queue is its cluster's (its qualified name says which)
        rows = [r for r in rows if cluster_of(r["cluster_queue"]) in clusters]
    teams = set(view.scope.teams)
    if teams:
        rows = [r for r in rows if r["team"] in teams]
    if _scope_pools(view) is not None:
        touching = set(_usage(view)["cluster_queue"])  # quota there (even none) or workloads held there
        rows = [r for r in rows if r["cluster_queue"] in touching]
    return rows


def fairness_rows(view: View) -> list[dict[str, Any]]:
    """The report's fairness rows (of the filtered teams)."""
    if not installed(view):
        return []
    rows: list[dict[str, Any]] = view.queue_report().get("fairness", [])
    teams = set(view.scope.teams)
    return [r for r in rows if r["team"] in teams] if teams else rows


def blocked_rows(view: View) -> list[dict[str, Any]]:
    """The report's pending demand beside idle-allocated GPUs per pool (the scoped report's already)."""
    rows: list[dict[str, Any]] = view.queue_report().get("blocked_vs_idle", [])
    return rows


def reclaim_rows(view: View) -> list[dict[str, Any]]:
    """The report's reclaim candidates (the scoped report's already)."""
    rows: list[dict[str, Any]] = view.queue_report().get("reclaim_candidates", [])
    return rows


def per_cluster_queue(rows: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """One row per cluster queue: its quota, borrowing, lending and unused quota repeat on the row of each
    of its LocalQueues."""
    return list({r["cluster_queue"]: r for r in rows}.values())


# -- how they are shown ---------------------------------------------------------------------------------


def duration(seconds: Any) -> str:
    """A wait as "45 s", "5 m", "2 h 05 m", "3 d 4 h"; "—" when there is none."""
    if missing(seconds):
        return NOT_QUEUED
    if float(seconds) < 60:
        return f"{float(seconds):.0f} s"
    end = datetime(2000, 1, 1, tzinfo=UTC)
    return since_text(end - timedelta(seconds=float(seconds)), end)


def _cell(text: str) -> Markup:
    """A number shown as words (a duration, "no quota") in a numeric column: aligned right."""
    return Markup(escape(text))


def _named(name: str, detail: str) -> Markup:
    """A name over a muted line that places it (its namespace, its cohort)."""
    return Markup(f'<div>{escape(name)}</div><div class="gw-muted-line">{escape(detail)}</div>')


def shown_queues(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    return [
        {
            **r,
            "queue": _named(r["queue"], r["namespace"] or "no LocalQueue"),
            "cluster_queue": _named(
                r["cluster_queue"], f"cohort {r['cohort']}" if r["cohort"] else "no cohort"
            ),
            **{k: _cell(duration(r[k])) for k in WAIT_KEYS},
            "reserved_unused_usd": two_lines(
                usd(r["reserved_unused_usd"]), f"{num(r['reserved_unused_gpu_hours'])} GPU-h"
            ),
        }
        for r in rows
    ]


def shown_fairness(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    return [
        {
            **r,
            "fairness_ratio": _cell("no quota") if missing(r["fairness_ratio"]) else r["fairness_ratio"],
            "dominant_pool": r["dominant_pool"] or NOT_QUEUED,
        }
        for r in rows
    ]


def shown_blocked(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    return [
        {
            **r,
            "pool": r["pool"] or "any (no product selector)",
            "idle_holders": r["idle_holders"] or NOT_QUEUED,
        }
        for r in rows
    ]


def shown_reclaim(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    return [
        {
            **r,
            "pod": _named(r["pod"], r["namespace"]),
            "idle_span": two_lines(duration(r["idle_seconds"]), f"since {when(r['idle_since'])}"),
            "cluster_queue": r["cluster_queue"] or NOT_QUEUED,
            "borrowing": "yes" if r["borrowing"] else "no",
        }
        for r in rows
    ]


def _kpis(view: View, rows: Sequence[Mapping[str, Any]]) -> list[html.Div]:
    blocked = [b for b in blocked_rows(view) if b["pending_gpus"] > 0]
    idle_while_waiting = sum(float(b["idle_allocated_gpus"]) for b in blocked)
    pending_gpus = sum(float(b["pending_gpus"]) for b in blocked)
    idle = kpi(
        "GPUs idle while pods wait",
        num(idle_while_waiting),
        "queues-idle-while-waiting",
        tone="gw-bad" if idle_while_waiting > 0 else "",
        hint=f"idle-allocated in pools where {num(pending_gpus)} GPUs are pending",
    )
    if not installed(view):
        na = "Kueue is not installed"
        return [
            kpi("workloads pending in queues", "n/a", "queues-pending", hint=na),
            kpi("longest wait in a queue", "n/a", "queues-longest-wait", hint=na),
            kpi("borrowed GPU-hours", "n/a", "queues-borrowed", hint=na),
            kpi("reserved but unused $", "n/a", "queues-unused", hint=na),
            idle,
        ]
    pending = sum(int(r["pending_workloads"]) for r in rows)
    starved = sum(1 for r in rows if r["pending_workloads"] > 0)
    waits = [r for r in rows if not missing(r["wait_seconds_max"])]
    longest = max(waits, key=lambda r: float(r["wait_seconds_max"]), default=None)
    cqs = per_cluster_queue(rows)
    borrowed = sum(float(r["borrowed_gpu_hours"]) for r in cqs)
    borrowers = sum(1 for r in cqs if r["borrowed_gpu_hours"] > 0)
    known = [float(r["reserved_unused_usd"]) for r in cqs if not missing(r["reserved_unused_usd"])]
    unused_hours = sum(float(r["reserved_unused_gpu_hours"]) for r in cqs)
    return [
        kpi(
            "workloads pending in queues",
            f"{pending:,}",
            "queues-pending",
            tone="gw-warn" if pending else "",
            hint=f"not admitted at the window's end, in {starved:,} queue{'s' * (starved != 1)}",
        ),
        kpi(
            "longest wait in a queue",
            duration(longest["wait_seconds_max"]) if longest is not None else NOT_QUEUED,
            "queues-longest-wait",
            tone="gw-warn" if longest is not None and longest["pending_workloads"] else "",
            hint=f"in {longest['queue']}" if longest is not None else "no workload waited",
        ),
        kpi(
            "borrowed GPU-hours",
            num(borrowed),
            "queues-borrowed",
            hint=f"above nominal quota, by {borrowers:,} cluster queue{'s' * (borrowers != 1)}",
        ),
        kpi(
            "reserved but unused $",
            usd(sum(known)) if known or not cqs else "n/a",
            "queues-unused",
            tone="gw-warn" if sum(known) > 0 else "",
            hint=f"{num(unused_hours)} GPU-h of nominal quota no workload used",
        ),
        idle,
    ]


# -- figures' frames ---------------------------------------------------------------------------------------


def borrowing_frame(
    view: View, rows: Sequence[Mapping[str, Any]]
) -> tuple[pd.DataFrame, dict[str, str], str]:
    """The usage rows of the shown queues' cluster queues to draw (at most BORROWING_QUEUES of them: those
    that borrowed, lent and used most), in cohort and name order; their panel titles; and a caption when
    some are left out."""
    usage = _usage(view)
    usage = usage[usage["cluster_queue"].isin({r["cluster_queue"] for r in rows})]
    activity = (
        usage[["borrowed_gpus", "lent_gpus", "used_gpus"]].sum(axis=1).groupby(usage["cluster_queue"]).sum()
    )
    chosen = set(activity.sort_values(ascending=False, kind="stable").index[:BORROWING_QUEUES])
    caption = ""
    if len(activity) > BORROWING_QUEUES:
        caption = (
            f"{BORROWING_QUEUES} of {len(activity):,} cluster queues: those that borrowed, lent and used "
            "most. The download has all."
        )
    drawn = usage[usage["cluster_queue"].isin(chosen)].sort_values(["cohort", "cluster_queue", "timestamp"])
    pending: dict[str, int] = {}
    for r in rows:
        pending[r["cluster_queue"]] = pending.get(r["cluster_queue"], 0) + int(r["pending_workloads"])
    titles = {}
    for cq, cohort in drawn[["cluster_queue", "cohort"]].drop_duplicates().itertuples(index=False):
        parts = [str(cq), f"cohort {cohort}" if cohort else "no cohort"]
        if pending.get(str(cq)):
            parts.append(f"{pending[str(cq)]:,} pending")
        titles[str(cq)] = " · ".join(parts)
    return drawn, titles, caption


def waits_frame(view: View, rows: Sequence[Mapping[str, Any]]) -> tuple[pd.DataFrame, str]:
    """Each wait of the shown queues, labelled by queue (namespace/queue where names repeat), the queues
    that waited longest first (at most WAIT_QUEUES); and a caption when some are left out."""
    waits = view.queue_tables().waits
    keys = {(r["namespace"], r["queue"]) for r in rows}
    waits = waits[[k in keys for k in zip(waits["namespace"], waits["queue"], strict=True)]]
    repeated = {q for q, n in pd.Series([q for _, q in keys]).value_counts().items() if n > 1}
    label = [
        f"{ns}/{q}" if q in repeated else q for ns, q in zip(waits["namespace"], waits["queue"], strict=True)
    ]
    waits = waits.assign(queue=label, hover=[duration(s) for s in waits["wait_seconds"]])
    longest = waits.groupby("queue")["wait_seconds"].max().sort_values(ascending=False, kind="stable")
    order = list(longest.index[:WAIT_QUEUES])
    caption = ""
    if len(longest) > WAIT_QUEUES:
        caption = (
            f"{WAIT_QUEUES} of {len(longest):,} queues: those that waited longest. The download has all."
        )
    shown = waits[waits["queue"].isin(order)]
    rank = {q: i for i, q in enumerate(order)}
    return shown.sort_values("queue", key=lambda s: s.map(rank), kind="stable"), caption


# -- downloads ----------------------------------------------------------------------------------------------


def _view(loaded: Loaded) -> View:
    assert loaded.view is not None
    return loaded.view


# The report's fields of each table, for a download with no rows.
FAIRNESS_FIELDS = tuple(c.key for c in FAIRNESS_COLUMNS)
BLOCKED_FIELDS = tuple(c.key for c in BLOCKED_COLUMNS)


def _rows_frame(rows: Sequence[Mapping[str, Any]], fields: Sequence[str]) -> Export:
    return Export(frame=pd.DataFrame(rows) if rows else pd.DataFrame(columns=list(fields)))


@exporter("queues")
def _export_queues(loaded: Loaded, _filters: Filters, _arg: str) -> Export:
    return _rows_frame(queue_rows(_view(loaded)), tuple(QUEUE_ROWS.columns))


@exporter("queues-fairness")
def _export_fairness(loaded: Loaded, _filters: Filters, _arg: str) -> Export:
    return _rows_frame(fairness_rows(_view(loaded)), FAIRNESS_FIELDS)


@exporter("queues-blocked")
def _export_blocked(loaded: Loaded, _filters: Filters, _arg: str) -> Export:
    return _rows_frame(blocked_rows(_view(loaded)), BLOCKED_FIELDS)


@exporter("queues-reclaim")
def _export_reclaim(loaded: Loaded, _filters: Filters, _arg: str) -> Export:
    return _rows_frame(reclaim_rows(_view(loaded)), tuple(RECLAIM_CANDIDATES.columns))


@exporter("queues-usage")
def _export_usage(loaded: Loaded, _filters: Filters, _arg: str) -> Export:
    view = _view(loaded)
    shown = {r["cluster_queue"] for r in queue_rows(view)}
    usage = _usage(view)
    return Export(frame=usage[usage["cluster_queue"].isin(shown)].reset_index(drop=True))


@exporter("queues-waits")
def _export_waits(loaded: Loaded, _filters: Filters, _arg: str) -> Export:
    view = _view(loaded)
    keys = {(r["namespace"], r["queue"]) for r in queue_rows(view)}
    waits = view.queue_tables().waits
    kept = [k in keys for k in zip(waits["namespace"], waits["queue"], strict=True)]
    return Export(frame=waits[kept].reset_index(drop=True))


# -- the page ------------------------------------------------------------------------------------------------


def _note() -> html.Div:
    return html.Div(
        [html.Strong("No queues. "), NOT_INSTALLED, "."],
        className="gw-info",
        role="status",
        id="queues-not-installed",
    )


def _tables(view: View, query: str) -> list[html.Section]:
    """Fairness (with Kueue), then pending demand beside idle GPUs and the pods worth reclaiming (always:
    they need no Kueue)."""
    tables = []
    if installed(view):
        tables.append(
            table(
                "queues-fairness",
                "Fairness per team",
                FAIRNESS_COLUMNS,
                shown_fairness(fairness_rows(view)),
                empty_text="no team allocated GPUs or has quota",
                query=query,
                note="Dominant-resource fairness, each pool a resource: a team's share of a pool is its "
                "GPU-hours (allocation) or its nominal quota (quota) over all the quota in that pool; the "
                "dominant share is its largest. Fairness ratio: allocation ÷ quota share, above 1 is more "
                "than its share; no quota: the team has none.",
            )
        )
    tables += [
        table(
            "queues-blocked",
            "Pods waiting beside idle GPUs, per pool",
            BLOCKED_COLUMNS,
            shown_blocked(blocked_rows(view)),
            empty_text="no GPU pod is pending and no allocated GPU is idle",
            query=query,
            note="GPU pods pending at the window's end and the GPU-hours they have waited, beside the GPUs "
            "of the same pool allocated to pods idle at the end: what reclaiming them could run.",
        ),
        table(
            "queues-reclaim",
            "Idle pods to reclaim for the pods that wait",
            RECLAIM_COLUMNS,
            shown_reclaim(reclaim_rows(view)),
            limit=RECLAIM_ROWS,
            empty_text="no idle pod holds GPUs of a pool where pods wait",
            query=query,
            note=f"Pods idle for {duration(view.headline['params']['reclaim_after_seconds'])} or more at the "
            "window's end holding GPUs of a pool where GPU pods are pending, with what they cost an hour and "
            "what their idle stretch has cost so far; on borrowed quota: their cluster queue is above its "
            "nominal quota there.",
        ),
    ]
    return tables


def render(search: str | None) -> tuple[Any, ...]:
    filters, loaded = load(search)
    view = loaded.view
    head = (loaded_banner(loaded), as_of(loaded, filters))
    hidden = {"display": "none"}
    if view is None:
        blank = pending_figure(loaded)
        queues = pending_card("Queues", loaded)
        return (*head, pending_note(loaded), None, queues, hidden, blank, "", blank, "", None)
    query = to_query(filters)
    return (*head, *view.drawn(f"queues?{query}", lambda: _draw(view, query)))


def _draw(view: View, query: str) -> tuple[Any, ...]:
    """The page's KPIs, tables and figures of a view: what render() returns after its banner and as-of
    line. Figures as dicts: each is made once per view, and a dict goes out as it is."""
    hidden = {"display": "none"}
    rows = queue_rows(view)
    kpis = _kpis(view, rows)
    if not installed(view):
        blank = figures.empty(NOT_INSTALLED).to_plotly_json()
        return (kpis, _note(), None, hidden, blank, "", blank, "", _tables(view, query))
    queues = table(
        "queues",
        "Queues",
        QUEUE_COLUMNS,
        shown_queues(rows),
        empty_text="no queue of the filtered teams or pools",
        query=query,
        note="One row per LocalQueue. Quota, used, borrowed, lent and unused quota are its cluster queue's, "
        "over all its pools, in GPU-equivalents; unused quota is nominal quota no workload used, at the "
        "pool's price. Admitted: in the window; pending: not admitted at its end; waits: from creation "
        "to admission, or so far for those still pending.",
    )
    usage, titles, usage_caption = borrowing_frame(view, rows)
    waits, waits_caption = waits_frame(view, rows)
    return (
        kpis,
        None,
        queues,
        {},
        figures.queue_borrowing(usage, titles).to_plotly_json(),
        usage_caption,
        figures.wait_distribution(waits).to_plotly_json(),
        waits_caption,
        _tables(view, query),
    )


@callback(
    Output(ids.QUEUES_BANNER, "children"),
    Output(ids.QUEUES_AS_OF, "children"),
    Output(ids.QUEUES_KPIS, "children"),
    Output(ids.QUEUES_KUEUE_NOTE, "children"),
    Output(ids.QUEUES_TABLE, "children"),
    Output(ids.QUEUES_CHARTS, "style"),
    Output(ids.QUEUES_BORROWING, "figure"),
    Output(ids.QUEUES_BORROWING_SHOWN, "children"),
    Output(ids.QUEUES_WAITS, "figure"),
    Output(ids.QUEUES_WAITS_SHOWN, "children"),
    Output(ids.QUEUES_TABLES, "children"),
    Output(rendered_id(ids.QUEUES_BANNER), "data"),
    Input(ids.URL, "search"),
    Input(ids.REFRESH, "n_intervals"),
    Input(ids.PENDING, "data"),
    running=POLL_PAUSED,
)
def update(search: str | None, _n: int, _pending: object) -> tuple[Any, ...]:
    return draw(lambda: render(search))
