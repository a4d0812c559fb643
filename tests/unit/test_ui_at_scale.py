"""What the pages draw of a big fleet: the nodes a per-node figure shows, the waste treemap's tiles, and
tables of text as one component."""

import math
from typing import Any

import numpy as np
import pandas as pd
from dash import dcc

from gpuwatch.core.model import LEDGER_STATES
from gpuwatch.ui.components import Column, Markup, first_nodes, table, two_lines
from gpuwatch.ui.figures import queue_borrowing, sparkline_svg, waste_treemap
from gpuwatch.ui.rows import free_gpus, gpu_marks, gpus_to_look_at


def _nodes(n: int) -> pd.DataFrame:
    return pd.DataFrame({"node": [f"n{k:02d}" for k in range(n)], "pool": ["A"] * n})


def test_a_small_fleet_draws_every_node_and_says_nothing() -> None:
    frame = _nodes(3)
    shown, caption = first_nodes(frame, pd.Series({"n01": 5.0}), why="x", limit=3)
    assert shown is frame and caption == ""


def test_the_highest_ranked_nodes_are_drawn_in_drawing_order_ties_by_that_order() -> None:
    frame = _nodes(6)
    rank = pd.Series({"n04": 3.0, "n01": 2.0, "n05": 2.0, "n02": 0.0})  # n00 and n03: unranked = 0
    shown, caption = first_nodes(frame, rank, why="the busiest", limit=4)
    # n04 (3), n01 and n05 (2, tie: drawing order), then n00 (0, first of the zeros in drawing order).
    assert shown["node"].tolist() == ["n00", "n01", "n04", "n05"]
    assert caption == "4 of 6 nodes: the busiest. Narrow with the pool filter; the download has all."


def test_a_node_with_several_rows_keeps_all_of_them() -> None:
    frame = pd.DataFrame({"node": ["a", "a", "b", "b", "c"], "gpu": [0, 1, 0, 1, 0]})
    shown, _ = first_nodes(frame, pd.Series({"b": 1.0, "c": 0.5}), why="x", limit=2)
    assert list(zip(shown["node"], shown["gpu"], strict=True)) == [("b", 0), ("b", 1), ("c", 0)]


def test_the_capacity_figure_draws_partly_used_nodes_with_the_most_free_gpus_first() -> None:
    n = 45
    now = _nodes(n).assign(**{f"{s}_ge": 0.0 for s in LEDGER_STATES})
    now["allocated_active_ge"] = 8.0
    now.loc[41, ["unallocated_ge", "allocated_active_ge"]] = [3.0, 5.0]
    now.loc[42, ["stranded_ge", "allocated_active_ge"]] = [0.5, 7.5]
    now.loc[44, ["unallocated_ge", "stranded_ge", "allocated_active_ge"]] = [1.0, 1.5, 5.5]
    now.loc[range(30, 40), ["unallocated_ge", "allocated_active_ge"]] = [8.0, 0.0]  # wholly free
    rank = free_gpus(now)
    assert rank["n41"] == 3.0 + 8.0 and rank["n42"] == 0.5 + 8.0 and rank["n35"] == 8.0 and rank["n00"] == 0.0
    shown, caption = first_nodes(now, rank, why="the holes")
    assert caption.startswith("40 of 45 nodes: the holes")
    # The three partly used, the ten wholly free, then the first 27 of the rest, in drawing order.
    assert shown["node"].tolist() == [f"n{k:02d}" for k in (*range(27), *range(30, 40), 41, 42, 44)]


def test_the_health_heatmap_draws_first_nodes_with_critical_events_then_marked_or_silent_gpus() -> None:
    rows = []
    for k in range(50):
        for g in range(2):
            rows.append(
                {
                    "node": f"n{k:02d}",
                    "gpu": float(g),
                    "uuid": f"GPU-{k}-{g}",
                    "xid_last": math.nan,
                    "row_remap_failure": math.nan,
                    "temp_celsius": 50.0,
                }
            )
    gpus = pd.DataFrame(rows)
    gpus.loc[(gpus["node"] == "n45") & (gpus["gpu"] == 1), "xid_last"] = 79.0
    gpus.loc[gpus["node"] == "n46", "uuid"] = None  # no telemetry
    gpus.loc[(gpus["node"] == "n47") & (gpus["gpu"] == 0), "temp_celsius"] = 95.0
    gpus.loc[(gpus["node"] == "n48") & (gpus["gpu"] == 0), "row_remap_failure"] = 1.0
    gpus.loc[(gpus["node"] == "n49") & (gpus["gpu"] == 0), "xid_last"] = 0.0  # no XID since boot
    found = pd.DataFrame({"node": ["n49", "n44", "n43"], "severity": ["warning", "critical", "info"]})
    rank = gpus_to_look_at(gpus, found)
    assert rank["n44"] == 3.0 and rank["n46"] == 2.0 and rank["n45"] == 1.0 and rank["n49"] == 0.0
    drawn, caption = first_nodes(gpus, rank, why="marked or silent")
    nodes = set(drawn["node"])
    assert len(nodes) == 40 and {"n44", "n45", "n46", "n47", "n48"} <= nodes and "n49" not in nodes
    assert caption.startswith("40 of 50 nodes: marked or silent")


def _workload(team: str, ns: str, pod: str, waste: float) -> dict[str, object]:
    return {"team": team, "namespace": ns, "pod": pod, "waste_usd": waste}


def test_the_treemap_draws_the_most_wasteful_workloads_and_keeps_every_total_whole() -> None:
    workloads = [
        _workload("t1", "a", "p1", 50.0),
        _workload("t1", "a", "p2", 1.0),
        _workload("t1", "a", "p3", 2.0),
        _workload("t1", "b", "p4", 30.0),
        _workload("t2", "c", "p5", 4.0),
        _workload("t2", "c", "p6", 0.0),  # no waste: no tile
    ]
    fig = waste_treemap(workloads, max_workloads=3)
    tiles = dict(zip(fig.data[0].ids, fig.data[0].values, strict=True))
    assert tiles == {
        "t1": 83.0,
        "t2": 4.0,
        "t1/a": 53.0,
        "t1/b": 30.0,
        "t2/c": 4.0,
        "t1/a/p1": 50.0,
        "t1/b/p4": 30.0,
        "t2/c/p5": 4.0,
        "t1/a/2 more workloads": 3.0,
    }


def _markdown(node: Any) -> list[dcc.Markdown]:
    """Every dcc.Markdown in a component tree."""
    if isinstance(node, dcc.Markdown):
        return [node]
    children = getattr(node, "children", None)
    children = children if isinstance(children, list) else [children]
    return [m for child in children if child is not None for m in _markdown(child)]


def test_a_table_of_text_is_one_component_with_every_value_escaped() -> None:
    columns = [
        Column("pod", "pod"),
        Column("team", "team", href=lambda r: f"/teams/{r['team']}"),
        Column("waste_usd", "waste $", "usd"),
        Column("severity", "severity", "tag"),
    ]
    rows = [
        {"pod": '<script>alert("x")</script>', "team": "a&b", "waste_usd": 1234.5, "severity": "critical"}
    ]
    section = table("t", "T", columns, rows, query="?window=24h&team=a")
    (markdown,) = _markdown(section)
    assert markdown.dangerously_allow_html
    assert markdown.children == (
        '<table class="gw-table" id="table-t"><thead><tr><th>pod</th><th>team</th><th class="n">waste $</th>'
        "<th>severity</th></tr></thead><tbody><tr>"
        '<td data-col="pod">&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;</td>'
        '<td data-col="team"><a href="/teams/a&amp;b?window=24h&amp;team=a">a&amp;b</a></td>'
        '<td class="n" data-col="waste_usd">$1,234.50</td>'
        '<td class="gw-tag gw-tag-critical" data-col="severity">critical</td>'
        "</tr></tbody></table>"
    )


def test_a_table_holding_components_keeps_them() -> None:
    spark = dcc.Graph(id="spark")
    section = table("t", "T", [Column("trend", "trend")], [{"trend": spark}])
    assert _markdown(section) == []
    assert "spark" in str(section)


def test_two_line_and_sparkline_cells_are_drawn_in_the_tables_html() -> None:
    # Two buckets a minute apart and one 2 min later: held 2, 2, 0 GE; used 1, unknown, 0.
    frame = pd.DataFrame(
        {
            "timestamp": pd.to_datetime(["2026-11-20T00:00Z", "2026-11-20T00:01Z", "2026-11-20T00:02Z"]),
            "held_ge": [2.0, 2.0, 0.0],
            "used_ge": [1.0, math.nan, 0.0],
        }
    )
    svg = sparkline_svg(frame)
    # 120 x 34 px, 2 px padding: y = 2 + (1 - v / 2) * 30; the area closes on the baseline (y 32).
    assert 'width="120" height="34"' in svg
    assert '<polygon points="0.0,32.0 0.0,2.0 60.0,2.0 120.0,32.0 120.0,32.0"' in svg
    assert '<polyline class="held" points="0.0,2.0 60.0,2.0 120.0,32.0"' in svg
    # The used line breaks at the unknown bucket: two runs, never a 0 drawn for it.
    assert svg.count('<polyline class="used"') == 2
    assert 'class="used" points="0.0,17.0"' in svg and 'class="used" points="120.0,32.0"' in svg
    rows = [{"team": "a<b", "idle": two_lines("1.50", "held <1 GiB>", alert=True), "trend": Markup(svg)}]
    columns = [Column("team", "team"), Column("idle", "idle", "num"), Column("trend", "trend")]
    (markdown,) = _markdown(table("t", "T", columns, rows))
    assert (
        '<td class="n" data-col="idle"><div class="gw-two-lines"><div>1.50</div>'
        '<div class="gw-alert-detail">held &lt;1 GiB&gt;</div></div></td>'
    ) in markdown.children
    assert f'<td data-col="trend">{svg}</td>' in markdown.children


def test_a_gpu_is_marked_only_by_what_is_known_about_it() -> None:
    gpus = pd.DataFrame(
        {
            "xid_last": [79.0, 0.0, math.nan, math.nan],
            "row_remap_failure": [0.0, 1.0, math.nan, math.nan],  # NaN: the exporter has no such field
            "temp_celsius": [50.0, 50.0, 95.0, math.nan],
        }
    )
    assert gpu_marks(gpus).to_dict("list") == {
        "xid": [True, False, False, False],
        "remap": [False, True, False, False],
        "hot": [False, False, True, False],
    }


def test_the_borrowing_panels_send_values_alone_on_one_regular_grid() -> None:
    """A month of queues is 480 samples each: every trace sends its values from x0 every dx (no time per
    point), summed over the queue's pools; a sample a queue lacks is a gap, never 0."""
    times = pd.date_range("2026-10-21", periods=4, freq="90min", tz="UTC")
    usage = pd.DataFrame(
        {
            "timestamp": [*times, *times, times[0], times[3]],
            "cluster_queue": ["a"] * 8 + ["b"] * 2,
            "cohort": "c",
            "team": "t",
            "pool": ["p"] * 4 + ["q"] * 4 + ["p"] * 2,
            "nominal_gpus": 4.0,
            "used_gpus": [1.0, 2.0, 5.0, 6.0, 0.5, 0.5, 0.5, 0.5, 3.0, 1.0],
            "borrowed_gpus": [0.0, 0.0, 1.0, 2.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0],
            "lent_gpus": 0.0,
        }
    )
    fig = queue_borrowing(usage)
    assert len(fig.data) == 8  # own, borrowed, lent, nominal for each of two queues
    for trace in fig.data:
        assert trace.x is None and trace.x0 == "2026-10-21 00:00:00" and trace.dx == 90 * 60 * 1000
        assert trace.y.dtype == "float32" and len(trace.y) == 4
    own_a, borrowed_a, _lent_a, nominal_a, own_b = fig.data[:5]
    assert own_a.y.tolist() == [1.5, 2.5, 4.5, 4.5]  # used over both pools − borrowed
    assert borrowed_a.y.tolist() == [0.0, 0.0, 1.0, 2.0]
    assert nominal_a.y.tolist() == [8.0] * 4
    assert own_b.y[0] == 3.0 and own_b.y[3] == 1.0
    assert math.isnan(own_b.y[1]) and math.isnan(own_b.y[2])


def test_a_long_grid_is_drawn_as_the_means_of_runs_of_samples() -> None:
    """500 samples are drawn as 167 runs of 3 (the last of 2), each the mean of its samples from the first
    one's time; a run holding a sample the queue lacks is unknown."""
    times = pd.date_range("2026-10-21", periods=500, freq="3min", tz="UTC")
    used = np.arange(500, dtype=np.float64)
    usage = pd.DataFrame(
        {
            "timestamp": times,
            "cluster_queue": "a",
            "cohort": "",
            "team": "t",
            "pool": "p",
            "nominal_gpus": 1000.0,
            "used_gpus": used,
            "borrowed_gpus": 0.0,
            "lent_gpus": 0.0,
        }
    ).drop(index=10)  # no sample at 00:30: the run of samples 9, 10, 11 is unknown
    own = queue_borrowing(usage).data[0]
    assert own.dx == 3 * 3 * 60 * 1000 and len(own.y) == 167
    assert own.y[0] == 1.0 and own.y[2] == 7.0  # (0 + 1 + 2) / 3, (6 + 7 + 8) / 3
    assert math.isnan(own.y[3]) and own.y[4] == 13.0
    assert own.y[-1] == 498.5  # (498 + 499) / 2
