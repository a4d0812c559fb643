"""Pure functions from numbers to plotly figures; no data loading here."""

from collections.abc import Mapping

import plotly.graph_objects as go

# One colour per ledger state, the same on every page.
STATE_COLOURS: Mapping[str, str] = {
    "unavailable": "#7f7f7f",
    "stranded": "#d62728",
    "unallocated": "#c7c7c7",
    "allocated_idle": "#ff7f0e",
    "allocated_active": "#2ca02c",
}


def pool_allocation_bar(allocated: Mapping[str, float], capacity: Mapping[str, float]) -> go.Figure:
    """Allocated vs free GPU-equivalents per pool, now."""
    pools = sorted(capacity)
    fig = go.Figure(
        [
            go.Bar(
                name="allocated",
                x=pools,
                y=[allocated.get(p, 0.0) for p in pools],
                marker_color=STATE_COLOURS["allocated_active"],
            ),
            go.Bar(
                name="free",
                x=pools,
                y=[max(0.0, capacity[p] - allocated.get(p, 0.0)) for p in pools],
                marker_color=STATE_COLOURS["unallocated"],
            ),
        ]
    )
    fig.update_layout(
        barmode="stack",
        yaxis_title="GPUs (GPU-equivalents)",
        xaxis_title="pool",
        margin={"l": 60, "r": 20, "t": 30, "b": 60},
        legend={"orientation": "h"},
        template="plotly_white",
    )
    return fig
