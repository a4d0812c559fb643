"""The history path's arithmetic on hand-made query results: per-piece sample intervals, gaps, prices."""

import textwrap
from collections.abc import Callable, Sequence
from dataclasses import fields, replace
from datetime import UTC, datetime, timedelta
from typing import Any

import jsonschema
import pandas as pd
import pytest

from gpuwatch.core.config import Settings
from gpuwatch.core.errors import ConfigError
from gpuwatch.core.model import Budgets, DatedPrice, EnergyTariff, PriceBook, Window
from gpuwatch.read.history import merge_covered, price_cuts, wants_history
from gpuwatch.read.historypieces import gap_warnings
from gpuwatch.read.historytables import IDLE_FAMILIES, assemble, idle_workloads, workload_table
from gpuwatch.sources import historyqueries, ownseries
from gpuwatch.sources.historysums import HistorySums, pod_totals
from gpuwatch.sources.windowpieces import day_span, window_pieces
from gpuwatch.surfaces.renderings import render
from gpuwatch.surfaces.report import build_history_report, json_schema, workload_rows

POD = ("namespace", "pod", "team", "node", "pool")
LABELS = {
    "pool_states": ("pool", "state"),
    "team_states": ("team", "state"),
    "team_used": ("team",),
    "team_cost": ("team",),
    "team_idle_cost": ("team",),
    "team_power": ("team",),
    "team_energy_cost": ("team",),
    "pool_power": ("pool",),
    "pool_energy_cost": ("pool",),
    "pod_allocated": POD,
    "pod_idle": POD,
    "pod_used": POD,
    "pod_unknown": POD,
    "pod_last_allocated": POD,
    "pod_last_idle": POD,
    "pod_idle_since": POD,
    "pod_idle_held": POD,
    "pod_idle_abandoned": POD,
    "pod_power": POD,
    "pod_busy_p95": POD,
    "pod_memory_peak": POD,
    "fragmentation_sum": ("pool",),
    "fragmentation_count": ("pool",),
    "fragmented_sum": ("pool",),
    "free_sum": ("pool",),
    "price_sum": ("pool",),
    "price_count": ("pool",),
    "capacity_sum": ("node",),
    "reporting_sum": ("node",),
    "nodes_now": ("node", "pool"),
    "largest_free_block_now": ("pool",),
    "pending_now": ("namespace", "pod", "team", "pool", "blocked_by"),
    "pending_waiting_now": ("namespace", "pod", "team", "pool"),
    "pending_info_now": ("namespace", "pod", "team", "pool", *ownseries.PENDING_INFO_LABELS),
    "tainted_nodes_now": ("pool", "taint"),
    "pool_info_now": ("pool", "vendor"),
}
# 60 h: day 0 before gpuwatch was installed (no exporter cycle), day 1 at a 60 s cycle, then 12 h at 30 s.
WINDOW = Window(
    start=datetime(2026, 11, 17, tzinfo=UTC), end=datetime(2026, 11, 19, 12, tzinfo=UTC), step_seconds=60
)
SAMPLES = (0.0, 1440.0, 1440.0)
H100, L4, ACME = "NVIDIA-H100-80GB-HBM3", "NVIDIA-L4", "ACME-X1"
SETTINGS = Settings(
    pricing=PriceBook(default_usd_per_gpu_hour=2.0, products={L4: 0.8, H100: 3.0}),
    budgets=Budgets(monthly_usd={"llm": 20_000.0}),
)
IDLE_SINCE = datetime(2026, 11, 18, 23, 40, tzinfo=UTC)


def _sums(
    samples: Sequence[float] = SAMPLES, pieces: pd.DataFrame | None = None, **rows: list[tuple[Any, ...]]
) -> HistorySums:
    """HistorySums from rows (piece, *labels, value), or (*labels, value) for the *_now frames."""
    if pieces is None:
        pieces = window_pieces(WINDOW).assign(samples=list(samples))
    frames = {}
    for name, labels in LABELS.items():
        columns = [*labels, "value"]
        if not name.endswith("_now"):
            columns.insert(0, "piece")
        frames[name] = pd.DataFrame(rows.get(name, []), columns=columns).astype(
            {c: "str" for c in labels}
            | {"value": "float64"}
            | ({"piece": "int64"} if "piece" in columns else {})
        )
    return HistorySums(pieces=pieces, **frames, **pod_totals(frames))


def _pod_frames(sums: HistorySums) -> dict[str, pd.DataFrame]:
    return {f.name: getattr(sums, f.name) for f in fields(sums) if f.name.startswith("pod_")}


def _fleet() -> HistorySums:
    """8 H100s ($4 published), 4 L4s ($0.8 from the book, none published), 1 ACME (unknown: $2 default).

    Day 1 (1440 samples of 60 s): llm's train-0 holds 6 H100s, 2 free; the L4s are unavailable.
    Last 12 h (1440 samples of 30 s): llm's nb-0 holds 8 H100s idle; ds's nb-ds holds 1 L4, idle 10 of
    the 12 h and without telemetry (allocated_unknown) for the last 2; 1 L4 stranded, 2 free; the ACME
    node joins, free.
    A stray sample in day 0 (no exporter cycle to size it) counts nowhere.
    """
    ds_pod = ("ds", "nb-ds", "ds", "l4-a", L4)
    train = ("llm", "train-0", "llm", "h100-a", H100)
    nb = ("llm", "nb-0", "llm", "h100-a", H100)
    n = 1440
    return _sums(
        pool_states=[
            (0, H100, "allocated_active", 999.0),
            (1, H100, "allocated_active", 6 * n),
            (1, H100, "unallocated", 2 * n),
            (2, H100, "allocated_idle", 8 * n),
            (1, L4, "unavailable", 4 * n),
            (2, L4, "stranded", n),
            (2, L4, "unallocated", 2 * n),
            (2, L4, "allocated_idle", 1200.0),
            (2, L4, "allocated_unknown", 240.0),
            (2, ACME, "unallocated", n),
        ],
        team_states=[
            (1, "llm", "allocated_active", 6 * n),
            (2, "llm", "allocated_idle", 8 * n),
            (2, "ds", "allocated_idle", 1200.0),
            (2, "ds", "allocated_unknown", 240.0),
        ],
        team_used=[(1, "llm", 3 * n), (2, "ds", 0.0)],
        team_cost=[(1, "llm", 24.0 * n), (2, "llm", 32.0 * n), (2, "ds", 0.8 * n)],
        team_idle_cost=[(2, "llm", 32.0 * n), (2, "ds", 0.8 * 1200)],
        # llm's GPUs draw 2400 W on day 1, 800 W idle at the end (ds's L4 published no power); the pools'
        # every GPU: H100 2520 W then 800 W, the L4s 120 W at the end. Energy at 0.12 $/kWh × PUE 1.3.
        team_power=[(1, "llm", 2400.0 * n), (2, "llm", 800.0 * n)],
        team_energy_cost=[(1, "llm", 2400 * 0.156 / 1000 * n), (2, "llm", 800 * 0.156 / 1000 * n)],
        pool_power=[(1, H100, 2520.0 * n), (2, H100, 800.0 * n), (2, L4, 120.0 * n)],
        pool_energy_cost=[(1, H100, 2520 * 0.156 / 1000 * n), (2, H100, 0.1248 * n), (2, L4, 0.01872 * n)],
        pod_allocated=[(1, *train, 6 * n), (2, *nb, 8 * n), (2, *ds_pod, n)],
        pod_idle=[(1, *train, 0.0), (2, *nb, 8 * n), (2, *ds_pod, 1200.0)],
        pod_used=[(1, *train, 3 * n), (2, *ds_pod, 0.0)],
        pod_unknown=[(2, *ds_pod, 240.0)],
        # nb-0: 6 of its 8 idle GPUs keep a model in memory; nb-ds's framebuffer is known half the time.
        pod_idle_held=[(2, *nb, 6 * n), (2, *ds_pod, 600.0)],
        pod_idle_abandoned=[(2, *nb, 2 * n)],
        pod_last_allocated=[(1, *train, 6.0), (2, *nb, 8.0), (2, *ds_pod, 1.0)],
        pod_last_idle=[(1, *train, 0.0), (2, *nb, 8.0), (2, *ds_pod, 0.0)],
        # nb-ds was idle earlier in the piece (its last idle-since sample), not at its last sample.
        pod_idle_since=[(2, *nb, IDLE_SINCE.timestamp()), (2, *ds_pod, IDLE_SINCE.timestamp() - 600)],
        fragmentation_sum=[(1, H100, 0.5 * n), (2, H100, 0.0), (2, L4, 0.25 * n)],
        fragmentation_count=[(1, H100, n), (2, H100, n), (2, L4, n)],
        price_sum=[(1, H100, 4.0 * n), (2, H100, 4.0 * n)],
        price_count=[(1, H100, n), (2, H100, n)],
        capacity_sum=[(1, "h100-a", 8 * n), (2, "h100-a", 8 * n), (1, "l4-a", 4 * n), (2, "l4-a", 4 * n)],
        # A MIG node reports more units than it has GPUs: counted at most at capacity.
        reporting_sum=[(1, "h100-a", 7 * n), (2, "h100-a", 8 * n), (2, "l4-a", 9 * n)],
        nodes_now=[("h100-a", H100, 8.0), ("l4-a", L4, 4.0), ("acme-a", ACME, 1.0)],
        largest_free_block_now=[(H100, 0.0), (L4, 2.0), (ACME, 1.0)],
        pending_now=[
            ("llm", "big-0", "llm", H100, "capacity", 8.0),
            ("ds", "x-0", "ds", "", "capacity", 1.0),
        ],
        pending_waiting_now=[("llm", "big-0", "llm", H100, 600.0), ("ds", "x-0", "ds", "", 1200.0)],
    )


@pytest.fixture(scope="module")
def report() -> dict[str, Any]:
    return build_history_report(assemble(_fleet(), window=WINDOW, settings=SETTINGS))


def test_ledger_hours_use_each_pieces_sample_interval(report: dict[str, Any]) -> None:
    fleet = report["fleet"]
    assert fleet["ledger_gpu_hours"] == pytest.approx(
        {
            "unavailable": 96.0,  # 4 L4 x 24 h
            "stranded": 12.0,  # 1 L4 x 12 h
            "unallocated": 48.0 + 24.0 + 12.0,
            "allocated_unknown": 2.0,
            "allocated_idle": 96.0 + 10.0,
            "allocated_active": 144.0,
        }
    )
    assert fleet["capacity_gpu_hours"] == pytest.approx(8 * 36 + 4 * 36 + 12)
    assert fleet["gpus"] == 13
    assert fleet["allocated_gpu_hours"] == pytest.approx(240.0 + 12.0)
    assert fleet["used_gpu_hours"] == pytest.approx(72.0)
    # Published H100 price $4 (not the book's $3); L4 from the book; ACME at the default.
    assert fleet["cost_usd"] == pytest.approx(240 * 4.0 + 12 * 0.8)
    assert fleet["waste_usd"] == pytest.approx(96 * 4.0 + 10 * 0.8)
    assert fleet["unallocated_cost_usd"] == pytest.approx(48 * 4.0 + 24 * 0.8 + 12 * 2.0)
    assert fleet["stranded_cost_usd"] == pytest.approx(12 * 0.8)


def test_teams_from_team_series_and_pods_from_pod_series(report: dict[str, Any]) -> None:
    teams = {t["team"]: t for t in report["teams"]}
    assert [t["team"] for t in report["teams"]] == ["llm", "ds"]  # by waste
    assert teams["llm"] == pytest.approx(
        {
            "team": "llm",
            "allocated_gpu_hours": 240.0,
            "used_gpu_hours": 72.0,
            "idle_gpu_hours": 96.0,
            "unknown_gpu_hours": 0.0,
            "efficiency": 0.3,
            "cost_usd": 24.0 * 24 + 32.0 * 12,
            "waste_usd": 32.0 * 12,
            "pods": 2,
            "budget_usd": 20_000.0,
            # $960 over the window's 60 h, straight on over November's 720 h.
            "forecast_month_usd": 960.0 / 60 * 720,
            # 6 of nb-0's 8 idle GPUs for 12 h held a model, 2 were near empty.
            "held_idle_gpu_hours": 72.0,
            "abandoned_idle_gpu_hours": 24.0,
            # 2400 W for 24 h and 800 W for 12 h: 57.6 + 9.6 kWh, × 0.156 $/kWh.
            "energy_kwh": 67.2,
            "energy_cost_usd": 67.2 * 0.156,
        }
    )
    # Half of ds's idle hours have no framebuffer reading: neither held nor abandoned is known.
    assert teams["ds"]["held_idle_gpu_hours"] is None
    assert teams["ds"]["abandoned_idle_gpu_hours"] is None
    assert teams["ds"]["budget_usd"] is None
    # ds's power was never published: its energy is unknown, never 0.
    assert teams["ds"]["energy_kwh"] is None and teams["ds"]["energy_cost_usd"] is None
    fleet = report["fleet"]
    assert fleet["energy_kwh"] == pytest.approx((2520 * 24 + 920 * 12) / 1000)
    assert fleet["energy_cost_usd"] == pytest.approx(fleet["energy_kwh"] * 0.156)
    assert fleet["unallocated_energy_kwh"] == pytest.approx(fleet["energy_kwh"] - 67.2)
    assert teams["ds"]["forecast_month_usd"] == pytest.approx(12 * 0.8 / 60 * 720)
    # 10 h idle (known, 0 used) and 2 h without telemetry: unknown hours are apart from idle ones.
    assert teams["ds"]["efficiency"] == 0.0
    assert teams["ds"]["unknown_gpu_hours"] == pytest.approx(2.0)
    assert teams["ds"]["idle_gpu_hours"] == pytest.approx(10.0)
    assert teams["ds"]["allocated_gpu_hours"] == pytest.approx(12.0)
    assert teams["ds"]["waste_usd"] == pytest.approx(8.0)
    namespaces = {n["namespace"]: n for n in report["namespaces"]}
    assert namespaces["llm"]["cost_usd"] == pytest.approx(240 * 4.0)
    assert namespaces["ds"]["cost_usd"] == pytest.approx(12 * 0.8)


def test_workloads_last_values_and_idle_since(report: dict[str, Any]) -> None:
    pods = {w["pod"]: w for w in report["workloads"]}
    assert pods["nb-0"]["idle_since"] == "2026-11-18T23:40:00Z"  # every GE idle at its last sample
    assert pods["nb-0"]["gpus"] == 8.0 and pods["nb-0"]["waste_usd"] == pytest.approx(96 * 4.0)
    assert pods["nb-ds"]["idle_since"] is None  # unknown at its last sample: not idle
    assert pods["nb-ds"]["idle_gpu_hours"] == pytest.approx(10.0)
    assert pods["nb-ds"]["unknown_gpu_hours"] == pytest.approx(2.0)
    assert pods["train-0"]["gpus"] == 6.0 and pods["train-0"]["used_gpu_hours"] == pytest.approx(72.0)
    assert pods["train-0"]["idle_since"] is None


def _without(sums: HistorySums, *families: str) -> HistorySums:
    """sums with the per-pod `families` emptied (as a view that has not read them holds them)."""
    return replace(sums, **{f: getattr(sums, f).iloc[0:0] for f in families})


def test_idle_workloads_from_the_idle_families_alone(report: dict[str, Any]) -> None:
    """The idle pods' rows from their families and the last allocations, nothing else: the report's."""
    sums = _without(_fleet(), "pod_allocated", "pod_used", "pod_unknown")
    rows = workload_rows(idle_workloads(sums, settings=SETTINGS))
    assert [w["pod"] for w in rows] == ["nb-0", "nb-ds"]  # train-0 was never idle
    whole = {w["pod"]: w for w in report["workloads"]}
    for row in rows:
        assert row == {k: pytest.approx(whole[row["pod"]][k]) for k in row}
    assert rows[0]["idle_since"] == "2026-11-18T23:40:00Z" and rows[0]["waste_usd"] == pytest.approx(384.0)
    assert (rows[0]["held_idle_gpu_hours"], rows[0]["abandoned_idle_gpu_hours"]) == (72.0, 24.0)
    assert (rows[1]["held_idle_gpu_hours"], rows[1]["abandoned_idle_gpu_hours"]) == (None, None)
    assert set(IDLE_FAMILIES) == {
        "pod_idle",
        "pod_last_allocated",
        "pod_last_idle",
        "pod_idle_since",
        "pod_idle_held",
        "pod_idle_abandoned",
    }


def test_the_summary_needs_the_sums_per_namespace_not_the_pods(report: dict[str, Any]) -> None:
    """With only the pods' sums per namespace and pool and their count (what Prometheus sums for a
    summary), the teams' pods, the namespaces and the pools' utilization are the whole report's."""
    pods = ("pod_allocated", "pod_idle", "pod_used", "pod_unknown", "pod_last_allocated", "pod_last_idle")
    summary = build_history_report(
        assemble(_without(_fleet(), *pods, "pod_idle_since"), window=WINDOW, settings=SETTINGS)
    )
    assert summary["workloads"] == []
    for section in ("teams", "namespaces", "pools"):
        assert summary[section] == [pytest.approx(row) for row in report[section]], section
    assert [(n["namespace"], n["pods"]) for n in summary["namespaces"]] == [("llm", 2), ("ds", 1)]


def test_pods_left_out_of_the_idle_and_unknown_families_count_as_zero(report: dict[str, Any]) -> None:
    """The reader asks Prometheus for those families' non-zero pods only: the report is the same."""
    fleet = _fleet()

    def nonzero(frame: pd.DataFrame) -> pd.DataFrame:
        return frame[frame["value"] > 0].reset_index(drop=True)

    thinned = replace(
        fleet,
        pod_idle=nonzero(fleet.pod_idle),
        pod_unknown=nonzero(fleet.pod_unknown),
        pod_last_idle=nonzero(fleet.pod_last_idle),
    )
    assert len(thinned.pod_idle) < len(fleet.pod_idle)
    assert len(thinned.pod_last_idle) < len(fleet.pod_last_idle)
    assert build_history_report(assemble(thinned, window=WINDOW, settings=SETTINGS)) == report


def test_pools_time_averages_and_latest_values(report: dict[str, Any]) -> None:
    pools = {p["pool"]: p for p in report["pools"]}
    # 0.5 for 24 h, then 0 for 12 h: a time average, not the per-sample mean 0.25.
    assert pools[H100]["fragmentation_ratio"] == pytest.approx(1 / 3)
    assert pools[L4]["fragmentation_ratio"] == pytest.approx(0.25)
    assert pools[ACME]["fragmentation_ratio"] is None
    assert pools[H100]["allocation_rate"] == pytest.approx(240 / 288)
    assert pools[H100]["utilization"] == pytest.approx(72 / 288)
    assert (pools[L4]["nodes"], pools[L4]["gpus"], pools[L4]["largest_free_block"]) == (1, 4, 2.0)
    assert pools[L4]["stranded_gpu_hours"] == pytest.approx(12.0)


def test_coverage_pending_and_warnings(report: dict[str, Any]) -> None:
    coverage = report["coverage"]
    # GPU-hours of capacity less the unavailable ones (4 L4s for 24 h), in 60 s samples.
    assert coverage["gpu_samples_expected"] == (8 * 36 + 4 * 36 - 4 * 24) * 60
    assert coverage["gpu_samples_present"] == (7 * 24 + 8 * 12 + 4 * 12) * 60  # 93 %: no warning
    warnings = coverage["warnings"]
    assert not any(w.startswith("telemetry covers") for w in warnings)
    assert warnings[0] == (
        "no gpuwatch_* samples from 2026-11-17T00:00:00Z to 2026-11-18T00:00:00Z (24 h): "
        "those hours are in no sum of this report"
    )
    assert "unknown product ACME-X1 priced at default $2.00/GPU-hour" in warnings
    assert any(w.startswith("history path:") for w in warnings)
    assert [p["pod"] for p in report["pending"]] == ["x-0", "big-0"]
    assert report["pending"][0]["pool"] == ""
    jsonschema.validate(report, json_schema())


def test_a_pod_seen_under_two_label_sets_is_one_workload() -> None:
    n = 1440
    moved = ("llm", "job-0", "llm", "h100-b", H100)
    before = ("llm", "job-0", "llm", "h100-a", H100)
    sums = _sums(
        pod_allocated=[(1, *before, 2 * n), (2, *moved, 2 * n)],
        pod_idle=[(1, *before, 0.0), (2, *moved, n)],
        pod_last_allocated=[(1, *before, 2.0), (2, *moved, 2.0)],
        pod_last_idle=[(1, *before, 0.0), (2, *moved, 2.0)],
        pod_idle_since=[(2, *moved, IDLE_SINCE.timestamp())],
    )
    history = assemble(sums, window=WINDOW, settings=SETTINGS)
    (row,) = history.tables["workload"].to_dict("records")
    assert row["node"] == "h100-b"
    assert row["allocated_gpu_hours"] == pytest.approx(48.0 + 24.0)
    assert row["idle_gpu_hours"] == pytest.approx(12.0)  # 1 of its 2 GE idle for the last 12 h
    assert row["idle_since"] == pd.Timestamp(IDLE_SINCE)
    assert history.sample_seconds == pytest.approx(129_600 / 2880)


def test_a_team_without_telemetry_has_unknown_hours_and_efficiency_and_a_coverage_warning() -> None:
    n = 1440
    dark = ("ml", "dark-0", "ml", "h100-a", H100)
    sums = _sums(
        pool_states=[(1, H100, "allocated_unknown", 8 * n)],
        team_states=[(1, "ml", "allocated_unknown", 8 * n)],
        team_cost=[(1, "ml", 24.0 * n)],
        pod_allocated=[(1, *dark, 8 * n)],
        pod_unknown=[(1, *dark, 8 * n)],
        pod_last_allocated=[(1, *dark, 8.0)],
        pod_last_idle=[(1, *dark, 0.0)],
        capacity_sum=[(1, "h100-a", 8 * n)],
        nodes_now=[("h100-a", H100, 8.0)],
    )
    report = build_history_report(assemble(sums, window=WINDOW, settings=SETTINGS))
    (team,) = report["teams"]
    # No utilization ever published: used is unknown, so efficiency is null (shown as 0 GPU-hours used).
    assert team["efficiency"] is None and team["unknown_gpu_hours"] == pytest.approx(192.0)
    assert team["idle_gpu_hours"] == 0.0 and team["waste_usd"] == 0.0
    assert report["fleet"]["ledger_gpu_hours"]["allocated_unknown"] == pytest.approx(192.0)
    assert report["fleet"]["ledger_gpu_hours"]["allocated_active"] == 0.0
    assert report["coverage"]["warnings"][0] == (
        "telemetry covers only 0.0% of the window (0 of 11,520 GPU-samples present): allocated GPU-hours "
        "without telemetry are counted allocated_unknown, never active or idle"
    )


def test_nothing_but_empty_frames_is_a_report() -> None:
    report = build_history_report(assemble(_sums(), window=WINDOW, settings=SETTINGS))
    jsonschema.validate(report, json_schema())
    assert report["fleet"]["capacity_gpu_hours"] == 0.0
    assert report["teams"] == report["workloads"] == report["pools"] == []


def _halves(window: Window, change: datetime) -> pd.DataFrame:
    """A day's pieces cut at `change` (noon): two of 720 samples of 60 s."""
    return pd.DataFrame(
        {
            "piece": [0, 1],
            "end": pd.to_datetime([change, window.end], utc=True),
            "seconds": [43_200.0, 43_200.0],
            "samples": [720.0, 720.0],
        }
    )


def test_a_workloads_and_namespaces_energy_is_priced_at_the_tariff_of_each_piece() -> None:
    """A day cut where the tariff goes from $0.10 to $0.20 per kWh at 12:00 (PUE 1.5): two pieces of 720
    samples of 60 s. Pod a's share of its GPUs draws 400 W in the morning and 200 W in the afternoon;
    pod b has no power reading at all (its energy unknown, never 0)."""
    change = datetime(2026, 11, 17, 12, tzinfo=UTC)
    window = Window(start=WINDOW.start, end=WINDOW.start + timedelta(days=1), step_seconds=60)
    tariff = EnergyTariff(usd_per_kwh=((None, 0.10), (change, 0.20)), pue=1.5)
    settings = Settings(pricing=PriceBook(products={H100: 4.0}, energy=tariff))
    assert price_cuts(settings, window) == (change,)
    pieces = _halves(window, change)
    a, b = ("ml", "a", "ml", "n1", H100), ("ml", "b", "ml", "n1", H100)
    n = 720
    sums = _sums(
        pieces=pieces,
        pool_states=[(k, H100, "allocated_active", 2 * n) for k in (0, 1)],
        pod_allocated=[(k, *p, n) for k in (0, 1) for p in (a, b)],
        pod_last_allocated=[(1, *a, 1.0), (1, *b, 1.0)],
        pod_power=[(0, *a, 400.0 * n), (1, *a, 200.0 * n)],
    )
    report = build_history_report(assemble(sums, window=window, settings=settings))
    workloads = {w["pod"]: w for w in report["workloads"]}
    # 400 W × 12 h = 4.8 kWh at 1.5 × $0.10, then 200 W × 12 h = 2.4 kWh at 1.5 × $0.20.
    assert workloads["a"]["energy_kwh"] == pytest.approx(4.8 + 2.4)
    assert workloads["a"]["energy_cost_usd"] == pytest.approx(4.8 * 1.5 * 0.10 + 2.4 * 1.5 * 0.20)
    assert workloads["b"]["energy_kwh"] is None and workloads["b"]["energy_cost_usd"] is None
    (namespace,) = report["namespaces"]
    assert namespace["energy_kwh"] == pytest.approx(7.2)
    assert namespace["energy_cost_usd"] == pytest.approx(1.44)
    # Recording rules older than the pods' power roll-ups: the GPUs' power is there in the morning but no
    # pod's. No namespace's or workload's energy is whole: unknown, and said.
    sums = replace(sums, pool_power=pd.DataFrame({"piece": [0, 1], "pool": [H100] * 2, "value": [1.0] * 2}))
    old_rules = replace(sums, pod_power=sums.pod_power[sums.pod_power["piece"] == 1])
    old_rules = replace(old_rules, **pod_totals(_pod_frames(old_rules)))
    stale = build_history_report(assemble(old_rules, window=window, settings=settings))
    assert stale["namespaces"][0]["energy_kwh"] is None
    assert all(w["energy_kwh"] is None and w["energy_cost_usd"] is None for w in stale["workloads"])
    assert any("recording rules older" in w for w in stale["coverage"]["warnings"])
    whole = build_history_report(assemble(sums, window=window, settings=settings))
    assert whole["namespaces"][0]["energy_kwh"] == pytest.approx(7.2)
    assert not any("recording rules older" in w for w in whole["coverage"]["warnings"])
    # Without a tariff the energy is measured and its cost unknown.
    unpriced = build_history_report(assemble(sums, window=window, settings=Settings()))
    assert unpriced["namespaces"][0]["energy_kwh"] == pytest.approx(7.2)
    assert unpriced["namespaces"][0]["energy_cost_usd"] is None


def test_a_price_change_inside_the_window_prices_each_piece_at_its_rate() -> None:
    """A day cut at a price change at 12:00 (read_pieces(cuts=price_cuts())): two pieces of 720 samples
    of 60 s. ACME publishes no price (the book's: $3 until 12:00, $2 after); the H100 publishes $4 in the
    morning and $5 in the afternoon. Pod a holds 2 ACME GPUs all day, idle in the afternoon; pod h holds
    1 H100 all day, idle in the morning."""
    change = datetime(2026, 11, 17, 12, tzinfo=UTC)
    window = Window(start=WINDOW.start, end=WINDOW.start + timedelta(days=1), step_seconds=60)
    dated = (
        DatedPrice(start=WINDOW.start, usd_per_gpu_hour=3.0),
        DatedPrice(start=change, usd_per_gpu_hour=2.0),
    )
    settings = Settings(pricing=PriceBook(products={ACME: dated}))
    assert price_cuts(settings, window) == (change,)
    pieces = _halves(window, change)
    a, h = ("ml", "a", "ml", "n1", ACME), ("ml", "h", "ml", "n2", H100)
    n = 720
    sums = _sums(
        pieces=pieces,
        pool_states=[
            (0, ACME, "allocated_active", 2 * n),
            (1, ACME, "allocated_idle", 2 * n),
            (0, H100, "allocated_idle", n),
            (1, H100, "allocated_active", n),
        ],
        team_states=[(0, "ml", "allocated_active", 2 * n), (1, "ml", "allocated_idle", 2 * n)],
        pod_allocated=[(0, *a, 2 * n), (1, *a, 2 * n), (0, *h, n), (1, *h, n)],
        pod_idle=[(1, *a, 2 * n), (0, *h, n)],
        pod_last_allocated=[(1, *a, 2.0), (1, *h, 1.0)],
        price_sum=[(0, H100, 4.0 * n), (1, H100, 5.0 * n)],
        price_count=[(0, H100, n), (1, H100, n)],
    )
    history = assemble(sums, window=window, settings=settings)
    report = build_history_report(history)
    # Each pool's dollars per ledger state (the Waste page's ledger in dollars).
    pools = history.tables["pool"].set_index("pool")
    assert pools.loc[ACME, "allocated_active_usd"] == pytest.approx(2 * 12 * 3.0)
    assert pools.loc[ACME, "allocated_idle_usd"] == pytest.approx(2 * 12 * 2.0)
    assert pools.loc[H100, "allocated_idle_usd"] == pytest.approx(12 * 4.0)
    assert pools.loc[H100, "allocated_active_usd"] == pytest.approx(12 * 5.0)
    assert pools.loc[H100, "unallocated_usd"] == 0.0
    workloads = {w["pod"]: w for w in report["workloads"]}
    costs = workload_table(sums, settings=settings).set_index("pod")["cost_usd"]
    # a: 24 GPU-h at $3 and 24 at $2; idle only in the afternoon, at $2.
    assert costs["a"] == pytest.approx(24 * 3.0 + 24 * 2.0)
    assert workloads["a"]["waste_usd"] == pytest.approx(24 * 2.0)
    # h: 12 GPU-h at the published $4, 12 at $5; idle in the morning, at $4.
    assert costs["h"] == pytest.approx(12 * 4.0 + 12 * 5.0)
    assert workloads["h"]["waste_usd"] == pytest.approx(12 * 4.0)
    idle = idle_workloads(sums, settings=settings).set_index("pod")["waste_usd"]
    assert idle.to_dict() == pytest.approx({"a": 48.0, "h": 48.0})
    (namespace,) = report["namespaces"]
    assert namespace["cost_usd"] == pytest.approx(120.0 + 108.0)
    assert namespace["waste_usd"] == pytest.approx(48.0 + 48.0)
    assert report["fleet"]["cost_usd"] == pytest.approx(228.0)
    assert report["fleet"]["waste_usd"] == pytest.approx(96.0)
    # The pool's price shown: the one published in its last piece, else the book's at the window's end
    # (as the raw path quotes the price in force at the end).
    assert {p["pool"]: p["usd_per_gpu_hour"] for p in report["pools"]} == {ACME: 2.0, H100: 5.0}
    assert not any("changes at" in w for w in report["coverage"]["warnings"])


def test_right_sizing_takes_each_workloads_busiest_piece_and_packs_those_held_at_the_end() -> None:
    """Four 1-GPU H100 workloads (published $4/GPU-hour) over the 60 h window: day 1 is 1440 samples of
    60 s, the last 12 h 1440 of 30 s. nb-1 runs both pieces with p95 0.1 then 0.22 busy GE and peak
    memory 12 then 15 GiB; inf-0 the last piece alone, done-0 day 1 alone, both at 0.22 and 15 GiB;
    old-0's day-1 hours had telemetry but no p95 roll-up (rules loaded later)."""
    gib = 1024.0**3
    nb, inf, done, old = (("ml", pod, "ml", "h100-a", H100) for pod in ("nb-1", "inf-0", "done-0", "old-0"))
    n = 1440
    sums = _sums(
        pod_allocated=[(1, *nb, n), (2, *nb, n), (2, *inf, n), (1, *done, n), (1, *old, n), (2, *old, n)],
        pod_used=[(p, *w, 0.1 * n) for p, w in ((1, nb), (2, nb), (2, inf), (1, done))]
        + [(p, *old, 0.0) for p in (1, 2)],
        pod_last_allocated=[(2, *nb, 1.0), (2, *inf, 1.0), (1, *done, 1.0), (2, *old, 1.0)],
        pod_busy_p95=[(1, *nb, 0.1), (2, *nb, 0.22), (2, *inf, 0.22), (1, *done, 0.22), (2, *old, 0.0)],
        pod_memory_peak=[(1, *nb, 12 * gib)]
        + [(p, *w, 15 * gib) for p, w in ((2, nb), (2, inf), (1, done))]
        + [(p, *old, gib) for p in (1, 2)],
        price_sum=[(2, H100, 4.0 * n)],
        price_count=[(2, H100, n)],
        nodes_now=[("h100-a", H100, 8.0)],
    )
    settings = Settings(pricing=PriceBook(default_usd_per_gpu_hour=2.0, products={H100: 3.0}))
    at_end = {("ml", "nb-1"), ("ml", "inf-0"), ("ml", "old-0")}
    report = build_history_report(assemble(sums, window=WINDOW, settings=settings, held_at_end=at_end))
    recommendation = {w["pod"]: w["recommendation"] for w in report["workloads"]}
    # Need: 0.22 × 1.2 = 0.264 GE (over a 1/4 time slice, within 2/7) and 15 × 1.2 = 18 GiB (≤ 20):
    # 2g.20gb at 2/7 × $4 instead of $4, for the share of the window each held its GPU: nb-1 36 of
    # 60 h, inf-0 12, done-0 24.
    saved_per_hour = 4.0 - 2 / 7 * 4.0
    for pod, held_hours in (("nb-1", 36.0), ("inf-0", 12.0), ("done-0", 24.0)):
        assert recommendation[pod]["kind"] == "mig"
        assert recommendation[pod]["target"] == "2g.20gb"
        assert recommendation[pod]["monthly_savings_usd"] == pytest.approx(
            saved_per_hour * held_hours / 60 * 730
        )
    assert recommendation["old-0"]["kind"] == "unknown"
    assert recommendation["old-0"]["monthly_savings_usd"] is None
    assert recommendation["old-0"]["reason"] == "p95 compute is unknown"
    assert any("1 workload(s) without a p95" in w for w in report["coverage"]["warnings"])
    rightsizing = report["rightsizing"]
    assert rightsizing["monthly_savings_usd"] == pytest.approx(saved_per_hour * 72 / 60 * 730)
    # Held at the end: nb-1, inf-0 and old-0 on 3 GPUs; after, old-0's 1 + 2/7 + 2/7 fit 2 (done-0 ended).
    assert rightsizing["pools"] == [{"pool": H100, "gpus_before": 3, "gpus_after": 2, "gpus_freed": 1}]
    assert rightsizing["gpus_freed"] == 1
    # Without knowing who held GPUs at the end there is no packing, only the savings.
    unpacked = build_history_report(assemble(sums, window=WINDOW, settings=settings))["rightsizing"]
    assert unpacked["gpus_freed"] is None
    assert unpacked["monthly_savings_usd"] == pytest.approx(rightsizing["monthly_savings_usd"])


def test_table_names_the_path() -> None:
    report = build_history_report(assemble(_fleet(), window=WINDOW, settings=SETTINGS))
    text = render(report, "table", source="history (gpuwatch_* series)").decode()
    assert text.splitlines()[1] == "source: history (gpuwatch_* series)"


def test_window_pieces() -> None:
    pieces = window_pieces(WINDOW)
    assert pieces["seconds"].tolist() == [86_400.0, 86_400.0, 43_200.0]
    assert pieces["end"].tolist() == [
        pd.Timestamp("2026-11-18T00:00Z"),
        pd.Timestamp("2026-11-19T00:00Z"),
        pd.Timestamp("2026-11-19T12:00Z"),
    ]
    assert window_pieces(WINDOW, piece_seconds=216_000)["seconds"].tolist() == [216_000.0]


def test_covered_rollup_pieces_are_read_as_one() -> None:
    """Seven pieces: raw head, a day of hourly roll-ups, four daily roll-ups, raw tail. Days 2-3 are covered
    alike (288 samples of 300 s) and read as one; the hourly day, covered as well, is another level's
    query and stays apart; day 4 lacks half its samples and day 5 has none: they stay apart, as do the
    raw ends."""
    day = 86_400.0
    pieces = pd.DataFrame(
        {
            "piece": range(7),
            "end": pd.to_datetime([f"2026-11-{d:02d}T00:00Z" for d in range(14, 21)]),
            "seconds": [1_800.0, day, day, day, day, day, 900.0],
            "grid_seconds": [300, 60, 60, 60, 60, 60, 300],
            "rollup": ["", "hour", "day", "day", "day", "day", ""],
            "resolution_seconds": [300, 300, 300, 300, 300, 300, 300],
            "samples": [6.0, 288.0, 288.0, 288.0, 144.0, 0.0, 3.0],
        }
    )
    merged = merge_covered(pieces, covered_ratio=0.99)
    assert merged["piece"].tolist() == [0, 1, 2, 3, 4, 5]
    assert merged["rollup"].tolist() == ["", "hour", "day", "day", "day", ""]
    assert merged["seconds"].tolist() == [1_800.0, day, 2 * day, day, day, 900.0]
    assert merged["samples"].tolist() == [6.0, 288.0, 576.0, 144.0, 0.0, 3.0]
    assert merged["end"].tolist()[2] == pd.Timestamp("2026-11-17T00:00Z")
    assert merged.dtypes.to_dict() == pieces.dtypes.to_dict()


def test_two_clusters_pieces_are_merged_and_their_gaps_named_apart() -> None:
    """Two clusters' days of daily roll-ups, one after the other (ClustersHistory's merged pieces): each
    cluster's covered days read as one, never joined with the other's; eu-1's missing day is its gap."""
    day = 86_400.0
    pieces = pd.DataFrame(
        {
            "piece": range(4),
            "end": pd.to_datetime(["2026-11-15T00:00Z", "2026-11-16T00:00Z"] * 2),
            "seconds": [day] * 4,
            "grid_seconds": [60] * 4,
            "rollup": ["day"] * 4,
            "resolution_seconds": [300] * 4,
            "samples": [288.0, 288.0, 288.0, 0.0],
            "cluster": ["us-1", "us-1", "eu-1", "eu-1"],
        }
    )
    merged = merge_covered(pieces, covered_ratio=0.99)
    assert merged["cluster"].tolist() == ["us-1", "eu-1", "eu-1"]
    assert merged["samples"].tolist() == [576.0, 288.0, 0.0]
    assert gap_warnings(merged) == [
        "cluster eu-1: no gpuwatch_* samples from 2026-11-15T00:00:00Z to 2026-11-16T00:00:00Z (24 h): "
        "those hours are in no sum of this report"
    ]


def _utc(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


@pytest.mark.parametrize(
    ("first", "last", "evaluated", "expected"),
    [
        # Hours on :00, days at 23:30 (the simulated backfill): days end at 23:00.
        (
            "2026-11-16T15:00",
            "2026-11-19T21:00",
            "2026-11-18T23:30",
            ("2026-11-16T23:00", "2026-11-18T23:00"),
        ),
        # Prometheus phases each group by a hash of its name: hours at :17, days at 07:13, so a day sums the
        # hours evaluated up to 06:43, the last of them at 06:17.
        (
            "2026-11-10T00:17",
            "2026-11-19T23:17",
            "2026-11-19T07:13",
            ("2026-11-10T06:17", "2026-11-19T06:17"),
        ),
        # The day evaluated 30 min after an hour sums it (the lag leaves it in).
        (
            "2026-11-10T00:00",
            "2026-11-19T23:00",
            "2026-11-19T05:30",
            ("2026-11-10T05:00", "2026-11-19T05:00"),
        ),
        # Days evaluated after the hourly roll-ups stopped: only those whose hours all came before.
        (
            "2026-11-10T00:00",
            "2026-11-15T00:00",
            "2026-11-19T23:30",
            ("2026-11-10T23:00", "2026-11-14T23:00"),
        ),
        # Not one whole day among the hours.
        ("2026-11-19T01:00", "2026-11-19T23:00", "2026-11-19T23:30", None),
    ],
)
def test_the_days_a_window_reads_from_the_daily_rollups(
    first: str, last: str, evaluated: str, expected: tuple[str, str] | None
) -> None:
    span = day_span(_utc(first), _utc(last), _utc(evaluated))
    assert span == (None if expected is None else (_utc(expected[0]), _utc(expected[1])))


@pytest.mark.parametrize(
    ("source", "costly", "demo", "expected"),
    [
        ("auto", False, False, False),
        ("auto", True, False, True),
        ("auto", True, True, False),
        ("history", False, False, True),
        ("raw", True, False, False),
    ],
)
def test_wants_history(source: str, costly: bool, demo: bool, expected: bool) -> None:
    assert wants_history(source, demo=demo, costly=lambda: costly) is expected


def test_history_of_the_demo_is_a_usage_error() -> None:
    with pytest.raises(ConfigError, match="--source raw"):
        wants_history("history", demo=True)


QUERIES: list[tuple[Callable[..., str], dict[str, Any], str]] = [
    (
        historyqueries.exporter_samples_query,
        {"resolution_seconds": 60},
        "count_over_time((max (avg_over_time(gpuwatch_build_info[59999ms])))[86399999ms:60s])",
    ),
    (
        historyqueries.pool_state_gpus_sum_query,
        {"resolution_seconds": 60},
        "sum_over_time((max by (pool, state) (avg_over_time(gpuwatch_pool_gpus[59999ms])))[86399999ms:60s])",
    ),
    (
        historyqueries.team_state_gpus_sum_query,
        {"resolution_seconds": 60},
        "sum_over_time((max by (team, state) (avg_over_time(gpuwatch_team_gpus[59999ms])))[86399999ms:60s])",
    ),
    (
        historyqueries.team_used_gpus_sum_query,
        {"resolution_seconds": 60},
        "sum_over_time((max by (team) (avg_over_time(gpuwatch_team_used_gpus[59999ms])))[86399999ms:60s])",
    ),
    (
        historyqueries.team_cost_sum_query,
        {"resolution_seconds": 60},
        "sum_over_time(\n"
        "  (\n"
        "    max by (team) (avg_over_time(gpuwatch_team_cost_usd_per_hour[59999ms]))\n"
        "  )[86399999ms:60s]\n"
        ")",
    ),
    (
        historyqueries.pod_gpus_sum_query,
        {"metric": "gpuwatch_pod_gpu_allocation", "resolution_seconds": 60},
        "sum by (\n"
        "  namespace, pod, team, node, pool\n"
        ") (\n"
        "  sum_over_time(\n"
        "    (\n"
        "      max by (\n"
        "        namespace, pod, team, node, pool, resource\n"
        "      ) (\n"
        "        avg_over_time(gpuwatch_pod_gpu_allocation[59999ms])\n"
        "      )\n"
        "    )[86399999ms:60s]\n"
        "  )\n"
        ")",
    ),
    (
        historyqueries.pod_gpus_last_query,
        {"metric": "gpuwatch_pod_gpu_allocation", "resolution_seconds": 60},
        "sum by (\n"
        "  namespace, pod, team, node, pool\n"
        ") (\n"
        "  last_over_time(\n"
        "    (\n"
        "      max by (\n"
        "        namespace, pod, team, node, pool, resource\n"
        "      ) (\n"
        "        last_over_time(gpuwatch_pod_gpu_allocation[59999ms])\n"
        "      )\n"
        "    )[86399999ms:60s]\n"
        "  )\n"
        ")",
    ),
    (
        historyqueries.pod_idle_since_last_query,
        {"resolution_seconds": 60},
        "last_over_time(\n"
        "  (\n"
        "    max by (\n"
        "      namespace, pod, team, node, pool\n"
        "    ) (\n"
        "      last_over_time(gpuwatch_pod_gpu_idle_since_timestamp_seconds[59999ms])\n"
        "    )\n"
        "  )[86399999ms:60s]\n"
        ")",
    ),
    (
        historyqueries.pod_need_query,
        {"metric": "gpuwatch_pod_gpu_used", "resolution_seconds": 60},
        "quantile_over_time(0.95,\n"
        "  (\n"
        "    max by (namespace, pod, team, node, pool) (avg_over_time(gpuwatch_pod_gpu_used[59999ms]))\n"
        "  )[86399999ms:60s]\n"
        ")",
    ),
    (
        historyqueries.pool_sum_query,
        {"metric": "gpuwatch_pool_fragmentation_ratio", "resolution_seconds": 60},
        "sum_over_time(\n"
        "  (\n"
        "    max by (pool) (avg_over_time(gpuwatch_pool_fragmentation_ratio[59999ms]))\n"
        "  )[86399999ms:60s]\n"
        ")",
    ),
    (
        historyqueries.node_sum_query,
        {"metric": "gpuwatch_node_gpu_capacity", "resolution_seconds": 60},
        "sum by (\n"
        "  node\n"
        ") (\n"
        "  sum_over_time(\n"
        "    (\n"
        "      max by (node, pool) (avg_over_time(gpuwatch_node_gpu_capacity[59999ms]))\n"
        "    )[86399999ms:60s]\n"
        "  )\n"
        ")",
    ),
]
LATEST = [
    (historyqueries.node_capacity_latest_query, "max by (node, pool) (gpuwatch_node_gpu_capacity)"),
    (historyqueries.largest_free_block_latest_query, "max by (pool) (gpuwatch_pool_largest_free_block_gpus)"),
    (
        historyqueries.pending_pod_gpus_latest_query,
        "max by (namespace, pod, team, pool, blocked_by) (gpuwatch_pending_pod_gpus)",
    ),
    (
        historyqueries.pending_pod_waiting_latest_query,
        "max by (namespace, pod, team, pool) (gpuwatch_pending_pod_waiting_seconds)",
    ),
]


def _shown(builder: Callable[..., str]) -> str:
    doc = (builder.__doc__ or "").split("\n", 1)[1]
    return textwrap.dedent(doc.split("::\n", 1)[1] if "::\n" in doc else doc).strip()


@pytest.mark.parametrize(("builder", "kwargs", "query"), QUERIES, ids=lambda x: getattr(x, "__name__", ""))
def test_history_queries_exact_and_in_their_docstrings(
    builder: Callable[..., str], kwargs: dict[str, Any], query: str
) -> None:
    assert builder(**kwargs, range_seconds=86_400) == query
    assert _shown(builder).startswith(query)


@pytest.mark.parametrize(("builder", "query"), LATEST, ids=lambda x: getattr(x, "__name__", ""))
def test_latest_queries_exact_and_in_their_docstrings(builder: Callable[[], str], query: str) -> None:
    assert builder() == query
    assert _shown(builder) == query


def test_other_query_variants_and_ranges() -> None:
    assert historyqueries.team_cost_sum_query(range_seconds=43_200.5, resolution_seconds=30, idle=True) == (
        "sum_over_time(\n  (\n"
        "    max by (team) (avg_over_time(gpuwatch_team_idle_cost_usd_per_hour[29999ms]))\n"
        "  )[43200499ms:30s]\n)"
    )
    assert historyqueries.pool_sum_query(
        "gpuwatch_pool_price_usd_per_gpu_hour", range_seconds=60, resolution_seconds=15, count=True
    ) == (
        "count_over_time(\n  (\n"
        "    max by (pool) (avg_over_time(gpuwatch_pool_price_usd_per_gpu_hour[14999ms]))\n"
        "  )[59999ms:15s]\n)"
    )
    for builder in (historyqueries.pod_gpus_sum_query, historyqueries.pod_gpus_last_query):
        query = builder("gpuwatch_pod_gpu_idle", range_seconds=3600, resolution_seconds=60, rollup="hour")
        nonzero = builder(
            "gpuwatch_pod_gpu_idle", range_seconds=3600, resolution_seconds=60, rollup="hour", nonzero=True
        )
        assert nonzero == "(\n" + textwrap.indent(query, "  ") + "\n) > 0"
    with pytest.raises(ConfigError):
        historyqueries.pod_gpus_sum_query(
            'gpuwatch_pod_gpu_allocation{a="b"}', range_seconds=60, resolution_seconds=60
        )
    with pytest.raises(ConfigError):
        historyqueries.pool_state_gpus_sum_query(range_seconds=60, resolution_seconds=0)
    with pytest.raises(ConfigError):
        ownseries.range_duration(0)
