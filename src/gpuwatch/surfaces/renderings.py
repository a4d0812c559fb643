"""The report's renderings: table, json, csv, parquet, html — the same numbers in each — and the
showback tables and rounding that csv, parquet and the UI's downloads share."""

import html
import io
import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

from gpuwatch.core.errors import ConfigError
from gpuwatch.core.model import LEDGER_STATES
from gpuwatch.read.analysis import CLUSTER_COLUMNS, low_coverage_warning
from gpuwatch.surfaces.report import (
    _WORKLOAD_NUMBERS,
    _WORKLOAD_TEXT,
    ENERGY,
    IDLE_SPLIT,
    Report,
    group_rows,
)

FORMATS = ("table", "json", "csv", "parquet", "html")
SOURCE_RAW = "raw (DCGM series and the Kubernetes API, recomputed)"
SOURCE_HISTORY = "history (gpuwatch_* series recorded by `gpuwatch export`)"


def render(report: Report, fmt: str, *, group_by: str = "team", source: str = "") -> bytes:
    """Render the report; parquet is binary, every other format UTF-8 text.

    source: which path computed it (SOURCE_RAW or SOURCE_HISTORY), named in the table and html output.
    """
    if fmt == "json":
        return _json_text(report).encode()
    if fmt in ("csv", "parquet"):
        return frame_bytes(showback(report, group_by), fmt)
    if fmt == "table":
        return render_table(report, group_by=group_by, source=source).encode()
    if fmt == "html":
        return render_html(report, group_by=group_by, source=source).encode()
    raise ConfigError(f"--format must be one of {', '.join(FORMATS)}, got {fmt!r}")


def detail_written(fmt: str, *, group_by: str = "team") -> str:
    """The finest rows render(fmt, group_by) writes (history.read_history's detail): the JSON report
    holds every workload, the HTML one its top idle workloads; a table, CSV or Parquet file only the rows
    of its group (and the fleet's), team and pool rows alike read at team detail."""
    if fmt in ("json", "html") or group_by == "workload":
        return "workload"
    return "namespace" if group_by == "namespace" else "team"


def _json_default(value: object) -> object:
    raise TypeError(f"not JSON serializable: {type(value).__name__}")


def _json_text(report: Report) -> str:
    """The report as indented JSON with each row of its tables on one line: rows go through json's C
    encoder, which indent= turns off (a month of ~50,000 workloads renders in half the time)."""

    def dumps(value: object, **kwargs: Any) -> str:
        return json.dumps(value, allow_nan=False, default=_json_default, **kwargs)

    def member(key: str, value: object) -> str:
        if isinstance(value, list) and value:
            rows = ",\n".join(f"    {dumps(row)}" for row in value)
            return f"  {dumps(key)}: [\n{rows}\n  ]"
        return f"  {dumps(key)}: {dumps(value, indent=2).replace(chr(10), chr(10) + '  ')}"

    return "{\n" + ",\n".join(member(k, v) for k, v in report.items()) + "\n}\n"


CURRENCY = "USD"
# Decimals a number means, by column: GPU-hours to the thousandth (a MIG slice-minute is 0.0024), money to
# the cent, a price per GPU-hour to the hundredth of a cent (a time-sliced T4 replica costs $0.0875),
# ratios to the hundredth of a percent, GPU counts to the thousandth (a MIG instance is 1/7).
_DECIMALS_BY_SUFFIX = (
    ("_gpu_hours", 3),
    ("_kwh", 3),
    ("usd_per_gpu_hour", 4),
    ("_usd", 2),
    ("_ratio", 4),
    ("_ge", 3),
    ("_seconds", 1),
    ("_gpus", 3),
    ("_share", 4),
)
_DECIMALS_BY_NAME = {
    "efficiency": 4,
    "allocation_rate": 4,
    "utilization": 4,
    "coverage": 4,
    "gpus": 3,
    "largest_free_block": 3,
}


def rounded(frame: pd.DataFrame) -> pd.DataFrame:
    """The frame's numbers rounded to what they mean (by column name, see _DECIMALS_BY_SUFFIX): what
    downloads and showback files carry. Unknown (NaN) stays unknown."""
    out = frame.copy()
    for column in out.columns:
        if not pd.api.types.is_float_dtype(out[column]):
            continue
        name = str(column)
        decimals = _DECIMALS_BY_NAME.get(name) or next(
            (d for suffix, d in _DECIMALS_BY_SUFFIX if name.endswith(suffix)), None
        )
        if decimals is not None:
            out[column] = out[column].round(decimals)
    return out


def showback(report: Report, group_by: str) -> pd.DataFrame:
    """One group of the report as a showback table: every row carries the window, the price per
    GPU-hour it was charged at and the currency, numbers rounded to what they mean.

    usd_per_gpu_hour: the pool's price for pool and workload rows; for team and namespace rows, which
    span pools, the effective rate cost_usd / allocated_gpu_hours (empty when nothing was allocated).
    """
    rows = group_rows(report, group_by)
    frame = pd.DataFrame(rows, columns=_COLUMNS[group_by])
    for column in frame.columns:
        if column in ("gpus", "nodes", "pods"):
            continue
        if frame[column].map(lambda v: v is None or isinstance(v, float | int)).all() and len(frame):
            frame[column] = frame[column].astype("float64")
    if "usd_per_gpu_hour" not in frame.columns:
        if group_by == "workload":
            prices = {p["pool"]: p.get("usd_per_gpu_hour") for p in report["pools"]}
            rate = frame["pool"].map(prices)
        else:
            allocated = frame["allocated_gpu_hours"].astype("float64")
            rate = frame["cost_usd"].astype("float64") / allocated.where(allocated > 0)
        frame["usd_per_gpu_hour"] = pd.to_numeric(rate, errors="coerce").astype("float64")
    frame.insert(0, "window_end", report["window"]["end"])
    frame.insert(0, "window_start", report["window"]["start"])
    frame["currency"] = CURRENCY
    return rounded(frame)


def frame_bytes(frame: pd.DataFrame, fmt: str) -> bytes:
    """A table as a CSV or Parquet file."""
    if fmt == "csv":
        return frame.to_csv(index=False).encode()
    if fmt == "parquet":
        buffer = io.BytesIO()
        frame.to_parquet(buffer, index=False)
        return buffer.getvalue()
    raise ConfigError(f"a table downloads as csv or parquet, not {fmt!r}")


_USAGE = [
    "allocated_gpu_hours",
    "used_gpu_hours",
    "idle_gpu_hours",
    "unknown_gpu_hours",
    "efficiency",
    "cost_usd",
    "waste_usd",
    "pods",
]
_COLUMNS = {
    "team": ["team", *_USAGE, *IDLE_SPLIT, *ENERGY, "budget_usd", "forecast_month_usd"],
    "namespace": ["namespace", "team", *_USAGE, *ENERGY],
    "workload": [
        *_WORKLOAD_TEXT,
        *_WORKLOAD_NUMBERS,
        "idle_since",
        "recommendation_kind",
        "recommendation_target",
        "monthly_savings_usd",
        "recommendation_reason",
    ],
    "cluster": list(CLUSTER_COLUMNS),
    "pool": [
        "pool",
        "vendor",
        "nodes",
        "gpus",
        "allocation_rate",
        "utilization",
        "fragmentation_ratio",
        "largest_free_block",
        "stranded_gpu_hours",
        "stranded_cost_usd",
        "taints",
        "usd_per_gpu_hour",
    ],
}


_TEXT_COLUMNS = frozenset(
    {"cluster", "namespace", "pod", "team", "pool", "vendor", "node", "taints", "idle_since", "error"}
) | {f"recommendation_{k}" for k in ("kind", "target", "reason")}


def _fmt(value: Any, kind: str = "") -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    if kind == "usd":
        return f"${value:,.2f}"
    if kind == "pct":
        return f"{value:.1%}"
    if isinstance(value, float):
        return f"{value:,.2f}"
    return str(value)


def _kind(column: str) -> str:
    if column.endswith("_usd"):
        return "usd"
    if column in ("efficiency", "allocation_rate", "utilization", "fragmentation_ratio"):
        return "pct"
    return ""


def _aligned(
    headers: Sequence[str], rows: Sequence[Sequence[str]], *, text: Sequence[int] = (0,)
) -> list[str]:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]

    def line(cells: Sequence[str]) -> str:
        # Names left, numbers right, as a reader scans them.
        return "  ".join(
            c.ljust(w) if i in text else c.rjust(w)
            for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        ).rstrip()

    return [line(headers), line(["-" * w for w in widths]), *(line(r) for r in rows)]


def render_table(report: Report, *, group_by: str = "team", top: int = 15, source: str = "") -> str:
    """A terminal report: window, fleet ledger with dollars, KPIs, and the top groups by waste."""
    fleet = report["fleet"]
    window = report["window"]
    capacity = fleet["capacity_gpu_hours"]
    out = [
        f"gpuwatch report  {window['start']} .. {window['end']}  (step {window['step_seconds']} s)",
        *([f"source: {source}"] if source else []),
        f"fleet: {fleet['gpus']} GPUs, {_fmt(capacity)} GPU-hours of capacity",
        *[f"warning: {w}" for w in _low_coverage(report)],
        "",
    ]
    ledger_rows = [
        [
            state,
            _fmt(fleet["ledger_gpu_hours"][state]),
            _fmt(_share(fleet["ledger_gpu_hours"][state], capacity), "pct"),
        ]
        for state in LEDGER_STATES
    ]
    out += _aligned(["ledger", "GPU-hours", "share"], ledger_rows)
    out += [
        "",
        f"allocated {_fmt(fleet['allocated_gpu_hours'])} GPU-h, used {_fmt(fleet['used_gpu_hours'])} GPU-h, "
        f"efficiency {_fmt(fleet['efficiency'], 'pct')}, "
        f"allocation rate {_fmt(fleet['allocation_rate'], 'pct')}",
        f"cost {_fmt(fleet['cost_usd'], 'usd')}, idle waste {_fmt(fleet['waste_usd'], 'usd')}, "
        f"unallocated {_fmt(fleet['unallocated_cost_usd'], 'usd')}, "
        f"stranded {_fmt(fleet['stranded_cost_usd'], 'usd')}",
        "",
    ]
    columns = _COLUMNS[group_by]
    rows = group_rows(report, group_by)[:top]
    text = tuple(i for i, c in enumerate(columns) if i == 0 or c in _TEXT_COLUMNS)
    out += _aligned(columns, [[_fmt(r.get(c), _kind(c)) for c in columns] for r in rows], text=text)
    out += _pending_lines(report["pending"], top=top)
    out += _queue_lines(report)
    coverage = report["coverage"]
    expected = coverage["gpu_samples_expected"]
    out += [
        "",
        f"coverage: {coverage['gpu_samples_present']:,} of {expected:,} GPU-samples present"
        f" ({_fmt(_share(coverage['gpu_samples_present'], expected), 'pct')}), "
        f"{_fmt(coverage['unattributed_gpu_hours'])} unattributed GPU-hours",
    ]
    out += [f"warning: {w}" for w in coverage["warnings"] if w not in _low_coverage(report)]
    return "\n".join(out) + "\n"


def _pending_lines(pending: list[dict[str, Any]], *, top: int) -> list[str]:
    """The pending GPU pods that waited longest, with what blocks them and why."""
    if not pending:
        return []
    rows = [
        [
            f"{p['namespace']}/{p['pod']}",
            _fmt(p["gpus"]),
            p["pool"] or "any",
            f"{p['waiting_seconds'] / 3600:.1f} h",
            p["blocked_by"],
            p["reason"],
        ]
        for p in pending[:top]
    ]
    headers = ["pending GPU pod", "GPUs", "pool", "waiting", "blocked_by", "reason"]
    return ["", f"{len(pending)} GPU pod(s) pending", *_aligned(headers, rows, text=(0, 2, 4, 5))]


def _queue_lines(report: Report) -> list[str]:
    """Kueue's queues (when installed) and each pool's pending demand beside its idle GPUs."""
    out: list[str] = []
    if report.get("queues"):
        rows = [
            [
                q["queue"],
                q["cohort"] or "-",
                q["team"],
                _fmt(q["nominal_gpus"]),
                _fmt(q["borrowed_gpu_hours"]),
                _fmt(q["lent_gpu_hours"]),
                str(q["pending_workloads"]),
                "n/a" if q["wait_seconds_p95"] is None else f"{q['wait_seconds_p95'] / 3600:.2f} h",
                _fmt(q["reserved_unused_usd"], "usd"),
            ]
            for q in report["queues"]
        ]
        headers = [
            "queue",
            "cohort",
            "team",
            "nominal",
            "borrowed GPU-h",
            "lent GPU-h",
            "pending",
            "wait p95",
            "unused quota $",
        ]
        out += ["", *_aligned(headers, rows, text=(0, 1, 2))]
    blocked = [b for b in report.get("blocked_vs_idle", []) if b["pending_gpus"] > 0]
    if blocked:
        rows = [
            [
                b["pool"] or "any",
                _fmt(b["pending_gpus"]),
                _fmt(b["idle_allocated_gpus"]),
                b["idle_holders"] or "-",
            ]
            for b in blocked
        ]
        out += ["", *_aligned(["pool", "GPUs pending", "GPUs idle-allocated", "held by"], rows, text=(0, 3))]
    return out


def _low_coverage(report: Report) -> list[str]:
    """The low-coverage warning, shown first: every number after it misses that much telemetry."""
    warning = low_coverage_warning(report["coverage"]["warnings"])
    return [warning] if warning else []


def _share(part: float, whole: float) -> float:
    return part / whole if whole else math.nan


def render_html(report: Report, *, group_by: str = "team", source: str = "") -> str:
    """A self-contained FinOps waste report (inline CSS and plotly.js) a person can mail."""
    import plotly.graph_objects as go

    fleet = report["fleet"]
    ledger = fleet["ledger_gpu_hours"]
    colours = {
        "unavailable": "#7f7f7f",
        "stranded": "#d62728",
        "unallocated": "#c7c7c7",
        "allocated_unknown": "#9467bd",
        "allocated_idle": "#ff7f0e",
        "allocated_active": "#2ca02c",
    }
    chart = go.Figure(
        go.Bar(
            x=[ledger[s] for s in LEDGER_STATES],
            y=list(LEDGER_STATES),
            orientation="h",
            marker_color=[colours[s] for s in LEDGER_STATES],
        )
    )
    chart.update_layout(
        title="GPU-hour ledger",
        xaxis_title="GPU-hours",
        height=320,
        margin={"l": 140},
        template="plotly_white",
    )
    chart_html = chart.to_html(full_html=False, include_plotlyjs=True, config={"displaylogo": False})
    window = report["window"]
    idle = sorted(report["workloads"], key=lambda w: w["waste_usd"], reverse=True)[:20]
    sections = [
        f"<h1>GPU waste report</h1><p class='muted'>{html.escape(window['start'])} to "
        f"{html.escape(window['end'])}{html.escape(f' · {source}' if source else '')}</p>",
        *[f"<p class='warn'>{html.escape(w)}</p>" for w in _low_coverage(report)],
        _kpis(fleet),
        chart_html,
        "<h2>Ledger</h2>",
        _html_table(["state", "GPU-hours"], [[s, _fmt(ledger[s])] for s in LEDGER_STATES], numeric_from=1),
        f"<h2>By {html.escape(group_by)}</h2>",
        _html_table(
            _COLUMNS[group_by],
            [[_fmt(r.get(c), _kind(c)) for c in _COLUMNS[group_by]] for r in group_rows(report, group_by)],
            numeric_from=1,
        ),
        "<h2>Top idle workloads</h2>",
        _html_table(
            ["namespace", "pod", "team", "gpus", "idle_gpu_hours", "waste_usd", "idle_since"],
            [
                [
                    w["namespace"],
                    w["pod"],
                    w["team"],
                    _fmt(w["gpus"]),
                    _fmt(w["idle_gpu_hours"]),
                    _fmt(w["waste_usd"], "usd"),
                    w["idle_since"] or "-",
                ]
                for w in idle
            ],
            numeric_from=3,
        ),
        "<h2>Coverage</h2>",
        "<ul>"
        + "".join(f"<li>{html.escape(w)}</li>" for w in report["coverage"]["warnings"] or ["no warnings"])
        + "</ul>",
    ]
    style = (
        "body{font-family:system-ui,sans-serif;margin:2rem;color:#1f2933}table{border-collapse:collapse;"
        "margin:0.5rem 0 1.5rem}td,th{padding:4px 10px;border-bottom:1px solid #d9e2ec}th{text-align:left;"
        "background:#f0f4f8}td.n{text-align:right}.muted{color:#627d98}.kpis{display:flex;gap:1rem;"
        "flex-wrap:wrap}.kpi{background:#f0f4f8;padding:0.5rem 1rem;border-radius:6px}.kpi b{display:block;"
        "font-size:1.4rem}.warn{background:#fff4e5;border-left:5px solid #de911d;padding:0.5rem 1rem}"
    )
    return (
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>gpuwatch waste report</title>"
        f"<style>{style}</style></head><body>{''.join(sections)}</body></html>\n"
    )


def _kpis(fleet: Mapping[str, Any]) -> str:
    items = [
        ("GPUs", _fmt(fleet["gpus"])),
        ("cost", _fmt(fleet["cost_usd"], "usd")),
        ("idle waste", _fmt(fleet["waste_usd"], "usd")),
        ("efficiency", _fmt(fleet["efficiency"], "pct")),
        ("allocation rate", _fmt(fleet["allocation_rate"], "pct")),
        ("stranded", _fmt(fleet["stranded_cost_usd"], "usd")),
    ]
    return (
        "<div class='kpis'>"
        + "".join(f"<div class='kpi'><b>{html.escape(v)}</b>{html.escape(k)}</div>" for k, v in items)
        + "</div>"
    )


def _html_table(headers: Sequence[str], rows: Sequence[Sequence[str]], *, numeric_from: int) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    body = "".join(
        "<tr>"
        + "".join(
            f"<td class='n'>{html.escape(c)}</td>" if i >= numeric_from else f"<td>{html.escape(c)}</td>"
            for i, c in enumerate(row)
        )
        + "</tr>"
        for row in rows
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"
