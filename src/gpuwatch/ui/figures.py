"""Pure functions from frames and numbers to plotly figures; no data loading here."""

import math
import textwrap
from collections import Counter
from collections.abc import Mapping, Sequence

import numpy as np
import numpy.typing as npt
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from gpuwatch.core.model import LEDGER_STATES

# One colour per ledger state, the same on every page.
STATE_COLOURS: Mapping[str, str] = {
    "unavailable": "#7f7f7f",
    "stranded": "#d62728",
    "unallocated": "#c7c7c7",
    "allocated_unknown": "#9467bd",
    "allocated_idle": "#ff7f0e",
    "allocated_active": "#2ca02c",
}
STATE_LABELS: Mapping[str, str] = {
    "unavailable": "unavailable",
    "stranded": "stranded",
    "unallocated": "unallocated",
    "allocated_unknown": "allocated · unknown",
    "allocated_idle": "allocated · idle",
    "allocated_active": "allocated · active",
}
USED_COLOUR = "#1f4e79"
CAPACITY_COLOUR = "#334e68"
POOL_COLOURS = ("#1f77b4", "#9467bd", "#17becf", "#8c564b", "#e377c2", "#bcbd22", "#7f7f7f", "#aec7e8")
FONT = "system-ui, -apple-system, Segoe UI, Roboto, sans-serif"


def _style(
    fig: go.Figure, *, x_title: str, y_title: str, height: int = 360, legend: bool = True
) -> go.Figure:
    fig.update_layout(
        template="plotly_white",
        height=height,
        margin={"l": 70, "r": 20, "t": 36, "b": 56},
        font={"family": FONT, "size": 12, "color": "#243b53"},
        legend={
            "orientation": "h",
            "yanchor": "bottom",
            "y": 1.02,
            "x": 0,
            "title": None,
            "traceorder": "normal",
        },
        showlegend=legend,
        hoverlabel={"font": {"family": FONT}},
        paper_bgcolor="rgba(0,0,0,0)",
    )
    fig.update_xaxes(title_text=x_title, gridcolor="#e4e7eb")
    fig.update_yaxes(title_text=y_title, gridcolor="#e4e7eb", zerolinecolor="#bcccdc")
    return fig


EMPTY_LINE_CHARS = 56  # an annotation's line fits a half-width card at 1280 px


def empty(message: str, *, height: int = 240) -> go.Figure:
    """A blank figure that says why it is blank (a long message on several lines, broken between words)."""
    fig = go.Figure()
    lines = textwrap.wrap(message, EMPTY_LINE_CHARS, break_long_words=False, break_on_hyphens=False)
    text = "<br>".join(lines) or message
    fig.add_annotation(text=text, showarrow=False, font={"size": 14, "color": "#627d98"})
    fig.update_layout(template="plotly_white", height=height, margin={"l": 20, "r": 20, "t": 20, "b": 20})
    fig.update_xaxes(visible=False)
    fig.update_yaxes(visible=False)
    return fig


def ledger_area(timeline: pd.DataFrame) -> go.Figure:
    """GPU-equivalents per ledger state over time, stacked (the states sum to capacity)."""
    if timeline.empty:
        return empty("no samples in this window")
    fig = go.Figure()
    for state in LEDGER_STATES:
        fig.add_trace(
            go.Scatter(
                x=timeline["timestamp"],
                y=timeline[f"{state}_ge"],
                name=STATE_LABELS[state],
                mode="lines",
                line={"width": 0.5, "color": STATE_COLOURS[state]},
                fillcolor=STATE_COLOURS[state],
                stackgroup="ledger",
                hovertemplate="%{y:,.2f} GE<extra>" + STATE_LABELS[state] + "</extra>",
            )
        )
    fig.update_layout(hovermode="x unified")
    return _style(fig, x_title="time (UTC)", y_title="GPU-equivalents (GE)")


def ledger_waterfall(state_usd: Mapping[str, float]) -> go.Figure:
    """Capacity dollars broken down, state by state, down to what active work used."""
    total = sum(state_usd.values())
    fig = go.Figure(
        go.Bar(
            x=["capacity"],
            y=[total],
            marker_color=CAPACITY_COLOUR,
            text=[f"${total:,.0f}"],
            textposition="outside",
            name="capacity",
            hovertemplate="capacity: $%{y:,.2f}<extra></extra>",
        )
    )
    fig.update_xaxes(tickangle=0)
    level = total
    for state in LEDGER_STATES:
        value = state_usd.get(state, 0.0)
        level -= value
        fig.add_trace(
            go.Bar(
                x=[STATE_LABELS[state].replace(" · ", " ·<br>")],
                y=[value],
                base=[max(level, 0.0)],
                marker_color=STATE_COLOURS[state],
                text=[f"${value:,.0f}"],
                textposition="outside",
                name=STATE_LABELS[state],
                hovertemplate=STATE_LABELS[state] + ": $%{y:,.2f}<extra></extra>",
            )
        )
    fig.update_layout(barmode="overlay", bargap=0.35, uniformtext={"minsize": 10, "mode": "show"})
    fig.update_yaxes(rangemode="tozero", range=[0, total * 1.12 if total > 0 else 1])
    return _style(fig, x_title="ledger state", y_title="USD over the window", legend=False)


def ledger_usd_bar(state_usd: Mapping[str, float]) -> go.Figure:
    """Dollars per ledger state, one horizontal bar each."""
    states = list(LEDGER_STATES)[::-1]
    fig = go.Figure(
        go.Bar(
            x=[state_usd.get(s, 0.0) for s in states],
            y=[STATE_LABELS[s] for s in states],
            orientation="h",
            marker_color=[STATE_COLOURS[s] for s in states],
            text=[f"${state_usd.get(s, 0.0):,.2f}" for s in states],
            textposition="auto",
            hovertemplate="%{y}: $%{x:,.2f}<extra></extra>",
        )
    )
    fig.update_layout(margin={"l": 130})
    _style(fig, x_title="USD over the window", y_title="", height=400, legend=False)
    fig.update_layout(margin={"l": 130, "r": 20, "t": 20, "b": 50})
    return fig


def _two_lines(name: str) -> str:
    """A long pool name broken at its middle dash (or underscore: AMD_INSTINCT_MI300X_OAM), so axis
    labels stay level."""
    sep = "-" if "-" in name else "_"
    parts = name.split(sep)
    if len(name) <= 14 or len(parts) < 2:
        return name
    cut = min(range(1, len(parts)), key=lambda i: abs(len(sep.join(parts[:i])) - len(name) / 2))
    return sep.join(parts[:cut]) + f"{sep}<br>" + sep.join(parts[cut:])


def pool_states_bar(nodes_now: pd.DataFrame) -> go.Figure:
    """GPU-equivalents per pool in each ledger state at the window's last sample."""
    if nodes_now.empty:
        return empty("no nodes")
    per_pool = nodes_now.groupby("pool", as_index=False)[[f"{s}_ge" for s in LEDGER_STATES]].sum()
    fig = go.Figure(
        [
            go.Bar(
                name=STATE_LABELS[s],
                x=[_two_lines(str(p)) for p in per_pool["pool"]],
                y=per_pool[f"{s}_ge"],
                marker_color=STATE_COLOURS[s],
                hovertemplate="%{x}: %{y:,.2f} GE<extra>" + STATE_LABELS[s] + "</extra>",
            )
            for s in LEDGER_STATES
        ]
    )
    fig.update_layout(barmode="stack")
    _style(fig, x_title="pool", y_title="GPU-equivalents (GE)", height=340)
    fig.update_xaxes(tickangle=0)
    return fig


def node_holes(nodes_now: pd.DataFrame) -> go.Figure:
    """Each node's GPUs by ledger state at the last sample: the free holes, where they are, how big."""
    if nodes_now.empty:
        return empty("no nodes")
    frame = nodes_now.iloc[::-1]
    status = [
        "NotReady" if not r else ("cordoned" if not s else "")
        for r, s in zip(frame["ready"], frame["schedulable"], strict=True)
    ]
    labels = [f"{n} ({st})" if st else n for n, st in zip(frame["node"], status, strict=True)]
    y = [list(frame["pool"]), labels]
    fig = go.Figure(
        [
            go.Bar(
                name=STATE_LABELS[s],
                x=frame[f"{s}_ge"],
                y=y,
                orientation="h",
                marker_color=STATE_COLOURS[s],
                hovertemplate="%{y}: %{x:,.2f} GE<extra>" + STATE_LABELS[s] + "</extra>",
            )
            for s in LEDGER_STATES
        ]
    )
    fig.update_layout(barmode="stack", bargap=0.25)
    height = max(300, 26 * len(frame) + 120)
    _style(fig, x_title="GPUs (GPU-equivalents)", y_title="", height=height)
    fig.update_layout(margin={"l": 260, "r": 20, "t": 36, "b": 50})
    fig.update_xaxes(dtick=1, rangemode="tozero")
    return fig


def fragmentation_lines(timeline: pd.DataFrame) -> go.Figure:
    """Fragmentation ratio per pool over time."""
    if timeline.empty:
        return empty("no pools")
    fig = go.Figure()
    for i, (pool, rows) in enumerate(timeline.groupby("pool", sort=True)):
        fig.add_trace(
            go.Scatter(
                x=rows["timestamp"],
                y=rows["fragmentation_ratio"],
                name=str(pool),
                mode="lines",
                line={"width": 1.8, "color": POOL_COLOURS[i % len(POOL_COLOURS)]},
                hovertemplate="%{y:.1%}<extra>" + str(pool) + "</extra>",
            )
        )
    fig.update_layout(hovermode="x unified")
    _style(fig, x_title="time (UTC)", y_title="fragmentation ratio (% of free GPUs)")
    fig.update_yaxes(tickformat=".2~%", rangemode="tozero")  # ticks 0.5 % apart stay distinct
    return fig


HEATMAP_METRICS: Mapping[str, tuple[str, str, str]] = {
    # metric: (label with unit, colour scale, hover format)
    "util": ("utilization (%)", "Viridis", ".0%"),
    "temp": ("temperature (°C)", "YlOrRd", ".0f"),
    "power": ("power (W)", "Cividis", ".0f"),
    "memory": ("framebuffer used (%)", "Blues", ".0%"),
}


def health_heatmap(cells: pd.DataFrame, metric: str) -> go.Figure:
    """Node × GPU grid of one metric.

    `cells`: node, gpu (index), value, reporting (the GPU has telemetry), marker (short text), hover.
    GPUs without telemetry are grey; slots a node does not have stay blank.
    """
    if cells.empty:
        return empty("no GPU telemetry in the last samples of this window")
    label, scale, fmt = HEATMAP_METRICS[metric]
    nodes = list(dict.fromkeys(cells["node"]))[::-1]
    gpus = sorted(int(g) for g in cells["gpu"].dropna().unique())
    cells = cells.assign(gpu=cells["gpu"].astype("int64"), silent=(~cells["reporting"]).astype("float64"))

    def grid_of(column: str) -> pd.DataFrame:
        wide = cells.pivot_table(index="node", columns="gpu", values=column, aggfunc="first", dropna=False)
        return wide.reindex(index=nodes, columns=gpus)

    grid, marker, hover, silent = grid_of("value"), grid_of("marker"), grid_of("hover"), grid_of("silent")
    zrange = {"util": (0.0, 1.0), "memory": (0.0, 1.0)}.get(metric)
    x = [f"GPU {g}" for g in gpus]
    customdata = hover.fillna("").to_numpy()
    fig = go.Figure(
        [
            go.Heatmap(
                z=grid.where(silent == 0).to_numpy(),
                x=x,
                y=nodes,
                text=marker.fillna("").to_numpy(),
                texttemplate="<b>%{text}</b>",
                textfont={"size": 11},
                customdata=customdata,
                hovertemplate="%{customdata}<extra></extra>",
                hoverongaps=False,
                colorscale=scale,
                zmin=zrange[0] if zrange else None,
                zmax=zrange[1] if zrange else None,
                xgap=2,
                ygap=2,
                colorbar={
                    "title": {"text": label, "side": "right"},
                    "tickformat": fmt if "%" in label else None,
                },
            ),
            go.Heatmap(
                z=silent.where(silent > 0).to_numpy(),
                x=x,
                y=nodes,
                customdata=customdata,
                hovertemplate="%{customdata}<extra></extra>",
                hoverongaps=False,
                colorscale=[[0, "#bcccdc"], [1, "#bcccdc"]],
                showscale=False,
                xgap=2,
                ygap=2,
                name="no telemetry",
            ),
        ]
    )
    height = max(280, 30 * len(nodes) + 110)
    _style(fig, x_title="GPU index on the node", y_title="", height=height, legend=False)
    fig.update_layout(plot_bgcolor="#ffffff", margin={"l": 150, "r": 20, "t": 20, "b": 50})
    fig.update_xaxes(side="bottom", showgrid=False, zeroline=False)
    fig.update_yaxes(showgrid=False, zeroline=False)
    return fig


def _orange(share: float) -> str:
    """A shade between light and full idle orange for a share in [0, 1]."""
    light, full = (255, 224, 178), (255, 127, 14)
    rgb = [round(a + (b - a) * min(1.0, max(0.0, share))) for a, b in zip(light, full, strict=True)]
    return f"rgb({rgb[0]},{rgb[1]},{rgb[2]})"


TREEMAP_WORKLOADS = 100  # workload tiles drawn; the rest of a namespace's waste is one "more" tile


def waste_treemap(
    workloads: Sequence[Mapping[str, object]], *, max_workloads: int = TREEMAP_WORKLOADS
) -> go.Figure:
    """Idle-allocated dollars, team → namespace → workload (shade: share of the largest team's waste). The
    `max_workloads` most wasteful workloads get a tile each; a namespace's others share one tile, so every
    team and namespace total stays whole."""
    rows = sorted(
        (w for w in workloads if float(str(w["waste_usd"])) > 0), key=lambda w: -float(str(w["waste_usd"]))
    )
    if not rows:
        return empty("no idle-allocated GPU time in this window")
    more = Counter((str(w["team"]), str(w["namespace"])) for w in rows[max_workloads:])
    totals: dict[tuple[str, ...], float] = {}
    for rank, w in enumerate(rows):
        team, ns, pod = str(w["team"]), str(w["namespace"]), str(w["pod"])
        if rank >= max_workloads:  # (no pod name holds a space)
            pod = f"{more[(team, ns)]:,} more workloads"
        value = float(str(w["waste_usd"]))
        for key in ((team,), (team, ns), (team, ns, pod)):
            totals[key] = totals.get(key, 0.0) + value
    top = max(v for k, v in totals.items() if len(k) == 1)
    keys = sorted(totals, key=len)
    fig = go.Figure(
        go.Treemap(
            ids=["/".join(k) for k in keys],
            labels=[k[-1] for k in keys],
            parents=["/".join(k[:-1]) for k in keys],
            values=[totals[k] for k in keys],
            branchvalues="total",
            texttemplate="<b>%{label}</b><br>$%{value:,.0f}",
            hovertemplate="%{id}<br>idle-allocated: $%{value:,.2f}<extra></extra>",
            marker={
                "colors": [_orange(totals[(k[0],)] / top) for k in keys],
                "line": {"color": "#ffffff", "width": 1.5},
            },
            pathbar={"visible": False},
            maxdepth=2,
        )
    )
    fig.update_layout(
        height=420, margin={"l": 4, "r": 4, "t": 4, "b": 4}, font={"family": FONT}, paper_bgcolor="#ffffff"
    )
    return fig


SPARK_WIDTH_PX, SPARK_HEIGHT_PX = 120, 34


def sparkline_svg(frame: pd.DataFrame) -> str:
    """A tiny held-vs-used trend (timestamp, held_ge, used_ge) for a table cell, as inline SVG markup
    (drawn in the table's HTML: no chart per row): GE held as a filled area, GE used as a line broken
    where unknown; x by time, y from 0 to the larger peak."""
    width, height, pad = SPARK_WIDTH_PX, SPARK_HEIGHT_PX, 2
    seconds = pd.to_datetime(frame["timestamp"], utc=True).astype("int64").to_numpy() / 1e9
    held = np.nan_to_num(frame["held_ge"].to_numpy(dtype=np.float64), nan=0.0)
    used = frame["used_ge"].to_numpy(dtype=np.float64)
    if len(seconds) == 1:  # one bucket: a level line across
        seconds, held, used = np.array([0.0, 1.0]), np.repeat(held, 2), np.repeat(used, 2)
    span = float(seconds.max() - seconds.min()) if len(seconds) else 0.0
    x = (seconds - seconds.min()) / span * width if span > 0 else np.zeros(len(seconds))
    peaks = [float(v.max()) for v in (held, used[np.isfinite(used)]) if len(v)]
    top = max([*peaks, 0.0]) or 1.0

    def y(values: "npt.NDArray[np.float64]") -> "npt.NDArray[np.float64]":
        return pad + (1.0 - values / top) * (height - 2 * pad)

    def points(xs: "npt.NDArray[np.float64]", ys: "npt.NDArray[np.float64]") -> str:
        return " ".join(f"{a:.1f},{b:.1f}" for a, b in zip(xs, ys, strict=True))

    base = height - pad
    shapes = []
    if len(x):
        area = points(np.concatenate([[x[0]], x, [x[-1]]]), np.concatenate([[base], y(held), [base]]))
        shapes.append(f'<polygon points="{area}" fill="rgba(255,127,14,0.18)" stroke="none"/>')
        shapes.append(
            f'<polyline class="held" points="{points(x, y(held))}" fill="none" '
            f'stroke="{STATE_COLOURS["allocated_idle"]}" stroke-width="1"/>'
        )
    known = np.isfinite(used)
    breaks = np.flatnonzero(np.diff(known.astype(np.int8))) + 1
    for run in np.split(np.arange(len(used)), breaks):
        if len(run) and known[run[0]]:
            shapes.append(
                f'<polyline class="used" points="{points(x[run], y(used[run]))}" fill="none" '
                f'stroke="{USED_COLOUR}" stroke-width="1.2"/>'
            )
    return (
        f'<svg class="gw-spark" role="img" aria-label="GPUs held and used over the window" '
        f'width="{width}" height="{height}" viewBox="0 0 {width} {height}">{"".join(shapes)}</svg>'
    )


def team_trend(frame: pd.DataFrame) -> go.Figure:
    """A team's GPUs over time: allocated active, idle and unknown (stacked) and what they used."""
    if frame.empty:
        return empty("the team held no GPUs in this window")
    fig = go.Figure()
    stacked = (
        ("allocated_active", "active_ge"),
        ("allocated_idle", "idle_ge"),
        ("allocated_unknown", "unknown_ge"),
    )
    for state, column in stacked:
        fig.add_trace(
            go.Scatter(
                x=frame["timestamp"],
                y=frame[column],
                name=STATE_LABELS[state],
                mode="lines",
                line={"width": 0.5, "color": STATE_COLOURS[state]},
                fillcolor=STATE_COLOURS[state],
                stackgroup="held",
                hovertemplate="%{y:,.2f} GE<extra>" + STATE_LABELS[state] + "</extra>",
            )
        )
    fig.add_trace(
        go.Scatter(
            x=frame["timestamp"],
            y=frame["used_ge"],
            name="used (utilization × GE)",
            mode="lines",
            line={"width": 2, "color": USED_COLOUR},
            hovertemplate="%{y:,.2f} GE<extra>used</extra>",
        )
    )
    fig.update_layout(hovermode="x unified")
    return _style(fig, x_title="time (UTC)", y_title="GPU-equivalents (GE)")


# Queues: a queue's own use, what it borrowed above its quota and what it lent below it.
QUEUE_COLOURS: Mapping[str, str] = {
    "own": "#2f80ed",
    "borrowed": "#d62728",
    "lent": "#9467bd",
    "nominal": "#102a43",
}
QUEUE_PARTS = (
    ("own_gpus", "used within its quota", "own"),
    ("borrowed_gpus", "borrowed above its quota", "borrowed"),
    ("lent_gpus", "lent to its cohort", "lent"),
)
# What a queue's panel draws per sample, and how many samples at most (a panel is ~600 px wide; the
# download has every sample).
PANEL_COLUMNS = ("nominal_gpus", "used_gpus", "borrowed_gpus", "lent_gpus", "own_gpus")
QUEUE_DRAWN_SAMPLES = 240
QUEUE_PANEL_PX = 150  # plot height of one queue's panel
QUEUE_GAP_PX = 58  # between rows of panels: the panel titles and the time ticks


def _queue_panels(usage: pd.DataFrame) -> tuple[str, float, dict[str, "npt.NDArray[np.float32]"]]:
    """Per cluster queue, its GE summed over its pools (PANEL_COLUMNS; own_gpus: used within the nominal
    quota, used − borrowed) on one regular grid, averaged over runs of k samples so that at most
    QUEUE_DRAWN_SAMPLES are drawn: a run stands for its samples' time, from its first. A sample a queue
    lacks, or unknown in any of its pools, is unknown (NaN), and so is a run holding one. Also the grid's
    first time and a run's length in ms: what each trace sends instead of a time per point."""
    values = list(PANEL_COLUMNS[:4])
    summed = usage.groupby(["cluster_queue", "timestamp"], sort=False)[values].sum(skipna=False)
    summed["own_gpus"] = summed["used_gpus"] - summed["borrowed_gpus"]
    times = pd.DatetimeIndex(summed.index.get_level_values("timestamp").unique()).sort_values()
    step = (times[1:] - times[:-1]).min() if len(times) > 1 else pd.Timedelta(0)
    grid = pd.date_range(times[0], times[-1], freq=step) if len(times) > 1 else times
    k = max(1, math.ceil(len(grid) / QUEUE_DRAWN_SAMPLES))
    runs = math.ceil(len(grid) / k)
    counts = np.minimum(k, len(grid) - np.arange(runs) * k)[:, None]  # the last run may be shorter
    panels = {}
    for queue, frame in summed.groupby(level="cluster_queue", sort=False):
        padded = np.zeros((runs * k, len(PANEL_COLUMNS)))
        padded[: len(grid)] = frame.droplevel("cluster_queue").reindex(grid)[list(PANEL_COLUMNS)].to_numpy()
        mean = padded.reshape(runs, k, len(PANEL_COLUMNS)).sum(axis=1) / counts
        panels[str(queue)] = mean.astype(np.float32)
    return grid[0].strftime("%Y-%m-%d %H:%M:%S"), step.total_seconds() * 1000.0 * k, panels


def queue_borrowing(usage: pd.DataFrame, titles: Mapping[str, str] | None = None) -> go.Figure:
    """Per cluster queue over time, summed over its pools (usage: QUEUE_USAGE rows, the queues in the
    order to draw them), one small panel each: the GE it used within its nominal quota and borrowed above
    it, and its unused quota lent to its cohort, stacked; its nominal quota as a dashed line. `titles`:
    a panel title per queue (default: its name)."""
    if usage.empty:
        return empty("no queue has GPU quota or GPU workloads")
    queues = [str(q) for q in dict.fromkeys(usage["cluster_queue"])]
    cols = 1 if len(queues) == 1 else 2
    rows = -(-len(queues) // cols)
    top, bottom = 76, 40  # the legend above the first row's panel titles
    height = rows * (QUEUE_PANEL_PX + QUEUE_GAP_PX) - QUEUE_GAP_PX + top + bottom
    fig = make_subplots(
        rows=rows,
        cols=cols,
        specs=[[{} if r * cols + c < len(queues) else None for c in range(cols)] for r in range(rows)],
        subplot_titles=[(titles or {}).get(q, q) for q in queues],
        horizontal_spacing=0.07,
        vertical_spacing=QUEUE_GAP_PX / (height - top - bottom),
    )
    _style(fig, x_title="", y_title="", height=height)
    fig.update_layout(
        hovermode="x unified",
        margin={"l": 60, "r": 20, "t": top, "b": bottom},
        legend={"y": 1 + 26 / (height - top - bottom)},
    )
    fig.update_annotations(font={"size": 12, "color": "#243b53"})  # the panel titles
    # Each trace sends its values alone, from x0 every dx, as float32 (what a panel can show): a month of a
    # dozen queues is a fifth the bytes of a time per point, and half the points to draw.
    x0, dx, panels = _queue_panels(usage)
    for k, queue in enumerate(queues):
        panel = panels[queue]
        row, col = k // cols + 1, k % cols + 1
        traces = [
            go.Scatter(
                x0=x0,
                dx=dx,
                y=panel[:, PANEL_COLUMNS.index(column)],
                name=label,
                legendgroup=column,
                showlegend=k == 0,
                mode="lines",
                line={"width": 0.5, "color": QUEUE_COLOURS[colour]},
                fillcolor=QUEUE_COLOURS[colour],
                stackgroup=f"q{k}",
                hovertemplate="%{y:,.2f} GE<extra>" + label + "</extra>",
            )
            for column, label, colour in QUEUE_PARTS
        ]
        traces.append(
            go.Scatter(
                x0=x0,
                dx=dx,
                y=panel[:, PANEL_COLUMNS.index("nominal_gpus")],
                name="nominal quota",
                legendgroup="nominal",
                showlegend=k == 0,
                mode="lines",
                line={"width": 1.6, "color": QUEUE_COLOURS["nominal"], "dash": "dash"},
                hovertemplate="%{y:,.2f} GE<extra>nominal quota</extra>",
            )
        )
        for trace in traces:
            fig.add_trace(trace, row=row, col=col)
        # Every panel spans the same window: time ticks under the last panel of each column only.
        fig.update_xaxes(matches="x", showticklabels=k + cols >= len(queues), row=row, col=col)
        fig.update_yaxes(rangemode="tozero", title_text="GE" if col == 1 else "", row=row, col=col)
    return fig


# Wait axis ticks: seconds to a day and beyond, on a log axis.
WAIT_TICKS: Sequence[tuple[float, str]] = (
    (1, "1 s"),
    (10, "10 s"),
    (60, "1 min"),
    (600, "10 min"),
    (3600, "1 h"),
    (6 * 3600, "6 h"),
    (86400, "1 d"),
    (7 * 86400, "7 d"),
    (30 * 86400, "30 d"),
)
WAIT_STATES: Mapping[str, tuple[str, str]] = {
    "admitted": ("admitted in the window", "#2f80ed"),
    "pending": ("still pending at its end", "#d62728"),
}
WAIT_POINTS = 3000  # above this many waits only a box's outliers are drawn as points


def wait_distribution(waits: pd.DataFrame) -> go.Figure:
    """Each wait in a queue (waits: queue, the label of its row; wait_seconds; state admitted | pending;
    hover, its duration as text), as points over a box per queue and state, the queues top to bottom
    in the order of `waits`; time on a log axis labelled in s, min, h and d, waits under a second drawn
    at one second."""
    if waits.empty:
        return empty("no workload waited in a queue in this window")
    queues = [str(q) for q in dict.fromkeys(waits["queue"])]
    points = "all" if len(waits) <= WAIT_POINTS else "outliers"
    fig = go.Figure()
    for state, (label, colour) in WAIT_STATES.items():
        rows = waits[waits["state"] == state]
        fig.add_trace(
            go.Box(
                x=rows["wait_seconds"].clip(lower=1.0),
                y=rows["queue"],
                name=label,
                orientation="h",
                boxpoints=points,
                jitter=0.4,
                pointpos=0,
                marker={"color": colour, "size": 7, "opacity": 0.8},
                line={"color": colour, "width": 1.2},
                fillcolor="rgba(0,0,0,0)",
                customdata=rows["hover"],
                hovertemplate="%{y}: %{customdata}<extra>" + label + "</extra>",
            )
        )
    longest = float(waits["wait_seconds"].max())
    ticks = [(v, t) for v, t in WAIT_TICKS if v <= max(longest * 3, 60)]
    height = max(260, 44 * len(queues) + 130)
    _style(fig, x_title="wait (log scale)", y_title="", height=height)
    fig.update_layout(boxmode="group", margin={"l": 130, "r": 20, "t": 36, "b": 56})
    fig.update_xaxes(
        type="log",
        tickvals=[v for v, _ in ticks],
        ticktext=[t for _, t in ticks],
        range=[-0.1, np.log10(max(longest, 60.0)) + 0.15],
    )
    fig.update_yaxes(categoryorder="array", categoryarray=queues, autorange="reversed")
    return fig
