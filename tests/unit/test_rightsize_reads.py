"""Right-sizing from its own pod families equals the whole report's: same rows, order, savings, packing."""

from dataclasses import fields, replace
from typing import Any

import pytest

from gpuwatch.core.config import Settings
from gpuwatch.core.model import PriceBook
from gpuwatch.read.historytables import RIGHTSIZE_FAMILIES, assemble, rightsizing_table
from gpuwatch.sources.historysums import POD_FAMILIES, HistorySums
from gpuwatch.surfaces.report import (
    RIGHTSIZE_COLUMNS,
    build_history_report,
    rightsizing_from_tables,
    rightsizing_of,
)
from tests.unit.test_history import H100, L4, WINDOW, _sums

GIB = 1024.0**3
N = 1440  # samples in each of the two pieces with history (day 1: 60 s, the last 12 h: 30 s)
SETTINGS = Settings(pricing=PriceBook(default_usd_per_gpu_hour=2.0, products={H100: 3.0, L4: 0.8}))
NOT_READ = {"pod_last_idle", "pod_idle_since", "pod_idle_held", "pod_idle_abandoned", "pod_power"}


def _fleet() -> tuple[HistorySums, set[tuple[str, str]]]:
    """Six 1-GPU workloads over both pieces (H100 published at $4, L4 at the book's $0.80), each of the
    twelve pod families filled in:

    nb-1, inf-0 (H100): p95 0.22 busy GE, 15 GiB: fit an L4; inf-0 also idle for a while.
    train-0, train-1 (H100): p95 0.95, 70 GiB: keep; train-1 idle longer (more waste).
    old-0 (H100): telemetry but no p95 in day 1: unknown.
    l4-0 (L4): p95 0.9, 20 GiB: keep; idle most, at the L4's price.
    Held at the end: all but inf-0."""
    h100 = {
        pod: ("ml", pod, "ml", "h100-a", H100) for pod in ("nb-1", "inf-0", "train-0", "train-1", "old-0")
    }
    l4 = ("ml", "l4-0", "ml", "l4-a", L4)
    pods = [*h100.values(), l4]
    need = {"nb-1": (0.22, 15), "inf-0": (0.22, 15), "train-0": (0.95, 70), "train-1": (0.95, 70)}
    need |= {"old-0": (0.0, 1), "l4-0": (0.9, 20)}
    idle = {"inf-0": 100.0, "train-0": 50.0, "train-1": 300.0, "l4-0": 900.0}
    rows: dict[str, list[tuple[Any, ...]]] = {
        "pod_allocated": [(p, *w, N) for p in (1, 2) for w in pods],
        "pod_used": [(p, *w, 0.0 if w[1] == "old-0" else 0.5 * N) for p in (1, 2) for w in pods],
        "pod_unknown": [(2, *h100["nb-1"], 60.0)],
        "pod_idle": [(2, *w, idle[w[1]]) for w in pods if w[1] in idle],
        "pod_last_allocated": [(2, *w, 1.0) for w in pods],
        "pod_last_idle": [(2, *l4, 1.0)],
        "pod_idle_since": [(2, *l4, 1_763_500_000.0)],
        "pod_idle_held": [(2, *l4, 600.0)],
        "pod_idle_abandoned": [(2, *l4, 300.0)],
        "pod_power": [(p, *w, 300.0 * N) for p in (1, 2) for w in pods],
        "pod_busy_p95": [(p, *w, need[w[1]][0]) for p in (1, 2) for w in pods if (p, w[1]) != (1, "old-0")],
        "pod_memory_peak": [(p, *w, need[w[1]][1] * GIB) for p in (1, 2) for w in pods],
    }
    assert set(rows) == set(POD_FAMILIES)
    sums = _sums(
        **rows,
        price_sum=[(2, H100, 4.0 * N)],
        price_count=[(2, H100, N)],
        nodes_now=[("h100-a", H100, 8.0), ("l4-a", L4, 4.0)],
    )
    return sums, {(w[0], w[1]) for w in pods if w[1] != "inf-0"}


def _rightsizing_families_alone(sums: HistorySums) -> HistorySums:
    """The sums with every per-pod family but right-sizing's empty (as the recorded path leaves them)."""
    empty = {f.name: getattr(sums, f.name).iloc[0:0] for f in fields(sums) if f.name in NOT_READ}
    return replace(sums, **empty)


def test_right_sizing_reads_seven_of_the_twelve_pod_families() -> None:
    assert set(POD_FAMILIES) - set(RIGHTSIZE_FAMILIES) == NOT_READ
    assert set(RIGHTSIZE_FAMILIES) <= set(POD_FAMILIES)


def test_right_sizing_from_its_own_families_is_the_whole_reports() -> None:
    sums, at_end = _fleet()
    report = build_history_report(assemble(sums, window=WINDOW, settings=SETTINGS, held_at_end=at_end))
    whole = rightsizing_of(report)
    table, packing = rightsizing_table(
        _rightsizing_families_alone(sums), settings=SETTINGS, window=WINDOW, held_at_end=at_end
    )
    own = rightsizing_from_tables(table, packing)
    assert own == whole  # every field of every row, their order, the savings and the packing, exactly
    # The report's rows hold what right-sizing does not read: its rows leave those columns out.
    assert any(w["idle_since"] for w in report["workloads"])
    assert all(tuple(r) == RIGHTSIZE_COLUMNS for r in own.rows())
    kinds = [(r["pod"], r["recommendation_kind"], r["recommendation_target"]) for r in own.rows()]
    # The changes first, by savings; equal savings (nb-1, inf-0: the same move over the same hours) and
    # every keep or unknown in the report's order, the most wasteful first.
    assert kinds == [
        ("inf-0", "product", L4),
        ("nb-1", "product", L4),
        ("train-1", "keep", None),
        ("l4-0", "keep", None),
        ("train-0", "keep", None),
        ("old-0", "unknown", None),
    ]
    assert [w["pod"] for w in report["workloads"]] == ["train-1", "l4-0", "inf-0", "train-0", "nb-1", "old-0"]
    # $4 − $0.80 an hour saved for the 36 of 60 h each held its GPU, over a 730-hour month.
    saved = (4.0 - 0.8) * 36 / 60 * 730
    assert [r["monthly_savings_usd"] for r in own.rows()] == pytest.approx([saved, saved, 0, 0, 0, None])
    # Held at the end: nb-1, train-0, train-1 and old-0 on 4 H100s, 3 once nb-1 moves to an L4 (a second).
    assert own.summary == {
        "monthly_savings_usd": pytest.approx(2 * saved),
        "gpus_freed": 0,
        "pools": [
            {"pool": H100, "gpus_before": 4, "gpus_after": 3, "gpus_freed": 1},
            {"pool": L4, "gpus_before": 1, "gpus_after": 2, "gpus_freed": -1},
        ],
    }


def test_without_knowing_who_held_gpus_at_the_end_there_is_no_packing() -> None:
    sums, _ = _fleet()
    report = build_history_report(assemble(sums, window=WINDOW, settings=SETTINGS))
    table, packing = rightsizing_table(
        _rightsizing_families_alone(sums), settings=SETTINGS, window=WINDOW, held_at_end=None
    )
    assert packing is None
    own = rightsizing_from_tables(table, packing)
    assert own == rightsizing_of(report)
    assert own.summary["gpus_freed"] is None and own.summary["pools"] == []
    assert own.summary["monthly_savings_usd"] > 0


def test_without_workload_rows_right_sizing_is_not_known() -> None:
    """No pod read (a summary's sums): no row, and no savings, never $0 saved."""
    sums, at_end = _fleet()
    none = replace(sums, **{name: getattr(sums, name).iloc[0:0] for name in POD_FAMILIES})
    own = rightsizing_from_tables(
        *rightsizing_table(none, settings=SETTINGS, window=WINDOW, held_at_end=at_end)
    )
    assert own.rows() == []
    assert own.summary["monthly_savings_usd"] is None
