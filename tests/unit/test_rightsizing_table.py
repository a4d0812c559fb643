"""The Right-size page's table, built column by column, is the report's workload rows flattened and ranked."""

import math

import pandas as pd

from gpuwatch.surfaces.report import (
    RIGHTSIZE_CHANGES,
    RIGHTSIZE_COLUMNS,
    _flat,
    rightsizing_from_tables,
    rightsizing_of,
    workload_rows,
)


def _workloads() -> pd.DataFrame:
    """Six pods: two changes (the bigger saving first whatever their waste), a keep, an unknown (no
    savings), one with no recommendation at all and one whose used GPU-hours are unknown."""
    rows = [
        # pod, waste, allocated, used, kind, target, savings, reason
        ("a", 5.0, 10.0, 2.0, "gpus", "1 GPU", 100.0, "p95 0.4 GE"),
        ("b", 9.0, 20.0, 1.0, "mig", "1g.10gb", 300.0, "p95 0.1 GE"),
        ("c", 9.0, 30.0, 29.0, "keep", "", 0.0, "needs all"),
        ("d", 1.0, 0.5, math.nan, "unknown", "", math.nan, "too little telemetry"),
        ("e", 0.0, 4.0, 4.0, None, None, math.nan, None),
        ("f", 7.0, 8.0, math.nan, "keep", "", 0.0, "needs all"),
    ]
    frame = pd.DataFrame(
        rows,
        columns=[
            "pod",
            "waste_usd",
            "allocated_gpu_hours",
            "used_gpu_hours",
            "recommendation_kind",
            "recommendation_target",
            "monthly_savings_usd",
            "recommendation_reason",
        ],
    )
    return frame.assign(
        namespace="ml",
        team="genai",
        node="n1",
        pool="H100",
        gpus=1.0,
        idle_gpu_hours=frame["waste_usd"] / 2,
        unknown_gpu_hours=0.0,
    )


def _row_by_row(table: pd.DataFrame) -> list[dict[str, object]]:
    """The definition: the report's rows (workload_rows), flattened, the changes and biggest savings first
    in a stable sort."""
    flat = [_flat(r) for r in workload_rows(table)]
    ordered = sorted(
        flat,
        key=lambda r: (r["recommendation_kind"] not in RIGHTSIZE_CHANGES, -(r["monthly_savings_usd"] or 0.0)),
    )
    return [{k: r[k] for k in RIGHTSIZE_COLUMNS} for r in ordered]


def test_the_table_is_the_reports_rows_ranked() -> None:
    table = _workloads()
    rightsizing = rightsizing_from_tables(table, None)
    expected = _row_by_row(table)
    got = rightsizing.rows()
    assert [r["pod"] for r in got] == ["b", "a", "c", "f", "d", "e"]
    for g, e in zip(got, expected, strict=True):
        assert g.keys() == e.keys()
        for k in g:  # NaN (used GPU-hours unknown are 0 here) equal to itself, None to None
            assert g[k] == e[k] or (g[k] != g[k] and e[k] != e[k]), (g["pod"], k, g[k], e[k])
    assert got[0]["recommendation_target"] == "1g.10gb" and got[2]["recommendation_target"] is None
    assert got[4]["monthly_savings_usd"] is None and got[5]["recommendation_kind"] is None
    assert got[3]["used_gpu_hours"] == 0.0  # unknown used GPU-hours are 0 in a workload row
    assert rightsizing.rows(2) == got[:2]
    assert (rightsizing.count(*RIGHTSIZE_CHANGES), rightsizing.count("unknown")) == (2, 1)


def test_from_the_report_and_from_its_tables_alike() -> None:
    table = _workloads()
    report = {"workloads": workload_rows(table), "rightsizing": {"monthly_savings_usd": 400.0}}
    from_tables = rightsizing_from_tables(table, None)
    assert rightsizing_of(report).table.equals(from_tables.table)
    assert list(from_tables.table.columns) == list(RIGHTSIZE_COLUMNS)
