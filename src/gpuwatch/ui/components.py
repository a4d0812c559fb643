"""Blocks every page uses: number formats, KPI tiles, tables with downloads, the stale-data banner."""

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from html import escape
from typing import Any, cast

import flask
import pandas as pd
from dash import dcc, html

from gpuwatch.analysis import low_coverage_warning
from gpuwatch.model import Window
from gpuwatch.ui import ids
from gpuwatch.ui.data import Loaded, Outage, View, ViewStore, age_text, window_text
from gpuwatch.ui.filters import Filters, parse_query

STORE_KEY = "GPUWATCH_VIEW_STORE"
TABLE_ROWS = 50  # rows shown per table; downloads carry them all
NODE_ROWS = 40  # nodes drawn in a per-node figure (a browser draws 10,000 GPUs slowly); downloads carry all


def current_store() -> ViewStore:
    """The ViewStore of the app serving the current request (callbacks run inside Flask)."""
    store = flask.current_app.config[STORE_KEY]
    assert isinstance(store, ViewStore)
    return store


def load(search: str | None) -> tuple[Filters, Loaded]:
    """The filters in the URL and the view they ask for."""
    filters = parse_query(search)
    return filters, current_store().load(filters)


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


def banner(outage: Outage | None, shown: Window | None, computed_at: datetime | None) -> html.Div | None:
    """The stale-data banner: which source fails since when, and what the page shows instead."""
    if outage is None:
        return None
    now = datetime.now(UTC)
    lines: list[Any] = [
        html.Strong("Data source failing"),
        f" since {outage.since:%H:%M:%S} UTC ({age_text(outage.since, now)}): {outage.message}",
        html.Br(),
    ]
    if shown is not None and computed_at is not None:
        lines.append(
            f"Showing the last good data, fetched {computed_at:%Y-%m-%d %H:%M:%S} UTC, "
            f"for {window_text(shown)}. It refreshes by itself when the source is back."
        )
    else:
        lines.append("No data was fetched before the failure; this page fills in when the source is back.")
    return html.Div(lines, className="gw-banner", role="alert")


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


def banners(outage: Outage | None, view: View | None) -> html.Div | None:
    """The banners above a page: a failing source (stale data), too little telemetry in the window, and
    stretches without recorded history."""
    shown = [
        banner(outage, view.window if view else None, view.computed_at if view else None),
        *cluster_banners(view.headline if view else None),
        coverage_banner(view.headline if view else None),
        history_banner(view),
    ]
    present = [b for b in shown if b is not None]
    return html.Div(present) if present else None


def loaded_banner(loaded: Loaded) -> html.Div | None:
    return banners(loaded.outage, loaded.view)


def as_of(loaded: Loaded, filters: Filters) -> str:
    """The line under a page title: window, scope, and when it was computed."""
    view = loaded.view
    if view is None:
        return f"{window_text(loaded.requested)} · no data" if loaded.requested else "no data"
    text = (
        f"{window_text(view.window)} · {filters.describe()} · {view.read_path.describe()} · "
        f"computed {view.computed_at:%H:%M:%S} UTC"
    )
    return text + (f" · the ledger shows the team's GPUs only ({NOT_PER_TEAM})" if filters.teams else "")


def page(title: str, subtitle: str, *children: Any, as_of_id: str, banner_id: str) -> html.Div:
    """A page: title, what it answers, the as-of line, the banner slot, then its content."""
    return html.Div(
        [
            html.Div(
                [html.H1(title), html.P(subtitle, className="gw-subtitle")],
                className="gw-page-head",
            ),
            html.P(id=as_of_id, className="gw-muted gw-as-of"),
            html.Div(id=banner_id),
            *children,
        ]
    )


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
