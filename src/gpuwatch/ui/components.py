"""Blocks every page uses: number formats, KPI tiles, tables with downloads, the stale-data banner."""

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from html import escape
from typing import Any, cast

import flask
import pandas as pd
import plotly.graph_objects as go
from dash import Output, ctx, dcc, html, no_update
from dash.exceptions import MissingCallbackContextException

from gpuwatch.core.errors import SourceError
from gpuwatch.core.model import Window
from gpuwatch.read.analysis import low_coverage_warning
from gpuwatch.ui import figures, ids
from gpuwatch.ui.data import Loaded, Outage, Timed, View, ViewStore, Waiting, age_text, window_text
from gpuwatch.ui.filters import Filters, parse_query
from gpuwatch.ui.memory import released_after

STORE_KEY = "GPUWATCH_VIEW_STORE"
TABLE_ROWS = 50  # rows shown per table; downloads carry them all
NODE_ROWS = 40  # nodes drawn in a per-node figure (a browser draws 10,000 GPUs slowly); downloads carry all
# Every page callback's `running`: the progress tick pauses while the page is drawn, as Dash drops the
# answer of a callback still running when its inputs change again (a tick would swallow a slow draw).
POLL_PAUSED = [(Output(ids.POLL, "disabled"), True, False)]


def current_store() -> ViewStore:
    """The ViewStore of the app serving the current request (callbacks run inside Flask). The first call
    of a request notes how many computations had ended then (rendered())."""
    store = flask.current_app.config[STORE_KEY]
    assert isinstance(store, ViewStore)
    if flask.has_request_context() and _GENERATION not in flask.g:
        setattr(flask.g, _GENERATION, store.progress()[0])
    return store


_GENERATION = "gpuwatch_generation"
_INCOMPLETE = "gpuwatch_incomplete"


def incomplete(state: Loaded | Timed | None) -> None:
    """Note, for rendered(), that the page draws something still being computed, or failing (None: what
    it adds to a view, not there yet)."""
    missing = state is None or state.waiting is not None or state.outage is not None
    if missing and flask.has_request_context():
        setattr(flask.g, _INCOMPLETE, True)


def rendered() -> dict[str, Any]:
    """What a page's callback drew, for the progress tick (app.py): whether anything was missing (still
    being computed, or failing) and how many computations had ended when it started. A page drawn whole is
    not drawn again until its URL changes or the refresh comes."""
    return {"generation": flask.g.get(_GENERATION), "incomplete": bool(flask.g.get(_INCOMPLETE, False))}


def polled() -> bool:
    """Whether the running callback was triggered by the shell's progress tick alone (ids.PENDING): the page
    is drawn again to show progress, and tries a failed computation again only after its backoff
    (ViewStore: a page opened or refreshed tries again at once)."""
    try:
        triggered = list(ctx.triggered_prop_ids.values())
    except MissingCallbackContextException:
        return False
    return bool(triggered) and all(t == ids.PENDING for t in triggered)


def draw(render: Callable[[], tuple[Any, ...]]) -> tuple[Any, ...]:
    """A page callback's outputs: render()'s (the banner first), then rendered(). A source failing while
    the page reads what it draws (the recorded path reads a view's detail as it is drawn) is a banner
    saying so; the rest of the page stays as it was, and the next refresh tries again."""
    try:
        with released_after():
            drawn = render()
        return (*drawn, rendered())
    except SourceError as e:
        outage = current_store().read_failed(e)
        incomplete(None)
        said = html.Div(
            [
                html.Strong("Data source failing"),
                f" since {outage.since:%H:%M:%S} UTC: {outage.message}",
                html.Br(),
                "This page keeps what it showed; it refreshes by itself when the source is back.",
            ],
            className="gw-banner",
            role="alert",
        )
        return (said, *([no_update] * (len(ctx.outputs_list) - 2)), rendered())


def load(search: str | None) -> tuple[Filters, Loaded]:
    """The filters in the URL and the view they ask for (or what it waits for: Loaded.waiting)."""
    filters = parse_query(search)
    loaded = current_store().load(filters, polled=polled())
    incomplete(loaded)
    return filters, loaded


# -- numbers: the same formats as `gpuwatch report --format table` ------------------------------------


def missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def usd(value: Any) -> str:
    return "n/a" if missing(value) else f"${float(value):,.2f}"


def pct(value: Any) -> str:
    return "n/a" if missing(value) else f"{float(value):.1%}"


def num(value: Any) -> str:
    return "n/a" if missing(value) else f"{float(value):,.2f}"


def kwh(value: Any) -> str:
    return "n/a" if missing(value) else f"{float(value):,.1f} kWh"


def whole(value: Any) -> str:
    return "n/a" if missing(value) else f"{float(value):,.0f}"


def change(value: Any) -> str:
    """A relative change as a signed percentage ("+12%"); "—" when there is nothing to compare with. A
    change that rounds to nothing reads "+0%", never "-0%"."""
    return "—" if missing(value) else _unsigned_zero(f"{float(value):+.0%}")


def points(value: Any) -> str:
    """A difference of two ratios in percentage points ("+3.2 pp"); "—" when unknown."""
    return "—" if missing(value) else _unsigned_zero(f"{float(value) * 100:+.1f} pp")


def _unsigned_zero(text: str) -> str:
    return "+" + text[1:] if text.startswith("-") and not any(c in "123456789" for c in text) else text


def when(value: Any) -> str:
    """An ISO time (or Timestamp) as "2026-11-19 14:30 UTC"; "-" when absent."""
    if missing(value) or value == "":
        return "-"
    return f"{pd.Timestamp(value).tz_convert('UTC'):%Y-%m-%d %H:%M} UTC"


FORMATS: Mapping[str, Callable[[Any], str]] = {
    "usd": usd,
    "pct": pct,
    "num": num,
    "int": whole,
    "change": change,
    "pp": points,
    "time": when,
    "text": lambda v: "" if missing(v) else str(v),
    "tag": lambda v: "" if missing(v) else str(v),
}


# -- tiles, tables, banner ------------------------------------------------------------------------------


def records(frame: pd.DataFrame) -> list[dict[str, Any]]:
    """The rows of a frame as dicts keyed by column name."""
    return cast(list[dict[str, Any]], frame.to_dict("records"))


NOT_PER_TEAM = "free, stranded and broken GPUs belong to no team"


def capacity_kpi(
    filters: Filters, label: str, value: str, kpi_id: str, *, tone: str = "", hint: str = ""
) -> html.Div:
    """A KPI about capacity states, shown as n/a under a team filter (they belong to no team)."""
    if filters.teams:
        return kpi(label, "n/a", kpi_id, hint=NOT_PER_TEAM)
    return kpi(label, value, kpi_id, tone=tone, hint=hint)


def kpi(label: str, value: str, kpi_id: str, *, tone: str = "", hint: str = "") -> html.Div:
    """A headline number with its label; `tone` colours it (waste, ok, bad)."""
    return html.Div(
        [
            html.Div(value, className="gw-kpi-value", id=f"kpi-{kpi_id}"),
            html.Div(label, className="gw-kpi-label"),
            html.Div(hint, className="gw-kpi-hint") if hint else None,
        ],
        className=f"gw-kpi {tone}".strip(),
        title=hint or None,
    )


@dataclass(frozen=True, slots=True)
class Markup:
    """A cell's content as HTML (escaped by whoever made it): a table draws it inside its one HTML
    component (table()), not as components of its own, which cost Dash's renderer about a millisecond
    each in the browser."""

    html: str

    def component(self) -> dcc.Markdown:
        return dcc.Markdown(self.html, dangerously_allow_html=True, dedent=False)


def two_lines(value: str, detail: str, *, alert: bool = False) -> Markup:
    """A numeric cell's value over a muted line that qualifies it (red when `alert`): one column, not two."""
    detail_class = "gw-alert-detail" if alert else "gw-muted"
    return Markup(
        f'<div class="gw-two-lines"><div>{escape(value)}</div>'
        f'<div class="{detail_class}">{escape(detail)}</div></div>'
    )


@dataclass(frozen=True, slots=True)
class Column:
    """A table column: row key, header, format (usd, pct, num, int, change, pp, time, text, tag) and an
    optional link."""

    key: str
    label: str
    kind: str = "text"
    href: Callable[[Mapping[str, Any]], str] | None = None

    @property
    def numeric(self) -> bool:
        return self.kind in ("usd", "pct", "num", "int", "change", "pp")

    def cell_class(self, value: Any) -> str:
        """The CSS class of a cell holding `value` ("" for none): numbers align right, tags are coloured."""
        return "n" if self.numeric else (f"gw-tag gw-tag-{value}" if self.kind == "tag" else "")


def _cell(column: Column, row: Mapping[str, Any], query: str) -> html.Td:
    value = row.get(column.key)
    if isinstance(value, html.Div | dcc.Graph):
        content: Any = value
    elif isinstance(value, Markup):
        content = value.component()
    else:
        content = FORMATS[column.kind](value)
        if column.href is not None:
            content = dcc.Link(content, href=column.href(row) + query)
    attributes: dict[str, Any] = {"data-col": column.key}
    return html.Td(content, className=column.cell_class(value) or None, **attributes)


def _html_table(
    table_id: str, columns: Sequence[Column], rows: Sequence[Mapping[str, Any]], query: str
) -> dcc.Markdown:
    """The table as one component holding its HTML: the browser draws a table of text cells as fast as
    any page, where a component per cell costs Dash's renderer about a millisecond each."""

    def cell(column: Column, row: Mapping[str, Any]) -> str:
        value = row.get(column.key)
        if isinstance(value, Markup):
            text = value.html
        else:  # a blank line would end the HTML
            text = escape(" ".join(FORMATS[column.kind](value).splitlines()))
        if column.href is not None:
            text = f'<a href="{escape(column.href(row) + query)}">{text}</a>'
        classes = column.cell_class(value)
        css = f' class="{escape(classes)}"' if classes else ""
        return f'<td{css} data-col="{escape(column.key)}">{text}</td>'

    numeric = ' class="n"'
    head = "".join(f"<th{numeric if c.numeric else ''}>{escape(c.label)}</th>" for c in columns)
    body = "".join("<tr>" + "".join(cell(c, r) for c in columns) + "</tr>" for r in rows)
    markup = (
        f'<table class="gw-table" id="{escape(table_id)}"><thead><tr>{head}</tr></thead>'
        f"<tbody>{body}</tbody></table>"
    )
    return dcc.Markdown(markup, dangerously_allow_html=True, dedent=False)


def download_buttons(name: str, arg: str = "") -> html.Div:
    """CSV and Parquet buttons for the table `name` (served by the shell's download callback)."""
    return html.Div(
        [
            html.Button(
                label,
                id={"type": ids.DOWNLOAD_BUTTON, "table": name, "fmt": fmt, "arg": arg},
                className="gw-button",
                title=f"download all rows as {label}",
                n_clicks=0,
            )
            for fmt, label in (("csv", "CSV"), ("parquet", "Parquet"))
        ],
        className="gw-downloads",
    )


def table(
    name: str,
    title: str,
    columns: Sequence[Column],
    rows: Sequence[Mapping[str, Any]],
    *,
    arg: str = "",
    limit: int = TABLE_ROWS,
    empty_text: str = "nothing to show",
    note: str = "",
    downloadable: bool = True,
    query: str = "",
    total: int | None = None,
    more: str = "",
) -> html.Section:
    """A titled table with CSV/Parquet downloads; long tables show their first `limit` rows.

    `query` (the page's filters) is appended to links, so following one keeps the filters. `total`: how
    many rows the whole table has, when `rows` holds only its first ones; `more` says so in other words.
    """
    shown = rows[:limit]
    total = len(rows) if total is None else total
    if any(isinstance(r.get(c.key), html.Div | dcc.Graph) for r in shown for c in columns):
        head = html.Thead(html.Tr([html.Th(c.label, className="n" if c.numeric else None) for c in columns]))
        body = html.Tbody([html.Tr([_cell(c, r, query) for c in columns]) for r in shown])
        drawn: Any = html.Table([head, body], className="gw-table", id=ids.table_id(name))
    else:
        drawn = _html_table(ids.table_id(name), columns, shown, query)
    if not more and total > len(shown):
        more = f"showing {len(shown)} of {total:,} rows; downloads carry all of them"
    return html.Section(
        [
            html.Div(
                [
                    html.H2(title),
                    download_buttons(name, arg) if downloadable else None,
                ],
                className="gw-section-head",
            ),
            html.P(note, className="gw-muted gw-note") if note else None,
            html.Div(
                drawn if rows else html.P(empty_text, className="gw-empty", id=ids.table_id(name)),
                className="gw-table-wrap",
            ),
            html.P(more, className="gw-muted gw-note") if more else None,
        ],
        className="gw-card",
    )


def banner(
    outage: Outage | None, shown: Window | None, computed_at: datetime | None, waiting: Waiting | None = None
) -> html.Div | None:
    """The stale-data banner: which source fails (or, past the dashboard's deadline, which has not answered)
    since when, what the page shows instead, and what a new try waits for (`waiting`)."""
    if outage is None:
        return None
    now = datetime.now(UTC)
    lines: list[Any] = [
        html.Strong("Still waiting" if outage.late else "Data source failing"),
        f" since {outage.since:%H:%M:%S} UTC ({age_text(outage.since, now)}): {outage.message}",
        html.Br(),
    ]
    back = "when the source answers" if outage.late else "when the source is back"
    if shown is not None and computed_at is not None:
        lines.append(
            f"Showing the last good data, fetched {computed_at:%Y-%m-%d %H:%M:%S} UTC, "
            f"for {window_text(shown)}. It refreshes by itself {back}."
        )
    elif outage.late:
        lines.append(f"Nothing was fetched yet; this page fills in {back}.")
    else:
        lines.append(f"No data was fetched before the failure; this page fills in {back}.")
    if waiting is not None and not outage.late:
        lines += [html.Br(), f"Trying again: {waiting.text}."]
    return html.Div(lines, className="gw-banner", role="alert")


def late_cluster_banners(waiting: Waiting | None) -> list[html.Div]:
    """One banner per cluster of several whose source has not answered by the dashboard's deadline: the
    page waits for it (up to that source's own deadline), then shows the other clusters without it."""
    if waiting is None:
        return []
    return [
        html.Div(
            [
                html.Strong(f"Cluster {w.cluster} not answering."),
                f" {waiting.unanswered(w)}. When it is given up, this page shows the other clusters "
                "without it (their numbers complete).",
            ],
            className="gw-banner",
            role="alert",
            id=f"cluster-late-{w.cluster}",
        )
        for w in waiting.late_clusters
    ]


def updating_note(waiting: Waiting | None, view: View | None) -> html.Div | None:
    """While the page shows older data and the view it asks for is being computed: what that waits for."""
    if waiting is None or view is None:
        return None
    return html.Div(
        [
            html.Strong("Updating: "),
            f"{waiting.text}. Meanwhile the data computed {view.computed_at:%H:%M:%S} UTC "
            f"for {window_text(view.window)}.",
        ],
        className="gw-updating",
        role="status",
        id="updating-note",
    )


def coverage_banner(report: Mapping[str, Any] | None) -> html.Div | None:
    """Says how much telemetry the window lacks when it is under-covered (SPEC §3 coverage): the GPU-hours
    without it are allocated · unknown on every chart, never active or idle."""
    warning = low_coverage_warning(report["coverage"]["warnings"]) if report is not None else None
    if warning is None:
        return None
    return html.Div(
        [
            html.Strong("Low telemetry coverage."),
            f" {warning[0].upper()}{warning[1:]}. ",
            html.A("Fleet health", href="/health"),
            " shows which nodes and GPUs report nothing.",
        ],
        className="gw-banner",
        role="status",
        id="coverage-banner",
    )


def cluster_banners(report: Mapping[str, Any] | None) -> list[html.Div]:
    """One banner per cluster of the fleet whose API server could not be read: its GPUs are missing from
    every number on the page (never counted as free), the other clusters' are whole."""
    down = [c for c in (report or {}).get("clusters", []) if c.get("error")]
    return [
        html.Div(
            [
                html.Strong(f"Cluster {c['cluster']} not read."),
                f" {c['error']}. Its GPUs are left out of this page; "
                "the other clusters' numbers are complete.",
            ],
            className="gw-banner",
            role="alert",
            id=f"cluster-banner-{c['cluster']}",
        )
        for c in down
    ]


def history_banner(view: View | None) -> html.Div | None:
    """Names the stretches of the window without recorded history: drawn as gaps, counted nowhere."""
    gaps = view.history_gaps() if view is not None else []
    if not gaps:
        return None
    return html.Div(
        [
            html.Strong("History missing for part of the window."),
            " ",
            "; ".join(f"{g[0].upper()}{g[1:]}" for g in gaps[:3])
            + (f"; and {len(gaps) - 3} more" if len(gaps) > 3 else ""),
            ". The charts break there; no missing hour is counted as free or idle.",
        ],
        className="gw-banner",
        role="status",
        id="history-banner",
    )


def banners(outage: Outage | None, view: View | None, waiting: Waiting | None = None) -> html.Div | None:
    """The banners above a page: a failing or unanswering source (stale data), what the page waits for
    while it shows older data, too little telemetry in the window, and stretches without recorded
    history."""
    shown = [
        banner(outage, view.window if view else None, view.computed_at if view else None, waiting),
        *late_cluster_banners(waiting),
        updating_note(waiting, view) if outage is None else None,
        *cluster_banners(view.headline if view else None),
        coverage_banner(view.headline if view else None),
        history_banner(view),
    ]
    present = [b for b in shown if b is not None]
    return html.Div(present) if present else None


def loaded_banner(loaded: Loaded) -> html.Div | None:
    return banners(loaded.outage, loaded.view, loaded.waiting)


def as_of(loaded: Loaded, filters: Filters) -> str:
    """The line under a page title: window, scope, and when it was computed."""
    view = loaded.view
    if view is None:
        state = "waiting for data" if loaded.waiting is not None else "no data"
        if loaded.requested is None:
            return state
        return f"{window_text(loaded.requested)} · {filters.describe()} · {state}"
    text = (
        f"{window_text(view.window)} · {filters.describe()} · {view.read_path.describe()} · "
        f"computed {view.computed_at:%H:%M:%S} UTC"
    )
    return text + (f" · the ledger shows the team's GPUs only ({NOT_PER_TEAM})" if filters.teams else "")


def page(title: str, subtitle: str, *children: Any, as_of_id: str, banner_id: str) -> html.Div:
    """A page: title, what it answers, the as-of line, the banner slot, then its content (and the store its
    callback says what it drew in: rendered_id)."""
    return html.Div(
        [
            html.Div(
                [html.H1(title), html.P(subtitle, className="gw-subtitle")],
                className="gw-page-head",
            ),
            html.P(id=as_of_id, className="gw-muted gw-as-of"),
            html.Div(id=banner_id),
            *children,
            dcc.Store(id=rendered_id(banner_id)),
        ]
    )


def rendered_id(banner_id: str) -> dict[str, str]:
    """The id of the store a page's callback writes rendered() into (named by its banner's id)."""
    return {"type": ids.RENDERED, "page": banner_id}


def first_nodes(
    frame: pd.DataFrame, rank: "pd.Series[float]", *, why: str, limit: int = NODE_ROWS
) -> tuple[pd.DataFrame, str]:
    """frame (rows of nodes in drawing order, `node` column) narrowed to the `limit` nodes ranked highest
    by `rank` (per node; ties keep the drawing order), still in drawing order, and a caption saying so
    ("" when every node is drawn)."""
    nodes = list(dict.fromkeys(frame["node"]))
    if len(nodes) <= limit:
        return frame, ""
    order = pd.Series(range(len(nodes)), index=nodes)
    ranked = pd.DataFrame({"rank": rank.reindex(nodes).fillna(0.0), "order": order})
    chosen = set(ranked.sort_values(["rank", "order"], ascending=[False, True]).index[:limit])
    caption = f"{limit:,} of {len(nodes):,} nodes: {why}. Narrow with the pool filter; the download has all."
    return frame[frame["node"].isin(chosen)], caption


def graph(
    graph_id: str, title: str, *, note: str = "", height: int = 360, download: str = "", shown_id: str = ""
) -> html.Section:
    """A titled card holding a dcc.Graph filled by a callback, with the table `download` names and a line
    `shown_id` a callback fills when the figure draws part of it (first_nodes)."""
    return html.Section(
        [
            html.Div(
                [html.H2(title), download_buttons(download) if download else None],
                className="gw-section-head",
            ),
            html.P(note, className="gw-muted gw-note") if note else None,
            html.P(id=shown_id, className="gw-muted gw-note") if shown_id else None,
            dcc.Loading(
                dcc.Graph(
                    id=graph_id,
                    config={"displaylogo": False, "responsive": True},
                    style={"minHeight": f"{height}px"},
                ),
                type="dot",
                delay_show=400,
            ),
        ],
        className="gw-card",
    )


# -- cards without their data yet ------------------------------------------------------------------------


def pending_text(state: Loaded | Timed) -> str:
    """What a card without its data says: what it waits for ("waiting for Prometheus at … · 6 s"), or why
    there is nothing (never an empty chart)."""
    if state.waiting is not None:
        return state.waiting.text
    if state.outage is not None:
        return "no data: the source is failing (see above)"
    return "no data yet"


def pending_figure(state: Loaded | Timed, *, height: int = 240) -> go.Figure:
    """An empty figure saying what it waits for."""
    return figures.empty(pending_text(state), height=height)


def pending_note(state: Loaded | Timed) -> html.P:
    """The KPI tiles' place while they wait: what for, across the whole row."""
    return html.P(pending_text(state), className="gw-empty gw-pending")


def pending_card(title: str, state: Loaded | Timed) -> html.Section:
    """A table's card while it waits: its title and what it waits for."""
    return html.Section(
        [
            html.Div([html.H2(title)], className="gw-section-head"),
            html.P(pending_text(state), className="gw-empty gw-pending"),
        ],
        className="gw-card",
    )
